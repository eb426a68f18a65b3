"""Distributed runs on TorchRec: real ``torchrun`` ranks over gloo on CPU, real DMP."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from mlflow.tracking import MlflowClient

from suite.data.loader import BatchLoader
from suite.data.prepared import SplitArrays
from suite.engine.distributed import check_distributed
from suite.engine.parallel import Parallel, gather_to_file, spawn_gloo
from suite.engine.planning import constraints
from suite.errors import ConfigError
from suite.runs.launch import torchrun_command, without_nproc
from suite.runs.single import execute
from tests.conftest import tiny_config, tracking_uri
from tests.test_clean_streams import parse_result
from tests.test_resume import _finish, _suite

REPO = Path(__file__).resolve().parents[1]

pytest.importorskip("torchrec", reason="distributed runs need torchrec (nox installs it)")


def _split(rows: int) -> SplitArrays:
    rng = np.random.default_rng(0)
    return SplitArrays(
        dense=rng.random((rows, 2), dtype=np.float32),
        sparse=np.arange(rows, dtype=np.int64)[:, None] * np.ones((1, 3), dtype=np.int64),
        label=(rng.random(rows) < 0.3).astype(np.float32),
    )


@pytest.mark.parametrize("rows,batch,world", [(103, 16, 2), (50, 7, 3), (5, 4, 2), (1, 8, 4)])
def test_ranks_parts_make_up_each_global_batch(rows: int, batch: int, world: int) -> None:
    split = _split(rows)
    whole = list(BatchLoader(split, batch, shuffle=True, seed=3))
    parts = [list(BatchLoader(split, batch, True, 3, part=(r, world))) for r in range(world)]
    for b, full in enumerate(whole):
        shapes = {len(parts[r][b]) for r in range(world)}
        assert len(shapes) == 1, "every rank's part of a batch has one shape"
        real = [parts[r][b].sparse[parts[r][b].weight > 0] for r in range(world)]
        assert torch.equal(torch.cat(real), full.sparse)
        assert all(parts[r][b].loss_norm == len(full) / world for r in range(world))
        assert sum(parts[r][b].rows for r in range(world)) == len(full)
        sizes = Parallel(0, world).part_sizes(len(full))
        assert [parts[r][b].rows for r in range(world)] == sizes


def test_torchrun_command_drops_the_flag_and_keeps_the_rest() -> None:
    argv = ["run", "--nproc-per-node", "2", "--set", "a=1", "--nproc-per-node=3", "--quiet"]
    assert without_nproc(argv) == ["run", "--set", "a=1", "--quiet"]
    command = torchrun_command(argv, 2)
    assert command[1:3] == ["-m", "torch.distributed.run"]
    assert "--nproc-per-node=2" in command
    assert command[-4:] == ["run", "--set", "a=1", "--quiet"]


def test_unknown_table_in_sharding_override_is_named() -> None:
    config = tiny_config(overrides=["sharding.tables.C99=row_wise"])
    with pytest.raises(ConfigError, match=r"sharding\.tables: no table named C99"):
        constraints(config.sharding, ["C1", "C2"], [16, 16], 2)


def test_column_wise_splits_columns_over_the_ranks() -> None:
    config = tiny_config(overrides=["sharding.default=column_wise"])
    made = constraints(config.sharding, ["C1"], [16], 2)
    assert made["C1"].sharding_types == ["column_wise"]
    assert made["C1"].min_partition == 8


def test_tasks_that_run_in_one_process_are_refused_in_one_line_and_checkpoints_are_not() -> None:
    with pytest.raises(ConfigError, match="task.name=memory runs in one process"):
        check_distributed(tiny_config(task="memory"), Parallel(0, 2))
    check_distributed(tiny_config(overrides=["train.checkpoint_every=5"]), Parallel(0, 2))


def _distributed(
    tmp_path: Path, config_path: Path, extra: list[str], out: Path
) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
        "RECSUITE_CACHE": os.environ["RECSUITE_CACHE"],
    }
    code = "import sys; from suite.cli import main; sys.exit(main())"
    args = ["run", "--config", str(config_path), "--nproc-per-node", "2", "--out", str(out)]
    proc = subprocess.run(
        [sys.executable, "-c", code, *args, *extra],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _one_process(
    tmp_path: Path, overrides: list[str], tracking: bool = False
) -> tuple[Path, dict[str, float]]:
    config = tiny_config(tracking=tracking, overrides=overrides)
    path = tmp_path / "config.yaml"
    path.write_text(config.to_yaml())
    single = execute(config)
    return path, single.metrics


def test_two_ranks_reach_the_one_process_auc_and_record_one_run(isolated: Path) -> None:
    config_path, single = _one_process(isolated, [], tracking=True)
    uri = tracking_uri(isolated / "dist")
    out = isolated / "dist.json"
    results = isolated / "dist-results"
    proc = _distributed(
        isolated,
        config_path,
        ["--tracking-uri", uri, "--set", f"tracking.results_dir={results}"],
        out,
    )
    result = json.loads(out.read_text())
    assert abs(result["metrics"]["test_auc"] - single["test_auc"]) <= 1e-3
    for same in ("flops_per_example", "embedding_bytes", "embedding_optimizer_bytes"):
        assert result["metrics"][same] == single[same], same  # the whole model's, not a rank's
    assert result["details"]["world_size"] == 2
    parsed = parse_result(proc.stdout)  # stdout: rank 0's result lines only
    assert "test_auc" in parsed["metrics"] and proc.stdout.count("test_auc") == 1
    assert "sharding plan over 2 ranks" in proc.stderr
    assert len(list(results.rglob("*.json"))) == 1, "rank 0 alone writes results"
    client = MlflowClient(uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.data.tags["suite.world_size"] == "2"
    assert run.data.metrics["test_auc"] == pytest.approx(result["metrics"]["test_auc"])
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"sharding_plan.txt", "sharding_plan.json"} <= artifacts


def test_row_wise_and_column_wise_plans_run(isolated: Path) -> None:
    # element-wise Adagrad: a column shard's update is the whole row's (row-wise Adagrad
    # keeps one accumulator per row per column shard, a different optimizer)
    overrides = [
        "sharding.default=row_wise",
        "sharding.tables.C2=column_wise",
        "train.sparse_optimizer=adagrad",
    ]
    config_path, single = _one_process(isolated, overrides)
    out = isolated / "dist.json"
    _distributed(isolated, config_path, ["--no-tracking"], out)
    result = json.loads(out.read_text())
    plan = {t["table"]: t for t in result["details"]["sharding_plan"]["tables"]}
    assert plan["C2"]["type"] == "column_wise" and plan["C2"]["ranks"] == [0, 1]
    row_wise = [t for name, t in plan.items() if name != "C2"]
    assert {t["type"] for t in row_wise} == {"row_wise"}
    assert all(t["ranks"] == [0, 1] for t in row_wise)
    assert abs(result["metrics"]["test_auc"] - single["test_auc"]) <= 1e-3


def test_half_precision_codec_goes_through_torchrec_quantized_all_to_all(isolated: Path) -> None:
    config_path, _ = _one_process(isolated, ["comm.codec=bf16"])
    out = isolated / "dist.json"
    proc = _distributed(isolated, config_path, ["--no-tracking"], out)
    result = json.loads(out.read_text())
    # gloo has no bf16 collectives: TorchRec sends fp16 on CPU, and the plan says so
    assert result["details"]["sharding_plan"]["all_to_all"].startswith(
        "TorchRec quantized comms, fp16"
    )
    assert "embedding all-to-all: TorchRec quantized comms, fp16" in proc.stderr
    metrics = result["metrics"]
    assert 0.0 < metrics["test_auc"] < 1.0
    # counted on TorchRec's codec: fp32 payloads in, fp16 on the wire, forward and backward
    assert metrics["comm_raw_bytes"] > 0
    assert metrics["comm_wire_bytes"] * 2 == metrics["comm_raw_bytes"]
    assert metrics["comm_compression_ratio"] == 2.0
    assert metrics["comm_codec_seconds"] > 0
    assert "comm_max_bound_excess" not in metrics, "no simulated codec on top of the wire"


def test_methods_that_cannot_shard_are_refused_before_any_process_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from suite.cli import main

    code = main(["run", "--embedding", "fiited", "--nproc-per-node", "2", "--no-tracking"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err == [
        "error: embedding.name=fiited cannot run sharded: its storage is not table-batched "
        "physical tables (sharded methods: full, hash, mixed_dim, qr)"
    ]


def test_tables_are_named_after_their_features() -> None:
    from suite.embeddings.base import EmbeddingContext
    from suite.embeddings.qr import QREmbedding
    from suite.engine.distributed import table_names

    context = EmbeddingContext(cardinalities=[5, 1000], device=torch.device("cpu"), seed=0)
    method = QREmbedding(QREmbedding.Options(threshold=10), context)
    assert table_names(method, ["C1", "C2"]) == ["C1", "C2_0", "C2_1"]


@pytest.mark.parametrize(
    "extra", [["--seeds", "1,2"], ["--repeats", "2"], ["--nproc-per-node", "0"]]
)
def test_what_a_distributed_run_cannot_take_is_refused_in_one_line(
    extra: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from suite.cli import main

    flags = ["--nproc-per-node", "2"] if "--nproc-per-node" not in extra else []
    assert main(["run", "--no-tracking", *flags, *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")


def _shards_against_one_process(rank: int, world: int, overrides: list[str], out: str) -> None:
    from suite.data.source import get_prepared
    from suite.engine.build import build_model

    config = tiny_config(overrides=overrides)
    data = get_prepared(config.dataset, progress=False)
    sharded = build_model(config, data, Parallel(rank, world))
    whole = build_model(config, data).embedding.tables.weights()  # type: ignore[union-attr]
    figures = {}
    for t, name in enumerate(sharded.embedding.names):  # type: ignore[union-attr]
        pieces = sharded.table_shards().get(name, [])  # type: ignore[operator]
        figures[name] = [
            [
                r0,
                c0,
                *piece.shape,
                bool(torch.equal(piece, whole[t][r0 : r0 + len(piece), c0 : c0 + piece.shape[1]])),
            ]
            for r0, c0, piece in pieces
        ]
    gather_to_file(rank, figures, out)


def test_each_rank_starts_its_shards_from_the_one_process_values(isolated: Path) -> None:
    overrides = ["sharding.default=row_wise", "sharding.tables.C2=column_wise"]
    overrides += ["sharding.tables.C3=table_wise", "embedding.options.dim=16"]
    prepare = tiny_config(overrides=overrides)
    from suite.data.source import get_prepared

    rows = get_prepared(prepare.dataset, progress=False).schema.cardinalities
    out = isolated / "shards.json"
    spawn_gloo(_shards_against_one_process, 2, overrides, str(out))
    ranks = json.loads(out.read_text())
    for t, name in enumerate(ranks[0]):
        pieces = [p for figures in ranks for p in figures[name]]
        assert pieces and all(p[-1] for p in pieces), f"{name}: {pieces}"
        covered = sum(p[2] * p[3] for p in pieces)
        assert covered == rows[t] * 16, f"{name}: the ranks' pieces cover the table once"
    c2 = [p for figures in ranks for p in figures["C2"]]
    assert len(c2) == 2 and {p[1] for p in c2} == {0, 8}, "column-wise: two column halves"
    assert sum(bool(figures["C3"]) for figures in ranks) == 1, "table-wise: one rank holds it"


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's VmHWM")
def test_a_rank_never_holds_the_whole_tables(isolated: Path) -> None:
    from benchmarks.bench_shard_memory import bench_config, measure
    from suite.data.source import get_prepared

    get_prepared(bench_config(0.05, 64).dataset, progress=False)  # 415 MiB of tables
    ranks = measure(2, 0.05, 64)
    table_bytes = ranks[0]["table_bytes"]
    assert sum(r["local_bytes"] for r in ranks) == table_bytes, "row-wise: each row once"
    for rank in ranks:
        # its half of the tables, plus pieces being drawn; before, a rank built every table,
        # copied it and then sharded it (2.6x the tables at its peak)
        assert rank["peak_growth"] < 0.8 * table_bytes, (rank, table_bytes)


RESUME = [
    "sharding.default=row_wise",
    "sharding.tables.C2=column_wise",
    "train.max_steps=30",
    "train.eval_every_steps=10",
    "train.checkpoint_every=10",
]


class _Stop(Exception):
    pass


def _train_stop_resume(rank: int, world: int, root: str, out: str) -> None:
    """Train 30 steps straight; again, stopped at step 20 (after the checkpoint of step 10;
    rank 0 then one checkpoint ahead, as a kill between the ranks' writes leaves it); and
    resumed. Gathers whether the resumed run ends with the straight run's bits."""
    from suite.data.source import get_prepared
    from suite.engine.build import build_model
    from suite.engine.checkpoint import run_checkpoints
    from suite.engine.train import train

    config = tiny_config(overrides=[*RESUME, f"train.checkpoint_dir={root}"])
    data = get_prepared(config.dataset, progress=False)
    parallel, cpu = Parallel(rank, world), torch.device("cpu")

    def run(stop_at: int | None = None, resume: bool = False):
        model = build_model(config, data, parallel)
        checkpoints = run_checkpoints(config, data.fingerprint, resume, parallel)

        def stop(metrics: dict[str, float], step: int) -> None:
            if step == stop_at:
                raise _Stop

        try:
            outcome = train(
                model,
                data,
                config.train,
                config.seed,
                cpu,
                on_validation=stop,
                checkpoints=checkpoints,
            )
        except _Stop:
            checkpoints.close()  # type: ignore[union-attr]
            return None, None
        checkpoints.close()  # type: ignore[union-attr]
        return model, outcome

    rank_dir = Path(root) / config.config_hash() / f"rank-{rank}-of-{world}"
    straight, straight_outcome = run()
    for path in rank_dir.glob("ckpt-*"):  # a finished run's checkpoints are removed
        shutil.rmtree(path)
    run(stop_at=20)
    written = sorted(p.name for p in rank_dir.glob("ckpt-*"))
    if rank == 0:  # ahead of rank 1: a checkpoint the other rank never wrote
        shutil.copytree(rank_dir / written[-1], rank_dir / "ckpt-000099")
    parallel.barrier()
    resumed, outcome = run(resume=True)
    mine, theirs = straight.local_state(), resumed.local_state()
    same = mine.keys() == theirs.keys() and all(torch.equal(v, theirs[k]) for k, v in mine.items())
    figures = {
        "written": written,
        "left": sorted(p.name for p in rank_dir.glob("ckpt-*")),
        "same_bits": same,
        "history_same": straight_outcome.history == outcome.history,
        "steps": outcome.steps,
    }
    gather_to_file(rank, figures, out)


def test_a_stopped_distributed_run_resumes_to_the_straight_runs_bits(isolated: Path) -> None:
    from suite.data.source import get_prepared

    get_prepared(tiny_config().dataset, progress=False)
    out = isolated / "resume.json"
    spawn_gloo(_train_stop_resume, 2, str(isolated / "checkpoints"), str(out))
    ranks = json.loads(out.read_text())
    for rank in ranks:
        assert rank["written"] == ["ckpt-000001"], "step 10's, before the stop at 20"
        assert rank["same_bits"] and rank["history_same"] and rank["steps"] == 30, rank
        # the ranks went on from the one they share (rank 0's extra one dropped): 20 and 30
        assert rank["left"] == ["ckpt-000003"], rank


def _process_tree(pid: int) -> list[int]:
    """``pid`` and every process below it (torchrun starts its ranks in sessions of their
    own, so a process group does not reach them)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop())
        todo += children.get(tree[-1], [])
    return tree


KILLED_RUN = [
    "run",
    "--dataset=criteo-synth",
    "--set=dataset.options.train_rows=8000",
    "--set=dataset.options.val_rows=1000",
    "--set=dataset.options.test_rows=1000",
    "--set=dataset.options.vocab_scale=0.0002",
    "--set=dataset.options.keep_below=200",
    "--batch-size=32",
    "--epochs=2",
    "--set=train.eval_every_steps=100",
    "--set=train.progress=false",
    "--set=train.checkpoint_every=25",
    "--nproc-per-node=2",
]


@pytest.mark.slow  # three 2-rank torchrun jobs
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the ranks in /proc")
def test_sigkilled_distributed_run_resumes_bit_identical_in_one_mlflow_run(tmp_path: Path) -> None:
    def steps(root: Path) -> set[int]:
        found = set()
        for manifest in root.glob("checkpoints/*/rank-*/ckpt-*/manifest.json"):
            try:
                found.add(json.loads(manifest.read_text())["loop"]["step"])
            except (OSError, ValueError, KeyError):
                continue
        return found

    ref, run = tmp_path / "ref", tmp_path / "killed"
    ref.mkdir(), run.mkdir()
    _finish(_suite([*KILLED_RUN, f"--out={ref / 'result.json'}"], ref, tracking_uri(ref)))
    assert not list(ref.glob("checkpoints/*")), "a finished run keeps no checkpoints"

    uri = tracking_uri(run)
    proc = _suite(KILLED_RUN, run, uri)
    deadline = time.monotonic() + 300
    while not any(s >= 100 for s in steps(run)):  # 250 steps an epoch: mid-epoch
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.02)
    for pid in _process_tree(proc.pid):  # the launcher, torchrun and both ranks at once
        os.kill(pid, signal.SIGKILL)
    proc.wait()
    client = MlflowClient(uri)
    (killed,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert killed.info.status == "RUNNING"  # SIGKILL cannot be caught

    out = run / "result.json"
    _finish(_suite(["resume", killed.info.run_id, f"--out={out}"], run, uri))
    expected, got = json.loads((ref / "result.json").read_text()), json.loads(out.read_text())
    for name, value in expected["metrics"].items():
        if name != "train_samples_per_s":  # wall-clock
            assert got["metrics"][name] == value, name  # bit for bit
    assert got["details"]["validation_history"] == expected["details"]["validation_history"]
    (finished,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert finished.info.run_id == killed.info.run_id == got["mlflow_run_id"]
    assert finished.info.status == "FINISHED"
    assert not list(run.glob("checkpoints/*")), "and it keeps no checkpoints"


def test_resuming_on_another_number_of_ranks_is_refused_in_one_line(tmp_path: Path) -> None:
    from suite.engine.checkpoint import CheckpointError, run_checkpoints

    config = tiny_config(overrides=[f"train.checkpoint_dir={tmp_path}"])
    for rank in range(2):
        (tmp_path / config.config_hash() / f"rank-{rank}-of-2" / "ckpt-000001").mkdir(parents=True)
    with pytest.raises(CheckpointError) as refused:
        run_checkpoints(config, "fingerprint", resume=True)  # one process
    message = str(refused.value)
    assert "\n" not in message
    assert message.endswith("a run on 2 ranks; resume it on 2 (--nproc-per-node 2), not 1")


def _due_by_the_clock(rank: int, world: int, root: str, out: str) -> None:
    from suite.engine.checkpoint import Checkpointer, CheckpointEvery

    checkpoints = Checkpointer(
        Path(root) / f"rank-{rank}", {}, CheckpointEvery(seconds=60.0), ranks=Parallel(rank, world)
    )
    if rank == 0:  # this rank's clock says a minute has passed, the other's does not
        checkpoints._last_time -= 120
    gather_to_file(rank, [checkpoints.due(1), checkpoints.due(2)], out)
    checkpoints.close()


def test_ranks_agree_on_a_time_interval_whatever_their_clocks(tmp_path: Path) -> None:
    out = tmp_path / "due.json"
    spawn_gloo(_due_by_the_clock, 2, str(tmp_path), str(out))
    assert json.loads(out.read_text()) == [[True, True], [True, True]]
