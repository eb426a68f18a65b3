"""Housekeeping of a prepared slot (the cache folder of one dataset + protocol + options).

A prepare works in dot-named siblings of the slot: ``.<slot>.spill-<pid>-*`` (pass-1
files), ``.<slot>.tmp-<pid>-*`` (the new arrays) and, for a moment while publishing,
``.<slot>.old-<pid>`` (the previous arrays). A killed process leaves them behind; the
next prepare in the same folder removes those of dead processes, and whoever next opens
the slot puts a stranded ``.old-*`` back when the slot itself is missing, so a crash
between the two renames of a publish never loses the dataset.

Replacing a slot's data by data prepared from *other* raw files is refused unless forced:
the slot is named by options only, and later runs would otherwise use the new data
without a word.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

from suite.errors import DataError

MANIFEST = "manifest.json"
_WORK = re.compile(r"^\.(?P<slot>.+)\.(?P<kind>spill|tmp|old)-(?P<rest>.*)$")
_PID = re.compile(r"^(\d+)(?:-|$)")


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def _stale(entry: Path, started: float) -> bool:
    """A work folder of a dead process (or, for names without a pid, one older than
    ``started``)."""
    match = _WORK.match(entry.name)
    if match is None:
        return False
    pid = _PID.match(match.group("rest"))
    if pid is not None:
        return not _pid_alive(int(pid.group(1)))
    try:
        return entry.stat().st_mtime < started
    except OSError:
        return False


def recover(slot: Path) -> None:
    """Put back a slot that a crash between the two renames of a publish left missing: the
    newest complete ``.<slot>.old-*`` of a dead process becomes the slot again."""
    if (slot / MANIFEST).is_file() or not slot.parent.is_dir():
        return
    olds = []
    for entry in slot.parent.glob(f".{slot.name}.old-*"):
        if (entry / MANIFEST).is_file() and _stale(entry, time.time()):
            olds.append(entry)
    for old in sorted(olds, key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            if slot.exists() and not any(slot.iterdir()):
                slot.rmdir()
            os.replace(old, slot)
            return
        except OSError:  # another process recovered it first, or the slot came back
            if (slot / MANIFEST).is_file():
                return


def remove_stale(parent: Path, started: float) -> list[Path]:
    """Remove the spill/tmp/old folders of dead prepares in ``parent``; returns them.
    Each slot is recovered first, so a stranded ``.old-*`` is put back, not deleted."""
    if not parent.is_dir():
        return []
    removed = []
    for entry in sorted(parent.iterdir()):
        match = _WORK.match(entry.name)
        if match is None or not entry.is_dir() or not _stale(entry, started):
            continue
        if match.group("kind") == "old":
            recover(parent / match.group("slot"))
            if not entry.exists():
                continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def _describe(sources: list[dict[str, Any]]) -> str:
    if not sources:
        return "no raw files (generated)"
    return ", ".join(
        f"{s.get('name', '?')} ({s.get('bytes', '?')} bytes, sha256 {str(s.get('sha256', ''))[:12]})"
        for s in sources
    )


def _identity(sources: list[dict[str, Any]]) -> list[tuple[Any, Any]]:
    return [(s.get("sha256"), s.get("bytes")) for s in sources]


def check_replace(slot: Path, manifest: dict[str, Any], force: bool) -> None:
    """Refuse (one line) to replace a slot holding data from other raw files, unless
    ``force``. A slot whose manifest is unreadable holds nothing worth keeping."""
    path = slot / MANIFEST
    if force or not path.is_file():
        return
    try:
        existing = json.loads(path.read_text())
        old = list(existing.get("sources") or [])
    except (OSError, ValueError, AttributeError):
        return
    new = list(manifest.get("sources") or [])
    if _identity(old) == _identity(new):
        return
    raise DataError(
        f"{slot} holds {existing.get('dataset', 'a dataset')} prepared from {_describe(old)} "
        f"(fingerprint {str(existing.get('fingerprint', '?'))[:12]}); refusing to replace it with "
        f"data from {_describe(new)}: pass --force to replace it, or --cache-dir to keep both"
    )
