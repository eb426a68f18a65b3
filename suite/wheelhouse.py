"""A folder of wheels that installs the suite on a machine without registry access.

``nox -s wheelhouse -- --torch 2.11 --cuda`` (or ``python -m suite.wheelhouse ...``) builds,
for one target (supported torch release, CUDA or CPU fbgemm build, Python version, platform):

1. the suite's own wheel (``pip wheel --no-deps .``);
2. a resolution of ``recsuite[scaleout]``, the target's torch and its fbgemm-gpu for the
   target's platform and Python (``pip install --dry-run --report``; nothing is installed);
3. the wheels of that resolution (``pip download --no-deps --only-binary=:all:``), leaving
   out torch and what only torch needs (its ``nvidia-*`` CUDA libraries, triton, sympy...)
   unless ``--with-torch``: the target already has them;
4. torchrec of the pair, by itself (its wheel names the CUDA fbgemm; its needs came with
   ``scaleout``);

then prints the folder's size with the wheels biggest first and writes ``install.sh`` with
the two ``pip install --no-index --find-links`` lines that install it. The pairs come from
:mod:`suite.versions`. Importable without torch; needs ``packaging`` (for markers).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from suite import versions
from suite.versions import Pair

DIST_NAME = "recsuite"
EXTRAS = ("scaleout",)
DEFAULT_PLATFORM = "manylinux_2_28_x86_64"
_LEGACY_MANYLINUX = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
_MiB = 1024 * 1024


@dataclass(frozen=True)
class Target:
    """The machine a wheelhouse is for."""

    pair: Pair
    cuda: bool
    python: str = "3.11"
    platform: str = DEFAULT_PLATFORM
    with_torch: bool = False

    @property
    def name(self) -> str:
        """``"torch2.11-cuda-cp311-manylinux_2_28_x86_64"``: the default folder name."""
        flavour = "cuda" if self.cuda else "cpu"
        return f"torch{self.pair.minor}-{flavour}-cp{self.python.replace('.', '')}-{self.platform}"

    @property
    def arch(self) -> str:
        return _split_platform(self.platform)[1]


def _split_platform(platform: str) -> tuple[int, str]:
    """``(28, "x86_64")`` for ``manylinux_2_28_x86_64``; the wheelhouse is for Linux."""
    parts = platform.split("_", 3)
    if len(parts) != 4 or parts[0] != "manylinux" or parts[1] != "2" or not parts[2].isdigit():
        raise ValueError(
            f"platform {platform!r}: give a manylinux tag such as {DEFAULT_PLATFORM} "
            "(fbgemm-gpu ships Linux wheels only)"
        )
    return int(parts[2]), parts[3]


def platform_tags(platform: str) -> list[str]:
    """Every wheel platform tag a ``platform`` machine installs, newest first.

    pip takes ``--platform`` literally, so ``manylinux_2_28_x86_64`` alone would miss the
    ``manylinux_2_27`` and ``manylinux2014`` wheels such a machine installs (several of
    torch's CUDA libraries are tagged so): glibc versions down to 2.5 and their legacy
    aliases are listed here, as pip does for the machine it runs on.
    """
    glibc, arch = _split_platform(platform)
    tags: list[str] = []
    for minor in range(glibc, 4, -1):
        tags.append(f"manylinux_2_{minor}_{arch}")
        if minor in _LEGACY_MANYLINUX:
            tags.append(f"{_LEGACY_MANYLINUX[minor]}_{arch}")
    return tags


def target_flags(target: Target) -> list[str]:
    """pip's flags for wheels of ``target``'s Python and platform only."""
    flags = ["--only-binary=:all:", "--implementation", "cp", "--python-version", target.python]
    for tag in platform_tags(target.platform):
        flags += ["--platform", tag]
    return flags


def roots(target: Target, suite_wheel: Path) -> list[str]:
    """The requirements resolved together: the suite with its extras, the target's torch
    (so what needs torch resolves against it) and the fbgemm-gpu built for that torch."""
    extras = ",".join(EXTRAS)
    return [
        f"{suite_wheel}[{extras}]",
        f"torch=={target.pair.torch}",
        target.pair.fbgemm_requirement(target.cuda),
    ]


def marker_environment(target: Target) -> dict[str, str]:
    """The PEP 508 marker values of ``target`` (CPython on Linux)."""
    full = target.python if target.python.count(".") == 2 else f"{target.python}.0"
    return {
        "python_version": ".".join(target.python.split(".")[:2]),
        "python_full_version": full,
        "implementation_version": full,
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "os_name": "posix",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": target.arch,
        "platform_release": "",
        "platform_version": "",
        "extra": "",
    }


def _applies(marker: Marker | None, env: dict[str, str], extras: Iterable[str]) -> bool:
    if marker is None:
        return True
    return any(marker.evaluate({**env, "extra": extra}) for extra in (*extras, ""))


def wanted(report: dict[str, Any], target: Target) -> list[tuple[str, str]]:
    """``(name, version)`` of the resolved wheels to download, sorted by name.

    Walks the resolution's requirement graph (markers evaluated for ``target``) from what
    was asked for. Unless ``target.with_torch``, torch is a leaf the target already has:
    torch, and whatever only torch needs, is not reached. The suite's own wheel is built,
    not downloaded, and left out too.
    """
    items: dict[str, Any] = {canonicalize_name(i["metadata"]["name"]): i for i in report["install"]}
    env = marker_environment(target)
    skip = set() if target.with_torch else {"torch"}
    queue: deque[tuple[str, frozenset[str]]] = deque(
        (name, frozenset(item.get("requested_extras") or ()))
        for name, item in items.items()
        if item.get("requested") and name not in skip
    )
    seen: set[tuple[str, frozenset[str]]] = set()
    while queue:
        name, extras = queue.popleft()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        for line in items[name]["metadata"].get("requires_dist") or ():
            req = Requirement(line)
            dep = canonicalize_name(req.name)
            if dep in items and dep not in skip and _applies(req.marker, env, extras):
                queue.append((dep, frozenset(req.extras)))
    reached = {name for name, _ in seen} - {DIST_NAME}
    return sorted((name, items[name]["metadata"]["version"]) for name in reached)


def install_lines(target: Target, folder: str) -> list[str]:
    """The commands that install the wheelhouse at ``folder`` with no registry."""
    first = [f'"{DIST_NAME}[{",".join(EXTRAS)}]"', target.pair.fbgemm_requirement(target.cuda)]
    if target.with_torch:
        first.append(f"torch=={target.pair.torch}")
    pip = f'python -m pip install --no-index --find-links "{folder}"'
    return [f"{pip} {' '.join(first)}", f"{pip} --no-deps torchrec=={target.pair.torchrec}"]


def size_table(folder: Path) -> str:
    """The folder's wheels, biggest first, in MiB, with the total."""
    wheels = sorted(folder.glob("*.whl"), key=lambda p: (-p.stat().st_size, p.name))
    total = sum(p.stat().st_size for p in wheels)
    rows = [f"{p.stat().st_size / _MiB:9.1f}  {p.name}" for p in wheels]
    return "\n".join(
        [f"{len(wheels)} wheels, {total / _MiB:.1f} MiB in {folder}", "      MiB  wheel", *rows]
    )


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], check=True)


def build(target: Target, folder: Path, source: Path) -> dict[str, float]:
    """Fill ``folder`` with ``target``'s wheels (old wheels there are removed first) and
    write its ``install.sh``; returns the seconds each step took."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.whl"):
        old.unlink()
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    _pip("wheel", "--no-deps", "--quiet", "--wheel-dir", str(folder), str(source))
    (suite_wheel,) = folder.glob(f"{DIST_NAME}-*.whl")
    seconds["suite wheel"] = time.perf_counter() - start

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        report_path = Path(tmp) / "report.json"
        _pip(
            "install", "--dry-run", "--ignore-installed", "--quiet", "--report",
            str(report_path), "--target", str(Path(tmp) / "target"),
            *target_flags(target), *roots(target, suite_wheel),
        )  # fmt: skip
        report = json.loads(report_path.read_text())
    seconds["resolve"] = time.perf_counter() - start

    start = time.perf_counter()
    pins = [f"{name}=={version}" for name, version in wanted(report, target)]
    pins.append(f"torchrec=={target.pair.torchrec}")
    _pip("download", "--no-deps", "--quiet", "--dest", str(folder), *target_flags(target), *pins)
    seconds["download"] = time.perf_counter() - start

    script = folder / "install.sh"
    script.write_text(
        "#!/bin/sh\n"
        f"# recsuite for torch {target.pair.minor} ({'CUDA' if target.cuda else 'CPU'} fbgemm),"
        f" Python {target.python}, {target.platform}; no registry needed.\n"
        'set -e\nhere="$(cd "$(dirname "$0")" && pwd)"\n'
        + "".join(f"{line}\n" for line in install_lines(target, "$here"))
    )
    script.chmod(0o755)
    return seconds


def parse_target(argv: Sequence[str]) -> tuple[Target, Path]:
    parser = argparse.ArgumentParser(
        prog="nox -s wheelhouse --",
        description="Build a folder of wheels that installs the suite offline on a target machine.",
    )
    lines = ", ".join(p.minor for p in versions.PAIRS)
    parser.add_argument(
        "--torch", default=versions.DEFAULT_MINOR, help=f"the target's torch ({lines})"
    )
    flavour = parser.add_mutually_exclusive_group()
    flavour.add_argument("--cuda", action="store_true", help="CUDA fbgemm-gpu (the default)")
    flavour.add_argument("--cpu", action="store_true", help="CPU fbgemm-gpu-cpu")
    parser.add_argument("--python", default="3.11", help="the target's Python (default 3.11)")
    parser.add_argument("--platform", default=DEFAULT_PLATFORM, help="a manylinux tag")
    parser.add_argument(
        "--with-torch", action="store_true", help="include torch (and its CUDA libraries)"
    )
    parser.add_argument("--dest", type=Path, help="the folder (default wheelhouse/<target>)")
    args = parser.parse_args(argv)
    pair = versions.pair_for_torch(args.torch)
    if pair is None:
        parser.error(f"torch {args.torch} is not supported; supported: {lines}")
    target = Target(
        pair=pair,
        cuda=not args.cpu,
        python=args.python,
        platform=args.platform,
        with_torch=args.with_torch,
    )
    try:
        target_flags(target)
    except ValueError as exc:
        parser.error(str(exc))
    return target, args.dest or Path("wheelhouse") / target.name


def main(argv: Sequence[str] | None = None) -> int:
    target, folder = parse_target(sys.argv[1:] if argv is None else argv)
    seconds = build(target, folder, Path.cwd())
    print(size_table(folder))
    print("steps: " + ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items()))
    print(f"install on the target (or run {folder / 'install.sh'}):")
    for line in install_lines(target, str(folder)):
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
