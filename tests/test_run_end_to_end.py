"""The one run path through the CLI, checked through MLflow's own client."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from suite.cli import main
from suite.runs.single import execute
from tests.conftest import TINY_DATA, tiny_config, tracking_uri

TINY_FLAGS = [f"--set=dataset.options.{k}={v}" for k, v in TINY_DATA.items()] + [
    "--batch-size",
    "128",
    "--quiet",
    "--set",
    "train.threads=1",
]


def _runs(uri: str) -> list:
    client = MlflowClient(tracking_uri=uri)
    experiments = client.search_experiments()
    return client.search_runs([e.experiment_id for e in experiments]) if experiments else []


def test_cli_run_is_tracked_in_mlflow(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = tracking_uri(tmp_path)
    out = tmp_path / "result.json"
    code = main(
        [
            "run",
            "--model",
            "dlrm",
            "--embedding",
            "full",
            "--dataset",
            "criteo-synth",
            "--task",
            "accuracy",
            "--tracking-uri",
            uri,
            "--out",
            str(out),
            *TINY_FLAGS,
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    for name in ("val_auc", "val_logloss", "test_auc", "test_logloss"):
        assert name in printed

    result = json.loads(out.read_text())
    (run,) = _runs(uri)
    assert run.info.status == "FINISHED"
    assert run.info.run_id == result["mlflow_run_id"]
    assert run.data.params["model.name"] == "dlrm"
    assert run.data.params["train.batch_size"] == "128"
    assert run.data.params["dataset.options.train_rows"] == "4000"
    assert run.data.metrics["test_auc"] == pytest.approx(result["metrics"]["test_auc"])
    assert 0.5 < result["metrics"]["test_auc"] < 1.0
    tags = run.data.tags
    assert tags["suite.config_hash"] == result["config_hash"]
    assert tags["suite.data_fingerprint"] == result["data_fingerprint"]
    for key in (
        "suite.git_commit",
        "suite.version",
        "torch.version",
        "fbgemm.version",
        "suite.device",
    ):
        assert tags[key]
    client = MlflowClient(tracking_uri=uri)
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "result.json", "environment.json"} <= artifacts
    history = client.get_metric_history(run.info.run_id, "train_logloss")
    assert len(history) >= 2
    assert result["details"]["checkpoint"] == "best"
    # the result is also under results/ by default
    assert list(Path("results/runs/accuracy/criteo-synth").glob("dlrm-full-*-seed0.json"))


def test_two_identical_cpu_runs_give_identical_metrics() -> None:
    first = execute(tiny_config())
    second = execute(tiny_config())
    assert first.metrics["test_auc"] == second.metrics["test_auc"]
    assert first.metrics["val_logloss"] == second.metrics["val_logloss"]
    assert first.details["validation_history"] == second.details["validation_history"]
    other = execute(tiny_config(overrides=["seed=1"]))
    assert other.metrics["test_auc"] != first.metrics["test_auc"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "dlrmm"], "unknown model 'dlrmm'. Did you mean 'dlrm'?"),
        (["--dataset", "critoe-synth"], "Did you mean 'criteo-synth'?"),
        (["--set", "train.batch_size=-1"], "train.batch_size"),
        (["--device", "cuda"], None),
        (["--task", "lowprec", "--embedding", "fiited"], "has no plain tables to quantize"),
        (
            ["--set", "embedding.options.dim=6"],
            "embedding.options.dim: the fbgemm backend needs a multiple of 4",
        ),
    ],
)
def test_bad_input_fails_in_one_line_and_leaves_no_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str | None
) -> None:
    import torch

    if argv == ["--device", "cuda"] and torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    uri = tracking_uri(tmp_path)
    code = main(["run", "--tracking-uri", uri, *TINY_FLAGS, *argv])
    err = capsys.readouterr().err.strip()
    assert code != 0
    assert len(err.splitlines()) == 1 and err.startswith("error: ")
    if message:
        assert message in err
    assert _runs(uri) == [] if Path(uri.removeprefix("sqlite:///")).exists() else True


def test_malformed_yaml_fails_cleanly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  epochs: [1\n")
    uri = tracking_uri(tmp_path)
    assert main(["run", "--config", str(bad), "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: malformed YAML in") and "bad.yaml:" in err
    assert not Path(uri.removeprefix("sqlite:///")).exists()


def test_unknown_flag_exits_non_zero(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["run", "--bogus"])
    assert info.value.code == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_list_prints_every_registry(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for title in ("models:", "embeddings:", "datasets:", "tasks:"):
        assert title in out
    assert "criteo-synth" in out and "dlrm" in out


def test_every_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    from suite.cli import make_parser

    parser = make_parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert {"list", "run", "prepare"} <= set(commands)
    for name in commands:
        with pytest.raises(SystemExit) as info:
            main([name, "--help"])
        assert info.value.code == 0
    assert "usage:" in capsys.readouterr().out
