"""Reproduction specs, verdicts on per-seed figures, the report, tracking, a clean checkout."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from suite.cli import main
from suite.errors import ConfigError
from suite.reproduce.claims import evaluate, evaluate_scaling, resolve
from suite.reproduce.report import comparable, table
from suite.reproduce.spec import Claim, list_specs, load_spec
from tests.conftest import TINY_DATA, tiny_config, tracking_uri

SEEDS = [0, 1, 2, 3, 4]


def figures(**runs: list[float]) -> dict:
    """``run -> seed -> {test_auc}`` from per-seed AUC lists."""
    return {
        run: {s: {"test_auc": v} for s, v in zip(SEEDS, vals, strict=True)}
        for run, vals in runs.items()
    }


def claim(kind: str, left: object, right: object, **extra: object) -> Claim:
    form = "equivalence" if kind == "within" else "superiority"
    extra = {"form": form, "quote": "the paper's words", **extra}
    return Claim(id="c", text="t", kind=kind, left=left, right=right, **extra)


# --- verdicts ------------------------------------------------------------------------


def test_a_config_compared_with_itself_is_underpowered() -> None:
    """One config run under seeds 0-4 and again under 5-9, paired: the difference is noise."""
    from suite.runs.single import execute

    config = tiny_config(overrides=["train.max_steps=20"])
    a = [execute(config.with_overrides({"seed": s})).metrics["test_auc"] for s in range(5)]
    b = [execute(config.with_overrides({"seed": s + 5})).metrics["test_auc"] for s in range(5)]
    assert len(set(a)) == 5  # the seeds do differ
    outcome = evaluate(
        claim("greater", "a.test_auc", "b.test_auc", margin=0.001), figures(a=a, b=b)
    )
    assert outcome.verdict == "underpowered"
    assert outcome.difference.low < 0 < outcome.difference.high
    assert outcome.label.startswith("underpowered (needs n")


def test_a_planted_difference_holds_and_its_reverse_does_not() -> None:
    rng = np.random.default_rng(0)
    base = 0.75 + rng.normal(0, 0.002, 5)
    better = base + 0.01 + rng.normal(0, 0.0005, 5)
    figs = figures(good=list(better), bad=list(base))
    assert (
        evaluate(claim("greater", "good.test_auc", "bad.test_auc", margin=0.001), figs).verdict
        == "holds"
    )
    reverse = evaluate(claim("greater", "bad.test_auc", "good.test_auc", margin=0.001), figs)
    assert reverse.verdict == "does not hold"
    assert reverse.difference.high < -0.001 and reverse.p_value < 0.01
    within = evaluate(claim("within", "good.test_auc", "bad.test_auc", margin=0.001), figs)
    assert within.verdict == "does not hold"


def test_threshold_claims_use_the_ci_of_the_mean() -> None:
    figs = figures(r=[0.751, 0.749, 0.752, 0.748, 0.750])
    assert evaluate(claim("at_least", "r.test_auc", 0.74), figs).verdict == "holds"
    assert evaluate(claim("at_least", "r.test_auc", 0.76), figs).verdict == "does not hold"
    assert evaluate(claim("at_least", "r.test_auc", 0.75), figs).verdict == "underpowered"
    outcome = evaluate(claim("at_least", "r.test_auc", 0.74), figs)
    assert outcome.target == 0.74 and outcome.right is None and outcome.left.n == 5


def test_one_seed_or_a_missing_figure_is_not_measurable() -> None:
    one = {"a": {0: {"test_auc": 0.7}}, "b": {0: {"test_auc": 0.6}}}
    assert evaluate(claim("greater", "a.test_auc", "b.test_auc"), one).verdict == "not measurable"
    figs = figures(a=[0.7] * 5)
    assert evaluate(claim("greater", "a.test_auc", "a.missing"), figs).verdict == "not measurable"


def test_derived_operands_resolve_seed_by_seed() -> None:
    figs = {"q": {0: {"b": 100.0}, 1: {"b": 50.0}}, "h": {0: {"b": 400.0}, 1: {"b": 400.0}}}
    assert list(resolve({"ratio": ["q.b", "h.b"]}, figs, [0, 1])) == [0.25, 0.125]
    assert list(resolve({"diff": ["q.b", "h.b"]}, figs, [0, 1])) == [-300.0, -350.0]


def test_the_modelled_all_to_all_speedup_adds_codec_time_to_wire_time() -> None:
    # 10 GB raw at 25 GB/s: 0.4 s; through the codec 1 GB (0.04 s) + 0.06 s of codec: 4x
    run = {"comm_raw_bytes": 10e9, "comm_wire_bytes": 1e9, "comm_codec_seconds": 0.06}
    slow = {**run, "comm_codec_seconds": 3.96}  # 4 s through the codec: 0.1x
    figs = {"lossy": {0: run, 1: slow}}
    operand = {"alltoall_speedup": ["lossy", "25"]}
    assert resolve(operand, figs, [0, 1]) == pytest.approx([4.0, 0.1])
    claim = Claim(
        id="c", text="t", kind="at_least", left=operand, right=1.38, form="superiority", quote="q"
    )
    assert claim.references() == [
        "lossy.comm_raw_bytes",
        "lossy.comm_wire_bytes",
        "lossy.comm_codec_seconds",
    ]
    for bad in (["lossy"], ["lossy.x", "25"], ["lossy", "fast"], ["lossy", "-1"]):
        with pytest.raises(ValueError, match=r"alltoall_speedup takes \[run, link GB/s\]"):
            Claim(id="c", text="t", kind="at_least", left={"alltoall_speedup": bad}, right=1)


def _scaling_figures(exponents: dict[str, float], noise: float = 0.0003) -> dict:
    rng = np.random.default_rng(0)
    compute = np.geomspace(1e9, 1e12, 5)
    figs = {}
    for family, b in exponents.items():
        loss = 0.44 + 2.0 * compute**-b
        for i, c in enumerate(compute):
            figs[f"{family}/{i}"] = {
                s: {"test_logloss": float(loss[i] + rng.normal(0, noise)), "training_flops": c}
                for s in SEEDS
            }
    return figs


FAMILIES = {f: [str(i) for i in range(5)] for f in ("fast", "slow", "flat")}


def test_exponent_claims_on_planted_scaling_laws() -> None:
    figs = _scaling_figures({"fast": 0.15, "slow": 0.05})
    cache: dict = {}
    holds, fits = evaluate_scaling(claim("exponent_greater", "fast", "slow"), FAMILIES, figs, cache)
    assert holds.verdict == "holds", holds.note
    assert fits["fast"].exponent.low < 0.15 < fits["fast"].exponent.high
    reverse, _ = evaluate_scaling(claim("exponent_greater", "slow", "fast"), FAMILIES, figs, cache)
    assert reverse.verdict == "does not hold"
    less = claim("less_at_compute", "slow", "fast", margin=0.001)
    at, _ = evaluate_scaling(less, FAMILIES, figs, cache)
    assert at.verdict == "does not hold"  # the slow family ends higher


def test_an_exponent_from_a_bad_fit_is_not_testable_at_this_scale() -> None:
    figs = _scaling_figures({"fast": 0.15})
    rng = np.random.default_rng(1)
    for i in range(5):  # no trend at all: a flat cloud
        figs[f"flat/{i}"] = {
            s: {
                "test_logloss": 0.47 + float(rng.normal(0, 0.003)),
                "training_flops": 10.0 ** (9 + i),
            }
            for s in SEEDS
        }
    outcome, _ = evaluate_scaling(claim("exponent_greater", "fast", "flat"), FAMILIES, figs)
    assert outcome.verdict == "not testable at this scale"
    assert "flat: R²=" in outcome.note


# --- specs ----------------------------------------------------------------------------


def test_every_shipped_spec_loads_with_enough_seeds_and_the_field_margin() -> None:
    names = list_specs()
    assert {"dlrm", "qr", "mixed_dim", "fiited", "lowprec", "wukong"} <= set(names)
    for name in names:
        spec = load_spec(name)
        assert "full" in spec.profiles, name
        on_cpu = [p for p in spec.profiles if p != "full"]  # quick, or a spec's own smoke
        assert on_cpu, name
        for profile in on_cpu:
            assert len(spec.profiles[profile].seeds) >= 5, (name, profile)
        assert len(spec.profiles["full"].seeds) >= 3, name
        for c in spec.claims:
            refs = " ".join(c.references())
            if c.comparative and "auc" in refs:
                assert c.margin <= 0.001, c.id  # the field's threshold, never 0.01


def test_wukong_families_span_two_orders_of_magnitude_with_five_sizes() -> None:
    spec = load_spec("wukong")
    for profile in ("quick", "full"):
        families = spec.profiles[profile].families
        assert set(families) == {"dlrm", "dcnv2", "wukong"}
        assert all(len(members) >= 5 for members in families.values())


def test_curve_claims_expand_over_their_points() -> None:
    spec = load_spec("qr")
    ids = [c.id for c in spec.claims]
    expanded = [
        i for i in ids if i.startswith("qr-above-hash-") and "init" not in i and "suite" not in i
    ]
    assert [f"qr-above-hash-{b}" for b in (2, 4, 8, 16)] == expanded
    c = next(c for c in spec.claims if c.id == "qr-above-hash-8")
    # the paper's form: QR beats hashing, no margin; the suite's 0.001 as its own row
    assert (c.left, c.right, c.margin, c.form) == (
        "qr_8.test_auc",
        "hash_8.test_auc",
        0.0,
        "superiority",
    )
    bound = next(c for c in spec.claims if c.id == "qr-above-hash-8-suite-bound")
    assert (bound.margin, bound.bound_of, bound.origin) == (0.001, "qr-above-hash-8", "suite")
    assert bound.label.endswith("(suite's bound)")


def test_bad_spec_names_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "paper: x\ntitle: t\nprofiles: {quick: {}}\nruns: {a: {}}\n"
        "claims: [{id: c, text: t, kind: less, left: b.test_auc, right: 1, form: superiority,"
        " quote: q}]\n"
    )
    with pytest.raises(ConfigError, match=r"bad.yaml.*claim c: unknown run 'b'"):
        load_spec(path)
    with pytest.raises(ConfigError, match="unknown paper 'dlmr'. Did you mean 'dlrm'"):
        load_spec("dlmr")


# --- the report ------------------------------------------------------------------------


def gfm_tables(markdown: str) -> list[list[list[str]]]:
    """Every table of ``markdown`` as rows of cell texts, parsed by markdown-it (GFM)."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    tables, rows, row = [], None, None
    for token in tokens:
        if token.type == "table_open":
            rows = []
        elif token.type == "tr_open":
            row = []
        elif token.type == "inline" and row is not None:
            row.append(token.content)
        elif token.type == "tr_close":
            rows.append(row)
            row = None
        elif token.type == "table_close":
            tables.append(rows)
    return tables


def test_a_pipe_in_a_cell_does_not_split_the_row() -> None:
    text = table([{"claim": "`|qr - full| <= 0.001`", "verdict": "**holds**"}])
    (rows,) = gfm_tables(text)
    assert rows[1] == ["`|qr - full| <= 0.001`", "**holds**"]


def _reproduce(out: Path, uri: str) -> str:
    sets = [f"--set=dataset.options.{k}={v}" for k, v in TINY_DATA.items()]
    sets += ["--set=train.batch_size=128", "--set=train.max_steps=15"]
    args = ["reproduce", "--paper", "dlrm", "--quiet", "--out", str(out), "--tracking-uri", uri]
    assert main([*args, *sets]) == 0
    return (out / "REPORT.md").read_text()


def test_report_tables_parse_rerun_is_identical_and_tracking_nests(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    uri = tracking_uri(tmp_path)
    out = tmp_path / "report"
    first = _reproduce(out, uri)
    second = _reproduce(out, uri)
    assert comparable(first) == comparable(second)
    assert re.search(
        r"\*\*1 empirical claims: \d holds, \d does not hold, \d underpowered[^*]*\.\*\*", first
    )
    tables = gfm_tables(first)
    header = {r[0]: r[1] for r in tables[0][1:]}
    assert header["seeds"] == "0, 1, 2, 3, 4 (every run, paired)"
    # the data regime opens the report, beside the papers' datasets, cached for regeneration
    regime = {r[0]: r for r in tables[1][1:]}
    assert "Criteo Kaggle (DLRM reference)" in regime
    (own,) = [r for name, r in regime.items() if name.startswith("criteo-synth")]
    assert own[1] == f"{TINY_DATA['train_rows']:,}"
    assert (out / "runs" / "regime.json").is_file()
    assert "--set=train.max_steps=15" in header["command"] and "--paper dlrm" in header["command"]
    assert '"max_steps": 15' in header["overrides"]
    assert header["commit"] and "1 torch thread(s)" in header["machine"]
    assert len(tables) >= 3
    for rows in tables:
        widths = {len(r) for r in rows}
        assert len(widths) == 1 and all(cell.strip() for r in rows[1:] for cell in r), rows
    claim_rows = [
        r for t in tables for r in t if r and r[0].startswith("Smoke check of the pipeline")
    ]
    assert len(claim_rows) == 1 and "(n=5)" in claim_rows[0][3]
    assert (out / "auc_vs_bytes_criteo-synth.png").stat().st_size > 0
    assert (out / "auc_vs_bytes_criteo-synth.pdf").stat().st_size > 0

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("reproduce-quick")
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    parents = [r for r in runs if r.data.tags.get("suite.reproduction") == "true"]
    assert len(parents) == 2 and all(p.info.status == "FINISHED" for p in parents)
    # the second reproduction reused the first one's stored results: it trained nothing
    ids = {p.info.run_id for p in parents}
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") in ids]
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parents[-1].info.run_id}
    names = sorted(r.info.run_name for r in children)
    assert names == [f"dlrm/full seed {s}" for s in SEEDS]
    tags = children[0].data.tags
    assert tags["suite.papers"] == "dlrm" and tags["suite.roles"] == "dlrm/full"
    assert tags["suite.claims"] == "dlrm-learns-synthetic"
    artifacts = {a.path for a in client.list_artifacts(parents[0].info.run_id)}
    assert "REPORT.md" in artifacts and "auc_vs_bytes_criteo-synth.png" in artifacts


def test_the_default_report_directory_is_ignored_by_git() -> None:
    import subprocess

    repo = Path(__file__).resolve().parents[1]
    from suite.reproduce.runner import default_report_dir

    probe = Path(default_report_dir("quick")) / "REPORT.md"
    result = subprocess.run(
        ["git", "-C", str(repo), "check-ignore", "-q", str(probe)], capture_output=True
    )
    assert result.returncode == 0, f"{probe} is not ignored: nox -s reproduce would dirty the tree"


REPO = Path(__file__).resolve().parents[1]
CHECKED_IN = REPO / "results" / "quick" / "REPORT.md"


def test_checked_in_quick_report_covers_every_quick_claim() -> None:
    from suite.reproduce.plan import select_specs, selected_claims

    report = CHECKED_IN.read_text()
    if "empirical claims" not in report.split("\n## ", 1)[0]:
        pytest.skip(
            "results/quick predates verdicts with test-set noise: refresh with "
            "`nox -s reproduce -- --out results/quick`"
        )
    rows = [r for t in gfm_tables(report) for r in t]
    for spec in select_specs(None, "quick"):
        assert f"## {spec.paper}:" in report
        for c in selected_claims(spec, "quick", None):
            found = [r for r in rows if r[0] == c.label]
            assert len(found) == 1, c.id
            assert (
                found[0][-2]
                .strip("*")
                .startswith(
                    (
                        "holds",
                        "does not hold",
                        "underpowered",
                        "undecided after Holm",
                        "not testable",
                        "not measurable",
                    )
                )
            )


@pytest.mark.slow
def test_checked_in_quick_report_is_what_the_code_produces(tmp_path: Path) -> None:
    # the documented refresh, run from this test's own working directory (tmp_path)
    assert main(["reproduce", "--profile", "quick", "--out", "results/quick", "--quiet"]) == 0
    assert Path.cwd() == tmp_path

    def body(text: str) -> str:
        # a checked-in report cannot name the commit that contains it
        return comparable(re.sub(r"\b[0-9a-f]{40}\b", "<commit>", text))

    produced = body((tmp_path / "results" / "quick" / "REPORT.md").read_text())
    assert produced == body(CHECKED_IN.read_text())


def test_family_members_are_ordinary_accuracy_runs() -> None:
    from suite.reproduce.plan import run_config

    spec = load_spec("wukong")
    preset = run_config(spec, "full", "dcnv2/l", {})
    assert preset.task.name == "accuracy" and preset.model.name == "dcnv2"
    assert preset.model.options["mlp"] == [2048, 2048, 1024]  # the preset's model, whole
    inline = run_config(spec, "quick", "wukong/e", {})
    assert inline.model.name == "wukong" and inline.embedding.options["dim"] == 8
    assert inline.dataset.options["train_rows"] == 20000


def test_a_config_several_papers_share_trains_once_with_every_role() -> None:
    from suite.reproduce.plan import build_plan

    plan = build_plan("quick", ["qr", "mixed_dim", "fiited", "dlrm"])
    planned, where = plan.runs, plan.where
    full = where[("mixed_dim", "full")]
    assert where[("fiited", "full")] == where[("dlrm", "full")] == full
    assert planned[full].roles == ["mixed_dim/full", "fiited/full", "dlrm/full"]
    assert ("qr", "full") not in where  # no qr claim needs it: not trained for qr
    assert "md-16x-keeps-full-auc" in planned[full].claims
    assert where[("qr", "hash_4")] == where[("mixed_dim", "hash_4")]


def test_a_bootstrap_claim_uses_the_seeded_percentile_interval() -> None:
    from suite.decisions import INTERVAL_LEVEL
    from suite.stats import bootstrap_ci

    ratios = [0.30, 0.31, 0.30, 0.45, 0.30]  # skewed: one seed far out
    figs = {"r": {s: {"x": v} for s, v in zip(SEEDS, ratios, strict=True)}}
    outcome = evaluate(claim("at_most", "r.x", 0.5, ci="bootstrap"), figs)
    expected = bootstrap_ci(ratios, INTERVAL_LEVEL, resamples=1000)  # the report's one level
    assert (outcome.left.low, outcome.left.high) == (expected.low, expected.high)
    assert outcome.verdict == "holds"


# --- DeLong on each paired seed --------------------------------------------------------


def test_an_auc_comparison_reports_delong_on_each_seed(tmp_path: Path) -> None:
    """A tiny reproduction of one AUC claim: its row shows DeLong's p for each of the five
    seeds, computed on the two runs' kept test predictions (the same test examples)."""
    from suite.results import TaskResult, read_arrays
    from suite.stats import delong_test

    out = tmp_path / "report"
    sets = [f"--set=dataset.options.{k}={v}" for k, v in TINY_DATA.items()]
    sets += ["--set=train.batch_size=128", "--set=train.max_steps=15"]
    args = ["reproduce", "--paper", "qr", "--claim", "qr-above-hash-2", "--quiet"]
    assert main([*args, "--out", str(out), "--tracking-uri", tracking_uri(tmp_path), *sets]) == 0
    report = (out / "REPORT.md").read_text()
    tables = gfm_tables(report)
    (claims,) = [t for t in tables if t[0][0] == "claim"]
    assert claims[0][-3:] == ["DeLong p per seed", "verdict (Holm)", "unadjusted"]
    (row,) = claims[1:]
    assert row[0] == next(c.text for c in load_spec("qr").claims if c.id == "qr-above-hash-2")

    results: dict[tuple[str, int], TaskResult] = {}
    for path in Path("results/runs/accuracy/criteo-synth").glob("*.json"):
        r = TaskResult.read(path)
        results[(r.embedding, r.seed)] = r
    expected, below = [], 0
    for seed in SEEDS:
        qr, hashed = (read_arrays(results[(e, seed)]) for e in ("qr", "hash"))
        assert np.array_equal(qr["test_labels"], hashed["test_labels"])
        found = delong_test(qr["test_labels"], qr["test_logits"], hashed["test_logits"])
        assert found.auc_a == pytest.approx(results[("qr", seed)].metrics["test_auc"], abs=1e-12)
        expected.append(found.p_value)
        below += found.p_value < 0.05
    from suite.reproduce.report import p_value

    cell = ", ".join(p_value(p) for p in expected) + f" ({below}/5 below 0.05)"
    assert row[-3] == cell


def test_test_set_noise_comes_from_the_runs_predictions_over_all_seeds() -> None:
    from suite.reproduce.claims import auc_runs, noise_from_predictions

    assert auc_runs(claim("greater", "a.test_auc", "b.test_auc")) == ("a", "b")
    assert auc_runs(claim("greater", "a.test_logloss", "b.test_logloss")) is None
    assert auc_runs(claim("at_least", "a.test_auc", 0.7)) == ("a", "")
    assert auc_runs(claim("less", {"diff": ["a.test_auc", "b.test_auc"]}, "c.test_auc")) is None
    # a paired AUC difference against a number ("loses at most 0.001") is the pair's noise
    assert auc_runs(claim("at_most", {"diff": ["a.test_auc", "b.test_auc"]}, 0.001)) == ("a", "b")
    assert auc_runs(claim("at_most", {"diff": ["a.test_auc", "b.test_logloss"]}, 0.1)) is None

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 400).astype(np.uint8)
    other = labels.copy()
    other[0] ^= 1
    kept = {}
    for seed in (0, 1):
        kept[("a", seed)] = (labels, labels + rng.normal(size=400))
        kept[("b", seed)] = (labels, rng.normal(size=400))
        kept[("c", seed)] = (other, rng.normal(size=400))

    def predictions(run: str, seed: int) -> tuple[np.ndarray, np.ndarray] | None:
        return kept.get((run, seed))

    noise = noise_from_predictions(predictions, [0, 1])
    found = noise("a", "b", 0)
    assert found is not None and found.p_value < 1e-4 and found.rows == 400  # signal vs noise
    assert found.variance > 0 and found.shared >= 0
    assert noise("a", "b", 1).shared == found.shared  # one figure for the pair
    assert noise("a", "c", 0) is None  # the two runs were tested on different rows
    single = noise("a", "", 0)
    assert single is not None and math.isnan(single.p_value) and single.variance > 0
    alone = noise_from_predictions(predictions, [0, 7])  # seed 7 has no predictions
    assert alone("a", "b", 7) is None
    assert alone("a", "b", 0).variance == found.variance and not alone("a", "b", 0).covariances


def test_seeds_judged_in_different_sittings_share_the_variance_of_the_pairs_judged_together() -> (
    None
):
    """Four seeds judged two and two (their predictions never here at once): each pair's
    covariance is DeLong's from all four at once, and the shared variance is the mean of
    the two pairs judged together; with all pairs it is the all-at-once figure."""
    from suite.decisions import shared_test_variance
    from suite.reproduce.claims import merge_noise, pair_noise, shared_of
    from suite.stats import auc_covariance

    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, 600).astype(np.uint8)
    common = {"a": rng.normal(size=600), "b": rng.normal(size=600)}  # what each run learns
    kept = {
        (run, seed): (
            labels,
            labels * (1.0 if run == "a" else 0.6) + common[run] + rng.normal(size=600),
        )
        for run in "ab"
        for seed in range(4)
    }

    def predictions(run: str, seed: int) -> tuple[np.ndarray, np.ndarray] | None:
        return kept.get((run, seed))

    scores = np.vstack([kept[(run, seed)][1] for run in "ab" for seed in range(4)])
    per_seed, everything = shared_test_variance(auc_covariance(labels, scores), 4, paired=True)
    at_once = pair_noise(predictions, "a", "b", [0, 1, 2, 3])
    assert at_once[2].shared == pytest.approx(everything) and at_once[2].shared_pairs == 6
    assert everything > 0

    def sitting(seeds: list[int]) -> dict[int, object]:
        return pair_noise(lambda r, s: kept[(r, s)] if s in seeds else None, "a", "b", [0, 1, 2, 3])

    first, second = sitting([0, 1]), sitting([2, 3])
    assert set(first) == {0, 1} and first[0].shared_pairs == 1
    both = {s: merge_noise(first.get(s), second.get(s)) for s in range(4)}
    for seed in range(4):
        assert both[seed].variance == pytest.approx(per_seed[seed])
        assert both[seed].p_value == pytest.approx(at_once[seed].p_value)
    shared, pairs = shared_of(both, [0, 1, 2, 3])
    expected = (at_once[0].covariances[1] + at_once[2].covariances[3]) / 2
    assert pairs == 2 and shared == pytest.approx(max(0.0, expected))
    assert both[0].covariances[1] == pytest.approx(at_once[0].covariances[1])
    # judged again together later, every pair counts
    again = {s: merge_noise(both[s], at_once[s]) for s in range(4)}
    assert shared_of(again, [0, 1, 2, 3]) == (pytest.approx(everything), 6)
    # none judged together: bounded by the mean per-seed variance
    apart = {s: merge_noise(None, sitting([s])[s]) for s in range(4)}
    assert shared_of(apart, [0, 1, 2, 3]) == (pytest.approx(float(np.mean(per_seed))), 0)


def test_seeds_that_each_drew_their_own_test_set_share_no_test_variance() -> None:
    """Under a draw per seed each seed scores its own test set: each seed's DeLong variance
    and p are its own test set's alone, its covariance with every other seed is 0 (in
    every sitting), so the shared variance is 0 over all pairs; a mix of shared and own
    test sets, or two runs of one seed on different examples, gives no noise."""
    from suite.reproduce.claims import merge_noise, pair_noise, shared_of

    rng = np.random.default_rng(2)
    kept = {}
    for seed in range(3):
        labels = rng.integers(0, 2, 500).astype(np.uint8)  # this seed's own sample
        for run in "ab":
            kept[(run, seed)] = (
                labels,
                labels * (1.0 if run == "a" else 0.7) + rng.normal(size=500),
            )

    def predictions(run: str, seed: int) -> tuple[np.ndarray, np.ndarray] | None:
        return kept.get((run, seed))

    together = pair_noise(predictions, "a", "b", [0, 1, 2])
    assert together is not None and set(together) == {0, 1, 2}
    for seed in range(3):
        alone = pair_noise(
            lambda r, s, seed=seed: kept[(r, s)] if s == seed else None, "a", "b", [seed]
        )
        assert together[seed].variance == pytest.approx(alone[seed].variance)
        assert together[seed].p_value == pytest.approx(alone[seed].p_value)
        assert together[seed].covariances == {s: 0.0 for s in range(3) if s != seed}
        assert together[seed].shared == 0.0 and together[seed].shared_pairs == 3
    # seeds judged in different sittings still share nothing, over every pair
    first = pair_noise(lambda r, s: kept[(r, s)] if s < 2 else None, "a", "b", [0, 1, 2])
    second = pair_noise(lambda r, s: kept[(r, s)] if s == 2 else None, "a", "b", [0, 1, 2])
    merged = {s: merge_noise(first.get(s), second.get(s)) for s in range(3)}
    assert shared_of(merged, [0, 1, 2]) == (0.0, 3)

    own = kept[("a", 2)]
    kept[("a", 2)] = kept[("a", 0)]  # seed 2's runs on different examples
    assert pair_noise(predictions, "a", "b", [0, 1, 2]) is None
    kept[("a", 2)], kept[("b", 2)] = (kept[("a", 0)][0], own[1]), (kept[("a", 0)][0], own[1])
    assert pair_noise(predictions, "a", "b", [0, 1, 2]) is None  # seeds 0 and 2 share a set


def test_a_noise_file_of_all_seeds_judged_at_once_reads_as_it_was_judged(tmp_path: Path) -> None:
    """Noise files written before the covariances were kept carry each pair's shared
    variance in every seed's entry; read back, the lookup gives that figure over all pairs."""
    import json

    from suite.reproduce.claims import shared_of
    from suite.reproduce.store import NOISE_FILE, RUNS_DIR, read_noise, write_noise

    entries = [
        {
            "left": "x",
            "right": "y",
            "seed": s,
            "variance": 2e-7,
            "p_value": 0.01,
            "rows": 1000,
            "shared": 5e-8,
        }
        for s in range(3)
    ]
    path = tmp_path / RUNS_DIR / NOISE_FILE
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"version": 1, "pairs": entries}))
    noise = read_noise(tmp_path)
    found = {seed: entry for (_, _, seed), entry in noise.items()}
    assert shared_of(found, [0, 1, 2]) == (5e-8, 3)
    write_noise(tmp_path, noise)
    assert read_noise(tmp_path) == noise
    assert json.loads(path.read_text())["pairs"][0]["shared"] == 5e-8


# --- claims on timings -----------------------------------------------------------------


def _memsys_reproduction(speedups: list[float]):
    """The memsys claims on an int8 serving speed-up (a timing) and on memory cost (not),
    judged on given per-seed figures of the spec's real run configs."""
    from suite.environment import environment
    from suite.reproduce.judge import judge
    from suite.reproduce.outcome import Reproduction, SeededRun
    from suite.reproduce.plan import build_plan
    from suite.results import TaskResult

    claim_ids = ["int8-serves-more", "scm-cheaper-than-dram"]
    plan = build_plan("quick", ["memsys"], claim_ids)
    (spec,) = plan.specs
    planned = plan.runs
    env = environment("cpu")
    records = {}
    for key, entry in planned.items():
        record = SeededRun(entry.roles[0], entry.config, SEEDS)
        for seed in SEEDS:
            metrics = (
                {"int8_speedup_at_target": speedups[seed]}
                if entry.config.task.name == "serving"
                else {
                    "dram_10pct_scm_lru/memory_cost_usd": 1.0 + 0.01 * seed,
                    "dram_only/memory_cost_usd": 3.0,
                }
            )
            record.results[seed] = TaskResult(
                task=entry.config.task.name,
                model=entry.config.model.name,
                embedding=entry.config.embedding.name,
                dataset=entry.config.dataset.name,
                protocol=entry.config.dataset.protocol,
                seed=seed,
                config=entry.config.identity(),
                config_hash=key,
                data_fingerprint="0" * 16,
                metrics=metrics,
                higher_is_better={m: False for m in metrics},
                environment=env,
            )
        records[key] = record
    outcome = judge(plan, spec, records)
    return Reproduction(plan, [outcome], SEEDS)


def test_a_claim_on_a_timing_is_judged_under_timings_and_counted_apart() -> None:
    from datetime import UTC, datetime

    from suite.reproduce.report import TIMINGS_HEADING, render_report

    spec = load_spec("memsys")
    texts = {c.id: c.text for c in spec.claims}
    date = datetime(2026, 1, 1, tzinfo=UTC)
    fast = _memsys_reproduction([1.5, 1.6, 1.4, 1.5, 1.55])
    slow = _memsys_reproduction([0.5, 0.6, 0.4, 0.5, 0.55])
    verdicts = {c.claim.id: (c.verdict, c.timing) for c in fast.papers[0].claims}
    assert verdicts == {
        "scm-cheaper-than-dram": ("holds", False),
        "int8-serves-more": ("holds", True),
    }
    assert {c.claim.id: c.verdict for c in slow.papers[0].claims}["int8-serves-more"] == (
        "does not hold"
    )
    first = render_report(fast, [], "suite reproduce --paper memsys", date)
    second = render_report(slow, [], "suite reproduce --paper memsys", date)
    body, timings = first.split(TIMINGS_HEADING)
    assert texts["int8-serves-more"] not in body and texts["int8-serves-more"] in timings
    assert texts["scm-cheaper-than-dram"] in body and texts["scm-cheaper-than-dram"] not in timings
    assert "**0 empirical claims: 0 holds, 0 does not hold, 0 underpowered.** (Holm" in body
    assert "1 structural claims (exact by construction): 1 holds" in body
    assert "Not counted here: 1 claim(s) on timings, judged under Timings" in body
    assert "1 claims: 1 holds, 0 does not hold" in timings
    # the timing's verdict flipped, and the report outside Timings did not change
    assert first != second and comparable(first) == comparable(second)
    for rows in gfm_tables(first):
        assert len({len(r) for r in rows}) == 1, rows
    (timed,) = [
        r
        for t in gfm_tables(timings)
        for r in t
        if r[0] == texts["int8-serves-more"] + " (suite's target)"
    ]
    assert timed[1] == "memsys" and timed[-2:] == ["**holds**", "same"]
