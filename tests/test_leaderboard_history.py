"""Old records re-run as recorded (fields added since take their old value), stale entries,
boards keyed by the data they ran on, the page's config/record links and CI bars, and the
shipped board validating without a warning."""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from suite.cli import main
from suite.config import stable_hash
from suite.leaderboard import history
from suite.leaderboard.history import ADDED_SINCE, ResultChange, recorded_hash, resolve_recorded
from suite.leaderboard.ranking import LEVEL
from suite.leaderboard.render import INDEX, Item, groups, render_html, render_markdown
from suite.leaderboard.schema import Submission
from suite.leaderboard.submit import build_submission, write_submission
from suite.leaderboard.validate import STALE, validate
from suite.leaderboard.verified import Verification, Verifications, bound_figures
from suite.results import TaskResult
from suite.stats import mean_ci
from tests.conftest import tiny_config
from tests.test_leaderboard_validate import fake_results, registry_for

REPO_BOARD = Path(__file__).resolve().parents[1] / "leaderboard"
INIT_FIELDS = ("embedding.options.init", "model.options.init")


def _drop(config: dict[str, Any], dotted: str) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        config = config[key]
    config.pop(last)


def edited(results: list[TaskResult], edit: Callable[[dict[str, Any]], None]) -> list[TaskResult]:
    """``results`` with ``edit`` applied to each config and the config hash recomputed, as
    an older suite would have recorded them."""
    out = []
    for result in results:
        config = copy.deepcopy(result.config)
        edit(config)
        out.append(result.model_copy(update={"config": config, "config_hash": stable_hash(config)}))
    return out


def without_init(config: dict[str, Any]) -> None:
    for dotted in INIT_FIELDS:
        _drop(config, dotted)


def submission(results: list[TaskResult], submitter: str = "Ada") -> Submission:
    return build_submission(results, submitter, date=dt.date(2025, 1, 2))


def board_with(tmp_path: Path, *subs: Submission) -> Path:
    board = tmp_path / "leaderboard"
    for sub in subs:
        write_submission(sub, board)
    registry_for(*subs).save(board / "fingerprints.yaml")
    return board


# -- fields added since: the one table ----------------------------------------------------


def test_the_table_holds_the_init_fields_with_their_old_behaviour() -> None:
    assert {(a.path, a.old) for a in ADDED_SINCE} == {(f, "torch") for f in INIT_FIELDS}


def test_a_record_without_init_resolves_to_the_old_default_and_its_own_hash() -> None:
    (result, *_) = edited(fake_results(), without_init)
    resolved = resolve_recorded(result.config)
    assert resolved.config.model.typed_options().init == "torch"
    assert resolved.config.embedding.typed_options().init == "torch"
    assert set(resolved.applied) == set(INIT_FIELDS) and resolved.unknown == ()
    assert recorded_hash(resolved) == result.config_hash
    # today's defaults would train another thing: the reference init
    assert tiny_config().model.typed_options().init == "reference"


def test_validate_gives_no_warning_for_a_record_the_table_completes(tmp_path: Path) -> None:
    sub = submission(edited(fake_results(), without_init))
    report = validate(board_with(tmp_path, sub))
    assert report.problems == []
    assert [w.code for w in report.warnings] == ["unverified"]


# -- stale ----------------------------------------------------------------------------------


def test_a_record_missing_a_field_the_table_does_not_know_is_stale(tmp_path: Path) -> None:
    sub = submission(edited(fake_results(), lambda c: _drop(c, "train.sparse_lr")))
    board = board_with(tmp_path, sub)
    path = board / "submissions" / sub.filename()
    records = Verifications()
    records.add(path.name, _verification(dt.date(2025, 1, 3), sub))
    records.save(board / "verifications.yaml")
    report = validate(board)
    assert report.problems == []
    (stale,) = [w for w in report.warnings if w.code == STALE]
    assert "train.sparse_lr" in stale.message
    assert report.status(path) == "stale"  # verified once, but no longer re-runnable
    assert main(["leaderboard", "render", "--leaderboard-dir", str(board)]) == 0
    page = (board / INDEX).read_text()
    assert 'class="stale"' in page and 'class="verified"' not in page
    readme = (board / "README.md").read_text()
    assert "| stale " in readme


def test_without_its_table_entry_an_old_record_reads_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sub = submission(edited(fake_results(), without_init))
    monkeypatch.setattr(history, "ADDED_SINCE", ())
    report = validate(board_with(tmp_path, sub))
    (stale,) = [w for w in report.warnings if w.code == STALE]
    assert "embedding.options.init" in stale.message


def _verification(date: dt.date, sub: Submission, commit: str = "0" * 40) -> Verification:
    """A bit-identical re-run of seed 1 of ``sub``, bound to its content and figures."""
    (run,) = [r for r in sub.seeds if r.seed == 1]
    return Verification(
        content_hash=sub.content_hash(),
        figures=bound_figures(sub, 1, run.metrics),
        seed=1,
        date=date,
        device="cpu",
        machine="x86_64",
        threads=1,
        suite_commit=commit,
        torch="2.13.0+cpu",
        rule="bit-identical",
        max_abs_difference=0.0,
    )


def test_a_verification_older_than_a_result_change_is_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sub = make_board_entry()
    board = board_with(tmp_path, sub)
    records = Verifications()
    records.add(sub.filename(), _verification(dt.date(2025, 1, 3), sub))
    records.save(board / "verifications.yaml")
    assert validate(board).status(board / "submissions" / sub.filename()) == "verified"
    change = ResultChange("ffffffffffff", dt.date(2025, 2, 1), "a kernel fix")
    monkeypatch.setattr(history, "RESULT_CHANGES", (change,))
    report = validate(board)
    assert report.status(board / "submissions" / sub.filename()) == "stale"
    assert any("a kernel fix" in w.message for w in report.warnings if w.code == STALE)
    # a re-run after the change makes it verified again
    records.add(sub.filename(), _verification(dt.date(2025, 2, 2), sub))
    records.save(board / "verifications.yaml")
    assert validate(board).status(board / "submissions" / sub.filename()) == "verified"


def make_board_entry(rows: int | None = None, fingerprint: str = "ab" * 32) -> Submission:
    def set_rows(config: dict[str, Any]) -> None:
        if rows is not None:
            config["dataset"]["options"]["train_rows"] = rows

    results = [r.model_copy(update={"data_fingerprint": fingerprint}) for r in fake_results()]
    return submission(edited(results, set_rows))


# -- boards keyed by what they compare ------------------------------------------------------


def test_boards_on_different_rows_get_different_keys_and_titles() -> None:
    small = make_board_entry(rows=100_000, fingerprint="5b" * 32)
    large = make_board_entry(rows=400_000, fingerprint="54" * 32)
    boards = groups([Item(s.filename(), s) for s in (small, large)])
    assert len({g.key for g in boards}) == 2
    text = render_markdown([Item(s.filename(), s) for s in (small, large)])
    titles = [line for line in text.splitlines() if line.startswith("## ")]
    assert titles == [  # boards in key order: fingerprint 5454... before 5b5b...
        "## criteo-synth · 400k train rows · accuracy · budget 1",
        "## criteo-synth · 100k train rows · accuracy · budget 1",
    ]


def test_boards_with_the_same_rows_on_other_data_name_their_fingerprint() -> None:
    one = make_board_entry(rows=4000, fingerprint="aa" * 32)
    two = make_board_entry(rows=4000, fingerprint="bb" * 32)
    html = render_html([Item(s.filename(), s) for s in (one, two)])
    titles = re.findall(r"<h2>(.*?)</h2>", html)
    assert len(set(titles)) == 2
    assert all("data " in t for t in titles)


def test_export_has_the_rows_and_fingerprint_of_each_entry(tmp_path: Path) -> None:
    small = make_board_entry(rows=100_000, fingerprint="5b" * 32)
    large = make_board_entry(rows=400_000, fingerprint="54" * 32)
    board = board_with(tmp_path, small, large)
    out = tmp_path / "tables"
    argv = ["export", "leaderboard", "--submissions", str(board / "submissions")]
    assert main([*argv, "--out", str(out)]) == 0
    numeric = pd.read_csv(out / "leaderboard.csv", dtype={"data_fingerprint": str})
    assert sorted(numeric["train_rows"]) == [100_000, 400_000]
    assert set(numeric["data_fingerprint"]) == {"5b" * 6, "54" * 6}


# -- the page: config and record per entry, CI bars, no chart for one entry ----------------


class _Page(HTMLParser):
    """Ids of <details> blocks with their <pre> text, and every link target."""

    def __init__(self) -> None:
        super().__init__()
        self.details: dict[str, str] = {}
        self.links: list[str] = []
        self.svgs: list[str] = []
        self.json = ""
        self._open: str | None = None
        self._in_pre = self._in_json = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "details":
            self._open = a["id"] or ""
            self.details[self._open] = ""
        elif tag == "pre":
            self._in_pre = True
        elif tag == "a":
            self.links.append(a["href"] or "")
        elif tag == "svg":
            self.svgs.append(a["id"] or "")
        elif tag == "script" and a.get("id") == "leaderboard-data":
            self._in_json = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "pre":
            self._in_pre = False
        elif tag == "script":
            self._in_json = False

    def handle_data(self, data: str) -> None:
        if self._in_pre and self._open:
            self.details[self._open] += data
        if self._in_json:
            self.json += data


def test_page_links_each_entry_to_its_config_and_record_and_draws_ci_bars() -> None:
    subs = [
        make_board_entry(rows=4000),
        submission(
            [
                r.model_copy(update={"metrics": {**r.metrics, "embedding_bytes": 9e5}})
                for r in fake_results(embedding="hash")
            ]
        ),
        make_board_entry(rows=100_000, fingerprint="cd" * 32),  # alone on its board
    ]
    items = [Item(s.filename(), s) for s in subs]
    page = _Page()
    page.feed(render_html(items))
    for item in items:
        stem = Path(item.file).stem
        config = page.details[f"config-{stem}"]
        assert yaml.safe_load(config) == item.sub.config
        record = yaml.safe_load(page.details[f"record-{stem}"])
        assert [s["seed"] for s in record["seeds"]] == [1, 2, 3]
        assert f"submissions/{item.file}" in page.links
    readme = render_markdown(items)
    for item in items:
        stem = Path(item.file).stem
        assert f"]({INDEX}#config-{stem})" in readme and f"]({INDEX}#record-{stem})" in readme
    data = json.loads(page.json)
    (chart,) = data["charts"]  # the one-entry board gets none
    assert len(page.svgs) == 1 and page.svgs[0] == f"chart-{chart['id']}"
    for point in chart["points"]:
        (item,) = [i for i in items[:2] if f"{i.sub.model} + {i.sub.embedding}" == point["label"]]
        ci = mean_ci(item.values("test_auc"), LEVEL)  # the board's level, 90%
        assert (point["ci_low"], point["ci_high"]) == pytest.approx((ci.low, ci.high))
        assert point["ci_low"] < point["quality"] < point["ci_high"]


# -- the shipped board ----------------------------------------------------------------------


def test_the_shipped_board_validates_without_a_warning() -> None:
    report = validate(REPO_BOARD)
    assert report.problems == []
    assert report.warnings == []
    assert report.submissions, "the repository ships example submissions"
    assert {report.status(p) for p, _ in report.submissions} == {"verified"}


# -- verify re-runs exactly what an old record ran ------------------------------------------


@pytest.fixture(scope="module")
def old_record_files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Three real tiny CPU runs with the init the suite had before ``init`` existed
    (``torch``), written as that suite recorded them: without the ``init`` fields."""
    import torch

    from suite.runs.single import execute

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("old-seeds")
    files = []
    for seed in (1, 2, 3):
        overrides = [
            f"seed={seed}",
            f"dataset.cache_dir={root / 'cache'}",
            f"tracking.results_dir={root / 'runs'}",
            "model.options.init=torch",
            "embedding.options.init=torch",
        ]
        path = root / f"seed{seed}.json"
        result = execute(tiny_config(overrides=overrides), out=path)
        (old,) = edited([result], without_init)
        path.write_text(old.model_dump_json(), encoding="utf-8")
        files.append(path)
    return files


def test_verify_reruns_a_record_without_init_with_the_old_init(
    tmp_path: Path, old_record_files: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    board = tmp_path / "leaderboard"
    argv = ["submit", "--results", *map(str, old_record_files), "--submitter", "Ada"]
    assert main([*argv, "--leaderboard-dir", str(board)]) == 0
    argv = ["leaderboard", "fingerprints", "--update", "--only-used"]
    assert main([*argv, "--leaderboard-dir", str(board)]) == 0
    (path,) = (board / "submissions").glob("*.json")
    assert "init" not in json.loads(path.read_text())["config"]["model"]["options"]
    capsys.readouterr()
    assert main(["leaderboard", "verify", str(path), "--no-tracking", "--record"]) == 0
    out = capsys.readouterr().out
    assert "model.options.init is not recorded" in out and "re-running with 'torch'" in out
    assert "verified: seed 1 reproduces the recorded metrics (bit-identical)" in out
    assert "resolves the config to hash" not in out  # the re-run is the recorded config
    report = validate(board)
    assert report.ok and report.warnings == []
    assert report.status(path) == "verified"
