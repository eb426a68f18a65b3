"""Executors: every GPU of one box for local workers, and a real two-node Ray cluster on
loopback inside the test's own network namespace (skipped, with the reason, where
``unshare --net`` is not allowed or Ray is not installed)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from suite.errors import ConfigError
from suite.executors.base import Needs
from suite.executors.factory import make_executor
from suite.executors.local import LocalExecutor, worker_devices
from suite.executors.loopback import netns_unavailable
from tests.netns import run_in_netns


def device_of(seconds: float) -> tuple[int, str]:
    time.sleep(seconds)
    return os.getpid(), os.environ.get("CUDA_VISIBLE_DEVICES", "")


def one_gpu(_: float) -> Needs:
    return Needs(cpus=1, gpus=1)


def test_each_local_worker_gets_its_own_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two workers over logical GPUs 3 and 5: each worker process sees one GPU, and the
    two see different ones."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    seen = [value for _, value in LocalExecutor(2).run([1.0] * 4, device_of, one_gpu)]
    by_worker = {pid: device for pid, device in seen}
    assert len(by_worker) == 2
    assert sorted(by_worker.values()) == ["3", "5"]


def test_more_workers_than_gpus_share_them_round_robin() -> None:
    assert worker_devices(3, ["0", "1"]) == ["0", "1", "0"]
    with pytest.raises(ValueError, match="no GPU"):
        worker_devices(2, [])


def test_executor_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="expected one of local, ray"):
        make_executor("slurm", 1)
    with pytest.raises(ConfigError, match="--executor ray"):
        make_executor("local", 1, address="127.0.0.1:6379")


CLUSTER = pytest.mark.skipif(bool(netns_unavailable()), reason=str(netns_unavailable()))


@CLUSTER
@pytest.mark.cluster
def test_ray_places_jobs_on_both_nodes_and_fails_cleanly(tmp_path: Path) -> None:
    seen = run_in_netns(["-m", "tests.ray_scenarios", "placement", str(tmp_path)])
    nodes = {r["node"] for r in seen["ran"]}
    assert len(nodes) == 2, seen["ran"]  # four 1-second jobs over two one-CPU nodes
    (gpu,) = [r for r in seen["ran"] if r["label"] == "gpu"]
    assert gpu["gpus"] == "0"  # the logical GPU of the second node
    # the job's own error comes back as itself, tried once, not retried
    assert seen["own_error"] == {"type": "ValueError", "message": "bad: its own error"}
    assert seen["own_error_attempts"] == 1
    # a job no node can ever place: one line at once, not a hang
    assert seen["unplaceable"]["type"] == "SuiteError"
    assert "needs 1 CPU and 2 GPUs on one node" in seen["unplaceable"]["message"]
    assert "\n" not in seen["unplaceable"]["message"] and seen["unplaceable_s"] < 5


@CLUSTER
@pytest.mark.cluster
def test_a_lost_node_loses_no_job_and_duplicates_none(tmp_path: Path) -> None:
    seen = run_in_netns(["-m", "tests.ray_scenarios", "node_lost", str(tmp_path)])
    assert sorted(seen["yielded"]) == ["job0", "job1", "job2", "job3"]  # each once
    assert seen["attempts"] >= 5  # the job on the killed node began again elsewhere
    # the GPU job whose only GPU node died: one line within Ray's death detection + 5 s
    assert "gpu-job needs 1 CPU and 1 GPU" in seen["unplaceable"]["message"]
    assert seen["unplaceable_s"] < 60


@CLUSTER
@pytest.mark.cluster
def test_a_quick_claim_through_ray_stores_what_the_local_runner_stores(tmp_path: Path) -> None:
    """``suite reproduce --profile quick --claim qr-above-hash-2 --executor ray --address``
    on the loopback cluster, the second node preparing the data in a cache of its own:
    every stored run (figures, data fingerprint, test logits' digest) and the report equal
    the local runner's, but for the machine row, which names the two nodes the jobs ran on."""
    seen = run_in_netns(["-m", "tests.ray_scenarios", "reproduce", str(tmp_path)])
    assert seen["local"]["code"] == seen["ray"]["code"] == 0
    assert seen["node_prepared"]  # no shared data cache: the node prepared its own
    assert len(seen["local"]["runs"]) == 10  # two runs x five seeds
    assert seen["ray"]["runs"] == seen["local"]["runs"]
    assert seen["ray"]["report"] == seen["local"]["report"]
    # each job recorded its node; the machine row names both, and the local one neither
    assert len(seen["ray"]["nodes"]) == 2 and all("/ray:" in n for n in seen["ray"]["nodes"])
    assert "cpu of " in seen["ray"]["machine"] and "jobs on" not in seen["local"]["machine"]


@CLUSTER
@pytest.mark.cluster
def test_a_study_on_ray_runs_its_trials_on_both_nodes(tmp_path: Path) -> None:
    """``suite study FILE --executor ray --address`` with six trials on two one-CPU nodes:
    the study completes with six COMPLETE trials in the driver's SQLite storage, each with
    its metrics and its MLflow child run, and the trials ran on both nodes."""
    seen = run_in_netns(["-m", "tests.ray_scenarios", "study", str(tmp_path)])
    assert seen["code"] == 0
    assert seen["states"] == ["COMPLETE"] * 6
    assert len(set(seen["nodes"])) == 2 and None not in seen["nodes"], seen["nodes"]
    assert all("val_auc" in m and "embedding_bytes" in m for m in seen["metrics"])
    assert seen["children"] == sorted(str(n) for n in range(6))
    assert "trials.csv" in seen["files"] and "optuna.db" in seen["files"]


@CLUSTER
@pytest.mark.cluster
def test_the_overhead_benchmark_times_local_and_ray_passes_of_the_same_jobs(
    tmp_path: Path,
) -> None:
    """``benchmarks/bench_ray_overhead.py`` on a tiny claim subset: three passes of the same
    ten jobs (local 1 worker, local 2 workers, Ray on two one-CPU nodes in its own network
    namespace) that store the same AUCs, both nodes used, and the figures it prints."""
    import subprocess
    import sys

    from tests.netns import ROOT
    from tests.test_reproduce_parallel import AUC_PAIR, SETS

    command = [sys.executable, str(ROOT / "benchmarks/bench_ray_overhead.py"), "--profile", "quick"]
    command += [*AUC_PAIR, *SETS, "--empty", "5", "--workdir", str(tmp_path), "--no-write"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    figures = dict(line.split() for line in lines[2:-1] if len(line.split()) == 2)
    assert figures["jobs"] == "10" and figures["ray_nodes_used"] == "2"
    for name in ("local_wall_s", "local_2_workers_wall_s", "ray_wall_s", "wall_ratio"):
        assert float(figures[name]) > 0, name
    assert 0 < float(figures["round_trip_s_median"]) < 1
    assert lines[-1] == "metrics that differ between the passes (AUCs never): none"
