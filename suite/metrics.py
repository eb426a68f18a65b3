"""Exact metrics over a whole split."""

from __future__ import annotations

import numpy as np


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Exact ROC AUC (Mann-Whitney U with tied scores sharing their average rank).

    Args:
        labels: ``[N]`` in {0, 1}.
        scores: ``[N]`` any real scores (logits or probabilities).
    """
    labels = np.asarray(labels, dtype=np.float64).ravel()
    scores = np.asarray(scores, dtype=np.float64).ravel()
    positives = labels.sum()
    negatives = labels.size - positives
    if positives == 0 or negatives == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    sorted_scores = scores[order]
    # average rank (1-based) of each run of tied scores
    boundaries = np.flatnonzero(np.diff(sorted_scores)) + 1
    starts = np.concatenate([[0], boundaries])
    ends = np.concatenate([boundaries, [scores.size]])
    ranks = np.empty(scores.size, dtype=np.float64)
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    rank_sum = ranks[labels == 1].sum()
    return float((rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives))


def log_loss(labels: np.ndarray, logits: np.ndarray) -> float:
    """Mean binary cross-entropy of ``sigmoid(logits)``, computed stably from logits."""
    labels = np.asarray(labels, dtype=np.float64).ravel()
    logits = np.asarray(logits, dtype=np.float64).ravel()
    return float(np.mean(np.logaddexp(0.0, logits) - labels * logits))


def binary_metrics(labels: np.ndarray, logits: np.ndarray) -> dict[str, float]:
    """``auc``, ``logloss`` and the mean predicted and true click rates."""
    probs = 1.0 / (1.0 + np.exp(-np.asarray(logits, dtype=np.float64)))
    return {
        "auc": roc_auc(labels, logits),
        "logloss": log_loss(labels, logits),
        "pred_ctr": float(probs.mean()),
        "ctr": float(np.mean(labels)),
    }
