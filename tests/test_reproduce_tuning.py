"""Reproductions tuned with the same budget per method: the tuning block, ``--tune``, the
tuned file beside the spec and the runs that train with its values."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from suite.cli import main
from suite.errors import ConfigError
from suite.reproduce.plan import run_config
from suite.reproduce.spec import TUNED_ENV, list_specs, load_spec
from suite.reproduce.tuned import read_tuned, tuned_path
from tests.conftest import TINY_DATA, tracking_uri

BASE = {
    "dataset": {"name": "criteo-synth", "options": dict(TINY_DATA)},
    "model": {"name": "dlrm"},
    "train": {"batch_size": 128, "max_steps": 8, "threads": 1, "progress": False},
}
SPACE = {
    "train.sparse_lr": {"type": "float", "low": 0.005, "high": 0.5, "log": True},
    "train.dense_lr": {"type": "float", "low": 1.0e-4, "high": 1.0e-2, "log": True},
}
OPERATION = {"embedding.options.operation": {"type": "categorical", "choices": ["mult", "add"]}}
TUNING = {
    "n_trials": 2,
    "space": SPACE,
    "runs": {"full": {}, "qr_4": OPERATION},
    "share": {"qr_2": "qr_4"},
    "seed": 0,
}


def spec_data(tuning: dict[str, Any] | None = TUNING) -> dict[str, Any]:
    """A tiny spec: an untuned ``quick`` profile and a ``standard`` one with ``tuning``."""
    standard: dict[str, Any] = {"base": BASE, "seeds": [3, 4]}
    if tuning is not None:
        standard["tuning"] = copy.deepcopy(tuning)
    qr = {"name": "qr", "options": {"dim": 8, "collisions": 4, "operation": "mult"}}
    qr_2 = copy.deepcopy(qr)
    qr_2["options"]["collisions"] = 2
    return {
        "paper": "tiny",
        "title": "A tiny tuned reproduction",
        "profiles": {"quick": {"base": BASE, "seeds": [0, 1]}, "standard": standard},
        "runs": {
            "full": {"embedding": {"name": "full", "options": {"dim": 8}}},
            "qr_4": {"embedding": qr},
            "qr_2": {"embedding": qr_2},
        },
        "claims": [
            {
                "id": "c",
                "text": "t",
                "kind": "greater",
                "left": "qr_4.test_auc",
                "right": 0.5,
                "form": "superiority",
                "quote": "q",
            }
        ],
    }


def write_spec(directory: Path, data: dict[str, Any], name: str = "tiny.yaml") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def tuned_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Tuned files go under tmp_path, never into the repository's spec folder."""
    monkeypatch.setenv(TUNED_ENV, str(tmp_path / "tuned"))
    return tmp_path / "tuned"


def tune(spec: Path, tmp_path: Path, storage: str, *extra: str) -> int:
    db = tmp_path / storage / "optuna.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    args = ["reproduce", "--profile", "standard", "--paper", str(spec), "--tune", "--quiet"]
    args += list(extra)
    return main([*args, "--tracking-uri", tracking_uri(tmp_path), "--storage", f"sqlite:///{db}"])


def inside(dist: dict[str, Any], value: Any) -> bool:
    if dist["type"] == "categorical":
        return value in dist["choices"]
    return dist["low"] <= value <= dist["high"]


@pytest.mark.slow
def test_tune_writes_values_runs_train_with_them_and_a_rerun_picks_the_same(
    tmp_path: Path, tuned_dir: Path
) -> None:
    spec_path = write_spec(tmp_path / "specs", spec_data())
    spec = load_spec(spec_path)
    quick = {r: run_config(spec, "quick", r, {}).config_hash() for r in spec.run_ids("quick")}
    with pytest.raises(ConfigError, match=r"tiny\.standard\.yaml does not exist.*--tune"):
        run_config(spec, "standard", "qr_4", {})  # tuned profile, not tuned yet: no silent run

    assert tune(spec_path, tmp_path, "a") == 0
    tuned = read_tuned("tiny", "standard")
    assert set(tuned.runs) == {"full", "qr_4"}
    assert {e.trials for e in tuned.runs.values()} == {2}  # the same budget for each
    for run_id, entry in tuned.runs.items():
        space = {**SPACE, **(OPERATION if run_id == "qr_4" else {})}
        assert set(entry.values) == set(space)
        assert all(inside(space[k], v) for k, v in entry.values.items()), entry.values
        assert 0.0 < entry.best_val_auc < 1.0 and entry.sampler_seed == 0
        assert entry.study == f"tune.tiny.standard.{run_id}"
        assert (
            entry.command.endswith("--tune --workers 1") and "--profile standard" in entry.command
        )

    qr_values = tuned.runs["qr_4"].values
    for run_id in ("qr_4", "qr_2"):  # qr_2 shares qr_4's values
        config = run_config(spec, "standard", run_id, {})
        assert config.train.sparse_lr == qr_values["train.sparse_lr"]
        assert config.train.dense_lr == qr_values["train.dense_lr"]
        assert config.embedding.options["operation"] == qr_values["embedding.options.operation"]
    assert run_config(spec, "standard", "qr_2", {}).embedding.options["collisions"] == 2
    full = run_config(spec, "standard", "full", {})
    assert full.train.sparse_lr == tuned.runs["full"].values["train.sparse_lr"]
    assert {r: run_config(spec, "quick", r, {}).config_hash() for r in quick} == quick

    first = tuned_path("tiny", "standard").read_text()
    assert tune(spec_path, tmp_path, "b", "--retune") == 0  # fresh studies, another storage
    assert tuned_path("tiny", "standard").read_text() == first  # same values, same AUCs

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri(tmp_path))
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert runs and all(r.info.status == "FINISHED" for r in runs)
    trials = [r for r in runs if r.data.tags.get("suite.study") == "tune.tiny.standard.qr_4"]
    assert len(trials) == 4  # two trials in each of the two studies


def trial_runs(tmp_path: Path) -> dict[str, int]:
    """MLflow trial runs per tuning study in the test's store."""
    from collections import Counter

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri(tmp_path))
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    return dict(Counter(r.data.tags["suite.study"] for r in runs if "suite.study" in r.data.tags))


def test_a_second_tune_keeps_the_entries_the_block_still_asks_for_and_tunes_the_rest(
    tmp_path: Path, tuned_dir: Path
) -> None:
    one = copy.deepcopy(TUNING) | {"n_trials": 1, "runs": {"full": {}}, "share": {}}
    spec_path = write_spec(tmp_path / "specs", spec_data(one))
    assert tune(spec_path, tmp_path, "a") == 0
    first = read_tuned("tiny", "standard").runs["full"]
    assert trial_runs(tmp_path) == {"tune.tiny.standard.full": 1}

    # a method joins the tuned profile: only its study runs, full's entry is kept as it was
    two = one | {"runs": {"full": {}, "qr_4": OPERATION}}
    write_spec(tmp_path / "specs", spec_data(two))
    assert tune(spec_path, tmp_path, "b") == 0
    tuned = read_tuned("tiny", "standard")
    assert list(tuned.runs) == ["full", "qr_4"] and tuned.runs["full"] == first
    assert trial_runs(tmp_path) == {"tune.tiny.standard.full": 1, "tune.tiny.standard.qr_4": 1}

    # full's space changes: full is tuned again, qr_4 kept
    batch = {"train.batch_size": {"type": "categorical", "choices": [64, 128]}}
    wider = copy.deepcopy(two) | {"runs": {"full": batch, "qr_4": OPERATION}}
    write_spec(tmp_path / "specs", spec_data(wider))
    assert tune(spec_path, tmp_path, "c") == 0
    assert trial_runs(tmp_path) == {"tune.tiny.standard.full": 2, "tune.tiny.standard.qr_4": 1}
    assert "train.batch_size" in read_tuned("tiny", "standard").runs["full"].values

    # --retune: both again
    assert tune(spec_path, tmp_path, "d", "--retune") == 0
    assert trial_runs(tmp_path) == {"tune.tiny.standard.full": 3, "tune.tiny.standard.qr_4": 2}


def test_a_tune_that_stops_partway_keeps_the_studies_it_finished(
    tmp_path: Path, tuned_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import suite.studies.coordinator as coordinator

    real_run_study = coordinator.run_study

    def stopped_at_qr_4(study: Any, *args: Any, **kwargs: Any) -> Any:
        if study.name.endswith(".qr_4"):
            raise KeyboardInterrupt  # the machine went away during qr_4's study
        return real_run_study(study, *args, **kwargs)

    data = copy.deepcopy(TUNING) | {"n_trials": 1, "share": {}}
    spec_path = write_spec(tmp_path / "specs", spec_data(data))
    monkeypatch.setattr(coordinator, "run_study", stopped_at_qr_4)
    assert tune(spec_path, tmp_path, "a") != 0  # the CLI reports the interruption
    assert list(read_tuned("tiny", "standard").runs) == ["full"]

    monkeypatch.setattr(coordinator, "run_study", real_run_study)
    assert tune(spec_path, tmp_path, "b") == 0
    assert list(read_tuned("tiny", "standard").runs) == ["full", "qr_4"]
    assert trial_runs(tmp_path) == {"tune.tiny.standard.full": 1, "tune.tiny.standard.qr_4": 1}


def test_retune_without_tune_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["reproduce", "--profile", "standard", "--retune"]) != 0
    assert "--retune: only with --tune" in capsys.readouterr().err
    assert main(["reproduce", "--profile", "standard", "--storage", "sqlite:///x.db"]) != 0
    assert "--storage: only with --tune" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags",
    [["--plan"], ["--from-results"], ["--claim", "c", "--out", "x"], ["--rerun", "a/b"]],
)
def test_tune_refuses_the_flags_it_would_ignore(
    flags: list[str], tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--tune --plan`` once started hours of studies instead of printing a plan."""
    monkeypatch.chdir(tmp_path)
    assert main(["reproduce", "--profile", "standard", "--tune", *flags]) == 2
    err = capsys.readouterr().err
    named = [f for f in flags if f.startswith("--")]
    assert f"{', '.join(named)}: not with --tune" in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())  # nothing tuned, nothing written


def test_an_untuned_profile_is_unchanged_by_a_tuning_block(tmp_path: Path) -> None:
    plain = load_spec(write_spec(tmp_path / "a", spec_data(tuning=None)))
    tuned = load_spec(write_spec(tmp_path / "b", spec_data()))
    for run_id in plain.run_ids("quick"):
        before = run_config(plain, "quick", run_id, {})
        after = run_config(tuned, "quick", run_id, {})
        assert after == before and after.config_hash() == before.config_hash()


def test_the_suite_specs_load_and_tuned_files_are_not_specs(tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    write_spec(specs, spec_data())
    write_spec(specs / "tuned", {"paper": "tiny", "profile": "standard", "runs": {}}, "x.y.yaml")
    assert list_specs(specs) == ["tiny"]
    for name in list_specs():
        load_spec(name)


def test_a_stale_tuned_file_is_an_error_naming_it(tmp_path: Path, tuned_dir: Path) -> None:
    spec = load_spec(write_spec(tmp_path, spec_data()))
    entry = {
        "values": {"train.sparse_lr": 0.05, "train.dense_lr": 0.001},
        "study": "s",
        "trials": 2,
        "best_val_auc": 0.7,
        "sampler_seed": 0,
        "workers": 1,
        "commit": "abc",
        "command": "suite reproduce --tune",
    }
    qr_4 = {**entry, "values": {**entry["values"], "embedding.options.operation": "add"}}
    data = {"paper": "tiny", "profile": "standard", "runs": {"full": entry, "qr_4": qr_4}}
    write_spec(tuned_dir, data, "tiny.standard.yaml")
    assert run_config(spec, "standard", "qr_2", {}).embedding.options["operation"] == "add"
    data["runs"]["qr_4"] = entry  # tuned before operation joined the space
    write_spec(tuned_dir, data, "tiny.standard.yaml")
    with pytest.raises(ConfigError, match=r"tiny\.standard\.yaml: run 'qr_4' was tuned over"):
        run_config(spec, "standard", "qr_4", {})
    data["runs"]["qr_4"] = {**qr_4, "values": {**qr_4["values"], "train.sparse_lr": 9.0}}
    write_spec(tuned_dir, data, "tiny.standard.yaml")
    with pytest.raises(ConfigError, match=r"values\.train\.sparse_lr: 9\.0 is outside"):
        run_config(spec, "standard", "qr_2", {})


BAD = [
    (
        {"runs": {"full": {}, "qr_4": {}, "qr_8": {}}},
        r"profiles\.standard\.tuning\.runs: unknown run 'qr_8'",
    ),
    ({"share": {"qr_3": "qr_4"}}, r"profiles\.standard\.tuning\.share: unknown run 'qr_3'"),
    ({"share": {"qr_2": "full_2"}}, r"share\.qr_2: 'full_2' is not a tuned run"),
    ({"share": {"full": "qr_4"}}, r"share\.full: 'full' is tuned itself"),
    (
        {"space": {**SPACE, "train.sparse_lrr": SPACE["train.sparse_lr"]}},
        r"tuning\.runs\.full: .*train\.sparse_lrr: unknown key",
    ),
    (
        {
            "runs": {
                "full": {},
                "qr_4": {"embedding.options.operatio": OPERATION[next(iter(OPERATION))]},
            }
        },
        r"tuning\.runs\.qr_4: .*operatio",
    ),
    ({"space": {"lr": SPACE["train.sparse_lr"]}}, r"space: .*'lr' is not a dotted config key"),
    ({"n_trials": 0}, r"tuning\.n_trials: .*greater than or equal to 1"),
]


@pytest.mark.parametrize(("change", "message"), BAD)
def test_a_bad_tuning_block_fails_in_one_line_naming_the_field(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    path = write_spec(tmp_path, spec_data({**TUNING, **change}))
    with pytest.raises(ConfigError, match=message) as info:
        load_spec(path)
    assert "\n" not in str(info.value) and "tiny.yaml" in str(info.value)


def test_tune_on_a_profile_without_tuning_says_so(
    tmp_path: Path, tuned_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_spec(tmp_path, spec_data())
    assert main(["reproduce", "--profile", "quick", "--paper", str(path), "--tune"]) == 2
    assert "no reproduction spec has a tuning block in profile 'quick'" in capsys.readouterr().err
    assert not tuned_dir.exists()


def test_a_profile_renamed_after_tuning_keeps_its_values_with_tuned_as(
    tmp_path: Path, tuned_dir: Path
) -> None:
    """``tuned_as: standard`` on a copy of the standard profile under another name: its runs
    train with the standard's tuned values and ``--tune`` finds every study done."""
    from suite.reproduce.tuning import kept_entries

    data = spec_data()
    spec_path = write_spec(tmp_path / "specs", data)
    assert tune(spec_path, tmp_path, "a") == 0
    data["profiles"]["renamed"] = {
        **copy.deepcopy(data["profiles"]["standard"]),
        "tuned_as": "standard",
    }
    spec = load_spec(write_spec(tmp_path / "specs", data))
    for run_id in ("full", "qr_4", "qr_2"):
        assert run_config(spec, "renamed", run_id, {}) == run_config(spec, "standard", run_id, {})
    assert set(kept_entries(spec, "renamed")) == {"full", "qr_4"}  # nothing to tune again
    assert not tuned_path("tiny", "renamed").exists()
    del data["profiles"]["renamed"]["tuned_as"]
    with pytest.raises(ConfigError, match=r"tiny\.renamed\.yaml does not exist"):
        run_config(load_spec(write_spec(tmp_path / "specs", data)), "renamed", "qr_4", {})
