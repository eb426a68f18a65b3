"""Drivers that run inside a test's own network namespace, on a loopback Ray cluster:
``python -m tests.ray_scenarios NAME WORKDIR`` prints one JSON line of what it saw."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suite.executors.loopback import LoopbackCluster


@dataclass(frozen=True)
class Probe:
    """A job that says where it ran; ``seconds`` of work, ``fail`` its own error."""

    label: str
    seconds: float = 0.0
    gpus: int = 0
    fail: bool = False
    marks: str = ""  # a folder where each attempt leaves a file


def where(probe: Probe) -> dict[str, Any]:
    import ray

    if probe.marks:
        Path(probe.marks, f"{probe.label}-{os.getpid()}-{time.time_ns()}").touch()
    time.sleep(probe.seconds)
    if probe.fail:
        raise ValueError(f"{probe.label}: its own error")
    return {
        "label": probe.label,
        "node": ray.get_runtime_context().get_node_id(),
        "gpus": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
    }


def needs(probe: Probe) -> Any:
    from suite.executors.base import Needs

    return Needs(cpus=1, gpus=probe.gpus)


def error_line(exc: BaseException) -> dict[str, Any]:
    return {"type": type(exc).__name__, "message": str(exc)}


def placement(workdir: Path) -> dict[str, Any]:
    """Tasks spread over both nodes; a GPU task lands on the node with the (logical) GPU;
    a task's own error comes back as itself, tried once; an unplaceable task is one line."""
    from suite.executors.ray_cluster import RayExecutor

    marks = workdir / "marks"
    marks.mkdir()
    out: dict[str, Any] = {}
    with LoopbackCluster(workdir, node_gpus=1) as cluster:
        executor = RayExecutor(cluster.address)
        probes = [Probe(f"cpu{i}", seconds=1.0) for i in range(4)] + [Probe("gpu", gpus=1)]
        out["ran"] = [value for _, value in executor.run(probes, where, needs)]
        try:
            list(executor.run([Probe("bad", fail=True, marks=str(marks))], where, needs))
        except ValueError as exc:
            out["own_error"] = error_line(exc)
        out["own_error_attempts"] = len(list(marks.iterdir()))
        started = time.monotonic()
        try:
            list(executor.run([Probe("two-gpus", gpus=2)], where, needs))
        except Exception as exc:
            out["unplaceable"] = error_line(exc)
        out["unplaceable_s"] = time.monotonic() - started
    return out


def node_lost(workdir: Path) -> dict[str, Any]:
    """The second node killed while it runs a job: every job completes, each yielded once.
    Then a GPU job running on the only GPU node when it dies: one line, not a hang."""
    from suite.executors.ray_cluster import RayExecutor

    out: dict[str, Any] = {}
    with LoopbackCluster(workdir, node_gpus=1) as cluster:
        executor = RayExecutor(cluster.address, unplaceable_after_s=5.0)
        marks = workdir / "marks"
        marks.mkdir()
        probes = [Probe(f"job{i}", seconds=6.0, marks=str(marks)) for i in range(4)]
        started = time.monotonic()
        results = executor.run(probes, where, needs)
        out["yielded"] = [job.label for job, _ in _kill_node_once_busy(results, marks, cluster, 2)]
        out["attempts"] = len(list(marks.iterdir()))
        out["total_s"] = time.monotonic() - started

        cluster.start_node()
        gpu_marks = workdir / "gpu-marks"
        gpu_marks.mkdir()
        started = time.monotonic()
        try:
            gpu = [Probe("gpu-job", seconds=30.0, gpus=1, marks=str(gpu_marks))]
            list(_kill_node_once_busy(executor.run(gpu, where, needs), gpu_marks, cluster, 1))
        except Exception as exc:
            out["unplaceable"] = error_line(exc)
        out["unplaceable_s"] = time.monotonic() - started
    return out


def _kill_node_once_busy(results: Any, marks: Path, cluster: LoopbackCluster, started: int) -> Any:
    """Pass ``results`` through; kill the second node once ``started`` jobs have begun."""
    import threading

    def killer() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(list(marks.iterdir())) < started:
            time.sleep(0.2)
        time.sleep(1.0)
        cluster.kill_node()

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    yield from results
    thread.join(timeout=5)


def reproduce_both(workdir: Path) -> dict[str, Any]:
    """A claim subset of ``quick`` through the local runner and through the cluster (the
    second node with a data cache of its own): what each stored."""
    from suite.cli import main
    from suite.reproduce.store import LOGITS_DIGEST
    from tests.test_reproduce_parallel import AUC_PAIR, SETS, body, figures, stored

    def run(name: str, *extra: str) -> dict[str, Any]:
        out = workdir / name
        uri = f"sqlite:///{workdir / 'mlflow.db'}"  # one store: the reports name it
        args = ["reproduce", *AUC_PAIR, "--quiet", "--out", str(out), "--tracking-uri", uri]
        code = main([*args, *SETS, *extra])
        results = stored(out)
        report = (out / "REPORT.md").read_text()
        (machine,) = re.findall(r"^\| machine .*$", report, flags=re.M)
        return {
            "code": code,
            "report": body(report.replace(machine, "")),  # the row that names the nodes
            "machine": machine,
            "nodes": sorted({str(r.environment.get("node")) for r in results.values()}),
            "runs": {
                key: {
                    "figures": figures(r),
                    "fingerprint": r.data_fingerprint,
                    "logits": r.details.get(LOGITS_DIGEST),
                }
                for key, r in results.items()
            },
        }

    local = run("local", "--workers", "1")
    node_cache = workdir / "node-cache"
    with LoopbackCluster(workdir, node_env={"RECSUITE_CACHE": str(node_cache)}) as cluster:
        on_ray = run("ray", "--executor", "ray", "--address", cluster.address)
    return {"local": local, "ray": on_ray, "node_prepared": node_cache.is_dir()}


def study_on_ray(workdir: Path) -> dict[str, Any]:
    """``suite study FILE --executor ray --address`` on the loopback cluster: six trials
    of the tiny study, the storage (SQLite) on the driver; what the storage and MLflow hold."""
    import optuna

    from suite.cli import main
    from suite.studies.on_ray import RAN_ON_ATTR
    from suite.studies.worker import METRICS_ATTR
    from tests.test_study import finished_runs, tiny_study, write_study

    study = tiny_study(workdir, name="on-ray", n_trials=6)
    path = write_study(workdir, study)
    out = workdir / "study-out"
    with LoopbackCluster(workdir) as cluster:
        args = ["study", str(path), "--executor", "ray", "--address", cluster.address]
        code = main([*args, "--quiet", "--out", str(out)])
    loaded = optuna.load_study(study_name="on-ray", storage=f"sqlite:///{out / 'optuna.db'}")
    trials = loaded.get_trials(deepcopy=False)
    _, children = finished_runs(study["base"]["tracking"]["uri"], "on-ray")
    return {
        "code": code,
        "states": [t.state.name for t in trials],
        "nodes": [t.user_attrs.get(RAN_ON_ATTR, {}).get("ray_node") for t in trials],
        "metrics": [sorted(t.user_attrs.get(METRICS_ATTR, {})) for t in trials],
        "children": sorted(c.data.tags.get("suite.trial", "") for c in children),
        "files": sorted(p.name for p in out.iterdir()),
    }


SCENARIOS = {
    "placement": placement,
    "node_lost": node_lost,
    "reproduce": reproduce_both,
    "study": study_on_ray,
}


def main() -> None:
    name, workdir = sys.argv[1], Path(sys.argv[2]).resolve()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.chdir(workdir)
    print(json.dumps(SCENARIOS[name](workdir)), flush=True)


if __name__ == "__main__":
    main()
