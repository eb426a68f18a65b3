"""The record of what reproduced a submission: ``leaderboard/verifications.yaml``.

Two kinds of record, one list per file:

* a :class:`Verification`: ``suite leaderboard verify FILE --record`` re-ran one recorded
  seed and it agreed with the recorded metrics;
* a :class:`Regeneration`: ``suite leaderboard import-reproduction`` built the file from a
  reproduction's committed runs (``results/<profile>/runs``), and it rebuilds from them.

A record is keyed by the file name but does not rest on it: it binds the submission's
content hash (SHA-256 of its canonical JSON) and the figures it reproduced (a re-run: the
seed's values it measured; a regeneration: a digest of each run file's figures), and
:func:`binding_problem` refuses a record that does not match the file it is filed under,
so a record copied under an edited, renamed file verifies nothing. Until a submission has a
record it is shown as unverified and ranked below the verified entries: metrics that are
merely self-consistent (mean and std agree with the seeds) may still be made up.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from suite.fileio import write_text_atomic
from suite.leaderboard.metrics import declared
from suite.leaderboard.schema import (
    FILENAME_PATTERN,
    Commit,
    Finite,
    LongText,
    MetricName,
    Name,
    Notes,
    Sha256,
    Submission,
    Version,
    load_yaml_model,
)

VERIFICATIONS = "verifications.yaml"
HEADER = (
    "# What reproduced each submission's recorded metrics, one list per file.\n"
    "# Appended by `suite leaderboard verify FILE --record` (re-runs) and\n"
    "# `suite leaderboard import-reproduction` (regenerated from committed runs);\n"
    "# each record binds the file's content hash and figures. Do not edit by hand.\n"
)
FileName = Annotated[str, StringConstraints(pattern=FILENAME_PATTERN.pattern)]
RunPath = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+){0,15}$", max_length=300)
]


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
    # what it reproduced: the submission's content hash and the seed's figures the re-run
    # measured (every metric but timings); a record without them binds nothing and fails
    content_hash: Sha256 | None = None
    figures: dict[MetricName, Finite] = Field(default_factory=dict)
    note: Notes | None = None


class Regeneration(BaseModel):
    """A submission built from a reproduction's committed runs, which rebuild it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["regenerated"] = "regenerated"
    reproduction: Name  # the profile, e.g. ``curve`` for results/curve/runs
    date: dt.date
    suite_commit: Commit  # the latest commit the runs were made at
    rule: LongText
    content_hash: Sha256
    # each seed's run file (relative to the leaderboard's parent folder, the repository
    # root) -> :func:`run_digest` of the figures read from it
    runs: dict[RunPath, Sha256] = Field(min_length=1)


Record = Verification | Regeneration


class VerificationFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = 1
    verified: dict[FileName, list[Record]] = Field(default_factory=dict)


@dataclass
class Verifications:
    """In-memory view of ``verifications.yaml``."""

    data: VerificationFile = field(default_factory=VerificationFile)

    @classmethod
    def load(cls, path: Path) -> Verifications:
        """Read the record (an absent file is an empty record); errors name the file."""
        data = load_yaml_model(path, VerificationFile)
        return cls() if data is None else cls(data)

    def of(self, file: str) -> list[Record]:
        return list(self.data.verified.get(Path(file).name, []))

    def is_verified(self, file: str) -> bool:
        return bool(self.of(file))

    def add(self, file: str, record: Record) -> None:
        self.data.verified.setdefault(Path(file).name, []).append(record)

    def to_yaml(self) -> str:
        data = self.data.model_dump(mode="json")
        ordered = {"version": data["version"], "verified": dict(sorted(data["verified"].items()))}
        return HEADER + yaml.safe_dump(ordered, sort_keys=True, default_flow_style=False)

    def save(self, path: Path) -> None:
        write_text_atomic(path, self.to_yaml())


RUN_FIELDS = (
    "seed",
    "config",
    "config_hash",
    "data_fingerprint",
    "metrics",
    "higher_is_better",
    "environment",
    "mlflow_run_id",
    "created",
)
"""The fields of a stored run (:class:`suite.results.TaskResult`) a regenerated entry is
built from, and so what :func:`run_digest` binds."""


def run_digest(result: Any) -> str:
    """SHA-256 of the canonical JSON of the fields of one stored run that the entry is
    built from (:data:`RUN_FIELDS`; ``result`` a ``TaskResult``): a run whose figures change
    changes its digest, a field added beside them does not."""
    data = result.model_dump(mode="json")
    picked = {key: data.get(key) for key in RUN_FIELDS}
    text = json.dumps(picked, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def bound_figures(sub: Submission, seed: int, values: dict[str, float]) -> dict[str, float]:
    """The figures a re-run of ``seed`` binds: every metric of ``values`` the submission's
    seed records, except timings (which are not compared)."""
    run = next(r for r in sub.seeds if r.seed == seed)
    return {
        name: float(values[name])
        for name in sorted(run.metrics)
        if name in values and not _timing(sub.task, name)
    }


def _timing(task: str, metric: str) -> bool:
    spec = declared(task, metric)
    return spec is not None and spec.kind == "measured"


def _short(digest: str | None) -> str:
    return "none" if digest is None else f"{digest[:12]}..."


def binding_problem(record: Record, sub: Submission, root: Path) -> str | None:
    """Why ``record`` does not bind ``sub`` (None: it does), in one line: the content hash
    it binds, the figures it reproduced, or (a regeneration) the committed runs it names.
    ``root`` is the folder a regeneration's run paths are relative to."""
    actual = sub.content_hash()
    if record.content_hash is None:
        return (
            "binds no content hash (a record from before records bound the file and its "
            "figures); it verifies nothing until re-bound or re-run"
        )
    if record.content_hash != actual:
        return (
            f"binds content hash {_short(record.content_hash)} but the file's content hashes "
            f"to {_short(actual)}: the record is of another file's content"
        )
    if isinstance(record, Regeneration):
        return _regeneration_problem(record, sub, root)
    return _rerun_problem(record, sub)


def _rerun_problem(record: Verification, sub: Submission) -> str | None:
    run = next((r for r in sub.seeds if r.seed == record.seed), None)
    if run is None:
        return f"re-ran seed {record.seed}, which the file does not record"
    if not record.figures:
        return f"binds no figures of seed {record.seed}"
    wanted = [m for m in run.metrics if not _timing(sub.task, m)]
    missing = sorted(set(wanted) - set(record.figures))
    if missing:
        return f"does not bind seed {record.seed}'s {', '.join(missing)}"
    exact = record.rule == "bit-identical"
    allowed = 0.0 if exact else record.max_abs_difference
    for name, figure in sorted(record.figures.items()):
        value = run.metrics.get(name)
        if value is None:
            return f"binds {name} of seed {record.seed}, which the file does not record"
        if not math.isfinite(value) or abs(value - figure) > allowed + 1e-12 * max(1, abs(figure)):
            rule = "bit-identical" if exact else f"within {allowed:g}"
            return (
                f"{name} of seed {record.seed} is {value!r} in the file but the re-run "
                f"reproduced {figure!r} ({rule})"
            )
    return None


def _regeneration_problem(record: Regeneration, sub: Submission, root: Path) -> str | None:
    from suite.leaderboard.reproduction import regenerate

    for rel in record.runs:
        parts = PurePosixPath(rel).parts
        if ".." in parts or rel.startswith("/"):
            return f"names run file {rel}, outside the repository"
    try:
        rebuilt, digests = regenerate(root, list(record.runs), record.reproduction, sub.notes)
    except Exception as exc:
        return f"does not regenerate from its committed runs: {exc}"
    for rel, digest in record.runs.items():
        if digests[rel] != digest:
            return (
                f"{rel}: its figures digest to {_short(digests[rel])}, not the recorded "
                f"{_short(digest)}: the committed run changed since the entry was imported"
            )
    if rebuilt.content_hash() != sub.content_hash():
        return (
            f"the committed runs of reproduction {record.reproduction} rebuild content hash "
            f"{_short(rebuilt.content_hash())}, not this file's {_short(sub.content_hash())}"
        )
    return None
