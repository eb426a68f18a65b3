"""``REPORT.md`` of the regime profile: the regimes, one claim x regime verdict table with
the column that says whether each verdict holds in every regime, each regime's claim table,
and plots (``suite.reproduce.regime_runs`` runs it)."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

from suite.environment import environment
from suite.figures import save_figure
from suite.reproduce.claims import DIRECTION, ClaimOutcome, bound_of, describe
from suite.reproduce.outcome import training_wall_s
from suite.reproduce.regime_runs import (
    REGIMES_FILE,
    RegimeOutcome,
    across,
    claim_grid,
    empirical_claim_ids,
)
from suite.reproduce.regime_stats import REFERENCES
from suite.reproduce.report import (
    apply_holm,
    claim_row,
    claim_text,
    claims_section,
    mark_unconverged,
    regime_rows_of,
    table,
    wall_time_text,
)

PLOT = "tested_figure_by_regime"


def verdict_cell(outcome: ClaimOutcome | None) -> str:
    """``verdict: tested figure [90% CI]`` of one claim in one regime."""
    if outcome is None:
        return "—"
    return f"**{outcome.label}**: {claim_row(outcome)['tested figure [90% CI]']}"


def verdict_rows(outcomes: list[RegimeOutcome]) -> list[dict[str, str]]:
    """One row per claim: its verdict and tested figure in each regime, then the
    cross-regime column (:func:`suite.reproduce.regime_runs.across`)."""
    rows = []
    for paper, _, by in claim_grid(outcomes):
        first = next(iter(by.values()))
        row = {"paper": paper, "claim": claim_text(first), "test": describe(first.claim)}
        for regime in outcomes:
            row[regime.name] = verdict_cell(by.get(regime.name))
        verdicts = {r.name: by[r.name].adjusted if r.name in by else "missing" for r in outcomes}
        row["across regimes"] = across(verdicts)
        rows.append(row)
    return rows


def across_counts(outcomes: list[RegimeOutcome]) -> Counter:
    """How many claims hold in every regime, change, or are not decided somewhere."""
    counts: Counter = Counter()
    for _, _, by in claim_grid(outcomes):
        verdicts = {r.name: by[r.name].adjusted if r.name in by else "missing" for r in outcomes}
        text = across(verdicts)
        if text.startswith("changes"):
            counts["changes"] += 1
        elif "not decided" in text:
            counts["not decided in some regime"] += 1
        else:
            counts[text] += 1
    return counts


def regime_table(outcomes: list[RegimeOutcome], report_dir: Path | None) -> list[dict]:
    """One row per regime (its training data's figures, ``suite.reproduce.regime_stats``), then
    the papers' datasets."""
    rows: list[dict] = []
    references: list[dict] = []
    for regime in outcomes:
        found = regime_rows_of(regime.reproduction, report_dir)
        own = found[: len(found) - len(REFERENCES)]
        references = found[len(own) :]
        rows += [{"regime": regime.name, **row} for row in own]
    return rows + [{"regime": "(paper's data)", **row} for row in references]


def regime_profile(outcomes: list[RegimeOutcome]) -> tuple[str, str]:
    """``(the regime profile, the profile it is like)`` of a regime report's outcomes."""
    first = outcomes[0].reproduction
    profile = first.profile
    like = first.papers[0].spec.profiles[profile].like if first.papers else None
    return profile, like or "standard"


def cost_rows(outcomes: list[RegimeOutcome]) -> list[dict[str, str]]:
    """Each regime's jobs, those adopted from the profile it is like, and their job-minutes."""
    _, like = regime_profile(outcomes)
    rows = []
    for regime in outcomes:
        results = regime.reproduction.results()
        job_s = sum(r.duration_s for r in results)
        wall, _ = training_wall_s(results)
        rows.append(
            {
                "regime": regime.name,
                "jobs (runs x seeds)": str(len(results)),
                f"adopted from results/{like} this time": str(regime.adopted),
                "job-minutes (stored duration_s)": f"{job_s / 60:.1f}",
                "training wall minutes": f"{wall / 60:.1f}",
            }
        )
    return rows


def draw_regime_plot(outcomes: list[RegimeOutcome], out_dir: Path) -> list[str]:
    """The tested figure and its 90% interval of every claim in every regime, one row per
    claim (dotted: its margin), one colour per regime; returns the PNG's name (none
    without claims)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = [(cid, by) for _, cid, by in claim_grid(outcomes)]
    if not grid:
        return []
    fig, ax = plt.subplots(figsize=(7.5, 0.35 * len(grid) * len(outcomes) + 1.5))
    step = 1.0 / (len(outcomes) + 1)
    for k, regime in enumerate(outcomes):
        ys, xs, lows, highs = [], [], [], []
        for i, (_, by) in enumerate(grid):
            c = by.get(regime.name)
            ci = None if c is None else (c.difference or c.shifted)
            if ci is None or math.isnan(ci.mean):
                continue
            ys.append(i + (k + 1) * step)
            xs.append(ci.mean)
            lows.append(ci.mean - ci.low if not math.isnan(ci.low) else 0.0)
            highs.append(ci.high - ci.mean if not math.isnan(ci.high) else 0.0)
        ax.errorbar(xs, ys, xerr=[lows, highs], fmt="o", ms=3, capsize=2, label=regime.name)
    for i, (_, by) in enumerate(grid):  # the claim's margin, where it has one
        claim = next(iter(by.values())).claim
        if claim.comparative and claim.margin:
            bounds = [bound_of(claim, DIRECTION[claim.kind])]
            if claim.kind == "within":
                bounds = [-claim.margin, claim.margin]
            for bound in bounds:
                ax.plot([bound] * 2, [i + 0.05, i + 0.95], color="0.3", ls=":")
    ax.axvline(0.0, color="0.6", lw=0.8)
    ax.set_yticks([i + 0.5 for i in range(len(grid))], [cid for cid, _ in grid], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("tested figure (difference or value minus target), 90% CI")
    ax.set_title("Each empirical claim's tested figure in each regime")
    ax.legend(fontsize=8, title="regime", title_fontsize=8, loc="best")
    fig.tight_layout()
    written = save_figure(fig, out_dir / PLOT, option="--out")
    plt.close(fig)
    return [written[0].name]


def not_in_report(outcomes: list[RegimeOutcome]) -> list[str]:
    """A paragraph naming the profile's empirical claims this report leaves out (a run of
    some ``--claim``s, e.g. one resumed claim by claim), or nothing where it has them all."""
    shown = {c.claim.id for paper in outcomes[0].reproduction.papers for c in paper.claims}
    left_out = [
        c for c in empirical_claim_ids(None, None, regime_profile(outcomes)[0]) if c not in shown
    ]
    if not left_out:
        return []
    every = len(left_out) + len(shown)
    names = ", ".join(f"`{c}`" for c in left_out)
    return [
        f"Not in this report: {len(left_out)} of the profile's {every} empirical claims "
        f"(the run chose its claims with `--claim`): {names}.",
        "",
    ]


def render_regime_report(
    outcomes: list[RegimeOutcome],
    plots: list[str],
    command: str,
    report_dir: Path | None,
    regimes_file: Path = REGIMES_FILE,
) -> str:
    """The regime profile's Markdown: regimes, verdicts across them, then each regime."""
    profile, like = regime_profile(outcomes)
    apply_holm(*(regime.reproduction for regime in outcomes))  # one family: every regime's
    for regime in outcomes:
        mark_unconverged(regime.reproduction)
    env = environment("cpu")
    first = outcomes[0].reproduction
    header = [
        {"": "command", " ": f"`{command}`"},
        {"": "overrides", " ": json.dumps(first.overrides, sort_keys=True)},
        {"": "commit", " ": str(env["git_commit"])},
        {
            "": "software",
            " ": f"suite {env['suite_version']}, python {env['python']}, torch {env['torch']}, "
            f"fbgemm {env['fbgemm']}, mlflow {env['mlflow']}",
        },
        {"": "seeds", " ": ", ".join(map(str, first.seeds)) + " (every run, paired)"},
    ]
    counts = across_counts(outcomes)
    total = sum(counts.values())
    summary = ", ".join(f"{n} {what}" for what, n in sorted(counts.items()))
    lines = [
        f"# Reproduction report: `{profile}` profile (verdicts across data regimes)",
        "",
        table(header),
        "",
        "Data regimes: the data each column's verdicts rest on, beside the papers' datasets "
        "(the `characterize` task's figures on the first 4M training lookups; '-' where "
        f"unknown). Regimes are declared in `suite/reproductions/{regimes_file.name}`.",
        "",
        table(regime_table(outcomes, report_dir)),
        "",
        *[f"- `{r.name}`: {r.regime.text}" for r in outcomes],
        "",
        f"**{total} empirical claims across {len(outcomes)} regimes: {summary}.**",
        "",
        *not_in_report(outcomes),
        f"Each spec's `{profile}` profile is its `{like}` profile (runs, seeds, schedule) with "
        f"the values the {like} profile tuned (`suite/reproductions/tuned/*.{like}.yaml`), "
        "unchanged in every regime: no regime is tuned on its own. Verdicts are decided as in "
        f"the {like} report (`suite.decisions`: "
        "seeds' spread plus the test set's DeLong variance, one-sided tests at 5%, TOST at 90% "
        "for `within`, `underpowered` with the n it needs); Holm's correction runs over every "
        "regime's empirical claims as one family, and every cell and the last column read "
        "the Holm-decided verdicts (`undecided after Holm` where the adjusted p is not below "
        "0.05). A cell reads `verdict: tested figure [90% CI]`. The last "
        "column: `holds in every regime` (or `does not hold in every regime`) where every "
        "regime decides alike, `changes (...)` where two decided verdicts differ, `not decided "
        "in ...` where a regime's test decides nothing.",
        "",
        table(verdict_rows(outcomes)),
        "",
        "## Cost",
        "",
        table(cost_rows(outcomes)),
        "",
    ]
    if plots:
        lines += ["## Plots", "", *[f"![{Path(p).stem}]({p})" for p in plots], ""]
    for regime in outcomes:
        pairs = [
            (paper.spec.paper, c)
            for paper in regime.reproduction.papers
            for c in paper.claims
            if not c.timing and c.claim.basis == "empirical"
        ]
        papers, claims = [p for p, _ in pairs], [c for _, c in pairs]
        lines += [f"## Regime `{regime.name}`", "", regime.regime.text, ""]
        lines += claims_section(claims, papers)
        lines += [wall_time_text(regime.reproduction), ""]
    return "\n".join(lines)


def regime_counts_line(outcomes: list[RegimeOutcome]) -> str:
    """One line for the terminal: the cross-regime column's counts."""
    counts = across_counts(outcomes)
    return ", ".join(f"{n} {what}" for what, n in sorted(counts.items())) or "no claims"
