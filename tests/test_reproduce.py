"""Reproduction specs, claim checks and the report."""

from __future__ import annotations

from pathlib import Path

import pytest

from suite.cli import main
from suite.errors import ConfigError
from suite.reproduce.claims import evaluate, resolve
from suite.reproduce.report import comparable
from suite.reproduce.spec import Claim, list_specs, load_spec
from tests.conftest import TINY_DATA

FIGURES = {"qr": {"test_auc": 0.79, "bytes": 100.0}, "hash": {"test_auc": 0.78, "bytes": 400.0}}


@pytest.mark.parametrize(
    ("kind", "left", "right", "extra", "holds"),
    [
        ("greater", "qr.test_auc", "hash.test_auc", {}, True),
        ("greater", "qr.test_auc", "hash.test_auc", {"margin": 0.02}, False),
        ("less", "qr.test_auc", "hash.test_auc", {}, False),
        ("within", "qr.test_auc", "hash.test_auc", {"tolerance": 0.011}, True),
        ("within", "qr.test_auc", "hash.test_auc", {"tolerance": 0.009}, False),
        ("at_most", {"ratio": ["qr.bytes", "hash.bytes"]}, 0.25, {}, True),
        ("at_least", {"diff": ["qr.test_auc", "hash.test_auc"]}, 0.02, {}, False),
        ("at_least", "qr.missing", 0.5, {}, None),
    ],
)
def test_claims_compare_figures(kind, left, right, extra, holds) -> None:  # noqa: ANN001
    claim = Claim(id="c", text="t", kind=kind, left=left, right=right, **extra)
    assert evaluate(claim, FIGURES).holds is holds


def test_derived_operands() -> None:
    assert resolve({"ratio": ["qr.bytes", "hash.bytes"]}, FIGURES) == 0.25
    assert resolve({"diff": ["qr.test_auc", "hash.test_auc"]}, FIGURES) == pytest.approx(0.01)


def test_every_shipped_spec_loads_and_has_both_profiles() -> None:
    names = list_specs()
    assert {"dlrm"} <= set(names)
    for name in names:
        spec = load_spec(name)
        assert {"quick", "full"} <= set(spec.profiles), name
        assert spec.claims, name


def test_bad_spec_names_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "paper: x\ntitle: t\nprofiles: {quick: {}}\nruns: {a: {}}\n"
        "claims: [{id: c, text: t, kind: less, left: b.test_auc, right: 1}]\n"
    )
    with pytest.raises(ConfigError, match=r"bad.yaml.*claim c: unknown run 'b'"):
        load_spec(path)
    with pytest.raises(ConfigError, match="unknown paper 'dlmr'. Did you mean 'dlrm'"):
        load_spec("dlmr")


def test_rerun_gives_the_same_report(tmp_path: Path) -> None:
    sets = [f"--set=dataset.options.{k}={v}" for k, v in TINY_DATA.items()]
    sets += ["--set=train.threads=1", "--set=train.batch_size=128"]
    reports = []
    for attempt in range(2):
        out = tmp_path / f"report{attempt}"
        assert main(["reproduce", "--paper", "dlrm", "--quiet", "--out", str(out), *sets]) == 0
        reports.append((out / "REPORT.md").read_text())
        assert (out / "auc_vs_bytes.png").stat().st_size > 0
    assert "dlrm-learns-synthetic" not in reports[0]  # ids are not shown; the claim text is
    assert "DLRM learns the synthetic teacher" in reports[0]
    assert "#/runs/" in reports[0]
    assert comparable(reports[0]) == comparable(reports[1])


REPO = Path(__file__).resolve().parents[1]
CHECKED_IN = REPO / "results" / "quick" / "REPORT.md"


def test_checked_in_quick_report_covers_every_quick_claim() -> None:
    from suite.reproduce.runner import select_specs, selected_claims

    report = CHECKED_IN.read_text()
    for spec in select_specs(None, "quick"):
        assert f"## {spec.paper}:" in report
        for claim in selected_claims(spec, "quick", None):
            rows = [line for line in report.splitlines() if line.startswith(f"| {claim.text} |")]
            assert len(rows) == 1, claim.id
            assert rows[0].rstrip().endswith(("**holds** |", "**does not hold** |")), claim.id
    for plot in ("auc_vs_bytes.png", "throughput.png", "scaling.png"):
        assert (CHECKED_IN.parent / plot).stat().st_size > 0


@pytest.mark.slow
def test_checked_in_quick_report_is_what_the_code_produces(tmp_path: Path) -> None:
    out = tmp_path / "quick"
    assert main(["reproduce", "--profile", "quick", "--quiet", "--out", str(out)]) == 0
    assert comparable((out / "REPORT.md").read_text()) == comparable(CHECKED_IN.read_text())
