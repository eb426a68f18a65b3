"""Submitter names cannot dodge the duplicate check, and duplicates are settled by content.

Issue 33, item 2: appending an invisible character (a tag, a variation selector, a Khmer
inherent vowel, a Hangul filler, the Braille blank) to a submitter made a copy of an entry
pass as new, and outside a git checkout the tie-break by file name could blame the entry
that was there first. These tests run the real ``suite leaderboard validate`` on a copy of
the repository's leaderboard (no git checkout around it).
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pytest

from suite.cli import main
from suite.leaderboard.schema import Submission, is_invisible, name_key, normalize_name
from suite.leaderboard.validate import board_order, check_duplicates, committed_files

REPO = Path(__file__).resolve().parents[1]
# the characters the hostile tester appended (commit 0650cc1); each made a 4th valid entry
HIDDEN = ["\U000e0041", "\ufe0f", "\u17b4", "\u1160", "\u115f", "\u2800"]
LOOKALIKES = [
    "ｒｅｃｓｕｉｔｅ ｍａｉｎｔａｉｎｅｒｓ",  # fullwidth letters
    "𝐫𝐞𝐜𝐬𝐮𝐢𝐭𝐞 𝐦𝐚𝐢𝐧𝐭𝐚𝐢𝐧𝐞𝐫𝐬",  # mathematical bold
    "RECSUITE MAINTAINERS",
    "recsuite \u3000 maintainers",  # ideographic space in a run of spaces
    "re\u200dcsuite\u3164 maintainers\U000e007f",  # joiner, Hangul filler, cancel tag
]


@pytest.fixture
def board(tmp_path: Path) -> Path:
    """A copy of the repository's leaderboard outside any git checkout."""
    root = tmp_path / "leaderboard"
    shutil.copytree(REPO / "leaderboard", root, ignore=shutil.ignore_patterns("*.html"))
    assert committed_files(root / "submissions") is None
    keep_rerun_entries(root)
    return root


def keep_rerun_entries(board: Path) -> None:
    """Drop the entries regenerated from committed reproduction runs (their runs live
    beside the repository's leaderboard, not this copy), and their records."""
    from suite.leaderboard.verified import Regeneration, Verifications

    records = Verifications.load(board / "verifications.yaml")
    for name, entries in list(records.data.verified.items()):
        if any(isinstance(r, Regeneration) for r in entries):
            (board / "submissions" / name).unlink(missing_ok=True)
            del records.data.verified[name]
    records.save(board / "verifications.yaml")


def board_entry(board: Path) -> Submission:
    """The board's full-embedding entry (the one the hostile tester copied)."""
    (path,) = (board / "submissions").glob("*-dlrm-full-recsuite-maintainers-*.json")
    return Submission.model_validate_json(path.read_text())


def add(board: Path, sub: Submission, name: str | None = None) -> Path:
    """Write ``sub`` under its own file name (or ``name``), as ``suite submit`` would."""
    path = board / "submissions" / (name or sub.filename())
    path.write_text(sub.to_file_text())
    return path


def validate_cli(board: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    """Exit code and stdout lines of ``suite leaderboard validate`` on ``board``."""
    code = main(["leaderboard", "validate", "--leaderboard-dir", str(board)])
    return code, capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("char", HIDDEN, ids=lambda c: f"U+{ord(c):04X}")
def test_an_invisible_character_appended_to_a_submitter_is_refused(
    board: Path, capsys: pytest.CaptureFixture[str], char: str
) -> None:
    first = board_entry(board)
    evader = first.model_copy(update={"submitter": first.submitter + char})
    path = add(board, evader)
    code, out = validate_cli(board, capsys)
    assert code == 1
    assert out == [
        f"submissions/{path.name}: submitter: invisible character U+{ord(char):04X} is not allowed"
    ]
    # the name it normalizes to is the board entry's, so were it let through it would be
    # flagged as a duplicate
    assert is_invisible(char)
    assert name_key(evader.submitter) == name_key(first.submitter)
    assert normalize_name(evader.submitter) == first.submitter
    (dupe,) = check_duplicates([("first.json", first), ("evader.json", evader)])
    assert (dupe.file, dupe.field) == ("evader.json", "config_hash")
    assert "duplicates first.json" in dupe.message


@pytest.mark.parametrize("field", ["notes", "device_name"])
def test_invisible_characters_are_refused_in_other_free_text(
    board: Path, capsys: pytest.CaptureFixture[str], field: str
) -> None:
    first = board_entry(board)
    if field == "notes":
        changed = first.model_copy(update={"notes": "see\U000e0020 the paper"})
        where = "notes"
    else:
        env = first.environment.model_copy(update={"device_name": "x86_64\u2800"})
        changed = first.model_copy(update={"environment": env})
        where = "environment.device_name"
    (board / "submissions").joinpath(first.filename()).unlink()
    path = add(board, changed)
    code, out = validate_cli(board, capsys)
    assert code == 1
    (line,) = out
    assert line.startswith(f"submissions/{path.name}: {where}: invisible character U+")


@pytest.mark.parametrize("spelling", LOOKALIKES)
def test_lookalike_spellings_are_one_name(spelling: str) -> None:
    assert name_key(spelling) == name_key("recsuite maintainers")
    assert name_key("STRASSE") == name_key("Straße")
    assert name_key("Ada") != name_key("Ida")


@pytest.mark.parametrize(
    "spelling", ["ｒｅｃｓｕｉｔｅ ｍａｉｎｔａｉｎｅｒｓ", "𝐫𝐞𝐜𝐬𝐮𝐢𝐭𝐞 𝐦𝐚𝐢𝐧𝐭𝐚𝐢𝐧𝐞𝐫𝐬"]
)
def test_nfkc_lookalikes_are_duplicates(spelling: str) -> None:
    first = Submission.model_validate_json(
        next(
            (REPO / "leaderboard" / "submissions").glob("*-dlrm-full-recsuite-maintainers-*.json")
        ).read_text()
    )
    twin = first.model_copy(update={"submitter": spelling, "date": dt.date(2030, 1, 1)})
    (dupe,) = check_duplicates(board_order([("twin", twin), ("first", first)], REPO / "x"))
    assert dupe.file == "twin"
    assert "duplicates first" in dupe.message


@pytest.mark.parametrize("spelling", ["RECSUITE MAINTAINERS", "Recsuite   Maintainers"])
def test_a_valid_respelling_is_flagged_by_the_cli(
    board: Path, capsys: pytest.CaptureFixture[str], spelling: str
) -> None:
    """Case and runs of spaces pass the schema but still name the same submitter."""
    first = board_entry(board)
    twin = first.model_copy(update={"submitter": spelling, "date": first.date.replace(year=2030)})
    path = add(board, twin)
    code, out = validate_cli(board, capsys)
    assert code == 1
    assert out == [
        f"submissions/{path.name}: config_hash: duplicates submissions/{first.filename()}, which "
        "is already on the board (same config hash, data fingerprint, task and submitter); "
        "remove this file"
    ]


def test_equal_dates_outside_git_keep_the_first_by_content_whatever_the_file_names(
    board: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = board_entry(board)
    twin = first.model_copy(update={"submitter": first.submitter.upper()})
    assert twin.date == first.date
    kept, blamed = sorted([first, twin], key=lambda s: s.content_hash())
    add(board, twin)
    code, out = validate_cli(board, capsys)
    assert code == 1
    assert len(out) == 1
    assert out[0].startswith(
        f"submissions/{blamed.filename()}: config_hash: duplicates submissions/{kept.filename()}"
    )
    # swap the two files' names, so their sort order by name is reversed: the same content
    # is blamed (each file is also told its name does not match its content)
    names = {s.content_hash(): s.filename() for s in (kept, blamed)}
    for sub in (kept, blamed):
        (board / "submissions" / sub.filename()).unlink()
    add(board, kept, names[blamed.content_hash()])
    add(board, blamed, names[kept.content_hash()])
    code, out = validate_cli(board, capsys)
    assert code == 1
    dupes = [line for line in out if ": config_hash: duplicates " in line]
    assert dupes == [
        f"submissions/{kept.filename()}: config_hash: duplicates submissions/"
        f"{blamed.filename()}, which is already on the board (same config hash, data "
        "fingerprint, task and submitter); remove this file"
    ]
    assert sum(": (file name): " in line for line in out) == 2


def test_board_order_ignores_file_names() -> None:
    first = Submission.model_validate_json(
        next(
            (REPO / "leaderboard" / "submissions").glob("*-dlrm-full-recsuite-maintainers-*.json")
        ).read_text()
    )
    twin = first.model_copy(update={"submitter": "Someone Else"})
    order = [s for _, s in board_order([("a.json", first), ("b.json", twin)], REPO / "none")]
    swapped = [s for _, s in board_order([("b.json", first), ("a.json", twin)], REPO / "none")]
    assert order == swapped == sorted([first, twin], key=lambda s: s.content_hash())
    earlier = twin.model_copy(update={"date": first.date - dt.timedelta(days=1)})
    assert [s for _, s in board_order([("a.json", first), ("z.json", earlier)], REPO / "n")] == [
        earlier,
        first,
    ]
