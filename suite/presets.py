"""Named YAML presets shipped with the package (``suite/presets/<kind>/<name>.yaml``).

Model size presets (``kind="models"``: ``dlrm-xs`` .. ``wukong-xl``) are partial run configs
(``model: {name, options}`` and ``embedding: {options: {dim}}``) that ``suite run --config``
accepts as they are and that the ``scaling`` task lays over a run's own config.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from suite.errors import SuiteError

PRESETS_DIR = Path(__file__).resolve().parent / "presets"


class UnknownPresetError(SuiteError):
    """An unknown preset name; the message lists valid names and a suggestion."""


def list_presets(kind: str = "models") -> list[str]:
    """Names (file stems) of the presets of ``kind``, sorted."""
    return sorted(p.stem for p in (PRESETS_DIR / kind).glob("*.yaml"))


def preset_path(name: str, kind: str = "models") -> Path:
    """The YAML file of preset ``name``; unknown names raise :class:`UnknownPresetError`."""
    valid = list_presets(kind)
    if name not in valid:
        close = difflib.get_close_matches(name, valid, n=1, cutoff=0.5)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise UnknownPresetError(f"unknown {kind} preset {name!r}.{hint} Valid: {', '.join(valid)}")
    return PRESETS_DIR / kind / f"{name}.yaml"
