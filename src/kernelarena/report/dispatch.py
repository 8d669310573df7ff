"""The apply table for people: per shape key the winner, both of its figures (eager per-call time
and GPU time), the margin, how it won, and the winner inside CUDA graph capture where it differs."""

from __future__ import annotations

from rich.table import Table

from kernelarena.dispatch.table import HOST_FACTOR, ApplyTable, KeyEntry, Measurement


def _us(value_ms: float | None) -> str:
    return "" if value_ms is None else f"{value_ms * 1e3:.4g}"


def _figures(m: Measurement) -> str:
    """``eager/gpu`` in us, the eager part left out when it was not measured."""
    return f"{_us(m.eager_ms)}/{_us(m.median_ms)}" if m.eager_ms is not None else _us(m.median_ms)


def table_view(table: ApplyTable, in_graph: ApplyTable | None = None) -> Table:
    """``table`` (ranked by eager call time, what apply uses by default) with, from ``in_graph``
    (the same traces ranked by GPU time), the winner inside CUDA graph capture."""
    title = f"{table.definition} on {table.hardware}"
    if table.borrowed_from:
        title += f" (borrowed from {table.borrowed_from})"
    view = Table(title=title, caption=_caption(table), caption_justify="left")
    columns = ("shape key", "winner", "eager us", "host us", "gpu us", "gpu p20-p80", "margin us")
    for column in columns:
        view.add_column(column, justify="right" if "us" in column else "left")
    view.add_column("decided by")
    if in_graph is not None:
        view.add_column("in graphs (gpu us)")
    view.add_column("runners-up (eager/gpu us)")
    graph_entries = {tuple(e.key): e for e in in_graph.entries} if in_graph else {}
    for entry in table.entries:
        winner = next(m for m in entry.ranked if m.solution == entry.winner)
        others = ", ".join(
            f"{_short(m.solution, table.definition)} {_figures(m)}"
            for m in entry.ranked
            if m.solution != entry.winner
        )
        row = [
            ", ".join(
                f"{a}={v}" for a, v in zip([*table.axes, *table.flags], entry.key, strict=True)
            ),
            _short(entry.winner, table.definition),
            _us(winner.eager_ms),
            _us(winner.host_ms),
            _us(winner.median_ms),
            f"{_us(winner.p20_ms)}-{_us(winner.p80_ms)}",
            _us(entry.margin_ms),
            f"{entry.decided_by}, {entry.ranked_by}",
        ]
        if in_graph is not None:
            row.append(_graph_winner(graph_entries.get(tuple(entry.key)), entry, table.definition))
        view.add_row(*row, others)
    return view


def _graph_winner(graph: KeyEntry | None, entry: KeyEntry, definition: str) -> str:
    if graph is None or graph.winner == entry.winner:
        return "same"
    winner = next(m for m in graph.ranked if m.solution == graph.winner)
    return f"{_short(graph.winner, definition)} {_us(winner.median_ms)}"


def _short(solution: str, definition: str) -> str:
    return solution.removeprefix(definition + "_")


def _caption(table: ApplyTable) -> str:
    if not table.entries:
        return (
            "nothing measured on this hardware or a measured model of its architecture: "
            "every call runs the fallback"
        )
    ranking = ", ".join(
        f"{_short(s, table.definition)} {table.scores[s]:.2f} ({table.coverage[s]} keys)"
        for s in table.ranking()
    )
    best = _short(table.definition_best or "", table.definition)
    lines = []
    if table.borrowed_from:
        lines.append(
            f"borrowed from {table.borrowed_from}: no traces of {table.hardware}; the nearest "
            "measured model of its architecture decides."
        )
    lines += [
        "eager us: per-call wall time of an eager loop (host launch included), which ranks calls "
        "outside CUDA graph capture where every solution has one; gpu us: GPU time, which ranks "
        "the rest and every call inside capture (in graphs).",
        f"host us: the host's submit time a call; where every solution has one, the eager figure "
        f"is max(eager, {HOST_FACTOR:g} x host), its eager time on a host {HOST_FACTOR:g}x slower.",
        "margin: the smallest gap between another solution's p20 and the winner's p80 "
        "(a tie when not positive; eager times have no spread).",
        "unmeasured shapes: nearest key within one power-of-two bucket per axis, else the "
        f"definition-wide best: {best}.",
        f"definition-wide score (geomean of best/own figure): {ranking}",
    ]
    return "\n".join(lines)
