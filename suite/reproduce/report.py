"""``REPORT.md`` and its plots for a reproduction profile.

Figures that depend on the machine's speed are kept in one section, "Timings", so that
two runs of a profile on CPU give the same report outside it.
"""

from __future__ import annotations

import math
from pathlib import Path

from suite.environment import environment
from suite.reproduce.claims import describe
from suite.reproduce.runner import PaperOutcome, RunRecord

TIMINGS_HEADING = "## Timings (machine-dependent)"
DEFAULT_UI = "http://127.0.0.1:5000"


def fmt(value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if abs(value) >= 1e5 or (value != 0 and abs(value) < 1e-3):
        return f"{value:.4g}"
    return f"{value:.4f}"


def run_link(record: RunRecord, ui: str) -> str:
    return f"{ui}/#/runs/{record.mlflow_run_id}" if record.mlflow_run_id else ""


def linked(value: float, record: RunRecord | None, ui: str) -> str:
    text = fmt(value)
    return f"[{text}]({run_link(record, ui)})" if record and record.mlflow_run_id else text


def _operand_record(operand: object, outcome: PaperOutcome) -> RunRecord | None:
    if isinstance(operand, str):
        return outcome.runs.get(operand.split(".", 1)[0])
    if isinstance(operand, dict):
        ref = next(iter(operand.values()))[0]
        return outcome.runs.get(ref.split(".", 1)[0])
    return None


def render_report(
    profile: str, outcomes: list[PaperOutcome], plots: list[str], ui: str = DEFAULT_UI
) -> str:
    """The report's Markdown."""
    env = environment()
    claims = [c for o in outcomes for c in o.claims]
    held = sum(c.holds is True for c in claims)
    failed = sum(c.holds is False for c in claims)
    missing = sum(c.holds is None for c in claims)
    lines = [
        f"# Reproduction report: `{profile}` profile",
        "",
        f"Produced by `suite reproduce --profile {profile}` (`nox -s reproduce`). "
        f"suite {env['suite_version']}, torch {env['torch']}, fbgemm {env['fbgemm']}, "
        f"device {env['device']}.",
        "Each figure links to its MLflow run (start `mlflow ui --backend-store-uri "
        "sqlite:///mlruns/mlflow.db` to follow the links).",
        "",
        f"**{len(claims)} claims: {held} hold, {failed} do not hold, {missing} not measured.**",
        "",
    ]
    for outcome in outcomes:
        spec = outcome.spec
        title = f"[{spec.title}]({spec.link})" if spec.link else spec.title
        lines += [
            f"## {spec.paper}: {title}",
            "",
            "| claim | comparison | left | right | verdict |",
            "| --- | --- | --- | --- | --- |",
        ]
        for c in outcome.claims:
            left = linked(c.left, _operand_record(c.claim.left, outcome), ui)
            right = linked(c.right, _operand_record(c.claim.right, outcome), ui)
            verdict = {True: "**holds**", False: "**does not hold**", None: "not measured"}[c.holds]
            lines.append(
                f"| {c.claim.text} | `{describe(c.claim)}` | {left} | {right} | {verdict} |"
            )
        lines += [
            "",
            "| run | model | embedding | task | test AUC | test log loss | embedding bytes | seeds | config |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for rid, rec in outcome.runs.items():
            m = rec.metrics
            auc = linked(m.get("test_auc", math.nan), rec, ui)
            loss = fmt(m.get("test_logloss", math.nan))
            if rec.std.get("test_auc") is not None:
                auc += f" ± {fmt(rec.std['test_auc'])}"
            lines.append(
                f"| {rid} | {rec.config.model.name} | {rec.config.embedding.name} | {rec.config.task.name} "
                f"| {auc} | {loss} | {fmt(m.get('embedding_bytes', math.nan))} "
                f"| {','.join(map(str, rec.seeds))} | `{rec.config.config_hash()}` |"
            )
        lines.append("")
    if plots:
        lines += ["## Plots", ""]
        lines += [f"![{Path(p).stem}]({p})" for p in plots]
        lines.append("")
    lines += [
        TIMINGS_HEADING,
        "",
        "| paper | run | train samples/s | wall s |",
        "| --- | --- | --- | --- |",
    ]
    for outcome in outcomes:
        for rid, rec in outcome.runs.items():
            lines.append(
                f"| {outcome.spec.paper} | {rid} | "
                f"{fmt(rec.metrics.get('train_samples_per_s', math.nan))} | {rec.duration_s:.1f} |"
            )
    lines.append("")
    return "\n".join(lines)


def comparable(report: str) -> str:
    """The report without its timings section and MLflow run ids (random per run)."""
    import re

    body = report.split(TIMINGS_HEADING, 1)[0]
    return re.sub(r"#/runs/[0-9a-f]+", "#/runs/<id>", body)
