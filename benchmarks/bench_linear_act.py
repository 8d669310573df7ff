"""linear_act (act(x @ W^T + b), GELU tanh form) and gated_mlp (silu(x @ Wg^T) * (x @ Wu^T)), bf16.

Cases: linear at 8192x8192x8192 and (m=4096, n=14336, k=4096); gated_mlp at (4096, 14336, 4096).
Providers: ``triton`` (ours, persistent TMA matmul, activation in the epilogue), ``cuda`` (ours,
cuBLASLt with the GELU_BIAS epilogue), ``eager`` (torch: addmm, then GELU in place), ``compile``
(torch.compile of F.linear + GELU), ``torch_addmm_gelu`` (torch._addmm_activation, torch's own
route to the cuBLASLt epilogue), and the ceiling row ``cublas_linear_only (ceiling)``: the linear
alone, with its bias but no activation (for gated_mlp, the two matmuls alone). All but the ceilings
and torch_addmm_gelu go through the library's solutions.

FLOPs, counted explicitly: 2 m n k for linear, 4 m n k for gated_mlp (two matmuls); TFLOP/s =
FLOPs / median time, the L2 flushed between calls (the data, 100+ MB, is larger than L2 anyway).

Correctness, once per provider before timing: the output against the definition's float32
reference (computed on the GPU with TF32 off) by relative Frobenius error, bound 5e-3 in bf16 (one
rounding of the output alone gives ~1.5e-3; a wrong tile gives 1e-1 or more), and elementwise under
the definition's tolerance. A provider that fails or raises is reported and not timed. The ceiling
rows compute something else and are not checked.

Bars (issue 7, bf16, GELU): ours at least torch's linear followed by GELU (``eager``, measured in
this run; on an H200 the issue measured 657 and 614 TFLOP/s), the goal cuBLAS's linear alone (the
ceiling row; 687 and 683 on an H200), i.e. the activation for free. The summary printed last says
which hold.

    python benchmarks/bench_linear_act.py [--quick] [--sweep] [--no-write] [--cpu-check]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from kernelarena.compile import DependencyMissing, Runnable
from kernelarena.testing import build, library_definition, reference

try:
    from benchmarks import harness
except ModuleNotFoundError:  # run as a script: benchmarks/ itself is on sys.path
    import harness  # type: ignore[no-redef]

LINEAR_SHAPES = [(8192, 8192, 8192), (4096, 14336, 4096)]
GATED_SHAPES = [(4096, 14336, 4096)]
FROBENIUS_BOUND = 5e-3  # bf16
SOLUTIONS = {"triton": "triton", "cuda": "cuda", "eager": "torch_eager", "compile": "torch_compile"}
CEILING = "cublas_linear_only (ceiling)"
ISSUE_BARS = {(8192, 8192, 8192): (657, 687), (4096, 14336, 4096): (614, 683)}  # H200, TFLOP/s


def failing(message: str) -> Callable[[int], Any]:
    def fn(_: int) -> Any:
        raise AssertionError(message)

    return fn


def skipped(message: str) -> Callable[[int], Any]:
    def fn(_: int) -> Any:
        raise harness.Unsupported(message)

    return fn


_BUILT: dict[tuple[str, str], Runnable | Exception] = {}


def solution(definition: str, suffix: str, device: torch.device) -> Runnable:
    if device.type != "cuda" and suffix in ("cuda", "torch_compile"):
        raise harness.Unsupported("needs a GPU")
    key = (definition, suffix)
    if key not in _BUILT:
        try:
            _BUILT[key] = build(definition, suffix, device.type)
        except Exception as error:  # reported as the provider's row
            _BUILT[key] = error
    built = _BUILT[key]
    if isinstance(built, DependencyMissing):
        raise harness.Unsupported(str(built))
    if isinstance(built, Exception):
        raise built
    return built


def problem_with(got: Any, expected: torch.Tensor, definition: str) -> str | None:
    """None when ``got`` passes the Frobenius bound and the elementwise tolerance."""
    if (
        not isinstance(got, torch.Tensor)
        or got.shape != expected.shape
        or got.dtype != expected.dtype
    ):
        return f"returned {type(got).__name__} {getattr(got, 'shape', '')}, expected {tuple(expected.shape)}"
    g, e = got.float(), expected.float()
    if not bool(torch.isfinite(g).all()):
        return f"{int((~torch.isfinite(g)).sum())} elements are NaN or infinite"
    frobenius = ((g - e).norm() / e.norm().clamp_min(1e-30)).item()
    tolerance = library_definition(definition).tolerance_for("out")
    bad = int((~((g - e).abs() <= tolerance.atol + tolerance.rtol * e.abs())).sum())
    if frobenius > FROBENIUS_BOUND or bad:
        return (
            f"relative Frobenius error {frobenius:.2e} (bound {FROBENIUS_BOUND:g}); {bad} elements "
            f"outside atol={tolerance.atol:g} rtol={tolerance.rtol:g}"
        )
    print(f"    ok: relative Frobenius error {frobenius:.2e}", file=sys.stderr)
    return None


def checked(
    name: str,
    definition: str,
    call: Callable[[int], Any],
    out: torch.Tensor | None,
    expected: torch.Tensor,
    device: torch.device,
) -> Callable[[int], Any]:
    """Run once (out poisoned first), compare with the reference, then hand back ``call``."""
    print(f"  checking {name}", file=sys.stderr, flush=True)
    try:
        if out is not None:
            out.fill_(math.nan)
        result = call(0)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        problem = problem_with(out if out is not None else result, expected, definition)
    except harness.Unsupported:
        raise
    except Exception as error:
        problem = f"{type(error).__name__}: {error}"[:300]
    if problem is not None:
        print(f"    WRONG: {problem}", file=sys.stderr)
        return failing(f"{name} is wrong: {problem}")
    return call


def inputs(definition: str, m: int, n: int, k: int, device: torch.device) -> list[torch.Tensor]:
    spec = library_definition(definition)
    generator = torch.Generator(device=device).manual_seed(m * 31 + n * 7 + k)
    axes = {"m": m, "n": n, "k": k}
    made = {
        name: torch.randn(spec.shape_of(s, axes), generator=generator, device=device).to(
            torch.bfloat16
        )
        for name, s in spec.inputs.items()
    }
    made = reference(definition)["make_inputs"](axes, made, {}, generator, device)
    return [made[name] for name in spec.inputs]


def library_providers(
    definition: str,
    args: list[torch.Tensor],
    out: torch.Tensor,
    expected: torch.Tensor,
    names: list[str],
    device: torch.device,
) -> dict[str, Callable[[int], Any]]:
    providers: dict[str, Callable[[int], Any]] = {}
    for provider in names:
        try:
            run = solution(definition, SOLUTIONS[provider], device)
        except harness.Unsupported as error:
            providers[provider] = skipped(str(error))
            continue
        except Exception as error:
            providers[provider] = failing(f"build: {error}"[:300])
            continue
        if run.destination_passing_style:
            call = (lambda r: lambda _: r(*args, out))(run)
            providers[provider] = checked(provider, definition, call, out, expected, device)
        else:
            call = (lambda r: lambda _: r(*args))(run)
            providers[provider] = checked(provider, definition, call, None, expected, device)
    return providers


def linear_case(m: int, n: int, k: int, names: list[str], device: torch.device):
    definition = "linear_gelu_tanh_bf16"
    case = harness.Case(
        f"linear gelu_tanh bf16 {m}x{n}x{k}",
        {"op": "linear", "activation": "gelu_tanh", "dtype": "bf16", "m": m, "n": n, "k": k},
        flops=2.0 * m * n * k,
    )

    def factory() -> dict[str, Callable[[int], Any]]:
        print(f"{case.label}", file=sys.stderr, flush=True)
        x, weight, bias = inputs(definition, m, n, k, device)
        expected = reference(definition)["run"](x, weight, bias)
        out = torch.empty(m, n, dtype=torch.bfloat16, device=device)
        providers = library_providers(definition, [x, weight, bias], out, expected, names, device)
        if device.type == "cuda":
            fused = lambda _: torch._addmm_activation(bias, x, weight.t(), use_gelu=True)  # noqa: E731
            providers["torch_addmm_gelu"] = checked(
                "torch_addmm_gelu", definition, fused, None, expected, device
            )
        providers[CEILING] = lambda _: torch.addmm(bias, x, weight.t(), out=out)
        return providers

    return case, factory


def gated_case(m: int, n: int, k: int, names: list[str], device: torch.device):
    definition = "gated_mlp_bf16"
    case = harness.Case(
        f"gated_mlp bf16 {m}x{n}x{k}",
        {"op": "gated_mlp", "dtype": "bf16", "m": m, "n": n, "k": k},
        flops=4.0 * m * n * k,
    )

    def factory() -> dict[str, Callable[[int], Any]]:
        print(f"{case.label}", file=sys.stderr, flush=True)
        x, w_gate, w_up = inputs(definition, m, n, k, device)
        expected = reference(definition)["run"](x, w_gate, w_up)
        out = torch.empty(m, n, dtype=torch.bfloat16, device=device)
        providers = library_providers(definition, [x, w_gate, w_up], out, expected, names, device)
        gate, up = torch.empty_like(out), torch.empty_like(out)

        def two_matmuls(_: int) -> None:
            torch.mm(x, w_gate.t(), out=gate)
            torch.mm(x, w_up.t(), out=up)

        providers["cublas_two_matmuls_only (ceiling)"] = two_matmuls
        return providers

    return case, factory


def sweep_cases(device: torch.device) -> list[tuple[harness.Case, Any]]:
    """Triton tile configurations side by side (for tuning the defaults in the solutions)."""
    linear = solution("linear_gelu_tanh_bf16", "triton", device).fn.__globals__
    gated = solution("gated_mlp_bf16", "triton", device).fn.__globals__
    Linear, Gated = linear["Config"], gated["Config"]
    linear_configs = [
        Linear(128, 256, 64, 8, 8, 4, True),
        Linear(128, 256, 64, 8, 8, 3, True),
        Linear(128, 256, 64, 16, 8, 4, True),
        Linear(128, 256, 64, 4, 8, 4, True),
        Linear(256, 128, 64, 8, 8, 3, True),
        Linear(128, 128, 64, 8, 8, 4, True),
        Linear(128, 128, 64, 8, 8, 3, True, 2),
        Linear(128, 128, 64, 8, 4, 3, True, 2),
    ]
    gated_configs = [
        Gated(128, 128, 64, 8, 8, 4, True),
        Gated(128, 128, 64, 8, 8, 3, True),
        Gated(128, 128, 64, 16, 8, 4, True),
        Gated(128, 64, 64, 8, 4, 3, True, 2),
    ]
    made = []
    for (m, n, k), op, configs, launch in [
        *((s, "linear", linear_configs, linear["linear_act"]) for s in LINEAR_SHAPES),
        *((s, "gated_mlp", gated_configs, gated["gated_mlp"]) for s in GATED_SHAPES),
    ]:
        definition = "linear_gelu_tanh_bf16" if op == "linear" else "gated_mlp_bf16"
        flops = (2.0 if op == "linear" else 4.0) * m * n * k
        case = harness.Case(
            f"sweep {op} {m}x{n}x{k}", {"op": op, "m": m, "n": n, "k": k}, flops=flops
        )

        def factory(
            m=m, n=n, k=k, op=op, configs=configs, launch=launch, definition=definition, case=case
        ):
            print(case.label, file=sys.stderr, flush=True)
            args = inputs(definition, m, n, k, device)
            expected = reference(definition)["run"](*args)
            out = torch.empty(m, n, dtype=torch.bfloat16, device=device)
            extra = ("gelu_tanh",) if op == "linear" else ()
            providers = {}
            for c in configs:
                label = (
                    f"{c.block_m}x{c.block_n}x{c.block_k} g{c.group_m} w{c.num_warps} "
                    f"s{c.num_stages}{' sub' if c.epilogue_subtile else ''} x{c.programs_per_sm}/SM"
                )
                call = (lambda chosen: lambda _: launch(*args, out, *extra, config=chosen))(c)
                providers[label] = checked(label, definition, call, out, expected, device)
            return providers

        made.append((case, factory))
    return made


def report_shape(case: str) -> tuple[int, ...]:
    return tuple(int(v) for v in case.rsplit(" ", 1)[1].split("x"))


def summary(report: dict[str, Any]) -> None:
    by_case: dict[str, dict[str, float]] = {}
    for row in report["rows"]:
        by_case.setdefault(row["case"], {})
        if row["status"] == "ok":
            by_case[row["case"]][row["provider"]] = row["tflops"]
    print(
        f"\nsummary (bf16 TFLOP/s; matmul ceiling {report['ceilings']['matmul_tflops']:.0f} measured "
        "in this run)"
    )
    for case, rates in by_case.items():
        print(f"  {case}: " + ", ".join(f"{p} {v:.0f}" for p, v in rates.items()))
        if case.startswith("sweep") or case.startswith("gated"):
            continue
        ours = {p: rates[p] for p in ("triton", "cuda") if p in rates}
        floor = rates.get("eager")
        ceiling = next((v for p, v in rates.items() if p.endswith("(ceiling)")), None)
        shape = tuple(report_shape(case))
        if shape in ISSUE_BARS:
            eager_h200, cublas_h200 = ISSUE_BARS[shape]
            print(
                f"    (issue 7, H200: linear+GELU {eager_h200}, cuBLAS linear alone {cublas_h200})"
            )
        for provider, value in ours.items():
            verdicts = []
            if floor:
                verdicts.append(
                    "bar (>= eager linear+act) "
                    + ("met" if value >= floor else f"MISSED by {1 - value / floor:.1%}")
                )
            if ceiling:
                verdicts.append(f"goal (>= ceiling) {value / ceiling:.1%} of it")
            print(f"    {provider}: {value:.0f} TFLOP/s; " + "; ".join(verdicts))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="linear only; no torch.compile, no gated_mlp"
    )
    parser.add_argument(
        "--sweep", action="store_true", help="time Triton tile configurations instead"
    )
    parser.add_argument("--no-write", action="store_true", help="do not write benchmarks/results")
    parser.add_argument(
        "--cpu-check",
        action="store_true",
        help="check this script's plumbing on CPU at tiny sizes (Triton interpreted)",
    )
    args = parser.parse_args(argv)
    linear_shapes, gated_shapes = LINEAR_SHAPES, ([] if args.quick else GATED_SHAPES)
    names = ["triton", "cuda", "eager"] + ([] if args.quick else ["compile"])
    if args.cpu_check:
        os.environ["TRITON_INTERPRET"] = "1"  # before any solution module defines a kernel
        device, write = torch.device("cpu"), False
        linear_shapes, gated_shapes = [(33, 130, 96)], [(17, 48, 64)]
    elif torch.cuda.is_available():
        device, write = torch.device("cuda"), not args.no_write
    else:
        print("bench_linear_act: needs a CUDA GPU (or --cpu-check)", file=sys.stderr)
        return 2
    started = time.perf_counter()
    if args.sweep:
        cases = sweep_cases(device)
        name = "linear_act_sweep"
    else:
        cases = [linear_case(*s, names, device) for s in linear_shapes]
        cases += [gated_case(*s, [n for n in names if n != "cuda"], device) for s in gated_shapes]
        name = "linear_act"
    report = harness.run(name, cases, device=device, write=write)
    summary(report)
    print(
        f"\n{len(report['rows'])} rows in {time.perf_counter() - started:.0f} s; {report.get('path', '')}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
