"""Small HTML helpers: every text is escaped here, so pages are built from safe pieces."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kernelarena.report.html.ranking import Spread


def text(value: object) -> str:
    return html.escape(str(value), quote=True)


def tag(name: str, content: str = "", **attributes: object) -> str:
    """``<name attributes>content</name>``; ``content`` is HTML already; attribute names take
    ``_`` for ``-`` and a trailing ``_`` for Python keywords (``class_``); None drops one."""
    rendered = "".join(
        f' {key.rstrip("_").replace("_", "-")}="{text(value)}"'
        for key, value in attributes.items()
        if value is not None
    )
    return f"<{name}{rendered}>{content}</{name}>"


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    row_attributes: Iterable[Mapping[str, object]] | None = None,
    numeric: Sequence[int] = (),
    class_: str = "sortable",
) -> str:
    """A table of HTML cells; columns listed in ``numeric`` are right-aligned and sort as
    numbers (each such cell carries its value in ``data-value``)."""
    head = "".join(
        tag("th", text(h), class_="num" if i in numeric else None) for i, h in enumerate(headers)
    )
    body = []
    attributes = iter(row_attributes or [])
    for row in rows:
        cells = "".join(
            tag("td", c, class_="num" if i in numeric else None) for i, c in enumerate(row)
        )
        body.append(tag("tr", cells, **next(attributes, {})))
    return tag("table", tag("thead", tag("tr", head)) + tag("tbody", "".join(body)), class_=class_)


def number_cell(value: float | None, shown: str) -> str:
    """A cell text with its sort value (an empty cell sorts last)."""
    if value is None:
        return ""
    return tag("span", text(shown), data_value=f"{value:.6g}")


def spread_cell(spread: Spread | None, unit: str = "x", percent: bool = False) -> str:
    if spread is None:
        return ""
    if percent:
        shown = f"{spread.center:.0%} ({spread.low:.0%}-{spread.high:.0%})"
    else:
        shown = f"{spread.center:.2f}{unit} ({spread.low:.2f}-{spread.high:.2f})"
    return number_cell(spread.center, shown)


def page_id(prefix: str, name: str) -> str:
    """An element id for a page: letters, digits, ``_`` and ``-`` only."""
    return f"{prefix}-{re.sub(r'[^A-Za-z0-9_-]+', '-', name)}"


def link(page: str, label: str) -> str:
    return tag("a", text(label), href=f"#{page}")


def json_script(element_id: str, payload: Any) -> str:
    """JSON inside a script element: ``</`` escaped so no string in it can close the element."""
    encoded = json.dumps(payload, separators=(",", ":"), allow_nan=False)
    encoded = encoded.replace("</", "<\\/").replace("<!--", "<\\u0021--")
    return f'<script type="application/json" id="{text(element_id)}">{encoded}</script>'
