"""scale, silu_and_mul, gelu_tanh_and_mul and gelu_and_mul: ours against the peers, side by side.

Providers: ``triton`` and ``cuda`` (ours), ``eager``, ``compile`` (torch.compile) and ``liger``
(Liger-Kernel, where installed: SiLU and tanh-GELU only), all but Liger through the library's own
solutions. Liger is timed in its own layout, the gate and up halves as two contiguous tensors (how
LigerSwiGLUMLP calls it), its best case; the library's Liger solution passes views of one [rows,
2 d] tensor, which Liger copies first.

Shapes are (rows, hidden) where hidden is the INPUT width: for the gated operators x is [rows,
hidden] and out is [rows, hidden / 2] (d = hidden / 2); for scale x and out are [rows, hidden].
Bytes, counted explicitly: scale moves rows * hidden * 2 elements (read + write); a gated operator
reads rows * hidden and writes rows * hidden / 2 elements. GB/s = bytes / median time.

Every provider is checked once per case against the definition's reference (float32, on the GPU)
under the definition's tolerance before it is timed; one that fails or raises is reported and
skipped. Cases under 40 us are timed as CUDA graph replays (the harness), larger ones with CUDA
events, the L2 flushed between calls. Inputs rotate over as many sets as fill twice the L2 (2 to
64) and each graph reads every set once, as the engine times the traces apply ranks by; outputs
rotate with them: ours (destination-passing style) write each set's own, and a peer's results are
held per set until the next call on that set (``kernelarena.evaluate.sandbox.graph_timing.held_per_set``), so no
provider writes into a block the previous call just freed, which keeps its writes in the L2. (Until
2026-11-25 up to 20 sets filled three times the L2, so at 128x4096 they stayed in it, and every
provider wrote one shared output.) The Triton solutions tune their tiles on the first call, which
the correctness check makes, outside the timing.

Bars (issue 6, bf16): at 32768x8192 at least 90% of the copy bandwidth measured in the same run; at
4096x4096 and 128x4096 at least as fast as the best of compile and Liger. The summary printed last
says which hold.

    python benchmarks/bench_activations.py [--quick] [--ops silu_and_mul,scale] [--no-write]
    (or python -m benchmarks.bench_activations ...)
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from kernelarena.compile import DependencyMissing, Runnable
from kernelarena.data import Tolerance
from kernelarena.evaluate.sandbox.graph_timing import graph_calls, held_per_set, sets_filling_l2
from kernelarena.testing import build, library_definition, reference

try:
    from benchmarks import harness
except ModuleNotFoundError:  # run as a script: benchmarks/ itself is on sys.path
    import harness  # type: ignore[no-redef]

OPS = ("scale", "silu_and_mul", "gelu_tanh_and_mul", "gelu_and_mul")
QUICK_OPS = ("scale", "silu_and_mul", "gelu_tanh_and_mul")
GATED = {"silu_and_mul", "gelu_tanh_and_mul", "gelu_and_mul"}
LIGER = {"silu_and_mul": "swiglu", "gelu_tanh_and_mul": "geglu"}
SHAPES_BF16 = [(32768, 8192), (4096, 4096), (128, 4096)]  # (rows, hidden = input width)
SHAPES_OTHER = [("fp16", 32768, 8192), ("fp32", 32768, 8192)]
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
SOLUTIONS = {"triton": "triton", "cuda": "cuda", "eager": "torch_eager", "compile": "torch_compile"}
CUDA_SOURCES = ("scale_bf16", "silu_and_mul_bf16", "gelu_and_mul_bf16")  # one build per .cu file


def bytes_moved(op: str, rows: int, hidden: int, itemsize: int) -> int:
    if op in GATED:
        return rows * hidden * itemsize + rows * (hidden // 2) * itemsize
    return 2 * rows * hidden * itemsize


def compile_cuda_in_parallel() -> None:
    """nvcc runs once per source, in parallel processes; the build cache is shared and locked."""
    code = "import sys\nfrom kernelarena.testing import build\nbuild(sys.argv[1], 'cuda', 'cpu')"
    jobs = [subprocess.Popen([sys.executable, "-c", code, n]) for n in CUDA_SOURCES]
    for job in jobs:
        job.wait()


_BUILT: dict[tuple[str, str], Runnable | Exception] = {}


def solution(definition: str, suffix: str, device: torch.device) -> Runnable:
    key = (definition, suffix)
    if device.type != "cuda" and suffix in ("cuda", "torch_compile"):
        raise harness.Unsupported("needs a GPU")
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


def liger_function(op: str) -> Any:
    try:
        if LIGER[op] == "swiglu":
            from liger_kernel.ops.swiglu import LigerSiLUMulFunction

            return LigerSiLUMulFunction
        from liger_kernel.ops.geglu import LigerGELUMulFunction

        return LigerGELUMulFunction
    except ImportError as error:
        raise harness.Unsupported(f"liger-kernel is not installed ({error})") from None


def mismatch(got: Any, expected: torch.Tensor, tolerance: Tolerance) -> str | None:
    """None when ``got`` is within tolerance everywhere; compared in float32 on the device."""
    if (
        not isinstance(got, torch.Tensor)
        or got.shape != expected.shape
        or got.dtype != expected.dtype
    ):
        described = (tuple(got.shape), got.dtype) if isinstance(got, torch.Tensor) else type(got)
        return f"returned {described}, expected {(tuple(expected.shape), expected.dtype)}"
    g, e = got.float(), expected.float()
    bad = ~((g - e).abs() <= tolerance.atol + tolerance.rtol * e.abs())
    bad &= ~(torch.isinf(e) & (g == e))
    count = int(bad.sum())
    if count == 0:
        return None
    first = bad.nonzero()[:3].tolist()
    limits = f"atol={tolerance.atol} rtol={tolerance.rtol}"
    return f"{count} of {bad.numel()} outside {limits}; first {first}"


def failing(message: str) -> Callable[[int], Any]:
    def fn(_: int) -> Any:
        raise AssertionError(message)

    return fn


def make_providers(
    op: str, suffix: str, rows: int, hidden: int, device: torch.device
) -> dict[str, Callable[[int], Any]]:
    name = f"{op}_{suffix}"
    dtype = DTYPES[suffix]
    sets = sets_filling_l2(bytes_moved(op, rows, hidden, dtype.itemsize), device)
    out_cols = hidden // 2 if op in GATED else hidden
    try:
        generator = torch.Generator(device=device).manual_seed(rows * 7 + hidden)
        xs = [
            torch.randn(rows, hidden, generator=generator, device=device).to(dtype)
            for _ in range(sets)
        ]
        # Every input set its own destination; the peers' results held per set (docstring).
        outs = [torch.empty(rows, out_cols, dtype=dtype, device=device) for _ in range(sets)]
        extra: tuple[Any, ...] = () if op in GATED else (1.5,)
        expected = reference(name)["run"](xs[0], *extra)
    except Exception as error:  # out of memory, most likely: the case is reported, the run goes on
        raise harness.Unsupported(f"inputs: {type(error).__name__}: {error}"[:300]) from None
    tolerance = library_definition(name).tolerance_for("out")

    def checked(
        provider: str, call: Callable[[int], Any], into: torch.Tensor | None
    ) -> Callable[[int], Any]:
        """Run once on input set 0 (outputs poisoned first), compare, then hand back ``call``
        with its results held per input set."""
        try:
            if into is not None:
                into.fill_(float("nan"))
            result = call(0)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            problem = mismatch(into if into is not None else result, expected, tolerance)
        except Exception as error:
            problem = f"{type(error).__name__}: {error}"
        if problem is not None:
            return failing(f"{provider} is wrong: {problem}")
        return held_per_set(call, sets)[0]

    providers: dict[str, Callable[[int], Any]] = {}
    for provider, suffix_name in SOLUTIONS.items():
        try:
            run = solution(name, suffix_name, device)
        except harness.Unsupported as error:
            providers[provider] = _skipped(str(error))
            continue
        except Exception as error:
            providers[provider] = failing(f"build: {error}"[:300])
            continue
        if run.destination_passing_style:
            call = (lambda r: lambda i: r(xs[i % sets], *extra, outs[i % sets]))(run)
            providers[provider] = checked(provider, call, outs[0])
        else:
            call = (lambda r: lambda i: r(xs[i % sets], *extra))(run)
            providers[provider] = checked(provider, call, None)
    if op in LIGER:
        try:
            function = liger_function(op)
            d = hidden // 2
            halves = [(x[:, :d].contiguous(), x[:, d:].contiguous()) for x in xs]
            call = lambda i: function.apply(*halves[i % sets])  # noqa: E731
            providers["liger"] = checked("liger", call, None)
        except harness.Unsupported as error:
            providers["liger"] = _skipped(str(error))
        except Exception as error:
            providers["liger"] = failing(f"liger: {type(error).__name__}: {error}"[:300])
    return providers


def _skipped(message: str) -> Callable[[int], Any]:
    def fn(_: int) -> Any:
        raise harness.Unsupported(message)

    return fn


def cases(
    ops: tuple[str, ...], shapes: list[tuple[str, int, int]], device: torch.device
) -> list[tuple[harness.Case, Any]]:
    made = []
    total = len(ops) * len(shapes)
    progress = itertools.count(1)
    for op in ops:
        for suffix, rows, hidden in shapes:
            moved = bytes_moved(op, rows, hidden, DTYPES[suffix].itemsize)
            label = f"{op} {suffix} {rows}x{hidden}"
            case = harness.Case(
                label,
                {"op": op, "dtype": suffix, "rows": rows, "hidden": hidden},
                bytes_moved=moved,
                graph_calls=graph_calls(sets_filling_l2(moved, device)),
            )

            def factory(op=op, suffix=suffix, rows=rows, hidden=hidden, label=label):
                print(f"[{next(progress)}/{total}] {label}", file=sys.stderr, flush=True)
                return make_providers(op, suffix, rows, hidden, device)

            made.append((case, factory))
    return made


def summary(report: dict[str, Any]) -> None:
    """Per operator, the bf16 bars: ours (best of triton and cuda) against the copy ceiling and
    the best of compile and Liger."""
    copy = report["ceilings"]["copy_gbps"]
    rows: dict[str, dict[str, float]] = {}
    for row in report["rows"]:
        if row["status"] == "ok":
            rows.setdefault(row["case"], {})[row["provider"]] = row["gbps"]
        else:
            rows.setdefault(row["case"], {})
    print(f"\nsummary (GB/s; bars on bf16 rows; copy {copy:.0f} GB/s measured in this run)")
    for case, by_provider in rows.items():
        ours = max((by_provider.get(p, 0.0) for p in ("triton", "cuda")), default=0.0)
        mine = "".join(
            f" {p} {by_provider[p]:5.0f}" for p in ("triton", "cuda") if p in by_provider
        )
        peers = {p: by_provider[p] for p in ("compile", "liger") if p in by_provider}
        best_peer = max(peers.values(), default=0.0)
        line = f"  {case:32s}{mine} ({ours / copy:4.0%} of copy)"
        line += "".join(
            f"  {p} {by_provider[p]:5.0f}" for p in ("eager", *peers) if p in by_provider
        )
        if " bf16 " in case and case.endswith("32768x8192"):
            line += "  bar 90% of copy: " + (
                "met" if ours >= 0.9 * copy else f"MISSED ({ours / copy:.0%})"
            )
        elif " bf16 " in case and best_peer:
            verdict = "met" if ours >= best_peer else f"MISSED ({ours / best_peer - 1:+.1%})"
            line += "  bar >= best peer: " + verdict
        print(line)


def print_plans() -> None:
    """The launch plans the Triton solutions tuned on this device, per (buckets) (tuning key)."""
    print("\nTriton plans tuned on this device")
    seen: set[int] = set()
    for (definition, suffix), built in _BUILT.items():
        if suffix != "triton" or isinstance(built, Exception):
            continue
        module = built.fn.__globals__
        if id(module) in seen:  # one file for every dtype (and both GELUs)
            continue
        seen.add(id(module))
        for key, plan in module["tuned_plans"]().items():
            print(f"  {definition.rsplit('_', 1)[0]} {key}: {plan}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="bf16 only, without gelu_and_mul")
    parser.add_argument("--ops", default="", help=f"comma-separated subset of {','.join(OPS)}")
    parser.add_argument("--no-write", action="store_true", help="do not write benchmarks/results")
    parser.add_argument(
        "--cpu-check",
        action="store_true",
        help="check this script's plumbing on CPU at tiny sizes (Triton interpreted); no results",
    )
    args = parser.parse_args(argv)
    ops = tuple(o for o in args.ops.split(",") if o) or (QUICK_OPS if args.quick else OPS)
    unknown = set(ops) - set(OPS)
    if unknown:
        parser.error(f"unknown operators {sorted(unknown)}; choose from {OPS}")
    shapes = [("bf16", r, h) for r, h in SHAPES_BF16] + ([] if args.quick else SHAPES_OTHER)
    started = time.perf_counter()
    if args.cpu_check:
        os.environ["TRITON_INTERPRET"] = "1"  # before any solution module defines a kernel
        device, write = torch.device("cpu"), False
        shapes = [(s, max(1, r // 256), h // 16) for s, r, h in shapes]
    elif torch.cuda.is_available():
        device, write = torch.device("cuda"), not args.no_write
        compile_cuda_in_parallel()
    else:
        print("bench_activations: needs a CUDA GPU (or --cpu-check)", file=sys.stderr)
        return 2
    report = harness.run("activations", cases(ops, shapes, device), device=device, write=write)
    print_plans()
    summary(report)
    elapsed = time.perf_counter() - started
    print(f"\n{len(report['rows'])} rows in {elapsed:.0f} s; {report.get('path', '')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
