"""``benchmarks/bench_dense_step.py``: what each variant's process is given, and the
batch sizes a static-shape variant refuses."""

from __future__ import annotations

import pytest

from benchmarks.bench_dense_step import DATA, DEFAULT_BATCHES, VARIANTS, child_env, main


def test_default_batches_are_whole_batches_of_the_training_rows() -> None:
    """A partial last batch would recompile a static-shape variant inside its window."""
    for batch in DEFAULT_BATCHES.split(","):
        assert DATA["train_rows"] % int(batch) == 0


def test_a_variable_one_variant_sets_is_unset_for_the_others() -> None:
    """The parent's own OpenMP or Inductor settings never leak into a variant that does not
    name them; what a variant names wins; anything else passes through."""
    parent = {
        "OMP_WAIT_POLICY": "PASSIVE",
        "TORCHINDUCTOR_MAX_AUTOTUNE": "1",
        "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_SHAPES": "0",
        "PATH": "/bin",
    }
    assert child_env("compile", parent) == {"PATH": "/bin"}
    assert child_env("default", parent) == {"PATH": "/bin"}
    autotune = child_env("compile-autotune", parent)
    assert autotune["TORCHINDUCTOR_MAX_AUTOTUNE"] == "1"
    assert autotune["TORCH_DYNAMO_AUTOMATIC_DYNAMIC_SHAPES"] == "0"
    assert "OMP_WAIT_POLICY" not in autotune and autotune["PATH"] == "/bin"
    assert child_env("passive", {})["OMP_WAIT_POLICY"] == "PASSIVE"
    assert "train.compile=true" in VARIANTS["compile-autotune"][1]


def test_static_shape_variant_refuses_a_partial_batch_by_name(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--variants", "default,compile-autotune", "--batches", "128,1000"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--batches" in err and "[1000]" in err and "compile-autotune" in err
