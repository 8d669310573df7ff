"""The report's pages: one per definition, and the summary that ranks them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import kernelarena.report.html.figures as figures
from kernelarena.report.html.markup import (
    link,
    number_cell,
    page_id,
    spread_cell,
    table,
    tag,
    text,
)
from kernelarena.report.html.ranking import (
    DefinitionRank,
    leaderboard,
    rank_definitions,
)
from kernelarena.report.html.views import DefinitionResults, HardwareResults, Provenance


@dataclass
class Figures:
    """The figures of a report, each drawn into the placeholder element that ``place`` returns."""

    drawn: dict[str, figures.Figure] = field(default_factory=dict)

    def place(self, figure: figures.Figure | None, note: str = "") -> str:
        if figure is None:
            return tag("p", text(note), class_="note") if note else ""
        key = f"f{len(self.drawn)}"
        self.drawn[key] = figure
        return tag("div", "", class_="plot", data_figure=key)


def definition_page_id(name: str) -> str:
    return page_id("d", name)


def definition_page(results: DefinitionResults, drawn: Figures) -> str:
    definition = results.definition
    palette = figures.colours([s for h in results.by_hardware.values() for s in h.solutions])
    axes = ", ".join(
        f"{a}={spec.value}"
        if spec.type == "const"
        else (f"{a}={spec.expression}" if spec.expression else a)  # type: ignore[union-attr]
        for a, spec in definition.axes.items()
    )
    parts = [
        tag("h1", text(definition.name)),
        tag(
            "p",
            f"op_type {tag('code', text(definition.op_type))}; axes {tag('code', text(axes))}; "
            f"inputs {tag('code', text(', '.join(definition.inputs)))}; outputs "
            f"{tag('code', text(', '.join(definition.outputs)))}",
            class_="meta",
        ),
    ]
    if definition.description:
        parts.append(tag("p", text(definition.description)))
    for measured in results.by_hardware.values():
        parts.append(_hardware_block(results, measured, palette, drawn))
    parts.append(tag("h2", "Where these traces come from"))
    parts.append(provenance_table(list(results.provenance.values())))
    return tag("section", "".join(parts), class_="page", id=definition_page_id(results.name))


CPU_NOTE = (
    "CPU traces are checks, not rankings: a CPU runs the references, the torch solutions and "
    "Triton's interpreter, not the GPU kernels, so these times say nothing about speed on a GPU "
    "and no speedup or share of a ceiling is shown for them."
)


def _hardware_block(
    results: DefinitionResults,
    measured: HardwareResults,
    palette: dict[str, str],
    drawn: Figures,
) -> str:
    passed, failed = sum(measured.passed.values()), sum(measured.failed.values())
    counts = f"{passed} passed, {failed} failed (latest trace per solution and workload)"
    parts = [tag("h2", text(measured.hardware + (": checks" if measured.on_cpu else "")))]
    if measured.on_cpu:
        parts.append(tag("p", text(CPU_NOTE), class_="note"))
    parts += [
        tag("p", counts),
        tag("h3", "Checks" if measured.on_cpu else "Leaderboard"),
        _leaderboard_table(results, measured),
        _unknown_solutions_note(results, measured),
    ]
    if measured.points:
        parts.append(drawn.place(figures.performance_figure(results, measured, palette)))
        if not measured.on_cpu:
            parts.append(
                drawn.place(
                    figures.ceiling_figure(results, measured, palette),
                    "no fraction of the ceiling: these traces count neither bytes nor FLOPs",
                )
            )
    else:
        parts.append(
            tag(
                "p",
                "Nothing timed on this hardware: every trace failed or was checked without timing.",
                class_="note",
            )
        )
    if measured.failures:
        parts.append(tag("h3", f"Failures ({len(measured.failures)})"))
        parts.append(_failures_table(results, measured))
    return tag("div", "".join(parts), class_="hardware", data_hardware=measured.hardware)


def _unknown_solutions_note(results: DefinitionResults, measured: HardwareResults) -> str:
    unknown = [s for s in measured.solutions if s not in results.solutions]
    if not unknown:
        return ""
    names = ", ".join(results.short(s) for s in unknown)
    return tag(
        "p",
        text(
            f"Not in the dataset: {names}. Solutions registered from Python are known only "
            "where their module is imported: 'kernelarena report --import MODULE' shows their "
            "language and author."
        ),
        class_="note",
    )


def _leaderboard_table(results: DefinitionResults, measured: HardwareResults) -> str:
    """Solutions by speedup; on a CPU a table of checks (no speedup, share of the ceiling or
    fastest count: the CPU's clock ranks nothing)."""
    rows = []
    workloads = len({p.workload for p in measured.points})
    for standing in leaderboard(results, measured):
        row = [
            text(results.short(standing.solution)),
            text(standing.language),
            text(standing.author),
            text(standing.kind),
            number_cell(standing.passed, str(standing.passed)),
            number_cell(standing.failed, str(standing.failed)),
            number_cell(standing.timed, f"{standing.timed} of {workloads}"),
        ]
        if not measured.on_cpu:
            row += [
                spread_cell(standing.speedup),
                spread_cell(standing.ceiling, percent=True),
                number_cell(standing.fastest, str(standing.fastest)),
            ]
        rows.append(row)
    headers = ["solution", "language", "author", "side", "passed", "failed", "timed"]
    if measured.on_cpu:
        return table(headers, rows, numeric=(4, 5, 6))
    headers += [
        "speedup over the reference: geomean (min-max)",
        "of the ceiling: median (min-max)",
        "fastest at",
    ]
    return table(headers, rows, numeric=(4, 5, 6, 7, 8, 9))


def _failures_table(results: DefinitionResults, measured: HardwareResults) -> str:
    rows = [
        [
            text(results.short(f.solution)),
            text(f.label),
            tag("span", text(f.status), class_="status"),
            tag("pre", text(f.log_head)) if f.log_head else "",
        ]
        for f in measured.failures
    ]
    return table(("solution", "workload", "status", "log (first lines)"), rows, class_="failures")


def provenance_table(provenance: Sequence[Provenance]) -> str:
    rows, attributes = [], []
    for source in provenance:
        libs = ", ".join(f"{k} {'/'.join(sorted(v))}" for k, v in sorted(source.libs.items()))
        ceilings = []
        if source.copy_gbps:
            ceilings.append(f"copy {_middle(source.copy_gbps):.0f} GB/s")
        if source.matmul_tflops:
            ceilings.append(f"matmul {_middle(source.matmul_tflops):.0f} TFLOP/s")
        rows.append(
            [
                text(source.hardware),
                text(", ".join(sorted(source.devices))),
                number_cell(source.traces, str(source.traces)),
                number_cell(source.outdated, str(source.outdated)),
                number_cell(source.unknown, str(source.unknown)),
                text(f"{source.first[:10]} to {source.last[:10]}"),
                text("; ".join(ceilings)),
                text(libs),
            ]
        )
        attributes.append({"data_hardware": source.hardware})
    headers = ("hardware", "devices", "traces", "outdated", "of solutions not in the dataset",
               "dates", "ceilings (median)", "versions")  # fmt: skip
    return table(headers, rows, row_attributes=attributes, numeric=(2, 3, 4))


def _middle(values: Sequence[float]) -> float:
    return sorted(values)[len(values) // 2]


def summary_page(
    collected: Sequence[DefinitionResults], untraced: Sequence[str], drawn: Figures
) -> str:
    models = hardware_order(collected)
    traces = sum(p.traces for r in collected for p in r.provenance.values())
    parts = [
        tag("h1", "Summary"),
        tag(
            "p",
            text(
                f"{len(collected)} definitions measured on {len(models)} hardware model(s), "
                f"{traces} traces (the latest per solution, workload and hardware). Definitions "
                "are ranked by how much faster the library's fastest kernel (Triton, CUDA, C++) "
                "runs than the fastest peer (Python solutions: torch, torch.compile, Liger, "
                "FlashAttention, cuDNN), as a geometric mean over the workloads where both were "
                "timed. A kernel beats every peer at a workload when its 80th percentile lies "
                "below every peer's 20th."
            ),
        ),
    ]
    cpus = _cpu_models(collected)
    for model in models:
        ranks = rank_definitions(collected, model)
        if model in cpus:
            shown = tag("h2", text(f"{model}: checks")) + tag("p", text(CPU_NOTE), class_="note")
            shown += _checks_table(ranks)
        else:
            shown = tag("h2", text(model)) + drawn.place(
                figures.advantage_figure(model, ranks),
                "no definition has both a kernel and a peer timed on this hardware",
            )
            shown += _ranking_table(ranks)
        parts.append(tag("div", shown, class_="hardware", data_hardware=model))
    if untraced:
        parts.append(tag("h2", "Not measured yet"))
        parts.append(tag("p", text(", ".join(untraced)) + " (run kernelarena run NAME)"))
    parts.append(tag("h2", "Where the traces come from"))
    parts.append(provenance_table(_merged_provenance(collected)))
    return tag("section", "".join(parts), class_="page", id="summary")


def _cpu_models(collected: Sequence[DefinitionResults]) -> set[str]:
    return {m for r in collected for m, h in r.by_hardware.items() if h.on_cpu}


def hardware_order(collected: Sequence[DefinitionResults]) -> list[str]:
    """Every hardware model measured, GPUs first (what the report is for), then CPUs."""
    cpus = _cpu_models(collected)
    return sorted({m for r in collected for m in r.by_hardware}, key=lambda m: (m in cpus, m))


def _checks_table(ranks: Sequence[DefinitionRank]) -> str:
    rows = [
        [
            link(definition_page_id(rank.definition), rank.definition),
            text(rank.op_type),
            number_cell(rank.passed, str(rank.passed)),
            number_cell(rank.failed, str(rank.failed)),
        ]
        for rank in sorted(ranks, key=lambda r: (-r.failed, r.definition))
    ]
    return table(("definition", "op_type", "passed", "failed"), rows, numeric=(2, 3))


def _ranking_table(ranks: Sequence[DefinitionRank]) -> str:
    rows = []
    for position, rank in enumerate(ranks, 1):
        leader, contest = rank.leader, rank.contest
        rows.append(
            [
                number_cell(position, str(position)),
                link(definition_page_id(rank.definition), rank.definition),
                text(rank.op_type),
                text(leader.solution.removeprefix(rank.definition + "_") if leader else ""),
                spread_cell(leader.speedup if leader else None),
                spread_cell(leader.ceiling if leader else None, percent=True),
                number_cell(contest.advantage, f"{contest.advantage:.2f}x")
                if contest.advantage
                else "",
                number_cell(contest.beaten, f"{contest.beaten} of {contest.workloads}")
                if contest.workloads
                else "",
                number_cell(rank.passed, str(rank.passed)),
                number_cell(rank.failed, str(rank.failed)),
            ]
        )
    headers = (
        "rank", "definition", "op_type", "leader", "leader's speedup: geomean (min-max)",
        "leader's share of the ceiling", "peer time / kernel time: geomean",
        "kernels beat every peer at",
        "passed", "failed",
    )  # fmt: skip
    return table(headers, rows, numeric=(0, 4, 5, 6, 7, 8, 9))


def _merged_provenance(collected: Sequence[DefinitionResults]) -> list[Provenance]:
    merged: dict[str, Provenance] = {}
    for results in collected:
        for source in results.provenance.values():
            into = merged.setdefault(source.hardware, Provenance(source.hardware))
            into.devices |= source.devices
            for library, versions in source.libs.items():
                into.libs.setdefault(library, set()).update(versions)
            into.copy_gbps += source.copy_gbps
            into.matmul_tflops += source.matmul_tflops
            into.traces += source.traces
            into.outdated += source.outdated
            into.unknown += source.unknown
            into.first = min(into.first or source.first, source.first)
            into.last = max(into.last, source.last)
    return [merged[k] for k in sorted(merged)]


def navigation(collected: Sequence[DefinitionResults], extra: Sequence[tuple[str, str]]) -> str:
    """Links to every page; a definition's link lists its hardware models, so the filter can
    grey out those with nothing measured on the chosen one."""
    links = [link("summary", "Summary")] + [link(page, label) for page, label in extra]
    groups: dict[str, list[str]] = {}
    for results in collected:
        models = "|".join(results.by_hardware)
        anchor = tag(
            "a",
            text(results.name),
            href=f"#{definition_page_id(results.name)}",
            data_models=models,
        )
        groups.setdefault(results.definition.op_type, []).append(anchor)
    for op_type, anchors in sorted(groups.items()):
        links.append(tag("details", tag("summary", text(op_type)) + "".join(anchors), open="open"))
    return tag("nav", "".join(links), id="pages")
