"""Run what a profile of the reproduction specs needs, judge the claims.

Every training goes down the one run path (``RunConfig`` -> ``execute``), once per seed of
the profile, as a child of one MLflow parent run for the whole reproduction. A child is
named by paper and role (``qr/hash_4 seed 3``) and tagged with the papers, roles and claim
ids it serves; a config that several papers share (same resolved config) runs once per
seed. A scaling family's sizes are ordinary ``accuracy`` runs, one per member.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from suite.config import RunConfig, deep_merge, load_yaml, validate_config
from suite.errors import ConfigError
from suite.presets import preset_path
from suite.progress import progress_bar
from suite.reproduce.claims import (
    COMPUTE_METRIC,
    ClaimOutcome,
    SeedFigures,
    evaluate,
    evaluate_scaling,
)
from suite.reproduce.spec import Claim, ReproductionSpec, list_specs, load_spec
from suite.results import TaskResult, find_metric, read_arrays
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
        result = self.results.get(seed)
        arrays = read_arrays(result) if result is not None else None
        if not arrays or not {"test_labels", "test_logits"} <= set(arrays):
            return None
        return arrays["test_labels"], arrays["test_logits"]

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
    data = deep_merge(data, overrides)
    return validate_config(data, f"reproduction {spec.paper}/{run_id} ({profile})")


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
            config = run_config(spec, profile, run_id, overrides)
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


def reproduce(
    profile: str,
    papers: list[str] | None = None,
    claim_ids: list[str] | None = None,
    overrides: dict[str, Any] | None = None,
    progress: bool = True,
    command: str = "",
) -> Reproduction:
    """Train every needed run of the chosen specs under each seed; judge their claims."""

    from suite.runs.single import execute
    from suite.tracking import Tracker

    started = time.perf_counter()
    specs = select_specs(papers, profile, claim_ids)
    seeds = profile_seeds(specs, profile)
    overrides = copy.deepcopy(overrides or {})
    planned, where = plan_runs(specs, profile, claim_ids, overrides)
    first = next(iter(planned.values())).config
    parent: Tracker | None = None
    if first.tracking.enabled:
        from suite.environment import environment

        env = environment(first.device)
        parent = Tracker.start(
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
    records: dict[str, RunRecord] = {}
    try:
        total = len(planned) * len(seeds)
        bar = progress_bar(total=total, desc=f"reproduce ({profile})", unit="run", enabled=progress)
        for key, entry in planned.items():
            record = RunRecord(entry.roles[0], entry.config, seeds)
            for seed in seeds:
                bar.set_postfix_str(f"{entry.roles[0]} seed {seed}")
                config = entry.config.with_overrides(
                    {
                        "seed": seed,
                        "tracking.run_name": f"{entry.roles[0]} seed {seed}",
                        "tracking.keep_arrays": True,  # DeLong's test reads the predictions
                    }
                )
                tags = {
                    "suite.papers": ",".join(
                        dict.fromkeys(r.split("/", 1)[0] for r in entry.roles)
                    ),
                    "suite.roles": ",".join(entry.roles),
                    "suite.claims": ",".join(dict.fromkeys(entry.claims)),
                    "suite.profile": profile,
                }
                record.results[seed] = execute(
                    config, parent_run_id=parent.run_id if parent else None, extra_tags=tags
                )
                bar.update()
            records[key] = record
        bar.close()
        outcomes = [judge(spec, profile, claim_ids, records, where) for spec in specs]
    except BaseException:
        if parent:
            parent.fail()
        raise
    return Reproduction(
        profile,
        outcomes,
        seeds,
        overrides,
        parent.run_id if parent else None,
        parent.uri if parent else None,
        round(time.perf_counter() - started, 3),
    )


def judge(
    spec: ReproductionSpec,
    profile: str,
    claim_ids: list[str] | None,
    records: dict[str, RunRecord],
    where: dict[tuple[str, str], str],
) -> PaperOutcome:
    """The paper's claims judged on its runs' per-seed figures."""
    runs = {
        run_id: records[where[(spec.paper, run_id)]]
        for run_id in needed_runs(spec, profile, claim_ids)
    }
    figures: SeedFigures = {rid: rec.per_seed for rid, rec in runs.items()}

    def predictions(run_id: str, seed: int) -> tuple[np.ndarray, np.ndarray] | None:
        return runs[run_id].test_predictions(seed)

    families = {f: list(ms) for f, ms in spec.profiles[profile].families.items()}
    claims, fits, cache = [], {}, {}
    for claim in selected_claims(spec, profile, claim_ids):
        if claim.families():
            outcome, found = evaluate_scaling(claim, families, figures, cache)
            fits.update(found)
            claims.append(outcome)
        else:
            outcome = evaluate(claim, figures, predictions)
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
    if not reproduction.mlflow_run_id:
        return
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
