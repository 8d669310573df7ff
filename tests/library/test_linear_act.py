"""linear_act (act(x @ weight^T + bias)) and gated_mlp (silu(x @ w_gate^T) * (x @ w_up^T)).

Every solution is compared with its definition's float32 reference under the definition's
tolerance (the table and its reasons live in ``library/linear_act/__init__.py`` and
``library/gated_mlp/__init__.py``: one output ulp where fp32 accumulation-order differences straddle
a rounding boundary, plus the approximate exp2/tanh of the activations and the extra roundings of
the torch peers), and with a relative Frobenius bound per dtype: ||out - ref|| / ||ref|| below
1.5e-3 in fp16 and 5e-3 in bf16, where one rounding of the output alone gives about 4e-4 and
1.5e-3, the torch peers' extra roundings up to 5e-4 and 4e-3 (gated_mlp: gate, up, silu and the
product each rounded), and a wrong tile or a lost k-step 1e-1 and more. Outputs are poisoned with NaN before
each call, inputs are checked unchanged afterwards, and every case draws its own random inputs.

On CPU (Triton interpreter, small odd sizes: m 1, 17, 33; n 48, 130; k 64, 96, 100): the Triton
kernels run the code paths they take on Hopper, TMA descriptors where the tensors allow them
(16-byte aligned rows) and masked pointer accesses where not (n = 130: 260-byte output rows; k = 100:
200-byte input rows; rows strided by 75 elements). One interpreter-only switch (in bf16): the
interpreter keeps bf16 as raw bit patterns, so its tl.dot multiplies those (triton-lang/triton#11584)
and its fp32 -> bf16 cast truncates; the kernels then upcast bf16 tiles before the dot and round the
result to nearest by hand, computing what the GPU computes. The cuBLASLt solution is compiled for
sm_90a. On a GPU (``gpu``): every solution at odd sizes (m 1, 17, 1000) and the benchmark shapes.
"""

from __future__ import annotations

import functools
import math
import zlib
from pathlib import Path
from typing import Any

import pytest
import torch

from kernelarena.compile import DependencyMissing, Runnable
from kernelarena.data import DType
from kernelarena.evaluate.compare import compare, inputs_unchanged
from kernelarena.evaluate.inputs import load_reference, random_tensor
from kernelarena.library.linear_act import ACTIVATIONS, CUBLASLT_ACTIVATIONS
from kernelarena.testing import build, library_definition, library_solution
from tests.library.solution_files import write_solution_package

# Saturated inputs make exp2 overflow to inf, the limit the kernels rely on (x / (1 + inf) = -0);
# numpy, computing for the interpreter, warns about it.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp2:RuntimeWarning")

DTYPES = ("fp16", "bf16")
FROBENIUS_BOUND = {"fp16": 1.5e-3, "bf16": 5e-3}
HAS_CUDA = torch.cuda.is_available()


# -- helpers ---------------------------------------------------------------------------------------


@functools.cache
def runnable(definition: str, solution: str, device: str) -> Runnable:
    try:
        return build(definition, solution, device)
    except DependencyMissing as missing:
        pytest.skip(f"{definition}_{solution}: {missing}")


def make_inputs(
    definition_name: str, axes: dict[str, int], device: str, **params: Any
) -> list[Any]:
    """Random inputs as the engine draws them (standard normal, then the reference's make_inputs),
    seeded from the case so a failure reproduces."""
    definition = library_definition(definition_name)
    seed = zlib.crc32(
        repr((definition_name, sorted(axes.items()), sorted(params.items()))).encode()
    )
    generator = torch.Generator(device=device).manual_seed(seed)
    inputs = {
        name: random_tensor(spec, definition.shape_of(spec, axes), generator, torch.device(device))
        for name, spec in definition.inputs.items()
    }
    made = load_reference(definition)["make_inputs"](dict(axes), inputs, params, generator, device)
    return [made[name] for name in definition.inputs]


def relative_frobenius(actual: torch.Tensor, expected: torch.Tensor) -> float:
    difference = (actual.double() - expected.double()).norm().item()
    return difference / max(expected.double().norm().item(), 1e-30)


def check(
    definition_name: str, solution: str, axes: dict[str, int], device: str, **params: Any
) -> None:
    definition = library_definition(definition_name)
    fn = runnable(definition_name, solution, device)
    args = make_inputs(definition_name, axes, device, **params)
    before = [a.clone() for a in args]
    expected = load_reference(definition)["run"](*args)
    spec = definition.outputs["out"]
    if fn.destination_passing_style:
        out = torch.full(
            definition.shape_of(spec, axes), math.nan, dtype=spec.dtype.to_torch(), device=device
        )
        fn(*args, out)
    else:
        out = fn(*args)
    for name, old, new in zip(definition.inputs, before, args):
        assert inputs_unchanged(name, old, new) is None, (
            f"{definition_name}_{solution}: {name} changed"
        )
    result = compare("out", out, expected, DType(spec.dtype), definition.tolerances["out"])
    label = f"{definition_name}_{solution} {axes} {params}"
    assert result.ok, f"{label}: {result.describe()}"
    if expected.numel() > 0:
        error = relative_frobenius(out, expected)
        bound = FROBENIUS_BOUND[definition_name.rsplit("_", 1)[1]]
        assert error <= bound, f"{label}: relative Frobenius error {error:.3g} > {bound}"


def axes(m: int, n: int, k: int) -> dict[str, int]:
    return {"m": m, "n": n, "k": k}


# -- definitions -----------------------------------------------------------------------------------


def test_definitions_and_solutions() -> None:
    for activation in ACTIVATIONS:
        for dtype in DTYPES:
            name = f"linear_{activation}_{dtype}"
            definition = library_definition(name)
            assert definition.op_type == "linear_act" and "linear_act" in definition.tags
            for solution in ("triton", "torch_eager", "torch_compile"):
                library_solution(name, solution)
            if activation in CUBLASLT_ACTIVATIONS:
                library_solution(name, "cuda")
            else:
                with pytest.raises(KeyError):
                    library_solution(name, "cuda")
    for dtype in DTYPES:
        assert library_definition(f"gated_mlp_{dtype}").flops == "4 * m * n * k"


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_reference_applies_its_own_activation(activation: str) -> None:
    """Each Definition's copy of reference.py names its activation; check it against torch's own
    functions in float64 (the reference's float32 is far below float16's resolution here)."""
    functions = {
        "gelu_tanh": lambda y: torch.nn.functional.gelu(y, approximate="tanh"),
        "gelu": torch.nn.functional.gelu,
        "silu": torch.nn.functional.silu,
        "relu": torch.relu,
        "none": lambda y: y,
    }
    x, weight, bias = make_inputs(f"linear_{activation}_fp16", axes(9, 40, 64), "cpu")
    got = load_reference(library_definition(f"linear_{activation}_fp16"))["run"](x, weight, bias)
    y = x.double() @ weight.double().t() + bias.double()
    expected = functions[activation](y).to(torch.float16)
    assert got.dtype == torch.float16
    assert (got.double() - expected.double()).abs().max().item() <= 2e-3


# -- CPU: Triton under the interpreter, eager peers ------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize(
    "shape",
    [(33, 48, 64), (17, 130, 96)],
    ids=["tma-loads-tma-stores", "tma-loads-pointer-stores"],
)
def test_triton_every_activation(activation: str, dtype: str, shape: tuple[int, int, int]) -> None:
    check(f"linear_{activation}_{dtype}", "triton", axes(*shape), "cpu")


ODD_CASES = [
    pytest.param(axes(1, 48, 64), {}, id="one-row"),
    pytest.param(axes(33, 130, 96), {}, id="33x130x96"),
    pytest.param(axes(17, 130, 64), {}, id="17x130x64"),
    pytest.param(axes(5, 40, 100), {}, id="k100-pointer-loads"),
    pytest.param(axes(0, 48, 64), {}, id="empty-batch"),
    pytest.param(axes(9, 48, 64), {"x_row_stride": 136}, id="strided-rows-tma"),
    pytest.param(axes(9, 48, 64), {"x_row_stride": 75}, id="strided-rows-pointer"),
    pytest.param(axes(17, 48, 64), {"input_scale": 16.0}, id="saturated"),
]


@pytest.mark.parametrize("definition", ["linear_gelu_tanh_bf16", "linear_silu_fp16"])
@pytest.mark.parametrize(("shape", "params"), ODD_CASES)
def test_triton_odd_sizes(definition: str, shape: dict[str, int], params: dict[str, Any]) -> None:
    check(definition, "triton", shape, "cpu", **params)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_eager_peer(activation: str, dtype: str) -> None:
    check(f"linear_{activation}_{dtype}", "torch_eager", axes(17, 130, 96), "cpu")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shape", "params"), ODD_CASES)
def test_gated_mlp_triton(dtype: str, shape: dict[str, int], params: dict[str, Any]) -> None:
    check(f"gated_mlp_{dtype}", "triton", shape, "cpu", **params)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gated_mlp_eager_peer(dtype: str) -> None:
    check(f"gated_mlp_{dtype}", "torch_eager", axes(17, 130, 96), "cpu")


def test_triton_rejects_what_it_cannot_do() -> None:
    fn = runnable("linear_gelu_tanh_bf16", "triton", "cpu")
    x, weight, bias = make_inputs("linear_gelu_tanh_bf16", axes(4, 48, 64), "cpu")
    out = torch.empty(4, 48, dtype=torch.float16)
    with pytest.raises(ValueError, match="one dtype"):
        fn(x, weight, bias, out)
    with pytest.raises(ValueError, match="shapes"):
        fn(x, weight, bias[:40], torch.empty(4, 48, dtype=torch.bfloat16))


def test_cuda_solution_compiles() -> None:
    """One source holds the three entry points; it builds once (content-addressed) for sm_90a."""
    for activation in CUBLASLT_ACTIVATIONS:
        built = build(f"linear_{activation}_bf16", "cuda", "cpu")
        assert built.metadata["arch"] == "sm_90a"


HOPPER_COMPILE = r"""
import importlib, json, sys
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget

sys.path.insert(0, sys.argv[3])
load = importlib.import_module

def compile_for_sm90(kernel, config, tensors, scalars, constexprs):
    bm, bn, bk = config.block_m, config.block_n, config.block_k
    blocks = {"x": [bm, bk], "w": [bn, bk], "out": [bm, bn // 2]}
    signature = {name: f"tensordesc<bf16{blocks[kind]}>" for name, kind in tensors.items()}
    signature.update({name: kind for name, kind in scalars.items()})
    constexprs = dict(constexprs, LOAD_TMA=True, STORE_TMA=True, EPILOGUE_SUBTILE=True,
                      INTERPRETER_BF16=False, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                      GROUP_M=config.group_m, NUM_PROGRAMS=132)
    signature.update({name: "constexpr" for name in constexprs})
    source = triton.compiler.ASTSource(fn=kernel, signature=signature, constexprs=constexprs)
    options = {"num_warps": config.num_warps, "num_stages": config.num_stages}
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options).metadata.shared

linear, gated = load(sys.argv[1]), load(sys.argv[2])
shared = {}
shared["linear"] = compile_for_sm90(
    linear._linear_act_kernel, linear.HOPPER_LARGE,
    {"x_src": "x", "w_src": "w", "out_dst": "out"},
    {"bias_ptr": "*bf16", "M": "i32", "N": "i32", "K": "i32", "stride_xm": "i32",
     "stride_wn": "i32", "stride_om": "i32"},
    {"ACTIVATION": "gelu"})
shared["gated"] = compile_for_sm90(
    gated._gated_mlp_kernel, gated.HOPPER_LARGE,
    {"x_src": "x", "gate_src": "w", "up_src": "w", "out_dst": "out"},
    {"M": "i32", "N": "i32", "K": "i32", "stride_xm": "i32", "stride_gn": "i32",
     "stride_un": "i32", "stride_om": "i32"},
    {"OUT_DTYPE": tl.bfloat16})
print(json.dumps(shared))
"""


@pytest.mark.skipif(HAS_CUDA, reason="on a GPU the gpu tests compile and run the kernels")
def test_triton_compiles_for_hopper(tmp_path: Path) -> None:
    """The interpreter never compiles: build the Hopper path (TMA loads and stores, the largest
    config, the erf GELU whose epilogue needs the most registers) for sm_90 ahead of time, and check
    it fits the 227 KB of shared memory a block may have on H100/H200."""
    import json
    import os
    import subprocess
    import sys

    # The solutions as the library writes them: the entry files import library/_shared/ helpers
    # relatively, so each is imported as a member of its own package.
    linear = write_solution_package("linear_gelu_bf16_triton", tmp_path)
    gated = write_solution_package("gated_mlp_bf16_triton", tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run(
        [sys.executable, "-c", HOPPER_COMPILE, linear, gated, str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    shared = json.loads(result.stdout.strip().splitlines()[-1])
    for kernel, used in shared.items():
        assert 0 < used <= 227 * 1024, f"{kernel}: {used} bytes of shared memory"


# -- GPU -------------------------------------------------------------------------------------------

GPU_KERNELS = ("triton", "cuda")


@pytest.fixture
def fp32_accumulation_in_cublas():
    """The definitions promise fp32 accumulation; torch lets cuBLAS reduce split-K partial sums in
    bf16/fp16 by default, which the torch peers would then inherit at small m."""
    matmul = torch.backends.cuda.matmul
    saved = (
        matmul.allow_bf16_reduced_precision_reduction,
        matmul.allow_fp16_reduced_precision_reduction,
    )
    matmul.allow_bf16_reduced_precision_reduction = False
    matmul.allow_fp16_reduced_precision_reduction = False
    yield
    matmul.allow_bf16_reduced_precision_reduction, matmul.allow_fp16_reduced_precision_reduction = (
        saved
    )


def gpu_solutions(activation: str) -> list[str]:
    kernels = ["triton", "cuda"] if activation in CUBLASLT_ACTIVATIONS else ["triton"]
    return [*kernels, "torch_eager"]


@pytest.mark.gpu
@pytest.mark.usefixtures("fp32_accumulation_in_cublas")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_gpu_every_variant(activation: str, dtype: str) -> None:
    # 17 rows; 2060-byte output rows (no TMA store); k = 1000 (TMA loads, a K tail).
    for solution in gpu_solutions(activation):
        check(f"linear_{activation}_{dtype}", solution, axes(17, 1030, 1000), "cuda")


GPU_ODD = [
    pytest.param(axes(1, 1000, 1024), id="1x1000x1024"),
    pytest.param(axes(17, 1030, 1000), id="17x1030x1000"),
    pytest.param(axes(1000, 1001, 1001), id="1000x1001x1001-pointer-path"),
    pytest.param(axes(0, 1000, 1024), id="empty-batch"),
]


@pytest.mark.gpu
@pytest.mark.usefixtures("fp32_accumulation_in_cublas")
@pytest.mark.parametrize("definition", ["linear_gelu_tanh_bf16", "linear_silu_fp16"])
@pytest.mark.parametrize("shape", GPU_ODD)
def test_gpu_odd_sizes(definition: str, shape: dict[str, int]) -> None:
    for solution in gpu_solutions(definition.removeprefix("linear_").rsplit("_", 1)[0]):
        check(definition, solution, shape, "cuda")


@pytest.mark.gpu
@pytest.mark.usefixtures("fp32_accumulation_in_cublas")
def test_gpu_strided_rows() -> None:
    for solution in ("triton", "cuda"):
        check("linear_gelu_tanh_bf16", solution, axes(300, 1024, 1000), "cuda", x_row_stride=1064)
        check("linear_gelu_tanh_bf16", solution, axes(300, 1024, 1000), "cuda", x_row_stride=1003)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "shape", [axes(8192, 8192, 8192), axes(4096, 14336, 4096)], ids=["8192^3", "4096x14336x4096"]
)
def test_gpu_benchmark_shapes(shape: dict[str, int]) -> None:
    for solution in GPU_KERNELS:
        check("linear_gelu_tanh_bf16", solution, shape, "cuda")


@pytest.mark.gpu
@pytest.mark.usefixtures("fp32_accumulation_in_cublas")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [*GPU_ODD, pytest.param(axes(4096, 14336, 4096), id="benchmark")])
def test_gpu_gated_mlp(dtype: str, shape: dict[str, int]) -> None:
    if dtype == "fp16" and shape["m"] == 4096:
        pytest.skip("the benchmark shape runs in bf16 only")
    for solution in ("triton", "torch_eager"):
        check(f"gated_mlp_{dtype}", solution, shape, "cuda")


@pytest.mark.gpu
@pytest.mark.usefixtures("fp32_accumulation_in_cublas")
def test_gpu_compile_peers() -> None:
    check("linear_gelu_tanh_bf16", "torch_compile", axes(17, 1030, 1000), "cuda")
    check("linear_relu_fp16", "torch_compile", axes(1000, 1001, 1001), "cuda")
    check("gated_mlp_bf16", "torch_compile", axes(17, 1030, 1000), "cuda")
