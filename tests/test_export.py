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
    assert r"\begin{tabular}" in tex and r"0.710 $\pm$ 0.010" in tex and "1.35 MiB" in tex
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
