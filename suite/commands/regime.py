"""``suite reproduce --profile regime``: the handler that plans, trains (or regenerates)
and reports every data regime (:mod:`suite.reproduce.regime_runs`); ``suite.commands.reproduce``
registers the flags."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from suite.reproduce.regime_runs import RegimeSetup


def handle_regime(
    setup: RegimeSetup,
    papers: list[str] | None,
    claim_ids: list[str] | None,
    overrides: dict[str, Any],
    **run: Any,
) -> int:
    """``suite reproduce --profile regime`` (or another regime profile, ``setup``): print
    the plan, check every job fits its device, train (or resume) every regime's jobs, judge
    them, write the report and plots under ``run["report_dir"]``."""
    from suite.fileio import write_text_atomic
    from suite.reproduce.costs import check_fit, plan_costs
    from suite.reproduce.plots import draw_plots
    from suite.reproduce.regime_report import (
        draw_regime_plot,
        regime_counts_line,
        render_regime_report,
    )
    from suite.reproduce.regime_runs import (
        load_regimes,
        plan_text,
        regime_plans,
        reproduce_regimes,
    )

    regimes = load_regimes(setup.regimes_file)
    out_dir = Path(run["report_dir"])
    plans = None
    if run.get("from_results") is None:
        plans = regime_plans(papers, claim_ids, overrides, regimes, profile=setup.profile)
        for plan in plans.values():  # before any training, as a plain profile's
            check_fit(plan_costs(plan, run.get("workers"), rates=False))
        for line in plan_text(plans, out_dir, setup.adopt_from):
            print(line, flush=True)
    outcomes = reproduce_regimes(
        papers,
        claim_ids,
        overrides,
        regimes,
        adopt_from=setup.adopt_from,
        plans=plans,
        profile=setup.profile,
        **run,
    )
    plots = draw_regime_plot(outcomes, out_dir)
    for regime in outcomes:
        drawn = draw_plots(regime.reproduction, out_dir / regime.name)
        plots += [f"{regime.name}/{p}" for p in drawn]
    report = render_regime_report(
        outcomes, plots, run.get("command", ""), out_dir, setup.regimes_file
    )
    path = write_text_atomic(out_dir / "REPORT.md", report, "--out")
    print(regime_counts_line(outcomes))
    print(f"report: {path}")
    return 0
