"""The offline wheelhouse's plan (issue 37, item 2): which wheels for which target. No
network: the resolution is a pip report written here in pip's own format."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from suite import versions, wheelhouse
from suite.wheelhouse import Target


def _item(name: str, version: str, *requires: str, requested: bool = False, extras=()) -> dict:
    item = {
        "metadata": {"name": name, "version": version, "requires_dist": list(requires)},
        "requested": requested,
    }
    if extras:
        item["requested_extras"] = list(extras)
    return item


# A small resolution shaped like the real one: the suite needs torch, datasets (which needs
# fsspec[http]) and, through its scaleout extra, tensordict (which needs torch too); torch
# brings CUDA libraries, sympy and fsspec; markers for other machines must not count.
REPORT = {
    "version": "1",
    "install": [
        _item(
            "recsuite",
            "0.1.0",
            "torch<2.15,>=2.11",
            "numpy>=1.26",
            "datasets>=2.19",
            'tensordict>=0.8; extra == "scaleout"',
            'pytest>=8; extra == "dev"',
            requested=True,
            extras=["scaleout"],
        ),
        _item(
            "torch",
            "2.11.0",
            "fsspec>=0.8.5",
            "sympy>=1.13.3",
            'nvidia-cublas==13.1.0.3; platform_system == "Linux"',
            'triton==3.6.0; platform_system == "Linux"',
            requested=True,
        ),
        _item("fbgemm_gpu", "1.6.0", "numpy", requested=True),
        _item("numpy", "2.4.6"),
        _item(
            "datasets",
            "4.0.0",
            "fsspec[http]<=2026.9.0,>=2023.1.0",
            'colorama; sys_platform == "win32"',
            'tomli; python_version < "3.11"',
        ),
        _item("fsspec", "2026.9.0", 'aiohttp!=4.0.0a0; extra == "http"'),
        _item("aiohttp", "3.14.5"),
        _item("tensordict", "0.15.3", "torch>=2.11.0", "numpy"),
        _item("sympy", "1.14.0", "mpmath<1.4,>=1.1.0"),
        _item("mpmath", "1.3.0"),
        _item("nvidia-cublas", "13.1.0.3"),
        _item("triton", "3.6.0"),
        _item("colorama", "0.4.6"),
        _item("tomli", "2.2.1"),
        _item("pytest", "9.0.0"),
    ],
}
TORCH_ONLY = {"torch", "sympy", "mpmath", "nvidia-cublas", "triton"}
FOR_OTHER_MACHINES = {"colorama", "tomli", "pytest"}


def _target(**kw) -> Target:
    return Target(pair=versions.pair_for_torch("2.11"), cuda=True, **kw)


def test_target_already_having_torch_gets_no_torch_nor_what_only_torch_needs() -> None:
    names = {name for name, _ in wheelhouse.wanted(REPORT, _target())}
    assert names == {"fbgemm-gpu", "numpy", "datasets", "fsspec", "aiohttp", "tensordict"}
    # fsspec stays although torch brings it: datasets pins a range the target's may miss


def test_with_torch_the_whole_resolution_for_this_machine_comes() -> None:
    wanted = dict(wheelhouse.wanted(REPORT, _target(with_torch=True)))
    all_names = {canonicalize_name(i["metadata"]["name"]) for i in REPORT["install"]}
    assert set(wanted) == all_names - FOR_OTHER_MACHINES - {"recsuite"}
    assert set(wanted) >= TORCH_ONLY and wanted["torch"] == "2.11.0"


def test_markers_are_evaluated_for_the_target_python() -> None:
    names = {name for name, _ in wheelhouse.wanted(REPORT, _target(python="3.10"))}
    assert "tomli" in names and "colorama" not in names


@pytest.mark.parametrize("pair", versions.PAIRS, ids=lambda p: p.minor)
@pytest.mark.parametrize("cuda", [True, False], ids=["cuda", "cpu"])
def test_roots_and_install_lines_come_from_the_pair(pair: versions.Pair, cuda: bool) -> None:
    target = Target(pair=pair, cuda=cuda)
    fbgemm = f"{'fbgemm-gpu' if cuda else 'fbgemm-gpu-cpu'}=={pair.fbgemm}"
    wheel = Path("w/recsuite-0.1.0-py3-none-any.whl")
    assert wheelhouse.roots(target, wheel) == [f"{wheel}[scaleout]", f"torch=={pair.torch}", fbgemm]
    first, second = wheelhouse.install_lines(target, "/wh")
    assert (
        first
        == f'python -m pip install --no-index --find-links "/wh" "recsuite[scaleout]" {fbgemm}'
    )
    assert second.endswith(f"--no-deps torchrec=={pair.torchrec}")
    assert "torch==" not in first
    with_torch = wheelhouse.install_lines(Target(pair=pair, cuda=cuda, with_torch=True), "/wh")
    assert with_torch[0].endswith(f"torch=={pair.torch}")


def test_platform_tags_reach_down_to_the_oldest_manylinux() -> None:
    tags = wheelhouse.platform_tags("manylinux_2_28_x86_64")
    assert tags[0] == "manylinux_2_28_x86_64" and tags[-1] == "manylinux1_x86_64"
    assert "manylinux_2_27_x86_64" in tags and "manylinux2014_x86_64" in tags
    assert wheelhouse.platform_tags("manylinux_2_17_aarch64")[:2] == [
        "manylinux_2_17_aarch64",
        "manylinux2014_aarch64",
    ]
    flags = wheelhouse.target_flags(_target(python="3.12"))
    assert flags[:5] == [
        "--only-binary=:all:",
        "--implementation",
        "cp",
        "--python-version",
        "3.12",
    ]
    assert flags.count("--platform") == len(tags)
    with pytest.raises(ValueError, match="manylinux"):
        wheelhouse.platform_tags("win_amd64")


def test_arguments_pick_the_pair_and_refuse_unsupported_torch(capsys) -> None:
    target, folder = wheelhouse.parse_target(["--torch", "2.11", "--cuda"])
    assert target == Target(pair=versions.PAIRS[0], cuda=True)
    assert folder == Path("wheelhouse/torch2.11-cuda-cp311-manylinux_2_28_x86_64")
    target, _ = wheelhouse.parse_target(["--torch", "2.14.1", "--cpu", "--with-torch"])
    assert (target.pair.fbgemm, target.cuda, target.with_torch) == ("1.9.0", False, True)
    with pytest.raises(SystemExit):
        wheelhouse.parse_target(["--torch", "2.15"])
    assert "supported: 2.11, 2.12, 2.13, 2.14" in capsys.readouterr().err


def test_size_table_lists_biggest_first(tmp_path: Path) -> None:
    for name, size in [("small-1-py3-none-any.whl", 10), ("big-1-py3-none-any.whl", 3 << 20)]:
        (tmp_path / name).write_bytes(b"\0" * size)
    (tmp_path / "install.sh").write_text("not a wheel")
    lines = wheelhouse.size_table(tmp_path).splitlines()
    assert lines[0] == f"2 wheels, 3.0 MiB in {tmp_path}"
    assert lines[2].split() == ["3.0", "big-1-py3-none-any.whl"]
    assert lines[3].split() == ["0.0", "small-1-py3-none-any.whl"]
