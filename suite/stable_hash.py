"""The suite's one content hash of JSON-able data (config hashes, cache keys), on the
lowest floor so that torch-free and pydantic-free code (``suite list``) can use it."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def stable_hash(data: Any) -> str:
    """16 hex digits of the sha256 of ``data`` as canonical JSON (sorted keys, no spaces,
    ASCII): equal data give equal hashes on every machine."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
