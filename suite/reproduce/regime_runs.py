"""Verdicts across data regimes: the ``regime`` profile (issue 38, item 3).

The regimes are declared in one place, ``suite/reproductions/regimes.yaml``: each a name,
a line of text and a partial config (a dataset override, and the schedule it needs)
merged over every run of the profile before the command line's ``--set``::

    regimes:
      today: {text: criteo-synth as the standard profile, override: {}}
      kaggle: {text: ..., override: {dataset: {options: {regime: kaggle, train_rows: 1000000}}}}

A spec takes part with a profile ``regime: {like: standard}`` (the standard profile's base,
seeds, per-run extras and tuned values; ``suite.reproduce.spec``); another regime profile
names its own file, ``ground-regime: {like: ground, regimes: regimes.ground.yaml}``, and
adopts from ``results/<like>`` (:func:`regime_setup`). Its empirical claims
(the ones training decides) are judged in every regime with the standard profile's
statistics (``suite.decisions``): each regime's runs are ordinary jobs with their own config
hashes, stored under ``<report dir>/runs/<hash>/seed-N.json`` beside the other regimes',
so a killed run resumes without redoing finished jobs and ``--from-results`` rebuilds the
report. A job whose config equals one the standard profile stored (the ``today`` regime,
tuned values and all) is adopted from ``results/standard/runs`` with its test-set noise
instead of being trained again.

:func:`across` turns one claim's verdicts in the regimes into the report's last column:
``holds in every regime`` (or ``does not hold in every regime``), ``changes (...)`` where
two decided verdicts differ, ``not decided in ...`` where a regime decides nothing.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from suite.config import Frozen, deep_merge, format_validation_error, load_yaml
from suite.errors import ConfigError
from suite.reproduce import store
from suite.reproduce.claims import ClaimOutcome
from suite.reproduce.outcome import Reproduction
from suite.reproduce.plan import (
    Cardinalities,
    Job,
    ReproductionPlan,
    build_plan,
    prepared_cardinalities,
    select_specs,
    selected_claims,
)
from suite.reproduce.runner import regenerate, reproduce, stored_results
from suite.reproduce.spec import SPEC_DIR, list_specs, load_spec

PROFILE = "regime"
REGIMES_FILE = SPEC_DIR / "regimes.yaml"
STANDARD_DIR = Path("results/standard")
"""Where the standard profile's run results are checked in (jobs adopted from there)."""
DECIDED = ("holds", "does not hold")


@dataclass(frozen=True)
class RegimeSetup:
    """A regime profile: its name, the file of its regimes, and the profile (``like``)
    whose runs, seeds and tuned values it takes and whose committed jobs it adopts."""

    profile: str
    regimes_file: Path
    like: str

    @property
    def adopt_from(self) -> Path:
        """Where the ``like`` profile's run results are checked in: ``results/<like>``."""
        return Path("results") / self.like


def regime_setup(profile: str, papers: list[str] | None = None) -> RegimeSetup | None:
    """The regime profile ``profile`` names in the selected specs (the first that has it),
    or None where it is not one: a profile with ``regimes``, or the one named ``regime``."""
    for name in papers or list_specs():
        prof = load_spec(name).profiles.get(profile)
        if prof is None:
            continue
        file = prof.regimes or (REGIMES_FILE.name if profile == PROFILE else None)
        if file is None or prof.like is None:
            return None
        return RegimeSetup(profile, SPEC_DIR / file, prof.like)
    return None


class Regime(Frozen):
    """One data regime: what it is, and the partial config that makes it."""

    text: str = Field(description="one line: the regime and why it is here")
    override: dict[str, Any] = Field(
        default_factory=dict, description="partial config merged over every run of the profile"
    )


class RegimeFile(Frozen):
    regimes: dict[str, Regime] = Field(min_length=1)


def load_regimes(path: str | Path = REGIMES_FILE) -> dict[str, Regime]:
    """The declared regimes, in file order."""
    try:
        return dict(RegimeFile.model_validate(load_yaml(Path(path))).regimes)
    except ValidationError as exc:
        raise ConfigError(f"invalid regimes file {path}: {format_validation_error(exc)}") from None


def regime_overrides(regime: Regime, overrides: dict[str, Any]) -> dict[str, Any]:
    """The overrides one regime's runs train with: the regime's, then the command line's."""
    return deep_merge(copy.deepcopy(regime.override), overrides)


def empirical_claim_ids(
    papers: list[str] | None, claim_ids: list[str] | None, profile: str = PROFILE
) -> list[str]:
    """The claims the regime profile judges: the selected specs' empirical ones."""
    specs = select_specs(papers, profile, claim_ids)
    ids = [
        c.id
        for spec in specs
        for c in selected_claims(spec, profile, claim_ids)
        if c.basis == "empirical"
    ]
    if not ids:
        raise ConfigError("the regime profile judges empirical claims; none is selected")
    return list(dict.fromkeys(ids))


def regime_plans(
    papers: list[str] | None,
    claim_ids: list[str] | None,
    overrides: dict[str, Any],
    regimes: dict[str, Regime],
    cardinalities: Cardinalities = prepared_cardinalities,
    profile: str = PROFILE,
) -> dict[str, ReproductionPlan]:
    """Each regime's plan of the profile's empirical claims under its overrides (no training)."""
    ids = empirical_claim_ids(papers, claim_ids, profile)
    return {
        name: build_plan(profile, papers, ids, regime_overrides(regime, overrides), cardinalities)
        for name, regime in regimes.items()
    }


def regime_jobs(
    papers: list[str] | None,
    claim_ids: list[str] | None,
    overrides: dict[str, Any],
    regimes: dict[str, Regime],
    profile: str = PROFILE,
) -> dict[str, list[Job]]:
    """Every (run, seed) job of each regime, as the runner plans them (no training)."""
    plans = regime_plans(papers, claim_ids, overrides, regimes, profile=profile)
    return {n: p.jobs for n, p in plans.items()}


def adopt_stored(jobs: list[Job], source: Path, report_dir: Path) -> int:
    """Copy into ``report_dir`` the jobs ``source`` (another profile's report directory)
    stored with the very same config, and the test-set noise of their pairs; returns how
    many were copied (jobs already stored in ``report_dir`` are left alone)."""
    if source.resolve() == report_dir.resolve():
        return 0
    adopted: set[str] = set()
    for job in jobs:
        if store.read_result(report_dir, job.key, job.config) is not None:
            continue
        if store.result_file(source, job.key, job.seed).is_file():
            found = store.read_result(source, job.key, job.config)
            if found is not None:
                store.write_result(report_dir, job.key, found)
                adopted.add(f"{job.key}/{job.seed}")
    if adopted:
        keys = {a.split("/")[0] for a in adopted}
        noise = store.read_noise(report_dir)
        noise.update({k: v for k, v in store.read_noise(source).items() if k[0] in keys})
        store.write_noise(report_dir, noise)
    return len(adopted)


@dataclass
class RegimeOutcome:
    name: str
    regime: Regime
    reproduction: Reproduction
    jobs: int
    adopted: int = 0


def reproduce_regimes(
    papers: list[str] | None,
    claim_ids: list[str] | None,
    overrides: dict[str, Any],
    regimes: dict[str, Regime] | None = None,
    adopt_from: Path | None = STANDARD_DIR,
    plans: dict[str, ReproductionPlan] | None = None,
    profile: str = PROFILE,
    **run: Any,
) -> list[RegimeOutcome]:
    """The regime profile: the selected specs' empirical claims judged in every regime.

    Each regime is one reproduction of the ``regime`` profile under its overrides, planned
    once (:func:`regime_plans`) and run by :func:`suite.reproduce.runner.reproduce` (given
    ``run``: progress, command, workers, report_dir), all stored in the one ``report_dir``
    (config hashes keep the regimes apart; resumable as any reproduction; each regime's
    MLflow parent run names it in its ``suite.command`` tag). ``adopt_from``: a report
    directory whose stored jobs of the same config are copied instead of trained (None:
    none). With ``run["from_results"]``, each regime is judged on the results stored there
    (:func:`suite.reproduce.runner.regenerate`), and the jobs it lacks are read from
    ``adopt_from``. ``plans``: the regimes' plans where the caller built them already."""
    regimes = regimes if regimes is not None else load_regimes()
    from_results = run.get("from_results")
    report_dir = run.get("report_dir")
    if from_results is None:
        plans = plans or regime_plans(papers, claim_ids, overrides, regimes, profile=profile)
    else:
        directories = [Path(from_results), *([Path(adopt_from)] if adopt_from else [])]
        cards = store.stored_cardinalities(directories)
        plans = regime_plans(papers, claim_ids, overrides, regimes, cards, profile)
    out = []
    for name, regime in regimes.items():
        plan, adopted = plans[name], 0
        if from_results is not None:
            reproduction = regenerate(plan, directories)
        else:
            if report_dir is not None and adopt_from is not None:
                adopted = adopt_stored(plan.jobs, Path(adopt_from), Path(report_dir))
            command = f"{run.get('command', '')} [regime {name}]".strip()
            reproduction = reproduce(
                plan,
                report_dir,
                workers=run.get("workers"),
                progress=run.get("progress", True),
                command=command,
            )
        out.append(RegimeOutcome(name, regime, reproduction, len(plan.jobs), adopted))
    return out


def across(verdicts: dict[str, str]) -> str:
    """One claim's verdicts by regime -> the report's last column."""
    decided = {r: v for r, v in verdicts.items() if v in DECIDED}
    undecided = [r for r in verdicts if r not in decided]
    parts = []
    if len(set(decided.values())) > 1:
        parts.append("changes (" + "; ".join(f"{r}: {v}" for r, v in decided.items()) + ")")
    elif decided and not undecided:
        parts.append(f"{next(iter(decided.values()))} in every regime")
    if undecided:
        parts.append("not decided in " + ", ".join(undecided))
    return "; ".join(parts)


def claim_grid(outcomes: list[RegimeOutcome]) -> list[tuple[str, str, dict[str, ClaimOutcome]]]:
    """``(paper, claim id, regime -> outcome)`` for every claim judged, in report order."""
    grid: dict[tuple[str, str], dict[str, ClaimOutcome]] = {}
    for regime in outcomes:
        for paper in regime.reproduction.papers:
            for claim in paper.claims:
                grid.setdefault((paper.spec.paper, claim.claim.id), {})[regime.name] = claim
    return [(paper, cid, by) for (paper, cid), by in grid.items()]


def job_minutes(
    jobs: list[Job], reference: dict[str, float], scale: float = 1.0
) -> tuple[float, int]:
    """``(minutes, known)``: the jobs' estimated training minutes, from ``reference``
    (seconds one seed of a config took, by the run's role) times ``scale``; ``known``
    counts the jobs that had a reference figure (the others count 0)."""
    seconds, known = 0.0, 0
    for job in jobs:
        role = job.tags["suite.roles"].split(",")[0]
        if role in reference:
            seconds += reference[role] * scale
            known += 1
    return seconds / 60, known


def role_seconds(jobs: list[Job], directory: Path) -> dict[str, float]:
    """Mean seconds per seed of each run (by role ``paper/run``) stored under ``directory``
    for these jobs' configs."""
    found: dict[str, list[float]] = {}
    for job in jobs:
        result = store.read_result(directory, job.key, job.config)
        if result is not None:
            found.setdefault(job.tags["suite.roles"].split(",")[0], []).append(result.duration_s)
    return {role: sum(v) / len(v) for role, v in found.items()}


def train_rows(jobs: list[Job]) -> float:
    """The training rows of a regime's runs (the first job's; NaN without one)."""
    if not jobs:
        return math.nan
    return float(jobs[0].config.dataset.options.get("train_rows", math.nan))


def plan_text(
    plans: dict[str, ReproductionPlan], report_dir: Path, reference_dir: Path
) -> list[str]:
    """One line per regime: its jobs, those stored (or adoptable), and the estimated
    job-minutes still to train (``reference_dir``'s per-run seconds, from today's regime,
    scaled by training rows; runs it lacks at the median). A job stored here or in
    ``reference_dir`` counts as to train where the runner would train it again: its logits
    gone and the test-set noise of one of its pairs not stored there."""
    first = next(iter(plans.values())).jobs
    reference = role_seconds(first, reference_dir)
    median = sorted(reference.values())[len(reference) // 2] if reference else math.nan
    lines = []
    for name, plan in plans.items():
        pairs = plan.noise_pairs()
        _, missing = stored_results(plan.jobs, report_dir, pairs)
        _, todo = stored_results(missing, reference_dir, pairs)  # adoptable as is
        again = sum(
            any(
                store.read_result(d, j.key, j.config) is not None
                for d in (report_dir, reference_dir)
            )
            for j in todo
        )
        scale = train_rows(plan.jobs) / train_rows(first)
        minutes, known = job_minutes(todo, reference, scale)
        minutes += (len(todo) - known) * median * scale / 60
        cost = (
            f"about {minutes:.0f} job-minutes (x{scale:g} the standard's seconds per job)"
            if not math.isnan(minutes)
            else "no stored standard durations to estimate its job-minutes from"
        )
        lines.append(
            f"regime {name}: {len(plan.jobs)} jobs, {len(plan.jobs) - len(todo)} stored or "
            f"adopted, {len(todo)} to train"
            + (
                f" ({again} of them stored, their logits gone: again for their pairs' "
                "test-set noise)"
                if again
                else ""
            )
            + f", {cost}"
        )
    return lines
