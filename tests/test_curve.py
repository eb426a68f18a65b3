"""The compression curve: methods x budgets expanded into runs (distinct configs, the same
seeds, options chosen on the run's data, unreachable points left out), the ranking per
budget by the suite's decisions, and the generated "which method when" summary."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from suite.embeddings.budget import built_bytes, full_bytes
from suite.reproduce.curve import rank_budget, rank_curve, ties_with_best, which_method_when
from suite.reproduce.judge import judge
from suite.reproduce.outcome import SeededRun
from suite.reproduce.plan import needed_runs, plan_specs, selected_claims
from suite.reproduce.spec import ReproductionSpec, load_spec

DATA = {"train_rows": 2000, "val_rows": 500, "test_rows": 500}


def small_spec() -> ReproductionSpec:
    return ReproductionSpec.model_validate(
        {
            "paper": "curve_test",
            "title": "t",
            "profiles": {
                "quick": {
                    "base": {"dataset": {"name": "criteo-synth", "options": DATA}},
                    "seeds": [0, 1, 2, 3, 4],
                }
            },
            "curve": {"methods": ["hash", "alpt"], "budgets": [2, 8]},
            "runs": {"full": {"embedding": {"name": "full"}, "task": {"name": "accuracy"}}},
            "claims": [
                {
                    "id": "c",
                    "text": "t",
                    "kind": "at_most",
                    "left": "full.embedding_total_bytes",
                    "right": 1e12,
                    "basis": "structural",
                }
            ],
        }
    )


def test_the_shipped_spec_expands_every_method_at_every_budget() -> None:
    spec = load_spec("compression")
    assert spec.curve is not None and len(spec.curve.budgets) >= 5
    assert min(spec.curve.budgets) == 2 and max(spec.curve.budgets) == 64
    ids = spec.curve.run_ids()
    assert len(ids) == len(set(ids)) == len(spec.curve.methods) * len(spec.curve.budgets)
    assert set(ids) | {"full"} <= set(
        needed_runs(spec, "curve", selected_claims(spec, "curve", None), curve=True)
    )
    quick = spec.profiles["curve-smoke"].budgets  # a cheaper smoke: some of the points
    assert quick and set(
        needed_runs(spec, "curve-smoke", selected_claims(spec, "curve-smoke", None), curve=True)
    ) == {
        "full",
        *spec.curve.run_ids(quick),
    }
    tuning = spec.profiles["curve"].tuning
    assert tuning is not None
    for method in spec.curve.methods:  # one study per method, at the same budget
        assert f"{method}_at_4" in tuning.runs
        for b in spec.curve.budgets:
            assert b == 4 or tuning.share[f"{method}_at_{b}"] == f"{method}_at_4"


def test_curve_runs_get_their_options_on_the_data_and_share_the_seeds() -> None:
    spec = small_spec()
    plan = plan_specs([spec], "quick")
    planned, where = plan.runs, plan.where
    # alpt's smallest width (2 bits) holds 16 of full's 68 bytes a row: not 1/8
    assert ("curve_test", "alpt_at_8") not in where
    assert "smallest setting" in plan.unreachable[("curve_test", "alpt_at_8")]  # why, kept
    assert {r for _, r in where} == {"full", "hash_at_2", "hash_at_8", "alpt_at_2"}
    assert len(set(where.values())) == 4  # distinct configs
    configs = {r: planned[k].config for (_, r), k in where.items()}
    assert configs["alpt_at_2"].embedding.typed_options().bits == 8
    from suite.data.source import get_prepared

    cards = get_prepared(configs["full"].dataset, progress=False).schema.cardinalities
    full = full_bytes(16, cards)
    for run, fraction in (("hash_at_2", 1 / 2), ("hash_at_8", 1 / 8)):
        options = configs[run].embedding.typed_options().model_dump()
        real = built_bytes("hash", options, cards)
        assert 0.99 * fraction * full <= real <= fraction * full
    records = {k: SeededRun(e.roles[0], e.config, [0]) for k, e in planned.items()}
    judged = judge(plan, spec, records)  # the absent point is no run of it
    assert set(judged.runs) == {"full", "hash_at_2", "hash_at_8", "alpt_at_2"}
    assert judged.unreachable == {"alpt_at_8": plan.unreachable[("curve_test", "alpt_at_8")]}
    jobs = plan.jobs
    seeds = {}
    for job in jobs:
        seeds.setdefault(job.key, []).append(job.seed)
    assert all(s == [0, 1, 2, 3, 4] for s in seeds.values())


def planted(mean: float, rng: np.random.Generator, n: int = 10) -> dict[int, float]:
    return {s: mean + float(v) for s, v in enumerate(rng.normal(0, 0.0002, n))}


def test_ranking_says_who_is_below_equivalent_or_indistinguishable() -> None:
    rng = np.random.default_rng(0)
    base = planted(0.80, rng)
    aucs = {
        "hash": base,
        "robe": {s: v - 0.0001 for s, v in base.items()},  # same within 0.001, tightly
        "qr": {s: v - 0.01 for s, v in base.items()},  # far below
        "dhe": {s: v - 0.001 + (0.004 if s % 2 else -0.004) for s, v in base.items()},  # noisy
    }
    (rows,) = rank_curve([rank_budget(4, aucs)])
    assert [s.method for s in rows] == ["hash", "robe", "dhe", "qr"]
    assert [s.rank for s in rows] == [1, 2, 3, 4]
    verdicts = {s.method: s.verdict for s in rows}
    assert verdicts == {
        "hash": "best",
        "robe": "equivalent to the best",
        "dhe": "indistinguishable",
        "qr": "below the best",
    }
    assert ties_with_best(rows) == ["robe", "dhe"]
    assert all(r.low < r.auc < r.high for r in rows)


def test_holm_adjusts_over_the_whole_table() -> None:
    rng = np.random.default_rng(1)
    base = planted(0.80, rng)
    aucs = {"a": base, "b": {s: v - 0.0015 + rng.normal(0, 0.0006) for s, v in base.items()}}
    raw = rank_budget(2, aucs)[1].p_below
    table = rank_curve([rank_budget(b, aucs) for b in (2, 4, 8)])
    assert all(rows[1].p_below == min(1.0, 3 * raw) for rows in table)


def test_which_method_when_is_generated_from_the_table() -> None:
    rng = np.random.default_rng(2)
    base = planted(0.80, rng)
    at2 = {"hash": base, "robe": {s: v - 0.01 for s, v in base.items()}}
    at8 = {"robe": base, "hash": {s: v - 0.0001 for s, v in base.items()}}
    table = rank_curve([rank_budget(2, at2), rank_budget(8, at8)])
    text = which_method_when(table, {8: {"alpt": "too big"}}, str.upper)
    assert text == (
        "At 1/2 of full's bytes HASH is best (0.8000); every other method is below it by "
        "more than 0.001. At 1/8 of full's bytes ROBE is best (0.8000); HASH cannot be told "
        "from it; ALPT cannot reach it. Best or tied with the best: HASH at 2 of 2 budgets, "
        "ROBE at 1 of 2 budgets."
    )


def test_a_point_over_its_budget_is_left_out_of_the_ranking() -> None:
    """A method whose trained bytes exceed its budget (FIITED before it has pruned, in a
    short run) is not compared at equal memory: it is named absent, with its bytes."""
    from suite.reproduce.curve import OVER_BUDGET, over_budget

    full = 1_000_000.0
    assert over_budget(250_000.0, full, 4) is None
    assert over_budget(250_000.0 * (1 + OVER_BUDGET), full, 4) is None
    reason = over_budget(1_299_000.0, full, 4)
    assert reason is not None and "1,299,000 bytes (1.299 of full)" in reason
    assert "over the budget of 250,000" in reason
    assert over_budget(float("nan"), full, 4) is None  # no figure: nothing to judge


def test_the_ranking_keeps_the_test_sets_noise_in_a_report_regenerated_from_stored_runs(
    tmp_path: Path,
) -> None:
    """Every two methods at a budget have their pair's noise stored (the best is known only
    once every seed is in), so a curve resumed or regenerated without the uncommitted test
    predictions ranks with the same shared DeLong variance as the reproduction that had them,
    whichever method is best."""
    from suite.reproduce.claims import pair_noise
    from suite.reproduce.curve import test_variance
    from suite.reproduce.judge import NoiseBook, keep_noise
    from suite.reproduce.store import read_noise, write_noise
    from suite.results import write_arrays
    from tests.conftest import accuracy_result

    spec = small_spec()
    plan = plan_specs([spec], "quick")
    planned, where = plan.runs, plan.where
    seeds = [0, 1, 2, 3, 4]
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 800).astype(np.float32)
    common = rng.normal(size=800)
    kept, records = {}, {}
    for key, entry in planned.items():
        run = next(r for (_, r), k in where.items() if k == key)
        records[key] = SeededRun(entry.roles[0], entry.config, seeds)
        for seed in seeds:
            logits = labels * (1.0 + 0.1 * len(run)) + common + rng.normal(size=800)
            kept[(run, seed)] = (labels, logits)
            details = write_arrays(
                tmp_path / run / f"{seed}.json", {"test_labels": labels, "test_logits": logits}
            )
            records[key].results[seed] = accuracy_result(
                seed,
                auc=0.7,
                metrics={"test_auc": 0.7, "embedding_total_bytes": 1.0},
                details={"arrays": details},
            )
    pairs = plan.noise_pairs()
    hashed = {r: k for (_, r), k in where.items()}
    assert (hashed["hash_at_2"], hashed["alpt_at_2"]) in pairs  # hash before alpt, as listed
    assert {(hashed[r], "") for r in hashed} <= pairs

    book = NoiseBook({}, predictions=True)
    live = test_variance(judge(plan, spec, records, book))
    expected = pair_noise(lambda r, s: kept[(r, s)], "hash_at_2", "alpt_at_2", seeds)
    assert live("alpt_at_2", "hash_at_2") == (expected[0].shared, 800)
    assert live("hash_at_2", "alpt_at_2") == live("alpt_at_2", "hash_at_2")
    assert live("full", "")[1] == 800

    keep_noise(plan, spec, records, book)  # what a reproduction stores
    assert {(left, right) for left, right, _ in book.entries} == pairs
    assert len(book.entries) == len(pairs) * len(seeds)
    assert len(book._components) == len(planned) * len(seeds)  # each job's once, shared by pairs
    write_noise(tmp_path, book.entries)
    before = {pair: live(*pair) for pair in [("alpt_at_2", "hash_at_2"), ("hash_at_8", "")]}
    for path in tmp_path.rglob("*.npz"):
        path.unlink()  # as on a fresh clone
    stored = NoiseBook(read_noise(tmp_path), predictions=False)
    regenerated = test_variance(judge(plan, spec, records, stored))
    for pair, figures in before.items():
        assert figures[0] > 0 and regenerated(*pair) == (pytest.approx(figures[0]), 800)


def test_a_step_cost_timed_in_another_sitting_than_the_references_is_marked() -> None:
    """A method's step cost is full's samples/s over its own, per seed. Where the two
    trained in different sittings the ratio also carries the machine's drift between them,
    so the row is marked and the table says why, rather than passing it off as timed side
    by side; runs of one sitting stay unmarked."""
    from suite.reproduce.curve import APART
    from suite.reproduce.judge import NoiseBook
    from suite.reproduce.report import curve_section
    from tests.conftest import accuracy_result

    spec = small_spec()
    plan = plan_specs([spec], "quick")
    planned, where = plan.runs, plan.where
    name_of = {key: run for (_, run), key in where.items()}
    seeds = [0, 1, 2, 3, 4]
    rng = np.random.default_rng(0)
    records = {}
    for key, entry in planned.items():
        run = name_of[key]
        budget = 1 if run == "full" else int(run.rsplit("_", 1)[1])
        day = 2 if run == "hash_at_8" else 1  # trained again a day later
        records[key] = SeededRun(entry.roles[0], entry.config, seeds)
        for seed in seeds:
            auc = 0.7 + 0.01 * rng.normal()
            records[key].results[seed] = accuracy_result(
                seed,
                auc=auc,
                metrics={
                    "test_auc": auc,
                    "embedding_total_bytes": 1e6 / budget,
                    "train_samples_per_s": 1000.0 if run == "full" else 500.0,
                },
                created=f"2026-01-0{day}T10:{10 + 2 * seed}:00+00:00",
                duration_s=100.0,
            )
    outcome = judge(plan, spec, records, NoiseBook({}, predictions=False))
    lines = "\n".join(curve_section(outcome)).splitlines()
    rows = {
        (cells[1].strip(), cells[2].strip()): cells[-2].strip()
        for line in lines
        if line.startswith("| 1/") and (cells := line.split("|"))
    }
    assert rows[("1/8", "hash")] == f"2.00x [2.00, 2.00] {APART}"
    assert rows[("1/2", "hash")] == "2.00x [2.00, 2.00]"
    assert sum(APART in cost for cost in rows.values()) == 1
    (note,) = [line for line in lines if line.startswith(APART)]
    assert "different sittings" in note and "drift" in note

    for record in records.values():  # all in one sitting: nothing to mark, no note
        for seed, result in record.results.items():
            record.results[seed] = result.model_copy(
                update={"created": f"2026-01-01T10:{10 + 2 * seed}:00+00:00"}
            )
    lines = curve_section(judge(plan, spec, records, NoiseBook({}, False)))
    assert "2.00x [2.00, 2.00]" in "\n".join(lines) and not any(APART in x for x in lines)
