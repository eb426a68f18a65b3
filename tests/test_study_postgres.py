"""Two study workers against a real PostgreSQL server (the many-machines storage).

A session fixture creates a throwaway cluster with ``initdb`` in a temp dir, starts it
with ``pg_ctl`` on a free localhost port (as the ``postgres`` user when the tests run as
root: PostgreSQL refuses to run as root), creates a database and stops the server at
the end. Skipped only where the PostgreSQL server binaries (or psycopg2) are absent.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from suite.studies import load_study_spec, run_study
from suite.studies.tracking import TRIAL_TAG
from tests.test_study import finished_runs, tiny_study, write_study


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """``postgresql+psycopg2://postgres@127.0.0.1:PORT/studies`` of a server started here."""
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if not initdb or not pg_ctl:
        pytest.skip(
            "PostgreSQL server binaries (initdb, pg_ctl) not installed: apt-get install postgresql"
        )
    psycopg2 = pytest.importorskip(
        "psycopg2", reason="psycopg2 not installed: pip install psycopg2-binary"
    )
    as_root = os.geteuid() == 0
    if as_root and shutil.which("runuser") is None:
        pytest.skip("running as root without runuser: cannot start PostgreSQL as another user")
    prefix = ["runuser", "-u", "postgres", "--"] if as_root else []
    root = Path(tempfile.mkdtemp(prefix="recsuite-pg-"))
    data = root / "data"
    if as_root:
        shutil.chown(root, "postgres", "postgres")
    port = _free_port()

    def run(*command: str) -> None:
        done = subprocess.run([*prefix, *command], capture_output=True, text=True, timeout=120)
        if done.returncode:
            raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")

    run(initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
    run(
        pg_ctl,
        "-D",
        str(data),
        "-o",
        options,
        "-l",
        str(root / "server.log"),
        "-w",
        "-t",
        "60",
        "start",
    )
    try:
        connection = psycopg2.connect(
            host="127.0.0.1", port=port, user="postgres", dbname="postgres"
        )
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute("CREATE DATABASE studies")
        connection.close()
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/studies"
    finally:
        run(pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


def test_two_workers_against_postgres(postgres_url: str, tmp_path: Path) -> None:
    n = 4
    spec = load_study_spec(write_study(tmp_path, tiny_study(tmp_path, name="pg", n_trials=n)))
    outcome = run_study(spec, workers=2, storage=postgres_url, quiet=True)
    assert outcome.complete and outcome.storage_url == postgres_url

    study = optuna.load_study(study_name="pg", storage=postgres_url)
    complete = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(complete) == n
    assert len({t.number for t in complete}) == n
    assert len({tuple(sorted(t.params.items())) for t in complete}) == n
    assert study.user_attrs["suite:mlflow_parent_run_id"] == outcome.parent_run_id

    parent, children = finished_runs(spec.base.tracking.uri, "pg")
    assert parent.info.run_id == outcome.parent_run_id
    assert sorted(int(r.data.tags[TRIAL_TAG]) for r in children) == sorted(
        t.number for t in complete
    )
    assert (tmp_path / "results" / "studies" / "pg" / "trials.csv").is_file()
    assert not (tmp_path / "results" / "studies" / "pg" / "optuna.db").exists()
