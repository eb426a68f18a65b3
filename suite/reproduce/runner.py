"""Run what a profile of the reproduction specs needs, judge the claims.

Every training goes down the one run path (``RunConfig`` -> ``execute``), once per seed of
the profile, as a child of one MLflow parent run for the whole reproduction. A child is
named by paper and role (``qr/hash_4 seed 3``) and tagged with the papers, roles and claim
ids it serves; a config that several papers share (same resolved config) runs once per
seed. A scaling family's sizes are ordinary ``accuracy`` runs, one per member.

The plan (which configs and seeds) is :mod:`suite.reproduce.plan`, the judging
:mod:`suite.reproduce.judge`, what was found :mod:`suite.reproduce.outcome`; this module
schedules the jobs, resumes from stored results and tracks the parent run.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from suite.config import RunConfig
from suite.data.source import get_prepared
from suite.environment import environment
from suite.errors import ConfigError, SuiteError
from suite.executors.base import Executor, needs_of
from suite.executors.factory import make_executor
from suite.executors.local import LocalExecutor, default_workers
from suite.executors.ray_cluster import RayExecutor
from suite.progress import progress_bar
from suite.reproduce import store
from suite.reproduce.judge import NoiseBook, judge, keep_noise
from suite.reproduce.outcome import Reproduction, SeededRun
from suite.reproduce.plan import Job, PlannedRun, ReproductionPlan, plan_jobs, run_config
from suite.reproduce.spec import load_spec
from suite.results import TaskResult


def job_examples(config: RunConfig) -> float:
    """Training examples a run sees: its step budget, else its epochs over the train rows."""
    train = config.train
    if train.max_steps:
        return float(train.max_steps * train.batch_size)
    return float(train.epochs * config.dataset.options.get("train_rows", 10**6))


def job_costs(jobs: list[Job], known: dict[str, float]) -> dict[tuple[str, int], float]:
    """Each job's estimated seconds by (config hash, seed): its config's known duration per
    seed (``known``: config hash -> seconds), else its training examples at the known runs'
    median seconds per example."""
    rates = [known[j.key] / job_examples(j.config) for j in jobs if j.key in known]
    rate = float(np.median(rates)) if rates else 1.0
    return {(j.key, j.seed): known.get(j.key, job_examples(j.config) * rate) for j in jobs}


def job_order(
    jobs: list[Job],
    costs: dict[tuple[str, int], float] | None,
    pairs: set[tuple[str, str]] | None = None,
    by_group: bool = False,
    seeds: list[int] | None = None,
) -> list[Job]:
    """The order to run ``jobs`` in. By default seed by seed, so a reproduction stopped
    part way (or too long for one sitting) leaves whole seeds, whose test-set noise it
    stores with the covariances of the seeds it judged together
    (``suite.reproduce.claims.shared_of``): a resume on another machine (without the
    uncommitted test predictions) trains none of them again. Within a seed, the jobs
    that ``pairs`` (:meth:`~suite.reproduce.plan.ReproductionPlan.noise_pairs`: config hashes whose noise is judged together,
    as a claim's runs or a curve's methods at one budget) connect run as one group, so a
    stop part way through a long seed still leaves whole groups, whose noise is stored
    too. With ``costs`` (parallel workers), the groups with the longest job first and
    each group's jobs longest first, so short jobs keep the end of a group busy;
    without, in plan order. ``by_group`` (a profile's ``order: groups``): each group
    under every seed, seed by seed, before the next group, so a sitting far shorter than
    a seed still judges several seeds of a group together (their covariances, which no
    later sitting can compute without the predictions). ``seeds``: the plan's seed order
    (default: the jobs' seeds in the order they first appear); on a resume, where each
    run has its own stored seeds, it keeps the seed a stop left part way first."""
    group = _pair_groups([j.key for j in jobs], pairs or set())
    order = {
        seed: i for i, seed in enumerate(dict.fromkeys([*(seeds or []), *(j.seed for j in jobs)]))
    }

    def cost(job: Job) -> float:
        return costs[(job.key, job.seed)] if costs else 0.0

    longest: dict[tuple[int, int], float] = {}
    for job in jobs:
        slot = (job.seed, group[job.key])
        longest[slot] = max(longest.get(slot, 0.0), cost(job))
    longest_over_seeds: dict[int, float] = {}
    for (_, g), value in longest.items():
        longest_over_seeds[g] = max(longest_over_seeds.get(g, 0.0), value)

    def position(job: Job) -> tuple[float, ...]:
        slot = (job.seed, group[job.key])
        if by_group:
            return -longest_over_seeds[group[job.key]], group[job.key], order[job.seed], -cost(job)
        return order[job.seed], -longest[slot], group[job.key], -cost(job)

    return sorted(jobs, key=position)


def _pair_groups(keys: list[str], pairs: set[tuple[str, str]]) -> dict[str, int]:
    """Each key's group: the connected parts of the graph ``pairs`` draws on ``keys``,
    numbered by their first key's place in ``keys`` (a key in no pair is a group alone)."""
    parent = {key: key for key in keys}

    def root(key: str) -> str:
        while parent[key] != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    for left, right in pairs:
        if left in parent and right in parent:
            parent[root(left)] = root(right)
    first: dict[str, int] = {}
    for key in keys:
        first.setdefault(root(key), len(first))
    return {key: first[root(key)] for key in keys}


def known_durations(jobs: list[Job], dirs: list[Path]) -> dict[str, float]:
    """Seconds one seed of each job's config took, from results stored under ``dirs``
    (any seed; the first directory that has one)."""
    known: dict[str, float] = {}
    for job in jobs:
        for directory in dirs:
            found = sorted((store.runs_dir(directory) / job.key).glob("seed-*.json"))
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


@dataclass(frozen=True)
class Train:
    """``run_job`` under one MLflow parent run, as a job an executor can ship."""

    parent_run_id: str | None

    def __call__(self, job: Job) -> TaskResult:
        return run_job(job, self.parent_run_id)


def run_jobs(
    jobs: list[Job],
    executor: Executor,
    parent_run_id: str | None,
    done: Callable[[Job, TaskResult], None],
    bar: Any,
) -> None:
    """Run ``jobs`` on ``executor``; ``done(job, result)`` in this process as each
    finishes. One local worker: in this process, in order. Otherwise the datasets are
    prepared here first (and their fingerprints handed to the nodes, which check theirs),
    each job trains without progress bars of its own, results come as they finish, and an
    error or an interruption stops every job still running before it is re-raised."""
    work = Train(parent_run_id)
    if isinstance(executor, LocalExecutor) and (executor.workers <= 1 or len(jobs) <= 1):
        for job in jobs:
            bar.set_postfix_str(job.label)
            done(job, work(job))
            bar.update()
        return
    datasets = {j.config.dataset.model_dump_json(): j.config.dataset for j in jobs}
    fingerprints = {  # once, here, before the workers read it
        key: get_prepared(dataset, progress=False).fingerprint for key, dataset in datasets.items()
    }
    if isinstance(executor, RayExecutor):
        executor.fingerprints = fingerprints
    original = {(j.key, j.seed): j for j in jobs}
    quiet = [_quiet(job) for job in jobs]
    for job, result in executor.run(quiet, work, lambda j: needs_of(j.config)):
        done(original[(job.key, job.seed)], result)
        bar.set_postfix_str(job.label)
        bar.update()


def _quiet(job: Job) -> Job:
    """A worker's job trains without its own progress bars (the one bar is over jobs)."""
    return replace(job, config=job.config.with_overrides({"train.progress": False}))


def start_parent(first: RunConfig, plan: ReproductionPlan, command: str) -> Any:
    """The reproduction's MLflow parent run, or None with tracking off."""
    if not first.tracking.enabled:
        return None
    from suite.tracking import Tracker

    env = environment(first.device)
    return Tracker.start(
        first.tracking.uri,
        first.tracking.experiment,
        f"reproduce {plan.profile}",
        {
            "suite.reproduction": "true",
            "suite.profile": plan.profile,
            "suite.papers": ",".join(s.paper for s in plan.specs),
            "suite.seeds": ",".join(map(str, plan.seeds)),
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
    from suite.tracking import RunStore

    with contextlib.suppress(SuiteError):
        signal_name = interruption(exc)
        if signal_name:
            parent.kill(f"{signal_name} during the reproduction")
        else:
            parent.set_tags({"suite.error": str(exc)[:5000] or type(exc).__name__})
            parent.fail()
        runs = RunStore(parent.uri)
        runs.clean_dead_runs([runs.experiment_of(parent.run_id)])


def stored_results(
    jobs: list[Job],
    report_dir: Path | None,
    pairs: set[tuple[str, str]],
    resume: bool = True,
    superseded: dict[tuple[str, int], TaskResult] | None = None,
) -> tuple[dict[tuple[str, int], TaskResult], list[Job]]:
    """The jobs' stored results (by config hash and seed), and the jobs still to run;
    ``superseded`` (if given) receives the stored results of the jobs that run again only
    for their test predictions.

    When resuming (``resume``), a stored result that had test logits is reused only while
    they are still here or the test-set noise it takes part in is stored: the logits are
    not committed (a 1M-row test set is 4 MB a job), so a job resumed on another machine
    before its pairs' noise was judged trains again (bit for bit the same figures on the
    same CPU model) to give DeLong its predictions. ``pairs`` (:meth:`~suite.reproduce.plan.ReproductionPlan.noise_pairs`): a job
    is reused only while every pair of the plan it takes part in has its noise stored (a
    new claim pairing a new run with a stored one trains the stored one again), and a job
    in no pair never needs its logits. Regenerating a report (``resume`` false) takes every stored
    result; a pair whose noise was never judged is then reported with its test-set noise
    left out, as the run that stored it did. Either way a stored result whose figures no
    longer match the digest sealed when it was stored is refused with one line
    (:class:`~suite.reproduce.store.StoredRunEdited`) before anything trains or is written;
    every job finished here is stored and sealed by :func:`~suite.reproduce.store.write_result`
    in this process, whichever executor (local workers, Ray tasks) trained it."""
    found: dict[tuple[str, int], TaskResult] = {}
    if report_dir is not None:
        noise = store.read_noise(report_dir)
        for job in jobs:
            result = store.read_result(report_dir, job.key, job.config)
            if result is None:
                continue
            had_logits = store.LOGITS_DIGEST in result.details
            mine = [(a, b, job.seed) for a, b in pairs if job.key in (a, b)]
            unjudged = any(key not in noise for key in mine)
            if resume and had_logits and unjudged and store.predictions(result) is None:
                if superseded is not None:
                    superseded[(job.key, job.seed)] = result
                continue
            found[(job.key, job.seed)] = result
    return found, [j for j in jobs if (j.key, j.seed) not in found]


def warn_if_changed(stored: TaskResult, now: TaskResult, job: Job, directory: Path) -> None:
    """One warning line where a job trained again for its predictions no longer matches
    its stored result (another CPU model: the same config and seed round differently), so
    a replaced figure is never silent."""
    changed = differences(stored, now, job.config)
    if not changed:
        return
    cpu_was = stored.environment.get("cpu_model", "unknown CPU")
    cpu_now = now.environment.get("cpu_model", "unknown CPU")
    auc = next((c for c in changed if c.startswith("test_auc:")), changed[0])
    store.warn(
        f"{store.result_file(directory, job.key, job.seed)}: trained again for its test "
        f"predictions on {cpu_now}, it differs from the stored result (from {cpu_was}): "
        f"{auc} ({len(changed)} figures differ); the new result replaces it"
    )


def _records(plan: ReproductionPlan, seeds: list[int]) -> dict[str, SeededRun]:
    return {key: SeededRun(e.roles[0], e.config, seeds) for key, e in plan.runs.items()}


def reproduce(
    plan: ReproductionPlan,
    report_dir: str | Path | None = None,
    *,
    workers: int | None = None,
    executor: str = "local",
    address: str | None = None,
    progress: bool = True,
    command: str = "",
) -> Reproduction:
    """Train every job of ``plan`` not stored yet; judge the claims.

    ``report_dir``: store each finished job under ``<report_dir>/runs`` and reuse those
    already stored there (a killed reproduction resumes). ``executor``: ``local`` worker
    processes (``workers``; default one per core, or per visible GPU for CUDA jobs, at most
    one per job) or ``ray`` tasks on the cluster at ``address``; the results are the same.
    ``command`` is recorded on the MLflow parent run."""
    started = time.perf_counter()
    directory = Path(report_dir) if report_dir is not None else None
    pairs = plan.noise_pairs()
    superseded: dict[tuple[str, int], TaskResult] = {}
    found, todo = stored_results(plan.jobs, directory, pairs, superseded=superseded)
    records = _records(plan, plan.seeds)
    for (key, seed), result in found.items():
        records[key].results[seed] = result
    cuda = any(job.config.device == "cuda" for job in todo)
    workers = default_workers(len(todo), cuda) if workers is None else max(1, workers)
    runs_on = make_executor(executor, workers, address)
    costs = None
    if workers > 1 or executor != "local":
        dirs = [d for d in (directory, Path("results") / plan.profile) if d is not None]
        costs = job_costs(todo, known_durations(todo, dirs))
    todo = job_order(todo, costs, pairs, by_group=plan.groups_first, seeds=list(plan.seeds))
    first = next(iter(plan.runs.values())).config
    parent = start_parent(first, plan, command)

    def done(job: Job, result: TaskResult) -> None:
        records[job.key].results[job.seed] = result
        if directory is not None:
            result = store.with_digest(result)
            if (job.key, job.seed) in superseded:
                warn_if_changed(superseded[(job.key, job.seed)], result, job, directory)
            store.write_result(directory, job.key, result)

    desc = f"reproduce ({plan.profile}" + (f", {len(found)} stored" if found else "") + ")"
    try:
        bar = progress_bar(total=len(todo), desc=desc, unit="run", enabled=progress)
        run_jobs(todo, runs_on, parent.run_id if parent else None, done, bar)
        bar.close()
        book = NoiseBook(store.read_noise(directory) if directory else {}, predictions=True)
        outcomes = [judge(plan, spec, records, book) for spec in plan.specs]
        for spec in plan.specs:  # a curve's pairs, which no claim asks for
            keep_noise(plan, spec, records, book)
    except BaseException as exc:
        if directory is not None:
            keep_finished_noise(plan, records, directory)
        if parent:
            end_parent(parent, exc)
        raise
    duration = round(time.perf_counter() - started, 3)
    if directory is not None:
        store.write_noise(directory, {**book.stored, **book.entries})
        store.write_manifest(directory, parent.run_id if parent else None, duration)
    return Reproduction(
        plan,
        outcomes,
        plan.seeds,
        parent.run_id if parent else None,
        parent.uri if parent else None,
        duration,
    )


def keep_finished_noise(
    plan: ReproductionPlan, records: dict[str, SeededRun], directory: Path
) -> None:
    """Store the DeLong noise of every seed whose runs of a pair all finished here with
    their test predictions (and the covariances of those seeds), when a reproduction stops
    early (killed, failed, out of time): the predictions are not committed, so without it a
    resume on another machine (a later session, a fresh clone) would train them again.
    Seeds still missing a run are left for the resume."""
    book = NoiseBook(store.read_noise(directory), predictions=True)
    with contextlib.suppress(Exception):  # the stop's own error is the one to report
        for spec in plan.specs:
            keep_noise(plan, spec, records, book)
        if book.entries:
            store.write_noise(directory, {**book.stored, **book.entries})


def regenerate(
    plan: ReproductionPlan, directories: list[Path], finished_seeds: bool = False
) -> Reproduction:
    """The reproduction judged on the stored results under ``directories`` (the first that
    holds a job gives it, with its test-set noise), training none and reading no data
    (the report's regime rows and a curve's cardinalities come from stored files too);
    with ``finished_seeds``, on the seeds none of whose jobs is missing (at least two: an
    interval needs a spread), an interim report of a reproduction still under way."""
    jobs = plan.jobs
    directory, found, missing, noise = directories[0], {}, jobs, {}
    for source in directories:
        more, missing = stored_results(missing, source, set(), resume=False)
        found.update(more)
        noise = {**store.read_noise(source), **noise}
    seeds_left: list[int] = []
    if finished_seeds:
        all_seeds = list(dict.fromkeys(j.seed for j in jobs))
        seeds_left = [s for s in all_seeds if any(j.seed == s for j in missing)]
        kept = [s for s in all_seeds if s not in seeds_left]
        if len(kept) < 2:
            raise ConfigError(
                f"--finished-seeds: {len(kept)} of the profile's {len(all_seeds)} seeds have "
                f"every job stored under {store.runs_dir(directory)} (seeds "
                f"{', '.join(map(str, kept)) or 'none'}); an interim report needs at least 2"
            )
        jobs = [j for j in jobs if j.seed in kept]
        found = {k: r for k, r in found.items() if k[1] in kept}
        missing = []
    if missing:
        first = missing[0]
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise ConfigError(
            f"--from-results {directory}: no stored result for {first.label} "
            f"(expected {store.result_file(directory, first.key, first.seed)}){more}"
        )
    seeds = list(dict.fromkeys(j.seed for j in jobs))
    records = _records(plan, seeds)
    for (key, seed), result in found.items():
        records[key].results[seed] = result
    book = NoiseBook(noise, predictions=False)
    outcomes = [judge(plan, spec, records, book) for spec in plan.specs]
    manifest = store.read_manifest(directory)
    return Reproduction(
        plan,
        outcomes,
        seeds,
        manifest.get("mlflow_run_id"),
        None,
        float(manifest.get("duration_s", 0.0)),
        seeds_left=seeds_left,
    )


def finish_tracking(
    reproduction: Reproduction, files: list[str], summary: dict[str, float]
) -> None:
    """Log the report and plots on the reproduction's parent run and close it."""
    if not reproduction.mlflow_run_id or not reproduction.tracking_uri:
        return  # tracking off, or a report regenerated from stored results
    from suite.tracking import Tracker

    tracker = Tracker.of(reproduction.tracking_uri, reproduction.mlflow_run_id)
    for path in files:
        tracker.log_artifact(path)
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
    fingerprint and the test logits' digest. Returns the differences (none: identical),
    first among them the stored file's own where it no longer matches the digest sealed
    when it was stored (compared all the same: finding what differs is the point here)."""
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
    stored = store.read_result(report_dir, key, job.config, check=False)
    path = store.result_file(report_dir, key, seed)
    if stored is None:
        raise ConfigError(f"--rerun {target} --seed {seed}: no stored result at {path}")
    edited = store.changed_parts(report_dir, key, seed, json.loads(path.read_text("utf-8")))
    found = differences(stored, store.with_digest(run_job(job, None)), job.config)
    if edited:
        found.insert(0, f"stored file {path}: {edited} since it was stored (its digest)")
    return found


def differences(stored: TaskResult, now: TaskResult, config: RunConfig) -> list[str]:
    """What differs between two results of one job (``config``): ``name: stored X, now Y``
    for each metric (measured ones left out), the data fingerprint and the test logits'
    digest."""
    record = SeededRun("", config, [])
    out = []
    for name in sorted(set(stored.metrics) | set(now.metrics)):
        if record.metric_kind(name) == "measured":
            continue
        a, b = stored.metrics.get(name), now.metrics.get(name)
        if a is None or b is None or (a != b and not (math.isnan(a) and math.isnan(b))):
            out.append(f"{name}: stored {a!r}, now {b!r}")
    for label, x, y in (
        ("data fingerprint", stored.data_fingerprint, now.data_fingerprint),
        (
            "test logits sha256",
            stored.details.get(store.LOGITS_DIGEST),
            now.details.get(store.LOGITS_DIGEST),
        ),
    ):
        if x != y:
            out.append(f"{label}: stored {x}, now {y}")
    return out
