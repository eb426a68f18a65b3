"""The regime profile: runs x regimes x seeds as ordinary jobs, resumed without redoing
finished ones, adopted from the standard profile's results, and the verdict across regimes."""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from suite.errors import ConfigError
from suite.reproduce.claims import ClaimOutcome
from suite.reproduce.outcome import PaperOutcome, Reproduction
from suite.reproduce.plan import ReproductionPlan, build_plan, run_config
from suite.reproduce.regime_report import across_counts, render_regime_report, verdict_rows
from suite.reproduce.regime_runs import (
    PROFILE,
    Regime,
    RegimeOutcome,
    across,
    load_regimes,
    plan_text,
    regime_jobs,
    regime_plans,
    reproduce_regimes,
)
from suite.reproduce.runner import reproduce
from suite.reproduce.spec import TUNED_ENV, list_specs, load_spec
from suite.reproduce.store import RUNS_DIR, read_noise, read_result, write_noise
from suite.results import ARRAYS_DETAIL
from suite.stats import Interval
from tests.conftest import TINY_DATA, tracking_uri

BASE = {
    "dataset": {"name": "criteo-synth", "options": dict(TINY_DATA)},
    "model": {"name": "dlrm"},
    "train": {"batch_size": 128, "max_steps": 6, "threads": 1, "progress": False},
}
REGIMES = {
    "today": Regime(text="as the standard profile"),
    "longtail": Regime(text="Zipf 0.8 ids", override={"dataset": {"options": {"zipf": 0.8}}}),
}
SPEC = {
    "paper": "tiny",
    "title": "A tiny reproduction with a regime profile",
    "profiles": {
        "quick": {"base": BASE, "seeds": [0, 1]},
        "standard": {"base": BASE, "seeds": [0, 1], "note": "standard"},
        PROFILE: {"like": "standard"},
    },
    "runs": {
        "full": {"embedding": {"name": "full", "options": {"dim": 8}}},
        "hash_4": {"embedding": {"name": "hash", "options": {"dim": 8, "ratio": 4}}},
        "hash_8": {"embedding": {"name": "hash", "options": {"dim": 8, "ratio": 8}}},
    },
    "claims": [
        {
            "id": "hash-keeps-auc",
            "text": "hashing at 1/4 stays within 0.001 AUC of full",
            "kind": "within",
            "left": "hash_4.test_auc",
            "right": "full.test_auc",
            "margin": 0.001,
            "form": "equivalence",
            "quote": "the paper's words",
        },
        {  # structural: the regime profile leaves it (and its run hash_8) out
            "id": "hash-8-bytes",
            "basis": "structural",
            "text": "t",
            "kind": "less",
            "left": "hash_8.embedding_bytes",
            "right": "full.embedding_bytes",
        },
    ],
}


@pytest.fixture
def spec(tmp_path: Path) -> str:
    path = tmp_path / "specs" / "tiny.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(SPEC, sort_keys=False))
    return str(path)


def overrides(tmp_path: Path) -> dict[str, Any]:
    """Tracking off: MLflow would take most of these tests' seconds."""
    return {"tracking": {"enabled": False, "uri": tracking_uri(tmp_path)}}


def test_shipped_regimes_and_regime_profiles_load() -> None:
    from suite.reproduce.regime_runs import empirical_claim_ids

    regimes = load_regimes()
    assert list(regimes)[0] == "today" and regimes["today"].override == {}
    assert regimes["kaggle"].override["dataset"]["options"]["regime"] == "kaggle"
    assert regimes["longtail"].override["dataset"]["options"]["zipf"] < 1.1
    assert "regimes" not in list_specs()
    for name in ("qr", "mixed_dim", "fiited", "lowprec", "alpt", "robe"):
        spec = load_spec(name)
        standard, regime = spec.profiles["standard"], spec.profiles[PROFILE]
        assert (regime.base, regime.seeds, regime.runs) == (
            standard.base,
            standard.seeds,
            standard.runs,
        )
        assert regime.tuning is None and regime.like == "standard"
        assert regime.families == standard.families
    fiited = empirical_claim_ids(["fiited"], None)
    assert "fiited-beats-adaembed-auc" in fiited  # AdaEmbed, FIITED's comparator, with it


def test_a_like_profile_trains_with_the_standard_tuned_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: str
) -> None:
    data = yaml.safe_load(Path(spec).read_text())
    space = {"train.sparse_lr": {"type": "float", "low": 0.005, "high": 0.5, "log": True}}
    data["profiles"]["standard"]["tuning"] = {"n_trials": 2, "space": space, "runs": {"full": {}}}
    Path(spec).write_text(yaml.safe_dump(data))
    monkeypatch.setenv(TUNED_ENV, str(tmp_path / "tuned"))
    entry = {"values": {"train.sparse_lr": 0.123}, "study": "s", "trials": 2}
    entry |= {"best_val_auc": 0.7, "sampler_seed": 0, "workers": 1, "commit": "c", "command": "x"}
    tuned = {"paper": "tiny", "profile": "standard", "runs": {"full": entry}}
    (tmp_path / "tuned").mkdir()
    (tmp_path / "tuned" / "tiny.standard.yaml").write_text(yaml.safe_dump(tuned))
    loaded = load_spec(spec)
    assert run_config(loaded, PROFILE, "full", {}).train.sparse_lr == 0.123
    assert run_config(loaded, PROFILE, "full", {}) == run_config(loaded, "standard", "full", {})


def test_runs_x_regimes_x_seeds_expand_into_distinct_jobs_with_the_same_seeds(
    tmp_path: Path, spec: str
) -> None:
    regimes = {**REGIMES, "kaggle": load_regimes()["kaggle"]}
    jobs = regime_jobs([spec], None, overrides(tmp_path), regimes)
    assert list(jobs) == ["today", "longtail", "kaggle"]
    keys = {name: {j.key for j in js} for name, js in jobs.items()}
    assert all(len(k) == 2 for k in keys.values())  # full and hash_4; hash_8 is structural only
    assert not (keys["today"] & keys["longtail"] or keys["today"] & keys["kaggle"])
    assert all(sorted(j.seed for j in js) == [0, 0, 1, 1] for js in jobs.values())
    longtail = {j.config.dataset.options["zipf"] for j in jobs["longtail"]}
    assert longtail == {0.8}
    kaggle = jobs["kaggle"][0].config.dataset.options
    assert (kaggle["regime"], kaggle["train_rows"]) == ("kaggle", 1_000_000)
    # today's jobs are the standard profile's own: same config hash, so adoptable
    standard = load_spec(spec)
    today = {
        run_config(standard, "standard", r, overrides(tmp_path)).config_hash()
        for r in ("full", "hash_4")
    }
    assert keys["today"] == today


def test_regime_run_adopts_standard_jobs_resumes_and_regenerates(tmp_path: Path, spec: str) -> None:
    std, out = tmp_path / "standard", tmp_path / "regime"
    plan = build_plan("standard", [spec], ["hash-keeps-auc"], overrides(tmp_path))
    reproduce(plan, std, workers=1, progress=False)
    run = {"progress": False, "report_dir": out, "workers": 1}  # spawned workers take seconds
    first = reproduce_regimes([spec], None, overrides(tmp_path), REGIMES, std, **run)
    assert [(r.name, r.jobs, r.adopted) for r in first] == [("today", 4, 4), ("longtail", 4, 0)]
    files = sorted((out / RUNS_DIR).glob("*/seed-*.json"))
    assert len(files) == 8
    for path in (std / RUNS_DIR).glob("*/seed-*.json"):  # adopted as stored, not retrained
        assert (out / RUNS_DIR / path.parent.name / path.name).read_text() == path.read_text()
    stamps = {p: p.stat().st_mtime_ns for p in files}

    again = reproduce_regimes([spec], None, overrides(tmp_path), REGIMES, std, **run)
    assert [r.adopted for r in again] == [0, 0]
    assert {p: p.stat().st_mtime_ns for p in files} == stamps  # nothing redone

    # the printed plan counts what a resume would train: a stored job whose logits are gone
    # (another machine) trains again where its pair's test-set noise is not stored
    plans = regime_plans([spec], None, overrides(tmp_path), REGIMES)
    assert [len(p.noise_pairs()) for p in plans.values()] == [1, 1]
    plan = plan_text(plans, out, std)
    assert all(", 0 to train," in line for line in plan), plan
    longtail = {j.key for j in plans["longtail"].jobs}
    for job in plans["longtail"].jobs:
        Path(read_result(out, job.key, job.config).details[ARRAYS_DETAIL]["file"]).unlink()
    assert all(", 0 to train," in line for line in plan_text(plans, out, std))
    judged = read_noise(out)
    write_noise(out, {k: v for k, v in judged.items() if k[0] not in longtail})
    today, tail = plan_text(plans, out, std)
    assert ", 0 to train," in today
    assert "4 jobs, 0 stored or adopted, 4 to train (4 of them stored, their logits" in tail
    write_noise(out, judged)
    regenerated = reproduce_regimes(
        [spec], None, overrides(tmp_path), REGIMES, None, **run, from_results=out
    )
    for a, b in zip(first, regenerated, strict=True):
        (ca,), (cb,) = a.reproduction.papers[0].claims, b.reproduction.papers[0].claims
        assert (ca.claim.id, ca.verdict, ca.difference) == (cb.claim.id, cb.verdict, cb.difference)
    report = render_regime_report(regenerated, [], "suite reproduce --profile regime", out)
    assert "| today" in report and "| longtail" in report and "across regimes" in report
    assert "hash-8-bytes" not in report and "hash_8" not in report

    # checked in, the regime's results leave out the jobs adopted from the standard's:
    # regenerating reads those (and their noise) from the standard's directory
    for path in (std / RUNS_DIR).glob("*/seed-*.json"):
        (out / RUNS_DIR / path.parent.name / path.name).unlink()
    with pytest.raises(ConfigError, match="no stored result"):
        reproduce_regimes([spec], None, overrides(tmp_path), REGIMES, None, **run, from_results=out)
    from_both = reproduce_regimes(
        [spec], None, overrides(tmp_path), REGIMES, std, **run, from_results=out
    )
    for a, b in zip(first, from_both, strict=True):
        (ca,), (cb,) = a.reproduction.papers[0].claims, b.reproduction.papers[0].claims
        assert (ca.verdict, ca.difference, ca.noise) == (cb.verdict, cb.difference, cb.noise)

    # today's jobs are adopted from the standard's directory: with their logits gone, the
    # plan counts them to train once no directory stores their pair's noise
    for job in plans["today"].jobs:
        Path(read_result(std, job.key, job.config).details[ARRAYS_DETAIL]["file"]).unlink()
    assert ", 0 to train," in plan_text(plans, out, std)[0]
    write_noise(std, {})
    assert "4 jobs, 0 stored or adopted, 4 to train (4 of them" in plan_text(plans, out, std)[0]


def outcome(claim_id: str, verdict: str, mean: float) -> ClaimOutcome:
    spec = load_spec("qr")
    claim = next(c for c in spec.claims if c.id == claim_id)
    ci = Interval(mean, mean - 0.001, mean + 0.001, 10)
    return ClaimOutcome(claim, verdict, ci, ci, ci, 0.01)


def regime_outcome(name: str, verdicts: dict[str, tuple[str, float]]) -> RegimeOutcome:
    claims = [outcome(cid, v, m) for cid, (v, m) in verdicts.items()]
    paper = PaperOutcome(load_spec("qr"), PROFILE, {}, claims)
    return RegimeOutcome(name, Regime(text=name), Reproduction(qr_plan(), [paper], [0]), 0)


@functools.cache
def qr_plan() -> ReproductionPlan:
    return build_plan(PROFILE, ["qr"])


def test_the_across_column_on_constructed_verdicts() -> None:
    assert across({"a": "holds", "b": "holds", "c": "holds"}) == "holds in every regime"
    assert across({"a": "does not hold", "b": "does not hold"}) == "does not hold in every regime"
    assert across({"a": "holds", "b": "does not hold"}) == "changes (a: holds; b: does not hold)"
    assert across({"a": "holds", "b": "underpowered", "c": "not measurable"}) == (
        "not decided in b, c"
    )
    assert across({"a": "holds", "b": "does not hold", "c": "underpowered"}) == (
        "changes (a: holds; b: does not hold); not decided in c"
    )
    outcomes = [
        regime_outcome(
            "today", {"qr-above-hash-2": ("holds", 0.004), "qr-above-hash-4": ("holds", 0.003)}
        ),
        regime_outcome(
            "kaggle",
            {"qr-above-hash-2": ("holds", 0.002), "qr-above-hash-4": ("does not hold", -0.002)},
        ),
        regime_outcome(
            "longtail",
            {"qr-above-hash-2": ("holds", 0.005), "qr-above-hash-4": ("underpowered", 0.0)},
        ),
    ]
    rows = verdict_rows(outcomes)
    assert [r["across regimes"] for r in rows] == [
        "holds in every regime",
        "changes (today: holds; kaggle: does not hold); not decided in longtail",
    ]
    assert rows[0]["kaggle"].startswith("**holds**: 0.0020 [0.0010, 0.0030]")
    assert across_counts(outcomes) == {"holds in every regime": 1, "changes": 1}
    assert not math.isnan(outcomes[0].reproduction.papers[0].claims[0].difference.mean)


def test_a_report_of_some_claims_names_the_ones_it_leaves_out() -> None:
    from suite.reproduce.regime_report import not_in_report
    from suite.reproduce.regime_runs import empirical_claim_ids

    outcomes = [regime_outcome(n, {"qr-above-hash-2": ("holds", 0.002)}) for n in ("a", "b")]
    every = empirical_claim_ids(None, None)
    (text, blank) = not_in_report(outcomes)
    assert blank == "" and f"{len(every) - 1} of the profile's {len(every)}" in text
    assert "`qr-above-hash-4`" in text and "`qr-above-hash-2`" not in text


def test_the_checked_in_regime_report_judges_every_empirical_compression_claim() -> None:
    """Issue 38's table: every empirical claim the regime profile judges is a row of the
    committed results/regime/REPORT.md (a claim added to a spec without its regime runs
    fails here until they are trained and the report regenerated)."""
    from suite.reproduce.regime_runs import empirical_claim_ids

    report = (Path(__file__).resolve().parents[1] / "results" / "regime" / "REPORT.md").read_text()
    texts = {c.id: c.text for s in list_specs() for c in load_spec(s).claims}
    every = empirical_claim_ids(None, None)
    assert f"**{len(every)} empirical claims across 3 regimes" in report
    assert "Not in this report" not in report
    rows = [line for line in report.splitlines() if line.startswith("| ")]
    for claim in every:
        assert any(f"| {texts[claim]} " in row or f" {texts[claim]} |" in row for row in rows), (
            claim
        )
