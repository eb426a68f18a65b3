"""What a reproduction trains, planned once: the specs and claims chosen, each run's
resolved config (a curve run's options at its budget included), the distinct configs (by
config hash), their (config, seed) jobs and the runs no config can reach, with why.

:func:`build_plan` returns the one :class:`ReproductionPlan` that the runner, the judge,
the noise bookkeeping and the report read."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from suite.config import DatasetSpec, RunConfig, deep_merge, validate_config
from suite.data.source import get_prepared
from suite.embeddings.budget import BudgetUnreachable, options_at_budget
from suite.errors import ConfigError
from suite.reproduce.claims import auc_runs
from suite.reproduce.spec import BUDGET_KEY, Claim, ReproductionSpec, list_specs, load_spec
from suite.reproduce.tuned import tuned_overrides

Cardinalities = Callable[[DatasetSpec], tuple[int, ...]]
"""A dataset's per-feature cardinalities, where a curve run's budget options come from."""


def prepared_cardinalities(dataset: DatasetSpec) -> tuple[int, ...]:
    """The cardinalities of ``dataset`` as prepared (now, if it is not cached yet)."""
    return tuple(get_prepared(dataset, progress=False).schema.cardinalities)


def with_budget_options(
    data: dict[str, Any], what: str, cardinalities: Cardinalities = prepared_cardinalities
) -> dict[str, Any]:
    """A curve run's config data with its method's options at its budget, chosen on the
    ``cardinalities`` of its dataset. Raises :class:`BudgetUnreachable` where the method
    cannot come down to the budget."""
    rest = {k: v for k, v in data.items() if k != BUDGET_KEY}
    config = validate_config(rest, what)
    cards = tuple(cardinalities(config.dataset))
    dim = int(config.embedding.typed_options().dim)
    optimizer = config.train.sparse_optimizer
    options = _options(config.embedding.name, float(data[BUDGET_KEY]), dim, cards, optimizer)
    return deep_merge(rest, {"embedding": {"options": options}})


@functools.lru_cache(maxsize=256)
def _options(
    name: str, fraction: float, dim: int, cards: tuple[int, ...], optimizer: str
) -> dict[str, Any]:
    return options_at_budget(name, fraction, dim, list(cards), optimizer)  # type: ignore[arg-type]


def run_config(
    spec: ReproductionSpec,
    profile: str,
    run_id: str,
    overrides: dict[str, Any],
    cardinalities: Cardinalities = prepared_cardinalities,
) -> RunConfig:
    """The resolved config of one run: its config data (:meth:`ReproductionSpec.run_data`),
    the profile's tuned values, then the command line's overrides; a curve run's options
    at its budget chosen on ``cardinalities``."""
    prof = spec.profiles[profile]
    data = spec.run_data(profile, run_id)
    data = deep_merge(data, tuned_overrides(spec, prof.like or profile, run_id))
    data = deep_merge(data, overrides)
    what = f"reproduction {spec.paper}/{run_id} ({profile})"
    if BUDGET_KEY in data:  # a curve run: its method's options at its budget, on its data
        data = with_budget_options(data, what, cardinalities)
    return validate_config(data, what)


def selected_claims(
    spec: ReproductionSpec, profile: str, claim_ids: list[str] | None
) -> list[Claim]:
    return [
        c
        for c in spec.claims
        if (c.profiles is None or profile in c.profiles) and (not claim_ids or c.id in claim_ids)
    ]


def select_specs(
    papers: list[str] | None, profile: str, claim_ids: list[str] | None = None
) -> list[ReproductionSpec]:
    specs = [load_spec(name) for name in (papers or list_specs())]
    chosen = [s for s in specs if profile in s.profiles and selected_claims(s, profile, claim_ids)]
    if not chosen:
        what = f" with claims {', '.join(claim_ids)}" if claim_ids else ""
        raise ConfigError(f"no reproduction spec has a profile {profile!r}{what}")
    return chosen


def claim_runs(spec: ReproductionSpec, profile: str, claim: Claim) -> list[str]:
    runs = [ref.split(".", 1)[0] for ref in claim.references()]
    families = spec.profiles[profile].families
    runs += [f"{f}/{m}" for f in claim.families() for m in families[f]]
    return list(dict.fromkeys(runs))


def needed_runs(
    spec: ReproductionSpec, profile: str, claims: list[Claim], curve: bool
) -> list[str]:
    """The runs ``claims`` reference and (``curve``) the spec's curve, in the spec's order."""
    needed = {r for c in claims for r in claim_runs(spec, profile, c)}
    if spec.curve is not None and curve:  # the curve's runs serve no claim
        budgets = spec.profiles[profile].budgets
        needed |= {spec.curve.reference, *spec.curve.run_ids(budgets)}
    return [r for r in spec.run_ids(profile) if r in needed]


@dataclass
class PlannedRun:
    config: RunConfig
    roles: list[str] = field(default_factory=list)
    claims: list[str] = field(default_factory=list)


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


@dataclass(frozen=True)
class ReproductionPlan:
    """Everything a reproduction trains and judges, resolved once (:func:`build_plan`)."""

    profile: str
    specs: list[ReproductionSpec]
    claim_ids: list[str] | None
    """The ``--claim`` ids asked for (None: every claim of the profile)."""
    claims: dict[str, list[Claim]]
    """Paper -> its selected claims."""
    overrides: dict[str, Any]
    seeds: list[int]
    needed: dict[str, list[str]]
    """Paper -> the runs its claims (and its curve) need, in the spec's order."""
    runs: dict[str, PlannedRun]
    """Config hash -> the distinct config to train and the roles it plays."""
    where: dict[tuple[str, str], str]
    """``(paper, run id)`` -> config hash, for every planned run."""
    jobs: list[Job]
    unreachable: dict[tuple[str, str], str]
    """``(paper, run id)`` -> why no config reaches it (a curve point under its budget)."""

    def spec(self, paper: str) -> ReproductionSpec:
        return next(s for s in self.specs if s.paper == paper)

    @property
    def groups_first(self) -> bool:
        """Whether the jobs run group by group across the seeds (:func:`groups_first`)."""
        return groups_first(self.specs, self.profile)

    def noise_run_pairs(self, spec: ReproductionSpec) -> list[tuple[str, str]]:
        """The ``(left, right)`` run ids whose test-set noise the paper's report uses
        (``right`` "" for one AUC): each selected claim's AUC runs and, on a curve, the
        reference's AUC and each method's AUC at each budget with every two methods'
        difference there (the report ranks against the best, known only once every seed is
        in), the earlier method of ``curve.methods`` on the left."""
        pairs = [r for c in self.claims[spec.paper] if (r := auc_runs(c))]
        curve = spec.curve
        if curve is not None and not self.claim_ids:
            pairs.append((curve.reference, ""))
            for budget in spec.profiles[self.profile].budgets or curve.budgets:
                ids = [curve.run_id(m, budget) for m in curve.methods]
                pairs += [(r, "") for r in ids]
                pairs += [(a, b) for i, a in enumerate(ids) for b in ids[i + 1 :]]
        return list(dict.fromkeys(pairs))

    def noise_pairs(self) -> set[tuple[str, str]]:
        """The ``(left, right)`` config hashes (``right`` "" for one AUC) of every pair
        whose test-set noise a report uses (:meth:`noise_run_pairs`), as the noise file
        keys them."""
        pairs: set[tuple[str, str]] = set()
        where = self.where
        for spec in self.specs:
            for left, right in self.noise_run_pairs(spec):
                if (spec.paper, left) in where and (not right or (spec.paper, right) in where):
                    right_key = where[(spec.paper, right)] if right else ""
                    pairs.add((where[(spec.paper, left)], right_key))
        return pairs


def build_plan(
    profile: str,
    papers: list[str] | None = None,
    claim_ids: list[str] | None = None,
    overrides: dict[str, Any] | None = None,
    cardinalities: Cardinalities = prepared_cardinalities,
) -> ReproductionPlan:
    """The plan of a profile over ``papers`` (default every spec) and ``claim_ids``
    (default every claim), each run under ``overrides``: distinct configs by config hash,
    one job per config and seed. ``cardinalities``: where a curve run's budget options
    come from (the prepared data; a report regenerated from stored results reads them off
    the stored runs instead, :func:`suite.reproduce.store.stored_cardinalities`)."""
    specs = select_specs(papers, profile, claim_ids)
    return plan_specs(specs, profile, claim_ids, overrides, cardinalities)


def plan_specs(
    specs: list[ReproductionSpec],
    profile: str,
    claim_ids: list[str] | None = None,
    overrides: dict[str, Any] | None = None,
    cardinalities: Cardinalities = prepared_cardinalities,
) -> ReproductionPlan:
    """:func:`build_plan` of specs already loaded (each with a claim selected)."""
    seeds = profile_seeds(specs, profile)
    overrides = copy.deepcopy(overrides or {})
    claims = {s.paper: selected_claims(s, profile, claim_ids) for s in specs}
    needed = {s.paper: needed_runs(s, profile, claims[s.paper], not claim_ids) for s in specs}
    planned: dict[str, PlannedRun] = {}
    where: dict[tuple[str, str], str] = {}
    unreachable: dict[tuple[str, str], str] = {}
    for spec in specs:
        for run_id in needed[spec.paper]:
            try:
                config = run_config(spec, profile, run_id, overrides, cardinalities)
            except BudgetUnreachable as exc:  # off the curve at this budget
                unreachable[(spec.paper, run_id)] = str(exc).split(": ", 1)[-1]
                continue
            key = config.config_hash()
            entry = planned.setdefault(key, PlannedRun(config))
            entry.roles.append(f"{spec.paper}/{run_id}")
            entry.claims += [
                c.id for c in claims[spec.paper] if run_id in claim_runs(spec, profile, c)
            ]
            where[(spec.paper, run_id)] = key
    return ReproductionPlan(
        profile=profile,
        specs=specs,
        claim_ids=list(claim_ids) if claim_ids else None,
        claims=claims,
        overrides=overrides,
        seeds=seeds,
        needed=needed,
        runs=planned,
        where=where,
        jobs=plan_jobs(planned, seeds, profile),
        unreachable=unreachable,
    )
