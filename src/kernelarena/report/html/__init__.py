"""``kernelarena report``: one self-contained HTML file of the traces, to look at rather than read.

Every script and style is inlined (plotly.js included), so the file opens from disk with no network.
Pages: a summary that ranks the definitions, one page per definition (leaderboard, latency against
the shape axes, fraction of the ceiling, failures, provenance), and one per model run given.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from plotly.offline import get_plotlyjs

import kernelarena.report.html.figures as figures
from kernelarena.data import Definition, TraceSet
from kernelarena.report.html.markup import json_script, tag, text
from kernelarena.report.html.model_run import ModelRun, model_page, model_page_id
from kernelarena.report.html.pages import (
    Figures,
    definition_page,
    hardware_order,
    navigation,
    summary_page,
)
from kernelarena.report.html.views import DefinitionResults, collect

__all__ = ["Report", "build_report", "write_report"]


@dataclass(frozen=True)
class Report:
    html: str
    definitions: list[str]  # those with a page
    untraced: list[str]  # asked for, with no trace (on the chosen hardware)
    hardware: list[str]
    traces: int
    figures: int


def build_report(
    trace_set: TraceSet,
    definitions: Sequence[Definition],
    *,
    hardware: Sequence[str] | None = None,
    model_runs: Sequence[ModelRun] = (),
    title: str = "kernelarena report",
) -> Report:
    collected = collect(trace_set, definitions, hardware)
    reported = [r.name for r in collected]
    untraced = sorted({d.name for d in definitions} - set(reported))
    drawn = Figures()
    pages = [summary_page(collected, untraced, drawn)]
    extra = []
    for index, run in enumerate(model_runs):
        pages.append(model_page(run, index, drawn, reported))
        extra.append((model_page_id(index), f"Model: {run.model.get('name', index)}"))
    pages += [definition_page(results, drawn) for results in collected]
    models = hardware_order(collected)
    models += sorted({str(r.environment.get("device")) for r in model_runs} - set(models))
    traces = sum(p.traces for r in collected for p in r.provenance.values())
    document = _document(
        title, collected, models, traces, navigation(collected, extra), pages, drawn
    )
    return Report(document, reported, untraced, models, traces, len(drawn.drawn))


def write_report(path: Path, report: Report) -> int:
    """Write the file; return its size in bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report.html, encoding="utf-8")
    return path.stat().st_size


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath("assets", name).read_text(encoding="utf-8")


def _document(
    title: str,
    collected: Sequence[DefinitionResults],
    models: Sequence[str],
    traces: int,
    nav: str,
    pages: Sequence[str],
    drawn: Figures,
) -> str:
    generated = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    options = tag("option", "every hardware model", value="") + "".join(
        tag("option", text(model), value=model) for model in models
    )
    header = tag(
        "header",
        tag("h1", text(title))
        + tag(
            "span",
            text(f"{len(collected)} definitions, {traces} traces; generated {generated}"),
            class_="meta",
        )
        + tag("label", "hardware " + tag("select", options, id="hardware-filter")),
    )
    body = header + tag("div", nav + tag("main", "".join(pages)), class_="layout")
    scripts = (
        json_script("figures", drawn.drawn)
        + json_script("plot-template", figures.template())
        + f"<script>{get_plotlyjs()}</script>"
        + f"<script>{_asset('report.js')}</script>"
    )
    head = (
        '<meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        + tag("title", text(title))
        + tag("style", _asset("report.css"))
    )
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head>{head}</head><body>{body}{scripts}</body></html>\n'
    )
