"""Every registered embedding method on CUDA (marker ``gpu``; skipped without a CUDA device;
fbgemm not needed: table-backed methods use the torch backend where it does not load).

Built from the same seed, a method's storage on CUDA equals its CPU build's bit for bit and
``memory()`` counts the same bytes; its lookups and one training step agree with CPU's up
to float rounding; a checkpoint written on CUDA restores there bit for bit. The GPU
check's ``methods`` step runs the same functions and adds each method's train step cost.
"""

from __future__ import annotations

import pytest
import torch

from suite.gpu_check.methods import agreement, checkpoint_round_trip
from suite.registry import EMBEDDINGS

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

CUDA = torch.device("cuda")


@pytest.mark.parametrize("method", EMBEDDINGS.names())
def test_method_on_cuda_agrees_with_its_cpu_build(method: str) -> None:
    figures, problems = agreement(method, CUDA)
    assert problems == [], figures
    assert figures["embedding_total_bytes"] > 0


@pytest.mark.parametrize("method", EMBEDDINGS.names())
def test_method_checkpoint_written_on_cuda_restores_bit_for_bit(method: str) -> None:
    assert checkpoint_round_trip(method, CUDA) == []
