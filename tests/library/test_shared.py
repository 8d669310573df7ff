"""library/_shared/: the kernel helpers solutions embed. Every helper a solution uses travels in its
sources as ``_shared/<file>``, so the solution (and its export to FlashInfer-Trace) stands alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from kernelarena.cli import app
from kernelarena.data import SourceFile
from kernelarena.library import load_library
from kernelarena.library._spec import (
    SHARED_FOLDER,
    SHARED_PREFIX,
    SolutionSpec,
    _embedded,
    shared_references,
)


def test_every_shared_file_a_source_names_is_embedded() -> None:
    solutions = load_library().solutions.values()
    embedding = [s for s in solutions if any(f.path.startswith(SHARED_PREFIX) for f in s.sources)]
    assert len(embedding) > 20
    for solution in embedding:
        embedded = {f.path.removeprefix(SHARED_PREFIX) for f in solution.sources}
        for source in solution.sources:
            assert shared_references(source.path, source.content) <= embedded, solution.name


def test_every_shared_file_is_embedded_somewhere() -> None:
    used = {
        f.path.removeprefix(SHARED_PREFIX)
        for s in load_library().solutions.values()
        for f in s.sources
        if f.path.startswith(SHARED_PREFIX)
    }
    present = {p.name for p in SHARED_FOLDER.iterdir() if p.suffix in (".py", ".cuh")}
    assert present == used


@pytest.mark.parametrize(
    ("path", "content", "named"),
    [
        ("k.cu", '#include "_shared/a.cuh"\n#include <cuda.h>\n', {"a.cuh"}),
        ("_shared/a.cuh", '#include "_shared/b.cuh"\n', {"b.cuh"}),
        ("k.py", "from ._shared import tuning, tiles as t\nfrom .details import x\n", {"tuning.py", "tiles.py"}),
        ("k.py", "from ._shared.row_norm import (\n    RowNorm,\n    to_storage,\n)\n", {"row_norm.py"}),
        ("_shared/a.py", "from . import tuning\nfrom .tiles import Tiles\n", {"tuning.py", "tiles.py"}),
        ("k.py", "from .nvfp4_gemv_details import block_products\n", set()),
    ],
)  # fmt: skip
def test_shared_references(path: str, content: str, named: set[str]) -> None:
    assert shared_references(path, content) == named


def test_a_shared_file_not_declared_is_an_error() -> None:
    spec = SolutionSpec("triton", "triton", "triton/k.py::run", shared=("tiles.py",))
    sources = [SourceFile(path="k.py", content="from ._shared import tiles\n")]
    with pytest.raises(ValueError, match=r"\['tuning.py'\].*shared="):
        _embedded(Path("library/op"), spec, sources)  # tiles.py imports tuning.py


def _exported_solution(tmp_path: Path, name: str) -> tuple[Any, Any]:
    fib = pytest.importorskip("flashinfer_bench.data")
    empty, exported = tmp_path / "empty", tmp_path / "exported"
    empty.mkdir()
    result = CliRunner().invoke(app, ["export", str(exported), "--dataset", str(empty)])
    assert result.exit_code == 0, result.output
    theirs = fib.TraceSet.from_path(str(exported))
    solution = load_library().solutions[name]
    (their_solution,) = [s for s in theirs.solutions[solution.definition] if s.name == name]
    return theirs.definitions[solution.definition], their_solution


@pytest.mark.timeout(600)
def test_an_exported_solution_with_shared_files_runs_in_flashinfer_bench(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Triton rmsnorm, exported and built by FlashInfer-Bench's own builder (its package layout,
    its sys.path), finds its _shared modules and computes the norm (under the interpreter on CPU)."""
    definition, solution = _exported_solution(tmp_path, "rmsnorm_fp32_triton")
    assert {s.path for s in solution.sources} >= {"_shared/row_norm.py", "_shared/tuning.py"}
    from flashinfer_bench.compile.builders import TritonBuilder

    monkeypatch.setenv("FIB_CACHE_PATH", str(tmp_path / "fib-cache"))
    runnable = TritonBuilder().build(definition, solution)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(7, 1000, device=device)
    weight = torch.randn(1000, device=device)
    out = torch.full_like(x, float("nan"))
    runnable(x, weight, 1e-6, out)  # destination-passing style: out is written
    expected = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-6) * weight
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
