"""Registered datasets; each module registers its own entries with ``DATASETS``."""
