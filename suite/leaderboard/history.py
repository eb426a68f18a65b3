"""What changed in the suite since a submission was made, and how to re-run it as it ran.

A submission records its config as the suite that made it resolved it. A field added to
the config since then is missing from the record, and this suite would fill it with
today's default, which may train differently. :data:`ADDED_SINCE` is the one table of
such fields, each with the value that reproduces the behaviour from before the field
existed; :func:`resolve_recorded` applies it when a stored submission is resolved (by
``validate`` and ``verify``).

A submission is *stale* when this suite can no longer re-run it as recorded: its config
resolves to fields this table does not know (a default added since whose old behaviour is
not recorded here), or its verification record predates a change in
:data:`RESULT_CHANGES` (a fix that alters what a recorded config trains to).
"""

from __future__ import annotations

import datetime as dt
import functools
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suite.config import RunConfig, validate_config


@dataclass(frozen=True)
class AddedField:
    """A config field added after submissions existed, and its behaviour before."""

    path: str  # dotted, e.g. "model.options.init"
    old: Any  # the value that reproduces the behaviour from before the field existed
    commit: str  # the commit that added it
    why: str


ADDED_SINCE: tuple[AddedField, ...] = (
    AddedField(
        "embedding.options.init",
        "torch",
        "96fbe01",
        "before `init` every physical table started uniform in ±sqrt(1/rows), which is "
        "`init: torch` (suite/embeddings/base.py: Init)",
    ),
    AddedField(
        "model.options.init",
        "torch",
        "926ee00",
        "before `init` the backbones kept torch's nn.Linear defaults, which is `init: torch`",
    ),
)
"""Fields added since submissions were first made: the one table ``verify`` and
``validate`` use to resolve a record that lacks them."""


@dataclass(frozen=True)
class ResultChange:
    """A change that alters what an already recorded config trains to."""

    commit: str
    date: dt.date
    what: str


RESULT_CHANGES: tuple[ResultChange, ...] = ()
"""Changes after which an earlier verification no longer vouches for a re-run: add one
(commit, date, what) when a fix changes the metrics a recorded config reproduces. None so
far: every change since the first submission either added a field (:data:`ADDED_SINCE`)
or left recorded configs' results as they were."""


@dataclass(frozen=True)
class Resolved:
    """A recorded config as this suite resolves it with :data:`ADDED_SINCE` applied."""

    config: RunConfig
    applied: tuple[str, ...]  # table fields the record lacked, set to their old value
    unknown: tuple[str, ...]  # fields resolved that neither the record nor the table holds


def flat(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as ``{"a.b.c": value}`` (an empty dict is a value)."""
    if isinstance(data, dict) and data:
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(flat(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): data}


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        data = data.setdefault(key, {})
    data[last] = value


def with_old_defaults(recorded: dict[str, Any], resolved_now: dict[str, Any]) -> list[str]:
    """Set, in ``recorded`` (in place), every :data:`ADDED_SINCE` field that this suite
    resolves but the record lacks; returns their dotted paths."""
    have, now = flat(recorded), flat(resolved_now)
    applied = []
    for added in ADDED_SINCE:
        if added.path in now and added.path not in have:
            _set(recorded, added.path, added.old)
            applied.append(added.path)
    return applied


def resolve_recorded(config: dict[str, Any], source: str = "config") -> Resolved:
    """``config`` (a submission's, with a seed) resolved by this suite as the suite that
    recorded it did: fields added since take their old value (:data:`ADDED_SINCE`).
    Raises ``ConfigError`` when it does not resolve at all."""
    import copy

    patched = copy.deepcopy(config)
    applied = with_old_defaults(patched, validate_config(config, source).identity())
    resolved = validate_config(patched, source)
    known = set(flat(config)) | set(applied)
    unknown = tuple(sorted(set(flat(resolved.identity())) - known))
    return Resolved(resolved, tuple(applied), unknown)


def recorded_hash(resolved: Resolved) -> str:
    """The config hash of ``resolved`` as the recording suite computed it: the identity
    without the table's fields the record lacked."""
    from suite.config import stable_hash

    identity = resolved.config.identity()
    for path in resolved.applied:
        *parents, last = path.split(".")
        node = identity
        for key in parents:
            node = node[key]
        node.pop(last, None)
    return stable_hash(identity)


@functools.cache
def _contains(commit: str, change: str) -> bool | None:
    """Whether git says ``commit`` has ``change`` in its history (None: cannot tell)."""
    root = Path(__file__).resolve().parent.parent.parent
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "merge-base", "--is-ancestor", change, commit],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return {0: True, 1: False}.get(done.returncode)


def predating_change(
    commit: str, date: dt.date, changes: tuple[ResultChange, ...] | None = None
) -> ResultChange | None:
    """The newest change in ``changes`` (default :data:`RESULT_CHANGES`) that a
    verification made at ``commit`` on ``date`` lacks: by git history where git knows the
    commit, else by date."""
    sha = commit.removesuffix("-dirty")
    table = RESULT_CHANGES if changes is None else changes
    for change in sorted(table, key=lambda c: c.date, reverse=True):
        has = _contains(sha, change.commit) if sha != "unknown" else None
        if has is False or (has is None and date < change.date):
            return change
    return None
