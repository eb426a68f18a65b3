from __future__ import annotations

import pytest

from suite.errors import SuiteError
from suite.registry import (
    ALL_REGISTRIES,
    DATASETS,
    EMBEDDINGS,
    MODELS,
    TASKS,
    Registry,
    UnknownNameError,
)


def test_entries_register_themselves_and_are_discovered() -> None:
    assert "dlrm" in MODELS.names()
    assert "full" in EMBEDDINGS.names()
    assert {"criteo-synth", "avazu-synth", "movielens-synth"} <= set(DATASETS.names())
    assert "accuracy" in TASKS.names()


def test_unknown_name_lists_valid_names_and_suggests() -> None:
    with pytest.raises(UnknownNameError) as info:
        MODELS.get("dlmr")
    message = str(info.value)
    assert "Did you mean 'dlrm'?" in message
    assert "Valid:" in message and "dlrm" in message


def test_duplicate_name_is_an_error() -> None:
    registry: Registry[object] = Registry("thing")

    @registry.register("a")
    class A:
        """First."""

    with pytest.raises(SuiteError, match="duplicate thing name 'a'"):

        @registry.register("a")
        class B:
            """Second."""


def test_every_entry_has_a_one_line_description() -> None:
    for registry in ALL_REGISTRIES.values():
        for entry in registry:
            assert entry.description, f"{registry.kind} {entry.name} has no description"
            assert "\n" not in entry.description


def test_register_sets_the_name_once_and_checks_the_base_class() -> None:
    from suite.models.base import Backbone

    assert MODELS.get("dlrm").registered_name == "dlrm"
    assert DATASETS.get("bars-avazu-x1").registered_name == "bars-avazu-x1"
    registry: Registry[type] = Registry("model", base="suite.models.base:Backbone")
    with pytest.raises(SuiteError, match="must be a subclass of Backbone"):

        @registry.register("plain")
        class Plain:
            """Not a backbone."""

    @registry.register("ok")
    class Ok(Backbone):
        """A backbone."""

    assert registry.get("ok") is Ok and Ok.registered_name == "ok"


def test_one_suggestion_helper() -> None:
    from suite.registry import did_you_mean

    assert did_you_mean("dense_lrr", ["dense_lr", "sparse_lr"]) == " Did you mean 'dense_lr'?"
    assert did_you_mean("zzz", ["dense_lr"]) == ""
