"""Named YAML presets shipped with the package (``suite/presets/<kind>/<name>.yaml``).

Model size presets (``kind="models"``: ``dlrm-xs`` .. ``wukong-xl``) are partial run configs
(``model: {name, options}`` and ``embedding: {options: {dim}}``) that ``suite run --config``
accepts as they are and that the ``scaling`` task lays over a run's own config.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from suite.errors import ConfigError, SuiteError
from suite.registry import did_you_mean, first_sentence, unknown_name_message

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
        raise UnknownPresetError(unknown_name_message(f"{kind} preset", name, valid))
    return PRESETS_DIR / kind / f"{name}.yaml"


def preset_description(name: str, kind: str = "models") -> str:
    """The first sentence of the preset's opening comment (every preset file starts with one)."""
    lines = preset_path(name, kind).read_text(encoding="utf-8").splitlines()
    comment = itertools.takewhile(lambda line: line.startswith("#"), lines)
    return first_sentence(" ".join(line.lstrip("# ") for line in comment))


def resolve_config_file(value: str | Path) -> Path:
    """A ``--config`` value: an existing YAML file, else a preset's name (``wukong-s``)."""
    path = Path(value)
    if path.exists() or path.suffix in (".yaml", ".yml") or len(path.parts) > 1:
        return path
    names = list_presets()
    if str(value) in names:
        return preset_path(str(value))
    raise ConfigError(
        f"--config {value}: no such file, and no preset of that name."
        f"{did_you_mean(str(value), names)} Presets: {', '.join(names)} (see `suite list presets`)"
    )
