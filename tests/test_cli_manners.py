"""The CLI's manners (issue 34, item 6): a closed pipe, unknown names, whole descriptions,
help text, progress in logs, one number format, leaderboard hints, the Ctrl-C message.

Real processes, real pipes, a real tqdm bar, a real SQLite MLflow store: nothing is mocked;
only tqdm's clock is replaced by one the test advances.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from suite.cli import EXIT_BROKEN_PIPE, main, make_parser
from suite.results import TaskResult
from suite.runs.signals import Interrupted, interrupted_message, note_killed_run
from tests.conftest import TINY_DATA

REPO = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


# --- a closed pipe -------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["list", "embedding"], ["list", "--json"], ["--help"]])
def test_a_reader_that_closed_early_gets_no_traceback(argv: list[str]) -> None:
    """The reader of stdout is gone before the first write (``suite list | head -0``):
    deterministic, unlike ``| head -1`` whose reader may outlive a 64 KiB pipe buffer."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "suite", *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr
    assert proc.stderr == ""
    # argparse's --help swallows the write error itself and exits 0, like `--help` should
    assert EXIT_BROKEN_PIPE == 141  # 128 + SIGPIPE, as the shell reports `yes | head`
    assert proc.returncode == (0 if argv == ["--help"] else EXIT_BROKEN_PIPE)


def test_head_in_a_shell_pipeline_ends_quietly() -> None:
    """The user's own command line: ``suite list embedding | head -1``."""
    cmd = f"{sys.executable} -m suite list embedding | head -1; echo status=${{PIPESTATUS[0]}}"
    proc = subprocess.run(
        ["bash", "-c", cmd], capture_output=True, text=True, env=_env(), timeout=120
    )
    assert "Traceback" not in proc.stderr and proc.stderr == ""
    first, status = proc.stdout.splitlines()
    assert first == "embeddings:"
    assert status in ("status=0", "status=141")  # 0 when the whole listing fit the pipe


# --- unknown names --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["list", "foo"], "no entry of any kind matches 'foo'"),
        (["list", "embeding"], "Did you mean 'embedding'?"),
        (["list", "--json", "wukon"], "Did you mean 'wukong'?"),
        (["list", "models", "wukong-s"], "'wukong-s' is in presets"),
        (["list", "datasets", "nothing-*"], "no entry of datasets matches 'nothing-*'"),
    ],
)
def test_an_unknown_name_exits_non_zero_with_a_suggestion(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert expected in captured.err and captured.err.count("\n") == 1
    assert captured.out == ""


def test_a_name_lists_only_the_kinds_it_is_in(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "q?"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("embeddings:\n  qr  ") and "none matching" not in out
    assert "models:" not in out and "suite run --config" not in out


# --- whole descriptions ---------------------------------------------------------------


def test_descriptions_are_whole_sentences_and_printed_whole(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert main(["list"]) == 0
    text = " ".join(capsys.readouterr().out.split())  # undo the wrapping
    for kind, rows in data.items():
        for row in rows:
            description = row["description"]
            assert re.search(r"[.!?)]$", description), f"{kind} {row['name']}: {description!r}"
            assert f"{row['name']} {description}" in text, f"{kind} {row['name']} cut"
    # the one that was cut mid-sentence on commit 0650cc1
    (fiited,) = [r for r in data["embeddings"] if r["name"] == "fiited"]
    assert fiited["description"].endswith("grows with the live chunks.")


def test_listing_lines_stay_within_the_wrap_width(capsys: pytest.CaptureFixture[str]) -> None:
    from suite.commands.list import DESCRIPTION_WIDTH

    assert main(["list", "embeddings"]) == 0
    lines = capsys.readouterr().out.splitlines()
    entries = [line for line in lines if re.match(r"  \S", line)]  # "  name  description"
    from suite.registry import EMBEDDINGS

    assert len(entries) == len(EMBEDDINGS.names())
    assert not [x for x in entries if len(x) > DESCRIPTION_WIDTH]
    (fiited,) = [i for i, line in enumerate(lines) if line.startswith("  fiited  ")]
    assert lines[fiited + 1] == "      whose every part shrinks and grows with the live chunks."


# --- help text ------------------------------------------------------------------------


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def test_no_help_text_shows_a_doubled_percent() -> None:
    found = list(_parsers(make_parser()))
    assert len(found) > 15  # every subcommand and sub-subcommand was walked
    doubled = [" ".join(path) for path, parser in found if "%%" in parser.format_help()]
    assert not doubled
    (compare,) = [p for path, p in found if path == ("compare",)]
    assert "90% interval" in compare.format_help()  # the one level (decisions.ALPHA)


# --- progress in a log ----------------------------------------------------------------


class Clock:
    """tqdm's clock, advanced by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _log_clock(monkeypatch: pytest.MonkeyPatch) -> tuple[Clock, io.StringIO]:
    """stderr is a StringIO (not a terminal) and tqdm reads the test's clock. Called in the
    test's body: pytest's own capture resets ``sys.stderr`` between fixtures and the test."""
    import tqdm.std

    clock = Clock()
    monkeypatch.setattr(tqdm.std, "time", clock)
    monkeypatch.delenv("RECSUITE_PROGRESS", raising=False)
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    return clock, stream


@pytest.mark.parametrize("postfix", ["set_postfix", "set_postfix_str"])
def test_a_log_gets_one_line_per_interval_and_one_final_line(
    monkeypatch: pytest.MonkeyPatch, postfix: str
) -> None:
    from suite.progress import LOG_INTERVAL_S, progress_bar

    clock, stream = _log_clock(monkeypatch)
    steps, step_s = 1600, 0.1  # 160 s: the train loop's default run, a postfix every 50 steps
    bar = progress_bar(total=steps, desc="train", unit="batch", leave=False)
    for step in range(steps):
        clock.now += step_s
        bar.update(1)
        if step % 50 == 0:
            if postfix == "set_postfix":
                bar.set_postfix(loss=f"{step / 1000:.4f}")
            else:
                bar.set_postfix_str(f"loss={step / 1000:.4f}")
    bar.close()
    lines = stream.getvalue().splitlines()
    expected = int(steps * step_s // LOG_INTERVAL_S) + 1  # 5 timed lines + the final one
    assert len(lines) == expected, lines
    assert all("\r" not in line and "batch/s" in line for line in lines)
    assert "300/1600" in lines[0] and "<02:10" in lines[0]  # rate and ETA
    assert "1600/1600" in lines[-1] and "10.00batch/s" in lines[-1]
    assert sum("1600/1600" in line for line in lines) == 1  # the last bar once


def test_a_short_loop_in_a_log_writes_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from suite.progress import progress_bar

    clock, stream = _log_clock(monkeypatch)
    for _ in progress_bar(range(40), desc="eval", unit="batch"):
        clock.now += 0.5
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and "40/40" in lines[0], lines


def test_a_bar_ending_on_a_timed_line_is_not_printed_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from suite.progress import progress_bar

    clock, stream = _log_clock(monkeypatch)
    bar = progress_bar(total=2, desc="prepare")
    clock.now += 31
    bar.update(1)
    clock.now += 31
    bar.update(1)  # a timed line at 2/2, then close() has nothing new to say
    bar.close()
    lines = stream.getvalue().splitlines()
    assert [("1/2" in x, "2/2" in x) for x in lines] == [(True, False), (False, True)], lines


# --- one number format ----------------------------------------------------------------


def _result(seed: int, embedding: str, auc: float, table_bytes: float) -> TaskResult:
    return TaskResult(
        task="memory",
        model="dlrm",
        embedding=embedding,
        dataset="criteo-synth",
        protocol="default",
        seed=seed,
        config={"seed": seed, "embedding": embedding},
        config_hash=f"{embedding}{seed}",
        data_fingerprint="f",
        metrics={
            "test_auc": auc,
            "embedding_bytes": table_bytes,
            "train_samples_per_s": 15_000.0 + 437 * seed,
        },
        higher_is_better={"test_auc": True, "embedding_bytes": False, "train_samples_per_s": True},
    )


def test_compare_prints_bytes_in_binary_units(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = isolated / "runs"
    for seed, d in enumerate([0.001, 0.002, 0.0015]):
        _result(seed, "full", 0.80 + d, 5_604_930.0).write(out / f"a{seed}.json")
        _result(seed, "qr", 0.79 + d / 2, 5_604_930.0 - 600_000).write(out / f"b{seed}.json")
    assert main(["compare", "full0", "qr0", "--results", str(out)]) == 0  # by config hash
    assert main(["compare", str(out / "a0.json"), str(out / "b0.json")]) == 0
    text = capsys.readouterr().out
    assert "e+0" not in text  # never 5.60493e+06
    (row,) = [line for line in text.splitlines() if "embedding_bytes" in line][:1]
    assert "5.35 MiB" in row and "4.77 MiB" in row and "+586 KiB" in row


def test_the_multiseed_summary_and_compare_share_one_format(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from suite.commands.run import print_multiseed
    from suite.runs.multiseed import MultiSeedResult, aggregate

    results = [_result(s, "full", 0.80 + 0.0052 * s, 5_604_930.0) for s in range(3)]
    mean, std = aggregate(results)
    agg = MultiSeedResult(
        task="memory",
        model="dlrm",
        embedding="full",
        dataset="criteo-synth",
        protocol="default",
        seeds=[0, 1, 2],
        config={},
        config_hash="h",
        data_fingerprint="f" * 16,
        checkpoint={"rule": "final", "per_seed": []},
        mean=mean,
        std=std,
        higher_is_better=results[0].higher_is_better,
        per_seed=results,
    )
    print_multiseed(agg)
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[2:5]}
    # std 0.0052: two significant digits, the mean and each seed to the same place
    assert rows["test_auc"].split()[1:] == ["0.8052", "±", "0.0052", "0.8000", "0.8052", "0.8104"]
    assert rows["train_samples_per_s"].split()[1:4] == [
        "15,437",
        "±",
        "437",
    ]  # std 437: whole units
    assert rows["embedding_bytes"].split()[1:5] == ["5.35", "MiB", "±", "0"]


def test_the_shared_formatter() -> None:
    from suite.units import decimals_for, format_metric, format_spread

    assert format_metric("embedding_bytes", 5_604_930.0) == "5.35 MiB"
    assert format_metric("embedding_bytes", 600_000.0, plus=True) == "+586 KiB"
    assert format_metric("test_auc", 0.78123456) == "0.781235"
    assert decimals_for(0.00520352) == 4 and decimals_for(0.0) is None
    assert format_metric("test_auc", 0.78123456, 4) == "0.7812"
    assert format_spread("test_auc", 0.00520352) == "± 0.0052"
    assert format_spread("test_auc", None) == "± n/a"
    assert format_metric("train_samples_per_s", 15_433.2, 0, plus=True) == "+15,433"


# --- the leaderboard's hints ----------------------------------------------------------


def test_validate_prints_a_verify_command_that_runs_from_here(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from suite.leaderboard.submit import write_submission
    from tests.test_leaderboard_validate import make_submission, registry_for

    board = isolated / "leaderboard"
    sub = make_submission()
    path, _ = write_submission(sub, board)
    registry_for(sub).save(board / "fingerprints.yaml")
    assert main(["leaderboard", "validate", "--leaderboard-dir", str(board)]) == 0
    err = capsys.readouterr().err
    command = re.search(r"`suite leaderboard verify (\S+) --record`", err)
    assert command, err
    assert command.group(1) == f"leaderboard/submissions/{path.name}"
    assert Path(command.group(1)).is_file()  # from the working directory, as printed


def test_a_missing_submission_file_says_it_does_not_exist(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (isolated / "leaderboard" / "submissions").mkdir(parents=True)
    code = main(["leaderboard", "validate", "--leaderboard-dir", "leaderboard", "gone.json"])
    assert code == 1
    out = capsys.readouterr().out
    assert "gone.json: (file): does not exist" in out and "regular file" not in out
    (isolated / "adir.json").mkdir()
    assert main(["leaderboard", "validate", "--leaderboard-dir", "leaderboard", "adir.json"]) == 1
    assert "not a regular file" in capsys.readouterr().out


# --- Ctrl-C ---------------------------------------------------------------------------


def test_the_interrupted_message_names_the_run_and_how_to_resume() -> None:
    exc = Interrupted(signal.SIGINT)
    assert interrupted_message(exc) == "interrupted by SIGINT"  # before any run started
    note_killed_run(exc, "abc123", "sqlite:///x/mlflow.db", True)
    assert interrupted_message(exc, "sqlite:///x/mlflow.db") == (
        "interrupted by SIGINT: MLflow run abc123 ended KILLED; resume it from its last "
        "checkpoint with: suite resume abc123"
    )
    assert interrupted_message(exc, "sqlite:///elsewhere.db").endswith(
        "suite resume abc123 --tracking-uri sqlite:///x/mlflow.db"
    )
    note_killed_run(exc, "parent9", "sqlite:///x/mlflow.db", None)
    assert "(a seed of multi-seed run parent9, also KILLED)" in interrupted_message(exc)
    unsaved = KeyboardInterrupt()
    note_killed_run(unsaved, "def456", "sqlite:///x/mlflow.db", False)
    assert interrupted_message(unsaved) == (
        "interrupted by SIGINT: MLflow run def456 ended KILLED; it wrote no checkpoint to "
        "resume from (set train.checkpoint_every)"
    )


def _wait_for_a_checkpoint(uri: str, proc: subprocess.Popen[str], root: Path) -> None:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if list(root.rglob("manifest.json")) and Path(uri.removeprefix("sqlite:///")).exists():
            return
        time.sleep(0.3)
    proc.kill()
    raise AssertionError("the run never wrote a checkpoint")


@pytest.mark.slow
def test_ctrl_c_prints_the_run_id_and_the_resume_command(isolated: Path) -> None:
    uri = f"sqlite:///{isolated / 'store' / 'mlflow.db'}"  # not the default: named in the hint
    flags = [f"--set=dataset.options.{k}={v}" for k, v in TINY_DATA.items()]
    proc = subprocess.Popen(
        [sys.executable, "-m", "suite", "run", "--tracking-uri", uri, "--quiet", *flags]
        + ["--batch-size=128", "--epochs=200", "--set=train.threads=1"]
        + ["--set=train.checkpoint_every=5", "--set=train.checkpoint_dir=ckpt"],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for_a_checkpoint(uri, proc, isolated / "ckpt")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert run.info.status == "KILLED"
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"interrupted by SIGINT: MLflow run {run.info.run_id} ended KILLED")
    assert last.endswith(f"suite resume {run.info.run_id} --tracking-uri {uri}")
