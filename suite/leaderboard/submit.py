"""Building a submission from per-seed results (MLflow runs or result JSON files) and
writing it under ``leaderboard/submissions/`` without ever replacing a different file."""

from __future__ import annotations

import datetime as dt
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from suite.config import format_validation_error, stable_hash
from suite.errors import SuiteError
from suite.fileio import apply_umask, writing
from suite.leaderboard import BOARD_OPTION, SUBMISSIONS
from suite.leaderboard.schema import (
    MAX_FILE_BYTES,
    Environment,
    MetricSummary,
    SeedRun,
    Submission,
    SubmissionFileError,
    draws_digest,
    draws_per_seed,
    normalize_name,
    read_json_file,
    read_text_limited,
)
from suite.leaderboard.validate import inside, summarize
from suite.results import TaskResult
from suite.tracking import PARENT_RUN_TAG, RunStore

ENV_KEYS = tuple(Environment.model_fields)
_RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def load_result_file(path: Path) -> TaskResult:
    """A result JSON file (strict JSON, at most 1 MB) as a ``TaskResult``."""
    (result,), _ = load_result_files([path])
    return result


def load_result_files(paths: Iterable[Path]) -> tuple[list[TaskResult], str | None]:
    """Per-seed result files, or multi-seed aggregates (``"kind": "multiseed"``, whose
    ``per_seed`` results are used); returns the results and the parent run id of an
    aggregate, when it is the only file."""
    paths = list(paths)
    results: list[TaskResult] = []
    parents = []
    for path in paths:
        data = read_json_file(Path(path))
        aggregate = isinstance(data, dict) and data.get("kind") == "multiseed"
        entries = (data.get("per_seed") or []) if aggregate else [data]
        if aggregate:
            parents.append(data.get("mlflow_run_id"))
        for n, entry in enumerate(entries):
            try:
                results.append(TaskResult.model_validate(entry))
            except ValidationError as exc:
                where = f"{path}: per_seed[{n}]" if aggregate else str(path)
                raise SuiteError(
                    f"{where}: not a result file: {format_validation_error(exc)}"
                ) from None
    parent = parents[0] if len(parents) == 1 and len(paths) == 1 else None
    return results, parent if isinstance(parent, str) and _RUN_ID.match(parent) else None


def _check_run_id(run_id: str) -> str:
    if not _RUN_ID.match(run_id):
        raise SuiteError(f"not an MLflow run id: {run_id!r}")
    return run_id


def _client(tracking_uri: str | None) -> RunStore:
    return RunStore(tracking_uri)


def _run_result(client: RunStore, run_id: str) -> tuple[TaskResult, str | None]:
    """The ``result.json`` artifact of an MLflow run, and the run's parent run id."""
    try:
        run = client.run(run_id)
    except Exception as exc:
        raise SuiteError(f"MLflow run {run_id}: cannot read it ({exc})") from None
    if run.info.status != "FINISHED":
        raise SuiteError(f"MLflow run {run_id} is {run.info.status}, not FINISHED")
    with tempfile.TemporaryDirectory(prefix="recsuite-submit-") as tmp:
        try:
            local = client.download(run_id, "result.json", tmp)
        except Exception as exc:
            raise SuiteError(f"MLflow run {run_id} has no result.json artifact ({exc})") from None
        if not inside(local, Path(tmp)):
            raise SuiteError(f"MLflow run {run_id}: artifact path escapes the download folder")
        result = load_result_file(local)
    if result.mlflow_run_id not in (None, run_id):
        raise SuiteError(f"MLflow run {run_id}: its result.json names run {result.mlflow_run_id}")
    parent = run.data.tags.get(PARENT_RUN_TAG)
    return result.model_copy(update={"mlflow_run_id": run_id}), parent


def results_from_runs(
    run_ids: Iterable[str], tracking_uri: str | None
) -> tuple[list[TaskResult], str | None]:
    """The runs' results, and their parent run id when they all share one."""
    client = _client(tracking_uri)
    pairs = [_run_result(client, _check_run_id(run_id)) for run_id in run_ids]
    parents = {parent for _, parent in pairs}
    parent = parents.pop() if len(parents) == 1 else None
    parent = parent if parent and _RUN_ID.match(parent) else None
    return [result for result, _ in pairs], parent


def results_from_parent(parent_id: str, tracking_uri: str | None) -> list[TaskResult]:
    """The results of a multi-seed parent run's finished children."""
    client = _client(tracking_uri)
    _check_run_id(parent_id)
    try:
        parent = client.run(parent_id)
    except Exception as exc:
        raise SuiteError(f"MLflow run {parent_id}: cannot read it ({exc})") from None
    children = client.find([parent.info.experiment_id], f"tags.`{PARENT_RUN_TAG}` = '{parent_id}'")
    finished = [c.info.run_id for c in children if c.info.status == "FINISHED"]
    if not finished:
        raise SuiteError(f"MLflow run {parent_id} has no finished child runs")
    return [_run_result(client, run_id)[0] for run_id in sorted(finished)]


def _shared_config(result: TaskResult) -> dict[str, Any]:
    return {k: v for k, v in result.config.items() if k != "seed"}


def check_result_draws(results: list[TaskResult]) -> None:
    """The seeds' data, as their config says: one draw that every seed trained on, or
    (``dataset.options.draw: per_seed``) a draw of each seed's own; else one line naming
    the seed."""
    first = results[0]
    if not draws_per_seed(first.config):
        for result in results:
            if result.data_fingerprint != first.data_fingerprint:
                raise SuiteError(f"seed {result.seed} ran on different data than seed {first.seed}")
        return
    seen: dict[str, int] = {}
    for result in results:
        other = seen.setdefault(result.data_fingerprint, result.seed)
        if other != result.seed:
            raise SuiteError(
                f"seed {result.seed} ran on the same data as seed {other} (fingerprint "
                f"{result.data_fingerprint[:16]}...), but its config draws the data per seed "
                "(dataset.options.draw: per_seed): each seed's data must be its own draw"
            )


def data_fingerprint_of(results: list[TaskResult]) -> str:
    """The data fingerprint of a submission of ``results`` (seeds of one config): their
    one data's, or where each seed drew its own, :func:`~suite.leaderboard.schema.draws_digest`
    of theirs."""
    if draws_per_seed(results[0].config):
        return draws_digest({r.seed: r.data_fingerprint for r in results})
    return results[0].data_fingerprint


def build_submission(
    results: list[TaskResult],
    submitter: str,
    paper: str | None = None,
    notes: str | None = None,
    parent_run_id: str | None = None,
    date: dt.date | None = None,
) -> Submission:
    """Summarize the seeds of one config into a validated ``Submission``."""
    if not results:
        raise SuiteError("no results to submit")
    results = sorted(results, key=lambda r: r.seed)
    first = results[0]
    config = _shared_config(first)
    for result in results:
        if stable_hash(result.config) != result.config_hash:
            raise SuiteError(f"seed {result.seed}: its config does not hash to its config_hash")
        if _shared_config(result) != config:
            raise SuiteError(f"seed {result.seed} ran a different config than seed {first.seed}")
        if set(result.metrics) != set(first.metrics):
            raise SuiteError(f"seed {result.seed} has other metrics than seed {first.seed}")
        for key in ENV_KEYS:
            if key != "platform" and result.environment.get(key) != first.environment.get(key):
                raise SuiteError(
                    f"seed {result.seed} ran in another environment than seed {first.seed}: "
                    f"{key} is {result.environment.get(key)!r}, not {first.environment.get(key)!r}"
                )
    seeds = [r.seed for r in results]
    if len(set(seeds)) != len(seeds):
        raise SuiteError(f"seeds repeat: {seeds}")
    check_result_draws(results)
    per_seed = draws_per_seed(config)
    metrics = {}
    for name in sorted(first.metrics):
        mean, std = summarize([r.metrics[name] for r in results])
        metrics[name] = MetricSummary(
            mean=mean, std=std, higher_is_better=bool(first.higher_is_better.get(name, True))
        )
    data = {
        "submitter": normalize_name(submitter),
        "date": date or dt.datetime.now(dt.UTC).date(),
        "model": first.model,
        "embedding": first.embedding,
        "dataset": first.dataset,
        "protocol": first.protocol or "default",
        "task": first.task,
        "data_fingerprint": data_fingerprint_of(results),
        "config_hash": stable_hash(config),
        "config": config,
        "seeds": [
            SeedRun(
                seed=r.seed,
                config_hash=r.config_hash,
                mlflow_run_id=r.mlflow_run_id,
                metrics={k: float(v) for k, v in sorted(r.metrics.items())},
                data_fingerprint=r.data_fingerprint if per_seed else None,
            )
            for r in results
        ],
        "metrics": metrics,
        "environment": Environment(
            **{
                k: first.environment.get(k)
                for k in ENV_KEYS
                if first.environment.get(k) is not None
            }
        ),
        "mlflow_parent_run_id": parent_run_id,
        "paper": paper or None,
        "notes": notes.strip() if notes and notes.strip() else None,
    }
    try:
        return Submission.model_validate(data)
    except ValidationError as exc:
        raise SuiteError(f"the submission is invalid: {format_validation_error(exc)}") from None


def write_submission(submission: Submission, leaderboard_dir: Path) -> tuple[Path, bool]:
    """Write under ``<leaderboard>/submissions/<filename>`` atomically.

    Returns ``(path, written)``; ``written`` is False when the identical file is already
    there. A different file of that name is never replaced.
    """
    folder = leaderboard_dir / SUBMISSIONS
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / submission.filename()
    if not inside(path, leaderboard_dir) or path.resolve().parent != folder.resolve():
        raise SuiteError(f"{path}: resolves outside {folder}")
    text = submission.to_file_text()
    if len(text.encode()) > MAX_FILE_BYTES:
        raise SuiteError(f"the submission is over {MAX_FILE_BYTES} bytes")
    if path.exists() or path.is_symlink():
        return path, _same_or_fail(path, text)
    with writing(path, len(text.encode()), BOARD_OPTION):  # a full disk: one line
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            apply_umask(tmp)  # mkstemp makes files 0600 whatever the umask
            try:
                os.link(tmp, path)  # atomic and never replaces an existing file
            except FileExistsError:
                return path, _same_or_fail(path, text)
        finally:
            Path(tmp).unlink(missing_ok=True)
    return path, True


def _same_or_fail(path: Path, text: str) -> bool:
    try:
        same = read_text_limited(path) == text
    except SubmissionFileError:
        same = False
    if not same:
        raise SuiteError(f"{path} exists with different content; not replacing it")
    return False
