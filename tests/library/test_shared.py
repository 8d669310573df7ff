"""library/_shared/: the kernel helpers solutions embed. Every helper a solution uses travels in its
sources as ``_shared/<file>``, so the solution (and its export to FlashInfer-Trace) stands alone."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from kernelarena.cli import app
from kernelarena.data import SourceFile
from kernelarena.library import load_library, operator_specs
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


def test_every_shared_file_is_embedded_or_inlined_somewhere() -> None:
    """Used by a solution (embedded) or by a reference (inlined: see test_composed_reference)."""
    used = {
        f.path.removeprefix(SHARED_PREFIX)
        for s in load_library().solutions.values()
        for f in s.sources
        if f.path.startswith(SHARED_PREFIX)
    }
    for spec in operator_specs():
        statements = ast.parse((spec.folder / spec.reference).read_text(encoding="utf-8")).body
        used |= {
            f"{s.module.removeprefix('kernelarena.library._shared.')}.py"
            for s in statements
            if isinstance(s, ast.ImportFrom)
            and (s.module or "").startswith("kernelarena.library._shared.")
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


def test_sdpa_peers_pass_grouped_heads_and_expand_them_where_a_backend_refuses() -> None:
    """``sdpa_heads.with_grouped_heads``: K/V as they are while the backend takes them; repeated
    to the queries' heads, from then on, once it refuses; ``run_into``: the empty cases."""
    from kernelarena.library._shared import sdpa_heads

    seen: list[int] = []

    def refuses_grouped(q: Any, k: Any, v: Any, scale: float) -> tuple[Any, Any]:
        seen.append(k.shape[1])
        if k.shape[1] != q.shape[1]:
            raise RuntimeError("grouped heads not supported")
        return q * scale, q[..., 0]

    q, k = torch.randn(1, 4, 3, 8), torch.randn(1, 2, 5, 8)
    out, _ = sdpa_heads.with_grouped_heads(refuses_grouped, q, k, k, 0.5)
    assert torch.equal(out, q * 0.5) and seen == [2, 4]
    sdpa_heads.with_grouped_heads(refuses_grouped, q, k, k, 0.5)
    assert seen == [2, 4, 4]  # the refusal is remembered

    o, lse = torch.full((1, 4, 3, 8), 7.0), torch.full((1, 4, 3), 7.0)
    sdpa_heads.run_into(None, q, k[:, :, :0], k[:, :, :0], 1.0, False, o, lse)
    assert torch.equal(o, torch.zeros_like(o)) and bool((lse == float("-inf")).all())
    sdpa_heads.run_into(None, q[:0], k, k, 1.0, False, o[:0], lse[:0])  # no query: nothing
