"""The torch / fbgemm-gpu / torchrec releases the suite supports, stated once.

fbgemm-gpu is built against one torch release (its ``.so`` files link torch's C++ ABI):
fbgemm-gpu 1.x pairs with torch 2.(x+5), and another torch fails or raises when fbgemm
loads. TorchRec's release numbers follow fbgemm's (TorchRec 1.x is tested with fbgemm
1.x); its wheels name an unpinned ``fbgemm-gpu`` (the CUDA build), so it is installed with
``--no-deps`` and its needs come with the suite's ``scaleout`` extra.

Read by ``pyproject.toml``'s range (checked by a test), the noxfile's installs and
``nox -s compat``, :mod:`suite.wheelhouse`, and :mod:`suite.kernel_backend`'s reason when
fbgemm does not import. Importable without torch.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pair:
    """One supported torch release with the fbgemm-gpu and torchrec built for it."""

    torch: str
    fbgemm: str
    torchrec: str

    @property
    def minor(self) -> str:
        """``"2.13"``: the torch release line this pair stands for."""
        return minor_of(self.torch)

    def fbgemm_requirement(self, cuda: bool) -> str:
        """``"fbgemm-gpu==1.8.0"`` (CUDA build) or ``"fbgemm-gpu-cpu==1.8.0"``."""
        return f"{fbgemm_package(cuda)}=={self.fbgemm}"


# Oldest first. Each torch is the newest patch release served for its line; torchrec 1.6.0
# was never uploaded (1.6.1 is the first of its line). torch 2.15 is served but has no
# fbgemm-gpu (1.10) yet, so the range stops at 2.14.
PAIRS: tuple[Pair, ...] = (
    Pair(torch="2.11.0", fbgemm="1.6.0", torchrec="1.6.1"),
    Pair(torch="2.12.1", fbgemm="1.7.0", torchrec="1.7.0"),
    Pair(torch="2.13.0", fbgemm="1.8.0", torchrec="1.8.0"),
    Pair(torch="2.14.1", fbgemm="1.9.0", torchrec="1.9.2"),
)
DEFAULT_MINOR = "2.13"  # the pair CI, ``nox -s tests`` and the README's install use


def minor_of(version: str) -> str:
    """``"2.13"`` for ``"2.13.0+cpu"``, ``"2.13.0"`` or ``"2.13"``."""
    parts = version.split("+")[0].split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        raise ValueError(f"not a release version: {version!r}")
    return f"{parts[0]}.{parts[1]}"


def fbgemm_package(cuda: bool) -> str:
    """The distribution name of fbgemm-gpu's CUDA or CPU build."""
    return "fbgemm-gpu" if cuda else "fbgemm-gpu-cpu"


def pair_for_torch(version: str) -> Pair | None:
    """The supported pair of torch ``version``'s release line (any patch), else ``None``."""
    minor = minor_of(version)
    return next((p for p in PAIRS if p.minor == minor), None)


def pair_for_fbgemm(version: str) -> Pair | None:
    """The supported pair whose fbgemm-gpu has ``version``'s release line, else ``None``."""
    minor = minor_of(version)
    return next((p for p in PAIRS if minor_of(p.fbgemm) == minor), None)


def default_pair() -> Pair:
    pair = pair_for_torch(DEFAULT_MINOR)
    assert pair is not None
    return pair


def torch_requirement() -> str:
    """``"torch>=2.11,<2.15"``: every release line from the oldest pair's to the newest's."""
    major, newest = PAIRS[-1].minor.split(".")
    return f"torch>={PAIRS[0].minor},<{major}.{int(newest) + 1}"


def mismatch(torch_version: str, fbgemm_version: str | None) -> str | None:
    """One line saying what to install where ``fbgemm_version`` is not the one built for
    ``torch_version`` (or fbgemm is missing), else ``None``."""
    pair = pair_for_torch(torch_version)
    if pair is None:
        lines = ", ".join(p.minor for p in PAIRS)
        return f"torch {torch_version} is outside the supported releases ({lines})"
    if fbgemm_version is None:
        return f"no fbgemm-gpu installed; torch {pair.minor} pairs with fbgemm-gpu {pair.fbgemm}"
    if minor_of(fbgemm_version) == minor_of(pair.fbgemm):
        return None
    built_for = pair_for_fbgemm(fbgemm_version)
    made = f" (built for torch {built_for.minor})" if built_for else ""
    return (
        f"fbgemm-gpu {fbgemm_version}{made} does not match torch {torch_version}: "
        f"install fbgemm-gpu {pair.fbgemm} (fbgemm-gpu-cpu on CPU machines)"
    )
