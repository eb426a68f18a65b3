"""A real two-node Ray cluster on loopback, on one machine: to try ``--executor ray``
before a real cluster, and for the suite's cluster tests and benchmark.

Ray binds the machine's routable address unless the only interface is loopback, so the
driver runs in a network namespace of its own with just ``lo`` (:func:`netns_command`:
``unshare --net --map-root-user``) and there starts :class:`LoopbackCluster`. Each node is
started in a session of its own, so every process of it (raylet, GCS, workers) is in one
process group, ended by that group's id (never ``ray stop``, never by name).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def netns_unavailable() -> str | None:
    """Why this process cannot make its own network namespace here (None: it can)."""
    if not shutil.which("unshare"):
        return "no unshare(1) on this machine"
    try:
        import ray  # noqa: F401
    except ImportError:
        return "Ray is not installed (the `ray` extra)"
    probe = subprocess.run(
        ["unshare", "--net", "--map-root-user", "true"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        return f"unshare --net is not allowed here: {probe.stderr.strip()}"
    return None


def netns_command(args: list[str]) -> list[str]:
    """The command that runs ``python args...`` (this interpreter) in a new network
    namespace with loopback up."""
    command = f'ip link set lo up 2>/dev/null || true; exec "{sys.executable}" "$@"'
    return ["unshare", "--net", "--map-root-user", "bash", "-c", command, "bash", *args]


class LoopbackCluster:
    """A head node and a second node on 127.0.0.1 (inside a network namespace)."""

    def __init__(
        self,
        workdir: Path,
        head_cpus: int = 1,
        node_cpus: int = 1,
        node_gpus: int = 0,
        port: int = 6390,
        node_env: dict[str, str] | None = None,
    ) -> None:
        self.workdir = Path(workdir)
        self.port = port
        self.head_cpus, self.node_cpus, self.node_gpus = head_cpus, node_cpus, node_gpus
        self.node_env = node_env or {}  # the second node's own settings (its data cache)
        self.groups: dict[str, int] = {}

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _ray(self) -> str:
        return str(Path(sys.executable).with_name("ray"))

    def _start(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        log = open(self.workdir / f"ray-{name}.log", "w")  # noqa: SIM115 - kept by the process
        proc = subprocess.Popen(
            [self._ray(), "start", "--block", "--node-ip-address=127.0.0.1", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the node's every process in this one group
            cwd=self.workdir,
            env={**os.environ, **(env or {})},
        )
        self.groups[name] = proc.pid

    def start(self) -> LoopbackCluster:
        # Ray's AF_UNIX sockets live under the temp dir and may not exceed 107 bytes: a
        # pytest tmp_path (long test names) is too deep, so the head's temp dir is short
        temp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
        self.temp = temp
        self._start(
            "head",
            [
                "--head",
                f"--port={self.port}",
                f"--num-cpus={self.head_cpus}",
                "--num-gpus=0",
                f"--temp-dir={temp}",
                "--include-dashboard=false",
                "--disable-usage-stats",
            ],
        )
        self._wait_nodes(1)
        self.start_node()
        return self

    def start_node(self) -> None:
        """Start (or start again, after :meth:`kill_node`) the second node."""
        self._start(
            "node",
            [
                f"--address={self.address}",
                f"--num-cpus={self.node_cpus}",
                f"--num-gpus={self.node_gpus}",
                "--disable-usage-stats",
            ],
            self.node_env,
        )
        self._wait_nodes(2)

    def _wait_nodes(self, count: int, timeout: float = 90) -> None:
        import ray

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                ray.init(address=self.address, log_to_driver=False, logging_level="ERROR")
                alive = [n for n in ray.nodes() if n["Alive"]]
                ray.shutdown()
                if len(alive) == count:
                    return
            except (ConnectionError, RuntimeError):
                pass
            time.sleep(1.0)
        raise TimeoutError(f"the loopback Ray cluster has not {count} live nodes in {timeout} s")

    def kill_node(self) -> None:
        """End the second node now (SIGKILL of its process group): a lost machine."""
        self._kill("node")

    def _kill(self, name: str) -> None:
        pgid = self.groups.pop(name, None)
        if pgid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)

    def stop(self) -> None:
        for name in list(self.groups):
            self._kill(name)
        temp = getattr(self, "temp", None)
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)

    def __enter__(self) -> LoopbackCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
