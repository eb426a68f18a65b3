"""BARS benchmark splits (reczoo on the Hugging Face hub) with their own train/valid/test.

``--raw`` is either a local directory holding ``train.csv``, ``valid.csv`` and ``test.csv``
(``.csv.gz`` too; ``validation``/``val`` accepted for ``valid``; how the reczoo zips unpack)
or a hub repo id read with ``datasets.load_dataset`` (``--set revision=...`` pins it). The
CSV layouts (header line, one row per example):

- ``bars-criteo-x1`` (``reczoo/Criteo_x1``, 7:2:1 random split): ``label, I1..I13,
  C1..C26``; I's are already normalised by BARS (kept as they are, missing -> 0), C's are
  BARS's integer ids;
- ``bars-avazu-x1`` (``reczoo/Avazu_x1``, 7:1:2): ``label, feat_1..feat_22``;
- ``bars-movielenslatest-x1`` (``reczoo/MovielensLatest_x1``, 7:2:1, user-movie-tag
  triples): ``label, user_id, item_id, tag_id``.

Categorical values are re-indexed per feature like every raw dataset (``suite.data.vocab``;
BARS uses ``min_categr_count=1``, the default here), counting the train file.
"""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from suite.data.chunks import (
    CategoricalOptions,
    Chunk,
    chunk_from_arrays,
    label_column,
    numpy_column,
)
from suite.data.raw import Parsed, RawReader, SourceInfo, TextFormat
from suite.data.raw_dataset import RawDataset
from suite.data.splits import SPLIT_NAMES, SourceSplit, SplitRule
from suite.errors import DataError
from suite.registry import DATASETS

SPLIT_FILES = {"train": ("train",), "val": ("valid", "validation", "val"), "test": ("test",)}
HUB_BATCH_ROWS = 1 << 18


@dataclass(frozen=True)
class Layout:
    """Columns of one BARS dataset."""

    repo: str
    label: str
    dense: tuple[str, ...]
    sparse: tuple[str, ...]

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.label, *self.dense, *self.sparse)

    def text_format(self, path: Path) -> Any:
        def for_header(names: list[str]) -> TextFormat:
            missing = [c for c in self.columns if c not in names]
            if missing:
                raise DataError(f"{path}:1: header lacks columns {missing} of {self.repo}'s layout")
            types = {
                self.label: pa.float64(),
                **dict.fromkeys(self.dense, pa.float64()),
                **dict.fromkeys(self.sparse, pa.string()),
            }
            return TextFormat(
                columns=tuple(names), types=types, delimiter=",", include=self.columns
            )

        return for_header

    def _dense(self, table: pa.Table) -> np.ndarray:
        """float32 ``[n, Dd]``: the dense columns as given, missing -> 0."""
        dense = np.zeros((table.num_rows, len(self.dense)), dtype=np.float32)
        for j, name in enumerate(self.dense):
            dense[:, j] = numpy_column(pc.fill_null(pc.cast(table.column(name), pa.float64()), 0.0))
        return dense

    def chunk(self, parsed: Parsed, source: int) -> Chunk:
        label, bad = label_column(parsed.table, self.label)
        parsed.drop(bad, f"{self.label} must be 0 or 1")
        dense = self._dense(parsed.table)
        finite = np.isfinite(dense)
        if not finite.all():
            column = self.dense[int(np.flatnonzero(~finite.all(axis=0))[0])]
            parsed.drop(~finite.all(axis=1), f"{column} must be a finite number")
            dense = self._dense(parsed.table)
        table = parsed.table
        if len(label) != table.num_rows:
            label, _ = label_column(table, self.label)
        sparse = [_as_strings(table.column(name)) for name in self.sparse]
        return chunk_from_arrays(label, dense, sparse, parsed.row_index(), source)


def _as_strings(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Categorical values as text, so hub integers and CSV text give the same keys."""
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return column
    if pa.types.is_floating(column.type):  # integral floats print as integers
        values = pc.cast(column, pa.int64(), safe=False)
        exact = pc.equal(pc.cast(values, column.type), column)
        return pc.if_else(exact, pc.cast(values, pa.string()), pc.cast(column, pa.string()))
    return pc.cast(column, pa.string())


LAYOUTS = {
    "bars-criteo-x1": Layout(
        "reczoo/Criteo_x1",
        "label",
        tuple(f"I{i}" for i in range(1, 14)),
        tuple(f"C{i}" for i in range(1, 27)),
    ),
    "bars-avazu-x1": Layout(
        "reczoo/Avazu_x1", "label", (), tuple(f"feat_{i}" for i in range(1, 23))
    ),
    "bars-movielenslatest-x1": Layout(
        "reczoo/MovielensLatest_x1", "label", (), ("user_id", "item_id", "tag_id")
    ),
}


class HubOptions(CategoricalOptions):
    """BARS data: thresholds, bad-row handling and the hub revision."""

    revision: str | None = Field(None, description="hub revision (branch, tag or commit) to load")


def _local_files(directory: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for split, stems in SPLIT_FILES.items():
        for stem in stems:
            for suffix in (".csv", ".csv.gz"):
                if split not in found and (directory / f"{stem}{suffix}").is_file():
                    found[split] = directory / f"{stem}{suffix}"
    missing = [f"{SPLIT_FILES[s][0]}.csv" for s in SPLIT_NAMES if s not in found]
    if missing:
        raise DataError(
            f"{directory}: missing {', '.join(missing)} (a BARS split directory holds "
            "train.csv, valid.csv and test.csv)"
        )
    return found


def _check_hub_reachable(repo: str, timeout_s: float = 3.0) -> None:
    """Fail in seconds, not after the hub client's retries, when the hub cannot be
    reached; ``HF_HUB_OFFLINE=1`` skips the check (a copy in the local hub cache)."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return
    url = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        raise DataError(
            f"cannot reach the Hugging Face hub at {host}:{port} ({exc.strerror or exc}) to load "
            f"{repo!r}. Offline? Download it where there is a network "
            f"(`huggingface-cli download {repo} --repo-type dataset`), unzip it and pass the "
            "directory: --raw DIR (or set HF_HUB_OFFLINE=1 to use a copy in the hub cache)"
        ) from None


def _hub_splits(repo: str, revision: str | None) -> dict[str, Any]:
    _check_hub_reachable(repo)
    import datasets

    try:
        loaded = datasets.load_dataset(repo, revision=revision)
    except Exception as exc:  # the hub client raises many kinds
        raise DataError(f"cannot load hub dataset {repo!r}: {type(exc).__name__}: {exc}") from None
    splits: dict[str, Any] = {}
    for split, names in SPLIT_FILES.items():
        for name in names:
            if name in loaded and split not in splits:
                splits[split] = loaded[name]
    if len(splits) != 3:
        raise DataError(
            f"hub dataset {repo!r} has splits {sorted(loaded)}; expected train, valid (or validation) "
            "and test. The reczoo repos ship one zip: download and unzip it "
            f"(`huggingface-cli download {repo} --repo-type dataset`), then pass the directory as --raw"
        )
    return splits


def _hub_chunks(
    repo: str, revision: str | None, layout: Layout, reader: RawReader
) -> Iterator[Chunk]:
    for source, (split, dataset) in enumerate(_hub_splits(repo, revision).items()):
        missing = [c for c in layout.columns if c not in dataset.column_names]
        if missing:
            raise DataError(f"hub dataset {repo!r} split {split} lacks columns {missing}")
        info = SourceInfo(f"{repo}:{split}", rows=len(dataset))
        reader.sources.append(info)
        digest = hashlib.sha256()
        start = 0
        for batch in (
            dataset.select_columns(list(layout.columns)).with_format("arrow").iter(HUB_BATCH_ROWS)
        ):
            table = batch if isinstance(batch, pa.Table) else pa.Table.from_pydict(batch)
            for record in table.to_batches():
                digest.update(record.serialize())
                info.bytes += record.nbytes
            parsed = Parsed(
                table, f"{repo}:{split}:row", start + 1, start, None, reader.on_bad_rows, reader.bad
            )
            start += table.num_rows
            yield layout.chunk(parsed, source)
        info.sha256 = digest.hexdigest()


class HubDataset(RawDataset):
    """Base of the BARS entries: a local split directory or a hub repo id."""

    Options = HubOptions
    layout: ClassVar[Layout]
    protocols: ClassVar[dict[str, str]] = {"given": "the repo's own train / valid / test files"}
    default_protocol: ClassVar[str] = "given"

    def sources(self, raw: Path, options: Any) -> list[Path]:
        """The local split files in order; none for a hub repo id (read in :meth:`chunks`)."""
        if not raw.is_dir():
            return []
        files = _local_files(raw)
        return [files[split] for split in SPLIT_NAMES]

    def features(self, options: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return self.layout.dense, self.layout.sparse

    def rule(self, protocol: str, options: Any, raw: Path) -> SplitRule:
        """The given files, one split each."""
        if raw.is_dir():
            names = {i: _local_files(raw)[split].name for i, split in enumerate(SPLIT_NAMES)}
        else:
            names = {i: f"{raw.as_posix()}:{split}" for i, split in enumerate(SPLIT_NAMES)}
        return SourceSplit({0: 0, 1: 1, 2: 2}, names)

    def manifest_extra(self, options: Any, raw: Path) -> dict[str, Any]:
        origin: dict[str, Any] = (
            {"local_directory": raw.name}
            if raw.is_dir()
            else {"hub_repo": raw.as_posix(), "revision": options.revision}
        )
        return {"origin": origin, "bars_repo": self.layout.repo}

    def text_format(self, path: Path, options: Any) -> Any:
        return self.layout.text_format(path)

    def chunks(
        self,
        reader: RawReader,
        paths: list[Path],
        options: Any,
        rule: SplitRule,
        extra: dict[str, Any],
    ) -> Iterator[Chunk]:
        if paths:
            yield from super().chunks(reader, paths, options, rule, extra)
        else:
            hub = extra["origin"]
            yield from _hub_chunks(hub["hub_repo"], options.revision, self.layout, reader)

    def chunk(self, parsed: Parsed, source: int, options: Any, rule: SplitRule) -> Chunk:
        return self.layout.chunk(parsed, source)


@DATASETS.register("bars-criteo-x1")
class BarsCriteoX1(HubDataset):
    """BARS Criteo_x1 (reczoo): Criteo with BARS's 7:2:1 split, 13 dense + 26 categorical."""

    layout = LAYOUTS["bars-criteo-x1"]


@DATASETS.register("bars-avazu-x1")
class BarsAvazuX1(HubDataset):
    """BARS Avazu_x1 (reczoo): Avazu with BARS's 7:1:2 split, 22 categorical features."""

    layout = LAYOUTS["bars-avazu-x1"]


@DATASETS.register("bars-movielenslatest-x1")
class BarsMovielensLatestX1(HubDataset):
    """BARS MovielensLatest_x1 (reczoo): user-movie-tag triples, 7:2:1 split, 3 categorical."""

    layout = LAYOUTS["bars-movielenslatest-x1"]
