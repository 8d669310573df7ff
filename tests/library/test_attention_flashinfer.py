"""FlashInfer (flashinfer-python) as a peer of attention_prefill, attention_prefill_varlen and
attention_decode: ``torch/flashinfer_*.py`` in each operator folder.

On CPU: the solution files import without FlashInfer (it is imported on the first call), the
registered ``flashinfer`` solutions (both dtypes of each operator) are valid Solutions whose
``run`` takes the definition's arguments, the declared dependency resolves to the ``flashinfer``
module where it is installed (and is a skip where it is not), and the decode peer's page table (the cache read in
place as FlashInfer pages) addresses exactly the first seq_lens[b] positions of every sequence,
for the definition's layout and the token-major (BSHD) one.

On a GPU with FlashInfer (``gpu``): every library workload (smoke, correctness, large) in both
dtypes against the float32 reference, outputs NaN-poisoned and inputs checked unchanged (the
helper of test_attention.py). FlashInfer compiles its kernels with nvcc on first use (minutes for
its Hopper modules); the first case of a dtype builds that dtype's in one parallel ninja run.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from pathlib import Path

import pytest
import torch

from kernelarena.compile import DependencyMissing
from kernelarena.compile.base import argument_names
from kernelarena.compile.python import check_python_dependencies
from tests.library.test_attention import check, workloads

LIBRARY = Path(__file__).resolve().parents[2] / "src" / "kernelarena" / "library"
OPERATORS = ("attention_prefill", "attention_prefill_varlen", "attention_decode")
DTYPES = ("fp16", "bf16")
FILES = {
    "attention_prefill": "torch/flashinfer_prefill.py",
    "attention_prefill_varlen": "torch/flashinfer_varlen.py",
    "attention_decode": "torch/flashinfer_decode.py",
}

HAS_FLASHINFER = importlib.util.find_spec("flashinfer") is not None


def operator_spec(operator: str):
    return importlib.import_module(f"kernelarena.library.{operator}").OPERATOR


def peer(operator: str):
    """The solution file as a module (imported once per test session)."""
    path = LIBRARY / operator / FILES[operator]
    name = f"_test_flashinfer_{operator}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def registered_solutions(operator: str) -> list:
    """(definition, solution) for the operator's registered ``flashinfer`` solutions."""
    spec = operator_spec(operator)
    made = []
    for variant in spec.variants:
        definition = next(d for d in spec.definitions() if d.name == spec.definition_name(variant))
        made += [
            (definition, s)
            for s in spec.solutions_for(variant)
            if s.name == f"{definition.name}_flashinfer"
        ]
    return made


# -- CPU -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("operator", OPERATORS)
def test_solution_imports_and_spec_parses(operator: str) -> None:
    module = peer(operator)
    made = registered_solutions(operator)
    assert {d.name for d, _ in made} == {f"{operator}_{dtype}" for dtype in DTYPES}
    for definition, solution in made:
        assert solution.name == f"{definition.name}_flashinfer"
        assert solution.spec.dependencies == ["flashinfer-python"]
        assert solution.sources[0].content == (LIBRARY / operator / FILES[operator]).read_text()
        expected = argument_names(definition, solution.spec.destination_passing_style)
        assert list(inspect.signature(module.run).parameters) == expected


@pytest.mark.parametrize("operator", OPERATORS)
def test_dependency_names_the_flashinfer_module(operator: str) -> None:
    """A missing package is a skip (DependencyMissing); an installed one is found (compile/python.py
    maps the distribution flashinfer-python to the module flashinfer)."""
    _, solution = registered_solutions(operator)[0]
    if HAS_FLASHINFER:
        check_python_dependencies(solution)
    else:
        with pytest.raises(DependencyMissing):
            check_python_dependencies(solution)


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_decode_page_table_addresses_each_sequence(layout: str) -> None:
    decode = peer("attention_decode")
    lengths = [0, 1, 16, 17, 40, 39]
    kv_heads, max_seq, head_dim = 3, 40, 4
    batch = len(lengths)
    if layout == "bshd":
        cache = torch.randn(batch, max_seq, kv_heads, head_dim).transpose(1, 2)
    else:
        cache = torch.randn(batch, kv_heads, max_seq, head_dim)
    for wanted_page in (16, 1):
        decode._PAGE = wanted_page
        page = decode._page_size(max_seq, cache.stride(0), cache.stride(2))
        assert page == (8 if wanted_page == 16 else 1)  # 40 positions: pages of 8
        step = cache.stride(0) // (page * cache.stride(2))
        pages = (batch - 1) * step + max_seq // page
        view = decode._paged(cache, page, pages)  # as_strided checks the storage bounds
        indptr, indices, last = decode.page_table(lengths, page, step, "cpu")
        for b, length in enumerate(lengths):
            chosen = indices[indptr[b] : indptr[b + 1]].long()
            if length == 0:
                assert chosen.numel() == 0
                continue
            assert 1 <= int(last[b]) <= page
            read = view[chosen].transpose(0, 1).reshape(kv_heads, -1, head_dim)
            read = read[:, : (chosen.numel() - 1) * page + int(last[b])]
            assert torch.equal(read, cache[b, :, :length]), (layout, page, b)
    decode._PAGE = 16


# -- GPU -------------------------------------------------------------------------------------------


# H100, flashinfer-python 0.6.17, 2026-11-25 (benchmarks/probes/probe_flashinfer.py): on the 8 causal
# sequences of 6000 queries and 9000 keys, the FA3 ragged kernel wrote lse = -inf (-5e4 in its
# log2) for 383 and 482 of 96000 (query, head) rows that see keys, different rows in each call, o
# right: the engine records that workload INCORRECT for this peer, as it should.
FA3_RAGGED_LSE = "FlashInfer 0.6.17's FA3 ragged prefill: lse -inf on a few rows, not repeatable"


def gpu_cases() -> list:
    cases = []
    for operator in OPERATORS:
        for dtype in DTYPES:
            name = f"{operator}_{dtype}"
            for workload in workloads(name, large=True):
                axes = "-".join(str(v) for v in workload.axes.values())
                marks = ()
                if operator == "attention_prefill_varlen" and workload.axes["total_q"] == 6000:
                    marks = (pytest.mark.xfail(strict=False, reason=FA3_RAGGED_LSE),)
                cases.append(
                    pytest.param(
                        name, workload, marks=marks, id=f"{name}-{axes}-{workload.uuid[:6]}"
                    )
                )
    return cases


_BUILT: set = set()


def compile_kernels(dtype: str) -> None:
    """FlashInfer's kernels for a dtype (both head dims, the three peers), built in one parallel
    ninja run before the first case needs them (prebuilt AOT modules are skipped)."""
    if dtype in _BUILT:
        return
    from flashinfer.jit import (
        gen_batch_decode_module,
        gen_batch_prefill_module,
        gen_single_prefill_module,
    )
    from flashinfer.jit.core import build_jit_specs
    from flashinfer.utils import is_sm90a_supported

    backend = "fa3" if is_sm90a_supported(torch.device("cuda")) else "fa2"
    kind = torch.float16 if dtype == "fp16" else torch.bfloat16
    specs = []
    for head_dim in (64, 128):
        common = (head_dim, head_dim, 0, False, False)
        specs.append(gen_single_prefill_module(backend, kind, kind, kind, *common, False))
        specs.append(gen_batch_decode_module(kind, kind, kind, torch.int32, *common))
        specs.append(
            gen_batch_prefill_module(backend, kind, kind, kind, torch.int32, *common, False)
        )
    build_jit_specs(specs)
    _BUILT.add(dtype)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_FLASHINFER, reason="flashinfer-python is not installed")
@pytest.mark.parametrize(("definition", "workload"), gpu_cases())
def test_flashinfer_gpu(definition: str, workload) -> None:
    operator, dtype = definition.rsplit("_", 1)
    compile_kernels(dtype)
    module = _PEERS.get(operator) or _PEERS.setdefault(operator, peer(operator))
    try:
        check(definition, workload, "cuda", call=module.run, solution="flashinfer")
    except NotImplementedError as refused:
        pytest.skip(f"flashinfer refuses {workload.axes}: {refused}"[:400])


_PEERS: dict = {}
