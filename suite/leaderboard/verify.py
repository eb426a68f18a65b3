"""Re-running one recorded seed of a submission and comparing its metrics.

The seed runs through the ordinary run path (``validate_config`` -> ``execute``), tracked
like any run (tagged ``suite.verify_of``), with exactly the recorded config: a field added
to the suite since the record was made takes the value that reproduces the old behaviour
(:data:`suite.leaderboard.history.ADDED_SINCE`), never today's default. A stale
submission (:mod:`suite.leaderboard.history`) may be re-run but not recorded. Before training, the prepared data's
fingerprint must equal the recorded one: the seed's own where each seed drew its data
(``dataset.options.draw: per_seed``; the re-run's config draws it with the seed again).

Comparison rules, by the kind each task declares for a metric
(:class:`suite.results.MetricSpec`):

* ``size`` and ``count`` (bytes, parameters, FLOPs) are exact everywhere;
* ``measured`` (timings, memory peaks) are reported but never compared;
* quality figures (AUC, log loss, ...) may differ by at most ``CPU_TOLERANCE`` = 3e-3
  absolute when a CPU submission is re-run on a CPU, and ``DEFAULT_TOLERANCE`` = 3e-3
  otherwise (GPU, or another device; not measured, kept no tighter), or ``--tolerance``.
  A re-run on the CPU model, thread count, torch and fbgemm that made the file must be
  bit-identical (tolerance 0), but another x86 CPU rounds otherwise (its vector kernels,
  ``ATEN_CPU_CAPABILITY``, and its BLAS) and one epoch of training on the default 400k rows carries that to
  differences of up to 1.5e-3 in AUC and 9.7e-4 in log loss: the shipped entries' nine
  seeds re-run on an Intel AVX-512 CPU (records made on an AMD EPYC) with
  ``benchmarks/verify_tolerance.py``, 27 re-runs, none bit-identical, 3 of them over the
  earlier 1e-3 (measured at 100k rows, 4.7e-4); stated in the README.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite.config import validate_config
from suite.errors import SuiteError
from suite.leaderboard.history import ADDED_SINCE, Resolved, recorded_hash, resolve_recorded
from suite.leaderboard.metrics import declared
from suite.leaderboard.schema import Submission
from suite.leaderboard.validate import STALE, check_config, check_draws, load_submission
from suite.leaderboard.verified import (
    VERIFICATIONS,
    Verification,
    Verifications,
    bound_figures,
)
from suite.results import TaskResult

DEFAULT_TOLERANCE = 3e-3
CPU_TOLERANCE = 3e-3


@dataclass(frozen=True)
class VerifyOptions:
    """How to re-run: which seed, where to track it, on what device and data."""

    seed: int | None = None  # default: the first recorded seed
    tracking_uri: str | None = None
    tracking: bool = True
    device: str | None = None  # default: as recorded
    tolerance: float | None = None  # default: CPU_TOLERANCE / DEFAULT_TOLERANCE
    cache_dir: str | None = None
    raw: str | None = None
    out: Path | None = None
    progress: bool = False
    record: bool = False  # append to the board's verifications.yaml when it agrees


@dataclass(frozen=True)
class MetricCheck:
    """One recorded metric against the re-run's value, by its kind's tolerance."""

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
class SeedRerun:
    """The re-run of one recorded seed: its rule, metric checks, notes and result."""

    seed: int
    rule: str
    comparisons: list[MetricCheck] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    result: TaskResult | None = None

    @property
    def compared(self) -> list[MetricCheck]:
        return [c for c in self.comparisons if c.tolerance is not None]

    @property
    def ok(self) -> bool:
        """Every compared metric agrees, and there was at least one to compare."""
        return bool(self.compared) and all(c.ok for c in self.comparisons)

    @property
    def identical(self) -> bool:
        """Every compared metric is bit-identical to the recorded value."""
        return self.ok and all(c.rerun == c.recorded for c in self.compared)

    @property
    def max_abs_difference(self) -> float:
        diffs = [abs(c.rerun - c.recorded) for c in self.compared if c.rerun is not None]
        return max(diffs, default=0.0)


def load_checked(path: Path) -> tuple[Submission, str | None]:
    """The submission, with its config hashes and its seeds' data fingerprints
    (:func:`~suite.leaderboard.validate.check_draws`) checked, and why it is stale (None: it
    is not); problems raise ``SuiteError``."""
    sub, problems = load_submission(path)
    if sub is None:
        raise SuiteError("; ".join(str(p) for p in problems))
    problems, warnings = check_config(str(path), sub)
    problems += check_draws(str(path), sub)
    if problems:
        raise SuiteError("; ".join(str(p) for p in problems))
    stale = next((w.message for w in warnings if w.code == STALE), None)
    return sub, stale


def compare(
    task: str, recorded: dict[str, float], rerun: dict[str, float], tolerance: float
) -> list[MetricCheck]:
    """Each recorded metric against the re-run, by the kind ``task`` declares for it."""
    out = []
    for metric, value in sorted(recorded.items()):
        spec = declared(task, metric)
        kind = spec.kind if spec is not None else "quality"
        if kind == "measured":
            tol: float | None = None
        elif kind in ("size", "count"):
            tol = 0.0
        else:
            tol = tolerance
        out.append(MetricCheck(metric, value, rerun.get(metric), tol))
    return out


def verify(
    path: Path, options: VerifyOptions | None = None, log: Callable[[str], Any] = print
) -> SeedRerun:
    """Re-run one recorded seed (``options.seed``, default the first) of the submission at
    ``path`` and compare its metrics with the recorded ones."""
    import torch

    from suite.data.source import get_prepared
    from suite.environment import fbgemm_version
    from suite.runs.single import execute

    opts = options or VerifyOptions()
    sub, stale = load_checked(path)
    if stale and opts.record:
        raise SuiteError(f"{path}: not recording a re-run of a stale submission ({stale})")
    runs = {run.seed: run for run in sub.seeds}
    seed = sub.seeds[0].seed if opts.seed is None else opts.seed
    if seed not in runs:
        raise SuiteError(f"{path}: seed {seed} is not recorded (recorded: {sorted(runs)})")
    recorded_device = sub.environment.device
    device = opts.device or recorded_device
    resolved = resolve_recorded({**sub.config, "seed": seed}, f"config of {path}")
    data = {**resolved.config.model_dump(mode="json"), "device": device}
    dataset = dict(data.get("dataset") or {})
    dataset.update({k: v for k, v in (("cache_dir", opts.cache_dir), ("raw", opts.raw)) if v})
    data["dataset"] = dataset
    data["train"] = {**(data.get("train") or {}), "progress": opts.progress}
    data["tracking"] = {
        "enabled": opts.tracking,
        "uri": opts.tracking_uri,
        "run_name": f"verify-{path.stem}-s{seed}",
    }
    config = validate_config(data, f"config of {path}")

    versions = {"torch": torch.__version__, "fbgemm": fbgemm_version()}
    tolerance, rule = tolerance_rule(sub, device, versions, opts.tolerance)
    outcome = SeedRerun(seed, rule)
    for added in resolved.applied:
        old = next(a for a in ADDED_SINCE if a.path == added)
        outcome.notes.append(
            f"{added} is not recorded (added since, in {old.commit}); re-running with "
            f"{old.old!r}, the behaviour before it existed"
        )
    if stale:
        outcome.notes.append(stale)
    rerun_hash = recorded_hash(Resolved(config, resolved.applied, resolved.unknown))
    if rerun_hash != runs[seed].config_hash and device == recorded_device:
        outcome.notes.append(
            f"this suite resolves the config to hash {rerun_hash}, not the recorded "
            f"{runs[seed].config_hash}"
        )
    for name, here in versions.items():
        there = getattr(sub.environment, name)
        if here != there:
            outcome.notes.append(f"{name} here is {here}, the submission used {there}")

    prepared = get_prepared(config.dataset, progress=opts.progress)
    recorded = sub.seed_fingerprints()[seed]
    if prepared.fingerprint != recorded:
        of = f" seed {seed}'s" if sub.per_seed_draws else ""
        raise SuiteError(
            f"{path}: the prepared data's fingerprint {prepared.fingerprint[:16]}... is not the "
            f"recorded{of} {recorded[:16]}... ({config.dataset.name}/{config.dataset.protocol}); "
            "not re-running on different data"
        )
    log(
        f"data fingerprint {prepared.fingerprint[:16]}... matches; re-running seed {seed} on {device}"
    )
    if config.train.threads is None:
        torch.set_num_threads(sub.environment.threads)
    result = execute(
        config,
        out=opts.out,
        extra_tags={"suite.verify_of": path.name, "suite.verify_seed": str(seed)},
    )
    outcome.result = result
    outcome.comparisons = compare(sub.task, runs[seed].metrics, result.metrics, tolerance)
    if opts.record and outcome.ok:
        board = board_of(path)
        record_verification(board / VERIFICATIONS, path.name, outcome, result, sub)
        log(f"recorded in {board / VERIFICATIONS}")
    return outcome


def tolerance_rule(
    sub: Submission, device: str, versions: dict[str, str | None], given: float | None
) -> tuple[float, str]:
    """How closely a re-run on ``device`` must match ``sub``'s figures, and the rule in
    words: ``given`` (``--tolerance``) if any; exact on the CPU model, thread count, torch
    and fbgemm that made the record (a re-run there is bit-identical); else
    ``CPU_TOLERANCE`` on another CPU, ``DEFAULT_TOLERANCE`` on another device."""
    from suite.environment import device_name

    env = sub.environment
    cpu = env.device == "cpu" and device == "cpu"
    if given is not None:
        return given, f"within {given:g} (--tolerance)"
    same = (
        cpu
        and env.device_name == device_name("cpu")
        and versions == {"torch": env.torch, "fbgemm": env.fbgemm}
    )
    if same:
        return 0.0, f"exact on the recording CPU model {env.device_name!r}, threads and versions"
    where = f"another CPU than the recording {env.device_name!r}" if cpu else "another device"
    tolerance = CPU_TOLERANCE if cpu else DEFAULT_TOLERANCE
    return tolerance, f"within {tolerance:g} ({where})"


def board_of(path: Path) -> Path:
    """The leaderboard folder a submission file sits in (``<board>/submissions/FILE``)."""
    folder = path.resolve().parent
    if folder.name != "submissions":
        raise SuiteError(
            f"{path}: --record needs a file under <leaderboard>/submissions/, not {folder}"
        )
    return folder.parent


def record_verification(
    registry: Path, file: str, outcome: SeedRerun, result: TaskResult, sub: Submission
) -> Verification:
    """Append the agreeing re-run to ``verifications.yaml`` (atomically), bound to ``sub``'s
    content hash and the figures the re-run measured for the seed (every metric but
    timings), which ``validate`` checks against the file."""
    import datetime as dt

    if not outcome.ok:
        raise SuiteError(f"{file}: seed {outcome.seed} did not reproduce; nothing recorded")
    env = result.environment
    record = Verification(
        seed=outcome.seed,
        date=dt.datetime.now(dt.UTC).date(),
        device=str(env.get("device", "cpu")),
        machine=f"{env.get('device_name', '?')} ({env.get('platform', '?')})"[:256],
        threads=int(env.get("threads") or 1),
        suite_commit=str(env.get("git_commit", "unknown")),
        torch=str(env.get("torch", "unknown")),
        rule="bit-identical" if outcome.identical else outcome.rule,
        max_abs_difference=outcome.max_abs_difference,
        content_hash=sub.content_hash(),
        figures=bound_figures(sub, outcome.seed, result.metrics),
    )
    records = Verifications.load(registry)
    records.add(file, record)
    records.save(registry)
    return record
