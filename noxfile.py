"""Sessions: tests, tests_slow, lint, reproduce, bench, study, submit, gpu, compat,
wheelhouse.

A fresh machine needs only Python 3.11+ and pip: ``python3 -m pip install nox`` then
``nox -s <session>``. Each session installs the suite with the fbgemm wheel that fits
the machine (``fbgemm-gpu`` where ``nvidia-smi`` answers, else ``fbgemm-gpu-cpu``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = True

# Debian packages for the tests that drive a real browser and a real PostgreSQL server.
SYSTEM_PACKAGES = ["chromium", "chromium-driver", "postgresql"]


def has_cuda() -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0


def _load_versions():
    """suite/versions.py by its path: the supported torch / fbgemm / torchrec pairs, read
    without importing the ``suite`` package (whose import sets process-wide variables)."""
    spec = importlib.util.spec_from_file_location(
        "_suite_versions", Path(__file__).parent / "suite" / "versions.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


versions = _load_versions()

# The extras a session that runs the tests installs: the dev tools and the tests' imports.
TEST_EXTRAS = ("dev", "test", "ray")  # ray: the cluster tests start a real loopback cluster


def pyproject_requirements(*names: str) -> list[str]:
    """pyproject's requirement lines (dependencies and extras) for the packages ``names``,
    so a session installs the versions pyproject states, not a second copy of them."""
    project = tomllib.loads((Path(__file__).parent / "pyproject.toml").read_text())["project"]
    lines = [*project["dependencies"], *sum(project["optional-dependencies"].values(), [])]
    found = [line for line in lines if re.split(r"[\s\[<>=!~;]", line, maxsplit=1)[0] in names]
    missing = set(names) - {re.split(r"[\s\[<>=!~;]", line, maxsplit=1)[0] for line in found}
    if missing:
        raise ValueError(f"not in pyproject.toml: {', '.join(sorted(missing))}")
    return found


def install_suite(session: nox.Session, extras: tuple[str, ...] = (), pair=None) -> None:
    """torch of ``pair`` (default: the default pair; pip takes a local wheel where the
    machine has one), then the suite with ``scaleout`` and ``extras`` and the fbgemm build
    for it (CUDA where ``nvidia-smi`` answers), then torchrec without its declared
    dependencies (they name the CUDA fbgemm wheel even on CPU machines; its real needs come
    with ``scaleout``)."""
    pair = pair or versions.default_pair()
    session.install(f"torch=={pair.torch}")
    suite = f".[{','.join(('scaleout', *extras))}]"
    session.install("-e", suite, pair.fbgemm_requirement(has_cuda()))
    session.install("--no-deps", f"torchrec=={pair.torchrec}")


def install_system_packages(session: nox.Session) -> None:
    """Install the browser and database the tests use, where we may (root with apt-get)."""
    missing = [
        p
        for p, exe in zip(
            SYSTEM_PACKAGES, ["chromium", "chromedriver", "pg_ctlcluster"], strict=True
        )
        if not shutil.which(exe)
    ]
    if not missing:
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        session.warn(f"not root or no apt-get: tests needing {', '.join(missing)} will be skipped")
        return
    session.run("apt-get", "update", "-qq", external=True)
    session.run(
        "apt-get",
        "install",
        "-y",
        "-qq",
        "--no-install-recommends",
        *SYSTEM_PACKAGES,
        external=True,
        env={"DEBIAN_FRONTEND": "noninteractive"},
    )


@nox.session
def tests(session: nox.Session) -> None:
    """The default test suite (fast; `slow` tests excluded)."""
    install_system_packages(session)
    install_suite(session, TEST_EXTRAS)
    session.run("pytest", "-q", *session.posargs, env={"OMP_NUM_THREADS": "1"})


@nox.session
def tests_slow(session: nox.Session) -> None:
    """The slow tests (longer training runs)."""
    install_suite(session, TEST_EXTRAS)
    session.run("pytest", "-q", "-m", "slow", *session.posargs)


@nox.session
def tests_cluster(session: nox.Session) -> None:
    """The tests on a real two-node Ray cluster on loopback, in their own network namespace
    (``unshare --net``; skipped where that is not allowed)."""
    install_suite(session, TEST_EXTRAS)
    session.run("pytest", "-q", "-m", "cluster", *session.posargs, env={"OMP_NUM_THREADS": "1"})


@nox.session
def lint(session: nox.Session) -> None:
    """ruff lint and format check, then mypy on the lower floors (``[tool.mypy]``): the
    ruff and mypy the dev extra pins, with numpy and pydantic for their types (torch and
    the other large packages are read as Any, so none of them is installed here)."""
    session.install(*pyproject_requirements("ruff", "mypy", "numpy", "pydantic"), "packaging")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")


@nox.session
def reproduce(session: nox.Session) -> None:
    """The suite's main job on the built-in synthetic data (CPU), five seeds per run.

    Writes results/reproduce/<profile>/ (ignored by git), its run results under runs/ (a
    killed session resumes; ``-- --from-results`` regenerates the report without training).
    Jobs run on one worker process per core (``-- --workers 1``: one at a time). Refresh
    the checked-in reference report on purpose with ``nox -s reproduce -- --out results/quick``.
    """
    install_suite(session)
    args = session.posargs
    profile = [] if "--profile" in args else ["--profile", "quick"]
    session.run("suite", "reproduce", *profile, *args)


@nox.session
def bench(session: nox.Session) -> None:
    """Every benchmark under benchmarks/: tables printed, JSON under results/bench/."""
    install_suite(session)
    scripts = sorted(
        p for p in os.listdir("benchmarks") if p.startswith("bench_") and p.endswith(".py")
    )
    for script in scripts:
        session.run("python", f"benchmarks/{script}", *session.posargs)
    kaggle = os.environ.get("RECSUITE_BENCH_KAGGLE")
    if kaggle:  # prepare at Kaggle size: the file is generated there once (~11 GB)
        session.run("python", "benchmarks/bench_prepare.py", "--kaggle", kaggle, "--rounds", "1")
    else:
        session.log(
            "prepare at Kaggle size (45.8M rows) skipped: set RECSUITE_BENCH_KAGGLE to a path "
            "on a local disk with ~11 GB free (the file is generated there once)"
        )


@nox.session
def study(session: nox.Session) -> None:
    """An Optuna study: ``nox -s study -- studies/qr.yaml --workers 2``."""
    install_suite(session)
    if not session.posargs:
        session.error("give a study file: nox -s study -- studies/qr.yaml [--workers N]")
    session.run("suite", "study", *session.posargs)


@nox.session
def submit(session: nox.Session) -> None:
    """Build a leaderboard submission, validate all, render: ``nox -s submit -- --parent-run ID``."""
    install_suite(session)
    if session.posargs:
        session.run("suite", "submit", *session.posargs)
    session.run("suite", "leaderboard", "validate")
    session.run("suite", "leaderboard", "render")


# The pair loads: fbgemm first through the suite's own probe (one line, not fbgemm's log).
COMPAT_IMPORTS = """
import sys
from suite.kernel_backend import fbgemm_available
ok, why = fbgemm_available()
if not ok:
    sys.exit(f"fbgemm-gpu does not load: {why}")
import fbgemm_gpu, torch, torchrec
print("torch", torch.__version__, "fbgemm_gpu", fbgemm_gpu.__version__, "torchrec", torchrec.__version__)
"""


@nox.session
@nox.parametrize("torch", [p.minor for p in versions.PAIRS], ids=[p.minor for p in versions.PAIRS])
def compat(session: nox.Session, torch: str) -> None:
    """The fast tests on each supported torch with its fbgemm-gpu and torchrec, each pair in
    its own venv: ``nox -s compat`` (all pairs) or ``nox -s "compat(2.11)"`` (one). Not in CI,
    which runs the default pair (``tests``). Off-default torch wheels on PyPI are CUDA builds
    of several GB; they run on CPU."""
    pair = versions.pair_for_torch(torch)
    fbgemm = pair.fbgemm_requirement(has_cuda())
    session.log(f"pair: torch {pair.torch}, {fbgemm}, torchrec {pair.torchrec}")
    try:
        install_suite(session, TEST_EXTRAS, pair=pair)
    except nox.command.CommandFailed:
        session.error(
            f"torch {pair.torch} with {fbgemm} and torchrec {pair.torchrec} does not install "
            "here (pip's message above; a missing wheel takes the pair out of suite/versions.py)"
        )
    session.run("python", "-c", COMPAT_IMPORTS)
    session.run(
        "pytest", "-q", "-m", "not slow and not gpu", *session.posargs, env={"OMP_NUM_THREADS": "1"}
    )


@nox.session
def wheelhouse(session: nox.Session) -> None:
    """A folder of wheels that installs the suite on a machine without registry access:
    ``nox -s wheelhouse -- --torch 2.11 --cuda`` (``--cpu``, ``--python 3.11``,
    ``--platform manylinux_2_28_x86_64``, ``--with-torch``, ``--dest DIR``); see
    suite/wheelhouse.py. Prints the size, biggest wheels first, and the install lines."""
    session.install("pip>=24", "packaging>=23")
    session.run("python", "-m", "suite.wheelhouse", *session.posargs)


@nox.session
def gpu(session: nox.Session) -> None:
    """The GPU check in one command (``python -m suite.gpu_check``, for a machine without
    nox): on a CUDA machine the ``gpu`` tests, the tasks with fbgemm's TBE and the torch
    backend, n-bit bytes, the MANAGED_CACHING replay, TBE bandwidth and every embedding
    method against its CPU build; writes
    results/bench/gpu-<device>.json and prints a table. Without CUDA (or ``-- --dry-run``)
    the CUDA steps are skipped with the reason and their CPU analogs run."""
    install_suite(session, TEST_EXTRAS)
    session.run("python", "-m", "suite.gpu_check", *session.posargs)
