"""Feature schema of a prepared dataset."""

from __future__ import annotations

from pydantic import model_validator

from suite.config import Frozen


class FeatureSchema(Frozen):
    """Names of the dense and categorical features and each categorical vocab size."""

    dense: list[str]
    sparse: list[str]
    cardinalities: list[int]

    @model_validator(mode="after")
    def _check(self) -> FeatureSchema:
        if len(self.sparse) != len(self.cardinalities):
            raise ValueError("one cardinality per sparse feature is required")
        if any(c < 1 for c in self.cardinalities):
            raise ValueError("cardinalities must be >= 1")
        return self

    @property
    def num_dense(self) -> int:
        return len(self.dense)

    @property
    def num_sparse(self) -> int:
        return len(self.sparse)
