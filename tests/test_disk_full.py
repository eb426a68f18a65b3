"""A full disk under every writer (issue 33, item 3): one ``error:`` line naming the path
and the space, no partial file or ``.tmp-*`` directory left, the run never left RUNNING
without saying so, and a result already written kept.

Real small filesystems (a tmpfs mounted for the test; skipped where mounting is not
permitted), a real SQLite MLflow store, the real CLI in a subprocess.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from suite.config import build_config
from suite.data.source import get_prepared
from suite.engine.checkpoint import Checkpointer
from suite.errors import DiskFullError, SuiteError
from suite.fileio import write_text_atomic, writing
from suite.runs.single import execute
from suite.tracking import open_client
from tests.conftest import TINY_DATA, tiny_config, tracking_uri

REPO = Path(__file__).resolve().parents[1]
TINY_FLAGS = [f"--set=dataset.options.{k}={v}" for k, v in TINY_DATA.items()] + [
    "--batch-size=128",
    "--quiet",
    "--set=train.threads=1",
]
KIB = 1024


def _mount(directory: Path, size: str) -> Iterator[Path]:
    directory.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield directory
    finally:
        if subprocess.run(["umount", str(directory)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(directory)], capture_output=True)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs, unmounted after the test."""
    yield from _mount(tmp_path / "small", "2m")


@pytest.fixture
def store_fs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs: room for an MLflow SQLite store (~1 MiB) and its filler."""
    yield from _mount(tmp_path / "store", "4m")


def fill(directory: Path, leave: int = 0) -> Path:
    """Fill ``directory``'s filesystem with a file until about ``leave`` bytes are free
    (tmpfs counts pages), or until it is full; returns the filler."""
    filler = directory / "filler"
    stat = os.statvfs(directory)
    todo = max(stat.f_bavail * stat.f_frsize - leave, 0)
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        while todo > 0 or not leave:
            try:
                written = os.write(fd, b"\0" * (min(todo, 1 << 20) if leave else 4096))
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
            todo -= written
    finally:
        os.close(fd)
    return filler


def _leftovers(directory: Path) -> list[str]:
    """Everything under ``directory`` but the filler and checkpoint locks."""
    return sorted(
        str(p.relative_to(directory))
        for p in directory.rglob("*")
        if p.is_file() and p.name not in ("filler", "LOCK")
    )


def _suite(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(
        [sys.executable, "-m", "suite.cli", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The one ``error:`` line a failed command ends with, with no traceback before it."""
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: "), done.stderr
    return last


def _statuses(uri: str) -> list[str]:
    client = MlflowClient(tracking_uri=uri)
    ids = [e.experiment_id for e in client.search_experiments()]
    return [r.info.status for r in client.search_runs(ids)] if ids else []


# --- writers, one by one ---------------------------------------------------------------


def test_result_json_onto_a_full_disk_is_refused_in_one_line(small_fs: Path) -> None:
    fill(small_fs)
    target = small_fs / "results" / "result.json"
    with pytest.raises(DiskFullError) as caught:
        write_text_atomic(target, "x" * 20000, option="tracking.results_dir")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{target}: disk full (needs ~20 KiB, 0 KiB free)")
    assert message.endswith("free space or point tracking.results_dir elsewhere")
    assert _leftovers(small_fs) == []


def test_a_write_that_fills_the_disk_leaves_no_partial_file(small_fs: Path) -> None:
    fill(small_fs, leave=64 * KIB)
    partial = small_fs / ".result.json.tmp"
    expected = r"disk full \(\d+ KiB free\): free space or point --out elsewhere"
    with (
        pytest.raises(DiskFullError, match=expected),
        writing(small_fs / "result.json", option="--out", cleanup=[partial]),
    ):
        partial.write_bytes(b"x" * (1 << 20))  # ENOSPC part way
    assert _leftovers(small_fs) == []


def test_checkpoint_that_outgrows_the_disk_leaves_no_tmp_directory(small_fs: Path) -> None:
    """Room for the tensors' bytes but not for DCP's files around them: the write fails
    inside DCP (a ``CheckpointException``, a ``BaseException``), not in the early check."""
    fill(small_fs, leave=300 * KIB)
    checkpoints = Checkpointer(small_fs / "ckpt", {"config_hash": "h", "data_fingerprint": "f"})
    tensors = {f"t{i}": torch.zeros(256) for i in range(200)}  # 200 KiB of data
    with pytest.raises(DiskFullError) as caught:
        checkpoints.store.publish("best-000000001", tensors, {"kind": "best"})
    checkpoints.close()
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"cannot write checkpoint {small_fs / 'ckpt' / 'best-000000001'}:")
    assert "disk full" in message and "point train.checkpoint_dir elsewhere" in message
    assert "needs ~200 KiB of data plus overhead" in message  # the tensors fitted, DCP's files not
    assert not list((small_fs / "ckpt").glob(".tmp-*"))


# --- whole commands --------------------------------------------------------------------


@pytest.mark.slow
def test_prepare_onto_a_full_disk_says_so_in_one_line(tmp_path: Path, small_fs: Path) -> None:
    fill(small_fs, leave=256 * KIB)  # the tiny dataset takes ~1 MiB
    options = [f"--set={k}={v}" for k, v in TINY_DATA.items()]
    done = _suite(
        tmp_path, "prepare", "criteo-synth", "--cache-dir", str(small_fs), "--quiet", *options
    )
    line = _error_line(done)
    assert line.startswith(f"error: {small_fs}/criteo-synth: disk full (needs ~")
    assert "point dataset.cache_dir (--cache-dir) elsewhere" in line
    assert _leftovers(small_fs) == []
    assert not [p for p in small_fs.rglob("*") if ".tmp-" in p.name or ".spill-" in p.name]


@pytest.mark.slow
def test_full_checkpoint_disk_fails_the_run_in_one_line(tmp_path: Path, small_fs: Path) -> None:
    fill(small_fs, leave=300 * KIB)  # a checkpoint of the tiny model: ~1.3 MiB
    uri = tracking_uri(tmp_path)
    flags = [
        f"--set=train.checkpoint_dir={small_fs}/ckpt",
        "--set=train.checkpoint_every=20",
        "--set=train.checkpoint=best",
    ]
    done = _suite(tmp_path, "run", "--tracking-uri", uri, *TINY_FLAGS, *flags)
    line = _error_line(done)
    assert line.startswith(f"error: cannot write checkpoint {small_fs}/ckpt/")
    assert "disk full (needs ~" in line and "point train.checkpoint_dir elsewhere" in line
    assert _leftovers(small_fs) == [] and not list(small_fs.rglob(".tmp-*"))
    assert _statuses(uri) == ["FAILED"]


@pytest.mark.slow
def test_full_results_dir_fails_the_run_in_one_line(tmp_path: Path, small_fs: Path) -> None:
    """Refused before training (issue 71): no MLflow run, no figures lost."""
    fill(small_fs)
    uri = tracking_uri(tmp_path)
    results = small_fs / "results"
    done = _suite(
        tmp_path, "run", "--tracking-uri", uri, f"--set=tracking.results_dir={results}", *TINY_FLAGS
    )
    line = _error_line(done)
    assert line.startswith(f"error: {results}/") and ": disk full (needs ~" in line
    assert "point tracking.results_dir elsewhere" in line
    assert _leftovers(small_fs) == []
    assert _statuses(uri) == []


@pytest.mark.slow
def test_full_out_fails_the_run_in_one_line_and_keeps_the_result(
    tmp_path: Path, small_fs: Path
) -> None:
    """``--out`` on a disk that fills during training (a full one is refused before it):
    the line names the file, its size and ``--out``; the result under
    ``tracking.results_dir`` (another disk) was written first and is kept."""
    uri = tracking_uri(tmp_path)
    out = small_fs / "out" / "result.json"
    fill(small_fs)
    refused = _error_line(_suite(tmp_path, "run", "--no-tracking", "--out", str(out), *TINY_FLAGS))
    assert refused.startswith(f"error: {out}: disk full") and "point --out elsewhere" in refused
    assert not list((tmp_path / "results").rglob("*.json"))  # refused before training
    (small_fs / "filler").unlink()
    config = tiny_config(tracking=True, overrides=[f"tracking.uri={uri}"])
    filled: list[Path] = []

    def fill_once(metrics: dict[str, float], step: int) -> None:
        if not filled:
            filled.append(fill(small_fs))

    with pytest.raises(DiskFullError) as caught:
        execute(config, out=out, on_validation=fill_once)
    line = str(caught.value)
    assert line.startswith(f"{out}: disk full (needs ~") and "KiB, 0 KiB free)" in line
    assert "point --out elsewhere" in line
    kept = sorted((tmp_path / "results").rglob("*.json"))
    assert len(kept) == 1
    assert line.endswith(f"the result was written and is kept: {kept[0].relative_to(tmp_path)}")
    filled[0].unlink()
    assert _leftovers(small_fs) == []
    assert _statuses(uri) == ["FAILED"]


@pytest.mark.slow
def test_store_filling_mid_run_keeps_the_result(tmp_path: Path, store_fs: Path) -> None:
    """The store's disk fills at the first validation: the run's end cannot reach the
    store, the error is one line saying so, the result JSON (on another disk) is kept, and
    the run is FAILED all the same (its status written in place)."""
    uri = f"sqlite:///{store_fs / 'mlflow.db'}"
    open_client(uri)  # the store exists before its disk fills
    config = tiny_config(tracking=True, overrides=[f"tracking.uri={uri}"])
    filled: list[Path] = []

    def fill_once(metrics: dict[str, float], step: int) -> None:
        if not filled:
            filled.append(fill(store_fs))

    with pytest.raises(SuiteError) as caught:
        execute(config, on_validation=fill_once)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"MLflow tracking store {uri}: cannot ")
    assert f"{store_fs / 'mlflow.db'}: disk full (needs over ~" in message
    assert "point --tracking-uri elsewhere" in message
    kept = sorted((tmp_path / "results").rglob("*.json"))
    assert len(kept) == 1
    assert f"the result was written and is kept: {kept[0].relative_to(tmp_path)}" in message
    filled[0].unlink()
    # MLflow's own write of the status fails on the full disk; it is written in place
    assert _statuses(uri) == ["FAILED"]
    assert "stays RUNNING" not in message


def test_preparing_raw_files_onto_a_full_disk_leaves_nothing(
    tmp_path: Path, small_fs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Raw Criteo rows through the read / spill / write pipeline into a slot on a disk
    with less room than the spilled and prepared arrays (~160 bytes a row each)."""
    fill(small_fs, leave=512 * KIB)
    monkeypatch.setenv("RECSUITE_CACHE", str(small_fs))
    raw = tmp_path / "train.txt"
    lines = (
        "\t".join([str(i % 2), *(str(i % 7) for _ in range(13)), *(f"{i % 97:08x}",) * 26])
        for i in range(8000)
    )
    raw.write_text("\n".join(lines) + "\n")
    dataset = build_config(
        components={"dataset": "criteo-kaggle"}, values={"dataset.raw": str(raw)}
    ).dataset
    with pytest.raises(DiskFullError) as caught:
        get_prepared(dataset, progress=False, rebuild=True)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{small_fs}/criteo-kaggle")
    assert (
        "disk full (needs " in message
        and "point dataset.cache_dir (--cache-dir) elsewhere" in message
    )
    assert _leftovers(small_fs) == []
    assert not [p for p in small_fs.rglob("*") if ".tmp-" in p.name or ".spill-" in p.name]


# --- the other writers: store creation, leaderboard pages and files, figures --------------


def test_a_new_store_on_a_full_disk_is_one_line_and_leaves_no_init_file(small_fs: Path) -> None:
    """The store is built under ``.mlflow.db.init-<pid>`` and renamed: a build the disk
    refuses removes that file and its journal, not only the next build."""
    fill(small_fs)
    uri = f"sqlite:///{small_fs / 'mlflow.db'}"
    with pytest.raises(DiskFullError) as caught:
        open_client(uri)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"MLflow tracking store {uri}: cannot open")
    assert "disk full (needs over ~" in message and "point --tracking-uri elsewhere" in message
    # no .mlflow.db.init-<pid>, no -journal, no mlflow.db, no lock file (issue 71)
    assert _leftovers(small_fs) == []
    (small_fs / "filler").unlink()
    client, _ = open_client(uri)  # with room again, the store is built and opens
    assert client.search_experiments()
    assert _leftovers(small_fs) == ["mlflow.db"]


def test_leaderboard_render_onto_a_full_disk_is_one_line(
    tmp_path: Path, small_fs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from suite.cli import main
    from suite.leaderboard.submit import write_submission
    from tests.test_leaderboard_render import sample_items
    from tests.test_leaderboard_validate import registry_for

    board = tmp_path / "leaderboard"
    items = sample_items()
    for item in items:
        write_submission(item.sub, board)
    registry_for(*(i.sub for i in items)).save(board / "fingerprints.yaml")
    fill(small_fs)
    pages = small_fs / "pages"
    argv = ["leaderboard", "render", "--leaderboard-dir", str(board), "--out", str(pages)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # after the board's "unverified" warnings
    assert "Traceback" not in err and err.count("error: ") == 1
    assert last.startswith(f"error: {pages}/README.md: disk full (needs ~")
    assert last.endswith("free space or point --out elsewhere")
    assert _leftovers(small_fs) == []


def test_submission_onto_a_full_disk_is_one_line(small_fs: Path) -> None:
    from suite.leaderboard.submit import write_submission
    from tests.test_leaderboard_validate import make_submission

    fill(small_fs)
    board = small_fs / "leaderboard"
    with pytest.raises(DiskFullError) as caught:
        write_submission(make_submission("Ada"), board)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{board / 'submissions'}/")
    assert "disk full (needs ~" in message and "point --leaderboard-dir elsewhere" in message
    assert _leftovers(small_fs) == []


def test_a_figure_onto_a_full_disk_is_one_line_and_leaves_no_partial_file(
    small_fs: Path,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from suite.figures import save_figure

    fig, ax = plt.subplots()
    ax.plot(range(100))
    fill(small_fs, leave=8 * KIB)  # a 300 dpi PNG of it takes ~60 KiB
    with pytest.raises(DiskFullError) as caught:
        save_figure(fig, small_fs / "plot.png", option="--out")
    plt.close(fig)
    message = str(caught.value)
    assert message.startswith(f"{small_fs / 'plot.png'}: disk full (needs ~")
    assert message.endswith("point --out elsewhere")
    assert _leftovers(small_fs) == []
