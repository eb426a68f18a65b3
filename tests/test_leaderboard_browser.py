"""The rendered page in a real headless Chromium: sorting, filtering, the chart, and a
hostile submitter name that must show as text and run nothing.

Needs Debian's ``chromium`` and ``chromium-driver`` packages and the ``selenium`` Python
package; skipped with the reason when one is missing. No browser is ever downloaded.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from suite.leaderboard.render import render_html
from tests.test_leaderboard_render import HOSTILE, HOSTILE_NOTES, sample_items

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


@pytest.fixture
def browser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    monkeypatch.setenv("SE_OFFLINE", "true")  # Selenium Manager must not fetch anything
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
        "--window-size=1400,1000",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(30)
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


def test_page_sorts_filters_charts_and_runs_no_injected_script(
    browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    page = tmp_path / "leaderboard" / "index.html"
    page.parent.mkdir()
    page.write_text(render_html(sample_items()), encoding="utf-8")
    browser.get(page.as_uri())

    # boards: g0 = avazu-synth (one entry), g1 = criteo-synth (three)
    assert browser.title == "recsuite leaderboard"
    assert browser.execute_script("return window.__pwned === undefined")
    assert browser.execute_script("return document.querySelectorAll('img').length") == 0
    submitters = _column(browser, "g1", "Submitter")
    assert HOSTILE in submitters  # shown as the literal text
    assert HOSTILE_NOTES in _column(browser, "g1", "Notes")
    titles = browser.execute_script(
        "return Array.from(document.querySelectorAll('#chart-g1 title')).map(t => t.textContent)"
    )
    assert any(HOSTILE in t for t in titles)
    assert _circles(browser, "g1") == 3
    assert _circles(browser, "g0") == 1

    # the board arrives ranked by Test AUC, best first, and its header says so
    assert _column(browser, "g1", "Embedding") == ["full", "qr", "hash"]
    assert _sort_marks(browser, "g1") == {"Test AUC": ("descending", "▼")}
    assert not any(arrow in h for h in _headers(browser, "g1") for arrow in "↑↓")
    # a click on the sorted column reverses it, and the arrow follows the order shown
    _click_header(browser, "g1", "Test AUC")
    assert _column(browser, "g1", "Embedding") == ["hash", "qr", "full"]
    assert _sort_marks(browser, "g1") == {"Test AUC": ("ascending", "▲")}
    _click_header(browser, "g1", "Test AUC")
    assert _column(browser, "g1", "Embedding") == ["full", "qr", "hash"]
    assert _sort_marks(browser, "g1") == {"Test AUC": ("descending", "▼")}
    # the first click on another metric puts its best first: least memory, lowest log loss
    _click_header(browser, "g1", "Embedding memory")
    assert _column(browser, "g1", "Embedding") == ["hash", "qr", "full"]
    assert _sort_marks(browser, "g1") == {"Embedding memory": ("ascending", "▲")}
    _click_header(browser, "g1", "Test log loss")
    assert _sort_marks(browser, "g1") == {"Test log loss": ("ascending", "▲")}
    losses = [float(v.split()[0]) for v in _column(browser, "g1", "Test log loss")]
    assert losses == sorted(losses)
    _click_header(browser, "g1", "Test AUC")  # from unsorted: best (highest) first
    assert _column(browser, "g1", "Embedding") == ["full", "qr", "hash"]
    assert _sort_marks(browser, "g1") == {"Test AUC": ("descending", "▼")}
    _click_header(browser, "g1", "Submitter")
    assert _column(browser, "g1", "Submitter") == [HOSTILE, "Ada", "Grace"]
    assert _sort_marks(browser, "g1") == {"Submitter": ("ascending", "▲")}

    # fewer columns by default; the rest behind "all columns"
    notes = browser.find_element(By.CSS_SELECTOR, "#g1 thead th:last-child")
    assert not notes.is_displayed()
    browser.find_element(By.ID, "all-columns").click()
    assert notes.is_displayed()
    browser.find_element(By.ID, "all-columns").click()
    assert not notes.is_displayed()

    # filters: dataset, embedding method, free text
    criteo = browser.find_element(By.ID, "g1")
    avazu = browser.find_element(By.ID, "g0")
    Select(browser.find_element(By.ID, "filter-dataset")).select_by_value("avazu-synth")
    assert avazu.is_displayed() and not criteo.is_displayed()
    Select(browser.find_element(By.ID, "filter-dataset")).select_by_value("")
    Select(browser.find_element(By.ID, "filter-method")).select_by_value("qr")
    assert criteo.is_displayed() and not avazu.is_displayed()
    assert _column(browser, "g1", "Embedding") == ["qr"]
    assert _circles(browser, "g1") == 1
    Select(browser.find_element(By.ID, "filter-method")).select_by_value("")
    search = browser.find_element(By.ID, "filter-text")
    search.send_keys("GRACE")
    assert _column(browser, "g1", "Submitter") == ["Grace"]
    search.clear()
    search.send_keys("no such entry")
    assert browser.find_element(By.ID, "no-match").is_displayed()
    search.clear()
    search.send_keys(" ")
    assert _circles(browser, "g1") == 3

    # still nothing ran, and the page logged no errors (e.g. CSP violations)
    assert browser.title == "recsuite leaderboard"
    assert browser.execute_script("return window.__pwned === undefined")
    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []
