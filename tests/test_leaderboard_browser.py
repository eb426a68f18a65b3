"""The rendered page in a real headless Chromium: sorting, filtering, the chart, and a
hostile submitter name that must show as text and run nothing.

Needs Debian's ``chromium`` and ``chromium-driver`` packages and the ``selenium`` Python
package; skipped with the reason when one is missing. No browser is ever downloaded.
"""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from suite.leaderboard.render import chart_data, groups, render_html
from tests.test_leaderboard_render import HOSTILE, HOSTILE_NOTES, sample_items

# the boards' ids: what they compare (dataset, protocol, task, data fingerprint)
AVAZU, CRITEO = (g.gid for g in groups(sample_items()))

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path(shutil.which("chromedriver") or "/usr/bin/chromedriver")

pytestmark = [
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="/usr/bin/chromium is absent (apt-get install -y chromium chromium-driver)",
    ),
    pytest.mark.skipif(
        not CHROMEDRIVER.exists(),
        reason="chromedriver is absent (apt-get install -y chromium-driver)",
    ),
]


REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "leaderboard" / "index.html"
SCREENSHOT = REPO / "leaderboard" / "screenshot.png"


def start_chromium(profile: Path, width: int = 1400, height: int = 1000) -> Any:
    """Debian's headless Chromium under selenium, offline (Selenium Manager fetches
    nothing), its profile in ``profile``."""
    import os

    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"
    options = Options()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--hide-scrollbars",
        f"--window-size={width},{height}",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(30)
    return driver


@pytest.fixture
def browser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    monkeypatch.setenv("SE_OFFLINE", "true")  # Selenium Manager must not fetch anything
    driver = start_chromium(tmp_path / "chromium-profile")
    try:
        yield driver
    finally:
        driver.quit()


def _column(driver: Any, section: str, header: str) -> list[str]:
    """The text content of one column of a board's table, in display order."""
    return driver.execute_script(
        """
        const table = document.querySelector('#' + arguments[0] + ' table');
        const heads = Array.from(table.tHead.rows[0].cells).map(c => c.textContent.trim());
        const i = heads.findIndex(h => h.startsWith(arguments[1]));
        return Array.from(table.tBodies[0].rows).filter(r => !r.hidden)
          .map(r => r.cells[i].textContent);
        """,
        section,
        header,
    )


def _click_header(driver: Any, section: str, header: str) -> None:
    from selenium.webdriver.common.by import By

    for button in driver.find_elements(By.CSS_SELECTOR, f"#{section} thead th button"):
        if button.text.startswith(header):
            button.click()
            return
    raise AssertionError(f"no header {header!r} in {section}")


def _headers(driver: Any, section: str) -> list[str]:
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('#' + arguments[0] + ' thead th'))"
        ".map(th => th.textContent.trim())",
        section,
    )


def _sort_marks(driver: Any, section: str) -> dict[str, tuple[str, str]]:
    """Each sorted column's header -> (aria-sort, the arrow the page draws after it)."""
    marks = driver.execute_script(
        """
        return Array.from(document.querySelectorAll('#' + arguments[0] + ' thead th'))
          .filter(th => th.getAttribute('aria-sort') !== 'none')
          .map(th => [th.textContent.trim(), th.getAttribute('aria-sort'),
                      getComputedStyle(th.querySelector('button'), '::after').content]);
        """,
        section,
    )
    return {head: (sort, content.strip('" ')) for head, sort, content in marks}


def _circles(driver: Any, chart: str) -> int:
    return driver.execute_script(
        "return document.querySelectorAll('#chart-' + arguments[0] + ' circle').length", chart
    )


def _error_bars(driver: Any, chart: str) -> int:
    """The drawn CI bars (each a vertical line with two caps) that span some height."""
    heights = driver.execute_script(
        "return Array.from(document.querySelectorAll('#chart-' + arguments[0] + "
        "' line.errorbar')).map(l => Math.abs(l.y2.baseVal.value - l.y1.baseVal.value))",
        chart,
    )
    assert len(heights) % 3 == 0
    return sum(h > 0 for h in heights)


def test_page_sorts_filters_charts_and_runs_no_injected_script(
    browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    page = tmp_path / "leaderboard" / "index.html"
    page.parent.mkdir()
    page.write_text(render_html(sample_items()), encoding="utf-8")
    browser.get(page.as_uri())

    # boards: AVAZU = avazu-synth (one entry), CRITEO = criteo-synth (three)
    assert browser.title == "recsuite leaderboard"
    assert browser.execute_script("return window.__pwned === undefined")
    assert browser.execute_script("return document.querySelectorAll('img').length") == 0
    submitters = _column(browser, CRITEO, "Submitter")
    assert HOSTILE in submitters  # shown as the literal text
    assert HOSTILE_NOTES in _column(browser, CRITEO, "Notes")
    titles = browser.execute_script(
        "return Array.from(document.querySelectorAll('#chart-' + arguments[0] + ' title'))"
        ".map(t => t.textContent)",
        CRITEO,
    )
    assert any(HOSTILE in t for t in titles)
    assert any("90% CI" in t for t in titles)
    assert _circles(browser, CRITEO) == 3
    assert _error_bars(browser, CRITEO) == 3
    # a one-entry board has nothing to compare: no chart
    assert (
        browser.execute_script("return document.getElementById('chart-' + arguments[0])", AVAZU)
        is None
    )

    # the board arrives ranked by Test AUC, best first, and its header says so
    assert _column(browser, CRITEO, "Embedding") == ["full", "qr", "hash"]
    assert _sort_marks(browser, CRITEO) == {"Test AUC": ("descending", "▼")}
    assert not any(arrow in h for h in _headers(browser, CRITEO) for arrow in "↑↓")
    # a click on the sorted column reverses it, and the arrow follows the order shown
    _click_header(browser, CRITEO, "Test AUC")
    assert _column(browser, CRITEO, "Embedding") == ["hash", "qr", "full"]
    assert _sort_marks(browser, CRITEO) == {"Test AUC": ("ascending", "▲")}
    _click_header(browser, CRITEO, "Test AUC")
    assert _column(browser, CRITEO, "Embedding") == ["full", "qr", "hash"]
    assert _sort_marks(browser, CRITEO) == {"Test AUC": ("descending", "▼")}
    # the first click on another metric puts its best first: least memory, lowest log loss
    _click_header(browser, CRITEO, "Embedding memory")
    assert _column(browser, CRITEO, "Embedding") == ["hash", "qr", "full"]
    assert _sort_marks(browser, CRITEO) == {"Embedding memory": ("ascending", "▲")}
    _click_header(browser, CRITEO, "Test log loss")
    assert _sort_marks(browser, CRITEO) == {"Test log loss": ("ascending", "▲")}
    losses = [float(v.split()[0]) for v in _column(browser, CRITEO, "Test log loss")]
    assert losses == sorted(losses)
    _click_header(browser, CRITEO, "Test AUC")  # from unsorted: best (highest) first
    assert _column(browser, CRITEO, "Embedding") == ["full", "qr", "hash"]
    assert _sort_marks(browser, CRITEO) == {"Test AUC": ("descending", "▼")}
    _click_header(browser, CRITEO, "Submitter")
    assert _column(browser, CRITEO, "Submitter") == [HOSTILE, "Ada", "Grace"]
    assert _sort_marks(browser, CRITEO) == {"Submitter": ("ascending", "▲")}

    # fewer columns by default; the rest behind "all columns"
    notes = browser.find_element(By.CSS_SELECTOR, f"#{CRITEO} thead th:last-child")
    assert not notes.is_displayed()
    browser.find_element(By.ID, "all-columns").click()
    assert notes.is_displayed()
    browser.find_element(By.ID, "all-columns").click()
    assert not notes.is_displayed()

    # filters: dataset, embedding method, free text
    criteo = browser.find_element(By.ID, CRITEO)
    avazu = browser.find_element(By.ID, AVAZU)
    Select(browser.find_element(By.ID, "filter-dataset")).select_by_value("avazu-synth")
    assert avazu.is_displayed() and not criteo.is_displayed()
    Select(browser.find_element(By.ID, "filter-dataset")).select_by_value("")
    Select(browser.find_element(By.ID, "filter-method")).select_by_value("qr")
    assert criteo.is_displayed() and not avazu.is_displayed()
    assert _column(browser, CRITEO, "Embedding") == ["qr"]
    assert _circles(browser, CRITEO) == 1
    assert _error_bars(browser, CRITEO) == 1
    Select(browser.find_element(By.ID, "filter-method")).select_by_value("")
    search = browser.find_element(By.ID, "filter-text")
    search.send_keys("GRACE")
    assert _column(browser, CRITEO, "Submitter") == ["Grace"]
    search.clear()
    search.send_keys("no such entry")
    assert browser.find_element(By.ID, "no-match").is_displayed()
    search.clear()
    search.send_keys(" ")
    assert _circles(browser, CRITEO) == 3

    # still nothing ran, and the page logged no errors (e.g. CSP violations)
    assert browser.title == "recsuite leaderboard"
    assert browser.execute_script("return window.__pwned === undefined")
    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []


def _entries(driver: Any) -> list[dict[str, Any]]:
    """Each entry row of every board: its json link, its config and record blocks (id,
    summary, text once opened), in page order."""
    return driver.execute_script(
        """
        return Array.from(document.querySelectorAll('section table tbody tr')).map(r => {
          const link = r.querySelector('a');
          const block = k => {
            const d = r.querySelector('details[id^="' + k + '-"]');
            return d && {id: d.id, summary: d.querySelector('summary').textContent,
                         text: d.querySelector('pre').textContent};
          };
          return {json: link && link.getAttribute('href'), config: block('config'),
                  record: block('record')};
        });
        """
    )


@pytest.mark.skipif(not SHIPPED.is_file(), reason="no rendered leaderboard/index.html")
def test_shipped_board_links_each_entrys_config_and_record_and_draws_its_cis(
    browser: Any,
) -> None:
    from selenium.webdriver.common.by import By

    browser.get(SHIPPED.as_uri())
    entries = _entries(browser)
    files = sorted(p.name for p in (SHIPPED.parent / "submissions").glob("*.json"))
    assert len(entries) == len(files) >= 2
    for entry in entries:
        assert entry["json"].endswith(".json") and entry["json"].split("/")[-1] in files
        assert entry["config"]["summary"] == "config" and entry["record"]["summary"] == "record"
        assert entry["config"]["text"].startswith("# config ")  # the full recorded config
        assert "train:" in entry["config"]["text"] and "dataset:" in entry["config"]["text"]
        assert "mlflow_parent_run_id:" in entry["record"]["text"]  # where its runs are
        assert "verifications:" in entry["record"]["text"]
    # one chart per board of two or more, each entry a point with its 90% CI bar
    charts = browser.find_elements(By.CSS_SELECTOR, "[id^='chart-']")
    assert charts
    for chart in charts:
        board = chart.get_attribute("id").removeprefix("chart-")
        assert _circles(browser, board) == _error_bars(browser, board) >= 2
    # a config link opens the entry's config in place
    first = entries[0]["config"]["id"]
    summary = browser.find_element(By.CSS_SELECTOR, f"#{first} summary")
    summary.click()
    assert browser.find_element(By.ID, first).get_attribute("open") is not None
    assert browser.find_element(By.CSS_SELECTOR, f"#{first} pre").is_displayed()
    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []


def _ticks(driver: Any, chart: str) -> tuple[list[str], list[str]]:
    """The x (memory) and y (quality) tick labels of a board's chart: the texts under the
    x axis and those right-aligned left of the y axis."""
    return driver.execute_script(
        """
        const svg = document.getElementById('chart-' + arguments[0]);
        const axis = svg.querySelector('line.axis').y1.baseVal.value;
        const texts = Array.from(svg.querySelectorAll(':scope > text'));
        const under = t => Math.abs(t.y.baseVal[0].value - axis - 14) < 1;
        return [texts.filter(t => t.getAttribute('text-anchor') === 'middle' && under(t)),
                texts.filter(t => t.getAttribute('text-anchor') === 'end')]
          .map(ts => ts.map(t => t.textContent));
        """,
        chart,
    )


def assert_nice_ticks(xs: list[str], ys: list[str], lows: list[float], highs: list[float]) -> None:
    """Round ticks: y labels 1, 2 or 5 x 10^k apart, each a multiple of that step written
    with the step's decimals, spanning every point and CI; x labels round sizes."""
    values = [float(y) for y in ys]
    assert len(values) >= 3, ys
    step = values[1] - values[0]
    exponent = math.floor(math.log10(step) + 1e-9)
    mantissa = round(step / 10**exponent, 6)
    assert mantissa in (1, 2, 5), ys
    places = max(0, -exponent)
    for n, (text, value) in enumerate(zip(ys, values, strict=True)):
        assert value == pytest.approx(values[0] + n * step, abs=step * 1e-6), ys
        assert value / step == pytest.approx(round(value / step), abs=1e-6), ys
        assert text == f"{value:.{places}f}", ys
    assert values[0] <= min(lows) and values[-1] >= max(highs), (ys, lows, highs)
    for text in xs:
        number, unit = text.split(" ")
        assert unit in ("B", "KiB", "MiB", "GiB") and re.fullmatch("[1-9]0*", number), xs


def test_chart_ticks_are_round_and_span_the_cis(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    items = sample_items()
    page = tmp_path / "index.html"
    page.write_text(render_html(items), encoding="utf-8")
    browser.get(page.as_uri())
    (chart,) = chart_data(groups(items))["charts"]  # type: ignore[misc]
    points = chart["points"]
    xs, ys = _ticks(browser, CRITEO)
    assert xs and ys
    assert_nice_ticks(xs, ys, [p["ci_low"] for p in points], [p["ci_high"] for p in points])
    # one entry left by a filter: its own CI, still on round ticks
    Select(browser.find_element(By.ID, "filter-method")).select_by_value("qr")
    (qr,) = (p for p in points if p["label"].endswith("qr"))
    xs, ys = _ticks(browser, CRITEO)
    assert_nice_ticks(xs, ys, [qr["ci_low"]], [qr["ci_high"]])
    if SHIPPED.is_file():
        browser.get(SHIPPED.as_uri())
        for board in chart_boards(browser):
            xs, ys = _ticks(browser, board)
            assert len(xs) >= 2
            assert_nice_ticks(xs, ys, *shipped_cis(browser, board))


def chart_boards(driver: Any) -> list[str]:
    from selenium.webdriver.common.by import By

    return [
        c.get_attribute("id").removeprefix("chart-")
        for c in driver.find_elements(By.CSS_SELECTOR, "[id^='chart-']")
    ]


def shipped_cis(driver: Any, board: str) -> tuple[list[float], list[float]]:
    """The CI ends of a board's points, from the page's own chart data."""
    points = driver.execute_script(
        "const d = JSON.parse(document.getElementById('leaderboard-data').textContent);"
        "return d.charts.find(c => c.id === arguments[0]).points",
        board,
    )
    return [p["ci_low"] for p in points], [p["ci_high"] for p in points]


def _open_blocks(driver: Any) -> list[str]:
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('details')).filter(d => d.open).map(d => d.id)"
    )


def _in_view(driver: Any, element_id: str) -> bool:
    return driver.execute_script(
        "const r = document.getElementById(arguments[0]).getBoundingClientRect();"
        "return r.top >= -1 && r.top < window.innerHeight",
        element_id,
    )


def test_a_fragment_opens_and_shows_its_block(browser: Any, tmp_path: Path) -> None:
    """``index.html#config-<entry>`` (the Markdown board's links) and ``#record-<entry>``
    open that block and scroll to it, on load and when the fragment changes, clearing a
    filter that hides its row."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    items = sample_items()
    page = tmp_path / "index.html"
    page.write_text(render_html(items), encoding="utf-8")
    criteo = next(g for g in groups(items) if g.gid == CRITEO)
    full, qr, hashed = (i.anchor for i in criteo.items)
    browser.set_window_size(1400, 500)  # short, so that showing a block takes a scroll
    browser.get(f"{page.as_uri()}#record-{hashed}")
    assert _open_blocks(browser) == [f"record-{hashed}"]
    assert _in_view(browser, f"record-{hashed}")
    assert browser.execute_script("return window.scrollY") > 0
    browser.execute_script("window.scrollTo(0, 0)")
    browser.execute_script("location.hash = arguments[0]", f"#config-{full}")
    WebDriverWait(browser, 5).until(lambda d: f"config-{full}" in _open_blocks(d))
    assert _in_view(browser, f"config-{full}")
    # a filter hides the entry: the link still shows it, the filters cleared
    Select(browser.find_element(By.ID, "filter-method")).select_by_value("full")
    browser.execute_script("location.hash = arguments[0]", f"#config-{qr}")
    WebDriverWait(browser, 5).until(lambda d: f"config-{qr}" in _open_blocks(d))
    assert browser.find_element(By.ID, f"config-{qr}").is_displayed()
    assert browser.find_element(By.ID, "filter-method").get_attribute("value") == ""
    assert _in_view(browser, f"config-{qr}")
    # a fragment naming no block (or not a block) changes nothing
    browser.get("about:blank")
    browser.get(f"{page.as_uri()}#{CRITEO}")
    assert _open_blocks(browser) == []
    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []


def assert_blocks_fit(driver: Any) -> int:
    """Opens every config and record block: each one's text wraps inside its cell, and
    opening them widens no board (nothing pushed past its right edge). Returns how many
    blocks were checked."""
    script = "return Array.from(document.querySelectorAll('.scroll')).map(b => b.scrollWidth)"
    closed = driver.execute_script(script)
    boxes = driver.execute_script(
        """
        document.querySelectorAll('details').forEach(d => { d.open = true; });
        return Array.from(document.querySelectorAll('details pre')).map(pre => {
          const p = pre.getBoundingClientRect(), c = pre.closest('td').getBoundingClientRect();
          return {id: pre.parentElement.id, pre: [p.left, p.right, pre.scrollWidth,
                  pre.clientWidth], cell: [c.left, c.right]};
        });
        """
    )
    assert driver.execute_script(script) == closed
    for box in boxes:
        left, right, scroll, client = box["pre"]
        assert scroll <= client + 1, box  # no line runs past the block's own edge
        assert box["cell"][0] <= left and right <= box["cell"][1] + 1, box
    return len(boxes)


def test_open_blocks_wrap_inside_the_files_column(browser: Any, tmp_path: Path) -> None:
    page = tmp_path / "index.html"
    page.write_text(render_html(sample_items()), encoding="utf-8")
    browser.get(page.as_uri())
    assert assert_blocks_fit(browser) == 2 * len(sample_items())
    if SHIPPED.is_file():
        browser.get(SHIPPED.as_uri())
        assert assert_blocks_fit(browser) >= 6
        # the shipped board fits the screenshot's 1400 px: no part of it scrolled out of view
        assert browser.execute_script(
            "return Array.from(document.querySelectorAll('.scroll'))"
            ".every(b => b.scrollWidth <= b.clientWidth)"
        )
        texts = browser.execute_script(
            "return Array.from(document.querySelectorAll('details[id^=\"record-\"] pre'))"
            ".map(p => p.textContent)"
        )
        assert all("mlflow_parent_run_id:" in t for t in texts)  # the text is all there


def screenshot(page: Path, out: Path, profile: Path, width: int = 1400) -> bytes:
    """A full-page PNG of ``page`` as it opens in headless Chromium (each entry's json,
    config and record links, the charts with their CI bars), at most 256 colours; written
    to ``out`` and returned."""
    import base64
    import io

    from PIL import Image

    driver = start_chromium(profile, width)
    try:
        driver.get(page.as_uri())
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png"})
    finally:
        driver.quit()
    image = Image.open(io.BytesIO(base64.b64decode(shot["data"]))).convert("RGB")
    buffer = io.BytesIO()
    image.quantize(256).save(buffer, "PNG", optimize=True)
    out.write_bytes(buffer.getvalue())
    return buffer.getvalue()


if __name__ == "__main__":  # python -m tests.test_leaderboard_browser --screenshot
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description="screenshot the rendered leaderboard")
    parser.add_argument("--screenshot", type=Path, nargs="?", const=SCREENSHOT, required=True)
    parser.add_argument("--page", type=Path, default=SHIPPED)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as profile:
        data = screenshot(args.page, args.screenshot, Path(profile))
    print(f"wrote {args.screenshot} ({len(data) / 1024:.0f} KiB)")
