"""Screenshot of the HTML report, taken by the headless Chromium the browser test uses.

    python -m scripts.report_screenshot [--runs DIR | --report FILE] [--out PNG]
        [--width 1400] [--height 900] [--full-page] [--open-provenance]

Builds the report of the records in --runs (default results/runs) unless --report names an
existing page, loads it in headless Chromium (Debian's `chromium` through Playwright, no
browser download) and writes a PNG (default docs/images/report.png). It fails when the page
logs a console error or one of its plots does not load, so the picture is of a working page.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from harness.results.report import chromium_executable, write_report

REPO = Path(__file__).resolve().parent.parent


def screenshot(page_path: Path, out: Path, width: int = 1400, height: int = 900, full_page: bool = False,
               open_provenance: bool = False) -> dict:
    from playwright.sync_api import sync_playwright

    exe = chromium_executable()
    if exe is None:
        raise SystemExit("no Chromium found: apt-get install -y chromium (or set SSL_BENCH_CHROMIUM)")
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe)
        page = browser.new_page(viewport={"width": width, "height": height})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(page_path.resolve().as_uri())
        page.wait_for_load_state("load")
        plots = page.eval_on_selector_all("img.plot", "els => els.map(e => e.complete && e.naturalWidth > 0)")
        if open_provenance:
            first = page.locator("button.prov").first
            if first.count():
                first.click()
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out), full_page=full_page)
        info = {"plots": len(plots), "plots_loaded": sum(plots), "console_errors": errors,
                "tables": page.locator("table.headline").count(), "title": page.title()}
        browser.close()
    if errors or not all(plots):
        raise SystemExit(f"the page did not render cleanly: {info}")
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default=None, help="records folder (default results/runs)")
    ap.add_argument("--report", default=None, help="an existing report page to photograph instead")
    ap.add_argument("--out", default=str(REPO / "docs" / "images" / "report.png"))
    ap.add_argument("--width", type=int, default=1400)
    ap.add_argument("--height", type=int, default=900)
    ap.add_argument("--full-page", action="store_true")
    ap.add_argument("--open-provenance", action="store_true", help="open the first row's provenance panel")
    ap.add_argument("--title", default="ssl-bench report")
    args = ap.parse_args(argv)
    if args.report:
        page = Path(args.report)
    else:
        page = Path(tempfile.mkdtemp(prefix="ssl-bench-report-")) / "report.html"
        write_report(page, args.runs, title=args.title)
    info = screenshot(page, Path(args.out), args.width, args.height, args.full_page, args.open_provenance)
    print(f"{args.out}: {info['tables']} headline tables, {info['plots_loaded']}/{info['plots']} plots loaded, "
          f"no console errors (page {page})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
