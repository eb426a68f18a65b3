"""``suite reproduce --plan`` (issue 70, item 1): each job's memory against its device's,
its time from the stored runs' rates, and the device-hours, with nothing trained and no
data prepared; a job that cannot fit its device stops a real run before any training."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _suite(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    code = "import sys; from suite.cli import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_quick_plan_prints_memory_time_and_device_hours_and_trains_nothing(
    tmp_path: Path,
) -> None:
    done = _suite(["reproduce", "--profile", "quick", "--plan", "--workers", "2"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("plan: profile quick, ") and "2 workers" in lines[0]
    assert any(line.startswith("device cpu: memory ") for line in lines)
    header = next(line for line in lines if line.startswith("run "))
    for column in ("memory", "embedding", "activations", "of device", "time/job"):
        assert column in header
    assert any(line.startswith("qr/qr_2 ") for line in lines)
    assert any(line.startswith("device-hours: ") for line in lines)
    # outside the repository there are no stored runs: the plan says how to measure a rate
    assert "no rate measured for this device: run `suite reproduce" in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "nothing written, no store made"


def test_the_standard_plan_times_jobs_from_the_committed_runs(tmp_path: Path) -> None:
    done = _suite(["reproduce", "--profile", "standard", "--plan", "--workers", "2"], REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    total = next(line for line in done.stdout.splitlines() if line.startswith("device-hours: "))
    hours = float(total.split()[1].rstrip(","))
    assert 1.0 < hours < 100.0, total  # 150 minutes of training a seed set, ten seeds
    assert "wall time on 2 workers" in total


@pytest.mark.parametrize("command", [["--plan"], []])
def test_a_job_that_cannot_fit_its_device_stops_before_training(
    tmp_path: Path, command: list[str]
) -> None:
    args = ["reproduce", "--profile", "quick", "--claim", "qr-above-hash-2", "--quiet"]
    args += ["--out", str(tmp_path / "out"), "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"]
    done = _suite([*args, *command], tmp_path, RECSUITE_DEVICE_MEMORY="1MiB")
    if command:  # the plan shows it and says so
        assert done.returncode == 0, done.stderr[-2000:]
        assert "DOES NOT FIT" in done.stdout
        return
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: device: job qr/hash_") and "but the cpu has 1 MiB" in line
    assert line.endswith("nothing was trained")
    assert not (tmp_path / "out").exists() and not (tmp_path / "m.db").exists()


def test_workers_that_share_the_cpu_memory_must_fit_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the CPU the workers share one memory: two workers whose largest jobs fit alone
    but not together stop before training, saying how many workers fit; one worker runs."""
    from suite.reproduce.costs import check_fit, max_concurrent, plan_costs, shape_cardinalities
    from suite.reproduce.plan import build_plan

    plan = build_plan("quick", None, ["qr-above-hash-2"], {}, shape_cardinalities)
    sizes = sorted((r.memory.total for r in plan_costs(plan, 2, rates=False).runs), reverse=True)
    between = f"{sizes[0] + sizes[0] // 2}"  # one largest job fits, two of them do not
    args = ["reproduce", "--profile", "quick", "--claim", "qr-above-hash-2", "--quiet"]
    args += ["--out", str(tmp_path / "out"), "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"]
    done = _suite([*args, "--workers", "2"], tmp_path, RECSUITE_DEVICE_MEMORY=between)
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert "2 workers may run the 2 largest jobs at once" in line
    assert "use --workers 1 or fewer; nothing was trained" in line
    assert not (tmp_path / "out").exists()
    shown = _suite([*args, "--workers", "2", "--plan"], tmp_path, RECSUITE_DEVICE_MEMORY=between)
    assert "DO NOT FIT: use --workers 1" in shown.stdout
    monkeypatch.setenv("RECSUITE_DEVICE_MEMORY", between)
    check_fit(plan_costs(plan, 1, rates=False))  # one worker: each job alone fits
    assert max_concurrent(plan_costs(plan, 2, rates=False).runs[:1], int(between)) == 1
