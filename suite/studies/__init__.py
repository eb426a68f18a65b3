"""Optuna studies of compression hyperparameters, tracked in MLflow, parallel and resumable.

A study file (YAML, :mod:`suite.studies.spec`) declares a base run config, a search space
per embedding method, objectives (validation AUC up and embedding bytes down for a
Pareto front, or AUC alone under a memory constraint, with pruning), a budget and a
sampler. :func:`run_study` runs it with one or more workers against SQLite, a journal
file or PostgreSQL; every trial goes down the one run path
(:func:`suite.runs.single.execute`) as a child run of the study's MLflow parent run.
"""

from suite.studies.coordinator import StudyOutcome, run_study
from suite.studies.spec import StudySpec, load_study_spec

__all__ = ["StudyOutcome", "StudySpec", "load_study_spec", "run_study"]
