"""A checkpoint root on disk: its lock, atomic fsync'ed writes, checksums, and verified reads.

A checkpoint root holds one run's checkpoints::

    LOCK              flock'ed by the one run writing here (two runs never share a root)
    ckpt-000007/      one checkpoint: torch.distributed.checkpoint (DCP) files and
                      manifest.json (written last: kind, step, chain, loop state, checksums,
                      and its own checksum)
    best-000000420/   the best-so-far model for ``checkpoint: best``, written when it changes
    .tmp-*            a write in progress: never read, removed when the root is opened

Every write goes to a ``.tmp-*`` directory, is fsync'ed, then renamed into place, so a
killed or failed write (disk full) leaves the previous checkpoint intact and is never
loaded. Every file's size and SHA-256 are in the manifest and checked on load, and the
manifest carries the SHA-256 of its own content (``manifest_sha256``), so an edited
manifest (``loop.step`` changed, say) is refused like a corrupt tensor file; a torn,
corrupt or foreign directory is refused with one line naming the file. Checkpoints of
format version 1 (before the manifest's checksum) are refused, as every other version.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch

from suite.errors import DiskFullError, SuiteError
from suite.fileio import check_space, disk_full_error, is_disk_full

FORMAT = "recsuite-checkpoint"
FORMAT_VERSION = 2
MANIFEST = "manifest.json"
MANIFEST_DIGEST = "manifest_sha256"
CHECKPOINT_RE = re.compile(r"^ckpt-(\d{6})$")


CHECKPOINT_OPTION = "train.checkpoint_dir"
"""The setting that moves checkpoints, named when their disk is full."""

Chain = list[tuple[dict[str, Any], dict[str, torch.Tensor]]]
"""Manifests and tensors of the checkpoints from a full one to an increment, in order."""


class CheckpointError(SuiteError):
    """A checkpoint cannot be written or read; the message names the file."""


class CheckpointDiskFull(CheckpointError, DiskFullError):
    """A checkpoint's disk is full; the message names the file and the space."""


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of ``t``'s elements."""
    return t.numel() * t.element_size()


def data_bytes(path: Path) -> int:
    """Bytes of the data files directly in checkpoint directory ``path``: every file but its
    manifest, whose time stamps and timings make its length vary from run to run."""
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file() and f.name != MANIFEST)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def manifest_digest(manifest: dict[str, Any]) -> str:
    """SHA-256 of a checkpoint manifest's content without its ``manifest_sha256`` field:
    its canonical JSON (sorted keys, as read back from disk), so the same however it is
    indented."""
    content = {k: v for k, v in manifest.items() if k != MANIFEST_DIGEST}
    as_read = json.loads(json.dumps(content))  # tuples, int keys: as a reader sees them
    canonical = json.dumps(as_read, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _dcp():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torch.distributed.checkpoint as dcp
    return dcp


def _unwrap_dcp(exc: BaseException) -> BaseException:
    """The first rank's exception inside DCP's ``CheckpointException``, else ``exc``."""
    failures = getattr(exc, "failures", None)
    if type(exc).__name__ == "CheckpointException" and isinstance(failures, dict) and failures:
        first = next(iter(failures.values()))
        return first[0] if isinstance(first, tuple) else first
    return exc


def write_tensors(tensors: dict[str, torch.Tensor], directory: Path) -> None:
    """Write named CPU tensors with torch.distributed.checkpoint (fsync'ed files), all in
    ``directory``: not collective, even in a rank of a distributed run."""
    dcp = _dcp()
    writer = dcp.FileSystemWriter(str(directory), sync_files=True, thread_count=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(tensors, storage_writer=writer, no_dist=True)  # a rank writes its own part


def read_tensors(directory: Path) -> dict[str, torch.Tensor]:
    """Read every tensor of a DCP directory, allocated from its metadata."""
    dcp = _dcp()
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    reader = dcp.FileSystemReader(str(directory))
    metadata = reader.read_metadata()
    tensors = {}
    for name, item in metadata.state_dict_metadata.items():
        if not isinstance(item, TensorStorageMetadata):
            raise CheckpointError(f"{directory}: entry {name!r} is not a tensor")
        tensors[name] = torch.empty(item.size, dtype=item.properties.dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(tensors, storage_reader=reader, no_dist=True)
    return tensors


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest of the checkpoint directory ``path``, after checking its format,
    version and own checksum (one line naming the file otherwise)."""
    file = path / MANIFEST
    if not path.is_dir():
        raise CheckpointError(f"{path}: checkpoint directory is missing")
    try:
        manifest = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(
            f"{file}: missing (not a recsuite checkpoint, or a torn write)"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{file}: unreadable ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(
            f"{file}: not a recsuite checkpoint (format {manifest.get('format') if isinstance(manifest, dict) else None!r})"
        )
    if manifest.get("version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{file}: format version {manifest.get('version')}, this suite reads {FORMAT_VERSION}"
        )
    if manifest.get(MANIFEST_DIGEST) != manifest_digest(manifest):
        raise CheckpointError(
            f"{file}: edited or corrupt since checkpoint {path.name} was written (its "
            f"{MANIFEST_DIGEST} does not match its content); refusing to load it"
        )
    return manifest


def verified(path: Path) -> Path:
    """``path``, after checking every file's size and SHA-256 against its manifest and
    that it holds no other file."""
    manifest = read_manifest(path)
    files = manifest.get("files") or {}
    for name, expected in files.items():
        file = path / name
        if not file.is_file():
            raise CheckpointError(f"{file}: missing")
        size = file.stat().st_size
        if size != expected["bytes"]:
            raise CheckpointError(
                f"{file}: truncated or grown ({size} bytes, expected {expected['bytes']})"
            )
        if _sha256(file) != expected["sha256"]:
            raise CheckpointError(f"{file}: corrupt (SHA-256 differs from the manifest's)")
    extra = sorted(p.name for p in path.iterdir() if p.name not in files and p.name != MANIFEST)
    if extra:
        raise CheckpointError(f"{path / extra[0]}: not part of this checkpoint")
    return path


class CheckpointStore:
    """One run's checkpoint root: holds ``root/LOCK`` until :meth:`close`, publishes
    checkpoint directories atomically and reads them back verified."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._lock_fd: int | None = None
        self._lock()

    def _lock(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise CheckpointError(
                f"checkpoint directory {self.root} is in use by another run (pid {holder}); "
                "two runs never write into one directory"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock_fd = fd
        for stale in self.root.glob(".tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)

    def close(self) -> None:
        """Release the lock (again: nothing)."""
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def latest_seq(self) -> int:
        """The newest checkpoint's sequence number; 0 when there is none."""
        seqs = [int(m[1]) for p in self.root.iterdir() if (m := CHECKPOINT_RE.match(p.name))]
        return max(seqs, default=0)

    def drop_newer_than(self, seq: int) -> None:
        """Remove the checkpoints after ``seq`` (none when ``seq`` is 0)."""
        for path in self.root.iterdir():
            match = CHECKPOINT_RE.match(path.name)
            if match and int(match[1]) > seq > 0:
                shutil.rmtree(path)

    def publish(
        self, name: str, tensors: dict[str, torch.Tensor], manifest: dict[str, Any]
    ) -> Path:
        """Write ``tensors`` and ``manifest`` (completed with every file's size and SHA-256
        and its own checksum) as ``root/name``, atomically: to a ``.tmp-*`` directory,
        fsync'ed, then renamed. A full disk or failed write raises one line saying the
        previous checkpoint is intact."""
        final = self.root / name
        tmp = self.root / f".tmp-{name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        needed = sum(tensor_bytes(t) for t in tensors.values())
        try:
            check_space(self.root, needed, CHECKPOINT_OPTION)
            tmp.mkdir()
            write_tensors(tensors, tmp)
            manifest["files"] = {
                f.name: {"bytes": f.stat().st_size, "sha256": _sha256(f)}
                for f in sorted(tmp.iterdir())
            }
            manifest[MANIFEST_DIGEST] = manifest_digest(manifest)
            with open(tmp / MANIFEST, "w", encoding="utf-8") as handle:
                json.dump(manifest, handle, indent=1)
                handle.flush()
                os.fsync(handle.fileno())
            _fsync_dir(tmp)
            if final.exists():  # a stale best- directory of the same step
                shutil.rmtree(final)
            os.rename(tmp, final)
            _fsync_dir(self.root)
        except BaseException as exc:  # DCP's CheckpointException is a BaseException
            full = isinstance(exc, DiskFullError) or is_disk_full(exc, self.root)
            shutil.rmtree(tmp, ignore_errors=True)  # measured full first: this frees space
            cause = _unwrap_dcp(exc)
            if not (full or isinstance(cause, OSError)):
                raise
            previous = self.latest_seq()
            kept = (
                f"the previous checkpoint ckpt-{previous:06d} is intact"
                if previous
                else "no earlier checkpoint exists"
            )
            if full:
                said = cause.strerror if isinstance(cause, OSError) else None
                error = disk_full_error(final, needed, CHECKPOINT_OPTION, said)
                raise CheckpointDiskFull(f"cannot write checkpoint {error}; {kept}") from None
            assert isinstance(cause, OSError)
            reason = cause.strerror or errno.errorcode.get(cause.errno or 0, str(cause))
            raise CheckpointError(f"cannot write checkpoint {final}: {reason}; {kept}") from None
        return final

    def prune(self, seq: int, kind: str) -> None:
        """After writing checkpoint ``seq``: drop the chains before it (when it is full)
        and every best-so-far model but its own."""
        if kind == "full":
            for path in self.root.iterdir():
                match = CHECKPOINT_RE.match(path.name)
                if match and int(match[1]) < seq:
                    shutil.rmtree(path, ignore_errors=True)
        keep = read_manifest(self.root / f"ckpt-{seq:06d}").get("best")
        for path in self.root.glob("best-*"):
            if path.name != keep:
                shutil.rmtree(path, ignore_errors=True)

    def chain(self, seq: int) -> Chain:
        """Manifests and tensors from the last full checkpoint up to ``seq``."""
        last = read_manifest(self.root / f"ckpt-{seq:06d}")
        base = int(last.get("base", seq))
        chain = []
        for s in range(base, seq + 1):
            path = self.root / f"ckpt-{s:06d}"
            manifest = read_manifest(path)
            expected = "full" if s == base else "incremental"
            if manifest.get("kind") != expected or int(manifest.get("base", -1)) != base:
                raise CheckpointError(
                    f"{path / MANIFEST}: expected a {expected} checkpoint of the chain from ckpt-{base:06d}"
                )
            try:
                tensors = read_tensors(verified(path))
            except CheckpointError:
                raise
            except Exception as exc:  # DCP's own errors on a damaged file
                raise CheckpointError(
                    f"{path}: unreadable ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
                ) from None
            chain.append((manifest, tensors))
        return chain
