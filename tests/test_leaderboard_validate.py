"""Submission validation: each failure gives one precise message naming file and field."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from suite.cli import main
from suite.config import stable_hash
from suite.errors import SuiteError
from suite.leaderboard.fingerprints import FingerprintEntry, FingerprintRegistry
from suite.leaderboard.schema import Submission
from suite.leaderboard.submit import build_submission, write_submission
from suite.leaderboard.validate import summarize, validate
from suite.results import TaskResult
from tests.conftest import tiny_config

FINGERPRINT = "ab" * 32
ENV = {
    "suite_version": "0.1.0",
    "git_commit": "0123456789abcdef0123456789abcdef01234567",
    "python": "3.11.7",
    "torch": "2.13.0+cpu",
    "fbgemm": "1.8.0",
    "mlflow": "3.1.0",
    "device": "cpu",
    "device_name": "x86_64",
    "threads": 1,
    "platform": "Linux",
}


def fake_results(
    embedding: str = "full",
    dataset: str = "criteo-synth",
    seeds: tuple[int, ...] = (1, 2, 3),
    auc: float = 0.70,
    memory: float = 600_000.0,
    fingerprint: str = FINGERPRINT,
) -> list[TaskResult]:
    """Per-seed results of a tiny config with made-up metrics (no training)."""
    out = []
    for seed in seeds:
        config = tiny_config(dataset=dataset, embedding=embedding, overrides=[f"seed={seed}"])
        metrics = {
            "val_auc": auc + 0.01 + 0.001 * seed,
            "val_logloss": 0.50 - 0.001 * seed,
            "test_auc": auc + 0.001 * seed,
            "test_logloss": 0.51 - 0.001 * seed,
            "train_samples_per_s": 10_000.0 + seed,
            "embedding_bytes": memory,
            "flops_per_example": 140_576.0,
        }
        higher = {k: k.endswith(("auc", "per_s")) for k in metrics}
        out.append(
            TaskResult(
                task="accuracy",
                model="dlrm",
                embedding=embedding,
                dataset=dataset,
                protocol=config.dataset.protocol,
                seed=seed,
                config=config.identity(),
                config_hash=config.config_hash(),
                data_fingerprint=fingerprint,
                metrics=metrics,
                higher_is_better=higher,
                environment=ENV,
                mlflow_run_id=f"{seed:032x}",
            )
        )
    return out


def make_submission(submitter: str = "Ada", **kwargs: Any) -> Submission:
    import datetime as dt

    paper = kwargs.pop("paper", None)
    notes = kwargs.pop("notes", None)
    return build_submission(
        fake_results(**kwargs), submitter, paper, notes, date=dt.date(2025, 1, 2)
    )


def registry_for(*subs: Submission) -> FingerprintRegistry:
    registry = FingerprintRegistry()
    for sub in subs:
        options = sub.config["dataset"]["options"]
        registry.set(
            sub.dataset,
            sub.protocol,
            FingerprintEntry(fingerprint=sub.data_fingerprint, options=options),
        )
    return registry


@pytest.fixture
def board(tmp_path: Path) -> Path:
    """A leaderboard folder holding one valid submission and its registered fingerprint."""
    root = tmp_path / "leaderboard"
    sub = make_submission()
    write_submission(sub, root)
    registry_for(sub).save(root / "fingerprints.yaml")
    return root


def only_file(board: Path) -> Path:
    (path,) = sorted((board / "submissions").glob("*.json"))
    return path


def rewrite(board: Path, mutate: Callable[[dict[str, Any]], None], rename: bool = True) -> str:
    """Apply ``mutate`` to the one submission; keep the file name consistent with the new
    content when it still parses (so only the intended problem shows)."""
    path = only_file(board)
    data = json.loads(path.read_text())
    mutate(data)
    text = json.dumps(data, indent=2)
    path.unlink()
    name = path.name
    if rename:
        with contextlib.suppress(ValueError):  # schema-invalid content keeps its name
            name = Submission.model_validate_json(text).filename()
    (board / "submissions" / name).write_text(text)
    return f"submissions/{name}"


def resummarize(data: dict[str, Any]) -> None:
    for metric, summary in data["metrics"].items():
        values = [s["metrics"][metric] for s in data["seeds"] if metric in s["metrics"]]
        summary["mean"], summary["std"] = summarize(values)


def rehash(data: dict[str, Any]) -> None:
    data["config_hash"] = stable_hash(data["config"])
    for run in data["seeds"]:
        run["config_hash"] = stable_hash({**data["config"], "seed": run["seed"]})


def problems(board: Path) -> list[tuple[str, str, str]]:
    return [(p.file, p.field, p.message) for p in validate(board).problems]


def test_a_valid_submission_passes(board: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = validate(board)
    assert report.ok, report.problems
    assert len(report.submissions) == 1
    assert main(["leaderboard", "validate", "--leaderboard-dir", str(board)]) == 0
    assert "1 submission(s) valid" in capsys.readouterr().out


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(data: dict[str, Any]) -> None:
        node = data
        keys = path.split(".")
        for key in keys[:-1]:
            node = node[int(key)] if key.isdigit() else node[key]
        node[keys[-1]] = value

    return mutate


def _seed_metric(index: int, metric: str, value: float) -> Callable[[dict[str, Any]], None]:
    def mutate(data: dict[str, Any]) -> None:
        data["seeds"][index]["metrics"][metric] = value
        resummarize(data)

    return mutate


def _drop_seed(data: dict[str, Any]) -> None:
    data["seeds"].pop()
    resummarize(data)


def _repeat_seed(data: dict[str, Any]) -> None:
    data["seeds"][2]["seed"] = data["seeds"][0]["seed"]
    rehash(data)


def _edit_config(data: dict[str, Any]) -> None:
    data["config"]["train"]["dense_lr"] = 0.5


def _unknown_model(data: dict[str, Any]) -> None:
    data["config"]["model"]["name"] = "dlrmm"
    data["model"] = "dlrmm"
    rehash(data)


def _changed_value(data: dict[str, Any]) -> None:
    data["config"]["train"]["batch_size"] = "128"  # resolves to the int 128
    rehash(data)


def _nudge_mean(factor: float) -> Callable[[dict[str, Any]], None]:
    def mutate(data: dict[str, Any]) -> None:
        data["metrics"]["test_auc"]["mean"] *= factor

    return mutate


CASES = [
    pytest.param(
        _set("config_hash", "0" * 16),
        [("config_hash", "is 0000000000000000 but stable_hash(config) is ")],
        id="config-hash",
    ),
    pytest.param(
        _edit_config,
        [("config_hash", "but stable_hash(config) is")]
        + [
            (f"seeds[{i}].config_hash", f"the config with seed {i + 1} hashes to") for i in range(3)
        ],
        id="config-edited",
    ),
    pytest.param(
        _unknown_model,
        [
            (
                "config",
                "does not resolve with this suite: invalid config: model: unknown model 'dlrmm'",
            )
        ],
        id="config-unknown-model",
    ),
    pytest.param(
        _changed_value,
        [("config.train.batch_size", "is '128' but resolves to 128")],
        id="config-not-resolved",
    ),
    pytest.param(
        _set("embedding", "hash"),
        [("embedding", "is 'hash' but config.embedding.name is 'full'")],
        id="name-disagrees",
    ),
    pytest.param(
        _seed_metric(0, "test_auc", 1.5),
        [("seeds[0].metrics.test_auc", "AUC must be in [0, 1], got 1.5")],
        id="auc-range",
    ),
    pytest.param(
        _seed_metric(1, "test_logloss", -0.25),
        [("seeds[1].metrics.test_logloss", "Test log loss must be >= 0, got -0.25")],
        id="logloss-negative",
    ),
    pytest.param(
        _nudge_mean(1.01),
        [("metrics.test_auc.mean", "but the seeds' values give")],
        id="mean-inconsistent",
    ),
    pytest.param(
        _set("metrics.val_logloss.std", 0.5),
        [("metrics.val_logloss.std", "is 0.5 but the seeds' values give")],
        id="std-inconsistent",
    ),
    pytest.param(
        _set("metrics.test_auc.higher_is_better", False),
        [
            (
                "metrics.test_auc.higher_is_better",
                "must be true ('accuracy' declares Test AUC higher is better)",
            )
        ],
        id="auc-direction",
    ),
    pytest.param(
        _drop_seed,
        [("seeds", "List should have at least 3 items after validation, not 2")],
        id="two-seeds",
    ),
    pytest.param(
        _repeat_seed,
        [
            ("seeds[2].seed", "seed 1 repeats seeds[0]"),
            ("seeds", "needs at least 3 distinct seeds, has 2"),
        ],
        id="repeated-seed",
    ),
    pytest.param(
        _set("data_fingerprint", "cd" * 32),
        [
            (
                "data_fingerprint",
                "is cdcdcdcdcdcdcdcd... but the registered fingerprint for criteo-synth/default",
            )
        ],
        id="fingerprint-mismatch",
    ),
    pytest.param(
        _set("surprise", 1), [("surprise", "Extra inputs are not permitted")], id="extra-field"
    ),
    pytest.param(
        _set("paper", "javascript:alert(1)"),
        [("paper", "must be an http:// or https:// URL with a host")],
        id="paper-scheme",
    ),
    pytest.param(
        _set("submitter", "x" * 101),
        [("submitter", "String should have at most 100 characters")],
        id="submitter-too-long",
    ),
    pytest.param(
        _set("submitter", "Eve\x1b[31m"),
        [("submitter", "control or bidi character U+001B is not allowed")],
        id="submitter-control-char",
    ),
    pytest.param(
        _set("notes", "a" * 1001), [("notes", "at most 1000 characters")], id="notes-too-long"
    ),
    pytest.param(
        _set("seeds.0.metrics.test_auc", "0.7"),
        [("seeds[0].metrics.test_auc", "Input should be a valid number")],
        id="metric-as-string",
    ),
    pytest.param(
        _set("model", "<script>"),
        [("model", "String should match pattern")],
        id="model-name-pattern",
    ),
]


@pytest.mark.parametrize(("mutate", "expected"), CASES)
def test_each_problem_has_a_precise_message(
    board: Path, mutate: Callable[[dict[str, Any]], None], expected: list[tuple[str, str]]
) -> None:
    name = rewrite(board, mutate)
    found = problems(board)
    assert len(found) == len(expected), found
    for (file, field, message), (want_field, want_text) in zip(found, expected, strict=True):
        assert file == name
        assert field == want_field
        assert want_text in message, message


def test_mean_within_relative_tolerance_passes(board: Path) -> None:
    rewrite(board, _nudge_mean(1 + 1e-12))
    assert problems(board) == []
    rewrite(board, _nudge_mean(1 + 1e-7))
    assert [p[1] for p in problems(board)] == ["metrics.test_auc.mean"]


def test_edited_file_keeps_its_old_name_and_fails(board: Path) -> None:
    name = rewrite(board, _set("notes", "edited by hand"), rename=False)
    ((file, field, message),) = problems(board)
    assert (file, field) == (name, "(file name)")
    assert "does not match the content: expected criteo-synth-accuracy-dlrm-full-ada-" in message


def test_unregistered_fingerprint(board: Path) -> None:
    (board / "fingerprints.yaml").unlink()
    ((file, field, message),) = problems(board)
    assert field == "data_fingerprint"
    assert message.startswith(
        "no registered fingerprint for criteo-synth/default with options hash "
    )
    assert "suite leaderboard fingerprints --update" in message


def _raw_case(board: Path, text: str | bytes) -> tuple[str, str, str]:
    only_file(board).unlink()
    path = board / "submissions" / "raw-000000000000.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    ((file, field, message),) = problems(board)
    assert file == "submissions/raw-000000000000.json"
    return file, field, message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"mean": NaN}', "invalid JSON (NaN is not allowed in a submission)"),
        ('{"a": 1, "a": 2}', "invalid JSON (duplicate key 'a')"),
        ("[1, 2]", "must hold a JSON object, got list"),
        ('{"a": ', "invalid JSON at line 1 column 7"),
        (b"\xff\xfe{}", "not UTF-8 (byte 0)"),
        ("[" * 100_000 + "]" * 100_000, "invalid JSON (JSON nested too deeply)"),
        ('{"x": "' + "y" * 1_000_001 + '"}', "file is 1000010 bytes; the limit is 1000000"),
    ],
    ids=["nan", "duplicate-key", "not-object", "truncated", "not-utf8", "deep", "huge"],
)
def test_unreadable_files(board: Path, text: str, message: str) -> None:
    _, field, found = _raw_case(board, text)
    assert field == "(file)"
    assert message in found


def _later_duplicate(first: Submission, submitter: str) -> Submission:
    """A duplicate of ``first`` submitted later whose file name sorts before ``first``'s, so
    blaming by file name would blame the entry already on the board."""
    import datetime as dt

    for day in range(1, 28):
        again = first.model_copy(update={"date": dt.date(2025, 2, day), "submitter": submitter})
        if again.filename() < first.filename():
            return again
    raise AssertionError("no date gives a file name that sorts first")


def test_duplicate_entries(board: Path) -> None:
    first = Submission.model_validate_json(only_file(board).read_text())
    # same config, data, task and submitter (case aside), a later date: a duplicate, and
    # the blame lands on the newcomer although its file name sorts first
    again = _later_duplicate(first, "ADA")
    path, written = write_submission(again, board)
    assert written
    ((file, field, message),) = problems(board)
    assert (file, field) == (f"submissions/{path.name}", "config_hash")
    assert message == (
        f"duplicates submissions/{first.filename()}, which is already on the board (same "
        "config hash, data fingerprint, task and submitter); remove this file"
    )
    # another submitter's run of the same config is not a duplicate
    path.unlink()
    other = first.model_copy(update={"submitter": "Grace"})
    write_submission(other, board)
    assert problems(board) == []


@pytest.mark.parametrize(
    "spelling", ["A\u200bda", "\ufeffAda", "Ａｄａ", "ADA", " Ada  ", "A\u00adda", "Ad\u2060a"]
)
def test_submitter_spellings_are_one_name(board: Path, spelling: str) -> None:
    """Zero-width characters, fullwidth forms, case and spacing do not make a new name."""
    from suite.leaderboard.schema import name_key

    assert name_key(spelling) == name_key("Ada")
    first = Submission.model_validate_json(only_file(board).read_text())
    results = fake_results()
    again = build_submission(results, spelling, date=first.date.replace(month=3))
    assert again.submitter == ("ADA" if spelling == "ADA" else "Ada")
    path, _ = write_submission(again, board)
    ((file, field, message),) = problems(board)
    assert (file, field) == (f"submissions/{path.name}", "config_hash")
    assert message.startswith(f"duplicates submissions/{first.filename()}")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("A\u200bda", "invisible character U+200B is not allowed"),
        ("Ａｄａ", "must be in Unicode NFKC form (write 'Ada')"),
    ],
)
def test_hand_written_names_must_be_normalized(board: Path, name: str, message: str) -> None:
    rewrite(board, _set("submitter", name))
    ((_, field, found),) = problems(board)
    assert field == "submitter"
    assert message in found


def test_duplicate_blame_follows_git_history(board: Path) -> None:
    """On a git checkout the committed entry stays, even against a back-dated newcomer."""
    import datetime as dt
    import subprocess

    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q", str(board)], check=True)
    subprocess.run([*git, "-C", str(board), "add", "."], check=True)
    subprocess.run([*git, "-C", str(board), "commit", "-qm", "board"], check=True)
    first = Submission.model_validate_json(only_file(board).read_text())
    older = first.model_copy(update={"date": dt.date(2024, 1, 1)})
    path, _ = write_submission(older, board)
    ((file, _, message),) = problems(board)
    assert file == f"submissions/{path.name}"
    assert f"duplicates submissions/{first.filename()}" in message


def test_paths_cannot_escape_the_leaderboard(board: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.json"
    outside.write_text(only_file(board).read_text())
    os.symlink(outside, board / "submissions" / "link-000000000000.json")
    (board / "submissions" / "notes.txt").write_text("hello")
    found = {(f, fld, msg) for f, fld, msg in problems(board)}
    assert (
        "submissions/link-000000000000.json",
        "(path)",
        "resolves outside " + str(board),
    ) in found
    assert ("submissions/notes.txt", "(path)", "only submission *.json files belong here") in found
    assert len(found) == 2


def test_cli_prints_one_line_per_problem_and_fails(
    board: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = rewrite(board, _seed_metric(0, "test_auc", 1.5))
    code = main(["leaderboard", "validate", "--leaderboard-dir", str(board)])
    captured = capsys.readouterr()
    assert code == 1
    assert captured.out.splitlines() == [
        f"{name}: seeds[0].metrics.test_auc: Test AUC must be in [0, 1], got 1.5"
    ]
    assert "1 problem(s) in 1 file(s)" in captured.err


def test_validate_a_file_outside_the_board(board: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "mine.json"
    sub = Submission.model_validate_json(only_file(board).read_text())
    other = sub.model_copy(update={"submitter": "Grace"})
    elsewhere.write_text(other.to_file_text())
    report = validate(board, [elsewhere])
    assert [p.field for p in report.problems] == ["(file name)"]
    named = tmp_path / other.filename()
    named.write_text(other.to_file_text())
    assert validate(board, [named]).ok
    duplicate = tmp_path / sub.filename()
    duplicate.write_text(sub.to_file_text())
    assert validate(board, [duplicate]).ok  # the same file as the board's is not a duplicate


def test_fingerprint_registry_round_trip_and_update(tmp_path: Path) -> None:
    from suite.data.source import get_prepared
    from suite.leaderboard import fingerprints

    config = tiny_config()
    registry = FingerprintRegistry()
    options = dict(config.dataset.options)
    changes = fingerprints.update_synthetic(
        registry, [("criteo-synth", "default", options)], log=lambda _: None, defaults=False
    )
    assert changes == []
    entry = registry.lookup("criteo-synth", "default", options)
    assert entry is not None
    assert entry.fingerprint == get_prepared(config.dataset, progress=False).fingerprint
    assert entry.rows == {"train": 4000, "val": 1000, "test": 1000}
    path = tmp_path / "fp.yaml"
    registry.save(path)
    again = FingerprintRegistry.load(path)
    assert again.to_yaml() == registry.to_yaml()
    assert path.read_text().startswith("# Fingerprints of the prepared data")
    # a stale synthetic entry is replaced and reported
    registry.set("criteo-synth", "default", entry.model_copy(update={"fingerprint": "0" * 64}))
    changes = fingerprints.update_synthetic(
        registry, [("criteo-synth", "default", options)], log=lambda _: None, defaults=False
    )
    assert changes == [
        f"criteo-synth/default options {stable_hash(options)}: fingerprint changed "
        f"000000000000 -> {entry.fingerprint[:12]}"
    ]


def test_registry_file_is_loaded_safely(tmp_path: Path) -> None:
    path = tmp_path / "fp.yaml"
    path.write_text("!!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(SuiteError, match="malformed YAML"):
        FingerprintRegistry.load(path)
    path.write_text("version: 1\nfingerprints: {criteo-synth: {default: {zz: {}}}}\n")
    with pytest.raises(SuiteError, match="fingerprints"):
        FingerprintRegistry.load(path)
    path.write_text("x" * 1_000_001)
    with pytest.raises(SuiteError, match="limit is 1000000"):
        FingerprintRegistry.load(path)


def test_submission_round_trips_through_its_file_text() -> None:
    sub = make_submission()
    assert Submission.model_validate_json(sub.to_file_text()) == sub
    assert sub.filename().startswith("criteo-synth-accuracy-dlrm-full-ada-")
    assert sub.filename().endswith(f"-{sub.content_hash()[:12]}.json")
