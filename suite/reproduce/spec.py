"""Reproduction specs: the runs a paper's claims need and the claims themselves.

A spec is YAML in ``suite/reproductions/<paper>.yaml``::

    paper: qr
    title: Compositional Embeddings Using Complementary Partitions (Shi et al. 2019)
    profiles:                      # partial run configs every run of the profile starts from
      quick: {base: {dataset: {name: criteo-synth}}}
      full:  {base: {dataset: {name: criteo-kaggle, protocol: dlrm}, device: cuda}, seeds: [0, 1, 2]}
    runs:                          # partial run configs merged over the profile's base
      full: {embedding: {name: full}}
      qr: {embedding: {name: qr, options: {collisions: 4}}}
    claims:
      - {id: qr-near-full, text: ..., kind: within, left: qr.test_auc, right: full.test_auc, tolerance: 0.01}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from suite.config import Frozen, format_validation_error, load_yaml
from suite.errors import ConfigError
from suite.registry import unknown_name_message

SPEC_DIR = Path(__file__).resolve().parent.parent / "reproductions"

Operand = float | str | dict[str, list[str]]


class Profile(Frozen):
    """What every run of a profile starts from, and the seeds it runs."""

    base: dict[str, Any] = Field(default_factory=dict)
    seeds: list[int] = Field(default_factory=lambda: [0])
    runs: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="per-run extra config for this profile only"
    )


class Claim(Frozen):
    """A comparison of measured figures.

    kinds: ``less`` (left < right - margin), ``greater`` (left > right + margin),
    ``within`` (|left - right| <= tolerance), ``at_most`` (left <= right),
    ``at_least`` (left >= right). Operands: a number, ``"run.metric"``, or
    ``{ratio: [a, b]}`` / ``{diff: [a, b]}`` of two such references.
    """

    id: str
    text: str
    kind: Literal["less", "greater", "within", "at_most", "at_least"]
    left: Operand
    right: Operand
    margin: float = 0.0
    tolerance: float = 0.0
    profiles: list[str] | None = Field(
        None, description="profiles the claim applies to (default all)"
    )

    @field_validator("left", "right")
    @classmethod
    def _check_operand(cls, value: Operand) -> Operand:
        if isinstance(value, dict):
            if len(value) != 1 or next(iter(value)) not in ("ratio", "diff"):
                raise ValueError("a derived operand is {ratio: [a, b]} or {diff: [a, b]}")
            refs = next(iter(value.values()))
            if len(refs) != 2 or not all(isinstance(r, str) and "." in r for r in refs):
                raise ValueError("ratio/diff take two 'run.metric' references")
        elif isinstance(value, str) and "." not in value:
            raise ValueError(f"a reference looks like 'run.metric', got {value!r}")
        return value

    def references(self) -> list[str]:
        refs: list[str] = []
        for operand in (self.left, self.right):
            if isinstance(operand, str):
                refs.append(operand)
            elif isinstance(operand, dict):
                refs.extend(next(iter(operand.values())))
        return refs


class ReproductionSpec(Frozen):
    """One paper's reproduction."""

    paper: str
    title: str
    link: str | None = None
    profiles: dict[str, Profile]
    runs: dict[str, dict[str, Any]]
    claims: list[Claim]

    @model_validator(mode="after")
    def _check_references(self) -> ReproductionSpec:
        for claim in self.claims:
            for ref in claim.references():
                run = ref.split(".", 1)[0]
                if run not in self.runs:
                    raise ValueError(
                        f"claim {claim.id}: unknown run {run!r} (runs: {', '.join(self.runs)})"
                    )
        ids = [c.id for c in self.claims]
        if len(ids) != len(set(ids)):
            raise ValueError("claim ids must be unique")
        return self


def list_specs(directory: Path = SPEC_DIR) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.yaml"))


def load_spec(name_or_path: str | Path, directory: Path = SPEC_DIR) -> ReproductionSpec:
    """Load a spec by paper name (``qr``) or path; errors name the file and field."""
    path = Path(name_or_path)
    if not path.suffix:
        path = directory / f"{name_or_path}.yaml"
        if not path.is_file():
            names = list_specs(directory)
            raise ConfigError(unknown_name_message("paper", str(name_or_path), names))
    data = load_yaml(path)
    try:
        return ReproductionSpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(
            f"invalid reproduction spec {path}: {format_validation_error(exc)}"
        ) from None
