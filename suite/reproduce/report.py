"""``REPORT.md`` of a reproduction: header, verdict summary, claim and run tables, plots.

Tables are written by pandas/tabulate (cells escaped, never hand-joined). Figures that
depend on the machine's speed, the claims judged on them (metrics of kind ``measured``)
and the date stay in the last section, "Timings", so two runs of a profile on one machine
give the same report outside it (see :func:`comparable`).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from suite import units
from suite.config import RunConfig
from suite.data.source import get_prepared
from suite.decisions import INTERVAL_LEVEL, holm
from suite.environment import environment
from suite.figures import label
from suite.fileio import write_text_atomic
from suite.registry import EMBEDDINGS
from suite.reproduce.claims import (
    AFTER_HOLM,
    NOT_TESTABLE,
    UNDERPOWERED,
    ClaimOutcome,
    describe,
)
from suite.reproduce.curve import (
    APART,
    curve_data,
    curve_plot_name,
    sittings_apart,
    test_variance,
    which_method_when,
)
from suite.reproduce.outcome import (
    WALL_GAP_S,
    PaperOutcome,
    Reproduction,
    SeededRun,
    training_wall_s,
)
from suite.reproduce.provenance import data_line, tuning_intro, tuning_rows
from suite.reproduce.regime_stats import regime_rows
from suite.stats import Interval, ScalingFit, mean_ci

TIMINGS_HEADING = "## Timings (machine-dependent)"
VERDICTS = ("holds", "does not hold", UNDERPOWERED, AFTER_HOLM, NOT_TESTABLE, "not measurable")
DELONG_ALPHA = 0.05


def table(rows: list[dict[str, Any]]) -> str:
    """A GitHub-flavoured Markdown table of ``rows`` (a pipe inside a cell is escaped)."""
    import pandas as pd

    frame = pd.DataFrame(rows).astype(str)
    frame = frame.map(lambda cell: cell.replace("|", "\\|").replace("\n", " "))
    frame.columns = [str(c).replace("|", "\\|") for c in frame.columns]
    return frame.to_markdown(index=False, tablefmt="github", disable_numparse=True)


def number(value: float, unit: str = "") -> str:
    """A figure in human units (:func:`suite.units.format_cell`): bytes as MiB, rates as
    k samples/s, else 4 decimals (scientific from 1e5 and below 1e-3)."""
    scale = {"bytes": units.MIB, "rate": units.KILO_RATE}.get(unit, "")
    return units.format_cell(
        value, unit=scale, decimals=4 if not scale else None, thousands=False, scientific=True
    )


def wall_time_text(reproduction: Reproduction) -> str:
    """What the reproduction cost in wall time: its jobs' training (all invocations, from
    the stored jobs' own clocks) and the last invocation's whole run."""
    results = reproduction.results()
    wall, stretches = training_wall_s(results)
    job_s = sum(r.duration_s for r in results)
    text = (
        f"training the {len(results)} jobs took {wall / 60:.1f} min of wall time "
        f"({job_s / 60:.1f} job-minutes"
    )
    if stretches > 1:
        text += f", in {stretches} separate stretches: the reproduction was resumed"
    text += f"); the last invocation took {reproduction.duration_s / 60:.1f} min in all."
    return text


def unit_of(operand: object) -> str:
    return "bytes" if isinstance(operand, str) and "bytes" in operand else ""


def interval(ci: Interval | None, unit: str = "") -> str:
    """``mean [low, high] (n=N)``; a single value shows ``n=1`` and no interval."""
    if ci is None:
        return ""
    if math.isnan(ci.mean):
        return f"n/a (n={ci.n})"
    if math.isnan(ci.low):
        return f"{number(ci.mean, unit)} (n={ci.n})"
    if ci.low == ci.high:
        return f"{number(ci.mean, unit)} (exact, n={ci.n})"
    return f"{number(ci.mean, unit)} [{number(ci.low, unit)}, {number(ci.high, unit)}] (n={ci.n})"


def p_value(p: float) -> str:
    if math.isnan(p):
        return "n/a"
    return "<1e-4" if p < 1e-4 else f"{p:.4f}"


def delong_cell(outcome: ClaimOutcome) -> str:
    """DeLong's p on each seed's test set, in seed order, and how many are below 0.05."""
    if not outcome.delong:
        return "—"
    ps = [outcome.delong[seed] for seed in sorted(outcome.delong)]
    below = sum(p < DELONG_ALPHA for p in ps)
    return f"{', '.join(p_value(p) for p in ps)} ({below}/{len(ps)} below {DELONG_ALPHA})"


def claim_text(outcome: ClaimOutcome) -> str:
    """The claim's words, with ``(suite's target)`` where the bound is not the paper's and
    ``(suite's bound)`` on the suite's stricter form of a paper's claim."""
    return outcome.claim.label


def se_cell(outcome: ClaimOutcome) -> str:
    """The tested figure's standard error and its parts: seeds' spread, test-set sampling."""
    noise, test = outcome.noise, outcome.test
    if noise is None or test is None or math.isnan(test.se):
        return "—"
    seeds = math.sqrt(noise.seed_var / noise.n) if noise.n else math.nan
    if noise.test_var <= 0:
        return f"{number(test.se)} (seeds)"
    return (
        f"{number(test.se)} (seeds {number(seeds)}, test set {number(math.sqrt(noise.test_var))})"
    )


def power_cell(outcome: ClaimOutcome) -> str:
    """An undecided claim's power now; the n it needs, that n's 90% interval and the chance
    that n decides are in its verdict (:meth:`~suite.decisions.Plan.text`)."""
    if outcome.plan is None:
        return "—"
    return f"{outcome.plan.power_now:.2f}"


def claim_row(outcome: ClaimOutcome) -> dict[str, str]:
    c = outcome.claim
    scaling = bool(c.families())
    left_unit = "" if scaling else unit_of(c.left)
    right_unit = "" if scaling else unit_of(c.right)
    right = (
        f"target {number(outcome.target, right_unit)}"
        if outcome.target is not None
        else interval(outcome.right, right_unit)
    )
    diff_unit = left_unit if left_unit == right_unit else ""
    tested = outcome.difference if outcome.difference is not None else outcome.shifted
    return {
        "claim": claim_text(outcome),
        "basis": c.basis,
        "test": describe(c),
        "left (mean [90% CI])": interval(outcome.left, left_unit),
        "right": right,
        "tested figure [90% CI]": interval(tested, diff_unit) or "—",
        "SE": se_cell(outcome),
        "p": p_value(outcome.p_value),
        "Holm p": p_value(outcome.holm_p),
        "power": power_cell(outcome),
        "DeLong p per seed": delong_cell(outcome),
        "verdict (Holm)": f"**{outcome.label}**",
        "unadjusted": outcome.unadjusted_label if outcome.adjusted != outcome.verdict else "same",
    }


def still_improving(rec: SeededRun) -> int | None:
    """Seeds whose validation AUC was still rising when the run stopped (None where the
    task trains nothing it validates)."""
    flags = [r.details.get("still_improving") for r in rec.results.values()]
    known = [bool(f) for f in flags if f is not None]
    return sum(known) if known else None


def convergence_cell(rec: SeededRun) -> str:
    rising = still_improving(rec)
    if rising is None:
        return "—"
    return "converged" if rising == 0 else f"still improving ({rising}/{len(rec.results)} seeds) †"


def mark_unconverged(reproduction: Reproduction) -> None:
    """Set on each empirical claim the runs it rests on that were still improving."""
    for paper in reproduction.papers:
        rising = {rid for rid, rec in paper.runs.items() if still_improving(rec)}
        paper.claims = [
            replace(c, unconverged=tuple(sorted(rising & set(runs_of(c, paper)))))
            if c.claim.basis == "empirical"
            else c
            for c in paper.claims
        ]


def runs_of(outcome: ClaimOutcome, paper: PaperOutcome) -> list[str]:
    """The runs a claim's figures come from (a scaling claim: its families' members)."""
    claim = outcome.claim
    runs = [ref.split(".", 1)[0] for ref in claim.references()]
    return runs + [f"{f}/{m}" for f in claim.families() for m in paper.families.get(f, [])]


def run_row(run_id: str, outcome: PaperOutcome) -> dict[str, str]:
    rec = outcome.runs[run_id]
    return {
        "run": run_id,
        "model": rec.config.model.name,
        "embedding": rec.config.embedding.name,
        "task": rec.config.task.name,
        "test AUC": interval(rec.interval("test_auc")),
        "test log loss": interval(rec.interval("test_logloss")),
        "embedding memory": number(rec.metrics.get("embedding_bytes", math.nan), "bytes"),
        "training FLOPs": number(rec.metrics.get("training_flops", math.nan)),
        "validation AUC": convergence_cell(rec),
        "config": rec.config.config_hash(),
    }


def fit_row(family: str, outcome: PaperOutcome, fit: ScalingFit) -> dict[str, str]:
    members = outcome.families.get(family, [])
    flops = [outcome.runs[f"{family}/{m}"].metrics.get("training_flops", math.nan) for m in members]
    f = fit.fit
    return {
        "family": family,
        "sizes": str(len(members)),
        "training FLOPs": f"{number(min(flops))} .. {number(max(flops))}",
        "L∞": number(f.l_inf),
        "a": number(f.a),
        "exponent b [95% CI]": interval(fit.exponent),
        "R²": number(f.r2),
        "bootstrap fits failed": f"{fit.failed:.0%}",
        "quality gate": "passes" if fit.measurable else "fails",
    }


def summary_counts(
    reproduction: Reproduction,
    timing: bool = False,
    basis: str | None = None,
    bounds: bool = False,
    adjusted: bool = True,
) -> Counter:
    """Verdicts of the claims on machine-independent figures (``timing``: of the claims
    on timings instead, which the report judges under Timings), of one ``basis`` if given:
    the paper's claims, or with ``bounds`` the suite's stricter bounds of them; Holm-decided
    (:attr:`ClaimOutcome.adjusted`) unless ``adjusted`` is false."""
    return Counter(
        c.adjusted if adjusted else c.verdict
        for p in reproduction.papers
        for c in p.claims
        if c.timing == timing
        and (basis is None or c.claim.basis == basis)
        and (c.claim.bound_of is not None) == bounds
    )


def verdict_parts(counts: Counter) -> str:
    """``9 holds, 2 does not hold, ...``: each verdict's count, the first three always."""
    return ", ".join(
        f"{counts.get(v, 0)} {v}" for v in VERDICTS if counts.get(v) or v in VERDICTS[:3]
    )


def counts_text(counts: Counter, what: str = "claims") -> str:
    return f"{sum(counts.values())} {what}: {verdict_parts(counts)}."


def empirical(reproduction: Reproduction, bounds: bool = False) -> list[ClaimOutcome]:
    """The claims training decides: empirical, not on timings; the paper's forms (and the
    suite's own targets), or with ``bounds`` the suite's stricter bounds of the paper's."""
    return [
        c
        for p in reproduction.papers
        for c in p.claims
        if not c.timing
        and c.claim.basis == "empirical"
        and (c.claim.bound_of is not None) == bounds
    ]


def apply_holm(*reproductions: Reproduction) -> None:
    """Holm's correction of the deciding p-values, set on each outcome, over one family:
    the empirical claims of all ``reproductions`` (one report's, or every regime's). The
    suite's bounds are adjusted in that family with themselves added, and take no part in
    the paper's claims' adjustment."""
    claims = [c for r in reproductions for c in empirical(r)]
    bounds = [c for r in reproductions for c in empirical(r, bounds=True)]
    adjusted = dict(zip(map(id, claims), holm([c.p_value for c in claims]), strict=True))
    with_bounds = holm([c.p_value for c in claims + bounds])[len(claims) :]
    adjusted.update(zip(map(id, bounds), with_bounds, strict=True))
    for r in reproductions:
        for paper in r.papers:
            paper.claims = [
                replace(c, holm_p=adjusted[id(c)]) if id(c) in adjusted else c for c in paper.claims
            ]


def summary_line(reproduction: Reproduction) -> str:
    """Empirical claims (Holm-decided, in the paper's form) and structural ones counted
    apart, with the unadjusted count beside; the suite's stricter bounds apart; claims on
    timings apart again (their verdicts, in the Timings section, may differ between two
    runs on one machine)."""
    family = empirical(reproduction)
    line = (
        f"**{counts_text(summary_counts(reproduction, basis='empirical'), 'empirical claims')}** "
        f"(Holm-decided over the {len(family)} empirical claims; before the correction: "
        f"{verdict_parts(summary_counts(reproduction, basis='empirical', adjusted=False))}) "
        f"{counts_text(summary_counts(reproduction, basis='structural'), 'structural claims (exact by construction)')}"
    )
    bounds = summary_counts(reproduction, bounds=True)
    if bounds:
        line += (
            f" Not counted here: {sum(bounds.values())} stricter bounds of the suite's "
            f"(`(suite's bound)` rows beside the paper's form of the claim): "
            f"{verdict_parts(bounds)}."
        )
    rising = [c for c in empirical(reproduction) if c.unconverged]
    if rising:
        line += (
            f" {len(rising)} empirical verdict(s) rest on runs still improving when they "
            "stopped (†): not final."
        )
    timed = sum(summary_counts(reproduction, timing=True).values())
    if timed:
        line += (
            f" Not counted here: {timed} claim(s) on timings, judged under Timings "
            "(machine-dependent)."
        )
    return line


def claims_section(outcomes: list[ClaimOutcome], papers: list[str] | None = None) -> list[str]:
    """The claims' table (with a paper column when ``papers`` names each claim's) and their
    notes, as lines."""
    rows = [claim_row(c) for c in outcomes]
    if papers:
        rows = [
            {"claim": r.pop("claim"), "paper": paper, **r}
            for r, paper in zip(rows, papers, strict=True)
        ]
    lines = [table(rows), ""]
    notes = [f"- {c.claim.id}: {c.note}" for c in outcomes if c.note]
    if notes:
        lines += ["Notes:", "", *notes, ""]
    return lines


PER_SEED_NOTE = "draws (one per seed)"


def regime_lines(regime: list[dict] | None) -> list[str]:
    """The regime table at the report's top, with a line on what it shows."""
    if not regime:
        return []
    per_seed = any(str(row.get("data", "")).endswith(PER_SEED_NOTE) for row in regime)
    ranges = "; a draw per seed: each figure from its lowest to its highest draw"
    return [
        "Data regime: the data these verdicts rest on, beside the papers' datasets (the "
        "`characterize` task's figures on the first 4M training lookups; '-' where unknown"
        f"{ranges if per_seed else ''}).",
        "",
        table(regime),
        "",
    ]


METHOD_TEXT = (
    "How claims are decided (`suite.decisions`). Each claim is tested in its paper's own "
    "form (`form` in the spec, beside the paper's words): superiority (`greater`/`less`: "
    "beats by the paper's margin, 0 where it gives none), non-inferiority (\"without "
    'loss", "comparable": loses at most the margin, `> -0.001`), equivalence (TOST, '
    "`|d| <= m`) only where the paper claims both directions. Each claim tests one figure "
    "per seed: a paired difference `left - right` (all runs share the seeds) or, for a "
    "threshold, the value minus its target. Its standard error carries the seeds' spread "
    "and, where the figure is a test AUC, the test set's own sampling noise: DeLong's "
    "covariance of all the seeds' runs on the one test set gives the part of it the seeds "
    "share, which averaging over seeds does not remove, and it is added whole "
    "(SE² = s²/n + v; Welch-Satterthwaite degrees of freedom). Every test is one-sided at "
    "5%: `holds` when the null that the claim is false is rejected, `does not hold` when "
    "the null that it holds is, so both read off the 90% interval shown. The verdict "
    "column and the counts are Holm-decided: a verdict whose deciding p, Holm-adjusted "
    "over all empirical claims of the report (family-wise 5%), is not below 0.05 reads "
    "`undecided after Holm`, its unadjusted verdict beside it. A claim neither test "
    "decides is `underpowered`, with its power now and the seeds (and, where seeds alone "
    "cannot, test rows) that 80% power needs. `not testable at this scale`: the claim's "
    "object is too small to mean what the paper means, or a scaling fit fails its quality "
    "gate; the reason is in the notes. `structural` claims are exact by construction "
    "(bytes, budgets, plans) and counted apart; `(suite's target)` marks a bound that is "
    "this suite's, not the paper's; `(suite's bound)` the suite's stricter form of the "
    "paper's claim above it (a margin the paper does not give, bytes the paper does not "
    "count), shown and counted apart. † marks a verdict resting on a run whose validation "
    "AUC was still rising when it stopped (best at one of its last two validations): not "
    "final. Claims on timings (machine-dependent figures) are judged in the Timings "
    "section and counted there. Left and right columns show 90% t intervals over seeds."
)


REGIME_FILE = "regime.json"
PER_SEED_DRAWS = "draws per seed"


def regime_rows_of(reproduction: Reproduction, report_dir: str | Path | None) -> list[dict]:
    """The regime table (``suite.reproduce.regime_stats``): each distinct training dataset of the
    reproduction's runs, then the papers' datasets. Under a draw per seed the seeds' draws
    make one row, each figure the range over the draws. Rows are kept in
    ``<report dir>/runs/regime.json`` by data fingerprint, so a regenerated report reads
    them without preparing the data again."""
    cache_path = Path(report_dir) / "runs" / REGIME_FILE if report_dir else None
    cache: dict[str, list[dict]] = {}
    if cache_path and cache_path.is_file():
        cache = json.loads(cache_path.read_text(encoding="utf-8"))
    draws: dict[str, dict[str, dict]] = {}  # a row's key -> fingerprint -> that draw's row
    references: list[dict] = []
    for paper in reproduction.papers:
        for rec in paper.runs.values():
            if rec.config.task.name != "accuracy":
                continue
            per_seed = rec.config.dataset.options.get("draw") == "per_seed"
            label = _dataset_label(rec.config.dataset)
            results = rec.results if per_seed else dict(list(rec.results.items())[:1])
            for seed, result in results.items():
                fingerprint = result.data_fingerprint
                if not fingerprint or any(fingerprint in rows for rows in draws.values()):
                    continue
                if fingerprint not in cache:
                    data = get_prepared(rec.config.dataset.drawn_by(seed), progress=False)
                    cache[fingerprint] = regime_rows(data, label)
                key = f"{label}, {PER_SEED_DRAWS}" if per_seed else fingerprint
                draws.setdefault(key, {})[fingerprint] = cache[fingerprint][0]
                references = cache[fingerprint][1:]  # the papers' datasets, the same every time
    if draws and cache_path and cache_path.parent.is_dir():
        write_text_atomic(cache_path, json.dumps(cache, indent=1) + "\n")
    return [_draws_row(key, list(rows.values())) for key, rows in draws.items()] + references


def _draws_row(key: str, rows: list[dict]) -> dict:
    """The regime row of ``rows``: one fixed draw's row as it is; the draws of a draw per
    seed (``key`` their dataset's label) as one row, a cell they share as it is and one
    they differ in as its lowest to highest value."""
    if not key.endswith(PER_SEED_DRAWS):
        return rows[0]
    merged = {"data": f"{key.removesuffix(PER_SEED_DRAWS)}{len(rows)} {PER_SEED_NOTE}"}
    for column in rows[0]:
        if column != "data":
            cells = sorted({str(r.get(column, "-")) for r in rows}, key=_cell_number)
            merged[column] = cells[0] if len(cells) == 1 else f"{cells[0]} to {cells[-1]}"
    return merged


def _cell_number(cell: str) -> float:
    """A table cell's leading number ('73.3%' -> 73.3, '1,450,000' -> 1450000.0); inf where
    it has none, so unreadable cells sort last."""
    found = re.match(r"-?[\d,]*\.?\d+", cell.strip())
    return float(found.group().replace(",", "")) if found else math.inf


def _dataset_label(spec: Any) -> str:
    rows = spec.options.get("train_rows") if isinstance(spec.options, dict) else None
    regime = spec.options.get("regime") if isinstance(spec.options, dict) else None
    parts = (
        [spec.name]
        + ([f"{rows:,} train rows"] if rows else [])
        + ([f"regime {regime}"] if regime else [])
    )
    return ", ".join(parts)


def machine_text(reproduction: Reproduction, env: dict[str, Any]) -> str:
    """CPU models, torch thread counts and GPU models the runs recorded (this machine's
    where none did)."""
    recorded = [
        r.environment
        for p in reproduction.papers
        for rec in p.runs.values()
        for r in rec.results.values()
    ]
    threads = sorted({str(e.get("threads")) for e in recorded}) or [str(env["threads"])]
    cpus = sorted({str(e.get("cpu_model")) for e in recorded}) or [str(env["cpu_model"])]
    machine = f"{' / '.join(cpus)}, {' / '.join(threads)} torch thread(s)"
    gpus = sorted({str(e["gpu_model"]) for e in recorded if e.get("gpu_model")})
    if gpus:
        machine += f"; GPU {' / '.join(gpus)}"
    placed = placement_text(recorded)
    return f"{machine}; {placed}" if placed else machine


def placement_text(recorded: list[dict[str, Any]]) -> str:
    """Which device of which node ran how many jobs (``jobs on cuda:3 (12), cuda:5 (12)``,
    nodes named where there were several); empty where every job ran on one node's CPU
    or none recorded where (runs stored before the suite kept it)."""
    placed = Counter(
        (str(e.get("node", "")), str(e["job_device"])) for e in recorded if e.get("job_device")
    )
    if not placed or (len(placed) == 1 and not next(iter(placed))[1].startswith("cuda")):
        return ""
    several = len({node for node, _ in placed}) > 1
    where = [
        (f"{device} of {node}" if several else device, count)
        for (node, device), count in sorted(placed.items())
    ]
    return "jobs on " + ", ".join(f"{name} ({count})" for name, count in where)


def seeds_text(reproduction: Reproduction) -> str:
    """The seeds judged; an interim report names the seeds it leaves out."""
    text = ", ".join(map(str, reproduction.seeds)) + " (every run, paired)"
    if reproduction.seeds_left:
        text += f"; not yet trained, left out: {', '.join(map(str, reproduction.seeds_left))}"
    return text


def interim_lines(reproduction: Reproduction) -> list[str]:
    """Above the verdicts of an interim report: how many of the profile's seeds they rest on."""
    if not reproduction.seeds_left:
        return []
    judged, total = len(reproduction.seeds), len(reproduction.seeds) + len(reproduction.seeds_left)
    return [
        f"**Interim report: {judged} of the profile's {total} seeds.** The reproduction is "
        "still under way (`--finished-seeds`: the seeds whose every job is stored); its "
        "intervals and verdicts will narrow or change as the other seeds land.",
        "",
    ]


def header_rows(reproduction: Reproduction, command: str) -> list[dict[str, str]]:
    """The report's header table: command, overrides, commit, machine, software, seeds."""
    first = next(iter(next(iter(reproduction.papers)).runs.values())).config
    env = environment(first.device)
    machine = machine_text(reproduction, env)
    return [
        {"": "command", " ": f"`{command}`"},
        {"": "overrides", " ": json.dumps(reproduction.overrides, sort_keys=True) or "none"},
        {"": "commit", " ": str(env["git_commit"])},
        {"": "machine", " ": f"{machine}; runs on {first.device}"},
        {
            "": "software",
            " ": f"suite {env['suite_version']}, python {env['python']}, torch {env['torch']}, "
            f"fbgemm {env['fbgemm']}, mlflow {env['mlflow']}",
        },
        {"": "seeds", " ": seeds_text(reproduction)},
        {"": "MLflow parent run", " ": reproduction.mlflow_run_id or "tracking off"},
    ]


def paper_lines(outcome: PaperOutcome) -> list[str]:
    """One paper's section: title, profile note, claims, scaling fits, runs, curve."""
    spec = outcome.spec
    title = f"[{spec.title}]({spec.link})" if spec.link else spec.title
    lines = [f"## {spec.paper}: {title}", ""]
    note = spec.profiles[outcome.profile].note
    if note:
        lines += [f"Profile `{outcome.profile}`: {note}", ""]
    if spec.source:
        lines += [f"Reference figures: {spec.source}", ""]
    claims = [c for c in outcome.claims if not c.timing]
    if claims:
        lines += claims_section(claims)
    timed = [c.claim.id for c in outcome.claims if c.timing]
    if timed:
        lines += [f"Judged under Timings (machine-dependent): {', '.join(timed)}.", ""]
    if outcome.fits:
        lines += [table([fit_row(f, outcome, fit) for f, fit in outcome.fits.items()]), ""]
    lines += [table([run_row(rid, outcome) for rid in outcome.runs]), ""]
    drawn = data_line(outcome)
    if drawn:
        lines += [drawn, ""]
    tuned = tuning_rows(outcome)
    if tuned:
        lines += [tuning_intro(outcome), "", table(tuned), ""]
    if spec.curve is not None:  # methods x budgets (suite.reproduce.curve)
        lines += curve_section(outcome)
    return lines


def _chosen(config: RunConfig) -> str:
    """The options a budget chose (those that differ from the method's defaults)."""
    options = config.embedding.typed_options().model_dump()
    defaults = EMBEDDINGS.get(config.embedding.name).Options().model_dump()
    picked = {k: v for k, v in options.items() if k not in ("dim",) and defaults.get(k) != v}
    return ", ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in picked.items()
    )


def _step_cost(rec: SeededRun, reference: SeededRun) -> str:
    ratios = [
        reference.results[s].metrics["train_samples_per_s"] / r.metrics["train_samples_per_s"]
        for s, r in rec.results.items()
        if s in reference.results and r.metrics.get("train_samples_per_s")
    ]
    if not ratios:
        return "n/a"
    ci = mean_ci(ratios, INTERVAL_LEVEL)
    if math.isnan(ci.low):
        return f"{ci.mean:.2f}x"
    return f"{ci.mean:.2f}x [{ci.low:.2f}, {ci.high:.2f}]"


def curve_section(outcome: PaperOutcome) -> list[str]:
    """The report's lines for a spec's curve (``suite.reproduce.curve``): plot, ranking
    table, absences, summary."""
    data = curve_data(outcome)
    if data is None:
        return []
    full_bytes = data.reference.metrics.get("embedding_total_bytes", math.nan)
    lines = [
        f"### AUC against total bytes ({data.dataset})",
        "",
        f"![curve]({curve_plot_name(outcome.spec.paper, data.dataset)}.png)",
        "",
        f"Budgets 1/b of `{data.curve.reference}`'s total embedding bytes "
        f"({full_bytes:,.0f}); each method's options chosen by its own `options_at_budget`. "
        "vs best: `below the best` when the method is shown more than 0.001 below the "
        "best, `equivalent to the best` when TOST puts its difference from the best within "
        "+-0.001, `indistinguishable` when neither is shown (paired per-seed differences, "
        "seed spread plus the test set's DeLong variance). The best is picked from the same "
        "runs, so `below` tests each method against every other at its budget (one-sided "
        "paired t on the seeds' n - 1 dof, Bonferroni over the rivals, Holm over the "
        "budget's methods, Bonferroni over this table's budgets); TOST's p's are "
        "Holm-adjusted over this table. Step cost: reference train samples/s over the "
        "method's, per seed, in this reproduction on this machine [90% CI].",
        "",
    ]
    if test_variance(outcome)(data.curve.reference, "")[1] == 0:
        lines[-1:-1] = [
            "Test-set noise left out: the runs' test predictions are not here (a report "
            "regenerated from stored results), so the intervals and tests carry the seeds' "
            "spread only.",
            "",
        ]
    apart = sittings_apart(outcome)
    rows = []
    for ranked in data.standings:
        for s in ranked:
            rec = data.records[(s.method, s.budget)]
            total = rec.metrics.get("embedding_total_bytes", math.nan)
            ci = "" if math.isnan(s.low) else f" [{s.low:.4f}, {s.high:.4f}]"
            rows.append(
                {
                    "budget": f"1/{s.budget}",
                    "method": label(s.method),
                    "options": _chosen(rec.config),
                    "total bytes (of full)": f"{total:,.0f} ({total / full_bytes:.3f})",
                    "test AUC [90% CI]": f"{s.auc:.4f}{ci}",
                    "rank": str(s.rank),
                    "vs best (p: > 0.001 below any, TOST)": s.verdict
                    + ("" if s.rank == 1 else f" ({s.p_below:.2g}, {s.p_equivalent:.2g})"),
                    "step cost vs full": _step_cost(rec, data.reference)
                    + (
                        f" {APART}"
                        if apart(data.curve.run_id(s.method, s.budget), data.curve.reference)
                        else ""
                    ),
                }
            )
    if rows:
        lines += [table(rows), ""]
    if any(APART in row["step cost vs full"] for row in rows):
        lines += [
            f"{APART} The method's and `{data.curve.reference}`'s runs of a seed trained in "
            "different sittings (stretches of work more than "
            f"{WALL_GAP_S / 60:g} minutes apart), so the ratio carries the machine's drift "
            "between them as well as the step's cost; `benchmarks/bench_curve_steps.py` times "
            "every point of the compression curve side by side with full.",
            "",
        ]
    gone = [
        f"`{m}` at 1/{b}: {why}"
        for b, methods in sorted(data.absent.items())
        for m, why in sorted(methods.items())
    ]
    if gone:
        lines += ["Absent from the curve: " + "; ".join(gone) + ".", ""]
    lines += [
        "**Which method when.** " + which_method_when(data.standings, data.absent, label),
        "",
    ]
    return lines


def timing_lines(reproduction: Reproduction, date: datetime | None) -> list[str]:
    """The Timings section: date, wall time, each distinct run's throughput and wall
    seconds, and the claims on timings."""
    when = (date or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    lines = [TIMINGS_HEADING, "", f"Date {when}; {wall_time_text(reproduction)}", ""]
    timing_rows = []
    seen: set[str] = set()
    for outcome in reproduction.papers:
        for rid, rec in outcome.runs.items():
            key = rec.config.config_hash()
            if key in seen:
                continue
            seen.add(key)
            timing_rows.append(
                {
                    "run": f"{outcome.spec.paper}/{rid}",
                    "train throughput (mean over seeds)": number(
                        rec.metrics.get("train_samples_per_s", math.nan), "rate"
                    ),
                    "wall s (all seeds)": f"{rec.duration_s:.1f}",
                }
            )
    lines += [table(timing_rows), ""]
    timed = [(p.spec.paper, c) for p in reproduction.papers for c in p.claims if c.timing]
    if timed:
        lines += [
            "### Claims on timings",
            "",
            counts_text(summary_counts(reproduction, timing=True)),
            "",
        ]
        lines += claims_section([c for _, c in timed], [paper for paper, _ in timed])
    return lines


def render_report(
    reproduction: Reproduction,
    plots: list[str],
    command: str,
    date: datetime | None = None,
    regime: list[dict] | None = None,
) -> str:
    """The report's Markdown."""
    apply_holm(reproduction)
    mark_unconverged(reproduction)
    lines = [
        f"# Reproduction report: `{reproduction.profile}` profile",
        "",
        table(header_rows(reproduction, command)),
        "",
        *regime_lines(regime),
        *interim_lines(reproduction),
        summary_line(reproduction),
        "",
        METHOD_TEXT,
        "",
        "On one machine and "
        "thread count every figure is bit-identical when rerun; another CPU model may move "
        "the last digits (fbgemm and oneDNN pick different SIMD kernels).",
        "",
    ]
    for outcome in reproduction.papers:
        lines += paper_lines(outcome)
    if plots:
        lines += ["## Plots", ""]
        lines += [f"![{Path(p).stem}]({p})" for p in plots]
        lines.append("")
    lines += timing_lines(reproduction, date)
    return "\n".join(lines)


def comparable(report: str) -> str:
    """The report without its timings section and the parent MLflow run id (random)."""
    body = report.split(TIMINGS_HEADING, 1)[0]
    return re.sub(r"[0-9a-f]{32}", "<run id>", body)
