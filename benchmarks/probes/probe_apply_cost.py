"""Where apply's eager cost goes on a GPU host: nanoseconds per call of each piece of the hot path of
``kernelarena.ops.<op>`` at 128 rows (bf16), against the same solution called directly.

    python benchmarks/probes/probe_apply_cost.py      # on a GPU machine, with the shipped traces

Rows: the operator (``kernelarena.ops``), the prepared call its key lookup returns, the eager
winner's prepared call made directly (``solution_call``, as ``bench_apply_choice.py`` calls it), and
the key lookup alone; each timed twice in opposite orders (host drift is large on the lent
machines). Also the pieces: the capture query, ``torch.compiler.is_compiling``, one tensor attribute.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

import kernelarena
import kernelarena.ops as ops
from kernelarena.dispatch.calls import capture_check, solution_call
from kernelarena.dispatch.signature import bind_call
from kernelarena.dispatch.table import shape_key


def per_call_ns(fn: Callable[[], Any], calls: int = 2000, rounds: int = 15) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(rounds):
        began = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - began) / calls * 1e9)
    return statistics.median(samples)


def probe(
    runtime: Any, name: str, operator: Callable[..., Any], args: list[Any], device: torch.device
) -> str:
    definition = runtime.trace_set.definitions[name]
    operator(*args)  # prepares the key
    site = operator.__kernelarena_site__  # type: ignore[attr-defined]
    call, _ = site.lookup(args)
    binding = bind_call(site.candidates, tuple(args), site.parameters, site.label)
    key = shape_key(definition, binding.axes, binding.flags)
    winner = {
        rank: runtime.table(definition, device, rank).choose(key).solutions[0]
        for rank in ("eager", "gpu")
    }
    runnable = runtime.runnable(definition, winner["eager"], device)
    assert runnable is not None, winner
    direct, _ = solution_call(runnable, binding)
    timed = {
        "operator": lambda: operator(*args),
        "prepared": lambda: call(*args),
        "direct": lambda: direct(*args),
        "lookup": lambda: site.lookup(args),
    }
    forward = {k: per_call_ns(f) for k, f in timed.items()}
    backward = {k: per_call_ns(f) for k, f in reversed(timed.items())}
    figures = ", ".join(f"{k} {forward[k]:.0f} / {backward[k]:.0f}" for k in timed)
    return f"{name}: eager winner {winner['eager']}, graph winner {winner['gpu']}; ns: {figures}"


def main() -> None:
    device = torch.device("cuda:0")
    runtime = kernelarena.enable_apply()
    bf16 = torch.bfloat16

    def rows(n: int) -> torch.Tensor:
        return torch.randn(128, n, device=device, dtype=bf16)

    weight = torch.randn(4096, device=device, dtype=bf16)
    cases = {
        "rmsnorm_bf16": (ops.rmsnorm, [rows(4096), weight, 1e-6]),
        "silu_and_mul_bf16": (ops.silu_and_mul, [rows(4096)]),
        "fused_add_rmsnorm_bf16": (ops.fused_add_rmsnorm, [rows(4096), rows(4096), weight, 1e-6]),
    }
    tiny = torch.randn(4, device=device)
    pieces = {
        "torch.cuda.is_current_stream_capturing": torch.cuda.is_current_stream_capturing,
        "capture_check (apply's query)": capture_check(device),
        "torch.compiler.is_compiling": torch.compiler.is_compiling,
        "tensor.shape": lambda: tiny.shape,
        "tensor.device": lambda: tiny.device,
        "empty lambda": lambda: None,
    }
    print("; ".join(f"{name} {per_call_ns(fn):.0f} ns" for name, fn in pieces.items()))
    for name, (operator, args) in cases.items():
        print(probe(runtime, name, operator, args, device))


if __name__ == "__main__":
    main()
