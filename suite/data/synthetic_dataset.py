"""Base of the synthetic datasets: rows drawn from the teacher (``suite.data.teacher``),
split in order into train/val/test. Each family file declares its look-alike (the
profile of the real dataset it imitates)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

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
    draw: Literal["fixed", "per_seed"] = Field(
        "fixed",
        description="per_seed: the run's seed also draws the teacher and the sample (train, "
        "validation, test), so each seed of a config trains on its own draw and the methods "
        "of one seed on the same one; fixed: every run seed sees the one draw of seed",
    )
    draw_seed: int | None = Field(
        None,
        description="the run's seed, set by the run config under draw per_seed (leave it out)",
    )

    left_out_at: ClassVar[dict[str, Any]] = {"draw": "fixed", "draw_seed": None}
    """Options left out of the dump at these values (options added after runs were
    recorded): configs, their hashes and the prepared cache keys stay those of those runs.
    A subclass adds its own (``{**SyntheticOptions.left_out_at, ...}``)."""

    @model_validator(mode="after")
    def _draw_seed_only_per_seed(self) -> SyntheticOptions:
        if self.draw_seed is not None and self.draw != "per_seed":
            raise ValueError(
                "draw_seed: set from the run's seed under draw: per_seed; with draw fixed, "
                "seed draws the data"
            )
        return self

    @model_serializer(mode="wrap")
    def _leave_out_defaults(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        for key, value in self.left_out_at.items():
            if key in data and data[key] == value:
                data.pop(key)
        return data


class SyntheticDataset(DatasetSource):
    """Base of the synthetic entries: generate once, split in order into train/val/test."""

    Options = SyntheticOptions
    profile: ClassVar[SyntheticProfile]
    protocols: ClassVar[dict[str, str]] = {
        "default": "generated i.i.d. (or over days where the regime says so, val and test "
        "the last); the first train_rows rows train, then val, then test"
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
            draw_seed=self.draw_seed(options),
        )

    def draw_seed(self, options: SyntheticOptions) -> int | None:
        """The run's seed where it draws the data too (``draw: per_seed``), else None."""
        if options.draw == "fixed":
            return None
        if options.draw_seed is None:
            raise ConfigError(
                f"dataset.options.draw_seed: {self.name} with draw per_seed takes the run's "
                "seed from the run config (RunConfig sets it); none was given"
            )
        return options.draw_seed

    @property
    def name(self) -> str:
        return type(self).registered_name
