"""Whether fbgemm-gpu's kernels can run in this process, decided once and in one place.

fbgemm-gpu may be missing, or built for another torch: then its import fails, or raises
while it loads its libraries or registers its ops. Embedding tables asking for the
``fbgemm`` backend then run on the ``torch`` backend (one note on stderr says so, once),
and what needs fbgemm's kernels by nature (n-bit inference tables, its caching tables,
TorchRec's sharding) refuses in one line. Where fbgemm imports, nothing changes. Where it
does not and the installed fbgemm-gpu is not the one built for this torch, the reason says
which to install (the pairs are :mod:`suite.versions`').
"""

from __future__ import annotations

import functools
import logging
import sys
import warnings
from importlib import metadata

from suite import versions
from suite.errors import ConfigError

_REASON_CHARS = 200


def _one_line(exc: BaseException) -> str:
    """The first line of the innermost cause (fbgemm's loader wraps the ``dlopen`` error that
    names the missing library in a generic "Could not load this library")."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    text = str(exc).strip().splitlines()
    message = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    return message if len(message) <= _REASON_CHARS else message[: _REASON_CHARS - 3] + "..."


def _installed(*dists: str) -> str | None:
    for dist in dists:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def version_hint() -> str | None:
    """What to install where the installed fbgemm-gpu (or fbgemm-gpu-cpu) is missing or not
    the one built for the installed torch, read from the pairs in :mod:`suite.versions`;
    ``None`` where they match (or torch itself is missing)."""
    torch_version = _installed("torch")
    if torch_version is None:
        return None
    return versions.mismatch(torch_version, _installed("fbgemm-gpu", "fbgemm-gpu-cpu"))


@functools.cache
def fbgemm_available() -> tuple[bool, str]:
    """``(True, "")`` when fbgemm-gpu's table-batched modules import here, else
    ``(False, reason)`` with the failure in one line. The import is tried once, with
    fbgemm's own logging (a many-line warning per library, an error with a traceback)
    silenced: where its build is not the one for this torch, one note says so instead."""
    silenced = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import fbgemm_gpu.split_embedding_configs
            import fbgemm_gpu.split_table_batched_embeddings_ops_common
            import fbgemm_gpu.split_table_batched_embeddings_ops_inference
            import fbgemm_gpu.split_table_batched_embeddings_ops_training  # noqa: F401
    except Exception as exc:  # a mismatched build raises anything from its loaders
        hint = version_hint()
        return False, _one_line(exc) + (f"; {hint}" if hint else "")
    finally:
        logging.disable(silenced)
    hint = version_hint()
    if hint:
        print(f"note: {hint}; it imported, but its kernels may fail", file=sys.stderr, flush=True)
    return True, ""


def fallback_note() -> str | None:
    """``"torch (fbgemm-gpu unavailable: <reason>)"`` where tables asking for fbgemm run
    on torch; ``None`` where fbgemm imports."""
    ok, reason = fbgemm_available()
    return None if ok else f"torch (fbgemm-gpu unavailable: {reason})"


@functools.cache
def _print_note(reason: str) -> None:
    print(
        f"note: fbgemm-gpu unavailable ({reason}); embedding tables run on the torch backend",
        file=sys.stderr,
        flush=True,
    )


def table_backend(requested: str) -> str:
    """The backend tables asking for ``requested`` run on: ``requested`` itself, or
    ``"torch"`` for ``"fbgemm"`` where fbgemm does not import (noted once on stderr)."""
    if requested != "fbgemm":
        return requested
    ok, reason = fbgemm_available()
    if ok:
        return requested
    _print_note(reason)
    return "torch"


def require_fbgemm(what: str) -> None:
    """Raise a one-line :class:`ConfigError` naming ``what`` where fbgemm does not import."""
    ok, reason = fbgemm_available()
    if not ok:
        raise ConfigError(f"{what} needs fbgemm-gpu, which is unavailable here ({reason})")
