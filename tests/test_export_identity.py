"""Export and ``load_results`` never pool runs of different configs or data (issue 34).

Real runs of two configs of one embedding (two sparse learning rates) on two sizes of a
tiny criteo-synth, two seeds each: eight result files, four experiments.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
import torch

from suite.api import load_results
from suite.cli import main
from tests.conftest import tiny_config
from tests.test_api import readme_example

LRS = (None, 0.1)  # None: the preset's sparse_lr
ROWS = (4000, 2000)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The results directory of the eight runs (2 configs x 2 data sizes x 2 seeds)."""
    from suite.runs.single import execute

    root = tmp_path_factory.mktemp("identity")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RECSUITE_CACHE", str(root / "cache"))
        patch.delenv("MLFLOW_TRACKING_URI", raising=False)
        torch.set_num_threads(1)
        for lr in LRS:
            for rows in ROWS:
                extra = [f"train.sparse_lr={lr}"] if lr is not None else []
                base = tiny_config(
                    overrides=[
                        "train.max_steps=3",
                        f"dataset.options.train_rows={rows}",
                        f"tracking.results_dir={root / 'runs'}",
                        *extra,
                    ]
                )
                for seed in (0, 1):
                    execute(base.with_overrides({"seed": seed}))
        yield root / "runs"


def test_load_results_has_config_columns(results: Path) -> None:
    frame = load_results(results)
    assert len(frame) == 8
    assert {"config_hash", "group", "data_fingerprint"} <= set(frame.columns)
    rows = frame["config.dataset.options.train_rows"]
    assert sorted(rows.unique()) == [2000, 4000]
    lrs = frame["config.train.sparse_lr"]
    assert lrs.nunique() == 2 and 0.1 in set(lrs)
    assert frame["config.embedding.name"].eq("full").all()
    assert frame["config.seed"].tolist() == frame["seed"].tolist()
    assert frame["config_hash"].nunique() == 8 and frame["group"].nunique() == 4
    assert frame["data_fingerprint"].nunique() == 2
    for _, same in frame.groupby("data_fingerprint"):
        assert same["config.dataset.options.train_rows"].nunique() == 1
    picked = load_results(results, **{"config.train.sparse_lr": 0.1})
    assert len(picked) == 4 and picked["config.train.sparse_lr"].eq(0.1).all()


def _printed_rows(text: str) -> list[dict[str, str]]:
    """The table ``suite export`` prints, as one dict per row (columns split on 2+ spaces
    would break on ``±``; the hash columns are single tokens, so split on whitespace and
    read those columns by position in the header)."""
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("wrote")]
    header = lines[0].split()
    rows = []
    for line in lines[1:]:
        tokens = line.split()
        rows.append(dict(zip(header[:8], tokens[:8], strict=True)))
    return rows


def test_export_rows_never_mix_configs_or_data(
    results: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    frame = load_results(results)
    out = tmp_path / "tables"
    argv = ["export", "runs", "--results", str(results), "--out", str(out)]
    capsys.readouterr()
    assert main([*argv, "--where", "task=accuracy", "--where", "dataset=criteo-synth"]) == 0
    printed = _printed_rows(capsys.readouterr().out)
    assert len(printed) == 4
    for row in printed:
        assert row["seeds"] == row["runs"] == "2"
        pooled = frame[
            frame["group"].str.startswith(row["group"])
            & frame["data_fingerprint"].str.startswith(row["data_fingerprint"])
        ]
        assert len(pooled) == 2 and pooled["data_fingerprint"].nunique() == 1
        assert pooled["config_hash"].nunique() == 2 and pooled["group"].nunique() == 1
    numeric = pd.read_csv(out / "runs.csv")
    assert len(numeric) == 4 and (numeric["runs"] == 2).all()
    assert sorted(numeric["group"]) == sorted(frame["group"].unique())
    for _, row in numeric.iterrows():
        seeds = frame[(frame["group"] == row["group"])]
        assert row["test_auc_mean"] == pytest.approx(seeds["test_auc"].mean())


def test_export_refuses_a_coarser_grouping_unless_pool(
    results: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["export", "runs", "--results", str(results), "--out", str(tmp_path)]
    capsys.readouterr()
    assert main([*argv, "--by", "embedding"]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert "train.sparse_lr" in error and "dataset.options.train_rows" in error
    assert "data_fingerprint" in error and "--pool" in error
    assert main([*argv, "--by", "embedding", "--pool"]) == 0
    pooled = pd.read_csv(tmp_path / "runs.csv")
    assert pooled["runs"].tolist() == [8] and pooled["seeds"].tolist() == [2]
    by_data = [*argv, "--by", "embedding,data_fingerprint", "--where", "config.train.sparse_lr=0.1"]
    assert main(by_data) == 0  # one config: grouping by data alone pools nothing
    assert pd.read_csv(tmp_path / "runs.csv")["runs"].tolist() == [2, 2]


def test_readme_grouping_gives_one_row_per_config(results: Path) -> None:
    """The README's ``runs.groupby(...)`` line, as written, on runs of four experiments."""
    lines = readme_example().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("runs = load_results"))
    end = next(i for i, line in enumerate(lines) if line.startswith("print(runs.groupby"))
    namespace = {"runs": load_results(results)}
    exec("\n".join(lines[start + 1 : end]), namespace)
    expression = lines[end].removeprefix("print(").removesuffix(")")
    table = eval(expression, namespace)
    assert len(table) == 4 and (table["count"] == 2).all()
