"""``suite export``: runs and the leaderboard as CSV and LaTeX tables."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from suite.cli import main
from suite.results import TaskResult

ROOT = Path(__file__).resolve().parent.parent


def write_run(out: Path, embedding: str, seed: int, auc: float, size: float) -> None:
    TaskResult(
        task="accuracy",
        model="dlrm",
        embedding=embedding,
        dataset="criteo-synth",
        protocol="default",
        seed=seed,
        config={"embedding": embedding, "seed": seed},
        config_hash=f"{embedding}{seed}",
        data_fingerprint="f",
        metrics={"test_auc": auc, "embedding_bytes": size},
        higher_is_better={"test_auc": True, "embedding_bytes": False},
    ).write(out / f"{embedding}-{seed}.json")


def test_runs_export_groups_seeds_into_mean_and_std(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    for seed, auc in enumerate([0.70, 0.72, 0.71]):
        write_run(runs, "full", seed, auc, 1_417_430.0)
        write_run(runs, "qr", seed, auc - 0.01, 354_357.5)
    out = tmp_path / "tables"
    argv = ["export", "runs", "--results", str(runs), "--out", str(out), "--where", "seed=0"]
    assert main([*argv[:-2]]) == 0
    numeric = pd.read_csv(out / "runs.csv")
    full = numeric.set_index("embedding").loc["full"]
    assert full["seeds"] == 3
    assert full["test_auc_mean"] == pytest.approx(0.71)
    assert full["test_auc_std"] == pytest.approx(0.01)  # sample std, ddof=1
    tex = (out / "runs.tex").read_text()
    # the page's table: mean ± the 90% t half-width (2.92 * 0.01 / sqrt 3), units in the header
    assert r"\begin{tabular}" in tex and r"0.710 $\pm$ 0.017" in tex
    assert "Embedding size (MiB)" in tex and "1.352" in tex and "MiB \\\\" not in tex
    assert "1.41743e+06" not in capsys.readouterr().out
    assert main(argv) == 0  # a filter keeps one seed: no spread is shown
    assert pd.read_csv(out / "runs.csv")["seeds"].tolist() == [1, 1]


def test_leaderboard_export_reads_the_submissions(tmp_path: Path) -> None:
    out = tmp_path / "tables"
    assert (
        main(
            [
                "export",
                "leaderboard",
                "--submissions",
                str(ROOT / "leaderboard" / "submissions"),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    numeric = pd.read_csv(out / "leaderboard.csv")
    assert len(numeric) == len(list((ROOT / "leaderboard" / "submissions").glob("*.json")))
    assert {"test_auc_mean", "test_auc_std"} <= set(numeric.columns)
    assert r"\caption{Leaderboard" in (out / "leaderboard.tex").read_text()


def test_study_export_needs_a_study(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "study", str(tmp_path / "nothing")]) == 2
    assert "no trials table" in capsys.readouterr().err


def test_runs_export_takes_several_metrics_and_writes_a_table_for_a_column(
    tmp_path: Path,
) -> None:
    runs = tmp_path / "runs"
    for seed, auc in enumerate([0.70, 0.72, 0.71]):
        for embedding, shift in (("full", 0.0), ("qr", -0.01), ("hash", -0.02)):
            TaskResult(
                task="accuracy",
                model="dlrm",
                embedding=embedding,
                dataset="criteo-synth",
                protocol="default",
                seed=seed,
                config={"embedding": embedding, "seed": seed},
                config_hash=f"{embedding}{seed}",
                data_fingerprint="f",
                metrics={
                    "test_auc": auc + shift,
                    "test_logloss": 0.5 - shift,
                    "val_auc": auc,
                    "val_logloss": 0.5,
                    "embedding_bytes": 1_417_430.0 * (1 + shift),
                    "train_samples_per_s": 1000.0 + seed,
                },
                higher_is_better={"test_auc": True, "test_logloss": False},
            ).write(runs / f"{embedding}-{seed}.json")
    out = tmp_path / "tables"
    base = ["export", "runs", "--results", str(runs), "--out", str(out)]
    assert main([*base, "--metric", "test_auc", "--metric", "test_logloss"]) == 0
    tex = (out / "runs.tex").read_text()
    header = next(line for line in tex.splitlines() if line.startswith("Embedding &"))
    assert header == r"Embedding & Test AUC & Test log loss \\"
    assert r"\toprule" in tex and r"\midrule" in tex and r"\bottomrule" in tex
    assert r"\begin{tabular}{lrr}" in tex and r"\small" in tex
    assert r"90\% Student-t interval over 3 seeds" in tex and "std" not in tex
    rows = [line for line in tex.splitlines() if line.startswith(("full", "qr", "hash"))]
    assert len(rows) == 3 and all(r"$\pm$" in row for row in rows)
    # a comma list is the same; the CSV keeps the numbers
    assert main([*base, "--metric", "test_auc,test_logloss"]) == 0
    assert (out / "runs.tex").read_text() == tex
    assert {"test_auc_mean", "test_logloss_std"} <= set(pd.read_csv(out / "runs.csv").columns)
    # by default: few columns (AUC, log loss, size), not one per identity field and metric
    assert main(base) == 0
    default = (out / "runs.tex").read_text()
    header = next(line for line in default.splitlines() if line.startswith("Embedding &"))
    assert header == r"Embedding & Test AUC & Test log loss & Embedding size (MiB) \\"
    assert "group" not in default and "fingerprint" not in default and "Val" not in default


def test_paper_labels() -> None:
    from suite.export import paper_label

    assert paper_label("test_auc") == "Test AUC"
    assert paper_label("test_logloss") == "Test log loss"
    assert paper_label("embedding_bytes", "MiB") == "Embedding size (MiB)"
    assert paper_label("val_auc") == "Val. AUC"


def test_a_rate_column_states_its_unit_in_the_header() -> None:
    import math

    from suite.export import paper_table

    numeric = pd.DataFrame(
        {
            "model": ["dlrm", "dlrm"],
            "embedding": ["full", "qr"],
            "seeds": [3, 3],
            "train_samples_per_s_mean": [1000.0, 1200.0],
            "train_samples_per_s_std": [10.0, math.nan],
        }
    )
    table = paper_table(numeric, ["train_samples_per_s"])
    assert list(table.columns) == ["Embedding", "Training throughput (samples/s)"]
    assert table.iloc[1, 1] == "1200"
