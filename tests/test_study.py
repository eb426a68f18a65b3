"""Optuna studies: spec validation, two workers, a killed worker and resume, best-config re-runs.

The study runs are real: tiny criteo-synth, one epoch, one torch thread per worker, an
MLflow SQLite store in the test's directory, queried with ``MlflowClient``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
import pytest
import yaml
from optuna.trial import TrialState

from suite.cli import main as cli_main
from suite.config import build_config
from suite.errors import ConfigError, SuiteError
from suite.registry import EMBEDDINGS
from suite.studies import load_study_spec, run_study
from suite.studies.report import pareto_front
from suite.studies.spec import StudySpec
from suite.studies.storage import open_storage
from suite.studies.tracking import PARENT_TAG, STUDY_TAG, TRIAL_STATE_TAG, TRIAL_TAG
from suite.studies.worker import METRICS_ATTR, worker_seed
from suite.tracking import client_for
from tests.conftest import TINY_DATA

REPO = Path(__file__).resolve().parents[1]
STUDIES = REPO / "studies"


def tiny_study(tmp: Path, name: str = "tiny", n_trials: int = 8, **extra: Any) -> dict[str, Any]:
    """A study of ``full`` (dim) and the learning rates on tiny data, as a plain mapping."""
    data: dict[str, Any] = {
        "name": name,
        "base": {
            "dataset": {
                "name": "criteo-synth",
                "options": dict(TINY_DATA),
                "cache_dir": str(tmp / "cache"),
            },
            "train": {"batch_size": 128, "threads": 1, "progress": False, "eval_every_steps": 10},
            "tracking": {
                "uri": f"sqlite:///{tmp / 'mlruns' / 'mlflow.db'}",
                "results_dir": str(tmp / "results" / "runs"),
            },
        },
        "space": {
            "params": {
                "train.dense_lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
                "train.sparse_lr": {"type": "float", "low": 1e-3, "high": 0.3, "log": True},
            },
            "methods": {
                "full": {"embedding.options.dim": {"type": "int", "low": 4, "high": 16, "step": 4}}
            },
        },
        "objectives": [
            {"metric": "val_auc", "direction": "maximize"},
            {"metric": "embedding_bytes", "direction": "minimize"},
        ],
        "budget": {"n_trials": n_trials},
        "sampler": {"name": "tpe", "seed": 0},
        "heartbeat": {"interval": 1, "grace_period": 3},
        "export": {"best": 2},
    }
    data.update(extra)
    return data


def write_study(tmp: Path, data: dict[str, Any]) -> Path:
    path = tmp / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def finished_runs(tracking_uri: str, study: str) -> tuple[Any, list[Any]]:
    client = client_for(tracking_uri)
    experiment = client.get_experiment_by_name("recsuite")
    parents = client.search_runs([experiment.experiment_id], f"tags.`{PARENT_TAG}` = '{study}'")
    assert len(parents) == 1
    children = client.search_runs(
        [experiment.experiment_id],
        f"tags.`mlflow.parentRunId` = '{parents[0].info.run_id}' AND tags.`{STUDY_TAG}` = '{study}'",
    )
    return parents[0], children


# --- the study file -----------------------------------------------------------------


def test_spec_errors_name_the_file_and_field(tmp_path: Path) -> None:
    data = tiny_study(tmp_path)
    data["space"]["params"]["train.dense_lr"] = {"type": "float", "low": 1.0, "high": 0.1}
    path = write_study(tmp_path, data)
    with pytest.raises(ConfigError, match=r"tiny\.yaml.*space\.params\.train\.dense_lr.*low"):
        load_study_spec(path)

    data = tiny_study(tmp_path, objectives=[{"metric": "val_auc", "direction": "up"}])
    with pytest.raises(ConfigError, match=r"objectives\.0\.direction"):
        load_study_spec(write_study(tmp_path, data))

    data = tiny_study(tmp_path, budget={})
    with pytest.raises(ConfigError, match=r"budget: give n_trials, timeout or both"):
        load_study_spec(write_study(tmp_path, data))

    data = tiny_study(tmp_path)
    data["base"]["train"]["epochs"] = 0
    with pytest.raises(ConfigError, match=r"tiny\.yaml: base\.train\.epochs"):
        load_study_spec(write_study(tmp_path, data))

    data = tiny_study(tmp_path, pruner={"name": "median"})
    with pytest.raises(ConfigError, match="pruning needs a single objective"):
        load_study_spec(write_study(tmp_path, data))


def test_spec_is_frozen_and_space_is_checked_before_work(tmp_path: Path) -> None:
    spec = load_study_spec(write_study(tmp_path, tiny_study(tmp_path)))
    with pytest.raises(Exception, match="frozen"):
        spec.name = "other"  # type: ignore[misc]
    data = tiny_study(tmp_path)
    data["space"]["methods"]["full"]["embedding.options.dimm"] = {
        "type": "int",
        "low": 4,
        "high": 8,
    }
    spec = load_study_spec(write_study(tmp_path, data))
    with pytest.raises(ConfigError, match=r"method full.*dimm"):
        spec.check_space()
    data = tiny_study(tmp_path)
    data["space"]["methods"] = {"full": {}, "no_such_method": {}}
    with pytest.raises(ConfigError, match="unknown embedding method 'no_such_method'"):
        load_study_spec(write_study(tmp_path, data)).check_space()


def test_base_may_be_a_path_to_a_run_config(tmp_path: Path) -> None:
    data = tiny_study(tmp_path)
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(data.pop("base")))
    data["base"] = "base.yaml"
    spec = load_study_spec(write_study(tmp_path, data))
    assert spec.base.dataset.options["train_rows"] == TINY_DATA["train_rows"]


def test_multi_method_space_is_conditional(tmp_path: Path) -> None:
    data = tiny_study(tmp_path)
    data["space"]["methods"] = {
        "full": {"embedding.options.dim": {"type": "int", "low": 4, "high": 8, "step": 4}},
        "full_again": {},
    }
    spec = StudySpec.model_validate({**data, "base": build_config()})
    study = optuna.create_study()
    study.enqueue_trial({"method": "full"})
    trial = study.ask()
    overrides = spec.space.sample(trial)
    assert overrides["embedding.name"] == "full"
    assert "full:embedding.options.dim" in trial.params
    assert spec.space.overrides_from_params(trial.params) == overrides


@pytest.mark.parametrize("path", sorted(STUDIES.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_study_files_are_valid(path: Path) -> None:
    spec = load_study_spec(path)
    assert spec.base.dataset.name == "criteo-synth"
    missing = [m for m in spec.space.methods if m not in EMBEDDINGS]
    if missing:
        pytest.skip(f"embedding method(s) {missing} not registered in this tree yet")
    spec.check_space()
    if not spec.multi_objective:
        assert spec.base.train.eval_every_steps, "pruning needs intermediate validation"


def test_shipped_studies_cover_every_compression_method() -> None:
    names = {p.stem for p in STUDIES.glob("*.yaml")}
    assert {"qr", "hash", "mixed_dim", "fiited", "compression-pareto"} <= names


def test_worker_seeds_differ_between_workers_and_sessions() -> None:
    seeds = {worker_seed(0, existing, index) for existing in (0, 8) for index in range(3)}
    assert len(seeds) == 6
    assert worker_seed(0, 0, 0) == 0
    assert worker_seed(None, 3, 1) is None


def test_pareto_front_respects_directions_and_feasibility() -> None:
    def trial(number: int, auc: float, size: float, violation: float = 0.0) -> Any:
        return optuna.trial.create_trial(
            values=[auc, size],
            user_attrs={
                METRICS_ATTR: {"val_auc": auc, "embedding_bytes": size},
                "suite:constraints": [violation],
            },
        ), number

    made = [trial(0, 0.70, 100), trial(1, 0.72, 200), trial(2, 0.69, 150), trial(3, 0.80, 50, 1.0)]
    trials = []
    for t, number in made:
        t.number = number
        trials.append(t)
    front = pareto_front(trials, [("val_auc", "maximize"), ("embedding_bytes", "minimize")])
    assert [t.number for t in front] == [0, 1]


# --- real studies ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_worker_study(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Eight trials by two worker processes against a journal file, run once for the module."""
    tmp = tmp_path_factory.mktemp("two-workers")
    patch = pytest.MonkeyPatch()
    patch.chdir(tmp)
    patch.setenv("RECSUITE_CACHE", str(tmp / "cache"))
    patch.delenv("MLFLOW_TRACKING_URI", raising=False)
    try:
        path = write_study(tmp, tiny_study(tmp))
        spec = load_study_spec(path)
        outcome = run_study(spec, workers=2, quiet=True)
    finally:
        patch.undo()
    return {"tmp": tmp, "spec": spec, "outcome": outcome}


def test_two_workers_finish_the_budget_without_duplicates(two_worker_study: dict[str, Any]) -> None:
    spec, outcome, tmp = (
        two_worker_study["spec"],
        two_worker_study["outcome"],
        two_worker_study["tmp"],
    )
    assert outcome.storage_url.startswith("journal:")
    assert outcome.complete
    assert (
        outcome.storage_url == f"journal:{tmp / 'results' / 'studies' / 'tiny' / 'optuna.journal'}"
    )
    storage = open_storage(outcome.storage_url, spec.heartbeat)
    study = optuna.load_study(study_name="tiny", storage=storage)
    complete = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(complete) == 8
    assert len({t.number for t in complete}) == 8
    params = {tuple(sorted(t.params.items())) for t in complete}
    assert len(params) == 8, "two workers sampled the same params"

    parent, children = finished_runs(spec.base.tracking.uri, "tiny")
    assert len(children) == 8
    assert sorted(int(r.data.tags[TRIAL_TAG]) for r in children) == sorted(
        t.number for t in complete
    )
    assert {r.info.status for r in children} == {"FINISHED"}
    assert parent.info.status == "FINISHED"
    assert (
        parent.info.run_id
        == outcome.parent_run_id
        == study.user_attrs["suite:mlflow_parent_run_id"]
    )
    artifacts = {
        a.path for a in client_for(spec.base.tracking.uri).list_artifacts(parent.info.run_id)
    }
    assert {"trials.csv", "pareto.png", "pareto.csv", "study.yaml", "best-1.yaml"} <= artifacts
    assert parent.data.metrics["trials_complete"] == 8

    out = tmp / "results" / "studies" / "tiny"
    assert (out / "pareto.png").stat().st_size > 0
    table = pd.read_csv(out / "trials.csv")
    assert len(table) == 8 and set(table["state"]) == {"COMPLETE"}
    assert {"val_auc", "embedding_bytes", "method", "pareto", "train.dense_lr"} <= set(
        table.columns
    )
    assert table["pareto"].sum() == len(outcome.summary.pareto) >= 1


def test_best_config_reruns_to_the_same_auc(
    two_worker_study: dict[str, Any], tmp_path: Path
) -> None:
    outcome = two_worker_study["outcome"]
    best = outcome.summary.best_configs[0]
    number = outcome.summary.best[0]
    text = best.read_text()
    assert text.startswith(f"# study tiny, trial {number}")
    row = pd.read_csv(best.parent / "trials.csv").set_index("number").loc[number]
    config = build_config([best])
    assert config.config_hash() == row["config_hash"]
    out = tmp_path / "rerun.json"
    assert cli_main(["run", "--config", str(best), "--out", str(out), "--no-tracking"]) == 0
    result = json.loads(out.read_text())
    assert result["metrics"]["val_auc"] == pytest.approx(row["val_auc"], abs=1e-9)
    assert result["metrics"]["embedding_bytes"] == row["embedding_bytes"]


def training(spec: Any, number: int) -> bool:
    """Whether trial ``number``'s MLflow run is open (the trial is training)."""
    try:
        client = client_for(spec.base.tracking.uri)
        experiment = client.get_experiment_by_name("recsuite")
        runs = client.search_runs(
            [experiment.experiment_id],
            f"tags.`{STUDY_TAG}` = '{spec.name}' AND tags.`{TRIAL_TAG}` = '{number}'",
        )
    except Exception:  # the store is not created yet, or busy
        return False
    return any(r.info.status == "RUNNING" for r in runs)


@pytest.mark.parametrize("storage", ["sqlite", "journal"])
def test_killed_worker_trial_is_failed_requeued_and_the_study_resumes(
    tmp_path: Path, storage: str
) -> None:
    n = 3
    data = tiny_study(tmp_path, name=f"kill-{storage}", n_trials=n)
    data["base"]["train"]["epochs"] = 3  # long enough trials to kill one mid-run
    path = write_study(tmp_path, data)
    spec = load_study_spec(path)
    url = (
        f"sqlite:///{tmp_path / 'optuna.db'}"
        if storage == "sqlite"
        else f"journal:{tmp_path / 'optuna.journal'}"
    )
    from suite.data.source import get_prepared

    get_prepared(spec.base.dataset, progress=False)  # the worker then starts training at once
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "suite.cli", "study", str(path), "--storage", url, "--quiet"]
    log = tmp_path / "worker.log"
    with log.open("wb") as sink:
        worker = subprocess.Popen(
            command, cwd=tmp_path, env=env, stdout=sink, stderr=subprocess.STDOUT
        )
    killed = None
    try:
        store = open_storage(url, spec.heartbeat)
        deadline = time.monotonic() + 120
        while killed is None and time.monotonic() < deadline:
            assert worker.poll() is None, log.read_text()[-3000:]
            try:
                study = optuna.load_study(study_name=spec.name, storage=store)
                running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            except Exception:  # the study is not created yet, or the database is busy
                running = []
            if running and training(spec, running[0].number):
                os.kill(worker.pid, signal.SIGKILL)
                killed = running[0].number
            time.sleep(0.05)
        assert killed is not None, "no trial started within 120 s"
    finally:
        if worker.poll() is None:
            worker.kill()
        worker.wait()

    outcome = run_study(spec, workers=1, storage=url, quiet=True)  # resume
    study = optuna.load_study(study_name=spec.name, storage=open_storage(url, spec.heartbeat))
    trials = {t.number: t for t in study.get_trials()}
    assert trials[killed].state == TrialState.FAIL
    complete = [t for t in trials.values() if t.state == TrialState.COMPLETE]
    assert len(complete) == n and outcome.complete
    retries = [t for t in complete if t.system_attrs.get("failed_trial") == killed]
    assert len(retries) == 1 and retries[0].params == trials[killed].params

    _, children = finished_runs(spec.base.tracking.uri, spec.name)
    by_trial = {int(r.data.tags[TRIAL_TAG]): r for r in children}
    assert by_trial[killed].info.status == "KILLED"
    assert by_trial[killed].data.tags[TRIAL_STATE_TAG] == "STALE"
    assert sorted(t.number for t in complete) == sorted(
        k for k, r in by_trial.items() if r.info.status == "FINISHED"
    )


def test_single_objective_with_memory_budget_prunes_and_marks_infeasible(tmp_path: Path) -> None:
    data = tiny_study(tmp_path, name="budgeted", n_trials=6)
    data["objectives"] = [{"metric": "val_auc", "direction": "maximize"}]
    data["constraints"] = [{"metric": "embedding_bytes", "max": 400_000}]  # dim 16 and 12 are over
    data["pruner"] = {"name": "median", "n_startup_trials": 1, "n_warmup_steps": 0}
    data["sampler"] = {"name": "random", "seed": 3}
    data["base"]["train"]["eval_every_steps"] = 4
    spec = load_study_spec(write_study(tmp_path, data))
    outcome = run_study(spec, quiet=True)
    assert outcome.storage_url.endswith("budgeted/optuna.db")
    study = optuna.load_study(study_name="budgeted", storage=outcome.storage_url)
    trials = study.get_trials()
    finished = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(finished) == 6
    assert any(t.intermediate_values for t in trials), "no intermediate reports"
    for t in trials:
        if t.state == TrialState.COMPLETE:
            bytes_ = t.user_attrs[METRICS_ATTR]["embedding_bytes"]
            assert (t.user_attrs["suite:constraints"][0] <= 0) == (bytes_ <= 400_000)
    for number in outcome.summary.best:
        assert trials[number].user_attrs[METRICS_ATTR]["embedding_bytes"] <= 400_000
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    if pruned:  # pruned trials' runs end KILLED, tagged PRUNED
        _, children = finished_runs(spec.base.tracking.uri, "budgeted")
        states = {int(r.data.tags[TRIAL_TAG]): r for r in children}
        assert states[pruned[0].number].info.status == "KILLED"
        assert states[pruned[0].number].data.tags[TRIAL_STATE_TAG] == "PRUNED"

    again = run_study(spec.with_changes(n_trials=7), quiet=True)  # resume with a larger budget
    assert again.parent_run_id == outcome.parent_run_id
    study = optuna.load_study(study_name="budgeted", storage=outcome.storage_url)
    assert (
        len([t for t in study.get_trials() if t.state in (TrialState.COMPLETE, TrialState.PRUNED)])
        == 7
    )


def test_a_study_resumed_without_its_tracking_store_continues_under_a_new_parent(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A study's committed storage resumed on a fresh clone (its MLflow store left on the
    machine that started it) finishes its budget under a new parent run in this store,
    which names the parent it continues; the study keeps every earlier parent."""
    from suite.studies.tracking import CONTINUES_TAG, EARLIER_PARENTS_ATTR, PARENT_ATTR

    data = tiny_study(tmp_path, name="moved", n_trials=2)
    data["objectives"] = [{"metric": "val_auc", "direction": "maximize"}]
    url = f"sqlite:///{tmp_path / 'moved.db'}"
    first = run_study(load_study_spec(write_study(tmp_path, data)), storage=url, quiet=True)
    other = f"sqlite:///{tmp_path / 'elsewhere' / 'mlflow.db'}"
    data["base"]["tracking"]["uri"] = other
    data["budget"]["n_trials"] = 3
    capsys.readouterr()
    again = run_study(load_study_spec(write_study(tmp_path, data)), storage=url, quiet=True)
    err = capsys.readouterr().err
    assert f"its MLflow parent run {first.parent_run_id} is not in the tracking store" in err
    assert "its 2 finished trials stay in the Optuna storage" in err
    assert again.parent_run_id and again.parent_run_id != first.parent_run_id
    study = optuna.load_study(study_name="moved", storage=url)
    assert study.user_attrs[PARENT_ATTR] == again.parent_run_id
    assert study.user_attrs[EARLIER_PARENTS_ATTR] == [first.parent_run_id]
    assert sum(t.state == TrialState.COMPLETE for t in study.trials) == 3
    parent = client_for(other).get_run(again.parent_run_id)
    assert parent.data.tags[CONTINUES_TAG] == first.parent_run_id
    assert parent.info.status == "FINISHED"  # the budget is done: nothing left RUNNING


# --- Optuna as its users expect -------------------------------------------------------


def test_metric_names_progress_lines_and_no_deprecation_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tiny_study(tmp_path, name="named", n_trials=2)
    data["constraints"] = [{"metric": "embedding_bytes", "max": 10**9}]
    spec = load_study_spec(write_study(tmp_path, data))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outcome = run_study(spec)
    deprecated = [w for w in caught if issubclass(w.category, FutureWarning | DeprecationWarning)]
    assert not [w for w in deprecated if "optuna" in str(w.filename)], deprecated
    study = optuna.load_study(study_name="named", storage=outcome.storage_url)
    assert study.metric_names == ["val_auc", "embedding_bytes"]  # optuna-dashboard's labels
    assert all(t.constraints for t in study.get_trials(states=(TrialState.COMPLETE,)))
    err = capsys.readouterr().err
    assert "study named" in err and "2/2" in err  # the bar, as log lines (stderr is no TTY)
    assert "\r" not in err
    for suffix in ("png", "pdf", "svg"):  # paper-ready: vector and 300 dpi
        assert (outcome.out_dir / f"pareto.{suffix}").stat().st_size > 0
    tables = tmp_path / "tables"
    assert cli_main(["export", "study", str(outcome.out_dir), "--out", str(tables)]) == 0
    exported = pd.read_csv(tables / "study-named.csv")
    assert len(exported) == 2 and r"\begin{tabular}" in (tables / "study-named.tex").read_text()


def test_journal_heartbeat_fails_and_requeues_a_dead_workers_trial(tmp_path: Path) -> None:
    from suite.studies.storage import HEARTBEAT_ATTR, TrialHeartbeat, fail_stale_trials

    spec = load_study_spec(write_study(tmp_path, tiny_study(tmp_path, name="beats")))
    storage = open_storage(f"journal:{tmp_path / 'optuna.journal'}", spec.heartbeat)
    study = optuna.create_study(study_name="beats", storage=storage)
    dead = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    alive = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    study_id = storage.get_study_id_from_name("beats")
    dead_id = storage.get_trial_id_from_study_id_trial_number(study_id, dead.number)
    alive_id = storage.get_trial_id_from_study_id_trial_number(study_id, alive.number)
    storage.set_trial_system_attr(dead_id, HEARTBEAT_ATTR, time.time() - 60)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1)
    with TrialHeartbeat(storage, alive_id, interval=0.05):
        time.sleep(0.3)
        assert fail_stale_trials(study, storage, grace_period=5, callback=retry) == [dead.number]
    beat = storage.get_trial(alive_id).system_attrs[HEARTBEAT_ATTR]
    assert time.time() - beat < 5
    trials = study.get_trials()
    assert trials[dead.number].state == TrialState.FAIL
    assert trials[alive.number].state == TrialState.RUNNING
    (waiting,) = [t for t in trials if t.state == TrialState.WAITING]
    assert waiting.params == trials[dead.number].params
    assert waiting.system_attrs["failed_trial"] == dead.number
    # a second sweep (another worker) finds nothing more to fail
    assert fail_stale_trials(study, storage, grace_period=5, callback=retry) == []


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--trials", "0"], "--trials: must be an integer >= 1, got 0"),
        (["--trials", "-3"], "--trials: must be an integer >= 1, got -3"),
        (["--timeout", "-1"], "--timeout: must be a number of seconds > 0, got -1"),
    ],
)
def test_bad_budget_flags_are_one_clean_line(
    tmp_path: Path, flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_study(tmp_path, tiny_study(tmp_path, name="flags"))
    assert cli_main(["study", str(path), *flags]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"error: {message}"


def test_unknown_objective_metric_stops_the_study_at_once(tmp_path: Path) -> None:
    data = tiny_study(tmp_path, name="typo", n_trials=4)
    data["objectives"] = [{"metric": "val_aucc", "direction": "maximize"}]
    spec = load_study_spec(write_study(tmp_path, data))
    with pytest.raises(SuiteError, match="val_aucc"):
        run_study(spec, quiet=True)
    db = tmp_path / "results" / "studies" / "typo" / "optuna.db"
    # the tasks declare their metrics, so the typo is found before any trial (it took three
    # failed trials in a row before)
    trials = (
        optuna.load_study(study_name="typo", storage=f"sqlite:///{db}").get_trials()
        if db.exists()
        else []
    )
    assert trials == []
