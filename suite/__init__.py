"""recsuite: a benchmark suite for DLRM-family recommendation models."""

__version__ = "0.1.0"
