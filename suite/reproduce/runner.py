"""Run what a profile of the reproduction specs needs, judge the claims.

Every training goes down the one run path (``RunConfig`` -> ``execute``), once per seed of
the profile, as a child of one MLflow parent run for the whole reproduction. A child is
named by paper and role (``qr/hash_4 seed 3``) and tagged with the papers, roles and claim
ids it serves; a config that several papers share (same resolved config) runs once per
seed. A scaling family's sizes are ordinary ``accuracy`` runs, one per member.
"""

from __future__ import annotations

import contextlib
import copy
import math
import multiprocessing
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from suite.config import RunConfig, deep_merge, load_yaml, validate_config
from suite.embeddings.budget import BudgetUnreachable
from suite.errors import ConfigError, SuiteError
from suite.presets import preset_path
from suite.progress import progress_bar
from suite.reproduce.claims import (
    COMPUTE_METRIC,
    ClaimOutcome,
    NoiseLookup,
    PairNoise,
    SeedFigures,
    evaluate,
    evaluate_scaling,
    noise_from_predictions,
)
from suite.reproduce.spec import BUDGET_KEY, Claim, ReproductionSpec, list_specs, load_spec
from suite.reproduce.store import NoiseKey
from suite.results import TaskResult, find_metric
from suite.stats import Interval, ScalingFit, mean_ci


@dataclass
class RunRecord:
    """One config run under every seed of the profile."""

    run_id: str
    config: RunConfig
    seeds: list[int]
    results: dict[int, TaskResult] = field(default_factory=dict)

    @property
    def per_seed(self) -> dict[int, dict[str, float]]:
        return {seed: seed_metrics(r) for seed, r in self.results.items()}

    def interval(self, metric: str) -> Interval:
        values = [m[metric] for m in self.per_seed.values() if metric in m]
        return mean_ci(values)

    @property
    def metrics(self) -> dict[str, float]:
        """Mean of each metric over seeds."""
        per_seed = list(self.per_seed.values())
        names = [k for k in per_seed[0] if all(k in m for m in per_seed)] if per_seed else []
        return {k: float(np.mean([m[k] for m in per_seed])) for k in names}

    @property
    def duration_s(self) -> float:
        return float(sum(r.duration_s for r in self.results.values()))

    @property
    def mlflow_run_ids(self) -> dict[int, str | None]:
        return {seed: r.mlflow_run_id for seed, r in self.results.items()}

    def test_predictions(self, seed: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The run's test ``(labels [N], logits [N])`` under ``seed``, if it kept them."""
        from suite.reproduce.store import predictions

        result = self.results.get(seed)
        return predictions(result) if result is not None else None

    def metric_kind(self, metric: str) -> str | None:
        """The declared kind of one of this run's metrics (``measured`` for timings), or
        None where its task does not declare it (figures the runner derives)."""
        task = self.config.task.registry.get(self.config.task.name)
        spec = find_metric(task.metrics, metric)
        return spec.kind if spec else None


def seed_metrics(result: TaskResult) -> dict[str, float]:
    """A run's metrics plus its training compute (3 x forward FLOPs x examples)."""
    metrics = dict(result.metrics)
    examples = result.details.get("examples")
    if examples is not None and "flops_per_example" in metrics:
        metrics[COMPUTE_METRIC] = 3.0 * metrics["flops_per_example"] * float(examples)
    return metrics


@dataclass
class PaperOutcome:
    spec: ReproductionSpec
    profile: str
    runs: dict[str, RunRecord]
    claims: list[ClaimOutcome]
    fits: dict[str, ScalingFit] = field(default_factory=dict)

    @property
    def families(self) -> dict[str, list[str]]:
        return {f: list(ms) for f, ms in self.spec.profiles[self.profile].families.items()}


@dataclass
class Reproduction:
    """What ``reproduce`` did: the papers' outcomes and where it is tracked."""

    profile: str
    papers: list[PaperOutcome]
    seeds: list[int]
    overrides: dict[str, Any]
    mlflow_run_id: str | None = None
    tracking_uri: str | None = None
    duration_s: float = 0.0

    def results(self) -> list[TaskResult]:
        """Every job's result once (runs shared between papers counted once)."""
        unique: dict[tuple[str, int], TaskResult] = {}
        for outcome in self.papers:
            for rec in outcome.runs.values():
                for seed, result in rec.results.items():
                    unique[(rec.config.config_hash(), seed)] = result
        return list(unique.values())


def training_wall_s(results: list[TaskResult]) -> tuple[float, int]:
    """``(seconds, stretches)``: the wall time during which at least one of ``results``
    was training (the union of their ``[created - duration_s, created]`` intervals), and the
    number of separate stretches it falls in (a killed and resumed reproduction has two or
    more). Read off the stored jobs, so a resumed or regenerated report still counts the
    invocations that left no manifest."""
    spans = sorted(
        (end - r.duration_s, end) for r in results if (end := _timestamp(r.created)) is not None
    )
    total, stretches, reach = 0.0, 0, -math.inf
    for start, end in spans:
        if start > reach + WALL_GAP_S:
            stretches += 1
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total, stretches


WALL_GAP_S = 120.0
"""Two jobs' intervals further apart than this belong to separate stretches of work."""


def _timestamp(iso: str | None) -> float | None:
    from datetime import datetime

    try:
        return datetime.fromisoformat(iso).timestamp() if iso else None
    except ValueError:
        return None


def select_specs(
    papers: list[str] | None, profile: str, claim_ids: list[str] | None = None
) -> list[ReproductionSpec]:
    specs = [load_spec(name) for name in (papers or list_specs())]
    chosen = [s for s in specs if profile in s.profiles and selected_claims(s, profile, claim_ids)]
    if not chosen:
        what = f" with claims {', '.join(claim_ids)}" if claim_ids else ""
        raise ConfigError(f"no reproduction spec has a profile {profile!r}{what}")
    return chosen


def _member_config(member: str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(member, str):
        return load_yaml(preset_path(member))
    return member


def run_config(
    spec: ReproductionSpec, profile: str, run_id: str, overrides: dict[str, Any]
) -> RunConfig:
    """The resolved config of one run: profile base, the run (for a family member: the
    family's run, then the member, whose ``model`` replaces the whole model), its profile
    part, then the command line's overrides."""
    prof = spec.profiles[profile]
    family, _, member = run_id.partition("/")
    if member:
        data = deep_merge(prof.base, {"task": {"name": "accuracy"}})
        data = deep_merge(data, spec.runs.get(family, {}))
        extra = copy.deepcopy(_member_config(prof.families[family][member]))
        if "model" in extra:
            data["model"] = extra.pop("model")
        data = deep_merge(data, extra)
    else:
        data = deep_merge(prof.base, spec.runs[run_id])
    data = deep_merge(data, prof.runs.get(run_id, {}))
    from suite.reproduce.tuning import tuned_overrides  # the profile's tuned values, if any

    data = deep_merge(data, tuned_overrides(spec, prof.like or profile, run_id))
    data = deep_merge(data, overrides)
    what = f"reproduction {spec.paper}/{run_id} ({profile})"
    if BUDGET_KEY in data:  # a curve run: its method's options at its budget, on its data
        from suite.reproduce.curve import with_budget_options

        data = with_budget_options(data, what)
    return validate_config(data, what)


def selected_claims(
    spec: ReproductionSpec, profile: str, claim_ids: list[str] | None
) -> list[Claim]:
    return [
        c
        for c in spec.claims
        if (c.profiles is None or profile in c.profiles) and (not claim_ids or c.id in claim_ids)
    ]


def claim_runs(spec: ReproductionSpec, profile: str, claim: Claim) -> list[str]:
    runs = [ref.split(".", 1)[0] for ref in claim.references()]
    families = spec.profiles[profile].families
    runs += [f"{f}/{m}" for f in claim.families() for m in families[f]]
    return list(dict.fromkeys(runs))


def needed_runs(spec: ReproductionSpec, profile: str, claim_ids: list[str] | None) -> list[str]:
    """The runs the selected claims reference, in the spec's order."""
    needed = {
        r for c in selected_claims(spec, profile, claim_ids) for r in claim_runs(spec, profile, c)
    }
    if spec.curve is not None and not claim_ids:  # the curve's runs serve no claim
        budgets = spec.profiles[profile].budgets
        needed |= {spec.curve.reference, *spec.curve.run_ids(budgets)}
    return [r for r in spec.run_ids(profile) if r in needed]


@dataclass
class PlannedRun:
    config: RunConfig
    roles: list[str] = field(default_factory=list)
    claims: list[str] = field(default_factory=list)


def plan_runs(
    specs: list[ReproductionSpec],
    profile: str,
    claim_ids: list[str] | None,
    overrides: dict[str, Any],
) -> tuple[dict[str, PlannedRun], dict[tuple[str, str], str]]:
    """Distinct configs to train (by config hash), and ``(paper, run) -> config hash``."""
    planned: dict[str, PlannedRun] = {}
    where: dict[tuple[str, str], str] = {}
    for spec in specs:
        claims = selected_claims(spec, profile, claim_ids)
        for run_id in needed_runs(spec, profile, claim_ids):
            try:
                config = run_config(spec, profile, run_id, overrides)
            except BudgetUnreachable:
                continue  # off the curve at this budget; the report says why
            key = config.config_hash()
            entry = planned.setdefault(key, PlannedRun(config))
            entry.roles.append(f"{spec.paper}/{run_id}")
            entry.claims += [c.id for c in claims if run_id in claim_runs(spec, profile, c)]
            where[(spec.paper, run_id)] = key
    return planned, where


def profile_seeds(specs: list[ReproductionSpec], profile: str) -> list[int]:
    seeds = {tuple(s.profiles[profile].seeds) for s in specs}
    if len(seeds) != 1:
        raise ConfigError(
            f"profile {profile!r}: every spec must run the same seeds (values pair by seed), "
            f"found {sorted(seeds)}"
        )
    return list(seeds.pop())


@dataclass(frozen=True)
class Job:
    """One (config, seed) training of a reproduction."""

    key: str
    """The config hash (of the config without its seed)."""
    seed: int
    config: RunConfig
    tags: dict[str, str]
    label: str


def plan_jobs(planned: dict[str, PlannedRun], seeds: list[int], profile: str) -> list[Job]:
    """Every (config, seed) job, in plan order, configured as the reproduction runs it."""
    jobs = []
    for key, entry in planned.items():
        tags = {
            "suite.papers": ",".join(dict.fromkeys(r.split("/", 1)[0] for r in entry.roles)),
            "suite.roles": ",".join(entry.roles),
            "suite.claims": ",".join(dict.fromkeys(entry.claims)),
            "suite.profile": profile,
        }
        for seed in seeds:
            label = f"{entry.roles[0]} seed {seed}"
            config = entry.config.with_overrides(
                {
                    "seed": seed,
                    "tracking.run_name": label,
                    "tracking.keep_arrays": True,  # DeLong's test reads the predictions
                }
            )
            jobs.append(Job(key, seed, config, tags, label))
    return jobs


def job_examples(config: RunConfig) -> float:
    """Training examples a run sees: its step budget, else its epochs over the train rows."""
    train = config.train
    if train.max_steps:
        return float(train.max_steps * train.batch_size)
    return float(train.epochs * config.dataset.options.get("train_rows", 10**6))


def longest_first(jobs: list[Job], known: dict[str, float]) -> list[Job]:
    """``jobs`` by estimated duration, longest first: a config's known duration per seed
    (``known``: config hash -> seconds), else its training examples at the known runs'
    median seconds per example."""
    rates = [known[j.key] / job_examples(j.config) for j in jobs if j.key in known]
    rate = float(np.median(rates)) if rates else 1.0

    def cost(job: Job) -> float:
        return known.get(job.key, job_examples(job.config) * rate)

    return sorted(jobs, key=cost, reverse=True)


def known_durations(jobs: list[Job], dirs: list[Path]) -> dict[str, float]:
    """Seconds one seed of each job's config took, from results stored under ``dirs``
    (any seed; the first directory that has one)."""
    from suite.reproduce.store import runs_dir

    known: dict[str, float] = {}
    for job in jobs:
        for directory in dirs:
            found = sorted((runs_dir(directory) / job.key).glob("seed-*.json"))
            if job.key not in known and found:
                try:
                    known[job.key] = TaskResult.read(found[0]).duration_s
                except (OSError, ValueError):
                    continue
    return known


def run_job(job: Job, parent_run_id: str | None) -> TaskResult:
    """Train one job down the one run path (in this process or a worker's)."""
    from suite.runs.single import execute

    return execute(job.config, parent_run_id=parent_run_id, extra_tags=job.tags)


def default_workers(jobs: int) -> int:
    return max(1, min(os.cpu_count() or 1, jobs))


def run_jobs(
    jobs: list[Job],
    workers: int,
    parent_run_id: str | None,
    done: Callable[[Job, TaskResult], None],
    bar: Any,
) -> None:
    """Run ``jobs``; ``done(job, result)`` in this process as each finishes. One worker:
    in this process, in order. More: spawned worker processes (one torch thread each,
    as the configs say), longest job first, results as they finish; on an error or an
    interruption every worker is stopped and the error re-raised."""
    if workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            bar.set_postfix_str(job.label)
            done(job, run_job(job, parent_run_id))
            bar.update()
        return
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    from suite.runs.signals import interruptible

    for dataset in {j.config.dataset.model_dump_json(): j.config.dataset for j in jobs}.values():
        from suite.data.source import get_prepared

        get_prepared(dataset, progress=False)  # once, here, before the workers read it
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context)
    try:
        with interruptible():  # SIGTERM here stops the workers too, never orphans them
            pending = {pool.submit(run_job, _quiet(job), parent_run_id): job for job in jobs}
            while pending:
                finished, _ = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
                for future in finished:
                    job = pending.pop(future)
                    done(job, future.result())
                    bar.set_postfix_str(job.label)
                    bar.update()
    except BaseException:
        _stop(pool)
        raise
    pool.shutdown(wait=True)


def _quiet(job: Job) -> Job:
    """A worker's job trains without its own progress bars (the one bar is over jobs)."""
    return replace(job, config=job.config.with_overrides({"train.progress": False}))


def _stop(pool: Any) -> None:
    """Stop a pool's workers now: queued jobs cancelled, running ones terminated (SIGTERM:
    each marks its MLflow run KILLED on its way out)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=10)  # a worker that caught SIGTERM may have taken a queued job
        if process.is_alive():
            process.kill()
            process.join()  # reaped: the dead-run sweep then sees its MLflow run's owner gone


def start_parent(
    first: RunConfig, profile: str, specs: list[ReproductionSpec], seeds: list[int], command: str
) -> Any:
    """The reproduction's MLflow parent run, or None with tracking off."""
    if not first.tracking.enabled:
        return None
    from suite.environment import environment
    from suite.tracking import Tracker

    env = environment(first.device)
    return Tracker.start(
        first.tracking.uri,
        first.tracking.experiment,
        f"reproduce {profile}",
        {
            "suite.reproduction": "true",
            "suite.profile": profile,
            "suite.papers": ",".join(s.paper for s in specs),
            "suite.seeds": ",".join(map(str, seeds)),
            "suite.command": command[:5000],
            "suite.git_commit": str(env["git_commit"]),
            "suite.cpu": str(env["cpu_model"]),
            "suite.threads": str(env["threads"]),
        },
    )


def end_parent(parent: Any, exc: BaseException) -> None:
    """Mark the parent run KILLED (an interruption) or FAILED, and any child left RUNNING
    by a worker that died KILLED."""
    from suite.runs.signals import interruption
    from suite.tracking import clean_dead_runs

    with contextlib.suppress(SuiteError):
        signal_name = interruption(exc)
        if signal_name:
            parent.kill(f"{signal_name} during the reproduction")
        else:
            parent.set_tags({"suite.error": str(exc)[:5000] or type(exc).__name__})
            parent.fail()
        experiment = parent.client.get_run(parent.run_id).info.experiment_id
        clean_dead_runs(parent.client, parent.uri, [experiment])


def stored_results(
    jobs: list[Job], report_dir: Path | None, resume: bool = True
) -> tuple[dict[tuple[str, int], TaskResult], list[Job]]:
    """The jobs' stored results (by config hash and seed), and the jobs still to run.

    When resuming (``resume``), a stored result that had test logits is reused only while
    they are still here or the test-set noise it takes part in is stored: the logits are
    not committed (a 1M-row test set is 4 MB a job), so a job resumed on another machine
    before its pairs' noise was judged trains again (bit for bit the same figures on the
    same CPU model) to give DeLong its predictions. Regenerating a report (``resume``
    false) takes every stored result; a pair whose noise was never judged is then
    reported with its test-set noise left out, as the run that stored it did."""
    from suite.reproduce.store import LOGITS_DIGEST, predictions, read_noise, read_result

    found: dict[tuple[str, int], TaskResult] = {}
    if report_dir is not None:
        noise = read_noise(report_dir)
        judged = {(k[0], k[2]) for k in noise} | {(k[1], k[2]) for k in noise if k[1]}
        for job in jobs:
            result = read_result(report_dir, job.key, job.config)
            if result is None:
                continue
            had_logits = LOGITS_DIGEST in result.details
            unjudged = (job.key, job.seed) not in judged
            if resume and had_logits and unjudged and predictions(result) is None:
                continue
            found[(job.key, job.seed)] = result
    return found, [j for j in jobs if (j.key, j.seed) not in found]


def reproduce(
    profile: str,
    papers: list[str] | None = None,
    claim_ids: list[str] | None = None,
    overrides: dict[str, Any] | None = None,
    progress: bool = True,
    command: str = "",
    workers: int | None = None,
    report_dir: str | Path | None = None,
    from_results: str | Path | None = None,
) -> Reproduction:
    """Train every needed run of the chosen specs under each seed; judge their claims.

    ``report_dir``: store each finished job under ``<report_dir>/runs`` and reuse those
    already stored there (a killed reproduction resumes). ``workers``: worker processes
    (default: one per core, at most one per job). ``from_results``: train nothing; judge
    the results stored under that report directory (an error names a missing job)."""
    from suite.reproduce import store

    started = time.perf_counter()
    specs = select_specs(papers, profile, claim_ids)
    seeds = profile_seeds(specs, profile)
    overrides = copy.deepcopy(overrides or {})
    planned, where = plan_runs(specs, profile, claim_ids, overrides)
    jobs = plan_jobs(planned, seeds, profile)
    if from_results is not None:
        return _regenerate(profile, specs, claim_ids, planned, where, jobs, overrides, from_results)
    directory = Path(report_dir) if report_dir is not None else None
    found, todo = stored_results(jobs, directory)
    records = {key: RunRecord(e.roles[0], e.config, seeds) for key, e in planned.items()}
    for (key, seed), result in found.items():
        records[key].results[seed] = result
    workers = default_workers(len(todo)) if workers is None else max(1, workers)
    if workers > 1:
        dirs = [d for d in (directory, Path("results") / profile) if d is not None]
        todo = longest_first(todo, known_durations(todo, dirs))
    parent = start_parent(next(iter(planned.values())).config, profile, specs, seeds, command)

    def done(job: Job, result: TaskResult) -> None:
        records[job.key].results[job.seed] = result
        if directory is not None:
            store.write_result(directory, job.key, store.with_digest(result))

    desc = f"reproduce ({profile}" + (f", {len(found)} stored" if found else "") + ")"
    try:
        bar = progress_bar(total=len(todo), desc=desc, unit="run", enabled=progress)
        run_jobs(todo, workers, parent.run_id if parent else None, done, bar)
        bar.close()
        book = NoiseBook(store.read_noise(directory) if directory else {}, predictions=True)
        outcomes = [judge(spec, profile, claim_ids, records, where, book) for spec in specs]
    except BaseException as exc:
        if directory is not None:
            keep_finished_noise(specs, profile, claim_ids, records, where, directory)
        if parent:
            end_parent(parent, exc)
        raise
    duration = round(time.perf_counter() - started, 3)
    if directory is not None:
        store.write_noise(directory, {**book.stored, **book.entries})
        store.write_manifest(directory, parent.run_id if parent else None, duration)
    return Reproduction(
        profile,
        outcomes,
        seeds,
        overrides,
        parent.run_id if parent else None,
        parent.uri if parent else None,
        duration,
    )


def keep_finished_noise(
    specs: list[ReproductionSpec],
    profile: str,
    claim_ids: list[str] | None,
    records: dict[str, RunRecord],
    where: dict[tuple[str, str], str],
    directory: Path,
) -> None:
    """Store the DeLong noise of every pair whose runs all finished here with their test
    predictions, when a reproduction stops early (killed, failed): the predictions are not
    committed, so without it a resume on another machine (a later session, a fresh clone)
    would train those runs again. Pairs still missing a seed are left for the resume."""
    from suite.reproduce import store

    book = NoiseBook(store.read_noise(directory), predictions=True)
    for spec in specs:
        with contextlib.suppress(Exception):  # claims on runs not trained yet
            judge(spec, profile, claim_ids, records, where, book)
    if book.entries:
        with contextlib.suppress(Exception):  # the stop's own error is the one to report
            store.write_noise(directory, {**book.stored, **book.entries})


def _regenerate(
    profile: str,
    specs: list[ReproductionSpec],
    claim_ids: list[str] | None,
    planned: dict[str, PlannedRun],
    where: dict[tuple[str, str], str],
    jobs: list[Job],
    overrides: dict[str, Any],
    directory: str | Path,
) -> Reproduction:
    """The reproduction judged on the stored results under ``directory``, training none."""
    from suite.reproduce import store

    found, missing = stored_results(jobs, Path(directory), resume=False)
    if missing:
        first = missing[0]
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise ConfigError(
            f"--from-results {directory}: no stored result for {first.label} "
            f"(expected {store.result_file(directory, first.key, first.seed)}){more}"
        )
    seeds = list(dict.fromkeys(j.seed for j in jobs))
    records = {key: RunRecord(e.roles[0], e.config, seeds) for key, e in planned.items()}
    for (key, seed), result in found.items():
        records[key].results[seed] = result
    book = NoiseBook(store.read_noise(directory), predictions=False)
    outcomes = [judge(spec, profile, claim_ids, records, where, book) for spec in specs]
    manifest = store.read_manifest(directory)
    return Reproduction(
        profile,
        outcomes,
        seeds,
        overrides,
        manifest.get("mlflow_run_id"),
        None,
        float(manifest.get("duration_s", 0.0)),
    )


class NoiseBook:
    """The DeLong noise of AUC pairs by config hashes and seed: computed from the runs'
    kept predictions where they are here (``predictions``), else read from the stored
    entries; every entry asked for is kept in :attr:`entries` (to be stored)."""

    def __init__(self, stored: dict[NoiseKey, PairNoise], predictions: bool) -> None:
        self.stored = stored
        self.predictions = predictions
        self.entries: dict[NoiseKey, PairNoise] = {}

    def lookup(self, runs: dict[str, RunRecord]) -> NoiseLookup:
        """A :data:`NoiseLookup` over one paper's runs (run id -> record)."""

        def kept(run_id: str, seed: int) -> tuple[np.ndarray, np.ndarray] | None:
            return runs[run_id].test_predictions(seed) if self.predictions else None

        seeds = sorted({s for rec in runs.values() for s in rec.seeds})
        computed = noise_from_predictions(kept, seeds)

        def lookup(left: str, right: str, seed: int) -> PairNoise | None:
            key = (
                runs[left].config.config_hash(),
                runs[right].config.config_hash() if right else "",
                seed,
            )
            found = computed(left, right, seed) or self.stored.get(key)
            if found is not None:
                self.entries[key] = found
            return found

        return lookup


def judge(
    spec: ReproductionSpec,
    profile: str,
    claim_ids: list[str] | None,
    records: dict[str, RunRecord],
    where: dict[tuple[str, str], str],
    book: NoiseBook | None = None,
) -> PaperOutcome:
    """The paper's claims judged on its runs' per-seed figures (the test-set noise of AUC
    figures from ``book``; from the runs' predictions when it is None)."""
    runs = {
        run_id: records[where[(spec.paper, run_id)]]
        for run_id in needed_runs(spec, profile, claim_ids)
        if (spec.paper, run_id) in where  # a curve point a method cannot reach is not planned
    }
    figures: SeedFigures = {rid: rec.per_seed for rid, rec in runs.items()}
    noise = (book or NoiseBook({}, predictions=True)).lookup(runs)
    families = {f: list(ms) for f, ms in spec.profiles[profile].families.items()}
    claims, fits, cache = [], {}, {}
    for claim in selected_claims(spec, profile, claim_ids):
        if claim.families():
            outcome, found = evaluate_scaling(claim, families, figures, cache)
            fits.update(found)
            claims.append(outcome)
        else:
            outcome = evaluate(claim, figures, noise)
            claims.append(replace(outcome, timing=is_timing(claim, runs)))
    return PaperOutcome(spec, profile, runs, claims, fits)


def is_timing(claim: Claim, runs: dict[str, RunRecord]) -> bool:
    """Whether a claim rests on a machine-dependent figure (a ``measured`` metric: a
    timing, a throughput, an allocator peak), whose verdict may differ between reruns."""
    for ref in claim.references():
        run, metric = ref.split(".", 1)
        if runs[run].metric_kind(metric) == "measured":
            return True
    return False


def finish_tracking(
    reproduction: Reproduction, files: list[str], summary: dict[str, float]
) -> None:
    """Log the report and plots on the reproduction's parent run and close it."""
    if not reproduction.mlflow_run_id or not reproduction.tracking_uri:
        return  # tracking off, or a report regenerated from stored results
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=reproduction.tracking_uri)
    run_id = reproduction.mlflow_run_id
    for path in files:
        client.log_artifact(run_id, path)
    from suite.tracking import Tracker

    tracker = Tracker(client, run_id, reproduction.tracking_uri or "")
    tracker.log_metrics(summary)
    tracker.finish()


def default_report_dir(profile: str) -> str:
    """Reports go to an ignored directory unless ``--out`` names another (such as the
    checked-in reference ``results/<profile>``)."""
    return f"results/reproduce/{profile}"


def rerun(
    profile: str, target: str, seed: int, report_dir: str | Path, overrides: dict[str, Any]
) -> list[str]:
    """Train the one job ``target`` (``paper/run``) under ``seed`` again and compare it with
    its stored result bit for bit: every metric but the measured ones (timings), the data
    fingerprint and the test logits' digest. Returns the differences (none: identical)."""
    from suite.reproduce.store import read_result, result_file, with_digest

    paper, _, run_id = target.partition("/")
    spec = load_spec(paper)
    if profile not in spec.profiles:
        raise ConfigError(f"--rerun {target}: paper {paper!r} has no profile {profile!r}")
    runs = spec.run_ids(profile)
    if run_id not in runs:
        raise ConfigError(f"--rerun {target}: expected one of {', '.join(runs)} after {paper}/")
    config = run_config(spec, profile, run_id, overrides)
    key = config.config_hash()
    (job,) = plan_jobs({key: PlannedRun(config, [target])}, [seed], profile)
    stored = read_result(report_dir, key, job.config)
    if stored is None:
        path = result_file(report_dir, key, seed)
        raise ConfigError(f"--rerun {target} --seed {seed}: no stored result at {path}")
    return differences(stored, with_digest(run_job(job, None)), job.config)


def differences(stored: TaskResult, now: TaskResult, config: RunConfig) -> list[str]:
    """What differs between two results of one job (``config``): ``name: stored X, now Y``
    for each metric (measured ones left out), the data fingerprint and the test logits'
    digest."""
    from suite.reproduce.store import LOGITS_DIGEST

    record = RunRecord("", config, [])
    out = []
    for name in sorted(set(stored.metrics) | set(now.metrics)):
        if record.metric_kind(name) == "measured":
            continue
        a, b = stored.metrics.get(name), now.metrics.get(name)
        if a is None or b is None or (a != b and not (math.isnan(a) and math.isnan(b))):
            out.append(f"{name}: stored {a!r}, now {b!r}")
    for label, x, y in (
        ("data fingerprint", stored.data_fingerprint, now.data_fingerprint),
        ("test logits sha256", stored.details.get(LOGITS_DIGEST), now.details.get(LOGITS_DIGEST)),
    ):
        if x != y:
            out.append(f"{label}: stored {x}, now {y}")
    return out
