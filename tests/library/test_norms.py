"""The norms: rmsnorm, fused_add_rmsnorm (out of place and in place) and layernorm.

Every solution is checked against the definition's float32 reference with the definition's own
per-dtype tolerances (their reasons are stated beside them in the operator specs), on fresh random
inputs, with outputs poisoned (NaN) before the call and non-aliased inputs checked unchanged after.
On CPU: Triton under its interpreter at small sizes, torch eager, and each CUDA file compiled for
sm_90a. On the GPU (marked ``gpu``): every solution at every dtype, odd widths, 0 rows, strided
inputs and outputs, rows too wide to stage, extreme values, a million rows, in-place semantics.

Solutions are built from the operator specs directly (not through the library loader), so the
in-place family is tested whether or not the loader registers it yet.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import triton

from kernelarena.compile import DependencyMissing, Runnable, build_solution
from kernelarena.data import Definition
from kernelarena.library.fused_add_rmsnorm import OPERATOR as FUSED
from kernelarena.library.fused_add_rmsnorm import OPERATOR_INPLACE as FUSED_INPLACE
from kernelarena.library.layernorm import OPERATOR as LAYERNORM
from kernelarena.library.rmsnorm import OPERATOR as RMSNORM
from kernelarena.testing import assert_close
from tests.library.tuning_stand_ins import stand_in_tuning

SPECS = {spec.name: spec for spec in (RMSNORM, FUSED, FUSED_INPLACE, LAYERNORM)}
OPS = tuple(SPECS)
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
EPS = {
    "rmsnorm": 1e-6,
    "fused_add_rmsnorm": 1e-6,
    "fused_add_rmsnorm_inplace": 1e-6,
    "layernorm": 1e-5,
}


@dataclass(frozen=True)
class Case:
    rows: int
    hidden: int
    params: tuple[tuple[str, Any], ...] = ()  # make_inputs params: row_stride, x_scale, x_offset
    out_stride: int | None = None  # lay the outputs (destination-passing style) out strided

    def __str__(self) -> str:
        extra = "".join(f"-{k}{v:g}" for k, v in self.params)
        return f"{self.rows}x{self.hidden}{extra}" + (
            f"-out{self.out_stride}" if self.out_stride else ""
        )


# -- building and running ------------------------------------------------------------------------


@functools.cache
def definition(op: str, suffix: str) -> Definition:
    return next(d for d in SPECS[op].definitions() if d.name == f"{op}_{suffix}")


@functools.cache
def reference(op: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(definition(op, "fp32").reference, f"<reference {op}>", "exec"), namespace)
    return namespace


@functools.cache
def built(op: str, suffix: str, solution: str, device: str) -> Runnable:
    spec = SPECS[op]
    variant = next(v for v in spec.variants if v.suffix == suffix)
    name = f"{op}_{suffix}_{solution}"
    found = next(s for s in spec.solutions_for(variant) if s.name == name)
    return build_solution(definition(op, suffix), found, device)


def make_inputs(
    op: str, suffix: str, case: Case, device: torch.device, seed: int
) -> dict[str, Any]:
    """Standard normal tensors (as the engine draws them), then the reference's make_inputs."""
    generator = torch.Generator(device=device).manual_seed(seed)
    axes = {"rows": case.rows, "hidden": case.hidden}
    inputs: dict[str, Any] = {}
    for name, spec in definition(op, suffix).inputs.items():
        if spec.shape is None:
            inputs[name] = EPS[op]
        else:
            shape = tuple(axes[a] for a in spec.shape)
            inputs[name] = torch.randn(shape, generator=generator, device=device).to(DTYPES[suffix])
    return reference(op)["make_inputs"](axes, inputs, dict(case.params), generator, device)


def poisoned(case: Case, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    width = case.out_stride or case.hidden
    return torch.full((case.rows, width), float("nan"), dtype=dtype, device=device)[
        :, : case.hidden
    ]


def assert_within(
    actual: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float, name: str
) -> None:
    """assert_close, screened on the tensor's device first (a million rows stay on the GPU); the
    message comes from assert_close over the first rows that fail."""
    assert actual.shape == expected.shape, (
        f"{name}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    )
    a, e = actual.float(), expected.float()
    bad = ~((a - e).abs() <= atol + rtol * e.abs()) & ~(torch.isinf(e) & (a == e))
    if bool(bad.any()):
        rows = bad.any(dim=-1).nonzero()[:4, 0]
        assert_close(actual[rows], expected[rows], atol, rtol, f"{name} (rows {rows.tolist()})")


def check(
    op: str,
    suffix: str,
    solution: str,
    device: torch.device,
    case: Case,
    seed: int = 0,
    config: Any = None,
) -> None:
    """``config``: a Triton solution's launch plan (one of its ``tuning_configs``), run untuned
    through its ``run_with_config``."""
    d = definition(op, suffix)
    try:
        runnable = built(op, suffix, solution, str(device))
    except DependencyMissing as missing:
        pytest.skip(str(missing))
    inputs = make_inputs(op, suffix, case, device, seed)
    arguments = [inputs[n] for n in d.inputs]
    with torch.no_grad():
        result = reference(op)["run"](
            *[a.clone() if isinstance(a, torch.Tensor) else a for a in arguments]
        )
    expected = dict(zip(d.outputs, result if isinstance(result, tuple) else (result,)))
    aliased = {spec.aliases for spec in d.outputs.values() if spec.aliases}
    untouched = {
        n: v.clone() for n, v in inputs.items() if isinstance(v, torch.Tensor) and n not in aliased
    }
    outputs = {
        n: poisoned(case, DTYPES[suffix], device)
        for n, spec in d.outputs.items()
        if spec.aliases is None
    }
    if config is not None:
        in_place = [inputs[spec.aliases] for spec in d.outputs.values() if spec.aliases]
        runnable.fn.__globals__["run_with_config"](
            *arguments, *(in_place or outputs.values()), config
        )
        produced = outputs
    elif runnable.destination_passing_style:
        runnable(*arguments, *outputs.values())
        produced = outputs
    else:
        returned = runnable(*arguments)
        produced = dict(zip(d.outputs, returned if isinstance(returned, tuple) else (returned,)))
    for name, spec in d.outputs.items():
        if spec.aliases is not None:
            produced[name] = inputs[spec.aliases]
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    label = f"{d.name} {solution} {case}"
    for name in d.outputs:
        tolerance = d.tolerance_for(name)
        assert_within(
            produced[name], expected[name], tolerance.atol, tolerance.rtol, f"{label}: {name}"
        )
    for name, before in untouched.items():
        assert torch.equal(before, inputs[name]), f"{label}: input '{name}' was changed"


# -- CPU -----------------------------------------------------------------------------------------

# Tiny shapes for the interpreter: an empty batch, one element, odd widths, several rows to a
# program, strided inputs and outputs, and a row past the Triton single-pass limit (32768).
CPU_CASES = [
    Case(0, 64),
    Case(1, 1),
    Case(3, 33),
    Case(4, 1000),
    Case(5, 128),
    Case(3, 100, (("row_stride", 136),), out_stride=120),
]
CPU_EXTREMES = {
    "rmsnorm": [
        ("fp16", Case(3, 256, (("x_scale", 1e4),))),
        ("fp32", Case(3, 256, (("x_scale", 1e-4),))),
    ],
    "fused_add_rmsnorm": [("fp16", Case(3, 256, (("x_scale", 5e3),)))],
    "fused_add_rmsnorm_inplace": [("fp32", Case(3, 256, (("x_scale", 1e-4),)))],
    "layernorm": [
        ("bf16", Case(3, 256, (("x_offset", 1000.0),))),
        ("fp16", Case(3, 256, (("x_scale", 1e-3),))),
    ],
}


@pytest.mark.parametrize("case", CPU_CASES, ids=str)
@pytest.mark.parametrize("suffix", list(DTYPES))
@pytest.mark.parametrize("op", OPS)
def test_triton(op: str, suffix: str, case: Case, device: torch.device) -> None:
    check(op, suffix, "triton", device, case)


def tuning_configs(op: str, suffix: str, device: torch.device, case: Case) -> list[Any]:
    """Every launch plan the Triton solution may tune over for ``case`` (multiprocessors=1: the
    variants kept for many programs too)."""
    module = built(op, suffix, "triton", str(device)).fn.__globals__
    return module["tuning_configs"](case.rows, case.hidden, 1)


# Shapes with several candidates under the interpreter: 8 rows of 128 a program (EVEN_N), 4 rows
# of 1000 (masked columns), strided rows and outputs.
CPU_CANDIDATE_CASES = [
    Case(5, 128),
    Case(7, 1000),
    Case(9, 1000, (("row_stride", 1040),), out_stride=1010),
]


@pytest.mark.parametrize("suffix", list(DTYPES))
@pytest.mark.parametrize("op", OPS)
def test_triton_every_tuning_candidate(op: str, suffix: str, device: torch.device) -> None:
    """Every plan the device may pick is correct, in place too (out aliasing x)."""
    for case in CPU_CANDIDATE_CASES:
        configs = tuning_configs(op, suffix, device, case)
        assert configs, case
        for config in configs:
            check(op, suffix, "triton", device, case, config=config)


@pytest.mark.parametrize("op", OPS)
def test_triton_tuning_plumbing(
    op: str, device: torch.device, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tuned path, under the interpreter with a stand-in for the GPU timer that makes the last
    candidate fastest: every candidate runs once, the pick is cached and reused, the outputs are
    right. In place never tunes (see fused_add_rmsnorm/triton): the fixed plan, nothing timed."""
    if device.type == "cuda":
        pytest.skip("CPU test (the GPU tests run the real tuning)")
    module = built(op, "fp32", "triton", str(device)).fn.__globals__
    timed: list[int] = []

    def bench(kernel_call: Any, quantiles: Any) -> list[float]:
        kernel_call()
        timed.append(1)
        return [1.0 / len(timed)] * len(quantiles)

    stand_in_tuning(monkeypatch, module, bench)
    case = Case(7, 1000)
    candidates = module["tuning_configs"](case.rows, case.hidden, 1)
    check(op, "fp32", "triton", device, case)
    if op.endswith("_inplace"):
        assert timed == [] and module["tuned_plans"]() == {}
        return
    assert len(timed) == len(candidates) > 1
    assert list(module["tuned_plans"]().values()) == [str(candidates[-1])]
    check(op, "fp32", "triton", device, case, seed=1)
    assert len(timed) == len(candidates), "the pick is cached"


@pytest.mark.parametrize("op", [op for op in OPS if not op.endswith("_inplace")])
def test_triton_tuning_picks_are_kept_on_disk_per_tuner(
    op: str, device: torch.device, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every tuner asks Triton to keep its timings on disk (cache_results), and two tuners with the
    same candidates and the same width (row buckets 8 and 16 here) still differ in their tuning
    key, which names the file those timings go to: one never reads the other's pick."""
    if device.type == "cuda":
        pytest.skip("CPU test (the GPU tests run the real tuning)")
    module = built(op, "fp32", "triton", str(device)).fn.__globals__
    made: list[dict[str, Any]] = []
    autotune = triton.autotune

    def spy(*args: Any, **kwargs: Any) -> Any:
        made.append(kwargs)
        return autotune(*args, **kwargs)

    def bench(kernel_call: Any, quantiles: Any) -> list[float]:
        kernel_call()
        return [1.0] * len(quantiles)

    monkeypatch.setattr(triton, "autotune", spy)
    tuners = stand_in_tuning(monkeypatch, module, bench)
    for rows in (7, 13):
        check(op, "fp32", "triton", device, Case(rows, 1000))
    assert len(made) == 2 and all(m["cache_results"] and "tune_tag" in m["key"] for m in made)
    autotuners = list(tuners.made.values())
    assert [str(c) for c in autotuners[0].configs] == [str(c) for c in autotuners[1].configs]
    (first,), (second,) = (list(t.cache) for t in autotuners)
    assert first[0] == second[0] == 1000 and first != second


@pytest.mark.parametrize("op", OPS)
def test_triton_wide_rows(op: str, device: torch.device) -> None:
    check(op, "bf16", "triton", device, Case(2, 33000))


@pytest.mark.parametrize(
    ("op", "suffix", "case"), [(op, s, c) for op, cases in CPU_EXTREMES.items() for s, c in cases]
)
def test_triton_extreme_values(op: str, suffix: str, case: Case, device: torch.device) -> None:
    check(op, suffix, "triton", device, case)


@pytest.mark.parametrize("case", [Case(3, 33), Case(4, 1000, (("row_stride", 1040),))], ids=str)
@pytest.mark.parametrize("suffix", list(DTYPES))
@pytest.mark.parametrize("op", OPS)
def test_torch_eager(op: str, suffix: str, case: Case, device: torch.device) -> None:
    check(op, suffix, "torch_eager", device, case)


@pytest.mark.slow
@pytest.mark.parametrize(
    "op", ["rmsnorm", "fused_add_rmsnorm", "fused_add_rmsnorm_inplace", "layernorm"]
)
def test_cuda_compiles(op: str) -> None:
    """Built for sm_90a on any machine (without a GPU it is compiled and loaded, not run); both
    fused entry points come from one file."""
    runnable = built(op, "bf16", "cuda", "cpu")
    assert runnable.artifact is not None and runnable.artifact.endswith(".so")


def test_fused_reference_normalizes_the_stored_sum() -> None:
    """The stated convention: residual_out is x + residual rounded once, and out is rmsnorm of
    residual_out exactly as stored."""
    x = torch.randn(4, 300).bfloat16()
    r = torch.randn(4, 300).bfloat16()
    w = torch.randn(300).bfloat16()
    out, residual_out = reference("fused_add_rmsnorm")["run"](x, r, w, 1e-6)
    assert torch.equal(residual_out, (x.float() + r.float()).bfloat16())
    assert torch.equal(out, reference("rmsnorm")["run"](residual_out, w, 1e-6))


def test_references_match_float64() -> None:
    """The float32 references agree with the same formulas in float64."""
    x = torch.randn(8, 4096, dtype=torch.float64) * 3 + 1
    w, b = torch.randn(4096, dtype=torch.float64), torch.randn(4096, dtype=torch.float64)
    rms = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-6) * w
    centered = x - x.mean(-1, keepdim=True)
    ln = centered * torch.rsqrt(centered.square().mean(-1, keepdim=True) + 1e-5) * w + b
    f = torch.float32
    assert_close(reference("rmsnorm")["run"](x.to(f), w.to(f), 1e-6), rms, 1e-5, 1e-5)
    assert_close(reference("layernorm")["run"](x.to(f), w.to(f), b.to(f), 1e-5), ln, 1e-4, 1e-5)


def test_specs_validate() -> None:
    """Definitions, solutions and workloads of both fused families (and the others) expand."""
    for spec in SPECS.values():
        for variant in spec.variants:
            d = definition(spec.name, variant.suffix)
            assert spec.solutions_for(variant), d.name
            assert any("smoke" in (w.tags or []) for w in spec.workloads_for(variant, d)), d.name
    assert definition("fused_add_rmsnorm_inplace", "bf16").outputs["out"].aliases == "x"


# -- GPU -----------------------------------------------------------------------------------------

# 129 x 3000: tuned on the device (past TUNE_MIN_ELEMENTS), masked columns, a ragged last program.
GPU_EVERY_DTYPE = [Case(0, 4096), Case(33, 1000), Case(7, 5120), Case(129, 3000)]
GPU_BF16 = [
    Case(1, 1),
    Case(5, 4097),  # not a whole number of 16-byte vectors: one element per access
    Case(4, 8192),
    Case(3, 16384),
    Case(300, 4096),  # CUDA: a few hundred rows, where widening for the launch-bound case stops
    Case(9, 1000, (("row_stride", 1536),), out_stride=1100),
    Case(5, 4096, (("row_stride", 4100),), out_stride=4104),  # strides not vector multiples
    Case(3, 24576),  # CUDA: 48 KB of shared memory a row, past the default limit (opt in)
    Case(2, 70000),  # too wide to stage (CUDA) and past the Triton single-pass limit
]
GPU_OTHER = [
    ("fp32", Case(4, 8192)),  # CUDA fused: 64 KB of shared memory a row (opt in)
    ("fp32", Case(3, 8193)),  # CUDA: too wide for one element per access in one pass
    ("fp32", Case(2, 20000)),  # CUDA: too wide to stage at 16 bytes per access
    ("fp16", Case(17, 2048, (("row_stride", 2056),), out_stride=2064)),
]
GPU_EXTREMES = {
    "rmsnorm": [("fp16", (("x_scale", 1e4),)), ("fp32", (("x_scale", 1e-4),))],
    "fused_add_rmsnorm": [("fp16", (("x_scale", 5e3),)), ("fp32", (("x_scale", 1e-4),))],
    "fused_add_rmsnorm_inplace": [("fp16", (("x_scale", 5e3),))],
    "layernorm": [("bf16", (("x_offset", 1000.0),)), ("fp32", (("x_scale", 1e-3),))],
}


@pytest.fixture(scope="module")
def cuda_built() -> None:
    """nvcc once per .cu file, the three in parallel processes (the in-place entry shares the fused
    file); the build cache is shared and locked, so the tests find them built."""
    code = "import sys\nfrom kernelarena.testing import build\nbuild(sys.argv[1], 'cuda', 'cpu')"
    names = ("rmsnorm_bf16", "fused_add_rmsnorm_bf16", "layernorm_bf16")
    jobs = [subprocess.Popen([sys.executable, "-c", code, name]) for name in names]
    for job in jobs:
        job.wait()


def _gpu_cases() -> list[tuple[str, Case]]:
    cases = [(s, c) for s in DTYPES for c in GPU_EVERY_DTYPE]
    return cases + [("bf16", c) for c in GPU_BF16] + GPU_OTHER


@pytest.mark.gpu
@pytest.mark.parametrize("solution", ["triton", "cuda"])
@pytest.mark.parametrize("op", OPS)
def test_gpu_ours(op: str, solution: str, device: torch.device, cuda_built: None) -> None:
    """One test per (operator, solution): every case runs, and all failures are reported together."""
    cases = _gpu_cases() + [(s, Case(6, 2048, p)) for s, p in GPU_EXTREMES[op]]
    failures = []
    for seed, (suffix, case) in enumerate(cases):
        try:
            check(op, suffix, solution, device, case, seed)
        except AssertionError as error:
            failures.append(f"{suffix} {case}: {str(error)[:400]}")
    assert not failures, f"{len(failures)} of {len(cases)} cases failed:\n" + "\n".join(failures)


@pytest.mark.gpu
@pytest.mark.parametrize("op", OPS)
def test_gpu_triton_every_tuning_candidate(op: str, device: torch.device) -> None:
    """Every plan the tuner may pick, run untuned, in bf16: masked and power-of-two widths, a row
    count no plan divides, weight loaded early and late."""
    failures, count = [], 0
    for seed, case in enumerate((Case(37, 3000), Case(37, 4096))):
        for config in tuning_configs(op, "bf16", device, case):
            count += 1
            try:
                check(op, "bf16", "triton", device, case, seed, config=config)
            except AssertionError as error:
                failures.append(f"{case} {config}: {str(error)[:300]}")
    assert not failures, f"{len(failures)} of {count} plans failed:\n" + "\n".join(failures)


@pytest.mark.gpu
@pytest.mark.parametrize("suffix", ["bf16", "fp32"])
def test_gpu_triton_inplace_tunes_without_writing_its_inputs(
    suffix: str, device: torch.device
) -> None:
    """In-place calls of a shape large enough to be tuned (they take the fixed plan: see the
    solution's docstring) leave x and residual exactly as one in-place call should."""
    check("fused_add_rmsnorm_inplace", suffix, "triton", device, Case(257, 2500), seed=7)
    check("fused_add_rmsnorm_inplace", suffix, "triton", device, Case(257, 2500), seed=8)


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("op", "solution"),
    [
        ("rmsnorm", "triton"),
        ("rmsnorm", "cuda"),
        ("fused_add_rmsnorm_inplace", "cuda"),
        ("layernorm", "triton"),
    ],
)
def test_gpu_a_million_rows(op: str, solution: str, device: torch.device, cuda_built: None) -> None:
    check(op, "bf16", solution, device, Case(1_000_000, 1000))
    torch.cuda.empty_cache()


@pytest.mark.gpu
@pytest.mark.parametrize("solution", ["triton", "cuda", "torch_eager"])
def test_gpu_inplace_writes_into_its_inputs(
    solution: str, device: torch.device, cuda_built: None
) -> None:
    """x becomes out and residual becomes residual_out, in the caller's tensors (strided ones too),
    and the elements between strided rows are left alone."""
    d = definition("fused_add_rmsnorm_inplace", "bf16")
    runnable = built("fused_add_rmsnorm_inplace", "bf16", solution, str(device))
    x_storage = torch.randn(6, 1100, device=device).bfloat16()
    r_storage = torch.randn(6, 1100, device=device).bfloat16()
    x, r = x_storage[:, :1000], r_storage[:, :1000]
    w = torch.randn(1000, device=device).bfloat16()
    gaps = (x_storage[:, 1000:].clone(), r_storage[:, 1000:].clone())
    out, residual_out = reference("fused_add_rmsnorm")["run"](x.clone(), r.clone(), w, 1e-6)
    x_pointer, r_pointer = x.data_ptr(), r.data_ptr()
    assert runnable(x, r, w, 1e-6) is None
    torch.cuda.synchronize(device)
    assert (x.data_ptr(), r.data_ptr()) == (x_pointer, r_pointer)
    for name, actual, expected in (("out", x, out), ("residual_out", r, residual_out)):
        tolerance = d.tolerance_for(name)
        assert_within(actual, expected, tolerance.atol, tolerance.rtol, f"{solution}: {name}")
    assert torch.equal(x_storage[:, 1000:], gaps[0]) and torch.equal(r_storage[:, 1000:], gaps[1])


PEER_CASES = {
    "torch_eager": [
        ("bf16", Case(7, 5120)),
        ("fp16", Case(9, 1000, (("row_stride", 1536),))),
        ("fp32", Case(5, 4097)),
    ],
    "torch_compile": [("bf16", Case(7, 5120))],
    # Liger's layernorm computes in the storage dtype for 16-bit inputs; the benchmark reports how
    # far that lands from this definition. float32 must match.
    "liger": [("fp32", Case(5, 4097)), ("bf16", Case(7, 5120))],
}


@pytest.mark.gpu
@pytest.mark.parametrize("peer", list(PEER_CASES))
@pytest.mark.parametrize("op", OPS)
def test_gpu_peers(op: str, peer: str, device: torch.device) -> None:
    variant = SPECS[op].variants[0]
    if not any(s.name.endswith(f"_{peer}") for s in SPECS[op].solutions_for(variant)):
        pytest.skip(f"{op} has no {peer} solution")
    for suffix, case in PEER_CASES[peer]:
        if peer == "liger" and op == "layernorm" and suffix != "fp32":
            continue
        check(op, suffix, peer, device, case)
