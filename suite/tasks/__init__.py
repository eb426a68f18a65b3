"""Tasks: what a run measures. Each module registers its task with ``TASKS``."""
