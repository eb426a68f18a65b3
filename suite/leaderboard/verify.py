"""Re-running one recorded seed of a submission and comparing its metrics.

The seed runs through the ordinary run path (``validate_config`` -> ``execute``), tracked
like any run (tagged ``suite.verify_of``). Before training, the prepared data's
fingerprint must equal the recorded one.

Comparison rules:

* a CPU submission re-run on CPU must reproduce every compared metric exactly (the CPU
  path is deterministic for a fixed seed and thread count; the recorded thread count is
  used when the config leaves it open);
* otherwise (a GPU submission, or a re-run on another device) a metric may differ by at
  most ``DEFAULT_TOLERANCE`` = 1e-3 absolute (e.g. AUC and log loss), or ``--tolerance``;
* size metrics (``*bytes``, ``*flops_per_example``, ``*params``) are exact everywhere;
* machine-dependent timings (``*per_s``, ``*_s``, ``*_seconds``, ``*_ms``, ``*latency``,
  ``*throughput``, ``*time``) are reported but never compared.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite.config import validate_config
from suite.errors import SuiteError
from suite.leaderboard.schema import Submission
from suite.leaderboard.validate import check_config, load_submission
from suite.results import TaskResult

DEFAULT_TOLERANCE = 1e-3
MEASURED = re.compile(r"(per_s|_s|_seconds|_ms|latency|throughput|time)$")
ALWAYS_EXACT = re.compile(r"(bytes|flops_per_example|params)$")


@dataclass(frozen=True)
class Comparison:
    metric: str
    recorded: float
    rerun: float | None
    tolerance: float | None  # None: not compared (a timing); 0.0: exact

    @property
    def ok(self) -> bool:
        if self.tolerance is None:
            return True
        if self.rerun is None:
            return False
        if self.tolerance == 0.0:
            return self.rerun == self.recorded
        return abs(self.rerun - self.recorded) <= self.tolerance

    def describe(self) -> str:
        if self.rerun is None:
            return f"{self.metric}: recorded {self.recorded!r}, missing from the re-run"
        if self.tolerance is None:
            rule = "timing, not compared"
        elif self.tolerance == 0.0:
            rule = "exact"
        else:
            rule = f"tolerance {self.tolerance:g}"
        mark = "ok" if self.ok else "MISMATCH"
        return f"{self.metric}: recorded {self.recorded!r}, re-run {self.rerun!r} ({rule}) {mark}"


@dataclass
class Outcome:
    seed: int
    exact: bool
    comparisons: list[Comparison] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    result: TaskResult | None = None

    @property
    def compared(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.tolerance is not None]

    @property
    def ok(self) -> bool:
        """Every compared metric agrees, and there was at least one to compare."""
        return bool(self.compared) and all(c.ok for c in self.comparisons)


def load_checked(path: Path) -> Submission:
    """The submission, with its config hashes checked; problems raise ``SuiteError``."""
    sub, problems = load_submission(path)
    if sub is None:
        raise SuiteError("; ".join(str(p) for p in problems))
    problems, _ = check_config(str(path), sub)
    if problems:
        raise SuiteError("; ".join(str(p) for p in problems))
    return sub


def compare(
    recorded: dict[str, float], rerun: dict[str, float], exact: bool, tolerance: float
) -> list[Comparison]:
    out = []
    for metric, value in sorted(recorded.items()):
        if MEASURED.search(metric):
            tol: float | None = None
        elif exact or ALWAYS_EXACT.search(metric):
            tol = 0.0
        else:
            tol = tolerance
        out.append(Comparison(metric, value, rerun.get(metric), tol))
    return out


def verify(
    path: Path,
    seed: int | None = None,
    tracking_uri: str | None = None,
    tracking: bool = True,
    device: str | None = None,
    tolerance: float | None = None,
    cache_dir: str | None = None,
    raw: str | None = None,
    out: Path | None = None,
    progress: bool = False,
    log: Callable[[str], Any] = print,
) -> Outcome:
    """Re-run seed ``seed`` (default: the first recorded) of the submission at ``path``."""
    import torch

    from suite.data.source import get_prepared
    from suite.environment import fbgemm_version
    from suite.runs.single import execute

    sub = load_checked(path)
    runs = {run.seed: run for run in sub.seeds}
    seed = sub.seeds[0].seed if seed is None else seed
    if seed not in runs:
        raise SuiteError(f"{path}: seed {seed} is not recorded (recorded: {sorted(runs)})")
    recorded_device = sub.environment.device
    device = device or recorded_device
    data = {**sub.config, "seed": seed, "device": device}
    dataset = dict(data.get("dataset") or {})
    dataset.update({k: v for k, v in (("cache_dir", cache_dir), ("raw", raw)) if v})
    data["dataset"] = dataset
    data["train"] = {**(data.get("train") or {}), "progress": progress}
    data["tracking"] = {
        "enabled": tracking,
        "uri": tracking_uri,
        "run_name": f"verify-{path.stem}-s{seed}",
    }
    config = validate_config(data, f"config of {path}")

    exact = recorded_device == "cpu" and device == "cpu" and tolerance is None
    outcome = Outcome(seed, exact)
    if config.config_hash() != runs[seed].config_hash and device == recorded_device:
        outcome.notes.append(
            f"this suite resolves the config to hash {config.config_hash()}, not the recorded "
            f"{runs[seed].config_hash} (defaults added since)"
        )
    versions = {"torch": torch.__version__, "fbgemm": fbgemm_version()}
    for name, here in versions.items():
        there = getattr(sub.environment, name)
        if here != there:
            outcome.notes.append(f"{name} here is {here}, the submission used {there}")

    prepared = get_prepared(config.dataset, progress=progress)
    if prepared.fingerprint != sub.data_fingerprint:
        raise SuiteError(
            f"{path}: the prepared data's fingerprint {prepared.fingerprint[:16]}... is not the "
            f"recorded {sub.data_fingerprint[:16]}... ({config.dataset.name}/{config.dataset.protocol}); "
            "not re-running on different data"
        )
    log(
        f"data fingerprint {prepared.fingerprint[:16]}... matches; re-running seed {seed} on {device}"
    )
    if config.train.threads is None:
        torch.set_num_threads(sub.environment.threads)
    result = execute(
        config, out=out, extra_tags={"suite.verify_of": path.name, "suite.verify_seed": str(seed)}
    )
    outcome.result = result
    outcome.comparisons = compare(
        runs[seed].metrics,
        result.metrics,
        exact,
        DEFAULT_TOLERANCE if tolerance is None else tolerance,
    )
    return outcome
