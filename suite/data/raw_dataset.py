"""A raw dataset declared, not programmed: :meth:`RawDataset.build` is written once here.

A registered raw dataset states what it is as class attributes: its ``Options``, its
``protocols`` (name -> description) and ``splits`` (name -> split rule built from the
options), the raw ``files`` it accepts and their text ``format``, its ``dense`` and
``sparse`` feature names, and the ``extra`` facts its manifest records. It turns a
parsed block into a :class:`~suite.data.chunks.Chunk` with :meth:`RawDataset.chunk`
(the default reads a ``label`` column, dense columns as floats and sparse columns as
they are). A dataset whose files, features or reading vary with its options overrides
:meth:`~RawDataset.sources`, :meth:`~RawDataset.features` or :meth:`~RawDataset.chunks`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from suite.data.chunks import (
    CategoricalOptions,
    Chunk,
    chunk_from_arrays,
    label_column,
    numpy_column,
)
from suite.data.pipeline import PrepareJob, build_prepared
from suite.data.prepared import PreparedDataset
from suite.data.raw import Parsed, RawReader, TextFormat, find_file
from suite.data.source import DatasetSource
from suite.data.splits import SplitRule


class RawDataset(DatasetSource):
    """Base of every dataset read from raw text files through the two-pass prepare."""

    Options: ClassVar[type[CategoricalOptions]] = CategoricalOptions
    needs_raw: ClassVar[bool] = True
    format: ClassVar[TextFormat | None] = None
    """How the raw files parse (None: :meth:`text_format` decides per file)."""
    files: ClassVar[tuple[str, ...]] = ()
    """Names accepted for the one raw file in the ``--raw`` directory, first found wins."""
    label: ClassVar[str] = "label"
    dense: ClassVar[tuple[str, ...]] = ()
    sparse: ClassVar[tuple[str, ...]] = ()
    splits: ClassVar[dict[str, Callable[[Any], SplitRule]]] = {}
    """Protocol name -> its split rule, built from the options."""
    extra: ClassVar[dict[str, Any]] = {}
    """Facts the manifest records beside the standard ones."""

    def build(
        self,
        options: Any,
        protocol: str,
        raw: Path | None,
        out_dir: Path,
        progress: bool,
        force: bool = False,
    ) -> PreparedDataset:
        """Read ``raw`` with the dataset's declarations and prepare it into ``out_dir``."""
        assert raw is not None
        paths = self.sources(Path(raw), options)
        reader = RawReader(options.on_bad_rows)
        rule = self.rule(protocol, options, Path(raw))
        extra = self.manifest_extra(options, Path(raw))
        dense, sparse = self.features(options)
        return build_prepared(
            PrepareJob(
                dataset=self.registered_name,
                protocol=protocol,
                options=options,
                dense=list(dense),
                sparse=list(sparse),
                chunks=self.chunks(reader, paths, options, rule, extra),
                reader=reader,
                rule=rule,
                out_dir=out_dir,
                progress=progress,
                force=force,
                extra=extra,
            )
        )

    def sources(self, raw: Path, options: Any) -> list[Path]:
        """The raw files in source order (default: ``raw`` itself, or the first of
        ``files`` inside it)."""
        return [find_file(raw, self.files)]

    def rule(self, protocol: str, options: Any, raw: Path) -> SplitRule:
        """The split rule of ``protocol`` (default: from ``splits``)."""
        return self.splits[protocol](options)

    def features(self, options: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Dense and sparse feature names (default: ``dense`` and ``sparse``)."""
        return self.dense, self.sparse

    def manifest_extra(self, options: Any, raw: Path) -> dict[str, Any]:
        """A fresh copy of the manifest's extra facts (the reading may add to it)."""
        return dict(self.extra)

    def text_format(self, path: Path, options: Any) -> Any:
        """The ``TextFormat`` of ``path`` (or a function of its header's names)."""
        assert self.format is not None, f"{type(self).__name__} declares no format"
        return self.format

    def chunks(
        self,
        reader: RawReader,
        paths: list[Path],
        options: Any,
        rule: SplitRule,
        extra: dict[str, Any],
    ) -> Iterator[Chunk]:
        """Every parsed block of every source, as chunks (source = the file's position)."""
        for source, path in enumerate(paths):
            for parsed in reader.read(path, self.text_format(path, options)):
                yield self.chunk(parsed, source, options, rule)

    def chunk(self, parsed: Parsed, source: int, options: Any, rule: SplitRule) -> Chunk:
        """One parsed block's rows: the 0/1 ``label`` column (other values are bad rows),
        ``dense`` columns as float32 ``[n, Dd]`` (missing -> 0) and ``sparse`` columns as
        they parsed (null = missing)."""
        label, bad = label_column(parsed.table, self.label)
        parsed.drop(bad, f"{self.label} must be 0 or 1")
        table = parsed.table
        if bad.any():
            label, _ = label_column(table, self.label)
        dense = np.zeros((table.num_rows, len(self.dense)), dtype=np.float32)
        for j, name in enumerate(self.dense):
            dense[:, j] = numpy_column(table.column(name), fill=0)
        sparse = [table.column(name) for name in self.sparse]
        return chunk_from_arrays(label, dense, sparse, parsed.row_index(), source)
