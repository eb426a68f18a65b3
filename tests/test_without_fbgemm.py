"""Runs where fbgemm-gpu does not import (issue 37, item 3).

Each run is a real ``suite`` process whose ``import fbgemm_gpu`` fails for real: a
``sitecustomize`` on its ``PYTHONPATH`` puts a finder first on ``sys.meta_path`` that
raises for ``fbgemm_gpu`` (and so for TorchRec, which imports it), as a missing or
mismatched install does. Nothing in the suite is patched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import TINY_DATA, tracking_uri

REPO = Path(__file__).resolve().parents[1]
TINY_FLAGS = [f"--set=dataset.options.{k}={v}" for k, v in TINY_DATA.items()] + [
    "--batch-size=128",
    "--quiet",
    "--set=train.threads=1",
    "--set=train.max_steps=8",
]
NOTE = "note: fbgemm-gpu unavailable ("
FINDER = """\
import sys


class _NoFbgemm:
    def find_spec(self, name, path=None, target=None):
        if name == "fbgemm_gpu" or name.startswith("fbgemm_gpu."):
            raise {error}({message!r})
        return None


sys.meta_path.insert(0, _NoFbgemm())
"""


def _without_fbgemm(
    tmp_path: Path, *argv: str, error: str = "ImportError", message: str = "no fbgemm_gpu"
) -> subprocess.CompletedProcess[str]:
    """``suite ARGV`` in a process where importing fbgemm_gpu raises ``error(message)``."""
    site = tmp_path / "no_fbgemm"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(FINDER.format(error=error, message=message))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(REPO), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(
        [sys.executable, "-m", "suite.cli", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_blocker_really_blocks_fbgemm(tmp_path: Path) -> None:
    out = _without_fbgemm(tmp_path, "--help")
    assert out.returncode == 0, out.stderr
    site = tmp_path / "no_fbgemm"
    probe = subprocess.run(
        [sys.executable, "-c", "import fbgemm_gpu"],
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
    )
    assert probe.returncode != 0 and "ImportError: no fbgemm_gpu" in probe.stderr


@pytest.mark.slow
def test_default_run_falls_back_to_torch_tables_with_one_note(tmp_path: Path) -> None:
    result_file, uri = tmp_path / "result.json", tracking_uri(tmp_path)
    out = _without_fbgemm(
        tmp_path,
        "run",
        "--device",
        "cpu",
        "--out",
        str(result_file),
        "--tracking-uri",
        uri,
        *TINY_FLAGS,
    )
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    notes = [line for line in out.stderr.splitlines() if line.startswith(NOTE)]
    assert notes == [
        "note: fbgemm-gpu unavailable (ImportError: no fbgemm_gpu); "
        "embedding tables run on the torch backend"
    ], out.stderr
    result = json.loads(result_file.read_text())
    assert result["config"]["embedding"]["options"]["backend"] == "fbgemm"  # as asked
    layout = result["details"]["embedding_layout"]
    assert set(layout["table_backends"]) == {"torch"}  # as ran
    env = result["environment"]
    assert env["fbgemm"] is None
    assert env["embedding_backend"] == "torch (fbgemm-gpu unavailable: ImportError: no fbgemm_gpu)"
    assert 0.0 < result["metrics"]["test_auc"] < 1.0
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(result["mlflow_run_id"])
    assert run.info.status == "FINISHED" and run.data.tags["fbgemm.version"] == "None"
    logged = client.download_artifacts(run.info.run_id, "environment.json", str(tmp_path))
    assert json.loads(Path(logged).read_text())["embedding_backend"] == env["embedding_backend"]


def test_a_task_needing_fbgemm_refuses_in_one_line(tmp_path: Path) -> None:
    """A mismatched build fails at load (here ``OSError``, as an undefined symbol does)."""
    out = _without_fbgemm(
        tmp_path,
        "run",
        "--task",
        "lowprec",
        *TINY_FLAGS,
        error="OSError",
        message="libfbgemm_gpu_py.so: undefined symbol: _ZN3c10",
    )
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "task lowprec (fbgemm's n-bit inference tables) needs fbgemm-gpu" in lines[0]
    assert "OSError: libfbgemm_gpu_py.so: undefined symbol" in lines[0]
