"""Builder protocol, the Runnable it returns, and the signature check done at build time."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kernelarena.data import Definition, Language, Solution


class BuildError(Exception):
    """The solution cannot be turned into a callable: compile error, import error, bad signature."""


class DependencyMissing(BuildError):
    """An optional dependency (a peer's package, a GPU) is not here: the solution is skipped."""


@dataclass
class Runnable:
    """A built solution. ``call(args)`` takes inputs then (in DPS) non-aliased outputs."""

    definition: Definition
    solution: Solution
    fn: Callable[..., Any]
    destination_passing_style: bool
    artifact: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    adapt: Callable[[tuple[Any, ...]], tuple[Any, ...]] | None = None

    def __call__(self, *args: Any) -> Any:
        if self.adapt is not None:
            args = self.adapt(args)
        return self.fn(*args)


class Builder(Protocol):
    languages: tuple[Language, ...]

    def build(self, definition: Definition, solution: Solution, device: str) -> Runnable: ...


def argument_names(definition: Definition, destination_passing_style: bool) -> list[str]:
    names = list(definition.inputs)
    if destination_passing_style:
        names += [n for n, spec in definition.outputs.items() if spec.aliases is None]
    return names


def check_signature(fn: Callable[..., Any], definition: Definition, solution: Solution) -> None:
    """The entry point must accept the definition's arguments positionally, in order."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # compiled functions (tvm-ffi) carry no Python signature
    expected = argument_names(definition, solution.spec.destination_passing_style)
    try:
        signature.bind(*expected)
    except TypeError as error:
        style = (
            "inputs then outputs (destination-passing style)"
            if solution.spec.destination_passing_style
            else "inputs"
        )
        raise BuildError(
            f"signature: {solution.spec.entry_point}{signature} does not accept the "
            f"{len(expected)} arguments ({', '.join(expected)}): {style}; {error}"
        ) from None


# spec.binding of CUDA and C++ solutions (FlashInfer-Bench's names); none means tvm-ffi.
BINDINGS = ("tvm-ffi", "torch")


def builder_for(solution: Solution) -> Builder:
    from kernelarena.build.cuda import CudaBuilder
    from kernelarena.build.cute_dsl import CuteDslBuilder
    from kernelarena.build.python import PythonBuilder
    from kernelarena.build.tilelang import TileLangBuilder
    from kernelarena.build.torch_extension import TorchExtensionBuilder

    language = solution.spec.language
    if language in (Language.CUDA, Language.CPP):
        binding = solution.spec.binding or "tvm-ffi"
        if binding not in BINDINGS:
            raise BuildError(f"spec.binding: '{binding}' is not one of {list(BINDINGS)}")
        return TorchExtensionBuilder() if binding == "torch" else CudaBuilder()
    if language in PythonBuilder.languages:
        return PythonBuilder()
    if language in TileLangBuilder.languages:
        return TileLangBuilder()
    if language in CuteDslBuilder.languages:
        return CuteDslBuilder()
    raise BuildError(f"spec.language: no builder for '{language.value}' here")


def build_solution(definition: Definition, solution: Solution, device: str = "cpu") -> Runnable:
    return builder_for(solution).build(definition, solution, device)
