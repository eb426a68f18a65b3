"""Run what a profile of the reproduction specs needs, check the claims, write the report.

Every run goes down the one run path (``RunConfig`` -> ``execute``); a run that several
papers share (same resolved config) runs once.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite.config import RunConfig, deep_merge, validate_config
from suite.errors import ConfigError
from suite.progress import progress_bar
from suite.reproduce.claims import ClaimOutcome, Figures, evaluate
from suite.reproduce.spec import Claim, ReproductionSpec, list_specs, load_spec
from suite.results import TaskResult


@dataclass
class RunRecord:
    """One executed run: its config, figures, and where it is tracked."""

    run_id: str
    config: RunConfig
    metrics: dict[str, float]
    std: dict[str, float]
    seeds: list[int]
    mlflow_run_id: str | None
    result: TaskResult | None = None
    details: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0


@dataclass
class PaperOutcome:
    spec: ReproductionSpec
    runs: dict[str, RunRecord]
    claims: list[ClaimOutcome]


def select_specs(
    papers: list[str] | None, profile: str, claim_ids: list[str] | None = None
) -> list[ReproductionSpec]:
    specs = [load_spec(name) for name in (papers or list_specs())]
    chosen = [s for s in specs if profile in s.profiles and needed_runs(s, profile, claim_ids)]
    if not chosen:
        raise ConfigError(f"no reproduction spec has a profile {profile!r}")
    return chosen


def run_config(
    spec: ReproductionSpec, profile: str, run_id: str, overrides: dict[str, Any]
) -> RunConfig:
    """The resolved config of one run: profile base, then the run, then its profile part."""
    prof = spec.profiles[profile]
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


def needed_runs(spec: ReproductionSpec, profile: str, claim_ids: list[str] | None) -> list[str]:
    if not claim_ids:
        return list(spec.runs)
    claims = selected_claims(spec, profile, claim_ids)
    refs = {ref.split(".", 1)[0] for c in claims for ref in c.references()}
    return [r for r in spec.runs if r in refs]


def execute_run(config: RunConfig, seeds: list[int], label: str) -> RunRecord:
    """One config over its seeds: a single run, or a multi-seed parent with children."""
    from suite.runs.single import execute

    if len(seeds) == 1:
        result = execute(config.with_overrides({"seed": seeds[0]}))
        return RunRecord(
            label,
            config,
            dict(result.metrics),
            {},
            seeds,
            result.mlflow_run_id,
            result,
            dict(result.details),
            result.duration_s,
        )
    from suite.runs.multiseed import execute_seeds

    multi = execute_seeds(config, seeds)
    std = {k: v for k, v in multi.std.items() if v is not None}
    details = dict(multi.per_seed[0].details) if multi.per_seed else {}
    return RunRecord(
        label,
        config,
        dict(multi.mean),
        std,
        seeds,
        multi.mlflow_run_id,
        None,
        details,
        multi.duration_s,
    )


def reproduce(
    profile: str,
    papers: list[str] | None = None,
    claim_ids: list[str] | None = None,
    overrides: dict[str, Any] | None = None,
    progress: bool = True,
) -> list[PaperOutcome]:
    """Run every needed run of the chosen specs for ``profile`` and check their claims."""
    specs = select_specs(papers, profile, claim_ids)
    overrides = copy.deepcopy(overrides or {})
    plan: list[tuple[ReproductionSpec, str, RunConfig]] = []
    for spec in specs:
        for run_id in needed_runs(spec, profile, claim_ids):
            plan.append((spec, run_id, run_config(spec, profile, run_id, overrides)))

    done: dict[tuple[str, tuple[int, ...]], RunRecord] = {}
    outcomes: dict[str, dict[str, RunRecord]] = {spec.paper: {} for spec in specs}
    bar = progress_bar(plan, desc=f"reproduce ({profile})", unit="run", enabled=progress)
    for spec, run_id, config in bar:
        seeds = spec.profiles[profile].seeds
        key = (config.config_hash(), tuple(seeds))
        bar.set_postfix_str(f"{spec.paper}/{run_id}")
        if key not in done:
            done[key] = execute_run(config, seeds, run_id)
        outcomes[spec.paper][run_id] = done[key]
    bar.close()

    results = []
    for spec in specs:
        runs = outcomes[spec.paper]
        figures: Figures = {rid: rec.metrics for rid, rec in runs.items()}
        claims = [evaluate(c, figures) for c in selected_claims(spec, profile, claim_ids)]
        results.append(PaperOutcome(spec, runs, claims))
    return results


def default_report_dir(profile: str) -> Path:
    return Path("results") / profile
