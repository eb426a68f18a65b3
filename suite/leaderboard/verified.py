"""The record of re-runs that reproduced a submission: ``leaderboard/verifications.yaml``.

``suite leaderboard verify FILE --record`` appends an entry here when the re-run agrees
with the recorded metrics. It is keyed by the submission's file name, which ends with the
content hash, so a record never carries over to an edited file. Until a submission has a
record it is shown as unverified and ranked below the verified entries: metrics that are
merely self-consistent (mean and std agree with the seeds) may still be made up.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from suite.fileio import write_text_atomic
from suite.leaderboard.schema import (
    FILENAME_PATTERN,
    Commit,
    LongText,
    Version,
    load_yaml_model,
)

VERIFICATIONS = "verifications.yaml"
HEADER = (
    "# Re-runs that reproduced a submission's recorded metrics, one list per file.\n"
    "# Appended by `suite leaderboard verify FILE --record`; do not edit by hand.\n"
)
FileName = Annotated[str, StringConstraints(pattern=FILENAME_PATTERN.pattern)]


class Verification(BaseModel):
    """One re-run of one seed that agreed with the recorded metrics."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int
    date: dt.date
    device: LongText
    machine: LongText
    threads: int = Field(ge=1)
    suite_commit: Commit
    torch: Version
    rule: LongText
    max_abs_difference: float = Field(ge=0, allow_inf_nan=False)


class VerificationFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = 1
    verified: dict[FileName, list[Verification]] = Field(default_factory=dict)


@dataclass
class Verifications:
    """In-memory view of ``verifications.yaml``."""

    data: VerificationFile = field(default_factory=VerificationFile)

    @classmethod
    def load(cls, path: Path) -> Verifications:
        """Read the record (an absent file is an empty record); errors name the file."""
        data = load_yaml_model(path, VerificationFile)
        return cls() if data is None else cls(data)

    def of(self, file: str) -> list[Verification]:
        return list(self.data.verified.get(Path(file).name, []))

    def is_verified(self, file: str) -> bool:
        return bool(self.of(file))

    def add(self, file: str, record: Verification) -> None:
        self.data.verified.setdefault(Path(file).name, []).append(record)

    def to_yaml(self) -> str:
        data = self.data.model_dump(mode="json")
        ordered = {"version": data["version"], "verified": dict(sorted(data["verified"].items()))}
        return HEADER + yaml.safe_dump(ordered, sort_keys=True, default_flow_style=False)

    def save(self, path: Path) -> None:
        write_text_atomic(path, self.to_yaml())
