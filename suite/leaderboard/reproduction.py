"""Leaderboard entries from a reproduction's committed runs: ``suite leaderboard
import-reproduction results/<profile>``.

A reproduction profile's runs are committed under ``results/<profile>/runs/<config
hash>/seed-<n>.json`` (one :class:`suite.results.TaskResult` per seed). Each run folder of
a task the board ranks (``accuracy`` by default) with at least three seeds becomes one
submission, submitted by ``recsuite reproduction <profile>``, and one
:class:`~suite.leaderboard.verified.Regeneration` record that binds the submission's content
hash and a digest of each seed file's figures. ``validate`` rebuilds the submission from
those files (:func:`regenerate`) and refuses the record when a file changed or the rebuilt
content is not the file's: the entry is verified because it regenerates from committed runs,
not because someone says so.

The runs are read as stored results (``suite.results``), never through the reproduction
machinery, so a board renders without the data cache and without training. Seeds of one
config may have run at different commits (a long profile runs over many sittings): the
entry records the latest and its notes say how many there were.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from suite.config import stable_hash
from suite.errors import SuiteError
from suite.leaderboard import SUBMISSIONS
from suite.leaderboard.ranking import budget_exponent, budget_text
from suite.leaderboard.schema import Submission
from suite.leaderboard.submit import (
    build_submission,
    data_fingerprint_of,
    load_result_file,
    write_submission,
)
from suite.leaderboard.validate import load_submission
from suite.leaderboard.verified import (
    VERIFICATIONS,
    Regeneration,
    Verifications,
    run_digest,
)
from suite.results import TaskResult

SUBMITTER = "recsuite reproduction {profile}"
MEMORY = "embedding_total_bytes"
DEFAULT_TASKS = ("accuracy",)
MIN_SEEDS = 3


def submitter_of(profile: str) -> str:
    return SUBMITTER.format(profile=profile)


def relative(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` as POSIX text; refused when outside it."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        raise SuiteError(f"{path}: not under {root}; run it from the repository root") from None


def read_runs(root: Path, rels: Iterable[str]) -> tuple[list[TaskResult], dict[str, str]]:
    """The stored runs at ``rels`` (relative to ``root``) and each one's figures digest."""
    results, digests = [], {}
    for rel in rels:
        result = load_result_file(root / rel)
        results.append(result)
        digests[rel] = run_digest(result)
    return results, digests


def build(results: list[TaskResult], profile: str, notes: str | None) -> Submission:
    """The submission of one config's seeds: dated by its latest run, at that run's commit
    (seeds from several sittings are allowed; the notes name how many commits)."""
    latest = max(results, key=lambda r: (r.created, r.seed))
    commit = latest.environment.get("git_commit", "unknown")
    same = [
        r.model_copy(update={"environment": {**r.environment, "git_commit": commit}})
        for r in results
    ]
    try:  # dated by its runs, never by the clock, so that it regenerates byte for byte
        date = dt.date.fromisoformat(latest.created[:10])
    except ValueError:
        raise SuiteError(
            f"seed {latest.seed}: its run records no creation date ({latest.created!r}); "
            "an entry regenerated from it could not be dated reproducibly"
        ) from None
    return build_submission(same, submitter_of(profile), notes=notes, date=date)


def regenerate(
    root: Path, rels: list[str], profile: str, notes: str | None = None
) -> tuple[Submission, dict[str, str]]:
    """The submission the committed runs at ``rels`` build, and their figures digests."""
    results, digests = read_runs(root, rels)
    return build(results, profile, notes), digests


@dataclass
class Imported:
    """What one import wrote, kept and removed."""

    written: list[Path] = field(default_factory=list)
    kept: list[Path] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def run_folders(results_dir: Path) -> list[Path]:
    runs = results_dir / "runs"
    if not runs.is_dir():
        raise SuiteError(f"{results_dir}: has no runs/ folder (expected results/<profile>/runs)")
    return sorted(p for p in runs.iterdir() if p.is_dir() and any(p.glob("seed-*.json")))


def seed_files(folder: Path) -> list[Path]:
    def number(path: Path) -> int:
        tail = path.stem.removeprefix("seed-")
        return int(tail) if tail.lstrip("-").isdigit() else 0

    return sorted(folder.glob("seed-*.json"), key=number)


def budget_note(results: list[TaskResult], full: dict[tuple[str, str], float]) -> str:
    """Where the entry of ``results`` (one config's seeds) sits against ``full`` on the same
    data and model: the fraction of full's total embedding bytes and the budget 1/2^k it
    fits (largest k with 2^-k >= it)."""
    result = results[0]
    reference = full.get((data_fingerprint_of(results), result.model))
    total = result.metrics.get(MEMORY)
    if not reference or not total or result.embedding == "full":
        return ""
    budget = budget_text(budget_exponent(total, reference))
    share = total / reference
    return f" Budget {budget}: {share:.3f} of full's total embedding bytes ({total:,.0f} of {reference:,.0f})."


def import_reproduction(
    results_dir: Path,
    board: Path,
    root: Path,
    tasks: Iterable[str] = DEFAULT_TASKS,
    log=print,
) -> Imported:
    """Write one submission and one regeneration record per run folder of ``results_dir``
    (tasks in ``tasks``, at least three seeds) and remove this profile's earlier entries that
    the runs no longer build; a config already on the board from another reproduction is
    not entered twice."""
    profile = results_dir.resolve().name
    tasks = set(tasks)
    submitter = submitter_of(profile)
    out = Imported()
    folders = run_folders(results_dir)
    loaded: list[tuple[list[str], list[TaskResult]]] = []
    for folder in folders:
        rels = [relative(f, root) for f in seed_files(folder)]
        results, _ = read_runs(root, rels)
        if results[0].task not in tasks:
            continue
        if len({r.seed for r in results}) < MIN_SEEDS:
            out.skipped.append(f"{relative(folder, root)}: fewer than {MIN_SEEDS} seeds")
            continue
        loaded.append((rels, results))
    full = {
        (data_fingerprint_of(r), r[0].model): r[0].metrics[MEMORY]
        for _, r in loaded
        if r[0].embedding == "full" and MEMORY in r[0].metrics
    }
    records = Verifications.load(board / VERIFICATIONS)
    existing = _existing(board)
    others = {
        (s.config_hash, s.data_fingerprint, s.task): s.submitter
        for s in existing.values()
        if s.submitter != submitter and s.submitter.startswith(SUBMITTER.format(profile=""))
    }
    mine = {name for name, s in existing.items() if s.submitter == submitter}
    made: set[str] = set()
    for rels, results in loaded:
        folder = str(Path(rels[0]).parent)
        first = results[0]
        shared = {k: v for k, v in first.config.items() if k != "seed"}
        key = (stable_hash(shared), data_fingerprint_of(results), first.task)
        if key in others:
            out.skipped.append(f"{folder}: already on the board from {others[key]}")
            continue
        commits = sorted({str(r.environment.get("git_commit", "unknown"))[:12] for r in results})
        seeds = sorted(r.seed for r in results)
        sittings = (
            f" Its seeds ran at {len(commits)} commits ({', '.join(commits)}); the latest is recorded."
            if len(commits) > 1
            else ""
        )
        notes = (
            f"Regenerated from committed runs of reproduction {profile}: {folder}, seeds "
            f"{seeds[0]}-{seeds[-1]} ({len(seeds)})." + budget_note(results, full) + sittings
        )
        sub, digests = regenerate(root, rels, profile, notes)
        path, written = write_submission(sub, board)
        (out.written if written else out.kept).append(path)
        made.add(path.name)
        record = Regeneration(
            reproduction=profile,
            date=sub.date,
            suite_commit=sub.environment.git_commit,
            rule=f"regenerated from committed runs of reproduction {profile}",
            content_hash=sub.content_hash(),
            runs=digests,
        )
        records.data.verified[path.name] = [record]
    for name in sorted(mine - made):
        (board / SUBMISSIONS / name).unlink()
        records.data.verified.pop(name, None)
        out.removed.append(board / SUBMISSIONS / name)
    records.save(board / VERIFICATIONS)
    log(
        f"reproduction {profile}: {len(out.written)} written, {len(out.kept)} unchanged, "
        f"{len(out.removed)} removed, {len(out.skipped)} skipped"
    )
    return out


def _existing(board: Path) -> dict[str, Submission]:
    folder = board / SUBMISSIONS
    out = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        sub, _ = load_submission(path)
        if sub is not None:  # a broken file is validate's to report
            out[path.name] = sub
    return out
