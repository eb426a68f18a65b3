"""Built-in synthetic datasets shaped like Criteo, Avazu and MovieLens."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from suite.config import Frozen
from suite.data.prepared import PreparedDataset, PreparedWriter
from suite.data.schema import FeatureSchema
from suite.data.source import DatasetSource
from suite.data.synthetic import (
    SyntheticProfile,
    TeacherSettings,
    generate,
    kaggle_cardinalities,
)
from suite.metrics import roc_auc
from suite.registry import DATASETS

# Vocabulary sizes of the real datasets (Criteo Kaggle as counted by the DLRM reference).
CRITEO_CARDINALITIES = [
    1460,
    583,
    10131227,
    2202608,
    305,
    24,
    12517,
    633,
    3,
    93145,
    5683,
    8351593,
    3194,
    27,
    14992,
    5461306,
    10,
    5652,
    2173,
    4,
    7046547,
    18,
    15,
    286181,
    105,
    142572,
]
KAGGLE_ROWS = 45_840_617  # suite.datasets.criteo.KAGGLE_ROWS (a sibling module: not imported)
KAGGLE_EXAMPLES_PER_ROW = KAGGLE_ROWS / sum(CRITEO_CARDINALITIES)
"""1.358: Kaggle's rows per embedding row (all 7 days, as the reference counts its vocabulary;
its days 1-6 train split alone gives 1.164)."""
# Zipf exponent of each Criteo feature over its REAL Kaggle vocabulary, fit to the real sample
# (the first 6,858 rows, the dlrm train split of ../shared/data/criteo/train.txt) by
# `python benchmarks/fit_kaggle_tail.py`: the exponent whose expected distinct ids in 6,858
# draws equals the sample's (C9, C20: every value seen, so the top value's share instead).
# Check, 6,858 rows drawn like the sample (real vocabularies, ids re-counted as prepare does)
# against the sample: 33,503 vs 33,236 embedding rows, Zipf exponent of the lookups 1.04 vs
# 0.955, hottest 1% of rows 67.9% vs 61.5% of the lookups.
CRITEO_KAGGLE_ZIPF = (
    1.881, 1.405, 1.027, 1.085, 2.43, 4.462, 0.953, 2.194, 3.285, 1.093, 1.027, 1.036, 1.018,
    2.855, 1.119, 1.059, 3.92, 1.241, 1.466, 0.902, 1.047, 4.45, 3.597, 1.166, 2.575, 1.225,
)  # fmt: skip
AVAZU_FIELDS = [
    "C1",
    "banner_pos",
    "site_id",
    "site_domain",
    "site_category",
    "app_id",
    "app_domain",
    "app_category",
    "device_id",
    "device_ip",
    "device_model",
    "device_type",
    "device_conn_type",
    "C14",
    "C15",
    "C16",
    "C17",
    "C18",
    "C19",
    "C20",
    "C21",
    "hour_of_day",
    "weekday",
]
AVAZU_CARDINALITIES = [
    7,
    7,
    4737,
    7745,
    26,
    8552,
    559,
    36,
    2686408,
    6729486,
    8251,
    5,
    4,
    2626,
    8,
    9,
    435,
    4,
    68,
    172,
    60,
    24,
    7,
]
MOVIELENS_FIELDS = ["user_id", "item_id", "age", "gender", "occupation", "genre"]
MOVIELENS_CARDINALITIES = [6040, 3706, 7, 2, 21, 18]  # the shape of ml-1m


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


class CriteoSynthOptions(SyntheticOptions):
    """criteo-synth's options: the synthetic ones plus the regime of its vocabulary."""

    regime: Literal["default", "kaggle"] = Field(
        "default",
        description="kaggle: tables scaled so train_rows / embedding rows is Kaggle's 1.36 "
        "at any size, per-feature Zipf tails fit to real Criteo (vocab_scale, keep_below and "
        "zipf unused)",
    )

    @model_serializer(mode="wrap")
    def _leave_out_default_regime(self, handler: SerializerFunctionWrapHandler) -> Any:
        # at its default the regime is left out, so configs, their hashes and the prepared
        # cache keys stay those of runs from before the option
        data = handler(self)
        if data.get("regime") == "default":
            data.pop("regime")
        return data


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


@DATASETS.register("criteo-synth")
class CriteoSynth(SyntheticDataset):
    """Synthetic Criteo: 13 dense + 26 categorical features, Zipf ids, CTR 0.256; regime
    kaggle: Kaggle's examples per embedding row and real Criteo's per-feature tails."""

    Options = CriteoSynthOptions
    profile = SyntheticProfile(
        sparse_names=[f"C{i}" for i in range(1, 27)],
        real_cardinalities=CRITEO_CARDINALITIES,
        dense_names=[f"I{i}" for i in range(1, 14)],
        base_ctr=0.256,
    )

    def settings(self, options: SyntheticOptions) -> TeacherSettings:
        """The regime's settings: Kaggle's ratio ties the tables to ``train_rows``."""
        settings = super().settings(options)
        if getattr(options, "regime", "default") != "kaggle":
            return settings
        cards = kaggle_cardinalities(
            CRITEO_CARDINALITIES, options.train_rows, KAGGLE_EXAMPLES_PER_ROW
        )
        return replace(settings, cardinalities=tuple(cards), zipf_per_feature=CRITEO_KAGGLE_ZIPF)


@DATASETS.register("avazu-synth")
class AvazuSynth(SyntheticDataset):
    """Synthetic Avazu: 23 categorical features (21 fields + hour-of-day, weekday), CTR 0.17."""

    profile = SyntheticProfile(
        sparse_names=AVAZU_FIELDS, real_cardinalities=AVAZU_CARDINALITIES, base_ctr=0.17
    )


@DATASETS.register("movielens-synth")
class MovieLensSynth(SyntheticDataset):
    """Synthetic MovieLens-as-CTR: user, item and side features, rating>=4 rate 0.575."""

    profile = SyntheticProfile(
        sparse_names=MOVIELENS_FIELDS,
        real_cardinalities=MOVIELENS_CARDINALITIES,
        base_ctr=0.575,
        strong_pairs=[(0, 1)],
    )
