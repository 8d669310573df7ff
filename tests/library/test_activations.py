"""Element-wise operators: scale, silu_and_mul, gelu_tanh_and_mul and gelu_and_mul.

Every solution is compared with its definition's float32 reference (run on CPU) under the
definition's tolerance: the per-dtype table and the reason for each entry live in the operator spec
(``library/<op>/__init__.py``): fp32 1e-5 for the activations (fast exp and division, below 3e-6
relative) and 1e-6 for scale (exact), fp16 1e-3 and bf16 1e-2 (one final rounding, half an ulp).
Outputs are poisoned with NaN before each call, inputs are checked unchanged afterwards, and every
case draws its own random inputs (seeded from the case, so a failure reproduces).

On CPU: the Triton kernels under the interpreter and the eager peers at small sizes, and every CUDA
solution compiled for sm_90a. On a GPU (``gpu``): every solution at every dtype on odd widths,
0 rows, strided rows and outputs, extreme gates, a million rows and 64-bit row offsets.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import zlib
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import triton

from kernelarena.compile import DependencyMissing, Runnable
from kernelarena.testing import assert_close, build, library_definition, reference
from tests.library.tuning_stand_ins import stand_in_tuning

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
HAS_CUDA = torch.cuda.is_available()


@dataclass(frozen=True)
class Op:
    name: str
    gated: bool  # x [rows, 2 d] -> out [rows, d]; else scale: out = x * factor, same shape
    gate_range: float  # |gate| at which the activation's exponential overflows
    peers: tuple[str, ...]


OPS = {
    "scale": Op("scale", False, 0.0, ("torch_eager", "torch_compile")),
    "silu_and_mul": Op("silu_and_mul", True, 100.0, ("torch_eager", "torch_compile", "liger")),
    "gelu_tanh_and_mul": Op(
        "gelu_tanh_and_mul", True, 30.0, ("torch_eager", "torch_compile", "liger")
    ),
    "gelu_and_mul": Op("gelu_and_mul", True, 30.0, ("torch_eager", "torch_compile")),
}
KERNELS = ("triton", "cuda")
# One source per CUDA file: gelu_tanh_and_mul's solution is gelu_and_mul.cu's run_tanh.
CUDA_SOURCES = ("scale_bf16", "silu_and_mul_bf16", "gelu_and_mul_bf16")


# -- helpers ---------------------------------------------------------------------------------------


@functools.cache
def runnable(definition: str, solution: str, device: str) -> Runnable:
    try:
        return build(definition, solution, device)
    except DependencyMissing as missing:
        pytest.skip(f"{definition}_{solution}: {missing}")


def make_case(
    op: Op,
    suffix: str,
    rows: int,
    width: int,
    device: torch.device | str,
    reference_on_device: bool = False,
    **params: Any,
) -> tuple[str, list[Any], torch.Tensor]:
    """(definition name, arguments in definition order, expected output). ``width`` is the input
    width: cols for scale, two_d for the gated operators. The reference runs on CPU, or on the
    device for the largest cases (in float32 there too)."""
    name = f"{op.name}_{suffix}"
    seed = zlib.crc32(repr((name, rows, width, sorted(params.items()))).encode())
    generator = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(rows, width, generator=generator, device=device).to(DTYPES[suffix])
    if op.gated:
        axes = {"rows": rows, "two_d": width, "d": width // 2}
        inputs: dict[str, Any] = {"x": x}
    else:
        axes = {"rows": rows, "cols": width}
        inputs = {"x": x, "factor": -1.7}
    ref = reference(name)
    inputs = ref["make_inputs"](axes, inputs, params, generator, device)
    args = list(inputs.values())
    if reference_on_device:
        return name, args, ref["run"](*args)
    expected = ref["run"](*[a.cpu() if isinstance(a, torch.Tensor) else a for a in args])
    return name, args, expected


def check(
    name: str,
    solution: str,
    args: list[Any],
    expected: torch.Tensor,
    out: torch.Tensor | None = None,
    config: Any = None,
) -> None:
    """Run one solution (``out``: a destination of the caller's layout) and compare. ``config``: a
    Triton solution's launch plan (one of its ``tuning_configs``), run untuned."""
    device = args[0].device
    run = runnable(name, solution, device.type)
    before = [a.clone() for a in args if isinstance(a, torch.Tensor)]
    if config is not None:
        if out is None:
            out = torch.empty(expected.shape, dtype=expected.dtype, device=device)
        out.fill_(float("nan"))
        run_with_config = run.fn.__globals__["run_with_config"]
        if name.startswith("gelu"):  # one file for both GELUs
            run_with_config(*args, out, name.startswith("gelu_tanh"), config)
        else:
            run_with_config(*args, out, config)
        got = out
    elif run.destination_passing_style:
        if out is None:
            out = torch.empty(expected.shape, dtype=expected.dtype, device=device)
        out.fill_(float("nan"))
        run(*args, out)
        got = out
    else:
        got = run(*args)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    after = [a for a in args if isinstance(a, torch.Tensor)]
    for i, (now, was) in enumerate(zip(after, before)):
        assert torch.equal(now, was), f"{name}_{solution}: input {i} was changed"
    assert got.dtype == expected.dtype, f"{name}_{solution}: dtype {got.dtype}"
    assert got.shape == expected.shape, f"{name}_{solution}: shape {tuple(got.shape)}"
    tolerance = library_definition(name).tolerance_for("out")
    label = f"{name}_{solution} {tuple(expected.shape)}"
    if expected.device.type != "cpu":
        # Large cases: find mismatching rows on the device; assert_close reports the first ones.
        g, e = got.float(), expected.float()
        bad = ~((g - e).abs() <= tolerance.atol + tolerance.rtol * e.abs())
        bad &= ~(torch.isinf(e) & (g == e))
        rows = bad.any(dim=1).nonzero().flatten()[:8]
        if rows.numel() == 0:
            return
        got, expected = got[rows], expected[rows]
    assert_close(got, expected, tolerance.atol, tolerance.rtol, name=label)


def compile_in_parallel(definitions: tuple[str, ...]) -> None:
    """Compile CUDA solutions in parallel processes; the build cache is shared and file-locked, so
    later ``build`` calls load the result. Failures surface in those calls with the compiler log."""
    code = "import sys\nfrom kernelarena.testing import build\nbuild(sys.argv[1], 'cuda', 'cpu')"
    jobs = [
        subprocess.Popen([sys.executable, "-c", code, name], stderr=subprocess.DEVNULL)
        for name in definitions
    ]
    for job in jobs:
        job.wait()


@pytest.fixture(scope="module")
def cuda_compiled() -> None:
    compile_in_parallel(CUDA_SOURCES)


def gated_ops() -> list[str]:
    return [name for name, op in OPS.items() if op.gated]


# -- definitions -----------------------------------------------------------------------------------


@pytest.mark.parametrize("op", gated_ops())
def test_gated_axes_bind_from_x(op: str) -> None:
    definition = library_definition(f"{op}_bf16")
    assert definition.axes_from_shapes({"x": (5, 8)}) == {"rows": 5, "two_d": 8, "d": 4}
    with pytest.raises(ValueError, match="two_d % 2 == 0"):
        definition.axes_from_shapes({"x": (5, 7)})
    # bytes: rows * 2 d read, rows * d written, 2 bytes each
    assert definition.cost("bytes_moved", {"rows": 5, "two_d": 8, "d": 4}) == 5 * (8 + 4) * 2


# -- CPU: Triton under the interpreter, eager peers, CUDA compiled ---------------------------------


def cpu_cases(op: Op) -> list[tuple[int, int, dict[str, Any]]]:
    cases: list[tuple[int, int, dict[str, Any]]] = [
        (3, 74, {}),  # d = 37: no 16-byte vectors
        (0, 64, {}),  # empty batch
        (2, 256, {}),
        (5, 200, {"row_stride": 264}),  # strided rows
    ]
    if op.gated:
        cases.append((4, 64, {"gate_range": op.gate_range}))
    return cases


# numpy warns where exp2 overflows in the extreme cases; the overflow is the point of them.
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.parametrize("solution", ["triton", "torch_eager"])
@pytest.mark.parametrize("suffix", list(DTYPES))
@pytest.mark.parametrize("op", list(OPS))
def test_cpu(op: str, suffix: str, solution: str) -> None:
    if HAS_CUDA:
        pytest.skip("CPU test (the gpu tests cover this on a GPU)")
    for rows, width, params in cpu_cases(OPS[op]):
        name, args, expected = make_case(OPS[op], suffix, rows, width, "cpu", **params)
        check(name, solution, args, expected)


def tuning_configs(name: str, device: str, rows: int, width: int) -> list[Any]:
    """Every launch plan the Triton solution may tune over for ``rows`` x ``width`` inputs."""
    module = runnable(name, "triton", device).fn.__globals__
    return module["tuning_configs"](rows, width // 2 if name.split("_")[0] != "scale" else width)


# Under the interpreter: 64 rows of 128 outputs take every candidate (up to 32 rows a program);
# 37 rows of 37 (no 16-byte vectors, a ragged last program); strided rows.
CPU_CANDIDATE_SHAPES: list[tuple[int, int, dict[str, Any]]] = [
    (64, 256, {}),
    (37, 74, {}),
    (9, 200, {"row_stride": 264}),
]


@pytest.mark.parametrize("suffix", list(DTYPES))
@pytest.mark.parametrize("op", list(OPS))
def test_cpu_triton_every_tuning_candidate(op: str, suffix: str) -> None:
    """Every plan the device may pick is correct."""
    if HAS_CUDA:
        pytest.skip("CPU test (test_gpu_triton_every_tuning_candidate covers this on a GPU)")
    for rows, width, params in CPU_CANDIDATE_SHAPES:
        name, args, expected = make_case(OPS[op], suffix, rows, width, "cpu", **params)
        configs = tuning_configs(name, "cpu", rows, width)
        assert configs
        for config in configs:
            check(name, "triton", args, expected, config=config)


@pytest.mark.parametrize("op", list(OPS))
def test_cpu_triton_tuning_plumbing(op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tuned path, under the interpreter with a stand-in for the GPU timer that makes the last
    candidate fastest: every candidate runs once, the pick is cached and reused, the output is
    right."""
    if HAS_CUDA:
        pytest.skip("CPU test (the GPU tests run the real tuning)")
    name, args, expected = make_case(OPS[op], "fp32", 64, 256, "cpu")
    module = runnable(name, "triton", "cpu").fn.__globals__
    timed: list[int] = []

    def bench(kernel_call: Any, quantiles: Any) -> list[float]:
        kernel_call()
        timed.append(1)
        return [1.0 / len(timed)] * len(quantiles)

    stand_in_tuning(monkeypatch, module, bench)
    candidates = tuning_configs(name, "cpu", 64, 256)
    check(name, "triton", args, expected)
    assert len(timed) == len(candidates) > 1
    assert list(module["tuned_plans"]().values()) == [str(candidates[-1])]
    check(name, "triton", args, expected)
    assert len(timed) == len(candidates), "the pick is cached"


@pytest.mark.parametrize("op", list(OPS))
def test_cpu_triton_tuning_picks_are_kept_on_disk_per_tuner(
    op: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every tuner asks Triton to keep its timings on disk (cache_results), and two tuners with the
    same candidates and the same width (row buckets 64 and 128 here) still differ in their tuning
    key, which names the file those timings go to: one never reads the other's pick."""
    if HAS_CUDA:
        pytest.skip("CPU test (the GPU tests run the real tuning)")
    made: list[dict[str, Any]] = []
    autotune = triton.autotune

    def spy(*args: Any, **kwargs: Any) -> Any:
        made.append(kwargs)
        return autotune(*args, **kwargs)

    def bench(kernel_call: Any, quantiles: Any) -> list[float]:
        kernel_call()
        return [1.0] * len(quantiles)

    monkeypatch.setattr(triton, "autotune", spy)
    module = runnable(f"{op}_fp32", "triton", "cpu").fn.__globals__
    tuners = stand_in_tuning(monkeypatch, module, bench)
    for rows in (64, 100):
        name, args, expected = make_case(OPS[op], "fp32", rows, 256, "cpu")
        check(name, "triton", args, expected)
    assert len(made) == 2 and all(m["cache_results"] and "tune_tag" in m["key"] for m in made)
    autotuners = list(tuners.made.values())
    assert [str(c) for c in autotuners[0].configs] == [str(c) for c in autotuners[1].configs]
    (first,), (second,) = (list(t.cache) for t in autotuners)
    assert first[0] == second[0] and first != second


@pytest.mark.parametrize("definition", [*CUDA_SOURCES, "gelu_tanh_and_mul_bf16"])
def test_cuda_compiles(definition: str, cuda_compiled: None) -> None:
    built = runnable(definition, "cuda", "cpu")  # a compile error fails; no toolkit skips
    assert callable(built.fn)
    assert built.metadata["arch"] == "sm_90a"


def test_triton_rejects_bad_shapes() -> None:
    x = torch.randn(4, 10)
    with pytest.raises(ValueError, match=r"\[rows, 2 d\]"):
        runnable("silu_and_mul_fp32", "triton", "cpu")(x, torch.empty(4, 4))
    with pytest.raises(ValueError, match="contiguous"):
        runnable("gelu_and_mul_fp32", "triton", "cpu")(x.t().contiguous().t(), torch.empty(4, 5))


# -- GPU -------------------------------------------------------------------------------------------

gpu = pytest.mark.gpu
# (rows, input width): 0 rows; 2 columns; d = 1001 (odd, no vectors); hidden 10240 (d = 5120);
# input 32768 (d = 16384, several column tiles per row).
SHAPES_FULL = [(0, 4096), (1, 2), (3, 2002), (33, 10240), (5, 32768)]
SHAPES_SHORT = [(3, 2002), (33, 10240)]
# Past TUNE_MIN_ELEMENTS outputs, so the Triton kernels tune on the device: d = 1001 (no vectors).
SHAPES_TUNED = [(300, 2002)]


def gpu_solutions(kernels_only: bool = False, compiled: bool = True) -> list[tuple[str, str]]:
    """(op, solution) pairs: the kernels and, unless ``kernels_only``, the peers (torch.compile
    only where ``compiled``: each new shape or stride costs it a compile)."""
    return [
        (op, solution)
        for op, spec in OPS.items()
        for solution in KERNELS + (() if kernels_only else spec.peers)
        if compiled or solution != "torch_compile"
    ]


def shapes_for(solution: str, suffix: str) -> list[tuple[int, int]]:
    # Every shape for our kernels in bf16; fewer elsewhere to bound Triton and Inductor compiles.
    if solution == "torch_compile":
        return SHAPES_SHORT[1:]
    if solution in KERNELS:
        return (SHAPES_FULL if suffix == "bf16" else SHAPES_SHORT) + SHAPES_TUNED
    return SHAPES_SHORT


@gpu
@pytest.mark.parametrize("suffix", list(DTYPES))
@pytest.mark.parametrize(("op", "solution"), gpu_solutions())
def test_gpu_shapes(op: str, solution: str, suffix: str, cuda_compiled: None) -> None:
    for rows, width in shapes_for(solution, suffix):
        name, args, expected = make_case(OPS[op], suffix, rows, width, "cuda")
        check(name, solution, args, expected)


@gpu
@pytest.mark.parametrize("op", list(OPS))
def test_gpu_triton_every_tuning_candidate(op: str) -> None:
    """Every plan the tuner may pick, run untuned, in bf16: d = 1001 (no vectors) and 2048."""
    failures, count = [], 0
    for rows, width in ((37, 2002), (37, 4096)):
        name, args, expected = make_case(OPS[op], "bf16", rows, width, "cuda")
        for config in tuning_configs(name, "cuda", rows, width):
            count += 1
            try:
                check(name, "triton", args, expected, config=config)
            except AssertionError as error:
                failures.append(f"{rows}x{width} {config}: {str(error)[:300]}")
    assert not failures, f"{len(failures)} of {count} plans failed:\n" + "\n".join(failures)


@gpu
@pytest.mark.parametrize("suffix", ["fp32", "bf16"])
@pytest.mark.parametrize(("op", "solution"), gpu_solutions(compiled=False))
def test_gpu_strided_rows(op: str, solution: str, suffix: str, cuda_compiled: None) -> None:
    if solution not in KERNELS and suffix != "bf16":
        pytest.skip("peers: bf16 only")
    width = 1024
    # +64: rows stay 16-byte aligned (vector path); +3: they do not (one element per access).
    for extra in (64, 3):
        name, args, expected = make_case(
            OPS[op], suffix, 9, width, "cuda", row_stride=width + extra
        )
        assert args[0].stride(0) == width + extra
        check(name, solution, args, expected)
        if solution in KERNELS:  # a strided destination as well
            out_wide = torch.empty(
                9, expected.shape[1] + extra, dtype=expected.dtype, device="cuda"
            )
            check(name, solution, args, expected, out=out_wide[:, : expected.shape[1]])


@gpu
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.parametrize("suffix", list(DTYPES))
@pytest.mark.parametrize(
    ("op", "solution"), [p for p in gpu_solutions(compiled=False) if OPS[p[0]].gated]
)
def test_gpu_extreme_gates(op: str, solution: str, suffix: str, cuda_compiled: None) -> None:
    """|gate| = 100 (SiLU) or 30 (GELU): exp overflows on one side and vanishes on the other."""
    if solution not in KERNELS and suffix != "bf16":
        pytest.skip("peers: bf16 only")
    spec = OPS[op]
    name, args, expected = make_case(spec, suffix, 6, 520, "cuda", gate_range=spec.gate_range)
    gate = args[0][:, 0].float().cpu()
    assert float(gate.min()) == -spec.gate_range and float(gate.max()) == spec.gate_range
    # The reference reaches the limits there: act(-R) * up is 0 (to float32's smallest numbers).
    assert float(expected[0::2, 0].abs().max()) < 1e-30
    check(name, solution, args, expected)


@gpu
@pytest.mark.parametrize(("op", "solution"), gpu_solutions(kernels_only=True))
def test_gpu_million_rows(op: str, solution: str, cuda_compiled: None) -> None:
    """A million narrow rows: many rows per block or program."""
    width = 64  # d = 32 for the gated operators: 16-byte vectors
    case = make_case(OPS[op], "bf16", 1_000_003, width, "cuda", reference_on_device=True)
    check(case[0], solution, *case[1:])


@gpu
@pytest.mark.parametrize(("op", "solution"), gpu_solutions(kernels_only=True))
def test_gpu_rows_past_grid_limit(op: str, solution: str, cuda_compiled: None) -> None:
    """Rows wide enough for one row per CUDA block and more of them than gridDim.y's 65535: the
    CUDA kernels loop over rows."""
    width = 4112 if OPS[op].gated else 2056  # 257 vectors of output per row
    case = make_case(OPS[op], "bf16", 65_600, width, "cuda", reference_on_device=True)
    check(case[0], solution, *case[1:])


@gpu
@pytest.mark.parametrize(("op", "solution"), gpu_solutions(kernels_only=True))
def test_gpu_64bit_row_offsets(op: str, solution: str, cuda_compiled: None) -> None:
    """Row 2 starts 2^31 + 128 elements in: 32-bit offsets would wrap. Two 4.3 GB buffers."""
    spec, rows, width, stride = OPS[op], 3, 256, 2**30 + 64
    out_width = width // 2 if spec.gated else width
    x = torch.empty((rows - 1) * stride + width, dtype=torch.bfloat16, device="cuda")
    x = x.as_strided((rows, width), (stride, 1))
    _, args, _ = make_case(spec, "bf16", rows, width, "cuda")
    x.copy_(args[0])
    args[0] = x
    name = f"{spec.name}_bf16"
    expected = reference(name)["run"](
        *[a.cpu() if isinstance(a, torch.Tensor) else a for a in args]
    )
    out = torch.empty((rows - 1) * stride + out_width, dtype=torch.bfloat16, device="cuda")
    check(name, solution, args, expected, out=out.as_strided((rows, out_width), (stride, 1)))
    del x, out, args
    torch.cuda.empty_cache()
