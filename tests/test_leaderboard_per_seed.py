"""Submissions whose seeds each trained on their own draw (``dataset.options.draw:
per_seed``): each seed records its data's fingerprint, the submission's is their digest,
each seed's is checked against its own registered draw, ``verify`` re-runs a seed on its
own regenerated draw, and boards say their data is per-seed draws. Fixed-draw entries are
unchanged and still refuse seeds on different data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from suite.cli import main
from suite.errors import SuiteError
from suite.leaderboard.board import group_meta, group_titles
from suite.leaderboard.fingerprints import (
    FingerprintEntry,
    FingerprintRegistry,
    options_hash,
    seed_options,
    submission_options,
)
from suite.leaderboard.ranking import Item, groups
from suite.leaderboard.render import render_markdown
from suite.leaderboard.schema import Submission, draws_digest
from suite.leaderboard.submit import build_submission, load_result_files
from suite.leaderboard.validate import UNREGISTERED, validate
from suite.results import TaskResult
from suite.runs.single import execute
from tests.conftest import tiny_config
from tests.test_leaderboard_reproduction import write_runs
from tests.test_leaderboard_validate import fake_results, rewrite

SEEDS = (1, 2, 3)
PER_SEED = ["dataset.options.draw=per_seed", "train.max_steps=8"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    """Result files of real tiny CPU runs on per-seed draws: full and hash, three seeds
    each (eight steps; each seed prepares its own draw once, which both methods share)."""
    import torch

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("per-seed")
    out: dict[str, list[Path]] = {}
    for embedding in ("full", "hash"):
        for seed in SEEDS:
            paths = [f"dataset.cache_dir={root / 'cache'}", f"tracking.results_dir={root / 'runs'}"]
            config = tiny_config(embedding=embedding, overrides=[*PER_SEED, f"seed={seed}", *paths])
            path = root / f"{embedding}-seed{seed}.json"
            execute(config, out=path)
            out.setdefault(embedding, []).append(path)
    return out


def results(files: list[Path]) -> list[TaskResult]:
    return load_result_files(files)[0]


def submit(board: Path, files: list[Path], capsys: pytest.CaptureFixture[str]) -> Path:
    before = set((board / "submissions").glob("*.json"))
    argv = ["submit", "--results", *map(str, files), "--submitter", "Ada"]
    code = main([*argv, "--leaderboard-dir", str(board)])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "board: " in out.out and "data: per-seed draws" in out.out
    (path,) = set((board / "submissions").glob("*.json")) - before
    return path


def register(board: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``suite leaderboard fingerprints --update --only-used``: prepares what the
    submissions use, one draw per seed."""
    argv = ["leaderboard", "fingerprints", "--update", "--only-used"]
    assert main([*argv, "--leaderboard-dir", str(board)]) == 0
    capsys.readouterr()


@pytest.fixture
def board(tmp_path: Path, runs: dict[str, list[Path]], capsys: pytest.CaptureFixture[str]) -> Path:
    """A leaderboard holding the full runs' submission, its seeds' draws registered."""
    board = tmp_path / "leaderboard"
    submit(board, runs["full"], capsys)
    register(board, capsys)
    return board


def only(board: Path) -> Path:
    (path,) = (board / "submissions").glob("*.json")
    return path


def loaded(path: Path) -> Submission:
    return Submission.model_validate_json(path.read_text())


def test_a_per_seed_submission_records_each_seeds_data_and_validates(
    board: Path, runs: dict[str, list[Path]]
) -> None:
    report = validate(board)
    assert report.ok, [str(p) for p in report.problems]
    sub = loaded(only(board))
    stored = {r.seed: r.data_fingerprint for r in results(runs["full"])}
    assert len(set(stored.values())) == len(SEEDS)  # each seed its own draw
    assert {run.seed: run.data_fingerprint for run in sub.seeds} == stored
    assert sub.per_seed_draws and sub.seed_fingerprints() == stored
    assert sub.data_fingerprint == draws_digest(stored)
    assert len(sub.data_fingerprint) == 64 and sub.data_fingerprint not in stored.values()
    assert "draw_seed" not in sub.config["dataset"]["options"]
    # the update registered one entry per seed: the options with that seed's draw_seed
    registry = FingerprintRegistry.load(board / "fingerprints.yaml")
    options = sub.config["dataset"]["options"]
    for seed, fingerprint in stored.items():
        entry = registry.lookup(sub.dataset, sub.protocol, seed_options(options, seed))
        assert entry is not None and entry.fingerprint == fingerprint
        assert entry.options["draw_seed"] == seed
    assert [o["draw_seed"] for _, _, o in submission_options(sub)] == list(SEEDS)


def test_two_methods_on_the_same_draws_share_a_board_titled_per_seed(
    board: Path, runs: dict[str, list[Path]], capsys: pytest.CaptureFixture[str]
) -> None:
    hashed = loaded(submit(board, runs["hash"], capsys))
    report = validate(board)
    assert report.ok, [str(p) for p in report.problems]
    subs = [s for _, s in report.submissions]
    assert {s.data_fingerprint for s in subs} == {hashed.data_fingerprint}
    items = [Item(p.name, s) for p, s in report.submissions]
    boards = groups(items)  # split by memory budget, on the one data
    assert {g.fingerprint for g in boards} == {hashed.data_fingerprint}
    assert all(g.per_seed_draws for g in boards)
    assert {i.sub.embedding for g in boards for i in g.items} == {"full", "hash"}
    digest = hashed.data_fingerprint[:12]
    titles = group_titles(boards)
    assert all(
        f"4k train rows · data: per-seed draws {digest} · accuracy" in t for t in titles.values()
    )
    assert all(
        "data: per-seed draws (each seed trained on its own draw" in group_meta(g) for g in boards
    )
    assert f"data: per-seed draws {digest}" in render_markdown(items)


def test_a_tampered_seed_fingerprint_fails_naming_the_seed(board: Path) -> None:
    other = "0" * 64

    def tamper(data: dict[str, Any]) -> None:
        data["seeds"][1]["data_fingerprint"] = other

    rewrite(board, tamper)
    fields = {(p.field, p.message.split(":")[0]) for p in validate(board).problems}
    assert ("seeds[1].data_fingerprint", "seed 2") in fields
    assert "data_fingerprint" in {f for f, _ in fields}  # no longer the seeds' digest

    def redigest(data: dict[str, Any]) -> None:  # a forger who recomputes the digest too
        prints = {s["seed"]: s["data_fingerprint"] for s in data["seeds"]}
        data["data_fingerprint"] = draws_digest(prints)

    name = rewrite(board, redigest)
    (problem,) = validate(board).problems
    assert problem.file == name and problem.field == "seeds[1].data_fingerprint"
    assert problem.message.startswith(f"seed 2: is {other[:16]}... but the registered")
    assert "\n" not in str(problem)


def test_an_unregistered_seed_draw_is_named(board: Path) -> None:
    registry = FingerprintRegistry.load(board / "fingerprints.yaml")
    sub = loaded(only(board))
    options = seed_options(sub.config["dataset"]["options"], 3)
    del registry.data.fingerprints[sub.dataset][sub.protocol][options_hash(options)]
    registry.save(board / "fingerprints.yaml")
    (problem,) = validate(board).problems
    assert problem.code == UNREGISTERED and problem.field == "seeds[2].data_fingerprint"
    assert problem.message.startswith("seed 3: no registered fingerprint for criteo-synth")
    assert str(problem).startswith(f"submissions/{only(board).name}: seeds[2].data_fingerprint")


def test_seed_fingerprints_must_match_the_configs_draw(board: Path) -> None:
    def drop(data: dict[str, Any]) -> None:
        del data["seeds"][0]["data_fingerprint"]

    rewrite(board, drop)
    (problem,) = validate(board).problems
    assert problem.field == "seeds[0].data_fingerprint"
    assert problem.message.startswith("seed 1: is missing, but the config draws the data per seed")


def test_fixed_draw_entries_record_no_seed_data_and_refuse_one(tmp_path: Path) -> None:
    import datetime as dt

    from suite.leaderboard.submit import write_submission
    from tests.test_leaderboard_validate import registry_for

    sub = build_submission(fake_results(), "Ada", date=dt.date(2025, 1, 2))
    assert not sub.per_seed_draws
    assert all("data_fingerprint" not in s for s in json.loads(sub.to_file_text())["seeds"])
    board = tmp_path / "leaderboard"
    write_submission(sub, board)
    registry_for(sub).save(board / "fingerprints.yaml")
    assert validate(board).ok

    def add(data: dict[str, Any]) -> None:
        data["seeds"][2]["data_fingerprint"] = sub.data_fingerprint

    rewrite(board, add)
    (problem,) = validate(board).problems
    assert problem.field == "seeds[2].data_fingerprint"
    assert problem.message.startswith("seed 3: must not be set")


def test_a_fixed_draw_config_on_differing_data_is_still_refused() -> None:
    made = fake_results()
    made[1] = made[1].model_copy(update={"data_fingerprint": "cd" * 32})
    with pytest.raises(SuiteError, match=r"^seed 2 ran on different data than seed 1$"):
        build_submission(made, "Ada")


def test_a_per_seed_config_whose_seeds_share_data_is_refused(
    runs: dict[str, list[Path]],
) -> None:
    made = results(runs["full"])
    made[2] = made[2].model_copy(update={"data_fingerprint": made[0].data_fingerprint})
    with pytest.raises(SuiteError) as caught:
        build_submission(made, "Ada")
    message = str(caught.value)
    assert message.startswith("seed 3 ran on the same data as seed 1")
    assert "dataset.options.draw: per_seed" in message and "\n" not in message


def test_verify_reruns_a_seed_on_its_own_regenerated_draw(
    board: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["leaderboard", "verify", str(only(board)), "--seed", "2", "--no-tracking"])
    out = capsys.readouterr().out
    assert code == 0, out
    sub = loaded(only(board))
    assert f"data fingerprint {sub.seed_fingerprints()[2][:16]}... matches" in out
    assert "verified: seed 2 reproduces the recorded metrics (bit-identical)" in out


def test_verify_refuses_a_seed_whose_draw_is_not_its_recorded_data(
    board: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def swap(data: dict[str, Any]) -> None:  # seed 2 claims seed 1's draw; digest redone
        data["seeds"][1]["data_fingerprint"] = data["seeds"][0]["data_fingerprint"]
        prints = {s["seed"]: s["data_fingerprint"] for s in data["seeds"]}
        data["data_fingerprint"] = draws_digest(prints)

    rewrite(board, swap)
    code = main(["leaderboard", "verify", str(only(board)), "--seed", "2", "--no-tracking"])
    err = capsys.readouterr().err
    assert code == 2
    assert "is not the recorded seed 2's" in err and "not re-running on different data" in err


def test_per_seed_reproduction_runs_import_and_regenerate(
    tmp_path: Path, runs: dict[str, list[Path]], capsys: pytest.CaptureFixture[str]
) -> None:
    full, hashed = results(runs["full"]), results(runs["hash"])
    write_runs(tmp_path, "demo", full)
    results_dir = write_runs(tmp_path, "demo", hashed)
    board = tmp_path / "leaderboard"
    board.mkdir()
    registry = FingerprintRegistry()
    sub = build_submission(full, "x")
    for _, protocol, options in submission_options(sub):
        fingerprint = sub.seed_fingerprints()[options["draw_seed"]]
        registry.set(
            sub.dataset, protocol, FingerprintEntry(fingerprint=fingerprint, options=options)
        )
    registry.save(board / "fingerprints.yaml")
    argv = ["leaderboard", "import-reproduction", str(results_dir)]
    assert main([*argv, "--leaderboard-dir", str(board)]) == 0, capsys.readouterr()
    report = validate(board)
    assert report.ok, [str(p) for p in report.problems]
    subs = [s for _, s in report.submissions]
    assert {s.embedding for s in subs} == {"full", "hash"}
    assert all(s.per_seed_draws and s.data_fingerprint == sub.data_fingerprint for s in subs)
    assert all(report.status(p) == "verified" for p, _ in report.submissions)
    (entry,) = [s for s in subs if s.embedding == "hash"]
    assert "Budget " in (entry.notes or "")  # against full on the same draws
