"""``suite prepare``: turn raw files (or a generator) into cached prepared arrays."""

from __future__ import annotations

import argparse
import json

from suite.commands.common import ConfigDefaultsFormatter, add_set_argument


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "prepare",
        formatter_class=ConfigDefaultsFormatter,
        help="prepare a dataset's arrays and manifest",
        description="Read raw files (or generate synthetic data), split by a protocol and cache the "
        "prepared arrays with a manifest and fingerprint.",
    )
    parser.add_argument("dataset", help="dataset name (see `suite list datasets`)")
    parser.add_argument("--raw", help="raw file, directory or hub repo id")
    parser.add_argument("--protocol", help="split protocol")
    parser.add_argument(
        "--cache-dir",
        help="root of prepared datasets (default $RECSUITE_CACHE or ~/.cache/recsuite/prepared)",
    )
    add_set_argument(parser, "dataset option, e.g. --set min_count=4 (repeatable)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace a prepared slot that holds data from other raw files",
    )
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from suite.config import build_config
    from suite.data.source import get_prepared

    overrides = [f"dataset.options.{text}" for text in args.overrides]
    values = {
        "dataset.raw": args.raw,
        "dataset.protocol": args.protocol,
        "dataset.cache_dir": args.cache_dir,
    }
    config = build_config(components={"dataset": args.dataset}, values=values, overrides=overrides)
    data = get_prepared(config.dataset, progress=not args.quiet, rebuild=True, force=args.force)
    manifest = data.manifest
    print(f"prepared {args.dataset} (protocol {manifest.get('protocol')}) at {data.path}")
    print(f"  rows: {json.dumps(manifest['rows'])}")
    print(
        f"  features: {data.schema.num_dense} dense, {data.schema.num_sparse} sparse, "
        f"{sum(data.schema.cardinalities)} ids"
    )
    duplicates = manifest.get("duplicates", {})
    if duplicates.get("counted"):
        across = sum(duplicates["across_splits"].values())
        verb = "dropped" if duplicates["dropped"] else "kept"
        print(
            f"  duplicates: {duplicates['duplicate_rows']} rows repeat an earlier one "
            f"({across} across splits; {verb})"
        )
    print(f"  fingerprint: {data.fingerprint}")
    return 0
