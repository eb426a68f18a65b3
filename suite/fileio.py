"""Writing files so that no reader ever sees a half-written one, with the user's umask."""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

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


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to a temporary file beside ``path``, fsync it, rename it into place.

    The file gets the mode ``open`` would give it under the user's umask (not 0600).
    """
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """:func:`write_text_atomic` for bytes."""
    path = Path(path)
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
