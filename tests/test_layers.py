"""The packages import in one downward order (docs/architecture.md), so do evaluate's wings,
and no module imports itself round a circle. Read from the source, not by importing it: every
``import`` statement counts, at module level or inside a function, except those under ``if TYPE_CHECKING:``."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[1] / "src"

# Bottom to top. A module may import its own group and any layer below; the groups of one layer
# are independent (evaluate and dispatch both stand on compile, runtime and data, neither on the
# other). Names are the parts under kernelarena: a package or a top-level module.
LAYERS: list[list[set[str]]] = [
    [{"data"}, {"paths"}],  # the schemas; where kernelarena's caches are
    [{"runtime"}],  # inputs, comparison, reference checks, hardware, names
    [{"library", "registry", "datasets"}],  # built-in operators, users' solutions, default dataset
    [{"compile", "build"}],  # build: the old name of compile, an alias for one release
    [{"evaluate", "tune"}, {"dispatch"}, {"testing"}],
    [{"report"}, {"ops"}],
    [{"cli", "__main__"}],
]

# evaluate/ inside, bottom to top the same way: its own top-level modules (options, messages,
# process_output, the old names), the sandbox, then the judge and the executors, neither on the
# other: an executor starts a judge by its module path and speaks to it through the protocol.
WINGS: list[list[set[str]]] = [
    [{""}],
    [{"sandbox"}],
    [{"judge"}, {"executors"}],
]

# No package holds a circle any more (evaluate/ held the last, through the worker's helpers).
CIRCLES_ALLOWED_IN: set[str] = set()


def module_names() -> dict[str, Path]:
    found = {}
    for path in sorted((SOURCE / "kernelarena").rglob("*.py")):
        parts = list(path.relative_to(SOURCE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _type_checking(child):
            yield from (i for n in child.orelse for i in _imports_of(n))
            continue
        yield from _imports_of(child)


def _imports_of(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    else:
        yield from _imports(node)


def import_graph() -> dict[str, set[str]]:
    """Module -> the kernelarena modules it imports. ``from a import b`` is an import of ``a.b``
    where that is a module, else of ``a``."""
    modules = module_names()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                wanted = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, *([node.module] if node.module else [])])
                wanted = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                    for a in node.names
                ]
            for target in wanted:
                while target not in modules and "." in target:
                    target = target.rpartition(".")[0]
                if target in modules and target not in (name, "kernelarena"):
                    targets.add(target)
        graph[name] = targets
    return graph


def part(module: str) -> str:
    """The package or top-level module under kernelarena ("" for the package itself)."""
    return module.split(".")[1] if "." in module else ""


def position(module: str) -> tuple[int, int]:
    for level, groups in enumerate(LAYERS):
        for index, group in enumerate(groups):
            if part(module) in group:
                return level, index
    raise AssertionError(f"{module}: in no layer of tests/test_layers.py (add its package)")


GRAPH = import_graph()


def test_every_module_has_a_layer() -> None:
    for module in GRAPH:
        if module != "kernelarena":  # the package: names imported lazily, by string
            position(module)


def test_packages_import_downward_only() -> None:
    wrong = []
    for module, targets in sorted(GRAPH.items()):
        if module == "kernelarena":
            continue
        level, group = position(module)
        for target in sorted(targets):
            their_level, their_group = position(target)
            if their_level > level or (their_level == level and their_group != group):
                wrong.append(f"{module} -> {target}")
    assert not wrong, "imports against the layer order (docs/architecture.md):\n" + "\n".join(wrong)


def wing(module: str) -> str:
    """The wing of evaluate/ a module of it is in ("" for the modules at its top)."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[2] in {"sandbox", "judge", "executors"} else ""


def wing_position(module: str) -> tuple[int, int]:
    for level, groups in enumerate(WINGS):
        for index, group in enumerate(groups):
            if wing(module) in group:
                return level, index
    raise AssertionError(f"{module}: in no wing of tests/test_layers.py")


def test_wings_import_downward_only() -> None:
    wrong = []
    for module, targets in sorted(GRAPH.items()):
        if part(module) != "evaluate":
            continue
        level, group = wing_position(module)
        for target in sorted(t for t in targets if part(t) == "evaluate"):
            their_level, their_group = wing_position(target)
            if their_level > level or (their_level == level and their_group != group):
                wrong.append(f"{module} -> {target}")
    assert not wrong, "imports against the order of evaluate's wings:\n" + "\n".join(wrong)


def test_every_wing_has_modules() -> None:
    found = {wing(module) for module in GRAPH if part(module) == "evaluate"}
    assert found == {"", "sandbox", "judge", "executors"}


def _named_modules(path: Path) -> Iterator[str]:
    """Every module a file names: in its imports, and in its strings (``python -m`` paths)."""
    try:
        tree = ast.parse(path.read_text(), str(path))
    except SyntaxError:  # a fixture that is wrong on purpose
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield from node.value.split()


def test_nothing_uses_the_old_names_of_evaluate_modules() -> None:
    """The old names (evaluate/old_names.py) are for code outside this repository."""
    from kernelarena.evaluate.old_names import MOVED

    wrong = sorted(
        f"{path.relative_to(SOURCE.parent)}: {name}"
        for folder in ("src", "tests", "benchmarks")
        for path in (SOURCE.parent / folder).rglob("*.py")
        if path.name not in {"old_names.py", "test_old_names.py"}
        for name in set(_named_modules(path))
        if name in MOVED
    )
    assert not wrong, "name the modules of evaluate/ by their wings:\n" + "\n".join(wrong)


def test_dispatch_uses_only_the_public_api_of_compile() -> None:
    """dispatch/ stands on compile's package (``kernelarena.compile``), not on its modules."""
    wrong = [
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        if part(module) == "dispatch" and module != "kernelarena.dispatch"
        for target in targets
        if part(target) == "compile" and target != "kernelarena.compile"
    ]
    assert not wrong, "\n".join(wrong)


def test_nothing_imports_the_old_name_of_compile() -> None:
    wrong = [module for module, targets in GRAPH.items() if "kernelarena.build" in targets]
    assert not wrong, "import kernelarena.compile instead of its old name in: " + ", ".join(wrong)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of two or more modules (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1:
                    found.append(sorted(members))
    return found


def test_no_import_circles() -> None:
    found = [c for c in circles(GRAPH) if not {part(m) for m in c} <= CIRCLES_ALLOWED_IN]
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ],
)
def test_circles_are_found(graph: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert circles(graph) == expected


def test_the_graph_sees_lazy_imports_and_not_type_checking_ones() -> None:
    # dispatch.state loads the default dataset inside enable_apply; compile.base names its
    # builders nowhere, not even for types.
    assert "kernelarena.datasets" in GRAPH["kernelarena.dispatch.state"]
    assert "kernelarena.dispatch.runtime" in GRAPH["kernelarena.dispatch.state"]
    assert not any(t.startswith("kernelarena.compile.") for t in GRAPH["kernelarena.compile.base"])
