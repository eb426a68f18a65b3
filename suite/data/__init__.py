"""Prepared arrays, their manifest and fingerprint, and the batch loader."""
