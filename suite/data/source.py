"""The base of every registered dataset, and getting its prepared data (cached where
:mod:`suite.data.location` says)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

from suite.config import NoOptions
from suite.data.location import cache_root, prepared_dir
from suite.data.prepared import OutdatedFormat, PreparedDataset, load_prepared
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
    registered_name: ClassVar[str]
    """The name it is registered under (set by the registry)."""

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


def get_prepared(
    spec: DatasetSpec, progress: bool = True, rebuild: bool = False, force: bool = False
) -> PreparedDataset:
    """The prepared dataset for ``spec``: from the cache (checked), or built now when it
    can be. ``force``: let a rebuild replace data prepared from other raw files."""
    source = spec.registry.get(spec.name)()
    out_dir = prepared_dir(spec)
    recover(out_dir)
    raw = Path(spec.raw).expanduser() if spec.raw else None
    if not rebuild and (out_dir / "manifest.json").is_file():
        try:
            data = load_prepared(out_dir)
        except OutdatedFormat:
            if source.needs_raw:
                raise
            data = None  # generated data: make it again in the current format
        if data is not None:
            if raw is not None:
                check_raw_matches(raw, data)
            return data
    if source.needs_raw and raw is None:
        raise DataError(
            f"dataset {spec.name!r} (protocol {spec.protocol}) is not prepared under {cache_root(spec)}; "
            f"run `suite prepare {spec.name} --raw PATH` first"
        )
    try:
        data = source.build(
            spec.typed_options(), str(spec.protocol), raw, out_dir, progress, force=force
        )
    except OSError as exc:  # a cache folder that is a file, a full disk, no permission
        where = exc.filename or out_dir
        raise DataError(
            f"{where}: {exc.strerror or exc} while preparing {spec.name} into {out_dir}"
        ) from None
    for warning in data.manifest.get("warnings", []):
        print(f"warning: {warning}", file=sys.stderr)
    return data


def check_raw_matches(raw: Path, data: PreparedDataset) -> None:
    """Cheaply refuse cached data when ``raw`` names a source file of another size than the
    one the data was prepared from (hashing it would cost a full read)."""
    for source in data.manifest.get("sources", []):
        name = str(source.get("name", ""))
        candidate = raw if raw.is_file() and raw.name == name else raw / name
        if candidate.is_file() and candidate.stat().st_size != source.get("bytes"):
            raise DataError(
                f"{candidate} has {candidate.stat().st_size} bytes, but {data.path} was prepared "
                f"from a {name} of {source.get('bytes')} bytes; run `suite prepare` again "
                "(with --force to replace it)"
            )
