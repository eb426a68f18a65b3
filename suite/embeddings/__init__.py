"""Embedding methods: ``sparse [B, F]`` ids -> ``[B, F, D]`` vectors.

Each module registers its methods with ``EMBEDDINGS``; shared machinery lives in
``base`` (the method interface and the transform -> tables -> combine composition) and
``tables`` (physical tables on fbgemm's table-batched kernel or ``torch.nn``).
"""
