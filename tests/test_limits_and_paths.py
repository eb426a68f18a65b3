"""Absurd limits, unchecked paths and bad ratings fail early in one line (issue 33, items 5-7).

CLI cases run ``python -m suite`` as a real process against a real SQLite MLflow store in
tmp_path; MovieLens cases write tiny raw releases in tmp_path. Nothing is mocked.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from suite.config import MAX_THREADS, build_config
from suite.data.source import get_prepared
from suite.errors import ConfigError, DataError
from suite.runs.checks import (
    THREADS_PER_CPU,
    check_checkpoint_dir,
    check_memory,
    check_threads,
    usable_cpus,
)
from tests.conftest import TINY_DATA, tiny_config, tracking_uri
from tests.test_datasets_movielens import flags, ml100k, prepare, sparse

REPO = Path(__file__).resolve().parents[1]
TINY_FLAGS = [f"--set=dataset.options.{k}={v}" for k, v in TINY_DATA.items()] + [
    "--batch-size=128",
    "--quiet",
]


def _suite(*argv: str) -> subprocess.CompletedProcess[str]:
    """``python -m suite ARGV`` in a new process (this checkout, the test's directory)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(
        [sys.executable, "-m", "suite", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The failed command's stderr: exactly one line, no traceback."""
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def _running(uri: str) -> list[str]:
    """Ids of the store's RUNNING runs (none when the store was never created)."""
    if not Path(uri.removeprefix("sqlite:///")).exists():
        return []
    client = MlflowClient(tracking_uri=uri)
    ids = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(ids) if ids else []
    return [r.info.run_id for r in runs if r.info.status == "RUNNING"]


def _run_fails(tmp_path: Path, *argv: str) -> str:
    """``suite run`` with ``argv`` fails in one line and leaves no MLflow run RUNNING."""
    uri = tracking_uri(tmp_path)
    line = _one_line(_suite("run", "--tracking-uri", uri, *TINY_FLAGS, *argv))
    assert _running(uri) == []
    return line


# --- item 5: resource limits ------------------------------------------------------------


def test_thousands_of_threads_are_refused_by_the_schema(tmp_path: Path) -> None:
    # before: a segfault (rc 139, nothing on stderr) with the MLflow run left RUNNING
    line = _run_fails(tmp_path, "--set", "train.threads=5000")
    assert "train.threads" in line and str(MAX_THREADS) in line


def test_more_threads_than_this_machine_takes_are_refused(tmp_path: Path) -> None:
    too_many = THREADS_PER_CPU * usable_cpus() + 1
    line = _run_fails(tmp_path, "--set", f"train.threads={too_many}")
    assert f"train.threads: {too_many} threads" in line
    assert f"at most {THREADS_PER_CPU * usable_cpus()}" in line


def test_check_threads_takes_up_to_the_machines_cap() -> None:
    cap = THREADS_PER_CPU * usable_cpus()
    check_threads(tiny_config(overrides=[f"train.threads={min(cap, MAX_THREADS)}"]))
    check_threads(tiny_config(overrides=["train.threads=null"]))
    with pytest.raises(ConfigError, match=r"^train\.threads: "):
        check_threads(tiny_config(overrides=[f"train.threads={cap + 1}"]))


@pytest.mark.parametrize("field", ["train.batch_size", "train.eval_batch_size"])
def test_a_batch_beyond_memory_names_its_field_and_the_bytes(tmp_path: Path, field: str) -> None:
    # before: blamed embedding.options.dim
    line = _run_fails(tmp_path, "--set", f"{field}=10000000000")
    assert line.startswith(f"error: {field}: a batch of 10,000,000,000 rows needs at least ")
    assert "bytes" in line and "available" in line and "embedding.options.dim:" not in line


def test_check_memory_blames_tables_then_batches() -> None:
    import torch

    cpu = torch.device("cpu")
    check_memory(tiny_config(), [100] * 26, cpu)  # fits
    with pytest.raises(ConfigError, match=r"^embedding\.options\.dim: .* for its tables"):
        check_memory(tiny_config(), [10**13] * 26, cpu)
    big = tiny_config(overrides=["train.batch_size=1000000000000"])
    with pytest.raises(ConfigError, match=r"^train\.batch_size: a batch of 1,000,000,000,000"):
        check_memory(big, [100] * 26, cpu)


# --- item 6: output paths checked before any work --------------------------------------


def test_checkpoint_dir_on_a_file_is_refused_before_any_work(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    # before: NotADirectoryError traceback after the run had started
    line = _run_fails(
        tmp_path, "--set", f"train.checkpoint_dir={blocker}", "--set", "train.checkpoint_every=5"
    )
    assert line == f"error: train.checkpoint_dir: {blocker} exists and is not a directory"
    assert not (tmp_path / "cache").exists()  # nothing prepared


def test_checkpoint_dir_under_a_file_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    config = tiny_config(
        overrides=[f"train.checkpoint_dir={blocker}/sub", "train.checkpoint_every=5"]
    )
    with pytest.raises(ConfigError, match=rf"^train\.checkpoint_dir: cannot write {blocker}/sub"):
        check_checkpoint_dir(config)
    check_checkpoint_dir(tiny_config(overrides=[f"train.checkpoint_dir={blocker}"]))  # unused


def test_render_out_on_a_file_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    board = REPO / "leaderboard"
    proc = _suite("leaderboard", "render", "--leaderboard-dir", str(board), "--out", str(blocker))
    line = _one_line(proc)  # before: FileExistsError traceback
    assert line == f"error: --out: {blocker} exists and is not a directory"
    assert blocker.read_text() == "x"


@pytest.mark.skipif(not Path("/etc/passwd").is_file(), reason="no /etc/passwd here")
def test_the_reported_etc_passwd_paths_are_refused_untouched(tmp_path: Path) -> None:
    """The issue's own commands, as root where the file is writable: one line each, before
    any work, and /etc/passwd keeps its bytes and mtime."""
    passwd = Path("/etc/passwd")
    before = (passwd.read_bytes(), passwd.stat().st_mtime_ns)
    line = _run_fails(
        tmp_path, "--set", f"train.checkpoint_dir={passwd}", "--set", "train.checkpoint_every=5"
    )
    assert line == f"error: train.checkpoint_dir: {passwd} exists and is not a directory"
    board = REPO / "leaderboard"
    proc = _suite("leaderboard", "render", "--leaderboard-dir", str(board), "--out", str(passwd))
    assert _one_line(proc) == f"error: --out: {passwd} exists and is not a directory"
    assert (passwd.read_bytes(), passwd.stat().st_mtime_ns) == before


@pytest.mark.parametrize("command", ["validate", "render"])
def test_a_missing_leaderboard_dir_fails(tmp_path: Path, command: str) -> None:
    missing = tmp_path / "nonexistent"
    proc = _suite("leaderboard", command, "--leaderboard-dir", str(missing))
    line = _one_line(proc)  # before: "0 submission(s) valid", exit 0
    assert line.startswith(f"error: --leaderboard-dir: {missing} does not exist")
    assert not missing.exists()


@pytest.mark.parametrize(
    "argv", [["export", "runs"], ["study", str(REPO / "studies" / "hash.yaml"), "--trials", "1"]]
)
def test_export_and_study_out_on_a_file_are_one_line(tmp_path: Path, argv: list[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    proc = _suite(*argv, "--out", str(blocker))  # before: FileExistsError traceback
    assert _one_line(proc) == f"error: --out: {blocker} exists and is not a directory"


# --- item 7: MovieLens ratings and side files --------------------------------------------


def test_a_rating_off_the_100k_scale_names_file_and_line(tmp_path: Path) -> None:
    raw = ml100k(tmp_path)
    lines = (raw / "u.data").read_text().splitlines()
    lines[2] = "1\t4\t1e300\t300"  # before: accepted, labelled positive
    (raw / "u.data").write_text("\n".join(lines) + "\n")
    proc = _suite("prepare", "movielens", "--raw", str(raw), "--quiet")
    assert _one_line(proc) == (
        f"error: {raw / 'u.data'}:3: rating must be an integer from 1 to 5 "
        "(the MovieLens 100k scale)"
    )


@pytest.mark.parametrize("rating", ["3.5", "0", "6"])
def test_100k_takes_whole_stars_only(tmp_path: Path, rating: str) -> None:
    raw = ml100k(tmp_path)
    with open(raw / "u.data", "a") as handle:
        handle.write(f"3\t3\t{rating}\t1100\n")
    with pytest.raises(DataError, match=r"u\.data:11: rating must be an integer from 1 to 5"):
        prepare(raw, variant="100k")
    data = prepare(raw, variant="100k", on_bad_rows="skip")
    assert data.manifest["bad_rows"]["total"] == 1


def _latest_small(tmp_path: Path, ratings: list[str]) -> Path:
    directory = tmp_path / "ml-latest-small"
    directory.mkdir(parents=True)
    (directory / "ratings.csv").write_text(
        "userId,movieId,rating,timestamp\n" + "\n".join(ratings) + "\n"
    )
    (directory / "movies.csv").write_text("movieId,title,genres\n1,A,Comedy\n2,B,Drama\n")
    return directory


def test_csv_releases_take_half_stars_from_half_to_five(tmp_path: Path) -> None:
    good = [f"{1 + i % 3},{1 + i % 2},{r},{i}" for i, r in enumerate(np.arange(0.5, 5.5, 0.5))]
    data = prepare(_latest_small(tmp_path / "a", good), variant="latest-small")
    assert sum(data.manifest["rows"].values()) == 10
    bad = [*good, "1,1,5.5,99"]
    with pytest.raises(DataError, match=r"ratings\.csv:12: rating must be a multiple of 0\.5"):
        prepare(_latest_small(tmp_path / "b", bad), variant="latest-small")


def _append_item(raw: Path, row: str) -> None:
    with open(raw / "u.item", "ab") as handle:
        handle.write((row + "\n").encode("latin-1"))


def test_a_conflicting_duplicate_item_names_file_id_and_both_lines(tmp_path: Path) -> None:
    raw = ml100k(tmp_path)
    _append_item(raw, f"2|GoldenEye (1995)|01-Jan-1995||http://x|{flags(8)}")
    # before: accepted silently, the first row's genres winning
    with pytest.raises(DataError) as caught:
        prepare(raw, variant="100k")
    message = str(caught.value)
    assert message.startswith(f"{raw / 'u.item'}: item 2 is on line 2 and on line 5 ")
    assert "\n" not in message and "genre flag 'Drama'" in message


def test_an_identical_duplicate_item_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "dup").mkdir()
    plain = prepare(ml100k(tmp_path / "plain"), "temporal", variant="100k")
    raw = ml100k(tmp_path / "dup")
    _append_item(raw, f"4|Drama (1996)|01-Jan-1996||http://x|{flags(8)}")
    data = prepare(raw, "temporal", variant="100k")
    for split in ("train", "val", "test"):
        assert sparse(data, split, "genre") == sparse(plain, split, "genre")


def test_a_conflicting_duplicate_user_is_refused(tmp_path: Path) -> None:
    raw = ml100k(tmp_path)
    with open(raw / "u.user", "a") as handle:
        handle.write("3|40|F|student|55555\n")
    with pytest.raises(DataError, match=r"u\.user: user 3 is on line 3 and on line 4 "):
        prepare(raw, variant="100k")


def test_the_real_100k_release_is_on_its_scale() -> None:
    shared = REPO.parent / "shared" / "data" / "movielens" / "ml-100k"
    if not (shared / "u.data").is_file():
        pytest.skip("no shared MovieLens 100K sample")
    spec = build_config(
        components={"dataset": "movielens"}, values={"dataset.raw": str(shared)}
    ).dataset
    data = get_prepared(spec, progress=False, rebuild=True)
    assert sum(data.manifest["rows"].values()) == 100_000
