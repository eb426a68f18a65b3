"""Model size presets: YAML files the CLI accepts, spanning >= 100x FLOPs per backbone."""

from __future__ import annotations

import pytest

from suite.cli import main
from suite.config import build_config
from suite.errors import SuiteError
from suite.presets import list_presets, preset_path
from suite.registry import MODELS

SIZES = ["xs", "s", "m", "l", "xl"]
BACKBONES = sorted({name.rsplit("-", 1)[0] for name in list_presets()})  # the size families
CRITEO_SHAPE = (13, 26)  # dense, sparse features


def criteo_flops(name: str) -> int:
    """Forward FLOPs per example of preset ``name``'s backbone on Criteo's feature shape."""
    config = build_config([preset_path(name)])
    backbone = MODELS.get(config.model.name)(
        *CRITEO_SHAPE, config.embedding.options["dim"], config.model.typed_options()
    )
    return backbone.flops_per_example()


def test_every_size_family_is_a_backbone_with_every_size() -> None:
    names = set(list_presets())
    assert BACKBONES and set(BACKBONES) <= set(MODELS.names())
    for backbone in BACKBONES:
        assert {f"{backbone}-{size}" for size in SIZES} <= names


@pytest.mark.parametrize("name", list_presets())
def test_preset_is_a_valid_partial_run_config(name: str) -> None:
    config = build_config([preset_path(name)])
    assert config.model.name == name.rsplit("-", 1)[0]
    assert preset_path(name).read_text().startswith("#")  # each file says what it is


@pytest.mark.parametrize("backbone", BACKBONES)
def test_sizes_grow_and_span_two_orders_of_magnitude(backbone: str) -> None:
    flops = [criteo_flops(f"{backbone}-{size}") for size in SIZES]
    assert flops == sorted(flops) and len(set(flops)) == len(flops)
    assert flops[-1] >= 100 * flops[0]


def test_default_scaling_family_spans_two_orders_of_magnitude() -> None:
    from suite.tasks.scaling import DEFAULT_PRESETS

    flops = [criteo_flops(name) for name in DEFAULT_PRESETS]
    assert max(flops) >= 100 * min(flops)


def test_cli_accepts_a_preset_file(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "--config", str(preset_path("wukong-s")), "--print-config"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "name: wukong" in printed and "num_fm: 8" in printed


def test_unknown_preset_suggests_a_close_name() -> None:
    with pytest.raises(
        SuiteError, match=r"unknown models preset 'wukong-sm'.*Did you mean 'wukong-s'"
    ):
        preset_path("wukong-sm")
