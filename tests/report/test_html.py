"""The HTML document itself: self-contained, escaped, one page per definition, figures that parse."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kernelarena.report.html import build_report
from kernelarena.report.html.model_run import ModelRunError, load_model_run
from tests.report.synthetic import H100, H200, model_run_file, toy_trace_set

SCRIPT = re.compile(r"<script\b[^>]*>(.*?)</script>", re.DOTALL)


def _markup(html: str) -> str:
    """The document without the contents of its script elements."""
    return SCRIPT.sub("<script></script>", html)


def _json_script(html: str, element_id: str) -> object:
    found = re.search(rf'<script type="application/json" id="{element_id}">(.*?)</script>', html)
    assert found is not None, element_id
    return json.loads(found.group(1))


def test_the_document_needs_nothing_from_outside() -> None:
    made = toy_trace_set()
    html = build_report(made, list(made.definitions.values())).html
    markup = _markup(html)
    assert "src=" not in markup and "<link" not in markup
    assert set(re.findall(r'href="([^"]*)"', markup)) <= {
        "#summary",
        "#d-toy_norm",
        "#d-toy_broken",
    }
    assert "plotly.js v" in html  # inlined, not fetched
    assert html.count("<script") == 4  # figures, template, plotly.js, the report's own


def test_pages_figures_and_hardware_blocks() -> None:
    made = toy_trace_set()
    report = build_report(made, list(made.definitions.values()))
    html = report.html
    assert report.definitions == ["toy_broken", "toy_norm"] and report.hardware == [H100, H200]
    assert re.findall(r'<section class="page" id="([^"]+)"', html) == [
        "summary",
        "d-toy_broken",
        "d-toy_norm",
    ]
    drawn = _json_script(html, "figures")
    assert isinstance(drawn, dict)
    # toy_norm: latency and ceiling on each of two models; the summary: one chart per model.
    assert report.figures == len(drawn) == 6
    placed = re.findall(r'data-figure="(f\d+)"', html)
    assert sorted(placed) == sorted(drawn)
    latency = next(f for f in drawn.values() if "latency" in json.dumps(f["layout"]["yaxis"]))
    assert (
        latency["layout"]["xaxis"]["type"] == "log" and latency["layout"]["yaxis"]["type"] == "log"
    )
    assert [b["label"] for b in latency["layout"]["updatemenus"][0]["buttons"]] == [
        "latency (us)",
        "GB/s",
    ]  # no FLOPs counted: no TFLOP/s button
    assert "template" not in latency["layout"]


def test_failures_are_escaped_and_keep_their_status() -> None:
    made = toy_trace_set()
    html = build_report(made, [made.definitions["toy_broken"]]).html
    markup = _markup(html)
    assert "<b>not</b>" not in markup
    assert "ValueError: &lt;b&gt;not&lt;/b&gt; a kernel" in markup
    assert "COMPILE_ERROR" in markup and "RUNTIME_ERROR" in markup
    assert "Nothing timed on this hardware" in markup


def test_only_the_chosen_hardware() -> None:
    made = toy_trace_set()
    report = build_report(made, list(made.definitions.values()), hardware=[H200])
    assert report.hardware == [H200]
    assert H100 not in _markup(report.html)


def test_a_model_run_page(tmp_path: Path) -> None:
    made = toy_trace_set()
    run = load_model_run(model_run_file(tmp_path / "run.json"))
    html = build_report(made, list(made.definitions.values()), model_runs=[run]).html
    markup = _markup(html)
    assert 'id="model-0"' in markup and 'href="#model-0"' in markup
    assert "apply on runs 1.25x as fast as apply off" in markup
    assert '<a href="#d-toy_norm">toy_norm</a>' in markup  # a choice links to its definition
    assert "fallback (nothing measured runs here)" in markup


def test_a_model_run_file_that_is_not_one(tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"benchmark": "norms", "rows": []}))
    with pytest.raises(ModelRunError, match=r"other\.json: environment: Field required"):
        load_model_run(path)
    with pytest.raises(ModelRunError, match=r"missing\.json"):
        load_model_run(tmp_path / "missing.json")
