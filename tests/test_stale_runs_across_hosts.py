"""A run left RUNNING by a process of another host (a lost node, a SIGKILL there) is found
by its stopped heartbeat (issue 71, item 6): the owner's thread rewrites ``suite.heartbeat``
while it lives, and the next command that opens the store, on any host, ends the run KILLED
once the heartbeat is older than the stale time. "Another host" is a real process in its
own UTS namespace (``unshare --uts``) under another host name, on the same SQLite store."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from suite.cli import main
from suite.errors import SuiteError
from suite.tracking import (
    HEARTBEAT_ENV,
    HEARTBEAT_TAG,
    HOST_TAG,
    KILLED_BY_TAG,
    PID_TAG,
    STALE_AFTER_ENV,
    Heartbeat,
    Tracker,
    clean_dead_runs,
    death_of,
    open_client,
)
from tests.conftest import tracking_uri

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One SQLite store for the tests that do not count its runs (creating one is slow)."""
    return tracking_uri(tmp_path_factory.mktemp("stale"))


def _running_run(uri: str, tags: dict[str, str]) -> str:
    client, _ = open_client(uri)
    found = client.get_experiment_by_name("elsewhere")
    experiment_id = found.experiment_id if found else client.create_experiment("elsewhere")
    return client.create_run(experiment_id, tags=tags).info.run_id


def test_another_hosts_run_is_dead_once_its_heartbeat_is_older_than_the_stale_time(
    store: str,
) -> None:
    uri = store
    now = time.time()
    old = _running_run(uri, {HOST_TAG: "node-7", PID_TAG: "41", HEARTBEAT_TAG: f"{now - 1000}"})
    fresh = _running_run(uri, {HOST_TAG: "node-7", PID_TAG: "42", HEARTBEAT_TAG: f"{now - 10}"})
    before = _running_run(uri, {HOST_TAG: "node-7", PID_TAG: "43"})  # predates heartbeats
    client, _ = open_client(uri)
    dead = clean_dead_runs(client, uri, stale_after=900)
    assert [r.info.run_id for r in dead] == [old]
    mlflow = MlflowClient(tracking_uri=uri)
    assert mlflow.get_run(old).info.status == "KILLED"
    reason = mlflow.get_run(old).data.tags[KILLED_BY_TAG]
    assert re.fullmatch(
        r"no heartbeat from process 41 on node-7 for 1\d\d\d s \(stale after 900 s\)", reason
    )
    assert mlflow.get_run(fresh).info.status == "RUNNING"
    assert mlflow.get_run(before).info.status == "RUNNING"


def test_the_rule_by_host_process_and_heartbeat() -> None:
    tags = {HOST_TAG: "a", PID_TAG: "1", HEARTBEAT_TAG: "100.0"}
    assert death_of(tags, "b", 60, 150) is None
    assert "no heartbeat" in (death_of(tags, "b", 60, 161) or "")
    assert death_of({**tags, HOST_TAG: "b", PID_TAG: str(os.getpid())}, "b", 60, 10**9) is None
    assert death_of({HOST_TAG: "a", HEARTBEAT_TAG: "not a time"}, "b", 60, 10**9) is None


def test_a_live_tracker_beats_and_stops_beating_when_its_run_ends(
    store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HEARTBEAT_ENV, "0.1")
    uri = store
    tracker = Tracker.start(uri, "beats", "probe")
    mlflow = MlflowClient(tracking_uri=uri)
    first = float(mlflow.get_run(tracker.run_id).data.tags[HEARTBEAT_TAG])
    beat = Heartbeat.live[tracker.run_id]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        latest = float(mlflow.get_run(tracker.run_id).data.tags[HEARTBEAT_TAG])
        if latest > first:
            break
        time.sleep(0.05)
    assert latest > first, "the heartbeat was not rewritten"
    tracker.finish()
    assert not beat.alive and tracker.run_id not in Heartbeat.live
    ended = float(mlflow.get_run(tracker.run_id).data.tags[HEARTBEAT_TAG])
    time.sleep(0.4)
    assert float(mlflow.get_run(tracker.run_id).data.tags[HEARTBEAT_TAG]) == ended


def test_a_bad_stale_time_is_one_line(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STALE_AFTER_ENV, "soon")
    client, uri = open_client(store)
    with pytest.raises(SuiteError, match=r"\$RECSUITE_STALE_AFTER_S: expected a positive"):
        clean_dead_runs(client, uri)


OWNER = textwrap.dedent(
    """
    import sys, time
    from suite.tracking import Tracker
    tracker = Tracker.start(sys.argv[1], "elsewhere", "on another host")
    print(tracker.run_id, flush=True)
    time.sleep(600)
    """
)


def _can_rename_host() -> bool:
    if shutil.which("unshare") is None or shutil.which("hostname") is None:
        return False
    probe = ["unshare", "--uts", "--map-root-user", "hostname", "other-host"]
    return subprocess.run(probe, capture_output=True).returncode == 0


@pytest.mark.skipif(not _can_rename_host(), reason="needs unshare --uts (user namespaces)")
def test_a_run_sigkilled_on_another_host_is_closed_from_this_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = tracking_uri(tmp_path)
    open_client(uri)  # the store exists before the other host writes to it
    env = {**os.environ, HEARTBEAT_ENV: "0.2", "PYTHONPATH": str(REPO)}
    script = 'hostname other-host && exec "$0" -c "$1" "$2"'
    owner = subprocess.Popen(
        ["unshare", "--uts", "--map-root-user", "sh", "-c", script, sys.executable, OWNER, uri],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        assert owner.stdout is not None
        run_id = owner.stdout.readline().strip()
        assert len(run_id) == 32, f"the owner printed {run_id!r}"
        mlflow = MlflowClient(tracking_uri=uri)
        assert mlflow.get_run(run_id).data.tags[HOST_TAG] == "other-host"
        time.sleep(1.0)  # alive and beating: not stale at 2 s
        assert main(["runs", "clean", "--tracking-uri", uri, "--stale-after", "2"]) == 0
        assert mlflow.get_run(run_id).info.status == "RUNNING"
    finally:
        os.killpg(owner.pid, signal.SIGKILL)
        owner.wait()
    capsys.readouterr()
    time.sleep(2.5)
    assert main(["runs", "clean", "--tracking-uri", uri, "--stale-after", "2"]) == 0
    out = capsys.readouterr().out
    run = MlflowClient(tracking_uri=uri).get_run(run_id)
    assert run.info.status == "KILLED"
    assert f"killed {run_id} (on another host): no heartbeat from process" in out
    assert "on other-host" in run.data.tags[KILLED_BY_TAG]
    assert out.rstrip().endswith("1 dead run(s) marked KILLED in " + uri)
