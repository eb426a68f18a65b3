"""``benchmarks/bench_dense_step.py``: what each variant's process is given, and the
batch sizes a static-shape variant refuses."""

from __future__ import annotations

import pytest

from benchmarks.bench_dense_step import DATA, VARIANT_ENV, VARIANTS, main


def test_default_batches_are_whole_batches_of_the_training_rows() -> None:
    """A partial last batch would recompile a static-shape variant inside its window."""
    for batch in (128, 2048):
        assert DATA["train_rows"] % batch == 0


def test_a_variable_one_variant_sets_is_unset_for_the_others() -> None:
    assert {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "TORCHINDUCTOR_MAX_AUTOTUNE"} <= VARIANT_ENV
    env, sets = VARIANTS["compile-autotune"]
    assert env["TORCH_DYNAMO_AUTOMATIC_DYNAMIC_SHAPES"] == "0"
    assert "train.compile=true" in sets


def test_static_shape_variant_refuses_a_partial_batch_by_name(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--variants", "default,compile-autotune", "--batches", "128,1000"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--batches" in err and "[1000]" in err and "compile-autotune" in err
