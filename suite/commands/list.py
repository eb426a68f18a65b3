"""``suite list``: every registry with a one-line description of each entry."""

from __future__ import annotations

import argparse

from suite.registry import ALL_REGISTRIES


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "list",
        help="list models, embedding methods, datasets and tasks",
        description="List every registry with a one-line description per entry.",
    )
    parser.add_argument(
        "registry", nargs="?", choices=sorted(ALL_REGISTRIES), help="only this registry"
    )
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    for title, registry in ALL_REGISTRIES.items():
        if args.registry and args.registry != title:
            continue
        print(f"{title}:")
        entries = list(registry)
        width = max((len(e.name) for e in entries), default=0)
        for entry in entries:
            print(f"  {entry.name:<{width}}  {entry.description}")
        print()
    return 0
