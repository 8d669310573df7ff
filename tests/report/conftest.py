"""A headless Chromium for the report's browser tests: Debian's ``chromium`` driven by Playwright.

Playwright's own browser download needs the network; the system browser does not. Where either is
missing the browser tests are skipped, except under CI (``CI=true``), where ``make test`` installs
both and a missing one is a failure, not a silent skip.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("KERNELARENA_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-background-networking"]


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason} (CI runs the browser tests: see the Makefile's browser target)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (pip install -e '.[dev]')")
    if not Path(CHROMIUM).exists():
        _unavailable(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield launched
        launched.close()


class OpenReport:
    """A report open in a page, with every console error and uncaught exception it raised."""

    def __init__(self, browser: Any, path: Path) -> None:
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.errors: list[str] = []
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda error: self.errors.append(f"page error: {error}"))
        self.page.goto(path.resolve().as_uri())

    def _console(self, message: Any) -> None:
        if message.type == "error":
            self.errors.append(f"console: {message.text}")

    def show(self, page_id: str) -> None:
        """Go to a page and wait until every plot on it that is not hidden is drawn."""
        self.page.evaluate("id => { window.location.hash = id; }", page_id)
        self.page.wait_for_function(
            """id => {
                const page = document.getElementById(id);
                if (page.hidden) return false;
                return Array.from(page.querySelectorAll('.plot'))
                    .filter(plot => !plot.closest('[hidden]'))
                    .every(plot => plot.querySelector('svg.main-svg'));
            }""",
            arg=page_id,
            timeout=20_000,
        )

    def visible(self, selector: str) -> int:
        return int(
            self.page.evaluate(
                "s => Array.from(document.querySelectorAll(s))"
                ".filter(e => !e.closest('[hidden]')).length",
                selector,
            )
        )

    def drawn(self) -> int:
        """Plots shown (on the current page, of the chosen hardware) that plotly has drawn."""
        return int(
            self.page.evaluate(
                "() => Array.from(document.querySelectorAll('.plot'))"
                ".filter(p => !p.closest('[hidden]') && p.querySelector('svg.main-svg')).length"
            )
        )

    def close(self) -> None:
        self.page.close()
