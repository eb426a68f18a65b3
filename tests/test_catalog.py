"""``suite list`` reads the registries' lazy registrations (no torch); they equal the
imported registries, and a kind whose sources changed is read from its registry instead
(then kept in the user cache), so an edit or a new entry never needs the record rewritten."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from suite import catalog as module
from suite.catalog import KINDS, real_entries, recorded_entries
from suite.cli import main
from suite.commands.list import prepared_dir_of

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("kind", list(KINDS))
def test_listed_entries_equal_the_imported_registry(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``suite list`` shows is the registry's, whether the checked-in record is current
    (then it must equal the registry) or stale (then it is not used)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    real = [e.to_json() for e in real_entries(kind)]
    recorded = recorded_entries(kind)
    if recorded is not None:
        assert [e.to_json() for e in recorded] == real
    assert [e.to_json() for e in module.catalog([kind])[kind]] == real


def test_kinds_are_the_registries() -> None:
    from suite.commands.list import KINDS as LISTED
    from suite.registry import ALL_REGISTRIES

    assert list(KINDS) == list(ALL_REGISTRIES) == LISTED[:-1]


def test_an_edited_or_new_source_makes_the_record_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record is used only while every source it was read from is unchanged."""
    root = tmp_path / "suite"
    shutil.copytree(module.SUITE_ROOT, root, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(module, "SUITE_ROOT", root)
    assert recorded_entries("embeddings") is not None
    (root / "embeddings" / "new_method.py").write_text("# a new method\n")
    assert recorded_entries("embeddings") is None
    (root / "embeddings" / "new_method.py").unlink()
    assert recorded_entries("embeddings") is not None
    with (root / "config.py").open("a") as f:  # options inherit from suite.config.Frozen
        f.write("# an edit\n")
    assert recorded_entries("embeddings") is None


def test_listing_imports_neither_torch_nor_mlflow_nor_pandas(tmp_path: Path) -> None:
    code = (
        "import sys; from suite.cli import main; main(['list', '--json']);"
        "heavy = [m for m in ('torch', 'fbgemm_gpu', 'mlflow', 'pandas', 'numpy') "
        "if m in sys.modules]; sys.stderr.write(repr(heavy))"
    )
    # the first listing reads any kind whose record is stale from its registry, and caches it
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
            env=env,
        )
    assert out.stderr.strip().endswith("[]"), out.stderr
    data = json.loads(out.stdout)
    assert set(data) == {*KINDS, "presets"}


def test_list_json_has_options_defaults_protocols_and_status(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["list", "--json", "--cache-dir", str(tmp_path)]) == 0
    data = json.loads(capsys.readouterr().out)
    qr = next(e for e in data["embeddings"] if e["name"] == "qr")
    assert {o["name"]: o["default"] for o in qr["options"]}["collisions"] == 4
    synth = next(e for e in data["datasets"] if e["name"] == "criteo-synth")
    assert synth["default_protocol"] in synth["protocols"]
    assert synth["prepared"] == {
        "default": False,
        "caches": [],
        "root": str(tmp_path / "criteo-synth"),
    }
    assert "wukong-s" in {p["name"] for p in data["presets"]}


def test_prepared_status_follows_the_cache_rule(tmp_path: Path) -> None:
    from suite.config import DatasetSpec
    from suite.data.source import prepared_dir

    spec = DatasetSpec(name="criteo-synth", cache_dir=str(tmp_path))
    light = prepared_dir_of(spec.name, spec.protocol, spec.options, str(tmp_path))
    assert light == prepared_dir(spec)


@pytest.mark.parametrize(
    ("argv", "kinds", "names"),
    [
        (["embedding"], {"embeddings"}, None),
        (["datasets", "bars-*"], {"datasets"}, {"bars-criteo-x1", "bars-avazu-x1"}),
        (["preset", "wukong-s"], {"presets"}, {"wukong-s"}),
        (["q?"], {*KINDS, "presets"}, {"qr"}),
    ],
)
def test_singular_kinds_and_globs(
    argv: list[str], kinds: set[str], names: set[str] | None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["list", "--json", *argv]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == kinds
    found = {e["name"] for rows in data.values() for e in rows}
    assert found if names is None else names <= found
    if names is not None and len(names) == 1:
        assert found == names


def test_text_listing_shows_defaults_and_status(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "model", "dlrm"]) == 0
    out = capsys.readouterr().out
    assert "dlrm  DLRM" in out and 'interaction = "dot"' in out


def test_two_patterns_are_one_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "foo", "bar"]) == 2
    assert "one name pattern" in capsys.readouterr().err


def test_a_stale_kind_is_read_from_its_registry_and_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("RECSUITE_CATALOG_CACHE", raising=False)
    fresh = module.catalog(["models"])
    monkeypatch.setattr(module, "INDEX_FILE", tmp_path / "missing.json")  # as if stale
    assert module.catalog(["models"]) == fresh
    path = max((tmp_path / "recsuite" / "catalog").glob("models-*.json"), key=os.path.getmtime)
    assert module._cached_entries("models") == fresh["models"]
    path.write_text("{not json")  # a damaged cache is read again from the registry
    assert module.catalog(["models"]) == fresh


def test_help_imports_no_heavy_library() -> None:
    code = (
        "import sys; from suite.cli import make_parser; make_parser().format_help();"
        "print([m for m in ('torch', 'fbgemm_gpu', 'mlflow', 'optuna', 'pandas', 'pydantic') "
        "if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert out.stdout.strip() == "[]"
