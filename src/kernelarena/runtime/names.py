"""Which definitions a name chooses: one answer for the command line, the runner and apply.

A name is a definition's own name, else a family (every definition tagged ``family:<name>``:
``rmsnorm`` -> rmsnorm_fp32, _fp16, _bf16) or an op_type (every definition of it). A definition's
own name wins over a family or op_type of the same name, so that naming one definition never
chooses more. A list chooses what each of its names does; no names choose every definition.

Every name must choose something: one that matches nothing is a typo or a definition that did not
load, and a run, a table or a dispatch over the rest would hide it. ``UnknownNames`` names each
such name; where a caller has a documented way on (apply runs the decorated body), it says so and
takes it.
"""

from __future__ import annotations

from collections.abc import Sequence

from kernelarena.data import Definition, TraceSet


class UnknownNames(ValueError):
    """Names that match no definition, family or op_type of a dataset."""

    def __init__(self, names: Sequence[str], known: Sequence[str]) -> None:
        self.names = list(names)
        self.known = sorted(known)
        quoted = ", ".join(f"'{n}'" for n in self.names)
        verb = "matches" if len(self.names) == 1 else "match"
        self.brief = f"{quoted} {verb} no definition, family or op_type"
        super().__init__(f"{self.brief}; known definitions: {', '.join(self.known)}")


def matching(trace_set: TraceSet, name: str) -> list[Definition]:
    """The definitions one name chooses: its own definition, else its family's or op_type's."""
    own = trace_set.definitions.get(name)
    if own is not None:
        return [own]
    return [
        d for d in trace_set.definitions.values() if f"family:{name}" in d.tags or d.op_type == name
    ]


def definitions_named(trace_set: TraceSet, names: str | Sequence[str] | None) -> list[Definition]:
    """The definitions ``names`` choose, each once, in the order named; every definition when
    none are named. Raises ``UnknownNames`` naming every name that chooses nothing."""
    if names is None or (not isinstance(names, str) and not names):
        return list(trace_set.definitions.values())
    chosen: dict[str, Definition] = {}
    unknown: list[str] = []
    for name in [names] if isinstance(names, str) else names:
        found = matching(trace_set, name)
        if not found:
            unknown.append(name)
        chosen.update((d.name, d) for d in found)
    if unknown:
        raise UnknownNames(unknown, list(trace_set.definitions))
    return list(chosen.values())
