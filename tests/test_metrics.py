from __future__ import annotations

import numpy as np
from sklearn.metrics import log_loss as sk_log_loss
from sklearn.metrics import roc_auc_score

from suite.metrics import log_loss, roc_auc


def test_auc_matches_sklearn_with_ties() -> None:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 5000)
    scores = np.round(rng.normal(size=5000) + labels * 0.5, 1)  # many ties
    assert abs(roc_auc(labels, scores) - roc_auc_score(labels, scores)) < 1e-12


def test_auc_by_hand() -> None:
    # positives at 0.8 and 0.4; negatives at 0.4 and 0.1: pairs (0.8>0.4,0.8>0.1,0.4=0.4,0.4>0.1)
    assert roc_auc(np.array([1, 1, 0, 0]), np.array([0.8, 0.4, 0.4, 0.1])) == 3.5 / 4


def test_log_loss_matches_sklearn_and_is_stable() -> None:
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, 1000)
    logits = rng.normal(size=1000) * 3
    expected = sk_log_loss(labels, 1 / (1 + np.exp(-logits)))
    assert abs(log_loss(labels, logits) - expected) < 1e-9
    assert np.isfinite(log_loss(np.array([1, 0]), np.array([-1000.0, 1000.0])))
