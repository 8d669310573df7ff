"""How a built-in operator is declared: one ``OperatorSpec`` in ``library/<op>/__init__.py``.

An operator folder holds ``reference.py`` (the float32 reference: ``run`` and, where random inputs
need shaping, ``make_inputs``), the solutions in ``triton/``, ``cuda/`` and ``torch/``, and the
``OPERATOR`` spec. A spec is expanded into FlashInfer-Trace objects: one Definition per variant
(usually per dtype), one Solution per (variant, solution), one Workload per (variant, workload).
Nothing here imports torch, so listing the library stays fast.

Kernel helpers several operators use live once, in ``library/_shared/``. A solution names the ones
it uses (``SolutionSpec.shared``) and each is embedded among its sources as ``_shared/<file>``, next
to the entry file, so the Solution stays self-contained: kernelarena and FlashInfer-Bench both write
the sources into one folder, put that folder on the include path of a CUDA build and import a
Python entry as a member of a package made of it. So ``#include "_shared/rows.cuh"`` (from a shared
header too) and ``from ._shared import tuning`` (``from . import tuning`` inside ``_shared``)
resolve the same way in both, and in an exported dataset.

A reference is one self-contained text in its Definitions. It may still import a module of
``library/_shared/`` (``from kernelarena.library._shared.<module> import <names>``, so the file
is plain, importable Python in the repository): ``composed_reference`` inlines that module into
the text a Definition carries.
"""

from __future__ import annotations

import ast
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelarena.data import (
    AxisConst,
    AxisVar,
    BuildSpec,
    Definition,
    RandomInput,
    ScalarInput,
    Solution,
    SourceFile,
    TensorSpec,
    Tolerance,
    Workload,
)

_UUID_NAMESPACE = uuid.UUID("6f1d2b1e-4c55-4a8e-9a59-0d6c1b0e7a11")
SHARED_FOLDER = Path(__file__).parent / "_shared"
SHARED_PREFIX = "_shared/"
# What names a shared file in a source: a CUDA include of "_shared/<file>", or a Python import of
# ._shared.<module> / from ._shared import <modules> (from an entry), from .<module> / from .
# import <modules> (from a shared module).
_SHARED_INCLUDE = re.compile(r'^\s*#\s*include\s+"_shared/([^"]+)"', re.MULTILINE)
_SHARED_IMPORT = re.compile(
    r"^[ \t]*from[ \t]+\.(\w+)?(?:\.(\w+))?[ \t]+import[ \t]+(?:\(([^)]*)\)|([\w \t,]+))",
    re.MULTILINE,
)


def var(description: str | None = None) -> AxisVar:
    return AxisVar(type="var", description=description)


def const(value: int, description: str | None = None) -> AxisConst:
    return AxisConst(type="const", value=value, description=description)


def derived(expression: str, description: str | None = None) -> AxisVar:
    """A var axis computed from others, e.g. ``derived("k // 2")`` for packed FP4."""
    return AxisVar(type="var", expression=expression, description=description)


def tensor(
    shape: list[str], dtype: str, description: str | None = None, aliases: str | None = None
) -> dict[str, Any]:
    """A tensor; ``dtype`` may be a template such as ``"{dtype}"`` filled per variant."""
    spec: dict[str, Any] = {"shape": shape, "dtype": dtype}
    if description:
        spec["description"] = description
    if aliases:
        spec["aliases"] = aliases
    return spec


def scalar(dtype: str, description: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"shape": None, "dtype": dtype}
    if description:
        spec["description"] = description
    return spec


@dataclass(frozen=True)
class Variant:
    """One Definition of the operator: ``{key}`` templates in dtypes are filled from ``params``."""

    suffix: str
    params: Mapping[str, str] = field(default_factory=dict)
    tolerances: Mapping[str, Tolerance] | None = None
    description: str | None = None


@dataclass(frozen=True)
class SolutionSpec:
    """Sources are files of the operator folder, stored relative to the entry file's folder, and
    the files of library/_shared/ named in ``shared`` (``"tuning.py"``, ``"rows.cuh"``), stored as
    ``_shared/<file>``."""

    name: str
    language: str
    entry: str
    extra_files: tuple[str, ...] = ()
    targets: tuple[str, ...] = ("cuda",)
    description: str = ""
    destination_passing_style: bool = True
    dependencies: tuple[str, ...] = ()
    variants: tuple[str, ...] | None = None
    author: str = "kernelarena"
    shared: tuple[str, ...] = ()


def triton_and_cuda(
    name: str,
    symbol: str,
    triton_description: str,
    cuda_description: str,
    *,
    triton_shared: tuple[str, ...],
    cuda_shared: tuple[str, ...],
) -> tuple[SolutionSpec, SolutionSpec]:
    """An operator's own pair of kernels: ``triton/<name>.py`` (on CUDA, and on CPU through the
    interpreter) and ``cuda/<name>.cu`` (sm_90a), entry ``symbol`` in each."""
    return (
        SolutionSpec(
            "triton",
            "triton",
            f"triton/{name}.py::{symbol}",
            shared=triton_shared,
            targets=("cuda", "cpu"),
            description=triton_description,
        ),
        SolutionSpec(
            "cuda",
            "cuda",
            f"cuda/{name}.cu::{symbol}",
            shared=cuda_shared,
            targets=("sm_90a",),
            description=cuda_description,
        ),
    )


def shared_references(path: str, content: str) -> set[str]:
    """The files of library/_shared/ a source names (see _SHARED_INCLUDE and _SHARED_IMPORT)."""
    named = set(_SHARED_INCLUDE.findall(content))
    if path.endswith(".py"):
        in_shared = path.startswith(SHARED_PREFIX)
        for match in _SHARED_IMPORT.finditer(content):
            package, module, *names = match.groups()
            if in_shared and package is None:  # from . import a, b
                modules = _imported_names(names[0] or names[1])
            elif in_shared:  # from .a import x
                modules = [package]
            elif package == "_shared":  # from ._shared.a import x; from ._shared import a, b
                modules = [module] if module else _imported_names(names[0] or names[1])
            else:  # an import among the operator's own files
                continue
            named |= {f"{m}.py" for m in modules}
    return named


def _imported_names(names: str) -> list[str]:
    return [n.split()[0] for n in names.split(",") if n.strip()]


def _embedded(folder: Path, spec: SolutionSpec, sources: list[SourceFile]) -> list[SourceFile]:
    """``sources`` with the shared files ``spec`` declares; every shared file a source names must
    be declared (so an exported solution never misses one)."""
    shared = [
        SourceFile(
            path=SHARED_PREFIX + name,
            content=(SHARED_FOLDER / name).read_text(encoding="utf-8"),
        )
        for name in spec.shared
    ]
    embedded = [*sources, *shared]
    named = set().union(*(shared_references(s.path, s.content) for s in embedded))
    missing = sorted(named - set(spec.shared))
    if missing:
        raise ValueError(
            f"library/{folder.name}: solution '{spec.name}' uses {missing} from library/_shared/; "
            "name them in its SolutionSpec(shared=...)"
        )
    return embedded


_SHARED_MODULE = "kernelarena.library._shared."


def _split(path: Path, text: str) -> tuple[str, list[ast.Import | ast.ImportFrom], str]:
    """A Python file as (its lines before its leading imports, those imports, its lines after)."""
    statements = ast.parse(text, filename=str(path)).body
    first = statements[0] if statements else None
    docstring = int(isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant))
    imports: list[ast.Import | ast.ImportFrom] = []
    for statement in statements[docstring:]:
        if not isinstance(statement, (ast.Import, ast.ImportFrom)):
            break
        imports.append(statement)
    if imports:
        start, end = imports[0].lineno - 1, imports[-1].end_lineno or 0
    else:  # the lines before the body are the docstring's, if any
        start = end = (first.end_lineno or 0) if first is not None and docstring else 0
    lines = text.splitlines(keepends=True)
    return "".join(lines[:start]), imports, "".join(lines[end:])


def composed_reference(path: Path, shared_folder: Path = SHARED_FOLDER) -> str:
    """The reference text a Definition carries: ``path``'s, with each module of library/_shared/
    it imports among its leading imports (``from kernelarena.library._shared.<module> import
    <names>``) inlined, so that the text stands alone: the file's lines before its imports, the
    union of both files' other imports, the shared module's body (without what precedes its
    imports, such as its docstring), then the file's own body. A file importing no shared module is
    returned as it is. A shared module is not composed in turn: it must not import kernelarena."""
    text = path.read_text(encoding="utf-8")
    head, imports, body = _split(path, text)
    kept, inlined, bodies = [], [], {}
    for statement in imports:
        module = (statement.module or "") if isinstance(statement, ast.ImportFrom) else ""
        if not module.startswith(_SHARED_MODULE):
            kept.append(ast.get_source_segment(text, statement) or "")
            continue
        shared = shared_folder / f"{module.removeprefix(_SHARED_MODULE)}.py"
        if not shared.is_file():
            raise ValueError(f"{path}: imports {module}, but {shared} does not exist")
        shared_text = shared.read_text(encoding="utf-8")
        _, shared_imports, bodies[shared] = _split(shared, shared_text)
        inlined += [ast.get_source_segment(shared_text, s) or "" for s in shared_imports]
    for line in [*kept, *inlined]:
        if "kernelarena" in line:
            raise ValueError(
                f"{path}: its reference would import {line!r}; only the reference file's own "
                f"'from {_SHARED_MODULE}<module> import ...' lines are inlined"
            )
    if not bodies:
        return text
    # Unique, the shared modules' imports first (as their bodies come first), __future__ at the top.
    merged = sorted(
        dict.fromkeys([*inlined, *kept]), key=lambda s: not s.startswith("from __future__")
    )
    parts = ["\n".join(merged), *(b.strip("\n") for b in bodies.values()), body.strip("\n")]
    return head + "\n\n\n".join(parts) + "\n"


@dataclass(frozen=True)
class WorkloadSpec:
    axes: Mapping[str, int]
    scalars: Mapping[str, bool | int | float] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)
    variants: tuple[str, ...] | None = None


@dataclass(frozen=True)
class OperatorSpec:
    name: str
    op_type: str
    description: str
    axes: Mapping[str, AxisConst | AxisVar]
    inputs: Mapping[str, Mapping[str, Any]]
    outputs: Mapping[str, Mapping[str, Any]]
    variants: tuple[Variant, ...]
    workloads: tuple[WorkloadSpec, ...]
    solutions: tuple[SolutionSpec, ...]
    folder: Path
    reference: str = "reference.py"
    constraints: tuple[str, ...] = ()
    bytes_moved: str | None = None
    flops: str | None = None
    tags: tuple[str, ...] = ()

    def definition_name(self, variant: Variant) -> str:
        return f"{self.name}_{variant.suffix}" if variant.suffix else self.name

    def definitions(self) -> list[Definition]:
        reference = composed_reference(self.folder / self.reference)
        return [self._definition(v, reference) for v in self.variants]

    def _definition(self, variant: Variant, reference: str) -> Definition:
        def fill(specs: Mapping[str, Mapping[str, Any]]) -> dict[str, TensorSpec]:
            return {
                name: TensorSpec.model_validate(
                    {**spec, "dtype": str(spec["dtype"]).format(**variant.params)}
                )
                for name, spec in specs.items()
            }

        payload: dict[str, Any] = {
            "name": self.definition_name(variant),
            "op_type": self.op_type,
            "description": variant.description or self.description,
            "tags": [*self.tags, f"family:{self.name}"],
            "axes": dict(self.axes),
            "inputs": fill(self.inputs),
            "outputs": fill(self.outputs),
            "reference": reference,
        }
        if self.constraints:
            payload["constraints"] = list(self.constraints)
        if variant.tolerances:
            payload["tolerances"] = dict(variant.tolerances)
        if self.bytes_moved:
            payload["bytes_moved"] = self.bytes_moved
        if self.flops:
            payload["flops"] = self.flops
        return Definition(**payload)

    def solutions_for(self, variant: Variant) -> list[Solution]:
        return [self._solution(variant, spec) for spec in self.solution_specs(variant)]

    def solution_specs(self, variant: Variant) -> list[SolutionSpec]:
        """The solutions ``variant`` has, as declared (``solution_name`` names each)."""
        return [s for s in self.solutions if s.variants is None or variant.suffix in s.variants]

    def solution_name(self, variant: Variant, spec: SolutionSpec) -> str:
        return f"{self.definition_name(variant)}_{spec.name}"

    def _solution(self, variant: Variant, spec: SolutionSpec) -> Solution:
        definition = self.definition_name(variant)
        entry_file, symbol = spec.entry.split("::")
        base = (self.folder / entry_file).parent
        sources = [
            SourceFile(
                path=str((self.folder / f).relative_to(base)),
                content=(self.folder / f).read_text(encoding="utf-8"),
            )
            for f in [entry_file, *spec.extra_files]
        ]
        sources = _embedded(self.folder, spec, sources)
        return Solution(
            name=self.solution_name(variant, spec),
            definition=definition,
            author=spec.author,
            description=spec.description or None,
            spec=BuildSpec(
                language=spec.language,  # type: ignore[arg-type]
                target_hardware=list(spec.targets),
                entry_point=f"{sources[0].path}::{symbol}",
                dependencies=list(spec.dependencies),
                destination_passing_style=spec.destination_passing_style,
            ),
            sources=sources,
        )

    def solution_named(self, name: str) -> Solution | None:
        """The solution called ``name``, read alone (its sources only), or None."""
        for variant in self.variants:
            for spec in self.solution_specs(variant):
                if self.solution_name(variant, spec) == name:
                    return self._solution(variant, spec)
        return None

    def workloads_for(self, variant: Variant, definition: Definition) -> list[Workload]:
        made = []
        for spec in self.workloads:
            if spec.variants is not None and variant.suffix not in spec.variants:
                continue
            inputs: dict[str, Any] = {
                name: ScalarInput(type="scalar", value=spec.scalars[name])
                if name in spec.scalars
                else RandomInput(type="random")
                for name in definition.inputs
            }
            axes = definition.resolve_axes(spec.axes)
            listed = {n: axes[n] for n in definition.var_axes}
            key = repr(
                (
                    definition.name,
                    sorted(listed.items()),
                    sorted(spec.scalars.items()),
                    sorted(spec.params.items()),
                )
            )
            workload: dict[str, Any] = {
                "uuid": str(uuid.uuid5(_UUID_NAMESPACE, key)),
                "axes": listed,
                "inputs": inputs,
                "tags": list(spec.tags),
            }
            if spec.params:
                workload["params"] = dict(spec.params)
            made.append(Workload(**workload))
        return made
