"""The HTML report in a real browser: headless Chromium (Debian's `chromium`, driven by
Playwright pointed at that executable; no browser download) renders the tables, sorts on a
header click, hides rows with the filter, opens a provenance panel, loads every embedded
plot, makes no network request and logs no console error. Two sabotaged pages prove that
the check fails when the table does not render or sorting breaks. leaderboard.html, which
inlines the same script, sorts its rows too.

Skips only where no Chromium is installed; `.ci/run` installs it and sets
SSL_BENCH_REQUIRE_BROWSER=1, under which a missing Chromium fails instead."""
from __future__ import annotations

import os

import pytest

from harness.results import html_assets
from harness.results.leaderboard import build_leaderboard, to_html
from harness.results.report import build_report, chromium_executable
from report_records import all_records

CHROMIUM = chromium_executable()
if CHROMIUM is None:
    if os.environ.get("SSL_BENCH_REQUIRE_BROWSER") == "1":
        raise RuntimeError("SSL_BENCH_REQUIRE_BROWSER=1 but no Chromium is installed: apt-get install -y chromium")
    pytest.skip("no Chromium installed (apt-get install -y chromium, or set SSL_BENCH_CHROMIUM): "
                "the report's browser test cannot run", allow_module_level=True)

try:
    from playwright.sync_api import sync_playwright
except ImportError as exc:  # Chromium is there: the test must run, so say what is missing
    raise ImportError("the browser test needs Playwright for Python: pip install -e '.[dev]' "
                      "(never `playwright install`: the test drives the system Chromium)") from exc


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM)
        yield b
        b.close()


@pytest.fixture(scope="module")
def page_html() -> str:
    return build_report(all_records(), generated="2026-01-01T00:00:00+00:00")


def _open(browser, tmp_path, html: str):
    path = tmp_path / "report.html"
    path.write_text(html)
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors, requests = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    return page, errors, requests


def _visible_models(table) -> list[str]:
    return [g.locator("tr.main td").first.inner_text().lstrip("+−- \n").strip()
            for g in table.locator("tbody.item").all() if g.is_visible()]


def check_page(page, errors: list[str], requests: list[str]) -> None:
    """What a reader of the page relies on; every assertion can fail (see the sabotage tests)."""
    # the tables render: one headline table per (protocol, dataset), with its models
    dense = page.locator("section#protocol-dense_nn table.headline").first
    assert dense.is_visible(), "the dense_nn table is not rendered"
    assert _visible_models(dense) == ["dino", "ibot", "random_init"]
    assert page.locator("table.headline").count() == 3
    header = dense.locator("th.sort", has_text="fraction=1/8")
    assert header.is_visible()
    # best value marked, delta to random init shown
    best = dense.locator("td.best")
    assert best.count() == 3 and all("ibot" in c.locator("xpath=..").inner_text() for c in best.all())
    assert "vs random init" in dense.inner_text()

    # sorting reorders rows: ascending, then descending, by the fraction=1/8 mean
    header.click()
    assert header.get_attribute("aria-sort") == "ascending"
    assert _visible_models(dense) == ["random_init", "dino", "ibot"], "sorting did not reorder the rows"
    header.click()
    assert header.get_attribute("aria-sort") == "descending"
    assert _visible_models(dense) == ["ibot", "dino", "random_init"], "sorting did not reverse the rows"
    dense.locator("th.sort", has_text="model").click()
    assert _visible_models(dense) == ["dino", "ibot", "random_init"]

    # a provenance panel opens under its row and moves with it
    group = dense.locator("tbody.item").nth(1)
    panel = group.locator("tr.prov")
    assert not panel.is_visible()
    group.locator("button.prov").click()
    assert panel.is_visible() and "sha256" in panel.inner_text() and "git commit" in panel.inner_text()
    header.click()  # ascending: ibot (the opened row) goes last, its panel with it
    assert dense.locator("tbody.item").last.locator("tr.prov").is_visible()

    # the filter hides rows everywhere, and clearing it shows them again
    page.fill("#filter", "ibot")
    assert _visible_models(dense) == ["ibot"]
    assert "rows shown" in page.inner_text("#shown")
    paper_rows = page.locator("#paper-table tbody.item")
    # ibot_vits16's cells: the ImageNet table's and iBOT Table 12's two k-NN cells (other settings)
    assert [r.is_visible() for r in paper_rows.all()].count(True) == 3
    page.fill("#filter", "")
    assert len(_visible_models(dense)) == 3 and all(r.is_visible() for r in paper_rows.all())

    # the paper section: verdicts coloured
    ok = page.locator("#paper-table td.verdict.ok")
    bad = page.locator("#paper-table td.verdict.differs")
    assert ok.count() == 1 and bad.count() == 1
    assert ok.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(216, 243, 220)"
    assert bad.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(253, 226, 225)"

    # the embedded plot loads (the fraction curve; k = 10 and 20 are two points, no curve)
    loaded = page.eval_on_selector_all("img.plot", "els => els.map(e => e.complete && e.naturalWidth > 0)")
    assert len(loaded) >= 1 and all(loaded), f"plots not loaded: {loaded}"

    assert errors == [], f"console errors: {errors}"
    assert all(u.startswith(("file:", "data:")) for u in requests), f"network requests: {requests}"


def test_report_renders_sorts_filters_in_chromium(browser, tmp_path, page_html):
    page, errors, requests = _open(browser, tmp_path, page_html)
    try:
        check_page(page, errors, requests)
    finally:
        page.close()


def test_the_check_fails_when_sorting_breaks(browser, tmp_path, page_html):
    script = html_assets.sortable_table_script()
    moves = "units.forEach(function (u) { parent.appendChild(u); });"
    assert moves in script and page_html.count(script) == 1  # the page inlines the script as it is
    page, errors, requests = _open(browser, tmp_path, page_html.replace(script, script.replace(moves, "")))
    try:
        with pytest.raises(AssertionError, match="sorting did not reorder"):
            check_page(page, errors, requests)
    finally:
        page.close()


def test_the_check_fails_when_the_table_does_not_render(browser, tmp_path, page_html):
    broken = page_html.replace('<table class="sortable headline"', '<table style="display:none" class="sortable '
                                                                   'headline"')
    page, errors, requests = _open(browser, tmp_path, broken)
    try:
        with pytest.raises(AssertionError, match="not rendered"):
            check_page(page, errors, requests)
    finally:
        page.close()


def test_leaderboard_page_sorts_in_chromium(browser, tmp_path):
    page, errors, requests = _open(browser, tmp_path, to_html(build_leaderboard(all_records())))
    try:
        table = page.locator("table#leaderboard")
        models = lambda: [r.locator("td").first.inner_text() for r in table.locator("tbody tr").all()]  # noqa: E731
        header = table.locator("th.sort", has_text="dense_nn | voc/val | fraction=1/8 | mIoU")
        header.click()
        assert header.get_attribute("aria-sort") == "ascending"
        assert models()[:3] == ["random_init", "dino", "ibot"]  # the rows without a number last
        header.click()
        assert models()[:3] == ["ibot", "dino", "random_init"]
        table.locator("th.sort", has_text="model").first.click()
        assert models() == ["dino", "dino_vits16", "dino_vits8", "ibot", "ibot_vits16", "random_init"]
        assert errors == [], f"console errors: {errors}"
        assert all(u.startswith(("file:", "data:")) for u in requests), f"network requests: {requests}"
    finally:
        page.close()
