"""Backbones: ``dense [B, Dd]`` + embeddings ``[B, F, D]`` -> logits ``[B]``.

Each module registers its backbone with ``MODELS``; ``base`` holds the interface,
the MLP helper and :class:`RecModel`, which joins a backbone to an embedding method.
"""
