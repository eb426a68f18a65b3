"""``suite reproduce --profile regime``: the handler that plans, trains (or regenerates)
and reports every data regime (:mod:`suite.reproduce.regime_runs`); ``suite.commands.reproduce``
registers the flags."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def handle_regime(
    papers: list[str] | None, claim_ids: list[str] | None, overrides: dict[str, Any], **run: Any
) -> int:
    """``suite reproduce --profile regime``: print the plan, train (or resume) every regime's
    jobs, judge them, write the report and plots under ``run["report_dir"]``."""
    from suite.fileio import write_text_atomic
    from suite.reproduce.plots import draw_plots
    from suite.reproduce.regime_report import (
        draw_regime_plot,
        regime_counts_line,
        render_regime_report,
    )
    from suite.reproduce.regime_runs import (
        STANDARD_DIR,
        load_regimes,
        plan_text,
        regime_plans,
        reproduce_regimes,
    )

    regimes = load_regimes()
    out_dir = Path(run["report_dir"])
    plans = None
    if run.get("from_results") is None:
        plans = regime_plans(papers, claim_ids, overrides, regimes)
        for line in plan_text(plans, out_dir, STANDARD_DIR):
            print(line, flush=True)
    outcomes = reproduce_regimes(papers, claim_ids, overrides, regimes, plans=plans, **run)
    plots = draw_regime_plot(outcomes, out_dir)
    for regime in outcomes:
        drawn = draw_plots(regime.reproduction, out_dir / regime.name)
        plots += [f"{regime.name}/{p}" for p in drawn]
    report = render_regime_report(outcomes, plots, run.get("command", ""), out_dir)
    path = write_text_atomic(out_dir / "REPORT.md", report, "--out")
    print(regime_counts_line(outcomes))
    print(f"report: {path}")
    return 0
