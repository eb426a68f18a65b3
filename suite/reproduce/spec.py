"""Reproduction specs: the runs a paper's claims need and the claims themselves.

A spec is YAML in ``suite/reproductions/<paper>.yaml``. Every run of every profile runs
once per seed of the profile (the same seeds for every run, so values pair by seed)::

    paper: qr                          # the spec's name (also its file stem)
    title: Compositional Embeddings ... (Shi et al. 2019)
    link: https://arxiv.org/abs/1909.02107
    source: where the paper's figures come from (table, figure, README line)
    profiles:                          # what every run of a profile starts from
      quick:
        base: {dataset: {name: criteo-synth, options: {train_rows: 40000}}}
        seeds: [0, 1, 2, 3, 4]         # quick: >= 5 seeds; full: >= 3
        runs: {full: {train: {...}}}   # optional per-run extras for this profile only
        families: {...}                # optional, see below
        note: what this profile shrinks (data, steps, sizes) and why; shown in the report
      full:
        base: {dataset: {name: criteo-kaggle, protocol: dlrm}, device: cuda}
        seeds: [0, 1, 2]
    runs:                              # partial run configs merged over the profile's base
      full: {embedding: {name: full, options: {dim: 16}}, task: {name: accuracy}}
      hash_4: {embedding: {name: hash, options: {dim: 16, ratio: 4}}, task: {name: accuracy}}
    claims: [...]

**Families** (scaling studies) expand into ordinary ``accuracy`` runs, one per member,
named ``<family>/<member>``; a member is a model-size preset name
(``suite/presets/models``) or a partial config (its ``model`` replaces the run's whole)::

    families:
      dlrm: {xs: dlrm-xs, s: dlrm-s}                       # presets
      wukong: {a: {model: {name: wukong, options: {...}}}} # inline sizes
    runs:
      dlrm: {embedding: {name: full, options: {dim: 16}}}  # optional: config of the family

**Claims** (``kind`` names the direction; ``margin`` the practical size the paper claims,
0.001 AUC being the field's threshold):

* comparative, both sides ``"run.metric"`` (or ``{ratio: [a, b]}`` / ``{diff: [a, b]}``
  of references): judged on the CI of the per-seed paired differences ``left - right``.
  ``{alltoall_speedup: [run, GB/s]}`` is a modelled figure: the run's all-to-all payload
  sent raw over a link of that many GB/s, over the same payload through its codec (the
  codec's measured seconds plus its wire bytes over the link).
  ``greater``: ``left > right + margin``; ``less``: ``left < right - margin``;
  ``within``: ``|left - right| <= margin``.
* threshold, ``right`` a number: judged on the CI of the mean of ``left`` over seeds.
  ``at_least`` / ``at_most`` are ``greater`` / ``less`` with margin 0.
* ``ci: bootstrap`` (seeded percentile bootstrap) instead of the default Student t, for
  skewed figures.
* ``over: {b: [2, 4, 8, 16]}`` repeats a claim for each value, with ``{b}`` replaced in
  its ``id``, ``text`` and references (a curve: one row per point).
* ``exponent_greater``: ``left`` and ``right`` are families; the claim is that ``left``'s
  scaling exponent ``b`` (``metric = L_inf + a C^-b``, ``C`` = training FLOPs) has a CI
  wholly above ``right``'s. ``less_at_compute``: ``left``'s fitted ``metric`` is lower by
  more than ``margin`` at the largest compute both families reach. Both bootstrap over
  seeds and points and need each fit to pass the quality gate (``suite.stats``), else
  ``not measurable``.
* ``form`` (required on every empirical claim) is the paper's own form, and ``quote``
  (required on the paper's empirical claims) its words: ``superiority`` ("beats":
  ``greater``/``less``/``at_least``/``at_most`` with the paper's margin, 0 where it gives
  none); ``non_inferiority`` ("without loss", "comparable", "maintains": ``greater`` with
  the loss tolerated as ``margin``, tested as ``left - right > -margin``; ``less`` for a
  figure lower is better, ``< +margin``); ``equivalence`` (``within``) only where the paper
  claims both directions.
* ``suite_bound: {margin: 0.001}`` (any of margin, left, right, kind, text): the suite's
  stricter form of the claim, a second claim ``<id>-suite-bound`` the report labels
  ``(suite's bound)`` and counts apart from the paper's.
* ``testable_if: {figure: run.metric, at_least: X, why: ...}``: below ``X`` (mean over
  seeds) the claim's object is too small to mean what the paper means and it reads ``not
  testable at this scale``, with ``why``.
* ``profiles: [quick]`` limits a claim to some profiles (default all).
* ``basis: structural`` marks a claim exact by construction (a byte count, a budget, a
  plan's balance, a figure an interval sets): judged on its mean over seeds as exact, with
  no seed statistics, and counted apart from the empirical claims that training decides. ``origin: suite`` marks a target of this suite's own, not the paper's.

**Curve** (optional): methods x budgets on one AUC-against-total-bytes curve
(``suite.reproduce.curve``). Each method at each budget is an ``accuracy`` run named
``<method>_at_<b>``, whose options the method's ``options_at_budget`` chooses at run time on
the run's data, to hold at most ``1/b`` of the reference run's total embedding bytes; a
method that cannot come down to a budget is left out there, with the reason::

    curve: {reference: full, dim: 16, methods: [hash, qr, robe], budgets: [2, 4, 8, 16, 32, 64]}

A profile's ``budgets: [4, 16]`` runs only those points of the curve (a cheaper ``quick``).

**like** (optional, per profile): ``regime: {like: standard}`` takes the standard profile's
base, seeds, per-run extras and tuned values (not its tuning block or note); the profile's own
fields replace them. The ``regime`` profile judges the empirical claims in every data regime
of ``suite/reproductions/regimes.yaml`` (``suite.reproduce.regime_runs``); another profile
does so with ``regimes: <file under suite/reproductions>`` beside its ``like``.

**Tuning** (optional, per profile): every compared run tuned with the same budget, one
Optuna study per run; ``suite reproduce --profile P --tune`` writes the chosen values to
``suite/reproductions/tuned/<paper>.<profile>.yaml`` and every run of the profile then
trains with them (format: the docstring of ``suite/reproduce/tuning.py``)::

    tuning:
      n_trials: 8
      space: {train.sparse_lr: {type: float, low: 0.005, high: 0.5, log: true}}
      runs: {hash_4: {}, qr_4: {embedding.options.operation: {type: categorical, choices: [mult, add]}}}
      share: {qr_2: qr_4}              # qr_2 trains with qr_4's tuned values
      seed: 0                          # TPE sampler seed
      base: {}                         # overrides for tuning trials only
      startup_trials: 3                # optional: TPE's random trials (n_trials >= 2.5x)
      pruning: {n_warmup_steps: 1042}  # optional: median pruning on the validations
      run_seed: 100                    # optional: trials' seed, not an evaluation seed

A comparison of two runs' ``test_auc`` also shows DeLong's p on each seed's test set (from
the predictions accuracy runs keep). A claim on a metric of kind ``measured`` (a timing) is
judged in the report's Timings section and counted apart from the others.

Verdicts (``suite.decisions``): one-sided tests at 5% on the seeds' spread plus, for test
AUCs, the test set's DeLong variance; equivalence by TOST. ``holds`` / ``does not hold``
when a test decides, ``underpowered (needs n=...)`` otherwise, ``not measurable`` without
figures, ``not testable at this scale`` where a scaling fit fails its gate, rests on runs
still improving, or a ``testable_if`` floor is not met. The report's verdicts and counts are
Holm-decided over its empirical claims (``suite.reproduce.report.apply_holm``).
"""

from __future__ import annotations

import copy
import difflib
import math
import re
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from suite.config import (
    Frozen,
    RunConfig,
    deep_merge,
    format_validation_error,
    load_yaml,
    validate_config,
)
from suite.errors import ConfigError
from suite.presets import preset_path
from suite.registry import unknown_name_message
from suite.studies.spec import Distribution, ParamSpace, PrunerSpec, SearchSpace, StudySpec

SPEC_DIR = Path(__file__).resolve().parent.parent / "reproductions"

Operand = float | str | dict[str, list[str]]
COMPARATIVE = ("greater", "less", "within", "at_least", "at_most")
SCALING = ("exponent_greater", "less_at_compute")
Member = str | dict[str, Any]


TUNED_ENV = "RECSUITE_TUNED_DIR"
"""Environment variable naming another folder for the tuned files (tests use it)."""
OBJECTIVE = "val_auc"
"""What every tuned run's study maximizes."""


def _check_space(space: dict[str, Any], field: str) -> None:
    """The study spec's own key checks (dotted keys, no ``embedding.name``)."""
    try:
        SearchSpace(params=space)
    except ValidationError as exc:
        raise ValueError(f"{field}: {format_validation_error(exc)}") from None


STARTUP_SHARE = 2.5
"""A tuning block that sets ``startup_trials`` gives at least this many times as many trials:
TPE models from the trials after its random start, and fewer leaves it next to nothing."""


def _check_validates_during(base: RunConfig, field: str) -> None:
    """A pruned trial must validate before its end (``train.eval_every_steps``, or more
    than one epoch): the pruner compares those validations' AUCs."""
    if base.train.epochs == 1 and base.train.eval_every_steps is None:
        raise ValueError(
            f"{field}: trials validate only when training ends (one epoch, no "
            "train.eval_every_steps), so nothing can be pruned; set train.eval_every_steps"
        )


class Tuning(Frozen):
    """A profile's tuning block: one study per tuned run, all with the same budget."""

    n_trials: int = Field(ge=1, description="trials of every tuned run's study")
    space: ParamSpace = Field(default_factory=dict, description="params every tuned run searches")
    runs: dict[str, ParamSpace | None] = Field(
        min_length=1, description="tuned run -> its extra params (optional)"
    )
    share: dict[str, str] = Field(
        default_factory=dict, description="run -> the tuned run whose values it takes"
    )
    seed: int = Field(0, ge=0, description="the TPE sampler's seed")
    base: dict[str, Any] = Field(
        default_factory=dict, description="config overrides for tuning trials only"
    )
    startup_trials: int | None = Field(
        None,
        ge=1,
        description="the TPE sampler's random trials before it models (n_startup_trials; "
        "default Optuna's 10); when given, n_trials must be at least 2.5 times it",
    )
    pruning: PrunerSpec | None = Field(
        None,
        description="median pruning of trials on the validation AUC of their training's "
        "validations (the study pruner: n_startup_trials, n_warmup_steps in training "
        "steps, interval_steps); default none",
    )
    run_seed: int | None = Field(
        None,
        ge=0,
        le=2**32 - 1,
        description="the seed tuning trials train under, none of the profile's evaluation "
        "seeds (default: the profile's first seed, itself evaluated)",
    )

    @field_validator("runs")
    @classmethod
    def _no_none(cls, runs: dict[str, ParamSpace | None]) -> dict[str, ParamSpace | None]:
        return {run: extra or {} for run, extra in runs.items()}

    @model_validator(mode="after")
    def _check(self) -> Tuning:
        if self.startup_trials is not None and self.n_trials < STARTUP_SHARE * self.startup_trials:
            raise ValueError(
                f"startup_trials: {self.startup_trials} random trials leave TPE too few of "
                f"n_trials {self.n_trials} to model; give n_trials >= "
                f"{math.ceil(STARTUP_SHARE * self.startup_trials)} or fewer startup_trials"
            )
        if self.space:
            _check_space(self.space, "space")
        for run, extra in self.runs.items():
            if extra:
                _check_space(extra, f"runs.{run}")
            if not self.run_space(run):
                raise ValueError(f"runs.{run}: nothing to search (give space or the run's params)")
        tuned = ", ".join(self.runs)
        for run, source in self.share.items():
            if run in self.runs:
                raise ValueError(f"share.{run}: {run!r} is tuned itself; it cannot share")
            if source not in self.runs:
                raise ValueError(
                    f"share.{run}: {source!r} is not a tuned run (tuning.runs: {tuned})"
                )
        return self

    def run_space(self, run_id: str) -> dict[str, Distribution]:
        """The params ``run_id``'s study searches: the common space plus its own."""
        return {**self.space, **(self.runs.get(run_id) or {})}

    def trial_overrides(self, profile: Profile, overrides: dict[str, Any]) -> dict[str, Any]:
        """What a tuning trial trains with over the run's config: the block's ``base``,
        the tuning seed (``run_seed``, else the profile's first seed), then ``overrides``."""
        seed = profile.seeds[0] if self.run_seed is None else self.run_seed
        return deep_merge(deep_merge(self.base, {"seed": seed}), overrides)

    def source(self, run_id: str) -> str | None:
        """The tuned run whose values ``run_id`` trains with (itself, its share, or None)."""
        return run_id if run_id in self.runs else self.share.get(run_id)

    def check(self, spec: ReproductionSpec, profile: str) -> None:
        """Every run named exists in the profile, and every tuned run's study (its space's
        keys against the run's config, its objective against its task) is valid.
        Raises ``ValueError`` naming the field (``profiles.<profile>.tuning...``)."""
        where = f"profiles.{profile}.tuning"
        prof = spec.profiles[profile]
        if self.run_seed is not None and self.run_seed in prof.seeds:
            raise ValueError(
                f"{where}.run_seed: {self.run_seed} is one of the profile's evaluation seeds "
                f"{prof.seeds}; tune under another seed"
            )
        runs = spec.run_ids(profile)
        for field, names in (("runs", list(self.runs)), ("share", list(self.share))):
            for name in names:
                if name not in runs:
                    raise ValueError(
                        f"{where}.{field}: unknown run {name!r} (runs: {', '.join(runs)})"
                    )
        for run_id in self.runs:
            what = f"reproduction {spec.paper}/{run_id} ({profile})"
            try:
                data = spec.run_data(profile, run_id)
                data.pop(BUDGET_KEY, None)  # a curve run's options: chosen on its data later
                base = validate_config(deep_merge(data, self.trial_overrides(prof, {})), what)
                study = tuning_study(spec, profile, run_id, base)
                study.check_space()
                study.check_metrics()
            except ConfigError as exc:
                raise ValueError(f"{where}.runs.{run_id}: {exc}") from None
            if self.pruning is not None and self.pruning.name != "none":
                _check_validates_during(base, f"{where}.pruning")


class TunedRun(Frozen):
    """What one run's study chose, and how to get it again."""

    values: dict[str, Any] = Field(description="dotted config key -> tuned value")
    study: str
    trials: int = Field(ge=1)
    best_val_auc: float
    sampler_seed: int
    workers: int = Field(ge=1)
    commit: str
    command: str
    run_seed: int | None = Field(None, description="the block's run_seed the trials trained under")
    startup_trials: int | None = Field(None, description="the block's startup_trials")
    pruning: dict[str, Any] | None = Field(None, description="the block's pruning")
    top3_val_auc_spread: float | None = Field(
        None,
        description="max - min validation AUC of the study's three best complete trials: how "
        "flat the top of the search was (absent from tunings before it, or with fewer than "
        "three complete trials)",
    )

    OPTIONAL: ClassVar[tuple[str, ...]] = (
        "run_seed",
        "startup_trials",
        "pruning",
        "top3_val_auc_spread",
    )
    """Fields a tuned file leaves out when unset (files written before them stay as they are)."""

    def settings_match(self, tuning: Tuning) -> bool:
        """Whether this entry was tuned under ``tuning``'s trial seed, TPE start and pruning."""
        pruning = tuning.pruning.model_dump(mode="json") if tuning.pruning else None
        return (self.run_seed, self.startup_trials, self.pruning) == (
            tuning.run_seed,
            tuning.startup_trials,
            pruning,
        )


class TunedFile(Frozen):
    """``suite/reproductions/tuned/<paper>.<profile>.yaml``."""

    paper: str
    profile: str
    runs: dict[str, TunedRun]


class Profile(Frozen):
    """What every run of a profile starts from, the seeds it runs and its families."""

    base: dict[str, Any] = Field(default_factory=dict)
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2, 3, 4], min_length=1)
    runs: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="per-run extra config for this profile only"
    )
    families: dict[str, dict[str, Member]] = Field(
        default_factory=dict, description="family -> member -> preset name or partial config"
    )
    note: str | None = Field(
        None, description="shown in the report: what the profile shrinks and why"
    )
    tuning: Tuning | None = Field(
        None, description="one study per tuned run, same budget (see suite.reproduce.tuning)"
    )
    budgets: list[int] | None = Field(
        None, description="the spec's curve at these of its budgets only (default all)"
    )
    like: str | None = Field(
        None,
        description="another profile whose base, seeds, per-run extras and tuned values this "
        "one takes (the regime profile: suite.reproduce.regime_runs)",
    )
    tuned_as: str | None = Field(
        None,
        description="the name its tuned file (<paper>.<name>.yaml) and tuning studies go by "
        "(default: the profile's own), so a profile renamed after it was tuned keeps its "
        "tuned values and resumable studies",
    )
    regimes: str | None = Field(
        None,
        description="a regime profile (with like): the file, under suite/reproductions, of "
        "the data regimes its empirical claims are judged in (suite.reproduce.regime_runs); "
        "the profile named regime reads regimes.yaml without it",
    )
    order: Literal["seeds", "groups"] = Field(
        "seeds",
        description="seeds: each seed's jobs before the next seed's; groups: each group of "
        "jobs whose noise is judged together under every seed before the next group, for a "
        "profile far longer than a sitting, whose seeds would otherwise each be judged alone",
    )

    @model_validator(mode="after")
    def _regimes_need_like(self) -> Profile:
        if self.regimes is not None and self.like is None:
            raise ValueError(
                f"regimes: {self.regimes!r} makes a regime profile, which judges another "
                "profile's runs: give like"
            )
        return self

    @field_validator("seeds")
    @classmethod
    def _distinct(cls, seeds: list[int]) -> list[int]:
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds must be distinct, got {seeds}")
        return seeds


MODELLED_ALLTOALL = "alltoall_speedup"
ALLTOALL_METRICS = ("comm_raw_bytes", "comm_wire_bytes", "comm_codec_seconds")
"""The figures of a run that :data:`MODELLED_ALLTOALL` models its all-to-all from."""


def _references(operand: Operand) -> list[str]:
    if isinstance(operand, str):
        return [operand]
    if isinstance(operand, dict):
        ((kind, refs),) = operand.items()
        if kind == MODELLED_ALLTOALL:
            return [f"{refs[0]}.{metric}" for metric in ALLTOALL_METRICS]
        return list(refs)
    return []


def _is_number(text: object) -> bool:
    try:
        return float(str(text)) > 0
    except ValueError:
        return False


class ScaleGate(Frozen):
    """Where a claim's object is big enough to mean what the paper means: ``figure`` (a
    ``run.metric``, mean over seeds) at least ``at_least``; below, the claim reads ``not
    testable at this scale``, with ``why``."""

    figure: str = Field(pattern=r"^[^.]+\..+$", description="run.metric")
    at_least: float
    why: str


class Claim(Frozen):
    """A claim of a paper, checked on measured figures (see the module docstring)."""

    id: str
    text: str
    kind: Literal[
        "greater", "less", "within", "at_least", "at_most", "exponent_greater", "less_at_compute"
    ]
    left: Operand
    right: Operand
    margin: float = Field(0.0, ge=0)
    metric: str = Field("test_logloss", description="scaling claims: the fitted metric")
    ci: Literal["t", "bootstrap"] = "t"
    over: dict[str, list[Any]] | None = None
    profiles: list[str] | None = Field(
        None, description="profiles the claim applies to (default all)"
    )
    basis: Literal["empirical", "structural"] = Field(
        "empirical",
        description="empirical: decided by training; structural: exact by construction "
        "(bytes, budgets, plans), counted apart",
    )
    origin: Literal["paper", "suite"] = Field(
        "paper", description="paper: the paper's claim; suite: a target of this suite's own"
    )
    form: Literal["superiority", "non_inferiority", "equivalence"] | None = Field(
        None,
        description="the paper's logical form (required on empirical claims): superiority "
        "(beats by the paper's margin), non_inferiority (loses at most the margin), "
        "equivalence (both directions)",
    )
    quote: str | None = Field(
        None,
        description="the paper's words the claim formalises (required on the paper's "
        "empirical claims)",
    )
    suite_bound: dict[str, Any] | None = Field(
        None,
        description="the suite's stricter form (fields of the claim that differ: margin, "
        "left, right, kind, text): a second claim <id>-suite-bound, labelled (suite's bound)",
    )
    testable_if: ScaleGate | None = Field(
        None, description="the scale below which the claim means nothing (ScaleGate)"
    )
    bound_of: str | None = Field(
        None, description="set on a suite_bound's claim: the id of the paper-form claim"
    )

    @field_validator("left", "right")
    @classmethod
    def _check_operand(cls, value: Operand) -> Operand:
        if isinstance(value, dict):
            if len(value) != 1 or next(iter(value)) not in ("ratio", "diff", MODELLED_ALLTOALL):
                raise ValueError(
                    "a derived operand is {ratio: [a, b]}, {diff: [a, b]} or "
                    "{alltoall_speedup: [run, GB/s]}"
                )
            refs = next(iter(value.values()))
            if next(iter(value)) == MODELLED_ALLTOALL:
                if len(refs) != 2 or "." in str(refs[0]) or not _is_number(refs[1]):
                    raise ValueError("alltoall_speedup takes [run, link GB/s], e.g. [lossy, 25]")
                return {MODELLED_ALLTOALL: [str(refs[0]), str(refs[1])]}
            if len(refs) != 2 or not all(isinstance(r, str) and "." in r for r in refs):
                raise ValueError("ratio/diff take two 'run.metric' references")
        return value

    @model_validator(mode="after")
    def _check_shape(self) -> Claim:
        if self.basis == "empirical":
            self._check_form()
        if self.kind in SCALING:
            if not (isinstance(self.left, str) and isinstance(self.right, str)):
                raise ValueError(f"claim {self.id}: {self.kind} compares two family names")
            return self
        for operand in (self.left, self.right):
            if isinstance(operand, str) and "." not in operand:
                raise ValueError(
                    f"claim {self.id}: a reference looks like 'run.metric', got {operand!r}"
                )
        if not _references(self.left):
            raise ValueError(f"claim {self.id}: left must reference a measured figure")
        return self

    def _check_form(self) -> None:
        """An empirical claim names its paper's form, and its kind and margin fit it."""
        where = f"claim {self.id}"
        if self.form is None:
            raise ValueError(
                f"{where}: form is missing (superiority, non_inferiority or equivalence: the "
                "paper's own form of the claim)"
            )
        if self.origin == "paper" and not (self.quote or "").strip():
            raise ValueError(f"{where}: quote is missing (the paper's words the claim tests)")
        if self.kind in SCALING:
            if self.form != "superiority":
                raise ValueError(f"{where}: a scaling claim ({self.kind}) is a superiority")
            return
        if (self.form == "equivalence") != (self.kind == "within"):
            raise ValueError(
                f"{where}: form {self.form} takes kind "
                + ("within" if self.form == "equivalence" else "greater/less/at_least/at_most")
                + f", got {self.kind}"
            )
        if self.form == "non_inferiority" and (
            self.margin <= 0 or self.kind not in ("greater", "less")
        ):
            raise ValueError(
                f"{where}: non_inferiority is kind greater (or less, for a figure lower is "
                "better) with the loss it tolerates as margin > 0"
            )

    @property
    def label(self) -> str:
        """The claim's words as a report prints them: marked where the bound is the suite's."""
        if self.bound_of is not None:
            return f"{self.text} (suite's bound)"
        return f"{self.text} (suite's target)" if self.origin == "suite" else self.text

    @property
    def comparative(self) -> bool:
        """Both sides measured: judged on paired per-seed differences."""
        return self.kind in COMPARATIVE and bool(_references(self.right))

    def references(self) -> list[str]:
        if self.kind in SCALING:
            return []
        gate = [self.testable_if.figure] if self.testable_if else []
        return _references(self.left) + _references(self.right) + gate

    def families(self) -> list[str]:
        return [str(self.left), str(self.right)] if self.kind in SCALING else []

    def expand(self) -> list[Claim]:
        """The claim once per value of ``over`` (itself when there is none), each followed
        by its ``suite_bound`` form where it has one."""
        return [c for claim in self._expand_over() for c in claim._with_suite_bound()]

    def _with_suite_bound(self) -> list[Claim]:
        if not self.suite_bound:
            return [self]
        extra = set(self.suite_bound) - set(SUITE_BOUND_FIELDS)
        if extra:
            raise ValueError(
                f"claim {self.id}: suite_bound takes {', '.join(SUITE_BOUND_FIELDS)}, "
                f"got {', '.join(sorted(extra))}"
            )
        data = self.model_dump()
        data.update(self.suite_bound)
        data.update(id=f"{self.id}-suite-bound", suite_bound=None, origin="suite", bound_of=self.id)
        if data["kind"] == "within":
            data["form"] = "equivalence"
        elif self.form == "equivalence":
            data["form"] = "superiority"
        return [self, Claim.model_validate(data)]

    def _expand_over(self) -> list[Claim]:
        if not self.over:
            return [self]
        ((name, values),) = self.over.items()
        out = []
        for value in values:

            def sub(text: Any, value: Any = value) -> Any:
                if isinstance(text, str):
                    return text.replace("{" + name + "}", str(value))
                if isinstance(text, dict):
                    return {k: [sub(r) for r in v] for k, v in text.items()}
                return text

            data = self.model_dump()
            data.update(
                id=sub(self.id), text=sub(self.text), left=sub(self.left), right=sub(self.right)
            )
            if self.suite_bound:
                data["suite_bound"] = {k: sub(v) for k, v in self.suite_bound.items()}
            if self.testable_if:
                data["testable_if"] = {k: sub(v) for k, v in data["testable_if"].items()}
            data["over"] = None
            out.append(Claim.model_validate(data))
        return out


SUITE_BOUND_FIELDS = ("margin", "left", "right", "kind", "text")
"""What a claim's ``suite_bound`` may change: the suite's stricter form of the same claim."""


BUDGET_KEY = "budget"
"""A curve run's fraction of the reference's bytes, in its run config until run time."""


class Curve(Frozen):
    """Every method at every budget (see the module docstring)."""

    reference: str = Field("full", description="the run whose total bytes the budgets divide")
    dim: int = Field(16, ge=1, description="embedding dim of every method on the curve")
    methods: list[str] = Field(min_length=1, description="embedding methods on the curve")
    budgets: list[int] = Field(
        min_length=1, description="b: each method at 1/b of the reference's total bytes"
    )

    def run_id(self, method: str, budget: int) -> str:
        return f"{method}_at_{budget}"

    def run_ids(self, budgets: list[int] | None = None) -> list[str]:
        """The runs of every method at ``budgets`` (default all of the curve's)."""
        return [self.run_id(m, b) for m in self.methods for b in budgets or self.budgets]

    def runs(self) -> dict[str, dict[str, Any]]:
        """The curve's runs, each with its fraction under :data:`BUDGET_KEY`."""
        return {
            self.run_id(m, b): {
                "embedding": {"name": m, "options": {"dim": self.dim}},
                "task": {"name": "accuracy"},
                BUDGET_KEY: 1.0 / b,
            }
            for m in self.methods
            for b in self.budgets
        }


class ReproductionSpec(Frozen):
    """One paper's reproduction."""

    paper: str
    title: str
    link: str | None = None
    source: str | None = Field(None, description="where the paper's reference figures come from")
    profiles: dict[str, Profile]
    runs: dict[str, dict[str, Any]] = Field(default_factory=dict)
    claims: list[Claim]
    curve: Curve | None = Field(None, description="methods x budgets (suite.reproduce.curve)")

    @model_validator(mode="before")
    @classmethod
    def _expand_curve(cls, data: Any) -> Any:
        """A ``curve`` adds its runs (``<method>_at_<b>``) to ``runs``."""
        if not isinstance(data, dict) or not isinstance(data.get("curve"), dict):
            return data
        curve = Curve.model_validate(data["curve"])
        runs = dict(data.get("runs") or {})
        clash = sorted(set(runs) & set(curve.run_ids()))
        if clash:
            raise ValueError(f"curve: runs {', '.join(clash)} are also declared under runs")
        if curve.reference not in runs:
            raise ValueError(f"curve: reference {curve.reference!r} is not a run")
        return {**data, "runs": {**runs, **curve.runs()}}

    @model_validator(mode="before")
    @classmethod
    def _resolve_like(cls, data: Any) -> Any:
        """A profile with ``like: P`` starts from profile P's fields (its tuning block left
        out: it trains with P's tuned values); its own fields replace P's."""
        if not isinstance(data, dict) or not isinstance(data.get("profiles"), dict):
            return data
        profiles = dict(data["profiles"])
        for name, profile in profiles.items():
            like = profile.get("like") if isinstance(profile, dict) else None
            if like is None:
                continue
            source = profiles.get(like)
            if not isinstance(source, dict) or source.get("like"):
                raise ValueError(f"profile {name}: like {like!r} names no plain profile")
            inherited = {k: v for k, v in source.items() if k not in ("tuning", "note")}
            profiles[name] = {**inherited, **profile}
        return {**data, "profiles": profiles}

    def tuned_key(self, profile: str) -> str:
        """The name ``profile``'s tuned file and studies go by: its ``tuned_as``, else its own."""
        return self.profiles[profile].tuned_as or profile

    @field_validator("claims")
    @classmethod
    def _expand(cls, claims: list[Claim]) -> list[Claim]:
        return [c for claim in claims for c in claim.expand()]

    @model_validator(mode="after")
    def _check_references(self) -> ReproductionSpec:
        ids = [c.id for c in self.claims]
        if len(ids) != len(set(ids)):
            raise ValueError("claim ids must be unique")
        for claim in self.claims:
            for name, profile in self.profiles.items():
                if claim.profiles is not None and name not in claim.profiles:
                    continue
                runs = self.run_ids(name)
                for ref in claim.references():
                    run = ref.split(".", 1)[0]
                    if run not in runs:
                        close = difflib.get_close_matches(run, runs, n=1)
                        hint = f" Did you mean {close[0]!r}?" if close else ""
                        raise ValueError(
                            f"claim {claim.id}: unknown run {run!r} in profile {name}.{hint} "
                            f"(runs: {', '.join(runs)})"
                        )
                for family in claim.families():
                    if family not in profile.families:
                        raise ValueError(
                            f"claim {claim.id}: unknown family {family!r} in profile {name} "
                            f"(families: {', '.join(profile.families) or 'none'})"
                        )
        for name, profile in self.profiles.items():
            for family, members in profile.families.items():
                if not members:
                    raise ValueError(f"profile {name}: family {family!r} has no members")
            if profile.tuning is not None:
                profile.tuning.check(self, name)
            extra = set(profile.budgets or []) - set(self.curve.budgets if self.curve else [])
            if extra:
                raise ValueError(f"profile {name}: budgets {sorted(extra)} are not the curve's")
        return self

    def run_data(self, profile: str, run_id: str) -> dict[str, Any]:
        """One run's config data before tuned values and overrides: the profile's base,
        the run (for a family member: the family's run, then the member, whose ``model``
        replaces the whole model), then its profile part."""
        prof = self.profiles[profile]
        family, _, member = run_id.partition("/")
        if member:
            data = deep_merge(prof.base, {"task": {"name": "accuracy"}})
            data = deep_merge(data, self.runs.get(family, {}))
            extra = copy.deepcopy(_member_config(prof.families[family][member]))
            if "model" in extra:
                data["model"] = extra.pop("model")
            data = deep_merge(data, extra)
        else:
            data = deep_merge(prof.base, self.runs[run_id])
        return deep_merge(data, prof.runs.get(run_id, {}))

    def run_ids(self, profile: str) -> list[str]:
        """The plain runs and every family member's run of ``profile``."""
        families = self.profiles[profile].families
        members = [f"{family}/{m}" for family, ms in families.items() for m in ms]
        return [r for r in self.runs if r not in families] + members


def _member_config(member: str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(member, str):
        return load_yaml(preset_path(member))
    return member


def study_name(paper: str, profile: str, run_id: str) -> str:
    return f"tune.{paper}.{profile}.{run_id.replace('/', '.')}"


def tuning_study(spec: ReproductionSpec, profile: str, run_id: str, base: RunConfig) -> StudySpec:
    """The study of one tuned run from its resolved ``base`` config: ``val_auc`` maximized
    over exactly ``n_trials`` trials by a seeded TPE sampler (``startup_trials`` random
    ones first, when the block gives them), no pruning unless the block asks for it
    (``pruning``: the study's median pruner on the trials' validations)."""
    tuning = spec.profiles[profile].tuning
    if tuning is None:
        raise ConfigError(f"profile {profile!r} of paper {spec.paper!r} has no tuning block")
    return StudySpec.model_validate(
        {
            "name": study_name(spec.paper, spec.tuned_key(profile), run_id),
            "description": f"{spec.paper}/{run_id} ({profile}): tuned for the reproduction",
            "base": base,
            "space": {"params": tuning.run_space(run_id)},
            "objectives": [{"metric": OBJECTIVE, "direction": "maximize"}],
            "budget": {"n_trials": tuning.n_trials},
            "sampler": {
                "name": "tpe",
                "seed": tuning.seed,
                "n_startup_trials": tuning.startup_trials,
            },
            "pruner": tuning.pruning or {"name": "none"},
            "export": {"best": 1},
        }
    )


NOT_SPECS = ("regimes",)
"""YAML files beside the specs that are not specs, by the stem's first dotted part
(``regimes.yaml``, ``regimes.<name>.yaml``: suite.reproduce.regime_runs)."""


def list_specs(directory: Path = SPEC_DIR) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.yaml") if p.stem.split(".")[0] not in NOT_SPECS)


def load_spec(name_or_path: str | Path, directory: Path = SPEC_DIR) -> ReproductionSpec:
    """Load a spec by paper name (``qr``) or path; errors name the file and field."""
    path = Path(name_or_path)
    if not path.suffix:
        path = directory / f"{name_or_path}.yaml"
        if not path.is_file():
            names = list_specs(directory)
            raise ConfigError(unknown_name_message("paper", str(name_or_path), names))
    data = load_yaml(path)
    try:
        return ReproductionSpec.model_validate(data)
    except ValidationError as exc:
        message = re.sub(r"\s+", " ", format_validation_error(exc))
        raise ConfigError(f"invalid reproduction spec {path}: {message}") from None
