"""A regime profile other than ``regime`` (issue 68's ground): ``regimes: FILE`` beside its
``like`` judges the like profile's empirical claims in that file's regimes, adopting the
like profile's committed jobs from ``results/<like>``, and checks every job fits its device
before training, as a plain profile does."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from suite.cli import main
from suite.errors import ConfigError
from suite.reproduce.regime_runs import regime_setup
from suite.reproduce.spec import load_spec
from tests.test_regime_profile import SPEC, overrides

REGIMES = {
    "regimes": {
        "drawn": {"text": "the ground's data, a draw per seed", "override": {}},
        "longtail": {
            "text": "Zipf 0.8 ids",
            "override": {"dataset": {"options": {"zipf": 0.8}}},
        },
    }
}


@pytest.fixture
def spec(tmp_path: Path) -> str:
    """The regime tests' tiny spec with a ``ground`` profile (a draw per seed) and a
    ``ground-regime`` profile like it over its own regimes file."""
    data = copy.deepcopy(SPEC)
    ground = copy.deepcopy(data["profiles"]["standard"])
    ground["base"]["dataset"]["options"]["draw"] = "per_seed"
    regimes = tmp_path / "regimes.tiny.yaml"
    regimes.write_text(yaml.safe_dump(REGIMES, sort_keys=False))
    data["profiles"]["ground"] = ground
    data["profiles"]["ground-regime"] = {"like": "ground", "regimes": str(regimes)}
    path = tmp_path / "specs" / "tiny.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def reproduce(spec: str, profile: str, out: str, tmp_path: Path) -> int:
    uri = overrides(tmp_path)["tracking"]["uri"]
    args = ["reproduce", "--profile", profile, "--paper", spec, "--out", out, "--quiet"]
    return main([*args, "--workers", "1", "--set", "tracking.enabled=false", "--tracking-uri", uri])


def test_a_second_regime_profile_judges_its_like_profile_in_its_regimes(
    spec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # results/<like> is read from the working directory
    setup = regime_setup("ground-regime", [spec])
    assert setup is not None and setup.like == "ground"
    assert setup.adopt_from == Path("results/ground")
    assert regime_setup("ground", [spec]) is None and regime_setup("regime", [spec]) is not None

    assert reproduce(spec, "ground", "results/ground", tmp_path) == 0
    assert reproduce(spec, "ground-regime", "results/ground-regime", tmp_path) == 0
    report = Path("results/ground-regime/REPORT.md").read_text()
    assert report.startswith("# Reproduction report: `ground-regime` profile")
    assert "Regimes are declared in `suite/reproductions/regimes.tiny.yaml`" in report
    assert "Each spec's `ground-regime` profile is its `ground` profile" in report
    costs = report.split("## Cost", 1)[1]
    assert "adopted from results/ground this time" in costs
    drawn = next(line for line in costs.splitlines() if line.startswith("| drawn "))
    assert drawn.split("|")[3].strip() == "4"  # full and hash_4 x two seeds, from the ground
    longtail = next(line for line in costs.splitlines() if line.startswith("| longtail "))
    assert longtail.split("|")[3].strip() == "0"  # another config: trained here


def test_a_regime_profile_checks_every_job_fits_before_training(
    spec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RECSUITE_DEVICE_MEMORY", "1MiB")
    assert reproduce(spec, "ground-regime", "out", tmp_path) == 2
    err = capsys.readouterr().err
    assert "device: job" in err and "nothing was trained" in err
    assert not (tmp_path / "out" / "runs").exists()


def test_regimes_without_like_is_refused_in_one_line(tmp_path: Path) -> None:
    data = copy.deepcopy(SPEC)
    data["profiles"]["lonely"] = {"regimes": "regimes.yaml"}
    path = tmp_path / "lonely.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ConfigError, match=r"regimes: 'regimes.yaml' makes a regime profile.*like"):
        load_spec(path)


def test_the_ground_profiles_judge_the_claims_of_the_profiles_they_replace() -> None:
    """Each ground profile (issue 68) judges exactly the claims of the profile it is to
    replace, plus DHE's ablation of the regularised baseline, and tunes every run that
    profile tuned (lowprec's model too), full tables included wherever they are compared."""
    from suite.reproduce.plan import selected_claims
    from suite.reproduce.spec import list_specs

    pairs = {"standard": "ground", "regime": "ground-regime", "curve": "ground-curve"}
    for name in list_specs():
        spec = load_spec(name)
        for old, new in pairs.items():
            if old not in spec.profiles:
                assert new not in spec.profiles, (name, new)
                continue
            claims = {p: {c.id for c in selected_claims(spec, p, None)} for p in (old, new)}
            extra = {"full-regularised-ablation"} if (name, new) == ("dhe", "ground") else set()
            assert claims[new] == claims[old] | extra, (name, new)
            before, after = spec.profiles[old].tuning, spec.profiles[new].tuning
            if before is not None:
                assert after is not None and set(before.runs) <= set(after.runs), (name, new)
                assert after.n_trials >= 2.5 * (after.startup_trials or 10)
                assert after.run_seed not in spec.profiles[new].seeds
                assert {"train.embedding_l2", "train.weight_decay"} <= set(after.space)


def test_every_tuned_run_of_the_ground_has_its_committed_values() -> None:
    """The ground's tuning is complete (issue 68): every run the ground profile tunes, in
    every spec, has committed values its tuning block still asks for as they are (the same
    space, 15 trials, sampler seed, trial seed and pruning), which `--tune` would keep and
    `suite reproduce --profile ground` trains with; each reached a real best validation AUC
    over a study whose top three trials it reports."""
    from suite.reproduce.spec import list_specs
    from suite.reproduce.tuning import kept_entries

    tuned = 0
    for name in list_specs():
        spec = load_spec(name)
        profile = spec.profiles.get("ground")
        if profile is None or profile.tuning is None:
            continue
        kept = kept_entries(spec, "ground")
        assert set(kept) == set(profile.tuning.runs), (name, set(profile.tuning.runs) - set(kept))
        for run_id, entry in kept.items():
            assert entry.trials == 15 and entry.run_seed == 100, (name, run_id)
            assert 0.6 < entry.best_val_auc < 1.0 and entry.top3_val_auc_spread is not None
        tuned += len(kept)
    assert tuned >= 25  # nine specs (checknrun tunes nothing), full tables in each
