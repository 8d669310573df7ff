"""A model run in the report: a whole model's forward pass timed with apply off and on (written by
``examples/llama_apply.py``), and which solution apply chose for each of the model's shapes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

import kernelarena.report.html.figures as figures
from kernelarena.report.html.markup import link, number_cell, page_id, table, tag, text
from kernelarena.report.html.pages import Figures, definition_page_id


class Timing(BaseModel):
    median_ms: float
    p20_ms: float
    p80_ms: float


class Choice(BaseModel):
    """What apply runs for one of the model's shapes."""

    definition: str
    axes: dict[str, int]
    solution: str | None  # None: nothing measured could run; the fallback did
    reason: str  # measured, nearest, definition_best, fallback
    measured_key: list[int] | None = None
    borrowed_from: str | None = None
    calls_per_forward: int = 1


class ModelRun(BaseModel):
    benchmark: str
    environment: dict[str, Any]
    model: dict[str, Any]
    tokens_per_forward: int
    timings: dict[str, Timing]  # "apply off", "apply on"
    max_abs_logit_difference: float | None = None
    choices: list[Choice]


class ModelRunError(ValueError):
    """A model run file that cannot be read or does not hold a model run."""


def load_model_run(path: Path) -> ModelRun:
    try:
        payload = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ModelRunError(f"--model-run {path}: {error}") from None
    try:
        return ModelRun.model_validate(payload)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ModelRunError(
            f"--model-run {path}: {where}: {first['msg']} (expected a file written by "
            "examples/llama_apply.py)"
        ) from None


def model_page_id(index: int) -> str:
    return page_id("model", str(index))


def model_page(run: ModelRun, index: int, drawn: Figures, reported: Sequence[str]) -> str:
    """``reported``: definitions with a page in this report, which the choices link to."""
    environment = run.environment
    device = str(environment.get("device", "?"))
    labels = list(run.timings)
    tokens = run.tokens_per_forward
    title = f"{run.model.get('name', 'model')} on {device}: one forward of {tokens} tokens"
    parts = [
        tag("h1", text(title)),
        tag("p", text(_versions(environment)), class_="meta"),
        tag("p", text(_summary(run)), class_="lead"),
        drawn.place(
            figures.model_figure(title, labels, [t.model_dump() for t in run.timings.values()])
        ),
        tag("h2", "Which solution apply runs for the model's shapes"),
        _choices_table(run.choices, reported),
        tag("h2", "The model"),
        tag("pre", text(json.dumps(run.model, indent=1))),
    ]
    return tag(
        "section",
        tag("div", "".join(parts), class_="hardware", data_hardware=device),
        class_="page",
        id=model_page_id(index),
    )


def _versions(environment: dict[str, Any]) -> str:
    keys = ("date", "python", "torch", "cuda", "triton", "transformers")
    return "; ".join(f"{k} {environment[k]}" for k in keys if environment.get(k))


def _summary(run: ModelRun) -> str:
    lines = []
    for label, timing in run.timings.items():
        rate = run.tokens_per_forward / (timing.median_ms / 1e3)
        lines.append(f"{label}: {timing.median_ms:.3f} ms per forward ({rate:,.0f} tokens/s)")
    off, on = run.timings.get("apply off"), run.timings.get("apply on")
    if off and on:
        lines.append(f"apply on runs {off.median_ms / on.median_ms:.2f}x as fast as apply off")
    if run.max_abs_logit_difference is not None:
        lines.append(f"largest difference of a logit: {run.max_abs_logit_difference:.3g}")
    return "; ".join(lines) + "."


def _choices_table(choices: Sequence[Choice], reported: Sequence[str]) -> str:
    rows = []
    for choice in choices:
        name = (
            link(definition_page_id(choice.definition), choice.definition)
            if choice.definition in reported
            else text(choice.definition)
        )
        shape = ", ".join(f"{a}={v}" for a, v in choice.axes.items())
        solution = choice.solution.removeprefix(choice.definition + "_") if choice.solution else ""
        why = choice.reason + (
            f" (borrowed from {choice.borrowed_from})" if choice.borrowed_from else ""
        )
        rows.append(
            [
                name,
                text(shape),
                text(solution or "fallback (nothing measured runs here)"),
                text(why),
                number_cell(choice.calls_per_forward, str(choice.calls_per_forward)),
            ]
        )
    headers = ("definition", "shape", "solution", "decided by", "calls per forward")
    return table(headers, rows, numeric=(4,))
