"""Figures in human units, and progress bars that keep logs clean."""

from __future__ import annotations

import io
import sys

import pytest

from suite.progress import progress_bar
from suite.units import format_metric, human_bytes


@pytest.mark.parametrize(
    ("value", "text"),
    [(0, "0 B"), (512, "512 B"), (1536, "1.5 KiB"), (1_417_430, "1.35 MiB"), (3 * 2**30, "3 GiB")],
)
def test_bytes_in_binary_units(value: float, text: str) -> None:
    assert human_bytes(value) == text


def test_metrics_by_kind() -> None:
    assert format_metric("embedding_bytes", 1_417_430.0) == "1.35 MiB"
    assert format_metric("test_auc", 0.7512345678) == "0.751235"
    assert format_metric("train_samples_per_s", 28345.2) == "28,345"
    assert format_metric("flops_per_example", 123456.0) == "123,456"


def test_progress_in_a_log_is_lines_without_carriage_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = io.StringIO()  # not a terminal, as stderr redirected to a file
    monkeypatch.setattr(sys, "stderr", log)
    monkeypatch.delenv("RECSUITE_PROGRESS", raising=False)
    for _ in progress_bar(range(1000), desc="work", unit="step"):
        pass
    text = log.getvalue()
    assert "\r" not in text
    lines = [line for line in text.splitlines() if line]
    assert 1 <= len(lines) <= 3 and "1000/1000" in lines[-1]


def test_progress_can_be_silenced(monkeypatch: pytest.MonkeyPatch) -> None:
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    monkeypatch.setenv("RECSUITE_PROGRESS", "0")
    for _ in progress_bar(range(10), desc="work"):
        pass
    for _ in progress_bar(range(10), desc="work", enabled=False):
        pass
    assert log.getvalue() == ""
