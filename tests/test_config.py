from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from suite.config import RunConfig, build_config, parse_override
from suite.errors import ConfigError


def test_defaults_resolve_every_option() -> None:
    config = build_config()
    assert config.model.name == "dlrm"
    assert config.model.options["bottom_mlp"] == [64, 32]
    assert config.embedding.options == {"dim": 16, "backend": "fbgemm", "init": "reference"}
    assert config.dataset.protocol == "default"


def test_yaml_flags_and_overrides_give_the_same_object(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(
        "model:\n  name: dlrm\n  options:\n    bottom_mlp: 32-16\ntrain:\n  batch_size: 64\nseed: 3\n"
    )
    from_yaml = build_config([path])
    from_flags = build_config(
        components={"model": "dlrm"},
        values={"train.batch_size": 64, "seed": 3},
        overrides=["model.options.bottom_mlp=[32, 16]"],
    )
    assert from_yaml == from_flags
    assert from_yaml.config_hash() == from_flags.config_hash()


def test_config_is_frozen() -> None:
    config = build_config()
    with pytest.raises(ValidationError, match="frozen"):
        config.seed = 5  # type: ignore[misc]


def test_hash_is_stable_and_ignores_tracking_and_paths() -> None:
    a = build_config()
    b = build_config(values={"tracking.uri": "sqlite:///elsewhere.db", "dataset.cache_dir": "/x"})
    c = build_config(values={"seed": 1})
    assert a.config_hash() == b.config_hash()
    assert a.config_hash() != c.config_hash()
    assert len(a.config_hash()) == 16
    # canonical JSON: the same resolved config hashes the same in a fresh object
    assert RunConfig.model_validate(a.model_dump()).config_hash() == a.config_hash()


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["train.epochs=0"], "train.epochs: Input should be greater than or equal to 1"),
        (["train.dense_optimizer=lamb"], "train.dense_optimizer"),
        (
            ["embedding.options.backend=tf"],
            "embedding.options.backend: Input should be 'fbgemm' or 'torch'",
        ),
        (["model.options.top_mlp=abc"], "model.options.top_mlp: layer sizes must look like"),
        (["model.options.unknown=1"], "model.options.unknown: unknown key"),
        (["dataset.protocol=nope"], "dataset.protocol: unknown protocol 'nope'"),
        (["model.name=dlrmm"], "unknown model 'dlrmm'. Did you mean 'dlrm'?"),
        (["colour=red"], "colour: unknown key"),
    ],
)
def test_bad_values_name_the_field(overrides: list[str], expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_config(overrides=overrides)
    assert expected in str(info.value)


def test_malformed_yaml_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("model:\n  name: dlrm\n bad: [\n")
    with pytest.raises(ConfigError, match=r"malformed YAML in .*bad.yaml:3"):
        build_config([path])


def test_changing_a_component_name_drops_its_old_options(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("dataset:\n  name: criteo-synth\n  options:\n    train_rows: 100\n")
    config = build_config([path], components={"dataset": "avazu-synth"})
    assert config.dataset.name == "avazu-synth"
    assert config.dataset.options["train_rows"] == 400_000


def test_parse_override_reads_values_as_yaml() -> None:
    assert parse_override("a.b=3") == ("a.b", 3)
    assert parse_override("a=[1, 2]") == ("a", [1, 2])
    assert parse_override("a=x") == ("a", "x")
    with pytest.raises(ConfigError, match="dotted.key=value"):
        parse_override("novalue")


def test_unknown_key_gets_a_suggestion() -> None:
    with pytest.raises(
        ConfigError, match=r"train\.dense_lrr: unknown key\. Did you mean 'dense_lr'\?"
    ):
        build_config(overrides=["train.dense_lrr=0.1"])
    with pytest.raises(
        ConfigError, match=r"embedding\.options\.dimm: unknown key\. Did you mean 'dim'\?"
    ):
        build_config(overrides=["embedding.options.dimm=8"])


def test_config_accepts_a_preset_by_name() -> None:
    by_name = build_config(["wukong-s"])
    assert by_name.model.name == "wukong"
    from suite.presets import preset_path

    assert by_name == build_config([preset_path("wukong-s")])
    with pytest.raises(ConfigError, match=r"no preset of that name\. Did you mean 'wukong-s'\?"):
        build_config(["wukong-ss"])
