"""The codecs on a real all-to-all: 2 gloo processes exchange pooled embeddings."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from suite.engine.comm_codec import (
    all_to_all_pooled,
    decode,
    encode,
    from_bytes,
    table_bounds,
    to_bytes,
)
from suite.engine.parallel import gather_to_file, spawn_gloo

BATCH, TABLES, DIM, BOUND = 64, 5, 8, 0.01


def payload(rank: int, world: int) -> torch.Tensor:
    """What ``rank`` sends: tables of very different ranges. ``[world * BATCH, TABLES, DIM]``."""
    rng = np.random.default_rng(100 + rank)
    scales = np.array([1e-3, 0.05, 1.0, 30.0, 0.2])[None, :, None]
    values = rng.standard_t(3, size=(world * BATCH, TABLES, DIM)) * scales
    return torch.from_numpy(values.astype(np.float32))


CASTS = {"none": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _exchange(rank: int, world: int, out_path: str) -> None:
    figures = {}
    for codec in ("none", "fp16", "bf16", "lossy"):
        received, stats = all_to_all_pooled(payload(rank, world), codec, relative_bound=BOUND)
        excess = []
        for src in range(world):
            sent = payload(src, world)[rank * BATCH : (rank + 1) * BATCH]
            if codec in CASTS:  # exactly the sender's cast, back in float32
                expected = sent.to(CASTS[codec]).float()
                excess.append(float((received[src] - expected).abs().max()))
            else:
                bounds = table_bounds(payload(src, world).numpy(), BOUND)  # the sender's
                error = (received[src].double() - sent.double()).abs()
                slack = sent.double().abs() * 2.0**-24  # the float32 result's half ulp
                bound = torch.from_numpy(bounds)[None, :, None]
                excess.append(float((error - bound - slack).max()))
        figures[codec] = {
            "raw": stats.raw_bytes,
            "wire": stats.wire_bytes,
            "codec_s": stats.codec_seconds,
            "comm_s": stats.comm_seconds,
            "max_excess": max(excess),
            "shape": list(received.shape),
        }
    gather_to_file(rank, figures, out_path)


def test_two_ranks_exchange_coded_payloads_within_their_bounds(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    spawn_gloo(_exchange, 2, str(out))
    ranks = json.loads(out.read_text())
    raw = BATCH * TABLES * DIM * 4  # float32 bytes each rank sends to the other one
    for figures in ranks:
        assert all(f["shape"] == [2, BATCH, TABLES, DIM] for f in figures.values())
        assert figures["none"]["raw"] == figures["none"]["wire"] == raw
        assert figures["fp16"]["wire"] == figures["bf16"]["wire"] == raw // 2
        for cast in CASTS:
            assert figures[cast]["max_excess"] == 0.0  # what arrives is exactly what was cast
        lossy = figures["lossy"]
        assert lossy["raw"] == raw and 0 < lossy["wire"] < raw // 2
        assert lossy["max_excess"] <= 0.0  # every received value within its table's bound
        assert all(f["comm_s"] > 0 and f["codec_s"] >= 0 for f in figures.values())


def test_the_wire_form_round_trips_and_its_length_is_what_nbytes_reports() -> None:
    values = payload(0, 2).numpy()
    encoded = encode(values, table_bounds(values, BOUND))
    wire = to_bytes(encoded)
    assert len(wire) == encoded.nbytes
    back = from_bytes(wire, values.shape)
    assert back.dtypes == encoded.dtypes and back.blobs == encoded.blobs
    assert np.array_equal(decode(back), decode(encoded))
    with pytest.raises(ValueError, match="cut short"):
        from_bytes(wire[:-3], values.shape)
    with pytest.raises(ValueError, match="after its"):
        from_bytes(wire + b"\0", values.shape)
