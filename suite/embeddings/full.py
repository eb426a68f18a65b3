"""``full``: one uncompressed table per feature."""

from __future__ import annotations

from suite.embeddings.base import (
    ComposedEmbedding,
    EmbeddingContext,
    EmbeddingOptions,
    IdentityTransform,
    StackCombine,
)
from suite.registry import EMBEDDINGS


@EMBEDDINGS.register("full")
class FullEmbedding(ComposedEmbedding):
    """Uncompressed: one rows x D table per feature, all in one table-batched kernel."""

    Options = EmbeddingOptions

    def __init__(self, options: EmbeddingOptions, context: EmbeddingContext) -> None:
        cards = context.cardinalities
        super().__init__(
            IdentityTransform(cards),
            StackCombine(len(cards), options.dim),
            options.dim,
            context,
            backend=options.backend,
        )
