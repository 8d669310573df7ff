"""What a definition's value constraints ask of a workload before any input is drawn: a random
input that a constraint reads in a form the input generator cannot meet
(``constraints.ValuePlan.unmet``) must come from a file, or from the reference's ``make_inputs``.
Apart from ``constraints`` so that it, reading definitions and workloads, sits above both."""

from __future__ import annotations

import ast

from kernelarena.data.definition import Definition
from kernelarena.data.expressions import names
from kernelarena.data.workload import Workload


def unmet_constraint_problems(definition: Definition, workload: Workload) -> list[tuple[str, str]]:
    """(field, message) for each plain random input that a value constraint of no generated form
    reads, where the reference has no ``make_inputs`` to make it."""
    unmet = definition.value_plan.unmet
    if not unmet or defines_make_inputs(definition.reference):
        return []
    problems = []
    for constraint in unmet:
        for name in sorted(names(constraint) & set(definition.inputs)):
            given = workload.inputs.get(name)
            if given is not None and given.type in ("safetensors", "scalar"):
                continue
            if definition.value_plan.generated(name) or definition.inputs[name].shape is None:
                continue  # drawn for another constraint, or a scalar: the check on the inputs tells
            problems.append(
                (
                    f"workload.inputs.{name}",
                    f"random, but constraint '{constraint}' reads its values in a form the input "
                    "generator cannot meet: give it as safetensors, or define make_inputs in the "
                    "reference",
                )
            )
    return problems


def defines_make_inputs(reference: str) -> bool:
    try:
        module = ast.parse(reference)
    except SyntaxError:
        return False
    return any(isinstance(n, ast.FunctionDef) and n.name == "make_inputs" for n in module.body)
