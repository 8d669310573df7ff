"""Retake the report screenshots of docs/report.md: the report of the shipped traces, its summary and
one definition's page, in headless Chromium (Debian's chromium, driven by Playwright).

    KERNELARENA_DATASET=/nonexistent kernelarena report -o /tmp/report.html
    python docs/images/take_screenshots.py /tmp/report.html
"""

from __future__ import annotations

import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

HERE = Path(__file__).parent
SHOTS = {"report-summary.png": ("summary", 0), "report-definition.png": ("d-rmsnorm_bf16", 0)}


def main(report: Path) -> None:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path="/usr/bin/chromium",
            args=["--headless", "--no-sandbox", "--disable-background-networking"],
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1250})
        page.goto(report.resolve().as_uri())
        for name, (page_id, scroll) in SHOTS.items():
            page.evaluate("id => { window.location.hash = id; }", page_id)
            page.wait_for_function(
                "id => Array.from(document.getElementById(id).querySelectorAll('.plot'))"
                ".every(p => p.closest('[hidden]') || p.querySelector('svg.main-svg'))",
                arg=page_id,
            )
            page.evaluate("y => window.scrollTo(0, y)", scroll)
            page.wait_for_timeout(500)  # plotly's transitions
            page.screenshot(path=str(HERE / name))
        browser.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
