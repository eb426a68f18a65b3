"""The Python API: the README's notebook example runs as written; compare's verdicts."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from suite.api import compare, load_results, resolve, runs_of
from suite.cli import main
from suite.errors import ConfigError
from suite.results import TaskResult
from tests.conftest import accuracy_result

ROOT = Path(__file__).resolve().parent.parent


def readme_example() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- api-example[^>]*-->\n```python\n(.*?)```", text, re.DOTALL)
    assert found, "README.md lost its api-example block"
    return found.group(1)


def test_readme_example_runs_end_to_end(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    namespace: dict = {}
    exec(compile(readme_example(), "README.md:api-example", "exec"), namespace)
    full, qr, runs, table = (namespace[k] for k in ("full", "qr", "runs", "table"))
    assert full.seeds == qr.seeds == [0, 1, 2]
    assert len(runs) == 6 and set(runs["embedding"]) == {"full", "qr"}
    assert runs["mlflow_run_id"].notna().all()  # recorded in the real MLflow store in tmp
    assert (isolated / "mlruns" / "mlflow.db").is_file()
    assert list(table["metric"]) == ["test_auc", "test_logloss"]
    assert all(
        v in ("A better", "B better", "same within margin") or v.startswith("underpowered (needs")
        for v in table["verdict"]
    )
    auc = table.set_index("metric").loc["test_auc"]
    assert auc["low"] <= auc["difference"] <= auc["high"] and auc["n"] == 3
    expected = full.mean["test_auc"] - qr.mean["test_auc"]
    assert auc["difference"] == pytest.approx(expected)

    # the same comparison from the command line, by multi-seed MLflow parent run ids
    capsys.readouterr()
    assert main(["compare", full.mlflow_run_id, qr.mlflow_run_id, "--json"]) == 0
    rows = {r["metric"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["test_auc"]["difference"] == pytest.approx(expected)
    # and by group hash (the config without its seed)
    group = runs[runs["embedding"] == "qr"]["group"].iloc[0]
    assert {r.seed for r in runs_of(group)} == {0, 1, 2}


def _result(seed: int, auc: float, fingerprint: str = "f") -> TaskResult:
    return accuracy_result(seed, auc, data_fingerprint=fingerprint)


def test_compare_verdicts_follow_the_paired_interval() -> None:
    a = [_result(s, 0.80 + d) for s, d in enumerate([0.001, 0.002, 0.0015])]
    b = [_result(s, 0.70 + d) for s, d in enumerate([0.001, 0.0025, 0.001])]
    table = compare(a, b).set_index("metric")
    assert table.loc["test_auc", "verdict"] == "A better"
    assert table.loc["test_logloss", "verdict"] == "A better"  # lower is better
    assert compare(b, a).set_index("metric").loc["test_auc", "verdict"] == "B better"
    near = [_result(s, 0.80 + d) for s, d in enumerate([0.0002, -0.0001, 0.0001])]
    same = compare(a[:3], near, margin=0.01).set_index("metric")
    assert same.loc["test_auc", "verdict"] == "same within margin"
    noisy = [_result(s, 0.80 + d) for s, d in enumerate([0.003, -0.002, 0.0])]
    undecided = compare(a, noisy).set_index("metric").loc["test_auc", "verdict"]
    assert undecided.startswith("underpowered (needs n≈")


def test_compare_adds_the_test_sets_noise_from_kept_predictions(tmp_path: Path) -> None:
    """Two configs' kept test predictions: the test_auc interval carries the test set's
    shared DeLong variance on top of the seeds' spread, as the reproductions' rule does."""
    from suite.decisions import decide, noise_of
    from suite.reproduce.claims import pair_noise
    from suite.results import read_arrays
    from suite.runs.single import execute
    from tests.conftest import tiny_config

    base = tiny_config(
        overrides=["train.max_steps=20", f"tracking.results_dir={tmp_path / 'results'}"]
    )
    other = base.with_overrides({"train.dense_lr": 0.01})
    runs = {"a": [execute(base.with_overrides({"seed": s})) for s in range(3)]}
    runs["b"] = [execute(other.with_overrides({"seed": s})) for s in range(3)]
    row = compare(runs["a"], runs["b"], metrics=["test_auc"]).set_index("metric").loc["test_auc"]

    def predictions(side: str, seed: int):
        arrays = read_arrays(runs[side][seed])
        return arrays["test_labels"], arrays["test_logits"]

    shared = pair_noise(predictions, "a", "b", [0, 1, 2])[0]
    assert shared.shared > 0 and shared.rows == len(predictions("a", 0)[0])
    diffs = [
        x.metrics["test_auc"] - y.metrics["test_auc"] for x, y in zip(*runs.values(), strict=True)
    ]
    mean = sum(diffs) / 3
    expected = decide(mean, noise_of(diffs, shared.shared, shared.rows), "greater", 0.0)
    seeds_only = decide(mean, noise_of(diffs), "greater", 0.0)
    assert (row["low"], row["high"]) == pytest.approx((expected.low, expected.high))
    assert expected.se > seeds_only.se


def test_compare_never_gives_a_verdict_from_one_seed_without_its_predictions() -> None:
    table = compare([_result(0, 0.8)], [_result(0, 0.7)])
    assert set(table["verdict"]) == {"not measurable"}
    # each row says in one line what it needs
    assert all("needs two or more paired seeds" in note for note in table["note"])
    assert "tracking.keep_arrays" in table.set_index("metric").loc["test_auc", "note"]


def _one_seed_run(tmp_path: Path, name: str, labels: Any, logits: Any) -> TaskResult:
    """A one-seed accuracy result whose kept test predictions are ``labels``/``logits``,
    its test AUC and log loss computed from them."""
    import numpy as np

    from suite.metrics import roc_auc
    from suite.results import ARRAYS_DETAIL, write_arrays

    z = np.asarray(logits, dtype=np.float32)
    y = np.asarray(labels, dtype=np.uint8)
    loss = float(np.mean(np.logaddexp(0.0, z.astype(np.float64)) - y * z))
    arrays = write_arrays(tmp_path / f"{name}.json", {"test_logits": z, "test_labels": y})
    metrics = {"test_auc": roc_auc(y, z), "test_logloss": loss, "embedding_bytes": 1e6}
    higher = {"test_auc": True, "test_logloss": False, "embedding_bytes": False}
    return accuracy_result(
        0, metrics=metrics, higher_is_better=higher, details={ARRAYS_DETAIL: arrays}
    )


def test_compare_with_one_seed_a_side_uses_delong_on_the_kept_logits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import numpy as np

    from suite.stats import delong_test

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 4000)
    signal = y * 1.0 + rng.normal(0, 1, 4000)
    good = _one_seed_run(tmp_path, "good", y, signal + rng.normal(0, 0.3, 4000))
    poor = _one_seed_run(tmp_path, "poor", y, signal + rng.normal(0, 2.0, 4000))
    table = compare([good], [poor]).set_index("metric")
    auc = table.loc["test_auc"]
    assert auc["verdict"] == "A better on this test set" and auc["n"] == 1
    assert "DeLong's paired test" in auc["note"]
    expected = delong_test(y, read_logits(good), read_logits(poor))
    assert auc["difference"] == pytest.approx(expected.difference.mean)
    assert auc["p_value"] == pytest.approx(expected.p_value / 2, rel=1e-6)  # one-sided
    assert auc["low"] < auc["difference"] < auc["high"]
    assert table.loc["test_logloss", "verdict"] == "A better on this test set"
    assert table.loc["embedding_bytes", "verdict"] == "not measurable"
    # the same twins: nothing to tell apart
    same = compare([good], [good]).set_index("metric").loc["test_auc", "verdict"]
    assert same.startswith(("undecided on this test set", "not measurable"))

    # the command says it in one line per kind of row, at the one stated level
    good.write(tmp_path / "a" / "good.json")
    poor.write(tmp_path / "b" / "poor.json")
    assert (
        main(["compare", str(tmp_path / "a" / "good.json"), str(tmp_path / "b" / "poor.json")]) == 0
    )
    out = capsys.readouterr().out
    assert "90% CI" in out and "95%" not in out
    assert "test_auc: one seed a side: DeLong's paired test" in out
    assert "embedding_bytes: one seed a side: needs two or more paired seeds" in out


def read_logits(result: TaskResult) -> Any:
    from suite.results import read_arrays

    return read_arrays(result)["test_logits"]


def test_every_interval_of_a_comparison_is_stated_at_the_one_level() -> None:
    from suite.commands import compare as command
    from suite.decisions import ALPHA, INTERVAL_LEVEL

    assert INTERVAL_LEVEL == pytest.approx(1 - 2 * ALPHA) == pytest.approx(0.9)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "90% interval" in readme
    for text in (
        Path(command.__file__).read_text(),
        Path(compare.__code__.co_filename).read_text(),
    ):
        assert "95% CI" not in text and "95% t interval" not in text and "95% paired" not in text


def test_compare_refuses_unpaired_or_different_data() -> None:
    with pytest.raises(ConfigError, match="no seed in common"):
        compare([_result(0, 0.8)], [_result(1, 0.7)])
    with pytest.raises(ConfigError, match="different data"):
        compare([_result(0, 0.8), _result(1, 0.8)], [_result(0, 0.7, "g"), _result(1, 0.7, "g")])


def test_resolve_takes_presets_dicts_and_overrides() -> None:
    config = resolve("wukong-s", {"embedding.name": "qr", "embedding.options.collisions": 8})
    assert config.model.name == "wukong" and config.embedding.name == "qr"
    assert config.embedding.options["collisions"] == 8
    assert resolve({"seed": 3}).seed == 3
    with pytest.raises(ConfigError, match="Did you mean 'dense_lr'"):
        resolve(None, {"train.dense_lrr": 0.1})


def test_load_results_filters_and_names_bad_columns(isolated: Path) -> None:
    out = isolated / "results" / "runs" / "accuracy" / "criteo-synth"
    for seed in (0, 1):
        _result(seed, 0.8).write(out / f"r{seed}.json")
    frame = load_results(seed=[1])
    assert list(frame["seed"]) == [1] and frame["test_auc"].iloc[0] == 0.8
    with pytest.raises(ConfigError, match="no column 'colour'"):
        load_results(colour="red")


def test_import_suite_stays_light() -> None:
    code = (
        "import sys, suite; print([m for m in ('torch', 'pandas', 'mlflow') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_compare_command_by_group_hash_prints_the_table(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from suite.api import group_hash

    out = isolated / "runs"
    for seed, d in enumerate([0.001, 0.002, 0.0015]):
        a, b = _result(seed, 0.80 + d), _result(seed, 0.70 + d)
        a.config["embedding"], b.config["embedding"] = "full", "qr"
        a.write(out / f"a{seed}.json")
        b.write(out / f"b{seed}.json")
    ga = group_hash(TaskResult.read(out / "a0.json"))
    gb = group_hash(TaskResult.read(out / "b0.json"))
    assert main(["compare", ga, gb, "--results", str(out), "--metric", "test_auc"]) == 0
    text = capsys.readouterr().out
    assert "paired seeds: 3" in text and "A better" in text and "test_auc" in text
    assert main(["compare", "nope", gb, "--results", str(out)]) == 2
    assert "neither a result file nor a run id" in capsys.readouterr().err
