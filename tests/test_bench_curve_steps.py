"""``benchmarks/bench_curve_steps.py``: every curve point resolved as the reproduction
resolves it, timed side by side with ``full`` in each repeat."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.bench_curve_steps import SPEC, curve_points, main, side_by_side
from suite.reproduce.plan import plan_specs, run_config
from suite.reproduce.spec import load_spec


def test_the_points_are_the_reproductions_own_configs_set_to_a_few_steps() -> None:
    """The same options at each budget and the same tuned learning rates as the profile's
    runs, so the timing is of the step the report's runs took; unreachable points are
    left out as the report leaves them out."""
    spec = load_spec(SPEC)
    points = curve_points("curve-smoke", None, None, 7)
    assert points[0][:2] == ("full", 1)
    where = plan_specs([spec], "curve-smoke").where
    planned = {run for _, run in where if run != spec.curve.reference}
    assert {spec.curve.run_id(m, b) for m, b, _ in points[1:]} == planned
    assert ("alpt", 16) not in {(m, b) for m, b, _ in points}  # 2 bits do not reach 1/16
    for method, budget, config in points[1:]:
        stored = run_config(spec, "curve-smoke", spec.curve.run_id(method, budget), {})
        assert config.embedding == stored.embedding
        assert config.train.sparse_lr == stored.train.sparse_lr
        assert config.train.max_steps == 7 and not config.tracking.enabled


def test_full_is_the_unit_and_every_point_gets_a_cost_per_repeat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    points = curve_points("curve-smoke", [64], ["hash", "ttrec"], 4)
    rows = side_by_side(points, repeats=2)
    assert [(r["budget"], r["method"]) for r in rows] == [
        ("full", "full"),
        ("1/64", "hash"),
        ("1/64", "ttrec"),
    ]
    assert rows[0]["step cost vs full"] == 1.0
    assert all(r["step cost vs full"] > 0 and r["train samples/s"] > 0 for r in rows)

    monkeypatch.chdir(tmp_path)  # the JSON goes under results/bench of the working folder
    path = main(["--quick", "--budgets", "64", "--methods", "hash"])
    written = json.loads(path.read_text())
    assert written["profile"] == "curve-smoke" and written["steps"] == 20
    assert [r["method"] for r in written["rows"]] == ["full", "hash"]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--profile", "nope"], "--profile nope: not a profile of compression"),
        (["--quick", "--budgets", "3"], "--budgets 3: not on curve-smoke's curve (4, 16, 64)"),
        (["--quick", "--methods", "hash", "lsh"], "--methods lsh: not on curve-smoke's curve"),
    ],
)
def test_a_point_off_the_curve_is_refused_by_name(
    args: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2 and named in capsys.readouterr().err
