"""criteo-synth's Kaggle-shaped regime and the regime table of the reproduction reports."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from suite.config import build_config
from suite.data.access import AccessStream
from suite.data.source import get_prepared
from suite.data.teacher import draw_like_a_sample, kaggle_cardinalities
from suite.datasets.criteo import (
    CRITEO_CARDINALITIES,
    CRITEO_KAGGLE_ZIPF,
    KAGGLE_EXAMPLES_PER_ROW,
    KAGGLE_ROWS,
)
from suite.reproduce.regime_stats import COLUMNS, regime_figures, regime_rows
from suite.runs.single import execute
from suite.tasks.characterize import CharacterizeOptions, characterize
from tests.conftest import SHARED_DATA, tiny_config

# the real sample's dlrm train split (results/characterize/REPORT.md, `characterize` task)
SAMPLE_ROWS = 6858
SAMPLE_ZIPF = 0.955
SAMPLE_HOT_1PCT = 0.615
KAGGLE = ["dataset.options.regime=kaggle", f"dataset.options.train_rows={SAMPLE_ROWS}"]


def test_kaggle_regime_characterized_has_kaggles_examples_per_row() -> None:
    config = tiny_config(task="characterize", overrides=[*KAGGLE, "task.options.plot=false"])
    result = execute(config)
    details = result.details
    assert details["samples"] == SAMPLE_ROWS  # every train row characterized
    ratio = details["samples"] / details["rows"]
    assert ratio == pytest.approx(1.36, rel=0.10)
    # the regime's own skew at the sample's rows: denser tables than the sample's own
    # vocabulary (1.36 examples per row against 0.21), so more skewed than it (see below)
    assert result.metrics["zipf_exponent"] > SAMPLE_ZIPF
    data = get_prepared(config.dataset, progress=False)
    assert 0.5 < data.manifest["teacher_test_auc"] < 1.0
    assert data.manifest["options"]["regime"] == "kaggle"


def test_kaggle_tail_drawn_like_the_real_sample_reproduces_it() -> None:
    # the fitted tails, drawn over Kaggle's real vocabularies for the sample's rows and
    # re-counted as prepare counts a raw sample: the characterize task's figures land
    # within 20% of the real sample's (same rows, same protocol)
    cards, sparse = draw_like_a_sample(
        CRITEO_CARDINALITIES, list(CRITEO_KAGGLE_ZIPF), SAMPLE_ROWS, seed=0
    )
    stream = AccessStream.from_sparse(sparse, cards)
    options = CharacterizeOptions(batch_sizes=[128], cache_fractions=[0.01], plot=False)
    figures = characterize(stream, options, row_bytes=64)
    assert figures["zipf_exponent"] == pytest.approx(SAMPLE_ZIPF, rel=0.20)
    assert figures["hot_row_shares"]["0.01"] == pytest.approx(SAMPLE_HOT_1PCT, rel=0.20)
    assert sum(cards) == pytest.approx(33_236, rel=0.05)  # the sample's embedding rows


@pytest.mark.parametrize("train_rows", [1_000, 6_858, 400_000, 10_000_000])
def test_kaggle_tables_keep_the_ratio_at_any_size(train_rows: int) -> None:
    cards = kaggle_cardinalities(CRITEO_CARDINALITIES, train_rows, KAGGLE_EXAMPLES_PER_ROW)
    assert train_rows / sum(cards) == pytest.approx(KAGGLE_EXAMPLES_PER_ROW, rel=0.01)
    assert all(2 <= c <= r or c == r for c, r in zip(cards, CRITEO_CARDINALITIES, strict=True))


def test_kaggle_tables_at_kaggles_rows_are_kaggles() -> None:
    cards = kaggle_cardinalities(CRITEO_CARDINALITIES, KAGGLE_ROWS, KAGGLE_EXAMPLES_PER_ROW)
    assert cards == CRITEO_CARDINALITIES


def test_default_regime_stays_out_of_identity_and_cache_key() -> None:
    default = build_config(components={"dataset": "criteo-synth"})
    assert "regime" not in default.identity()["dataset"]["options"]
    assert "regime" not in default.dataset.options  # the prepared cache key's input
    assert default.dataset.typed_options().regime == "default"
    explicit = build_config(
        components={"dataset": "criteo-synth"}, overrides=["dataset.options.regime=default"]
    )
    assert explicit.config_hash() == default.config_hash()
    kaggle = build_config(
        components={"dataset": "criteo-synth"}, overrides=["dataset.options.regime=kaggle"]
    )
    assert kaggle.identity()["dataset"]["options"]["regime"] == "kaggle"
    assert kaggle.config_hash() != default.config_hash()


@pytest.mark.parametrize(
    ("dataset", "value", "message"),
    [
        ("criteo-synth", "kagle", "regime"),
        ("avazu-synth", "kaggle", "unknown key"),  # the tails are fit to Criteo only
    ],
)
def test_bad_regime_fails_naming_the_field(dataset: str, value: str, message: str) -> None:
    with pytest.raises(Exception, match=message) as caught:
        build_config(components={"dataset": dataset}, overrides=[f"dataset.options.regime={value}"])
    assert "regime" in str(caught.value)


def test_regime_table_of_a_tiny_dataset_equals_the_characterize_task() -> None:
    config = tiny_config(task="characterize", overrides=["task.options.plot=false"])
    data = get_prepared(config.dataset, progress=False)
    cards = data.schema.cardinalities
    rows = regime_rows(data)
    assert [list(row) for row in rows] == [list(COLUMNS)] * 4
    own = rows[0]
    assert own["data"] == "criteo-synth"
    assert own["examples"] == "4,000"
    assert own["embedding rows"] == f"{sum(cards):,}"
    assert own["examples per embedding row"] == f"{4000 / sum(cards):.2f}"
    figures = regime_figures(data)
    assert figures["table_bytes"] == sum(cards) * 16 * 4
    metrics = execute(config).metrics
    assert figures["zipf_exponent"] == metrics["zipf_exponent"]
    assert figures["hot_0.01_lookup_share"] == metrics["hot_0.01_lookup_share"]
    kaggle = rows[1]
    assert kaggle["embedding rows"] == "33,762,577"
    assert kaggle["examples per embedding row"] == "1.36"
    assert rows[2]["embedding rows"] == "-"  # Terabyte: no cardinalities in the suite


@pytest.mark.slow
@pytest.mark.real_data
def test_refit_from_the_real_sample_gives_the_recorded_tails() -> None:
    raw = SHARED_DATA / "criteo" / "train.txt"
    if not raw.is_file():
        pytest.skip(f"real sample {raw} is absent (../shared/data is only on development machines)")
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "fit_kaggle_tail.py"
    spec = importlib.util.spec_from_file_location("fit_kaggle_tail", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sparse, _ = module.sample_train_split(raw)
    assert sparse.shape[0] == SAMPLE_ROWS
    np.testing.assert_allclose(module.fit(sparse), CRITEO_KAGGLE_ZIPF, atol=0.01)
