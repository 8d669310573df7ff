"""Our own definitions in the shapes of the published FlashInfer-Trace ones, from tests/fixtures/fib_shapes.

Each folder holds a definition (``definition.json`` without its reference, ``reference.py``), its
workloads (``workloads.json``; inputs not listed are random), a Python solution (the one other ``.py``)
and a ``binding: torch`` CUDA solution in FlashInfer-Bench's published layout (``cuda/kernel.h``,
``cuda/kernel.cu``, ``cuda/main.cpp``):

- gqa_paged_decode_h6_kv2_d64_ps16: a paged decode (``kv_indptr``, ``kv_indices``, last-page lengths);
- gqa_ragged_prefill_causal_h4_kv2_d64: a ragged causal prefill (``qo_indptr``, ``kv_indptr``);
- varlen_gated_scan_d96: a recurrence over ``cu_seqlens``-packed sequences;
- sparse_mla_attention_h5_d48_ps8_topk12: sparse attention with ``shape[...]`` constraints.
"""

from __future__ import annotations

import json
from pathlib import Path

from kernelarena.data import (
    BuildSpec,
    Definition,
    RandomInput,
    Solution,
    SourceFile,
    TraceSet,
    Workload,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "fib_shapes"
NAMES = (
    "gqa_paged_decode_h6_kv2_d64_ps16",
    "gqa_ragged_prefill_causal_h4_kv2_d64",
    "varlen_gated_scan_d96",
    "sparse_mla_attention_h5_d48_ps8_topk12",
)
PAGED_DECODE = NAMES[0]


def definition(name: str) -> Definition:
    folder = FIXTURES / name
    payload = json.loads((folder / "definition.json").read_text())
    payload["reference"] = (folder / "reference.py").read_text()
    return Definition.model_validate(payload)


def workloads(name: str) -> list[Workload]:
    inputs = definition(name).inputs
    made = []
    for entry in json.loads((FIXTURES / name / "workloads.json").read_text()):
        given = {n: entry["inputs"].get(n, RandomInput().to_json_dict()) for n in inputs}
        made.append(Workload.model_validate(entry | {"inputs": given}))
    return made


def python_solution(name: str) -> Solution:
    (source,) = [p for p in (FIXTURES / name).glob("*.py") if p.name != "reference.py"]
    return Solution(
        name=f"{name}_{source.stem}",
        definition=name,
        author="kernelarena tests",
        spec=BuildSpec(
            language="python", target_hardware=["cpu", "cuda"], entry_point=f"{source.name}::run"
        ),
        sources=[SourceFile(path=source.name, content=source.read_text())],
        description=source.read_text().split('"""')[1].replace("\n", " "),
    )


def cuda_solution(name: str) -> Solution:
    folder = FIXTURES / name / "cuda"
    return Solution(
        name=f"{name}_cuda",
        definition=name,
        author="kernelarena tests",
        spec=BuildSpec(
            language="cuda", target_hardware=["cuda"], entry_point="main.cpp::run", binding="torch"
        ),
        sources=[
            SourceFile(path=file, content=(folder / file).read_text())
            for file in ("kernel.h", "kernel.cu", "main.cpp")
        ],
        description="A warp per output row, an online softmax (or scan) in fp32; torch binding.",
    )


def trace_set(root: Path | None = None, names: tuple[str, ...] = NAMES) -> TraceSet:
    """The definitions with their workloads and both solutions (written to ``root`` when given)."""
    made = TraceSet(root=root)
    for name in names:
        made.add_definition(definition(name))
        for workload in workloads(name):
            made.add_workload(name, workload)
        made.add_solution(python_solution(name))
        made.add_solution(cuda_solution(name))
    return made
