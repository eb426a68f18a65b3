"""Base of the synthetic datasets: rows drawn from the teacher (``suite.data.teacher``),
split in order into train/val/test. Each family file declares its look-alike (the
profile of the real dataset it imitates)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import numpy as np
from pydantic import Field

from suite.config import Frozen
from suite.data.prepared import CACHE_OPTION, PreparedDataset, PreparedWriter
from suite.data.schema import FeatureSchema
from suite.data.source import DatasetSource
from suite.data.teacher import SyntheticProfile, TeacherSettings, generate, generation_bytes
from suite.environment import ram_available_bytes
from suite.errors import ConfigError
from suite.fileio import check_space
from suite.metrics import roc_auc
from suite.units import human_bytes


class SyntheticOptions(Frozen):
    """Size and teacher of a synthetic dataset."""

    train_rows: int = Field(400_000, ge=10)
    val_rows: int = Field(50_000, ge=10)
    test_rows: int = Field(50_000, ge=10)
    vocab_scale: float = Field(0.002, gt=0, le=1, description="scale of large vocabularies")
    keep_below: int = Field(2000, ge=2, description="vocabularies this small keep their real size")
    zipf: float = Field(1.1, gt=0, description="Zipf exponent of id popularity")
    pairs: int = Field(12, ge=0, description="planted pairwise interactions")
    triples: int = Field(6, ge=0, description="planted third-order interactions")
    signal: float = Field(1.6, gt=0, description="std of the teacher's logit")
    seed: int = Field(0, description="seed of the data, independent of the run's seed")


class SyntheticDataset(DatasetSource):
    """Base of the synthetic entries: generate once, split in order into train/val/test."""

    Options = SyntheticOptions
    profile: ClassVar[SyntheticProfile]
    protocols: ClassVar[dict[str, str]] = {
        "default": "generated i.i.d.; the first train_rows rows train, then val, then test"
    }

    def build(
        self,
        options: SyntheticOptions,
        protocol: str,
        raw: Path | None,
        out_dir: Path,
        progress: bool,
        force: bool = False,
    ) -> PreparedDataset:
        self.check_size(options, out_dir)
        cards, dense, sparse, label, prob = generate(self.profile, self.settings(options))
        schema = FeatureSchema(
            dense=self.profile.dense_names, sparse=self.profile.sparse_names, cardinalities=cards
        )
        bounds = np.cumsum([0, options.train_rows, options.val_rows, options.test_rows])
        with PreparedWriter(out_dir, schema, force=force, expected_rows=int(bounds[-1])) as writer:
            for split, lo, hi in zip(
                ("train", "val", "test"), bounds[:-1], bounds[1:], strict=True
            ):
                writer.append(split, dense[lo:hi], sparse[lo:hi], label[lo:hi])
            return writer.finish(
                {
                    "dataset": self.name,
                    "protocol": protocol,
                    "options": options.model_dump(mode="json"),
                    "sources": [],
                    "ctr": {"train": float(label[: options.train_rows].mean())},
                    # the best AUC any model can reach: the teacher's own probability
                    "teacher_test_auc": roc_auc(label[bounds[2] :], prob[bounds[2] :]),
                }
            )

    def check_size(self, options: SyntheticOptions, out_dir: Path) -> None:
        """Refuse, before generating, rows that would not fit in memory (what
        :func:`~suite.data.teacher.generate` returns, at least: a line naming the options)
        or in the cache's filesystem (the prepared files: the writer's disk-full line)."""
        rows = options.train_rows + options.val_rows + options.test_rows
        n_sparse, n_dense = len(self.profile.sparse_names), len(self.profile.dense_names)
        fields = "dataset.options.train_rows/val_rows/test_rows"
        need, have = generation_bytes(rows, n_sparse, n_dense), ram_available_bytes()
        if have is not None and need > have:
            raise ConfigError(
                f"{fields}: generating {rows:,} rows of {self.name} needs at least "
                f"{need:,} bytes ({human_bytes(need)}) of memory but {human_bytes(have)} is "
                "available; use fewer rows"
            )
        # the prepared files (int32 ids, as PreparedWriter writes them), as it refuses them
        check_space(out_dir.parent, rows * (4 * (n_dense + 1) + 4 * n_sparse), CACHE_OPTION)

    def settings(self, options: SyntheticOptions) -> TeacherSettings:
        """The generator's settings for ``options``."""
        return TeacherSettings(
            rows=options.train_rows + options.val_rows + options.test_rows,
            vocab_scale=options.vocab_scale,
            keep_below=options.keep_below,
            zipf=options.zipf,
            pairs=options.pairs,
            triples=options.triples,
            signal=options.signal,
            seed=options.seed,
        )

    @property
    def name(self) -> str:
        return type(self).registered_name
