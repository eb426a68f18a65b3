"""Reproductions of the papers' claims: specs, claim checks, runs and the report."""
