"""``suite list``: every registry entry with its options and defaults, presets, dataset
protocols and prepared status; a glob filter and ``--json``.

Read through :mod:`suite.catalog` (the registries' lazy registrations), so it answers
without importing torch.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from suite.commands.common import ConfigDefaultsFormatter
from suite.errors import ConfigError
from suite.registry import ALL_REGISTRIES

if TYPE_CHECKING:
    from suite.config import DatasetSpec

KINDS = [*ALL_REGISTRIES, "presets"]
DESCRIPTION_WIDTH = 100
"""Columns an entry's description wraps at in text output (words are never cut)."""
ALIASES = {"embedding-methods": "embeddings", "methods": "embeddings", "backbones": "models"}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "list",
        help="list models, embedding methods, datasets, tasks and presets with their options",
        description="List registry entries with their options and defaults, the size presets, "
        "each dataset's protocols and whether it is prepared. KIND is one of "
        f"{', '.join(KINDS)} (singular accepted); PATTERN is a glob on names (e.g. 'bars-*').",
        formatter_class=ConfigDefaultsFormatter,
    )
    parser.add_argument(
        "what", nargs="*", metavar="KIND|PATTERN", help="a kind, a name glob, or both"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="root of prepared datasets to check (default $RECSUITE_CACHE or "
        "~/.cache/recsuite/prepared)",
    )
    parser.set_defaults(handler=handle)


def kind_of(word: str) -> str | None:
    """``embedding`` / ``embeddings`` / ``methods`` -> ``embeddings``; None if not a kind."""
    word = ALIASES.get(word.lower(), word.lower())
    for kind in KINDS:
        if word in (kind, kind.removesuffix("s")):
            return kind
    return None


def parse_what(words: list[str]) -> tuple[list[str], str]:
    """The kinds and the name glob a command line asks for."""
    kinds: list[str] = []
    patterns: list[str] = []
    for word in words:
        kind = kind_of(word)
        if kind:
            kinds.append(kind)
        else:
            patterns.append(word)
    if len(patterns) > 1:
        raise ConfigError(
            f"suite list takes one name pattern, got {', '.join(map(repr, patterns))}; "
            f"kinds are {', '.join(KINDS)}"
        )
    return kinds or list(KINDS), (patterns[0] if patterns else "*")


def listing(kinds: list[str], pattern: str = "*", cache_dir: str | None = None) -> dict[str, Any]:
    """The JSON-able listing: ``{kind: [entry, ...]}`` for the requested kinds."""
    from suite.catalog import catalog

    out: dict[str, Any] = {}
    registries = [k for k in kinds if k != "presets"]
    for kind, entries in catalog(registries).items():
        rows = []
        for entry in entries:
            if not fnmatch.fnmatchcase(entry.name, pattern):
                continue
            row = entry.to_json()
            if kind == "datasets":
                row["prepared"] = prepared_status(entry, cache_dir)
            rows.append(row)
        out[kind] = rows
    if "presets" in kinds:
        from suite.presets import list_presets, preset_description, preset_path

        out["presets"] = [
            {
                "name": name,
                "description": preset_description(name),
                "file": str(preset_path(name).relative_to(Path(__file__).resolve().parents[1])),
            }
            for name in list_presets()
            if fnmatch.fnmatchcase(name, pattern)
        ]
    return out


def prepared_status(entry: Any, cache_dir: str | None) -> dict[str, Any]:
    """Whether the dataset's default config is prepared, and which caches exist."""
    default = prepared_dir_of(entry.name, entry.default_protocol, entry.defaults(), cache_dir)
    root = default.parent
    caches = sorted(p.parent.name for p in root.glob("*/manifest.json"))
    return {"default": (default / "manifest.json").is_file(), "caches": caches, "root": str(root)}


def prepared_dir_of(
    dataset: str, protocol: str | None, options: dict[str, Any], cache_dir: str | None = None
) -> Path:
    """Where the prepared cache of this dataset config lives (``suite.data.location``'s
    rule, which needs no numpy)."""
    from types import SimpleNamespace
    from typing import cast

    from suite.data.location import prepared_dir

    fields = SimpleNamespace(name=dataset, protocol=protocol, options=options, cache_dir=cache_dir)
    return prepared_dir(cast("DatasetSpec", fields))  # the fields it reads, unvalidated


def no_match_message(pattern: str, kinds: list[str], cache_dir: str | None) -> str:
    """The one-line error for a name or glob that matches no entry of ``kinds``, with the
    closest name or kind as a suggestion."""
    from suite.registry import did_you_mean

    everything = listing(list(KINDS), "*", cache_dir)
    names = {row["name"]: kind for kind, rows in everything.items() for row in rows}
    words = [*KINDS, *(k.removesuffix("s") for k in KINDS), *ALIASES, *names]
    suggestion = did_you_mean(pattern, words)
    where = "any kind" if kinds == KINDS else ", ".join(kinds)
    elsewhere = names.get(pattern)
    if elsewhere and elsewhere not in kinds:
        suggestion = f" {pattern!r} is in {elsewhere} (`suite list {elsewhere} {pattern}`)."
    return (
        f"suite list: no entry of {where} matches {pattern!r}.{suggestion} "
        f"Kinds: {', '.join(KINDS)}; `suite list` shows every name"
    )


def handle(args: argparse.Namespace) -> int:
    kinds, pattern = parse_what(args.what)
    data = listing(kinds, pattern, args.cache_dir)
    if pattern != "*" and not any(data.values()):
        raise ConfigError(no_match_message(pattern, kinds, args.cache_dir))
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    named_kinds = any(kind_of(word) for word in args.what)
    for kind, rows in data.items():
        if not rows and not named_kinds:
            continue  # a name asked of every kind: only the kinds it is in
        print(f"{kind}:")
        if not rows:
            print(f"  (none matching {pattern!r})")
        for row in rows:
            print_row(kind, row)
        print()
    if data.get("presets"):
        print("Use a preset by name: suite run --config wukong-s")
    return 0


def print_row(kind: str, row: dict[str, Any]) -> None:
    """One entry: its name and whole description (wrapped, never cut), then its options."""
    print(
        textwrap.fill(
            f"{row['name']}  {row['description']}",
            width=DESCRIPTION_WIDTH,
            initial_indent="  ",
            subsequent_indent="      ",
            break_on_hyphens=False,
        )
    )
    for option in row.get("options", []):
        default = "(required)" if option["required"] else json.dumps(option["default"])
        if len(default) > 80:  # long lists stay whole in --json
            default = default[:77] + "..."
        help_text = f"  {option['description']}" if option["description"] else ""
        print(f"      {option['name']} = {default}  [{option['type']}]{help_text}")
    if kind == "datasets":
        for name, text in row["protocols"].items():
            mark = " (default)" if name == row["default_protocol"] else ""
            print(f"      protocol {name}{mark}: {text}")
        prepared = row["prepared"]
        if prepared["default"]:
            state = "prepared (default options)"
        elif prepared["caches"]:
            state = f"prepared with other options: {', '.join(prepared['caches'])}"
        elif row["needs_raw"]:
            state = f"not prepared: suite prepare {row['name']} --raw PATH"
        else:
            state = "not prepared (generated on first use)"
        print(f"      status: {state}")
    if kind == "presets":
        print(f"      file: {row['file']}")
