"""Checkpoints: exact restore of every kind's chain, quantization, faults and refusals."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
import torch

from suite.config import RunConfig
from suite.data.source import get_prepared
from suite.engine import checkpoint as ck
from suite.engine.build import build_model
from suite.engine.checkpoint import (
    Checkpointer,
    CheckpointError,
    CheckpointEvery,
    CheckpointPolicy,
    adaptive_bits,
    dequantize_rows,
    quantize_rows,
    run_checkpoints,
)
from suite.engine.train import train
from suite.errors import ConfigError, SuiteError
from tests.conftest import tiny_config

CPU = torch.device("cpu")


def _identity(config: RunConfig, fingerprint: str) -> dict[str, str]:
    return {"config_hash": config.config_hash(), "data_fingerprint": fingerprint}


def _trained(config: RunConfig, root: Path, policy: CheckpointPolicy, every: int = 6, **kw):
    data = get_prepared(config.dataset, progress=False)
    model = build_model(config, data)
    with Checkpointer(
        root, _identity(config, data.fingerprint), CheckpointEvery(steps=every), policy
    ) as c:
        train(model, data, config.train, config.seed, CPU, checkpoints=c, **kw)
    return data, model, c.written


def _restored(config: RunConfig, data, root: Path, seq: int | bool = True):
    model = build_model(config, data)
    with Checkpointer(root, _identity(config, data.fingerprint), resume=seq) as c:
        loop = c.restore(model, None)
    return model, loop


@pytest.mark.parametrize("bits", [8, 4, 2])
def test_row_quantization_is_within_half_a_step(bits: int) -> None:
    x = torch.randn(37, 13) * torch.linspace(0.01, 3, 37)[:, None]
    q = quantize_rows(x, bits, adaptive=False)
    assert q["codes"].dtype == torch.uint8 and q["codes"].shape == (37, -(-13 * bits // 8))
    back = dequantize_rows(q, bits, 13)
    step = (x.max(1).values - x.min(1).values) / ((1 << bits) - 1)
    # half a step, plus float16 rounding of the scale and minimum
    bound = step / 2 + (x.abs().max(1).values + step * (1 << bits)) * 2**-10
    assert ((back - x).abs() <= bound[:, None]).all()


def _greedy_reference(row: list[float], bits: int, bins: int = 200, ratio: float = 0.16):
    """The greedy range search one row at a time, in float64 (float16 scale and minimum)."""
    import numpy as np

    levels = (1 << bits) - 1

    def loss(lo: float, hi: float) -> float:
        lo16 = float(np.float16(lo))
        scale = float(np.float16((hi - lo16) / levels)) if hi > lo16 else 1.0
        codes = np.clip(np.round((np.asarray(row) - lo16) / scale), 0, levels)
        return float(((codes * scale + lo16 - np.asarray(row)) ** 2).sum())

    lo, hi = min(row), max(row)
    step = (hi - lo) / bins
    cur_lo, cur_hi, cur, found = lo, hi, loss(lo, hi), []
    while cur_lo + step * bins * (1 - ratio) < cur_hi:
        left, right = loss(cur_lo + step, cur_hi), loss(cur_lo, cur_hi - step)
        if cur < left and cur < right:
            found.append((cur, cur_lo, cur_hi))
        if left < right:
            cur_lo, cur = cur_lo + step, left
        else:
            cur_hi, cur = cur_hi - step, right
    return min(found)[1:] if found else (lo, hi)


@pytest.mark.parametrize("bits", [4, 2])
def test_adaptive_quantization_searches_each_rows_range(bits: int) -> None:
    """Check-N-Run's adaptive asymmetric quantization: each row's range is cut (by at most
    16%) where it lowers the error, which outlier rows gain most from; 8 bits keep min/max."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(300, 16, generator=generator) * 0.05
    x[::3, 5] *= 8  # one outlier in every third row
    plain = (dequantize_rows(quantize_rows(x, bits, adaptive=False), bits, 16) - x).pow(2).sum(1)
    adaptive = (dequantize_rows(quantize_rows(x, bits), bits, 16) - x).pow(2).sum(1)
    assert (adaptive <= plain * (1 + 1e-3) + 1e-9).all()
    assert adaptive[::3].mean() < 0.9 * plain[::3].mean()
    lo, hi = ck.greedy_range(x, bits)
    span = x.max(1).values - x.min(1).values
    assert (lo >= x.min(1).values).all() and (hi <= x.max(1).values).all()
    assert ((hi - lo) >= (1 - 0.16) * span - 1e-6).all()
    for r in range(0, 300, 37):
        ref_lo, ref_hi = _greedy_reference(x[r].double().tolist(), bits)
        assert lo[r].item() == pytest.approx(ref_lo, abs=2e-3 * span[r].item())
        assert hi[r].item() == pytest.approx(ref_hi, abs=2e-3 * span[r].item())
    eight = quantize_rows(x, 8)
    assert torch.equal(eight["codes"], quantize_rows(x, 8, adaptive=False)["codes"])


def test_constant_rows_quantize_exactly() -> None:
    x = torch.full((3, 8), 0.25)
    assert torch.equal(dequantize_rows(quantize_rows(x, 4), 4, 8), x)


@pytest.mark.parametrize("incremental", [False, True])
def test_restore_of_full_and_incremental_chains_is_exact(tmp_path: Path, incremental: bool) -> None:
    config = tiny_config(overrides=["train.max_steps=20"])
    policy = CheckpointPolicy(incremental=incremental, restore_budget=5.0)
    data, model, written = _trained(config, tmp_path / "c", policy)
    kinds = [w.kind for w in written]
    assert kinds[0] == "full"
    if incremental:
        assert kinds[1:] == ["incremental"] * (len(kinds) - 1)
        assert all(w.embedding_bytes < written[0].embedding_bytes for w in written[1:])
    # the last checkpoint (step 18) restored equals the model trained to step 18
    reference = build_model(config, data)
    train(reference, data, config.train.model_copy(update={"max_steps": 18}), config.seed, CPU)
    restored, loop = _restored(config, data, tmp_path / "c")
    assert loop is not None and loop.step == 18
    # fbgemm's `iter` also counts evaluation forwards: the reference validated once more
    for name, value in reference.embedding.checkpoint_state().items():
        if name != "tables.iter":
            assert torch.equal(restored.embedding.checkpoint_state()[name], value), name
    for (name, a), b in zip(
        reference.state_dict().items(), restored.state_dict().values(), strict=True
    ):
        if not name.endswith(".iter"):
            assert torch.equal(a, b), name


def test_quantized_restore_is_close_not_equal(tmp_path: Path) -> None:
    config = tiny_config(overrides=["train.max_steps=12"])
    data, model, written = _trained(config, tmp_path / "q", CheckpointPolicy(bits=4), every=12)
    assert written[-1].bits == 4
    restored, _ = _restored(config, data, tmp_path / "q")
    for name, value in model.embedding.checkpoint_state().items():
        got = restored.embedding.checkpoint_state()[name]
        if name.endswith(".weight"):  # the weights as 4 bits hold them, row by row
            expected = dequantize_rows(quantize_rows(value, 4), 4, value.shape[1])
            assert torch.equal(got, expected) and not torch.equal(got, value), name
            span = value.max(1).values - value.min(1).values
            assert ((got - value).abs() <= span[:, None] * (0.16 + 0.51 / 15) + 1e-3).all()
        elif name != "tables.iter":  # optimizer state stays exact
            assert torch.equal(got, value), name


def test_incremental_policy_takes_a_full_checkpoint_to_bound_restore(tmp_path: Path) -> None:
    config = tiny_config(overrides=["train.max_steps=30"])
    _, _, written = _trained(
        config, tmp_path / "b", CheckpointPolicy(incremental=True, restore_budget=0.5), every=3
    )
    kinds = [w.kind for w in written]
    assert kinds.count("full") >= 2 and "incremental" in kinds
    chain = 0
    for info in written:  # the increments since a full one stay within the budget
        chain = 0 if info.kind == "full" else chain + info.bytes
        full = max(w.bytes for w in written if w.kind == "full" and w.seq <= info.seq)
        assert chain <= 0.5 * full + max(w.bytes for w in written)


def test_disk_full_during_a_write_keeps_the_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tiny_config(overrides=["train.max_steps=12"])
    data, model, written = _trained(config, tmp_path / "d", CheckpointPolicy(), every=6)
    assert [w.seq for w in written] == [1, 2]
    real = ck.store.write_tensors

    def full_disk(tensors, directory):
        real(tensors, directory)  # the files are there, half of one is lost
        victim = next(p for p in Path(directory).iterdir() if p.suffix == ".distcp")
        victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ck.store, "write_tensors", full_disk)
    model2 = build_model(config, data)
    root = tmp_path / "d"
    with Checkpointer(root, _identity(config, data.fingerprint), CheckpointEvery(steps=3)) as c:
        c.start(model2)
        with pytest.raises(CheckpointError) as err:
            c.save(model2, None, ck.LoopState(step=99))
    message = str(err.value)
    assert "\n" not in message and "No space left on device" in message
    assert "ckpt-000002 is intact" in message
    assert not list(root.glob(".tmp-*")) and not (root / "ckpt-000003").exists()
    monkeypatch.setattr(ck.store, "write_tensors", real)
    _, loop = _restored(config, data, root)
    assert loop is not None and loop.step == 12


def test_two_runs_never_share_a_directory(tmp_path: Path) -> None:
    with (
        Checkpointer(tmp_path / "x", {}),
        pytest.raises(CheckpointError, match="in use by another run"),
    ):
        Checkpointer(tmp_path / "x", {})
    Checkpointer(tmp_path / "x", {}).close()  # free again once the first is closed


def test_foreign_and_mismatched_checkpoints_are_refused(tmp_path: Path) -> None:
    config = tiny_config(overrides=["train.max_steps=6"])
    data, _, _ = _trained(config, tmp_path / "m", CheckpointPolicy(), every=6)
    other = tiny_config(overrides=["train.max_steps=6", "seed=5"])
    with pytest.raises(CheckpointError, match="config hash .* refusing to resume") as err:
        _restored(other, data, tmp_path / "m")
    assert "manifest.json" in str(err.value) and "\n" not in str(err.value)
    foreign = tmp_path / "f" / "ckpt-000001"
    foreign.mkdir(parents=True)
    (foreign / "weights.bin").write_bytes(b"\0" * 64)
    with pytest.raises(CheckpointError, match=r"manifest.json: missing"):
        _restored(config, data, tmp_path / "f")


def test_fresh_run_over_earlier_checkpoints_is_refused(tmp_path: Path) -> None:
    config = tiny_config(
        overrides=[
            "train.max_steps=6",
            f"train.checkpoint_dir={tmp_path / 'runs'}",
            "train.checkpoint_every=3",
        ]
    )
    data = get_prepared(config.dataset, progress=False)
    with pytest.raises(CheckpointError, match="no checkpoint to resume"):
        run_checkpoints(config, data.fingerprint, resume=True)
    first = run_checkpoints(config, data.fingerprint, resume=False)
    assert first is not None
    train(build_model(config, data), data, config.train, config.seed, CPU, checkpoints=first)
    first.close()
    with pytest.raises(CheckpointError, match="pass --resume"):
        run_checkpoints(config, data.fingerprint, resume=False)
    resumed = run_checkpoints(config, data.fingerprint, resume=True)
    assert resumed is not None and resumed.identity["config_hash"] == config.config_hash()
    resumed.close()


def without_checkpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every registered method checkpoints now: FIITED stands for one that does not (a
    new method that has not implemented checkpoint_state())."""
    from suite.embeddings.base import EmbeddingMethod
    from suite.embeddings.fiited import FiitedEmbedding

    monkeypatch.setattr(FiitedEmbedding, "checkpoint_state", EmbeddingMethod.checkpoint_state)


def test_a_method_that_cannot_checkpoint_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    without_checkpoints(monkeypatch)
    config = tiny_config(embedding="fiited", overrides=["train.max_steps=4"])
    data = get_prepared(config.dataset, progress=False)
    model = build_model(config, data)
    with (
        Checkpointer(tmp_path / "fi", {}, CheckpointEvery(steps=2)) as c,
        pytest.raises(SuiteError, match="cannot be checkpointed yet") as err,
    ):
        train(model, data, config.train, config.seed, CPU, checkpoints=c)
    assert "\n" not in str(err.value)


def test_interval_parsing_and_config_validation() -> None:
    assert CheckpointEvery.parse(500) == CheckpointEvery(steps=500)
    assert CheckpointEvery.parse("30s") == CheckpointEvery(seconds=30.0)
    assert CheckpointEvery.parse("5m") == CheckpointEvery(seconds=300.0)
    assert CheckpointEvery.parse(None) is None
    with pytest.raises(ConfigError, match="train.checkpoint_every"):
        tiny_config(overrides=["train.checkpoint_every=soon"])
    # where and how often a run is checkpointed does not change what it computes
    assert (
        tiny_config(overrides=["train.checkpoint_every=5m"]).config_hash()
        == tiny_config().config_hash()
    )


def test_adaptive_bits_follow_the_expected_restores() -> None:
    cost = {2: 0.0008, 4: 0.0001, 8: 0.00001}
    assert adaptive_bits(1, cost) == 2
    assert adaptive_bits(5, cost) == 4
    assert adaptive_bits(50, cost) == 8
    assert adaptive_bits(500, cost) == 32


def test_time_interval_checkpoints_by_wall_clock(tmp_path: Path) -> None:
    config = tiny_config(overrides=["train.max_steps=8"])
    data = get_prepared(config.dataset, progress=False)
    model = build_model(config, data)
    with Checkpointer(tmp_path / "t", {}, CheckpointEvery(seconds=1e-9)) as c:
        train(model, data, config.train, config.seed, CPU, checkpoints=c)
    assert [w.step for w in c.written] == list(range(1, 9))  # due after every step
    with Checkpointer(tmp_path / "u", {}, CheckpointEvery.parse("1h")) as c:
        train(build_model(config, data), data, config.train, config.seed, CPU, checkpoints=c)
    assert c.written == []
