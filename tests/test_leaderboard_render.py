"""Rendering: deterministic, escaped, and the repository's leaderboard is what its
submission files render to."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from suite.cli import main
from suite.leaderboard.render import (
    INDEX,
    README,
    SCRIPT,
    STYLE,
    Item,
    board_rows,
    csp_hash,
    format_p,
    groups,
    json_for_script,
    md_text,
    render_html,
    render_markdown,
    row_cells,
    safe_url,
    write_leaderboard,
)
from suite.leaderboard.submit import write_submission
from tests.test_leaderboard_validate import make_submission, registry_for

REPO_BOARD = Path(__file__).resolve().parents[1] / "leaderboard"
HOSTILE = '<script>window.__pwned=1;document.title="pwned"</script>'
HOSTILE_NOTES = (
    '</script><img src=x onerror="window.__pwned=2"> | `code` [x](javascript:1)\u2028end'
)


def sample_items() -> list[Item]:
    """Three entries on one board (different memory and AUC, all in budget 1: more than
    half the full tables' bytes), one on another dataset."""
    subs = [
        make_submission("Ada", embedding="full", auc=0.74, memory=6_000_000.0),
        make_submission(
            HOSTILE, embedding="hash", auc=0.72, memory=3_200_000.0, notes=HOSTILE_NOTES
        ),
        make_submission(
            "Grace", embedding="qr", auc=0.73, memory=4_500_000.0, paper="https://example.org/qr"
        ),
        make_submission("Lin", dataset="avazu-synth", auc=0.70, fingerprint="cd" * 32),
    ]
    return [Item(s.filename(), s) for s in subs]


def test_render_is_deterministic_and_order_independent() -> None:
    items = sample_items()
    shuffled = items[::-1]
    assert render_markdown(items) == render_markdown(shuffled)
    assert render_html(items) == render_html(shuffled)


def test_boards_are_ranked_by_the_primary_metric() -> None:
    boards = groups(sample_items())
    assert [(g.dataset, g.task) for g in boards] == [
        ("avazu-synth", "accuracy"),
        ("criteo-synth", "accuracy"),
    ]
    criteo = boards[1]
    assert criteo.primary == "test_auc"
    assert [i.sub.embedding for i in criteo.items] == ["full", "qr", "hash"]
    assert criteo.metrics[0] == "test_auc"


def test_markdown_tables_escape_untrusted_text() -> None:
    text = render_markdown(sample_items())
    assert "## criteo-synth · 4k train rows · accuracy" in text
    assert "<script>" not in text and "<img" not in text
    assert '&lt;script&gt;window.\\_\\_pwned=1;document.title="pwned"&lt;/script&gt;' in text
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    # every table row has the same number of unescaped cell separators as its header
    for line in rows:
        cells = re.split(r"(?<!\\)\|", line)
        assert len(cells) == len(re.split(r"(?<!\\)\|", rows[0])), line
    assert "[paper](https://example.org/qr)" in text
    assert "javascript" not in text.replace("\\(javascript:1\\)", "")
    assert md_text("a\nb | c") == "a b \\| c"


def test_html_escapes_everything_and_embeds_data_safely() -> None:
    page = render_html(sample_items())
    assert "<script>window" not in page
    assert "<img" not in page
    assert 'onerror="' not in page
    assert "&lt;script&gt;window.__pwned=1;document.title=&quot;pwned&quot;&lt;/script&gt;" in page
    # exactly the two script elements we put there
    assert page.count("<script") == 2
    assert page.count("</script>") == 2
    (data,) = re.findall(
        r'<script type="application/json" id="leaderboard-data">(.*?)</script>', page, re.S
    )
    assert "<" not in data and ">" not in data and "&" not in data
    assert "\u2028" not in page and "\u2029" not in page
    parsed = json.loads(data)
    submitters = {p["submitter"] for c in parsed["charts"] for p in c["points"]}
    assert HOSTILE in submitters
    # the policy allows only our own inline script and style
    assert f"script-src {csp_hash(SCRIPT)}".replace("'", "&#x27;") in page
    assert f"style-src {csp_hash(STYLE)}".replace("'", "&#x27;") in page
    assert f"<script>{SCRIPT}</script>" in page
    # no external asset is referenced
    assert not re.search(
        r'(src|href)="(https?:)?//', page.replace('href="https://example.org/qr"', "")
    )
    assert "innerHTML" not in SCRIPT and "insertAdjacentHTML" not in SCRIPT
    assert "eval(" not in SCRIPT and "document.write" not in SCRIPT


def test_json_for_script_escapes_markup_and_line_separators() -> None:
    text = json_for_script({"a": "</script><!-- & \u2028\u2029"})
    assert text == '{"a": "\\u003c/script\\u003e\\u003c!-- \\u0026 \\u2028\\u2029"}'
    assert json.loads(text) == {"a": "</script><!-- & \u2028\u2029"}


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("https://example.org/p?a=1", True),
        ("http://example.org", True),
        ("javascript:alert(1)", False),
        ("data:text/html,<script>", False),
        ("https://exa mple.org", False),
        ('https://example.org/"onmouseover="x', False),
        ("//example.org", False),
    ],
)
def test_only_plain_http_links(url: str, ok: bool) -> None:
    assert (safe_url(url) == url) is ok


def test_render_command_and_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    board = tmp_path / "leaderboard"
    items = sample_items()
    for item in items:
        write_submission(item.sub, board)
    registry_for(*(i.sub for i in items)).save(board / "fingerprints.yaml")
    args = ["leaderboard", "render", "--leaderboard-dir", str(board)]
    assert main([*args, "--check"]) == 1
    assert main(args) == 0
    assert main([*args, "--check"]) == 0
    assert (board / README).read_text() == render_markdown(items)
    assert (board / INDEX).read_text() == render_html(items)
    # an invalid submission stops the render
    bad = board / "submissions" / items[0].file
    bad.write_text(bad.read_text().replace('"Ada"', '"Eve"'))
    capsys.readouterr()
    assert main(args) == 1
    assert "(file name): does not match the content" in capsys.readouterr().out


def _repo_items() -> list[Item]:
    """The repository's entries as `suite leaderboard render` reads them: status, stale
    reasons and verification records included."""
    from suite.commands.leaderboard import load_valid

    report, items = load_valid(REPO_BOARD)
    assert report.ok, [str(p) for p in report.problems]
    return items


def test_repository_leaderboard_is_rendered_from_its_submissions(tmp_path: Path) -> None:
    items = _repo_items()
    assert items, "the repository should hold at least one example submission"
    write_leaderboard(items, tmp_path)
    for name in (README, INDEX):
        rendered = (tmp_path / name).read_text()
        assert rendered == (REPO_BOARD / name).read_text(), (
            f"leaderboard/{name} is stale: run `suite leaderboard render`"
        )


def test_repository_submissions_validate_and_use_registered_data(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["leaderboard", "validate", "--leaderboard-dir", str(REPO_BOARD)])
    assert code == 0, capsys.readouterr().out
    subs = [i.sub for i in _repo_items()]
    assert any(s.dataset == "criteo-synth" and s.environment.device == "cpu" for s in subs)
    assert all(len(s.seeds) >= 3 for s in subs)


def gfm_tables(text: str) -> list[list[list[str]]]:
    """Every table of a Markdown text as parsed by markdown-it-py with GFM tables: a list
    of rows (the header first), each the list of its cells' inline source."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    tables: list[list[list[str]]] = []
    row: list[str] | None = None
    for token in tokens:
        if token.type == "table_open":
            tables.append([])
        elif token.type == "tr_open":
            row = []
        elif token.type == "inline" and row is not None:
            row.append(token.content)
        elif token.type == "tr_close" and row is not None:
            tables[-1].append(row)
            row = None
    return tables


def test_markdown_tables_parse_with_every_cell_under_gfm() -> None:
    """A ``|`` in a paper URL (valid in a URL), in notes or in a name never adds or drops a
    cell: each row has the header's cells and the link still points where it should."""
    piped = make_submission(
        "Pipe | Co",
        embedding="hash",
        auc=0.72,
        memory=3_100_000.0,
        paper="https://example.org/a|b?q=(1)",
    )
    items = [*sample_items(), Item(piped.filename(), piped)]
    text = render_markdown(items)
    tables = gfm_tables(text)
    assert len(tables) == len(groups(items)) == 2
    for table in tables:
        header = table[0]
        assert "Test AUC" in header and "Submitter" in header
        assert all(len(row) == len(header) for row in table), table
    criteo = tables[1]
    submitters = [row[criteo[0].index("Submitter")] for row in criteo[1:]]
    assert "Pipe | Co" in submitters  # the escaped pipe is text inside its cell
    from markdown_it import MarkdownIt

    page = MarkdownIt("commonmark").enable("table").render(text)
    assert 'href="https://example.org/a%7Cb?q=%281%29"' in page


def test_render_shows_labels_units_and_fewer_columns() -> None:
    (avazu, criteo) = groups(sample_items())
    heads = [column.head for column, _ in row_cells(criteo, 1, criteo.items[0])]
    assert "Test AUC" in heads and "Embedding memory" in heads and "Test log loss" in heads
    assert "Training speed (samples/s)" in heads and "Forward FLOPs (per example)" in heads
    assert not any("_" in h for h in heads)  # no raw metric names
    table = gfm_tables(render_markdown(sample_items()))[1]
    assert len(table[0]) <= 12 < len(heads)  # the README shows the default columns only
    assert "Training speed (samples/s)" not in table[0]


def test_intervals_show_significant_digits() -> None:
    from suite.leaderboard.board import metric_cell
    from suite.results import MetricSpec
    from suite.stats import Interval

    auc, rate = MetricSpec("test_auc", True, "AUC"), MetricSpec("r", True, "R", "samples/s")
    assert metric_cell(auc, Interval(0.711, 0.711 - 4e-5, 0.711 + 4e-5, 3)) == "0.711000 ± 0.000040"
    assert metric_cell(auc, Interval(0.7193, 0.7120, 0.7266, 3)) == "0.7193 ± 0.0073"
    assert metric_cell(auc, Interval(0.5, 0.5, 0.5, 3)) == "0.5000"
    assert metric_cell(rate, Interval(6735.0, 6210.0, 7260.0, 3)) == "6,735 ± 525"
    # a board entry whose seeds barely differ is not shown as "± 0.0000"
    sub = make_submission("Ada", auc=0.74)
    seeds = [
        run.model_copy(update={"metrics": {**run.metrics, "test_auc": 0.74 + 2e-5 * n}})
        for n, run in enumerate(sub.seeds)
    ]
    item = Item("x.json", sub.model_copy(update={"seeds": seeds}))
    (group,) = groups([item])
    text = dict((c.key, cell.text) for c, cell in row_cells(group, 1, item))["test_auc"]
    assert text == "0.740020 ± 0.000034", text  # the 90% half-width: t(0.95, 2) x 2e-5/sqrt(3)


def test_unverified_entries_never_rank_first_and_ties_are_marked() -> None:
    """A made-up but self-consistent entry with the best AUC shows below the verified ones,
    unranked; entries shown within 0.001 AUC of #1 (TOST, paired by seed) say tie, and
    those the seeds cannot place say undecided with the seeds they would need."""
    fake = make_submission("Mallory", embedding="qr", auc=0.99, memory=4_000_000.0)
    items = [Item(i.file, i.sub, verified=i.sub.submitter != "Lin") for i in sample_items()] + [
        Item(fake.filename(), fake)
    ]
    criteo = groups(items)[1]
    assert [i.sub.submitter for i in criteo.items][-1] == "Mallory"
    rows = {
        item.sub.submitter: {c.key: cell.text for c, cell in row}
        for item, row in zip(criteo.items, board_rows(criteo), strict=True)
    }
    assert rows["Ada"]["rank"] == "1" and rows["Ada"]["versus"] == "best"
    assert rows["Mallory"]["rank"] == "–" and rows["Mallory"]["status"] == "unverified"
    assert rows["Ada"]["status"] == "verified"
    assert rows["Mallory"]["versus"].startswith("better (p")  # better, but not ranked above
    # the three sample entries differ by 0.01 AUC at the same seed spread: distinguishable
    assert rows["Grace"]["versus"].startswith("worse (p")
    close = make_submission("Close", embedding="hash", auc=0.7395, memory=3_300_000.0)
    items.append(Item(close.filename(), close, verified=True))
    criteo = groups(items)[1]
    rows = {
        item.sub.submitter: {c.key: cell.text for c, cell in row}
        for item, row in zip(criteo.items, board_rows(criteo), strict=True)
    }
    assert rows["Close"]["versus"].startswith(("tie (p", "undecided (needs n≈"))
    table = gfm_tables(render_markdown(items))[1]
    top = dict(zip(table[0], table[1], strict=True))
    assert (top["\\#"], top["Submitter"], top["Status"]) == ("1", "Ada", "verified")
    last = dict(zip(table[0], table[-1], strict=True))
    assert (last["\\#"], last["Submitter"], last["Status"]) == ("–", "Mallory", "unverified")


@pytest.mark.parametrize(
    ("p", "text"),
    [
        (0.0, "p<0.001"),
        (0.00099, "p<0.001"),
        (0.001, "p=0.001"),
        (0.0321, "p=0.032"),
        (0.999, "p=0.999"),
        (0.9996, "p>0.999"),
        (float("nan"), "p n/a"),
    ],
)
def test_p_values_read_as_relations(p: float, text: str) -> None:
    assert format_p(p) == text


def test_vs_first_column_never_writes_p_equals_less_than() -> None:
    """The "vs #1" cells say ``worse (p<0.001)``, never ``p=<0.001``, in both renderings."""
    fake = make_submission("Mallory", embedding="qr", auc=0.99, memory=4_000_000.0)
    items = [*sample_items(), Item(fake.filename(), fake)]
    criteo = groups(items)[1]
    texts = [dict((c.key, cell.text) for c, cell in row)["versus"] for row in board_rows(criteo)]
    assert texts[0] == "best"
    pattern = re.compile(r"^(worse|better) \(p(<0\.001|=0\.\d{3}|>0\.999)\)$")
    assert all(pattern.match(t) for t in texts[1:]), texts
    assert any("p<0.001" in t for t in texts), texts  # 0.01 AUC apart at the same spread
    for page in (render_markdown(items), render_html(items)):
        assert "p=&lt;" not in page and "p=<" not in page and "p&lt;0.001" in page
