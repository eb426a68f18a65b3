"""The tuned values beside a spec: ``suite/reproductions/tuned/<paper>.<profile>.yaml``,
read (and checked against the spec's space), written, and the command that reproduces
them (their schema: :class:`suite.reproduce.spec.TunedFile`; the studies that find them:
:mod:`suite.reproduce.tuning`)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from suite.config import format_validation_error, load_yaml, set_dotted
from suite.errors import ConfigError
from suite.fileio import write_text_atomic
from suite.reproduce.spec import SPEC_DIR, TUNED_ENV, ReproductionSpec, TunedFile, TunedRun
from suite.studies.spec import CategoricalDistribution, Distribution


def tuned_dir() -> Path:
    """Where tuned files live: ``suite/reproductions/tuned`` (``$RECSUITE_TUNED_DIR``)."""
    return Path(os.environ.get(TUNED_ENV) or SPEC_DIR / "tuned")


def tuned_path(paper: str, profile: str) -> Path:
    return tuned_dir() / f"{paper}.{profile}.yaml"


def tune_command(paper: str, profile: str, sets: list[str], workers: int) -> str:
    """The one command that reproduces a paper's tuned values (``--set`` texts of tracking
    fields, which change no value, left out)."""
    words = ["suite", "reproduce", "--profile", profile, "--paper", paper, "--tune"]
    words += [f"--set={text}" for text in sets if not text.strip().startswith("tracking.")]
    words += ["--workers", str(workers)]
    return shlex.join(words)


def read_tuned(paper: str, profile: str) -> TunedFile:
    """Read a tuned file; a missing or malformed one is an error naming the file."""
    path = tuned_path(paper, profile)
    if not path.is_file():
        raise ConfigError(
            f"profile {profile!r} of paper {paper!r} tunes its runs, but {path} does not exist; "
            f"run `suite reproduce --profile {profile} --paper {paper} --tune --workers 1` first"
        )
    try:
        return TunedFile.model_validate(load_yaml(path))
    except ValidationError as exc:
        raise ConfigError(f"invalid tuned file {path}: {format_validation_error(exc)}") from None


def _inside(dist: Distribution, value: Any) -> bool:
    if isinstance(dist, CategoricalDistribution):
        return value in dist.choices
    return isinstance(value, int | float) and dist.low <= value <= dist.high


def space_mismatch(
    entry: TunedRun | None, space: dict[str, Distribution], run_id: str
) -> str | None:
    """Why a tuned entry no longer fits the space its run searches (other params, or a
    value outside it); ``None`` when it fits. One check for reading and for resuming."""
    if entry is None or set(entry.values) != set(space):
        return (
            f"run {run_id!r} was tuned over {sorted(entry.values) if entry else 'nothing'}, "
            f"the spec searches {sorted(space)}"
        )
    for key, value in entry.values.items():
        if not _inside(space[key], value):
            return f"runs.{run_id}.values.{key}: {value!r} is outside the spec's space"
    return None


def tuned_overrides(spec: ReproductionSpec, profile: str, run_id: str) -> dict[str, Any]:
    """The tuned values ``run_id`` trains with, as nested config dicts (``{}`` when the
    profile or the run is not tuned). A tuned file whose keys or values no longer fit the
    spec's space is stale: an error says to tune again."""
    tuning = spec.profiles[profile].tuning
    source = tuning.source(run_id) if tuning is not None else None
    if tuning is None or source is None:
        return {}
    key = spec.tuned_key(profile)
    entry = read_tuned(spec.paper, key).runs.get(source)
    mismatch = space_mismatch(entry, tuning.run_space(source), source)
    if mismatch is not None:
        raise ConfigError(
            f"tuned file {tuned_path(spec.paper, key)}: {mismatch}; "
            f"tune again: {tune_command(spec.paper, profile, [], 1)}"
        )
    assert entry is not None
    nested: dict[str, Any] = {}
    for key, value in entry.values.items():
        set_dotted(nested, key, value)
    return nested


def write_tuned(tuned: TunedFile) -> Path:
    """Write a tuned file atomically; returns its path."""
    header = (
        "# Written by `suite reproduce --tune` (see suite/reproductions/tuned/README.md); "
        "do not edit.\n"
    )
    data = tuned.model_dump(mode="json")
    for entry in data["runs"].values():  # unset newer fields: older entries stay as written
        for key in TunedRun.OPTIONAL:
            if entry.get(key) is None:
                entry.pop(key, None)
    body = yaml.safe_dump(data, sort_keys=False, width=10**6)
    return write_text_atomic(tuned_path(tuned.paper, tuned.profile), header + body)
