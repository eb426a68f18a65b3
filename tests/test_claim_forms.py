"""Claims in their papers' own forms: the loader refuses a claim without its form or the
paper's words, non-inferiority tests ``d > -margin``, the suite's stricter bound is a
labelled row of its own, and a claim too small to mean the paper's reads not testable."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from suite.errors import ConfigError
from suite.reproduce.claims import NOT_TESTABLE, evaluate
from suite.reproduce.spec import Claim, ReproductionSpec, list_specs, load_spec

BASE: dict[str, Any] = {
    "id": "a-keeps-auc",
    "text": "A loses at most 0.001 AUC to B",
    "kind": "greater",
    "left": "a.test_auc",
    "right": "b.test_auc",
    "margin": 0.001,
    "form": "non_inferiority",
    "quote": "without significant accuracy loss (abstract)",
}


def claim(**changes: Any) -> Claim:
    data = copy.deepcopy(BASE)
    data.update(changes)
    return Claim.model_validate({k: v for k, v in data.items() if v is not None})


def figures(differences: list[float]) -> dict[str, dict[int, dict[str, float]]]:
    b = {s: {"test_auc": 0.75} for s in range(len(differences))}
    a = {s: {"test_auc": 0.75 + d} for s, d in enumerate(differences)}
    return {"a": a, "b": b}


def test_every_shipped_empirical_claim_names_its_form_and_quotes_the_paper() -> None:
    for name in list_specs():
        for c in load_spec(name).claims:
            if c.basis != "empirical":
                continue
            assert c.form in ("superiority", "non_inferiority", "equivalence"), c.id
            if c.origin == "paper":
                assert c.quote and len(c.quote.strip()) > 10, c.id


@pytest.mark.parametrize(
    ("missing", "words"), [("form", "form is missing"), ("quote", "quote is missing")]
)
def test_a_claim_without_its_form_or_the_papers_words_is_refused(
    missing: str, words: str, tmp_path
) -> None:
    spec = load_spec("fiited").model_dump(mode="json")
    raw = [c for c in spec["claims"] if c["basis"] == "empirical"][0]
    raw[missing] = None
    path = tmp_path / "fiited.yaml"
    import yaml

    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError, match=words) as found:
        load_spec(path)
    assert str(path) in str(found.value) and raw["id"] in str(found.value)


def test_a_form_and_kind_that_disagree_are_refused() -> None:
    with pytest.raises(ValueError, match="form equivalence takes kind within"):
        claim(form="equivalence")
    with pytest.raises(ValueError, match="non_inferiority is kind greater"):
        claim(margin=0.0)


def test_non_inferiority_holds_for_a_method_better_than_the_baseline() -> None:
    # a method 0.002 better: equivalence within 0.001 fails, non-inferiority holds
    rng = np.random.default_rng(0)
    better = figures(list(0.002 + rng.normal(0, 0.0003, 10)))
    assert evaluate(claim(), better).verdict == "holds"
    tost = claim(kind="within", form="equivalence")
    assert evaluate(tost, better).verdict == "does not hold"
    # and one that loses 0.003 does not hold
    worse = figures(list(-0.003 + rng.normal(0, 0.0003, 10)))
    outcome = evaluate(claim(), worse)
    assert outcome.verdict == "does not hold" and outcome.difference.high < -0.001


def test_the_suites_stricter_bound_is_a_labelled_row_of_its_own() -> None:
    paper = claim(
        id="qr-beats",
        text="QR beats hashing",
        form="superiority",
        margin=0.0,
        suite_bound={"margin": 0.001},
    )
    first, second = paper.expand()
    assert (first.id, first.margin, first.bound_of) == ("qr-beats", 0.0, None)
    assert (second.id, second.margin, second.bound_of) == (
        "qr-beats-suite-bound",
        0.001,
        "qr-beats",
    )
    assert second.origin == "suite" and second.label == "QR beats hashing (suite's bound)"
    # +0.0006: beats hashing (the paper's form) but not by the suite's 0.001
    data = figures([0.0006, 0.0005, 0.0007, 0.0006, 0.0005, 0.0006])
    assert [evaluate(c, data).verdict for c in (first, second)] == ["holds", "does not hold"]
    with pytest.raises(ValueError, match="suite_bound takes"):
        claim(suite_bound={"seeds": 3}).expand()


def test_a_claim_whose_object_is_too_small_reads_not_testable_with_the_reason() -> None:
    gate = {"figure": "a.embedding_parameter_bytes", "at_least": 40000, "why": "too few values"}
    data = figures([0.0] * 5)
    for seed in data["a"]:
        data["a"][seed]["embedding_parameter_bytes"] = 5608.0
    outcome = evaluate(claim(testable_if=gate), data)
    assert outcome.verdict == NOT_TESTABLE
    assert "5,608 here, below 40,000: too few values" in outcome.note
    for seed in data["a"]:
        data["a"][seed]["embedding_parameter_bytes"] = 400000.0
    assert evaluate(claim(testable_if=gate), data).verdict != NOT_TESTABLE


def test_a_structural_claim_carries_no_seed_statistics() -> None:
    data = figures([0.0] * 4)
    for seed, ratio in zip(data["a"], [12.8, 12.9, 12.85, 12.85], strict=True):
        data["a"][seed]["write_reduction"] = ratio
    found = evaluate(
        Claim.model_validate(
            {
                "id": "writes-12x",
                "text": "writes 12x less",
                "basis": "structural",
                "kind": "at_least",
                "left": "a.write_reduction",
                "right": 12.0,
            }
        ),
        data,
    )
    assert found.verdict == "holds" and found.test.se == 0.0
    assert found.shifted.low == found.shifted.high == pytest.approx(0.85)
    assert "ranges 0.1 over seeds" in found.note


def test_specs_round_trip_through_the_model() -> None:
    spec = load_spec("qr")
    again = ReproductionSpec.model_validate(
        {
            **spec.model_dump(mode="json"),
            "claims": [c.model_dump() for c in spec.claims if not c.bound_of],
        }
    )
    assert [c.id for c in again.claims] == [c.id for c in spec.claims]
