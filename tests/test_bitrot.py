"""Issue 33 item 4: bits that rot in place are not trusted.

A prepared array changed in place with its size, inode and mtime kept is refused on every
load (nothing remembers an earlier check by stat), and a checkpoint whose manifest was
edited is refused before anything is trained from it. Real prepared slots under tmp_path
(the ``isolated`` fixture's cache) and real checkpoints; nothing is mocked.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from suite.data.prepared import content_fingerprint, load_prepared
from suite.data.source import get_prepared
from suite.engine.checkpoint import CheckpointError, CheckpointPolicy
from suite.errors import DataError
from tests.conftest import tiny_config
from tests.test_checkpoint import _restored, _trained

LONG_AGO_NS = 1_000_000_000 * 1_000_000_000  # 2001: older than any check's clock


def _aged_slot() -> Path:
    """The tiny criteo-synth slot, its arrays dated 2001 and loaded once, so an earlier
    check (if anything remembered one by size, mtime and inode) would vouch for them."""
    data = get_prepared(tiny_config().dataset, progress=False)
    assert data.path is not None
    for name in data.manifest["files"]:
        os.utime(data.path / name, ns=(LONG_AGO_NS, LONG_AGO_NS))
    load_prepared(data.path)
    return data.path


def _rot(path: Path, offset: int, value: int) -> None:
    """Overwrite the byte at ``offset`` in place, then put the file's times back."""
    before = path.stat()
    with open(path, "r+b") as handle:
        handle.seek(offset)
        assert handle.read(1) != bytes([value]), "the byte must change"
        handle.seek(offset)
        handle.write(bytes([value]))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (
        before.st_size,
        before.st_mtime_ns,
        before.st_ino,
    )


def _label_to_half(path: Path) -> tuple[int, str]:
    """A 0.0 label's top byte set to 0x3F makes it 0.5 (float32 0x3F000000)."""
    row = int(np.flatnonzero(np.fromfile(path, dtype=np.float32) == 0)[0])
    return 4 * row + 3, rf"label 0\.5 at row {row} \(labels must be 0 or 1\)"


def _dense_to_nan(path: Path) -> tuple[int, str]:
    """A value whose exponent's low bit and some mantissa bit are set becomes NaN when its
    top byte turns 0x7F (exponent all ones)."""
    bits = np.fromfile(path, dtype=np.uint32)
    index = int(np.flatnonzero((bits & 0x0080_0000 != 0) & (bits & 0x007F_FFFF != 0))[0])
    row, col = divmod(index, 13)
    return 4 * index + 3, rf"non-finite value nan in dense column I{col + 1} at row {row}"


def _id_out_of_range(path: Path) -> tuple[int, str]:
    """An int32 id's top byte set to 0x7F puts it past every vocabulary."""
    return 4 * (26 * 7 + 2) + 3, r"column C3 holds id \d+ at row 7, outside its vocabulary"


@pytest.mark.parametrize(
    ("name", "where"),
    [
        ("train.label.f32", _label_to_half),
        ("train.dense.f32", _dense_to_nan),
        ("train.sparse.i32", _id_out_of_range),
    ],
)
def test_a_byte_changed_in_place_with_its_mtime_kept_is_refused(name: str, where) -> None:
    path = _aged_slot()
    target = path / name
    offset, diagnosis = where(target)
    _rot(target, offset, 0x7F if "label" not in name else 0x3F)
    with pytest.raises(DataError) as refused:
        load_prepared(path)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"{target}: content does not match the manifest's sha256")
    assert "changed since it was prepared" in message
    assert "`suite prepare criteo-synth --protocol default`" in message
    assert refused.match(diagnosis)
    with pytest.raises(DataError, match=diagnosis):
        get_prepared(tiny_config().dataset, progress=False)  # what `suite run` calls


def test_a_change_no_invariant_sees_is_refused_too() -> None:
    """A flipped low mantissa bit leaves every label, value and id valid: the checksum
    alone catches it, so the message says what changed and offers no diagnosis."""
    path = _aged_slot()
    target = path / "train.dense.f32"
    first = target.read_bytes()[0]
    _rot(target, 0, first ^ 0x01)
    with pytest.raises(DataError, match=r"changed since it was prepared; prepare it again") as e:
        load_prepared(path)
    assert str(e.value).startswith(f"{target}: ")


def test_an_untouched_slot_loads_every_time_with_its_fingerprint_unchanged() -> None:
    data = get_prepared(tiny_config().dataset, progress=False)
    path = _aged_slot()
    for _ in range(2):
        again = load_prepared(path)
        assert again.fingerprint == data.fingerprint
        assert np.array_equal(again.split("train").label, data.split("train").label)
    # the fingerprint is still the content's, computed as before (checksums are outside it)
    assert data.fingerprint == content_fingerprint(
        path, data.schema, data.manifest["rows"], np.dtype(data.manifest["sparse_dtype"])
    )
    assert not (path / ".verified.json").exists()  # nothing remembered between loads


# --- checkpoints ------------------------------------------------------------------------------


def _checkpointed(tmp_path: Path):
    config = tiny_config(overrides=["train.max_steps=6"])
    data, _, written = _trained(config, tmp_path / "ck", CheckpointPolicy(), every=6)
    assert [w.step for w in written] == [6]
    return config, data, tmp_path / "ck" / "ckpt-000001" / "manifest.json"


def test_an_edited_checkpoint_manifest_is_refused_before_training(tmp_path: Path) -> None:
    config, data, manifest_path = _checkpointed(tmp_path)
    manifest = json.loads(manifest_path.read_text())
    # the same content laid out otherwise is the same manifest
    manifest_path.write_text(json.dumps(manifest, indent=4))
    _, loop = _restored(config, data, tmp_path / "ck")
    assert loop is not None and loop.step == 6

    manifest["loop"]["step"] += 100  # would skip 100 steps
    manifest_path.write_text(json.dumps(manifest, indent=1))
    with pytest.raises(CheckpointError) as refused:
        _restored(config, data, tmp_path / "ck")
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"{manifest_path}: edited or corrupt since checkpoint ckpt-000001")
    assert "refusing to load it" in message

    del manifest["manifest_sha256"]  # dropping the checksum is no way around it
    manifest_path.write_text(json.dumps(manifest, indent=1))
    with pytest.raises(CheckpointError, match="edited or corrupt since checkpoint ckpt-000001"):
        _restored(config, data, tmp_path / "ck")


def test_a_checkpoint_from_before_the_manifest_checksum_is_refused(tmp_path: Path) -> None:
    config, data, manifest_path = _checkpointed(tmp_path)
    manifest = json.loads(manifest_path.read_text())
    del manifest["manifest_sha256"]
    manifest["version"] = 1  # as format 1 wrote it
    manifest_path.write_text(json.dumps(manifest, indent=1))
    with pytest.raises(
        CheckpointError, match=r"manifest.json: format version 1, this suite reads 2"
    ):
        _restored(config, data, tmp_path / "ck")
