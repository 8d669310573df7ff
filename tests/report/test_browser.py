"""The report in a real browser (headless Chromium): plots drawn, no console errors, the hardware
filter at work, a definition with only failures, a model run page; and the shipped traces' report
whole, every page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kernelarena.cli import app
from kernelarena.report.html import build_report, write_report
from kernelarena.report.html.model_run import load_model_run
from tests.report.conftest import OpenReport
from tests.report.synthetic import H100, H200, model_run_file, toy_trace_set


@pytest.fixture
def toy_report(tmp_path: Path) -> Path:
    made = toy_trace_set()
    run = load_model_run(model_run_file(tmp_path / "run.json"))
    path = tmp_path / "toy.html"
    write_report(path, build_report(made, list(made.definitions.values()), model_runs=[run]))
    return path


def test_plots_draw_and_the_hardware_filter_chooses(browser: Any, toy_report: Path) -> None:
    report = OpenReport(browser, toy_report)
    report.show("summary")
    assert report.drawn() == 2  # one chart of kernels against peers per model
    report.show("d-toy_norm")
    assert report.drawn() == 4  # latency and fraction of the ceiling, per model
    assert report.page.locator("#d-toy_norm .plot .scatterlayer .trace").count() >= 3
    report.page.select_option("#hardware-filter", H200)
    report.show("d-toy_norm")
    assert report.drawn() == 2
    assert report.visible(f'[data-hardware="{H100}"]') == 0
    assert report.visible(f'[data-hardware="{H200}"]') == 2  # the block and its provenance row
    report.page.select_option("#hardware-filter", H100)
    report.show("summary")
    assert report.drawn() == 1
    assert report.visible(f'[data-hardware="{H200}"]') == 0
    report.page.select_option("#hardware-filter", "")
    report.show("summary")
    assert report.drawn() == 2
    assert report.errors == []
    report.close()


def test_a_definition_with_only_failures_renders(browser: Any, toy_report: Path) -> None:
    report = OpenReport(browser, toy_report)
    report.show("d-toy_broken")
    page = report.page.locator("#d-toy_broken")
    assert page.locator(".plot").count() == 0
    statuses = page.locator("table.failures .status").all_inner_texts()
    assert sorted(statuses) == ["COMPILE_ERROR", "RUNTIME_ERROR"]
    logs = page.locator("table.failures pre").all_inner_texts()
    assert any("ValueError: <b>not</b> a kernel" in log for log in logs)  # shown, not parsed
    assert page.locator("text=Nothing timed on this hardware").count() == 2
    assert report.errors == []
    report.close()


def test_the_model_page_links_to_its_definitions(browser: Any, toy_report: Path) -> None:
    report = OpenReport(browser, toy_report)
    report.show("model-0")
    assert report.drawn() == 1
    report.page.click("#model-0 a[href='#d-toy_norm']")
    report.show("d-toy_norm")
    assert report.page.locator("#model-0").is_hidden()
    assert report.errors == []
    report.close()


def test_leaderboard_sorts_by_a_column(browser: Any, toy_report: Path) -> None:
    report = OpenReport(browser, toy_report)
    report.show("d-toy_norm")
    board = report.page.locator(f'#d-toy_norm [data-hardware="{H100}"] table.sortable').first
    first_column = "rows => rows.map(r => r.cells[0].textContent)"
    assert board.locator("tbody tr").evaluate_all(first_column) == ["triton", "cuda", "torch"]
    board.locator("th", has_text="passed").click()  # equal counts: order kept
    board.locator("th", has_text="fastest at").click()
    assert board.locator("tbody tr").evaluate_all(first_column) == ["triton", "cuda", "torch"]
    board.locator("th", has_text="fastest at").click()  # again: ascending
    assert board.locator("tbody tr").evaluate_all(first_column) == ["torch", "cuda", "triton"]
    report.close()


def test_the_shipped_traces_report_draws_every_plot(
    browser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bar: ``kernelarena report`` on the traces shipped with the library gives one file
    under 10 MB whose every page draws every plot, with no console error."""
    monkeypatch.setenv("KERNELARENA_DATASET", str(tmp_path / "no-user-dataset"))
    output = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["report", "-o", str(output)])
    assert result.exit_code == 0, result.output
    assert output.stat().st_size < 10_000_000
    report = OpenReport(browser, output)
    pages = report.page.eval_on_selector_all("section.page", "pages => pages.map(p => p.id)")
    assert len(pages) > 40 and pages[0] == "summary"
    drawn = 0
    for page_id in pages:
        report.show(page_id)
        drawn += report.drawn()
    assert drawn == report.page.locator(".plot").count()
    assert report.errors == []
    report.close()
