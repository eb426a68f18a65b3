"""What a reproduction trains: the specs and claims chosen, each run's resolved config,
the distinct configs (by config hash) and their (config, seed) jobs."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from suite.config import RunConfig, deep_merge, load_yaml, validate_config
from suite.embeddings.budget import BudgetUnreachable
from suite.errors import ConfigError
from suite.presets import preset_path
from suite.reproduce.spec import BUDGET_KEY, Claim, ReproductionSpec, list_specs, load_spec


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


def groups_first(specs: list[ReproductionSpec], profile: str) -> bool:
    """Whether a selected spec's profile runs its jobs group by group across the seeds
    (``order: groups``) rather than seed by seed."""
    return any(s.profiles[profile].order == "groups" for s in specs)


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
                    # no verdict reads the curve (convergence flags read the validations
                    # of train.eval_every_steps), and on DHE it costs more than training
                    "tracking.val_curve": 0,
                }
            )
            jobs.append(Job(key, seed, config, tags, label))
    return jobs
