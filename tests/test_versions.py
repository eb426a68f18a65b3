"""The supported torch / fbgemm-gpu / torchrec pairs (issue 37, item 1): one table that
pyproject, the noxfile and the fbgemm check read."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from suite import kernel_backend, versions

ROOT = Path(__file__).resolve().parents[1]


def test_fbgemm_minor_is_torch_minor_minus_five_and_torchrec_follows_fbgemm() -> None:
    for pair in versions.PAIRS:
        torch_minor = int(pair.minor.split(".")[1])
        assert versions.minor_of(pair.fbgemm) == f"1.{torch_minor - 5}"
        assert versions.minor_of(pair.torchrec) == versions.minor_of(pair.fbgemm)
    minors = [int(p.minor.split(".")[1]) for p in versions.PAIRS]
    assert minors == list(range(minors[0], minors[-1] + 1))  # no release line skipped


def test_pyproject_states_the_range_and_the_default_pair() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    default = versions.default_pair()
    assert versions.torch_requirement() == "torch>=2.11,<2.15"
    assert versions.torch_requirement() in project["dependencies"]
    extras = project["optional-dependencies"]
    assert extras["cpu"] == [f"fbgemm-gpu-cpu=={default.fbgemm}"]
    assert extras["cuda"] == [f"fbgemm-gpu=={default.fbgemm}"]


def test_noxfile_reads_the_pairs_instead_of_naming_versions() -> None:
    source = (ROOT / "noxfile.py").read_text()
    strings = {
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    for pair in versions.PAIRS:
        for version in (pair.torch, pair.fbgemm, pair.torchrec):
            assert not any(version in s for s in strings), version


def test_pair_lookup_by_any_patch_or_local_build() -> None:
    assert versions.pair_for_torch("2.13.0+cpu") == versions.default_pair()
    assert versions.pair_for_torch("2.11.3").fbgemm == "1.6.0"
    assert versions.pair_for_torch("2.15.0") is None
    assert versions.pair_for_fbgemm("1.9.0").torch == "2.14.1"
    with pytest.raises(ValueError, match="not a release"):
        versions.minor_of("nightly")


def test_mismatch_names_what_to_install() -> None:
    assert versions.mismatch("2.13.0+cpu", "1.8.0") is None
    line = versions.mismatch("2.11.0", "1.8.0")
    assert line == (
        "fbgemm-gpu 1.8.0 (built for torch 2.13) does not match torch 2.11.0: "
        "install fbgemm-gpu 1.6.0 (fbgemm-gpu-cpu on CPU machines)"
    )
    assert "outside the supported releases (2.11, 2.12, 2.13, 2.14)" in versions.mismatch(
        "2.10.0", "1.5.0"
    )
    assert versions.mismatch("2.12.1", None) == (
        "no fbgemm-gpu installed; torch 2.12 pairs with fbgemm-gpu 1.7.0"
    )


def test_kernel_backend_hint_reads_the_installed_versions() -> None:
    torch_version = metadata.version("torch")
    assert kernel_backend.version_hint() == versions.mismatch(
        torch_version, kernel_backend._installed("fbgemm-gpu", "fbgemm-gpu-cpu")
    )
    if kernel_backend.fbgemm_available()[0]:  # the installed pair matches: no hint
        assert kernel_backend.version_hint() is None


def test_versions_and_wheelhouse_import_without_torch() -> None:
    code = "import sys, suite.versions, suite.wheelhouse; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_reason_names_the_innermost_cause() -> None:
    try:
        try:
            raise OSError("libnvidia-ml.so.1: cannot open shared object file")
        except OSError as inner:
            raise OSError("Could not load this library: /x/fbgemm_gpu_py.so") from inner
    except OSError as exc:
        reason = kernel_backend._one_line(exc)
    assert reason == "OSError: libnvidia-ml.so.1: cannot open shared object file"
