"""What a report says its verdicts rest on (issue 68): which data each seed trained on, with
each seed's fingerprint under a draw per seed, and each tuned run's values, trials, best
validation AUC, top-3 spread and trial seed, beside the runs that train with them."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from suite.cli import main
from suite.reproduce.spec import TUNED_ENV
from suite.reproduce.tuned import read_tuned
from tests.conftest import tracking_uri
from tests.test_reproduce_tuning import TUNING, spec_data, tune, write_spec


def reproduce(spec: Path, profile: str, out: Path, tmp_path: Path) -> str:
    args = ["reproduce", "--profile", profile, "--paper", str(spec), "--out", str(out)]
    args += ["--quiet", "--workers", "1", "--tracking-uri", tracking_uri(tmp_path)]
    assert main(args) == 0
    return (out / "REPORT.md").read_text()


def stored_fingerprints(out: Path) -> dict[int, set[str]]:
    seen: dict[int, set[str]] = {}
    for path in (out / "runs").glob("*/seed-*.json"):
        result = json.loads(path.read_text())
        seen.setdefault(result["seed"], set()).add(result["data_fingerprint"])
    return seen


def test_a_report_names_each_seeds_draw_and_the_tuned_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TUNED_ENV, str(tmp_path / "tuned"))
    data = spec_data(TUNING)
    standard = data["profiles"]["standard"]
    standard["base"] = copy.deepcopy(standard["base"])
    standard["base"]["dataset"]["options"]["draw"] = "per_seed"
    shared = {**data["claims"][0], "id": "c2", "left": "qr_2.test_auc"}
    data["claims"].append(shared)  # qr_2 in the report, trained with qr_4's values
    spec = write_spec(tmp_path / "specs", data)
    assert tune(spec, tmp_path, "studies") == 0

    out = tmp_path / "standard"
    text = reproduce(spec, "standard", out, tmp_path)
    prints = stored_fingerprints(out)
    assert sorted(prints) == [3, 4] and all(len(p) == 1 for p in prints.values())
    (three,), (four,) = prints[3], prints[4]
    assert three != four  # each seed its own draw, every method of a seed on it
    assert "each seed its own draw of criteo-synth" in text
    # each seed scored its own test set: its DeLong noise its own, none shared between seeds
    assert "the seeds share no test-set variance" in text
    assert "test-set noise left out" not in text and "shared variance" not in text
    noise = json.loads((out / "runs" / "noise.json").read_text())["pairs"]
    assert noise and all(set(e["covariances"].values()) == {0.0} for e in noise)
    assert f"3 `{three[:12]}`" in text and f"4 `{four[:12]}`" in text
    # the regime table: the seeds' draws as one row, every draw's figures kept for regeneration
    (draws,) = [line for line in text.splitlines() if line.startswith("| criteo-synth")]
    assert "2 draws (one per seed)" in draws and " to " in draws  # the draws' tails differ
    assert {three, four} <= set(json.loads((out / "runs" / "regime.json").read_text()))
    assert "a draw per seed: each figure from its lowest to its highest draw" in text

    tuned = read_tuned("tiny", "standard")
    qr_row = next(
        line for line in text.splitlines() if line.startswith("| qr_4 ") and "sparse_lr=" in line
    )
    assert f"sparse_lr={tuned.runs['qr_4'].values['train.sparse_lr']:.3g}" in qr_row
    assert f"{tuned.runs['qr_4'].best_val_auc:.4f}" in qr_row
    assert "qr_4, qr_2" in qr_row  # qr_2 shares qr_4's values
    assert "3 (an evaluation seed)" in qr_row  # no run_seed: the profile's first seed
    assert "Tuned values (`tiny.standard.yaml`" in text

    quick = reproduce(spec, "quick", tmp_path / "quick", tmp_path)
    (one,) = {p for ps in stored_fingerprints(tmp_path / "quick").values() for p in ps}
    assert f"one draw of criteo-synth for every seed (fingerprint `{one[:12]}`)" in quick
    assert "Tuned values" not in quick  # the quick profile tunes nothing
    (one_draw,) = [line for line in quick.splitlines() if line.startswith("| criteo-synth")]
    assert "draws (one per seed)" not in one_draw and " to " not in one_draw
