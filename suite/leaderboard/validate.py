"""Validation of submission files: one clear message per problem, naming file and field.

Checks, in order: the path stays inside ``leaderboard/``; the file is strict JSON of at
most 1 MB; the schema; the file name matches the content hash; the config hash matches
the config and each seed's hash matches ``{**config, "seed": s}``; the config still
resolves (``validate_config``) to the recorded values; names agree with the config; the
metrics are the ones the task declares (:mod:`suite.leaderboard.metrics`), with the
declared direction, inside the declared bounds, and their mean/std agree with the seeds'
values (relative tolerance 1e-9); at least three distinct seeds; the data fingerprint is the
registered one for the dataset, protocol and options (where the config draws the data per
seed: each seed's is the registered one for the options with its ``draw_seed``, and
``data_fingerprint`` is their digest); no two entries share config hash,
fingerprint, task and submitter (names compared NFKC-normalized, invisible characters
removed, case-folded). Of two duplicates the one already on the board (committed to git,
else the earlier recorded date, else the smaller content hash: never the file name) stays
and the other is blamed.

Everything here is re-computed from the file itself, so it catches mistakes and edits, not
made-up numbers that agree with each other: only ``verify`` re-runs a seed. Entries without
a record in ``verifications.yaml`` are reported as unverified (a warning) and rendered so;
a record that does not bind the file it is filed under (its content hash, the figures it
reproduced, or the committed runs it regenerates from: :func:`binding_problems`) is a
problem, so a record copied to an edited, renamed file fails validate and render.
A record is resolved with the fields added since it was made set to their old values
(:mod:`suite.leaderboard.history`); one this suite cannot re-run as recorded (a field added
since with no old value in that table, or re-runs that all predate a change that alters
results) is reported and rendered as ``stale``.
"""

from __future__ import annotations

import math
import statistics
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from suite.config import stable_hash
from suite.errors import ConfigError, SuiteError
from suite.leaderboard import FINGERPRINTS, SUBMISSIONS
from suite.leaderboard.fingerprints import FingerprintRegistry, options_hash, seed_options
from suite.leaderboard.history import flat, predating_change, resolve_recorded
from suite.leaderboard.metrics import declared, required_metrics
from suite.leaderboard.schema import (
    FILENAME_PATTERN,
    MIN_SEEDS,
    Submission,
    SubmissionFileError,
    draws_digest,
    draws_per_seed,
    name_key,
    read_json_file,
)
from suite.leaderboard.verified import VERIFICATIONS, Verifications, binding_problem

REL_TOL = 1e-9
ABS_TOL = 1e-12
UNREGISTERED = "unregistered-fingerprint"
UNVERIFIED = "unverified"
STALE = "stale"


@dataclass(frozen=True)
class Problem:
    """One problem with one field of one file."""

    file: str
    field: str
    message: str
    code: str = "error"

    def __str__(self) -> str:
        return f"{self.file}: {self.field}: {self.message}"


@dataclass
class Report:
    """What validation found: problems, warnings and the submissions that parsed."""

    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    submissions: list[tuple[Path, Submission]] = field(default_factory=list)
    verifications: Verifications = field(default_factory=Verifications)

    @property
    def ok(self) -> bool:
        return not self.problems

    def stale(self) -> dict[str, str]:
        """File name -> why it is stale, for every file warned ``stale``."""
        return {Path(w.file).name: w.message for w in self.warnings if w.code == STALE}

    def status(self, path: Path) -> str:
        """``stale``, ``verified`` or ``unverified``: what the board shows for ``path``."""
        if path.name in self.stale():
            return STALE
        return "verified" if self.verifications.is_verified(path.name) else UNVERIFIED


def schema_problems(name: str, error: ValidationError) -> list[Problem]:
    out = []
    for item in error.errors():
        loc = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in item["loc"])
        msg = item["msg"].removeprefix("Value error, ")
        out.append(Problem(name, loc.replace(".[", "[") or "(file)", msg))
    return out


def inside(path: Path, root: Path) -> bool:
    """Whether ``path`` resolves (following links) to a place under ``root``."""
    try:
        return path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):
        return False


def load_submission(path: Path, name: str | None = None) -> tuple[Submission | None, list[Problem]]:
    """Read and schema-check one file; never raises for bad content."""
    name = name or str(path)
    try:
        data = read_json_file(path)
    except SubmissionFileError as exc:
        return None, [Problem(name, "(file)", exc.reason)]
    if not isinstance(data, dict):
        return None, [
            Problem(name, "(file)", f"must hold a JSON object, got {type(data).__name__}")
        ]
    try:
        return Submission.model_validate_json(_dump(data)), []
    except ValidationError as exc:
        return None, schema_problems(name, exc)


def _dump(data: Any) -> str:
    import json

    return json.dumps(data)


def _get(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)


def summarize(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1), as ``suite submit`` records them."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def metric_range_problem(task: str, metric: str, value: float) -> str | None:
    """Whether ``value`` lies outside the bounds ``task`` declares for ``metric``."""
    spec = declared(task, metric)
    if spec is None or spec.bounds is None:
        return None
    low, high = spec.bounds
    if low <= value <= high:
        return None
    if math.isinf(high):
        rule = f">= {low:g}"
    elif math.isinf(low):
        rule = f"<= {high:g}"
    else:
        rule = f"in [{low:g}, {high:g}]"
    return f"{spec.label_for(metric)} must be {rule}, got {value!r}"


def check_config(name: str, sub: Submission) -> tuple[list[Problem], list[Problem]]:
    """(problems, warnings) of ``sub``'s config: its hashes, the fields the submission
    repeats, and whether this suite still resolves it to what it recorded."""
    problems = _check_hashes(name, sub) + _check_repeated(name, sub)
    found, warnings = _check_resolves(name, sub)
    return problems + found, warnings


def _check_hashes(name: str, sub: Submission) -> list[Problem]:
    """No seed in the config; its hash and each seed's hash recomputed."""
    problems: list[Problem] = []
    config = sub.config
    if "seed" in config:
        problems.append(
            Problem(name, "config.seed", "must not be in config: each seed is in seeds[i].seed")
        )
    recomputed = stable_hash(config)
    if recomputed != sub.config_hash:
        problems.append(
            Problem(
                name, "config_hash", f"is {sub.config_hash} but stable_hash(config) is {recomputed}"
            )
        )
    for i, run in enumerate(sub.seeds):
        expected = stable_hash({**config, "seed": run.seed})
        if run.config_hash != expected:
            problems.append(
                Problem(
                    name,
                    f"seeds[{i}].config_hash",
                    f"is {run.config_hash} but the config with seed {run.seed} hashes to {expected}",
                )
            )
    return problems


def _check_repeated(name: str, sub: Submission) -> list[Problem]:
    """The fields the submission states beside its config (model, dataset, device, ...)
    agree with the config."""
    problems: list[Problem] = []
    config = sub.config
    for key, actual in (
        ("model", _get(config, "model", "name")),
        ("embedding", _get(config, "embedding", "name")),
        ("dataset", _get(config, "dataset", "name")),
        ("protocol", _get(config, "dataset", "protocol")),
        ("task", _get(config, "task", "name")),
    ):
        if getattr(sub, key) != actual:
            where = {"protocol": "dataset.protocol"}.get(key, f"{key}.name")
            problems.append(
                Problem(name, key, f"is {getattr(sub, key)!r} but config.{where} is {actual!r}")
            )
    if sub.environment.device != config.get("device"):
        problems.append(
            Problem(
                name,
                "environment.device",
                f"is {sub.environment.device!r} but config.device is {config.get('device')!r}",
            )
        )
    threads = _get(config, "train", "threads")
    if isinstance(threads, int) and threads != sub.environment.threads:
        problems.append(
            Problem(
                name,
                "environment.threads",
                f"is {sub.environment.threads} but config.train.threads is {threads}",
            )
        )
    return problems


def _check_resolves(name: str, sub: Submission) -> tuple[list[Problem], list[Problem]]:
    """(problems, warnings): the config resolves with this suite to what it recorded; a
    stale warning where the suite resolves fields the record lacks."""
    problems: list[Problem] = []
    warnings: list[Problem] = []
    config = sub.config
    try:
        resolved = resolve_recorded({**config, "seed": sub.seeds[0].seed})
    except ConfigError as exc:
        problems.append(Problem(name, "config", f"does not resolve with this suite: {exc}"))
        return problems, warnings
    except Exception as exc:
        problems.append(Problem(name, "config", f"does not resolve with this suite: {exc}"))
        return problems, warnings
    recorded = flat({**config, "seed": sub.seeds[0].seed})
    now = flat(resolved.config.identity())
    for key in sorted(recorded):
        if key not in now:
            problems.append(Problem(name, f"config.{key}", "is not a field of the resolved config"))
        elif now[key] != recorded[key]:
            problems.append(
                Problem(name, f"config.{key}", f"is {recorded[key]!r} but resolves to {now[key]!r}")
            )
    if resolved.unknown:
        warnings.append(
            Problem(
                name,
                "config",
                "stale: this suite resolves fields the submission does not record and "
                "suite/leaderboard/history.py:ADDED_SINCE holds no old value for: "
                f"{', '.join(resolved.unknown)}; its recorded config hash no longer says "
                "what a re-run would train",
                STALE,
            )
        )
    return problems, warnings


def check_metrics(name: str, sub: Submission) -> list[Problem]:
    problems: list[Problem] = []
    seen: dict[int, int] = {}
    for i, run in enumerate(sub.seeds):
        if run.seed in seen:
            problems.append(
                Problem(
                    name, f"seeds[{i}].seed", f"seed {run.seed} repeats seeds[{seen[run.seed]}]"
                )
            )
        seen.setdefault(run.seed, i)
    if len(seen) < MIN_SEEDS:
        problems.append(
            Problem(name, "seeds", f"needs at least {MIN_SEEDS} distinct seeds, has {len(seen)}")
        )
    names = set(sub.metrics)
    for required in required_metrics(sub.task):
        if required not in names:
            problems.append(
                Problem(name, f"metrics.{required}", f"is required for task {sub.task!r}")
            )
    for i, run in enumerate(sub.seeds):
        missing, extra = sorted(names - set(run.metrics)), sorted(set(run.metrics) - names)
        if missing:
            problems.append(Problem(name, f"seeds[{i}].metrics", f"lacks {', '.join(missing)}"))
        if extra:
            problems.append(
                Problem(
                    name,
                    f"seeds[{i}].metrics",
                    f"has {', '.join(extra)}, which metrics does not summarize",
                )
            )
        for metric, value in sorted(run.metrics.items()):
            if (msg := metric_range_problem(sub.task, metric, value)) is not None:
                problems.append(Problem(name, f"seeds[{i}].metrics.{metric}", msg))
    for metric, summary in sorted(sub.metrics.items()):
        if (msg := metric_range_problem(sub.task, metric, summary.mean)) is not None:
            problems.append(Problem(name, f"metrics.{metric}.mean", msg))
        spec = declared(sub.task, metric)
        if spec is None:
            problems.append(
                Problem(name, f"metrics.{metric}", f"is not a metric task {sub.task!r} declares")
            )
        elif summary.higher_is_better != spec.higher_is_better:
            problems.append(
                Problem(
                    name,
                    f"metrics.{metric}.higher_is_better",
                    f"must be {str(spec.higher_is_better).lower()} ({sub.task!r} declares "
                    f"{spec.label_for(metric)} {'higher' if spec.higher_is_better else 'lower'} "
                    "is better)",
                )
            )
        values = [run.metrics[metric] for run in sub.seeds if metric in run.metrics]
        if len(values) != len(sub.seeds) or len(values) < 2:
            continue
        mean, std = summarize(values)
        if not close(summary.mean, mean):
            problems.append(
                Problem(
                    name,
                    f"metrics.{metric}.mean",
                    f"is {summary.mean!r} but the seeds' values give {mean!r}",
                )
            )
        if not close(summary.std, std):
            problems.append(
                Problem(
                    name,
                    f"metrics.{metric}.std",
                    f"is {summary.std!r} but the seeds' values give {std!r} (sample std, ddof=1)",
                )
            )
    return problems


def check_draws(name: str, sub: Submission) -> list[Problem]:
    """The seeds' fingerprints agree with the config's draw: where it draws the data per
    seed (``dataset.options.draw: per_seed``) every seed records its own and
    ``data_fingerprint`` is their :func:`~suite.leaderboard.schema.draws_digest`; else no
    seed records one."""
    per_seed = draws_per_seed(sub.config)
    problems = []
    for i, run in enumerate(sub.seeds):
        if per_seed and run.data_fingerprint is None:
            problems.append(
                Problem(
                    name,
                    f"seeds[{i}].data_fingerprint",
                    f"seed {run.seed}: is missing, but the config draws the data per seed "
                    "(dataset.options.draw: per_seed): each seed records its own data's",
                )
            )
        elif not per_seed and run.data_fingerprint is not None:
            problems.append(
                Problem(
                    name,
                    f"seeds[{i}].data_fingerprint",
                    f"seed {run.seed}: must not be set: the config's seeds share one draw "
                    "(dataset.options.draw is not per_seed), recorded once as data_fingerprint",
                )
            )
    if per_seed and not problems:
        digest = draws_digest(sub.seed_fingerprints())
        if digest != sub.data_fingerprint:
            problems.append(
                Problem(
                    name,
                    "data_fingerprint",
                    f"is {sub.data_fingerprint[:16]}... but the seeds' data fingerprints digest "
                    f"to {digest[:16]}... (sha256 of their seed:fingerprint lines, by seed)",
                )
            )
    return problems


def check_fingerprint(name: str, sub: Submission, registry: FingerprintRegistry) -> list[Problem]:
    """The data is the registered data of its dataset, protocol and options: the one
    fingerprint, or where each seed drew its own (:func:`check_draws`), each seed's against
    its options with ``draw_seed`` (:func:`~suite.leaderboard.fingerprints.seed_options`)."""
    options = _get(sub.config, "dataset", "options")
    options = options if isinstance(options, dict) else {}
    problems = check_draws(name, sub)
    if not draws_per_seed(sub.config):
        found = _unregistered(registry, sub, options, sub.data_fingerprint)
        if found:
            problems.append(Problem(name, "data_fingerprint", *found))
        return problems
    for i, run in enumerate(sub.seeds):
        if run.data_fingerprint is None:
            continue  # check_draws reported it
        found = _unregistered(registry, sub, seed_options(options, run.seed), run.data_fingerprint)
        if found:
            message, code = found
            problems.append(
                Problem(name, f"seeds[{i}].data_fingerprint", f"seed {run.seed}: {message}", code)
            )
    return problems


def _unregistered(
    registry: FingerprintRegistry, sub: Submission, options: dict[str, Any], fingerprint: str
) -> tuple[str, str] | None:
    """(message, code) when ``fingerprint`` is not the one registered for ``sub``'s dataset
    and protocol under ``options`` (none registered: coded :data:`UNREGISTERED`)."""
    where = f"{sub.dataset}/{sub.protocol} with options hash {options_hash(options)}"
    entry = registry.lookup(sub.dataset, sub.protocol, options)
    if entry is None:
        return (
            f"no registered fingerprint for {where} in {FINGERPRINTS}; synthetic data: run "
            "`suite leaderboard fingerprints --update`; real data: a maintainer registers it",
            UNREGISTERED,
        )
    if entry.fingerprint != fingerprint:
        return (
            f"is {fingerprint[:16]}... but the registered fingerprint for {where} "
            f"is {entry.fingerprint[:16]}...",
            "error",
        )
    return None


def check_submission(
    name: str, sub: Submission, registry: FingerprintRegistry, check_name: bool = True
) -> tuple[list[Problem], list[Problem]]:
    """Every single-file check of a parsed submission: (problems, warnings)."""
    problems: list[Problem] = []
    if check_name:
        base = Path(name).name
        expected = sub.filename()
        if base != expected:
            why = "" if FILENAME_PATTERN.match(base) else " (not a name `suite submit` writes)"
            problems.append(
                Problem(
                    name,
                    "(file name)",
                    f"does not match the content: expected {expected}{why}; the name ends with the "
                    "content hash, so a file edited after `suite submit` wrote it fails here",
                )
            )
    config_problems, warnings = check_config(name, sub)
    problems += config_problems
    problems += check_metrics(name, sub)
    problems += check_fingerprint(name, sub, registry)
    return problems, warnings


def duplicate_key(sub: Submission) -> tuple[str, str, str, str]:
    """Same config, data, task and submitter (:func:`name_key`: NFKC, invisible characters
    removed, whitespace collapsed, case-folded), whatever the spelling."""
    return (sub.config_hash, sub.data_fingerprint, sub.task, name_key(sub.submitter))


def check_duplicates(items: list[tuple[str, Submission]]) -> list[Problem]:
    """A problem for every entry that repeats an earlier one in ``items``: pass the entries
    already on the board first, so the blame lands on the newcomer."""
    first: dict[tuple[str, str, str, str], str] = {}
    problems = []
    for name, sub in items:
        key = duplicate_key(sub)
        if key in first:
            problems.append(
                Problem(
                    name,
                    "config_hash",
                    f"duplicates {first[key]}, which is already on the board (same config hash, "
                    "data fingerprint, task and submitter); remove this file",
                )
            )
        else:
            first[key] = name
    return problems


def committed_files(folder: Path) -> set[str] | None:
    """Names of the files under ``folder`` that git has at HEAD (None: not a git checkout)."""
    try:
        out = subprocess.run(
            ["git", "ls-tree", "-z", "--name-only", "HEAD", "."],
            cwd=folder,
            capture_output=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {Path(name).name for name in out.decode(errors="replace").split("\0") if name}


def board_order(items: list[tuple[str, Submission]], folder: Path) -> list[tuple[str, Submission]]:
    """Entries oldest first: committed before uncommitted, then by recorded date, then by
    content hash. Every step after git comes from the files' content, never their names, so
    renaming a file cannot move it ahead of the entry it copies."""
    committed = committed_files(folder) if folder.is_dir() else None
    return sorted(
        items,
        key=lambda i: (
            committed is not None and Path(i[0]).name not in committed,
            i[1].date,
            i[1].content_hash(),
        ),
    )


def submission_files(leaderboard_dir: Path) -> tuple[list[Path], list[Problem]]:
    """The ``*.json`` files under ``<leaderboard>/submissions``, each checked to stay inside."""
    root = leaderboard_dir.resolve()
    folder = leaderboard_dir / SUBMISSIONS
    if not folder.is_dir():
        return [], []
    if not inside(folder, root):
        return [], [Problem(str(folder), "(path)", f"resolves outside {leaderboard_dir}")]
    files, problems = [], []
    for path in sorted(folder.iterdir(), key=lambda p: p.name):
        label = f"{SUBMISSIONS}/{path.name}"
        if path.name.startswith("."):
            continue
        if not inside(path, root):
            problems.append(Problem(label, "(path)", f"resolves outside {leaderboard_dir}"))
        elif path.suffix != ".json" or not path.is_file():
            problems.append(Problem(label, "(path)", "only submission *.json files belong here"))
        else:
            files.append(path)
    return files, problems


def validate(
    leaderboard_dir: Path,
    files: Iterable[Path] | None = None,
    registry: FingerprintRegistry | None = None,
) -> Report:
    """Validate ``files`` (default: every submission) against the leaderboard's registry
    and, for duplicates, against every submission it holds."""
    report = Report()
    if registry is None:
        try:
            registry = FingerprintRegistry.load(leaderboard_dir / FINGERPRINTS)
        except SuiteError as exc:
            report.problems.append(Problem(FINGERPRINTS, "(file)", str(exc)))
            registry = FingerprintRegistry()
    held, path_problems = submission_files(leaderboard_dir)
    root = leaderboard_dir.resolve()
    if files is None:
        targets = held
        report.problems += path_problems
    else:
        targets = [Path(f) for f in files]
    # a board file is not a duplicate of itself, nor of a copy under the same name
    target_keys = {p.resolve() for p in targets} | {p.name for p in targets}
    others: list[tuple[str, Submission]] = []
    for path in held:
        if path.resolve() not in target_keys and path.name not in target_keys:
            sub, problems = load_submission(path)
            if sub is not None:
                others.append((label_of(path, root), sub))
    checked: list[tuple[str, Submission]] = []
    for path in targets:
        name = label_of(path, root)
        sub, problems = load_submission(path, name)
        report.problems += problems
        if sub is None:
            continue
        problems, warnings = check_submission(name, sub, registry)
        report.problems += problems
        report.warnings += warnings
        report.submissions.append((path, sub))
        checked.append((name, sub))
    dupes = check_duplicates(board_order(others + checked, root / SUBMISSIONS))
    report.problems += [p for p in dupes if p.file in {n for n, _ in checked}]
    try:
        report.verifications = Verifications.load(leaderboard_dir / VERIFICATIONS)
    except SuiteError as exc:
        report.problems.append(Problem(VERIFICATIONS, "(file)", str(exc)))
    for path, sub in report.submissions:
        label = label_of(path, root)
        report.problems += binding_problems(label, path, sub, report.verifications, root.parent)
        report.warnings += verification_warnings(label_of(path, root), path, report.verifications)
    return report


def binding_problems(
    label: str, path: Path, sub: Submission, verifications: Verifications, runs_root: Path
) -> list[Problem]:
    """One problem per record in ``verifications.yaml`` under ``path``'s name that does not
    bind this file: another content hash, other figures than the seed's it re-ran, or
    committed runs under ``runs_root`` (the leaderboard's parent folder) that no longer
    rebuild it (:func:`~suite.leaderboard.verified.binding_problem`). A record copied under
    an edited, renamed file fails here, and so do validate and render."""
    problems = []
    for i, record in enumerate(verifications.of(path.name)):
        why = binding_problem(record, sub, runs_root)
        if why is not None:
            where = f"{VERIFICATIONS} verified[{path.name}][{i}]"
            problems.append(Problem(label, where, f"does not match this file: {why}"))
    return problems


def verification_warnings(label: str, path: Path, verifications: Verifications) -> list[Problem]:
    """``unverified`` when no re-run reproduced the file; ``stale`` when every re-run that
    did predates a change that alters results (:data:`~suite.leaderboard.history.RESULT_CHANGES`)."""
    records = verifications.of(path.name)
    again = f"`suite leaderboard verify {shell_path(path)} --record`"
    if not records:
        return [
            Problem(
                label,
                "(verification)",
                "unverified: no re-run has reproduced it yet; it is shown as unverified "
                f"until {again} passes",
                UNVERIFIED,
            )
        ]
    missed = [predating_change(r.suite_commit, r.date) for r in records]
    if all(missed):
        change = missed[-1]
        assert change is not None
        return [
            Problem(
                label,
                "(verification)",
                f"stale: its re-runs predate {change.commit} ({change.what}), which alters "
                f"results; it is shown as stale until {again} passes again",
                STALE,
            )
        ]
    return []


def shell_path(path: Path) -> str:
    """``path`` as a command typed here takes it: relative to the working directory when
    under it (``leaderboard/submissions/x.json`` from the repository root), else absolute."""
    resolved = path.resolve()
    try:
        return resolved.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(resolved)


def label_of(path: Path, root: Path) -> str:
    """``submissions/x.json`` for files under the leaderboard, else the path as given."""
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        return str(path)
