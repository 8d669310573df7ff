"""The apply table for people: per shape key the winner, its median, the margin and how it won."""

from __future__ import annotations

from rich.table import Table

from kernelarena.dispatch.table import ApplyTable


def _us(value_ms: float | None) -> str:
    return "" if value_ms is None else f"{value_ms * 1e3:.4g}"


def table_view(table: ApplyTable) -> Table:
    view = Table(
        title=f"{table.definition} on {table.hardware}",
        caption=_caption(table),
        caption_justify="left",
    )
    for column in ("shape key", "winner", "median us", "p20-p80 us", "margin us", "decided by"):
        view.add_column(column, justify="right" if "us" in column else "left")
    view.add_column("runners-up (median us)")
    for entry in table.entries:
        winner = next(m for m in entry.ranked if m.solution == entry.winner)
        others = ", ".join(
            f"{_short(m.solution, table.definition)} {_us(m.median_ms)}"
            for m in entry.ranked
            if m.solution != entry.winner
        )
        view.add_row(
            ", ".join(f"{a}={v}" for a, v in zip(table.axes, entry.key, strict=True)),
            _short(entry.winner, table.definition),
            _us(winner.median_ms),
            f"{_us(winner.p20_ms)}-{_us(winner.p80_ms)}",
            _us(entry.margin_ms),
            entry.decided_by,
            others,
        )
    return view


def _short(solution: str, definition: str) -> str:
    return solution.removeprefix(definition + "_")


def _caption(table: ApplyTable) -> str:
    if not table.entries:
        return "nothing measured on this hardware: every call runs the fallback"
    ranking = ", ".join(
        f"{_short(s, table.definition)} {table.scores[s]:.2f} ({table.coverage[s]} keys)"
        for s in table.ranking()
    )
    best = _short(table.definition_best or "", table.definition)
    return (
        f"margin: the smallest gap between another solution's p20 and the winner's p80 "
        f"(a tie when not positive).\nunmeasured shapes: nearest key within one power-of-two "
        f"bucket per axis, else the definition-wide best: {best}.\n"
        f"definition-wide score (geomean of best/own median): {ranking}"
    )
