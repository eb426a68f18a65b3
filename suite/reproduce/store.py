"""A reproduction's run results on disk, beside its report: resumable and regenerable.

``<report dir>/runs/<config hash>/seed-<n>.json`` (the run's hash, as the report names
it; the result inside carries the hash of its config with the seed) holds one finished job: the run's
:class:`~suite.results.TaskResult` (resolved config, seed, metrics, the task's details,
the data fingerprint, duration, MLflow run id) with the sha256 of its test logits
(float32 bytes) in ``details`` instead of the logits themselves. ``runs/noise.json`` holds
the DeLong noise of every AUC pair the claims use, keyed by the two runs' config hashes and
the seed, with the covariances of each seed's figure with the seeds judged together with
it, so the report regenerates, and a reproduction resumes seed by seed, without the
predictions. ``runs/reproduction.json``
names the MLflow parent run and the wall time of the reproduction that trained them.
Every file is written atomically; a file that does not parse, or that holds another
config, is ignored with a warning and its job rerun.

``runs/digests.json`` seals each stored run's figures: ``<config hash>/seed-<n>.json`` ->
the digests of its parts (:data:`DIGEST_PARTS`: metrics, details, config, the rest of the
record), each the 16 hex digits of the sha256 of the part's canonical JSON (sorted keys,
no spaces, an integral float written as the integer), so that re-serialising a file with
other whitespace, key order or ``79.0`` for ``79`` is no edit while a change of any figure
is. :func:`write_result` writes it whenever it stores a job (the run's file first, then
its digest, each atomically; a sealed file it replaces loses its digest before the new
file is written, so a killed write leaves either a complete file and its digest or a
complete file and none, never a digest of a file that is not there whole).
:func:`read_result` (every load: a resume, ``--from-results``, the regime profile's
adoptions) refuses a sealed run of the expected config whose parts no longer match with
one :class:`StoredRunEdited` line naming the file and the parts that differ (the CLI exits
2, writing nothing); a file that does not parse or holds another config is never used and
its job reruns, as before; ``--rerun`` lists the change among its differences. A run with
no digest (stored before digests existed, or by a write killed between its file and its
digest) loads unchecked; ``python -m suite.reproduce.store --seal DIR...`` seals every such
run of those report directories (refusing, and writing nothing, where a sealed one no
longer matches); ``--check DIR...`` only verifies and counts the unsealed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from suite.config import DatasetSpec, RunConfig
from suite.errors import ConfigError, DataError, SuiteError
from suite.fileio import write_text_atomic
from suite.reproduce.claims import PairNoise
from suite.results import TaskResult, read_arrays
from suite.stable_hash import stable_hash

RUNS_DIR = "runs"
NOISE_FILE = "noise.json"
MANIFEST_FILE = "reproduction.json"
DIGESTS_FILE = "digests.json"
DIGESTS_VERSION = 1
DIGEST_PARTS: dict[str, tuple[str, ...]] = {
    "metrics": ("metrics", "higher_is_better"),
    "details": ("details",),
    "config": (
        "config",
        "config_hash",
        "seed",
        "task",
        "model",
        "embedding",
        "dataset",
        "protocol",
        "data_fingerprint",
    ),
}
"""The parts of a stored run digested apart (by their top-level keys), so that a refusal
names what changed; every other key of the file is the part ``record`` (environment,
timings, dates, MLflow ids, and any key a later schema adds)."""
RECORD_PART = "record"
LOGITS_DIGEST = "test_logits_sha256"
"""``details`` key of a stored result: sha256 of its test logits as float32 bytes."""

NOISE_VERSION = 2
"""1: each entry's ``shared`` from all seeds judged at once; 2: each entry's ``covariances``
with the seeds judged together with it (``shared`` kept in entries written as version 1)."""

NoiseKey = tuple[str, str, int]
"""``(left config hash, right config hash or "", seed)``."""


def runs_dir(report_dir: str | Path) -> Path:
    return Path(report_dir) / RUNS_DIR


def result_file(report_dir: str | Path, config_hash: str, seed: int) -> Path:
    """Where the job ``(config_hash, seed)`` is stored."""
    return runs_dir(report_dir) / config_hash / f"seed-{seed}.json"


def logits_digest(logits: np.ndarray) -> str:
    """sha256 of ``logits [N]`` as little-endian float32 bytes."""
    return hashlib.sha256(np.ascontiguousarray(logits, dtype="<f4").tobytes()).hexdigest()


def with_digest(result: TaskResult) -> TaskResult:
    """``result`` as stored: its test logits' digest added to ``details`` (when it kept
    them) and the tracking store's URI (a path of this machine) left out."""
    details = dict(result.details)
    arrays = read_arrays(result)
    if arrays and "test_logits" in arrays:
        details[LOGITS_DIGEST] = logits_digest(arrays["test_logits"])
    return result.model_copy(update={"details": details, "mlflow_tracking_uri": None})


def write_result(report_dir: str | Path, key: str, result: TaskResult) -> Path:
    """Store a finished job of the run ``key`` (its config hash over seeds; pass the result
    through :func:`with_digest` first), atomically, and seal it in ``runs/digests.json``:
    the file first, then its digest (read back from the file), so a write killed at any
    point leaves no digest of a file that is not there whole; a sealed file it replaces has
    its digest taken out before (a kill in between leaves the old, complete file unsealed,
    never sealed with another file's digest)."""
    path = result_file(report_dir, key, result.seed)
    name = _run_name(key, result.seed)
    digests = read_digests(report_dir, cached=False)
    if digests.pop(name, None) is not None:
        write_digests(report_dir, digests)
    result.write(path)
    digests[name] = figures_digest(json.loads(path.read_text(encoding="utf-8")))
    write_digests(report_dir, digests)
    return path


class StoredRunEdited(DataError):
    """A stored run's figures no longer match the digest written when it was stored."""


def _run_name(key: str, seed: int) -> str:
    """A stored run's name in ``digests.json``: its path under ``runs/``."""
    return f"{key}/seed-{seed}.json"


def _canonical(value: Any) -> Any:
    """``value`` (parsed JSON) with each integral float an int, so ``79.0`` digests as
    ``79``: one figure, however a tool re-serialised it."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def figures_digest(stored: Any) -> dict[str, str]:
    """The digest of each part of a stored run (``stored``: its parsed JSON), by part name
    (:data:`DIGEST_PARTS`, then ``record`` for every other key; a file that is not a JSON
    object is all ``record``)."""
    data = _canonical(stored) if isinstance(stored, dict) else {"": _canonical(stored)}
    named = {key for keys in DIGEST_PARTS.values() for key in keys}
    parts = {part: {k: data[k] for k in keys if k in data} for part, keys in DIGEST_PARTS.items()}
    parts[RECORD_PART] = {k: v for k, v in data.items() if k not in named}
    return {part: stable_hash(figures) for part, figures in parts.items()}


_DIGESTS_CACHE: dict[Path, tuple[tuple[int, int, int], dict[str, dict[str, str]]]] = {}


def read_digests(report_dir: str | Path, cached: bool = True) -> dict[str, dict[str, str]]:
    """``runs/digests.json``: stored run name -> its parts' digests (empty where there is
    no such file: a store written before digests existed). A file that is not a digest
    file is refused (:class:`~suite.errors.DataError`), not taken for none, so that
    breaking it never silences the check. ``cached``: reuse the last read while the file
    is unchanged (a store loads one run at a time)."""
    path = runs_dir(report_dir) / DIGESTS_FILE
    try:
        stat = path.stat()
    except FileNotFoundError:
        return {}
    stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
    hit = _DIGESTS_CACHE.get(path.absolute())
    if cached and hit is not None and hit[0] == stamp:
        return hit[1]
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("version") != DIGESTS_VERSION:
            raise ValueError(f"version {data.get('version')!r}, expected {DIGESTS_VERSION}")
        runs = {
            str(name): {str(part): str(d) for part, d in parts.items()}
            for name, parts in data["runs"].items()
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DataError(
            f"{path}: not a digest file ({type(exc).__name__}: {exc}); restore it, or delete "
            "it to load its runs unchecked"
        ) from None
    _DIGESTS_CACHE[path.absolute()] = (stamp, runs)
    return dict(runs)


def write_digests(report_dir: str | Path, digests: dict[str, dict[str, str]]) -> Path:
    """Write ``runs/digests.json`` atomically, one run a line in name order."""
    lines = ",\n".join(
        f"    {json.dumps(name)}: {json.dumps(digests[name], sort_keys=True)}"
        for name in sorted(digests)
    )
    body = f"\n{lines}\n  " if lines else ""
    text = f'{{\n  "runs": {{{body}}},\n  "version": {DIGESTS_VERSION}\n}}\n'
    return write_text_atomic(runs_dir(report_dir) / DIGESTS_FILE, text)


def changed_parts(report_dir: str | Path, key: str, seed: int, stored: Any) -> str | None:
    """What of the stored job ``(key, seed)`` (``stored``: its parsed JSON) no longer
    matches the digest stored when it was written (``"metrics changed"``, ``"config and
    details changed"``), or None where it matches or has no digest."""
    sealed = read_digests(report_dir).get(_run_name(key, seed))
    if sealed is None:
        return None
    now = figures_digest(stored)
    changed = [part for part in sorted(set(sealed) | set(now)) if sealed.get(part) != now.get(part)]
    if not changed:
        return None
    what = " and ".join([", ".join(changed[:-1]), changed[-1]] if len(changed) > 1 else changed)
    return f"{what} changed"


def check_digest(report_dir: str | Path, key: str, seed: int, stored: Any) -> None:
    """Refuse (:class:`StoredRunEdited`) the stored job ``(key, seed)`` (``stored``: its
    parsed JSON) where its parts no longer match the digest stored when it was written;
    a run with no digest passes."""
    changed = changed_parts(report_dir, key, seed, stored)
    if changed:
        raise StoredRunEdited(edited_message(result_file(report_dir, key, seed), changed))


def edited_message(path: Path, what: str) -> str:
    """The one line refusing the stored run at ``path`` (``what``: the parts that changed)."""
    return (
        f"{path}: its figures do not match the digest stored when it was written ({what}; "
        "edited after the run?); restore it or delete it to retrain"
    )


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def read_result(
    report_dir: str | Path, key: str, config: RunConfig, check: bool = True
) -> TaskResult | None:
    """The stored job of run ``key`` whose resolved config (seed included) is ``config``, or
    None where there is none; a file that does not parse or holds another config is None
    with a one-line warning (the job is run again: nothing of it is used). A sealed run
    (``runs/digests.json``) of this config whose figures no longer match its digest is
    refused (:class:`StoredRunEdited`), unless ``check`` is false (``--rerun``, which
    reports what changed instead)."""
    config_hash, seed = config.config_hash(), config.seed
    path = result_file(report_dir, key, seed)
    if not path.is_file():
        return None
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
        result = TaskResult.model_validate(stored)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        warn(f"{path}: not a stored run result ({first}); running it again")
        return None
    if result.config_hash != config_hash or result.seed != seed:
        warn(
            f"{path}: holds config {result.config_hash} seed {result.seed}, expected "
            f"{config_hash} seed {seed}; running it again"
        )
        return None
    if check:
        check_digest(report_dir, key, seed, stored)
    return result


def predictions(result: TaskResult) -> tuple[np.ndarray, np.ndarray] | None:
    """A result's test ``(labels [N], logits [N])`` where its arrays file is still here
    and (for a stored result) its logits match the stored digest; else None."""
    arrays = read_arrays(result)
    if not arrays or not {"test_labels", "test_logits"} <= set(arrays):
        return None
    digest = result.details.get(LOGITS_DIGEST)
    if digest is not None and digest != logits_digest(arrays["test_logits"]):
        return None
    return arrays["test_labels"], arrays["test_logits"]


def read_noise(report_dir: str | Path) -> dict[NoiseKey, PairNoise]:
    """The stored noise entries (empty if the file is missing or unreadable, with a
    warning for the latter)."""
    path = runs_dir(report_dir) / NOISE_FILE
    if not path.is_file():
        return {}
    try:
        entries = json.loads(path.read_text())["pairs"]
        out = {}
        for e in entries:
            noise = PairNoise.from_dict(e)
            out[(str(e["left"]), str(e["right"]), int(e["seed"]))] = noise
        return out
    except (OSError, ValueError, KeyError, TypeError) as exc:
        warn(f"{path}: not a noise file ({type(exc).__name__}: {exc}); ignored")
        return {}


def write_noise(report_dir: str | Path, entries: dict[NoiseKey, PairNoise]) -> Path:
    """Write the noise entries, sorted, one line each, atomically (NaN figures as null)."""
    pairs = []
    for (left, right, seed), noise in sorted(entries.items()):
        figures = {
            k: None if isinstance(v, float) and math.isnan(v) else v
            for k, v in noise.to_dict().items()
        }
        pairs.append({"left": left, "right": right, "seed": seed, **figures})
    lines = ",\n".join(f"    {json.dumps(p, sort_keys=True)}" for p in pairs)
    text = f'{{\n  "pairs": [\n{lines}\n  ],\n  "version": {NOISE_VERSION}\n}}\n'
    return write_text_atomic(runs_dir(report_dir) / NOISE_FILE, text)


def read_manifest(report_dir: str | Path) -> dict[str, Any]:
    """``{"mlflow_run_id", "duration_s"}`` of the reproduction that last trained here."""
    path = runs_dir(report_dir) / MANIFEST_FILE
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return {}


def write_manifest(report_dir: str | Path, mlflow_run_id: str | None, duration_s: float) -> Path:
    text = json.dumps({"mlflow_run_id": mlflow_run_id, "duration_s": duration_s}, indent=2)
    return write_text_atomic(runs_dir(report_dir) / MANIFEST_FILE, text + "\n")


def _data_identity(dataset: DatasetSpec) -> dict[str, Any]:
    return dataset.model_dump(mode="json", exclude={"raw", "cache_dir"})


def stored_cardinalities(directories: list[Path]) -> Callable[[DatasetSpec], tuple[int, ...]]:
    """A dataset's cardinalities read off a ``full`` run stored under ``directories`` on
    that dataset (its tables' rows are the data's cardinalities), so that a report
    regenerated from stored results plans its curve without opening the data cache."""
    found: dict[str, tuple[int, ...]] = {}

    def of(dataset: DatasetSpec) -> tuple[int, ...]:
        want = json.dumps(_data_identity(dataset), sort_keys=True)
        if want in found:
            return found[want]
        for directory in directories:
            for path in sorted(runs_dir(directory).glob("*/seed-*.json")):
                try:
                    stored = json.loads(path.read_text(encoding="utf-8"))
                    config = stored["config"]
                    rows = stored["details"]["embedding_layout"]["table_rows"]
                    if config["embedding"]["name"] != "full":
                        continue
                    data = DatasetSpec.model_validate(config["dataset"])
                except (OSError, ValueError, KeyError, TypeError):
                    continue
                if json.dumps(_data_identity(data), sort_keys=True) == want:
                    seed = int(path.stem.removeprefix("seed-"))
                    check_digest(directory, path.parent.name, seed, stored)
                    found[want] = tuple(int(r) for r in rows)
                    return found[want]
        where = ", ".join(str(runs_dir(d)) for d in directories)
        raise ConfigError(
            f"--from-results: no stored `full` run on dataset {dataset.name} under {where} "
            "to read the curve's cardinalities from"
        )

    return of


def seal(report_dirs: Iterable[str | Path], write: bool = True) -> list[str]:
    """Seal every stored run of ``report_dirs`` that has no digest yet (runs stored before
    digests existed), and drop the digests of runs no longer there; one line per directory.
    Every sealed run is checked first: one that no longer matches is refused
    (:class:`StoredRunEdited`) before anything is written. ``write`` false: only check
    (``--check``), saying how many runs are unsealed."""
    planned: list[tuple[Path, dict[str, dict[str, str]], int, int]] = []
    for report_dir in map(Path, report_dirs):
        if not runs_dir(report_dir).is_dir():
            raise ConfigError(f"{report_dir}: has no {RUNS_DIR}/ folder of stored runs")
        old = read_digests(report_dir, cached=False)
        new: dict[str, dict[str, str]] = {}
        for path in sorted(runs_dir(report_dir).glob("*/seed-*.json")):
            name = path.relative_to(runs_dir(report_dir)).as_posix()
            try:
                stored = json.loads(path.read_text(encoding="utf-8"))
                seed = int(path.stem.removeprefix("seed-"))
            except (OSError, ValueError) as exc:  # never loaded (its job runs again)
                warn(f"{path}: not a stored run result ({type(exc).__name__}); left as it is")
                if name in old:
                    new[name] = old[name]
                continue
            check_digest(report_dir, path.parent.name, seed, stored)
            new[name] = old.get(name) or figures_digest(stored)
        added = len(set(new) - set(old))
        planned.append((report_dir, new, added, len(set(old) - set(new))))
    lines = []
    for report_dir, digests, added, dropped in planned:
        where = runs_dir(report_dir) / DIGESTS_FILE
        if not write:
            lines.append(
                f"{where}: {len(digests) - added} runs match their digests, {added} unsealed"
            )
            continue
        if added or dropped or not where.is_file():
            write_digests(report_dir, digests)
        lines.append(
            f"{where}: {len(digests)} runs sealed ({added} new"
            + (f", {dropped} digests of runs no longer there dropped" if dropped else "")
            + ")"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    """``python -m suite.reproduce.store --seal DIR...`` (or ``--check DIR...``)."""
    parser = argparse.ArgumentParser(
        prog="python -m suite.reproduce.store",
        description="Seal the stored runs of reproduction report directories (write "
        "runs/digests.json for runs stored without a digest), or check them.",
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--seal", action="store_true", help="seal the runs that have no digest")
    action.add_argument("--check", action="store_true", help="only check, writing nothing")
    parser.add_argument("dirs", nargs="+", metavar="DIR", help="a report directory (holds runs/)")
    args = parser.parse_args(argv)
    try:
        for line in seal(args.dirs, write=args.seal):
            print(line)
    except SuiteError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
