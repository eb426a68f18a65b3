"""Writing files so that no reader ever sees a half-written one, with the user's umask."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from suite.errors import DiskFullError

_UMASK_LOCK = threading.Lock()


def current_umask() -> int:
    """The process's umask: from ``/proc/self/status`` where Linux has it, else by setting
    and restoring it under a lock (a moment in which another thread's new file would get
    0o022)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def apply_umask(path: str | Path, directory: bool = False) -> None:
    """Give ``path`` the mode a plain ``open``/``mkdir`` would have given it: ``tempfile``
    creates files 0600 and folders 0700 whatever the umask, so files published from a
    temporary name would otherwise be private."""
    os.chmod(path, (0o777 if directory else 0o666) & ~current_umask())


def make_temp_dir(prefix: str, parent: str | Path) -> Path:
    """A new uniquely named folder in ``parent`` (created), with the umask's mode."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    apply_umask(path, directory=True)
    return path


def write_text_atomic(path: str | Path, text: str, option: str | None = None) -> Path:
    """Write ``text`` to a temporary file beside ``path``, fsync it, rename it into place.

    The file gets the mode ``open`` would give it under the user's umask (not 0600). A
    full disk is one :class:`~suite.errors.DiskFullError` line naming ``option`` (the
    setting that moves the file), with no temporary file left.
    """
    return write_bytes_atomic(path, text.encode("utf-8"), option)


def write_bytes_atomic(path: str | Path, data: bytes, option: str | None = None) -> Path:
    """:func:`write_text_atomic` for bytes. A full disk is one :class:`DiskFullError` line
    (``option``: the setting that moves the file), refused before writing where the
    filesystem has less free space than ``data``; no temporary file is left."""
    path = Path(path)
    with writing(path, needed=len(data), option=option):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                apply_umask(tmp)
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return path


# ---------------------------------------------------------------- a full disk

DISK_FULL_TEXT = ("database or disk is full", "no space left on device")
"""Messages of a full disk from writers that drop the errno (SQLite, wrapped OSErrors)."""
_SHORT_WRITE = re.compile(r"(\d+) requested and (\d+) written")
"""numpy's ``tofile`` on a full disk: an ``OSError`` with no errno."""
_SHORT_WRITE_TEXT = ("unexpected pos", "write failed", "file write failed")
"""torch's zip writer (``torch.save``, DCP) on a full disk: a ``RuntimeError``."""
NEARLY_FULL = 1 << 20
"""A short write with less free space than this left is taken for a full disk."""


def free_bytes(path: str | Path) -> int | None:
    """Free space on the filesystem that holds ``path`` (or its nearest existing parent);
    ``None`` if it cannot be read or the filesystem has no blocks at all (``/proc``,
    ``/sys``: not a disk that could be full)."""
    place = Path(path).absolute()
    while not place.exists() and place != place.parent:
        place = place.parent
    try:
        usage = shutil.disk_usage(place)
    except OSError:
        return None
    return usage.free if usage.total else None


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception it chains (cause, context, DCP's per-rank failures)."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        item = stack.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        yield item
        stack += [item.__cause__, item.__context__]
        failures = getattr(item, "failures", None)
        if isinstance(failures, dict):  # DCP: {rank: (exception, traceback)}
            for failure in failures.values():
                found = failure[0] if isinstance(failure, tuple) and failure else failure
                stack.append(found if isinstance(found, BaseException) else None)


def is_disk_full(exc: BaseException, path: str | Path | None = None) -> bool:
    """Whether ``exc`` (or an exception it chains) is a full disk: ``ENOSPC``/``EDQUOT``,
    SQLite's "database or disk is full", or, where ``path`` is given and its filesystem is
    (nearly) full, a short write of numpy or torch that carries no errno."""
    for item in exception_chain(exc):
        if isinstance(item, OSError) and item.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        text = str(item).lower()
        if any(marker in text for marker in DISK_FULL_TEXT):
            return True
        short = _SHORT_WRITE.search(text)
        if path is not None and (short or any(m in text for m in _SHORT_WRITE_TEXT)):
            missing = int(short[1]) - int(short[2]) if short else 0
            free = free_bytes(path)
            if free is not None and free < max(missing, NEARLY_FULL):
                return True
    return False


def _mib(nbytes: int) -> str:
    """``"20 KiB"``, ``"1.3 MiB"``, ``"48 MiB"``."""
    if nbytes < 1 << 20:
        return f"{nbytes / 1024:.0f} KiB"
    mib = nbytes / (1 << 20)
    return f"{mib:.1f} MiB" if mib < 10 else f"{mib:.0f} MiB"


def disk_full_error(
    path: str | Path,
    needed_bytes: int | None = None,
    option: str | None = None,
    reason: str | None = None,
    at_least: bool = False,
) -> DiskFullError:
    """One line: ``<path>: disk full (needs ~N MiB, M MiB free): free space or point
    <option> elsewhere`` (the figures where known; ``at_least``: ``needed_bytes`` is a
    lower bound, "needs over ~N"; where it does not exceed the free space it was the
    data's size and the write outgrew it, "needs ~N of data plus overhead"; ``reason``,
    the system's words, first in the parentheses)."""
    free = free_bytes(path)
    figures = [reason] if reason else []
    if needed_bytes and at_least:
        figures.append(f"needs over ~{_mib(needed_bytes)}")
    elif needed_bytes:
        over = free is not None and needed_bytes <= free
        figures.append(f"needs ~{_mib(needed_bytes)}{' of data plus overhead' if over else ''}")
    if free is not None:
        figures.append(f"{_mib(free)} free")
    space = f" ({', '.join(figures)})" if figures else ""
    remedy = f"point {option} elsewhere" if option else "write it elsewhere"
    return DiskFullError(f"{path}: disk full{space}: free space or {remedy}")


def check_space(path: str | Path, needed_bytes: int | None, option: str | None = None) -> None:
    """Refuse (:class:`DiskFullError`) a write of ``needed_bytes`` at ``path`` that its
    filesystem has no room for, before any of it is written."""
    free = free_bytes(path)
    if needed_bytes and free is not None and free < needed_bytes:
        raise disk_full_error(path, needed_bytes, option)


@contextlib.contextmanager
def writing(
    path: str | Path,
    needed: int | None = None,
    option: str | None = None,
    cleanup: Iterable[str | Path] = (),
) -> Iterator[None]:
    """Write ``path`` inside the block: refused early if ``needed`` bytes do not fit, and a
    full disk inside it (any writer's way of saying so) becomes one
    :class:`DiskFullError` line, after removing the ``cleanup`` files and folders (the
    partial output). Other errors pass unchanged."""
    check_space(path, needed, option)
    try:
        yield
    except DiskFullError:
        _remove(cleanup)
        raise
    except Exception as exc:
        if not is_disk_full(exc, path):
            raise
        _remove(cleanup)
        raise disk_full_error(path, needed, option) from None


def _remove(paths: Iterable[str | Path]) -> None:
    for item in paths:
        item = Path(item)
        if item.is_dir() and not item.is_symlink():
            shutil.rmtree(item, ignore_errors=True)
        else:
            item.unlink(missing_ok=True)
