"""The base of every registered dataset, and where prepared datasets are cached."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

from suite.config import NoOptions, stable_hash
from suite.data.prepared import PreparedDataset, load_prepared
from suite.data.slot import recover
from suite.errors import DataError

if TYPE_CHECKING:
    from suite.config import DatasetSpec


class DatasetSource:
    """A registered dataset: reads raw input (or generates it) into prepared arrays.

    Subclasses set ``Options`` (a pydantic model), ``protocols`` (name -> description),
    ``default_protocol`` and ``needs_raw``, and implement :meth:`build`.
    """

    Options: ClassVar[type[BaseModel]] = NoOptions
    protocols: ClassVar[dict[str, str]] = {"default": "the dataset's own train/val/test splits"}
    default_protocol: ClassVar[str] = "default"
    needs_raw: ClassVar[bool] = False

    def build(
        self,
        options: Any,
        protocol: str,
        raw: Path | None,
        out_dir: Path,
        progress: bool,
        force: bool = False,
    ) -> PreparedDataset:
        """Write the prepared dataset to ``out_dir`` (atomically) and return it; ``force``
        replaces a slot that holds data prepared from other raw files."""
        raise NotImplementedError


def cache_root(spec: DatasetSpec | None = None) -> Path:
    """Root of prepared datasets: ``dataset.cache_dir``, else ``$RECSUITE_CACHE``, else
    ``~/.cache/recsuite/prepared``."""
    if spec is not None and spec.cache_dir:
        return Path(spec.cache_dir).expanduser()
    env = os.environ.get("RECSUITE_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "recsuite" / "prepared"


def prepared_dir(spec: DatasetSpec) -> Path:
    """Cache directory for a dataset name + protocol + options."""
    key = stable_hash({"protocol": spec.protocol, "options": spec.options})
    return cache_root(spec) / spec.name / f"{spec.protocol}-{key}"


def get_prepared(
    spec: DatasetSpec, progress: bool = True, rebuild: bool = False, force: bool = False
) -> PreparedDataset:
    """The prepared dataset for ``spec``: from the cache (checked), or built now when it
    can be. ``force``: let a rebuild replace data prepared from other raw files."""
    source = spec.registry.get(spec.name)()
    out_dir = prepared_dir(spec)
    recover(out_dir)
    if not rebuild and (out_dir / "manifest.json").is_file():
        return load_prepared(out_dir)
    raw = Path(spec.raw).expanduser() if spec.raw else None
    if source.needs_raw and raw is None:
        raise DataError(
            f"dataset {spec.name!r} (protocol {spec.protocol}) is not prepared under {cache_root(spec)}; "
            f"run `suite prepare {spec.name} --raw PATH` first"
        )
    data = source.build(
        spec.typed_options(), str(spec.protocol), raw, out_dir, progress, force=force
    )
    for warning in data.manifest.get("warnings", []):
        print(f"warning: {warning}", file=sys.stderr)
    return data
