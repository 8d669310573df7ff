"""attention_prefill's CUDA C++ solution (Hopper: TMA, mbarriers, wgmma, warp specialization).

On CPU: the solution compiled for sm_90a through the project's builder, and its SASS checked for
the instructions that carry the speed (HGMMA, the tensor cores' warpgroup MMA; UTMALDG, TMA tile
loads; USETMAXREG, the register hand-over between warpgroups) and for local-memory traffic.

On a GPU (``gpu``): every attention_prefill workload (smoke, correctness, large), odd lengths (1,
17, 1000, 3000), seq_q != seq_kv with causal masks (rows that see no key: o = 0, lse = -inf), GQA,
strided BSHD layouts and strides TMA cannot describe (the portable path), against the float32
reference under the definition's tolerances, with outputs poisoned by NaN and inputs checked
unchanged (``test_attention.check``).

The solution is built from its spec whether or not the library registers it yet.
"""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

import pytest
import torch

from kernelarena.compile import Runnable, build_solution
from kernelarena.data import Definition, Solution, Workload
from kernelarena.library.attention_prefill import OPERATOR

from .test_attention import check, workloads

DTYPES = ("fp16", "bf16")


@functools.cache
def solution(suffix: str) -> tuple[Definition, Solution]:
    """The library's CUDA solution of attention_prefill_<suffix>."""
    variant = next(v for v in OPERATOR.variants if v.suffix == suffix)
    definition = next(d for d in OPERATOR.definitions() if d.name == f"attention_prefill_{suffix}")
    found = next(s for s in OPERATOR.solutions_for(variant) if s.name.endswith("_cuda"))
    return definition, found


@functools.cache
def built(suffix: str, device: str) -> Runnable:
    return build_solution(*solution(suffix), device)


def _cuobjdump() -> Path | None:
    import triton

    candidates = [
        Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump",
        Path("/usr/local/cuda/bin/cuobjdump"),
    ]
    return next((c for c in candidates if c.exists()), None)


@pytest.mark.slow
def test_compiles_for_sm90a_with_hopper_instructions() -> None:
    """Compiled (and loaded) for sm_90a on any machine; the SASS of the kernels has the tensor
    cores' warpgroup MMA, TMA loads and the register hand-over, and no local memory."""
    runnable = built("bf16", "cpu")
    assert runnable.metadata["arch"] == "sm_90a"
    assert runnable.artifact is not None and runnable.artifact.endswith(".so")
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("no cuobjdump (neither Triton's bundled one nor the toolkit's)")
    sass = subprocess.run(
        [str(tool), "-sass", runnable.artifact], capture_output=True, text=True, check=True
    ).stdout
    kernels = re.split(r"\n\s*Function : ", sass)
    hopper = [k for k in kernels if "attention_kernel" in k.split("\n", 1)[0]]
    assert len(hopper) == 4, "expected one Hopper kernel per (dtype, head_dim)"
    for kernel in hopper:
        name = kernel.split("\n", 1)[0]
        for instruction in ("HGMMA", "UTMALDG", "USETMAXREG", "SYNCS"):
            assert instruction in kernel, f"{name}: no {instruction} in the SASS"
        assert "tnspB" in kernel, f"{name}: P V should read V transposed by its descriptor"
        for spill in ("LDL", "STL"):
            assert not re.search(rf"\b{spill}\b", kernel), f"{name}: local memory ({spill})"


# -- GPU -------------------------------------------------------------------------------------


def _cases() -> list:
    cases = []
    for suffix in DTYPES:
        for workload in workloads(f"attention_prefill_{suffix}", large=True):
            label = "-".join(str(v) for v in workload.axes.values())
            cases.append(pytest.param(suffix, workload, id=f"{suffix}-{label}-{workload.uuid[:6]}"))
    return cases


def _workload(shape: tuple[int, ...], causal: bool, params: dict | None = None) -> Workload:
    names = ("batch", "q_heads", "kv_heads", "seq_q", "seq_kv", "head_dim")
    scalars = {"sm_scale": shape[-1] ** -0.5, "causal": causal}
    return Workload(
        axes=dict(zip(names, shape)),
        uuid=f"cuda-odd-{'-'.join(map(str, shape))}-{causal}-{params}",
        params=params,
        inputs={
            name: {"type": "scalar", "value": scalars[name]}
            if name in scalars
            else {"type": "random"}
            for name in ("q", "k", "v", "sm_scale", "causal")
        },
    )


def _run(suffix: str):
    return lambda *arguments: built(suffix, "cuda")(*arguments)


@pytest.mark.gpu
@pytest.mark.parametrize(("suffix", "workload"), _cases())
def test_workloads(suffix: str, workload: Workload) -> None:
    check(f"attention_prefill_{suffix}", workload, "cuda", call=_run(suffix), solution="cuda")


ODD = [  # (batch, q_heads, kv_heads, seq_q, seq_kv, head_dim), causal, params
    ((1, 2, 1, 1, 1, 64), True, None),
    ((1, 2, 1, 1, 1000, 128), True, None),
    ((2, 4, 2, 17, 3000, 64), True, None),
    ((1, 4, 1, 3000, 1000, 128), True, None),  # 2000 rows see no key
    ((1, 4, 1, 1000, 17, 64), False, None),
    ((1, 2, 2, 3000, 3000, 128), False, {"layout": "bshd"}),
    ((2, 6, 3, 1000, 1000, 64), True, {"layout": "bshd"}),
    ((1, 2, 2, 129, 257, 128), True, {"q_scale": 8.0}),
    ((1, 8, 2, 4096, 4096, 64), True, None),
]


@pytest.mark.gpu
@pytest.mark.parametrize("suffix", DTYPES)
@pytest.mark.parametrize(("shape", "causal", "params"), ODD, ids=str)
def test_odd_shapes(suffix: str, shape: tuple, causal: bool, params: dict | None) -> None:
    check(
        f"attention_prefill_{suffix}",
        _workload(shape, causal, params),
        "cuda",
        call=_run(suffix),
        solution="cuda",
    )


@pytest.mark.gpu
@pytest.mark.parametrize("suffix", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
def test_strides_tma_cannot_take(suffix: str, causal: bool) -> None:
    """Rows 137 elements apart (not a multiple of 16 bytes): the portable path, same answers."""
    from kernelarena.evaluate.compare import compare
    from kernelarena.evaluate.inputs import load_reference

    definition, _ = solution(suffix)
    dtype = torch.bfloat16 if suffix == "bf16" else torch.float16
    generator = torch.Generator(device="cuda").manual_seed(11)
    batch, heads, kv_heads, seq, dim = 2, 4, 2, 77, 128

    def strided(h: int) -> torch.Tensor:
        wide = torch.randn(batch, h, seq, dim + 9, generator=generator, device="cuda")
        return wide.to(dtype)[..., :dim]

    q, k, v = strided(heads), strided(kv_heads), strided(kv_heads)
    copies = [t.clone() for t in (q, k, v)]
    o = torch.full((batch, heads, seq, dim), float("nan"), dtype=dtype, device="cuda")
    lse = torch.full((batch, heads, seq), float("nan"), device="cuda")
    built(suffix, "cuda")(q, k, v, dim**-0.5, causal, o, lse)
    want_o, want_lse = load_reference(definition)["run"](q, k, v, dim**-0.5, causal)
    for name, before, after in zip("qkv", copies, (q, k, v)):
        assert torch.equal(before, after), f"input {name} changed"
    for name, got, want in (("o", o, want_o), ("lse", lse, want_lse)):
        spec = definition.outputs[name]
        result = compare(name, got, want, spec.dtype, definition.tolerance_for(name))
        assert result.ok, result.describe()
