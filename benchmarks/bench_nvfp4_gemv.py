"""nvfp4_gemv: ours (Triton and CUDA, plain and permuted scales) against cuBLAS and torch.

Providers: ``triton``, ``triton_permuted``, ``cuda``, ``cuda_permuted`` (the library's solutions);
``cuda_variant_<i>`` (each compiled variant of the CUDA solution run explicitly, plain scales: what
the first-call choice picks from; reported, not counted as ours for the bars);
``cublas_fp16_bmm`` (torch.bmm on A and b already dequantized to float16, exactly: e2m1 times e4m3
fits in float16; the dequantization is outside the timing); ``torch_dequant_bmm`` (dequantize in
torch, then that bmm, both timed); ``reference`` (the definition's float32 reference). Both torch
paths are skipped above 2^27 values, where one call takes milliseconds and gigabytes.

Bytes, counted explicitly: A and sfa, one row of b and of sfb per batch, and c:
l * (m + 1) * (k/2 + k/16) + 2 * m * l (the definition's bytes_moved). The speed of light is those
bytes at the copy bandwidth measured in the same run (harness ceilings: a 1 GiB device copy, read
plus write); the fraction of it is the harness's "of ceiling" column and the summary's percentages.

Each of our solutions is checked against the reference once per shape, under the definition's
tolerance, before it is timed; one that fails or raises is reported and never timed. That first
call is also where our solutions choose their launch per shape (the CUDA solution times its
compiled variants, the Triton one its configs, on those inputs); the summary names the choices.
Every case is timed as CUDA graph replays of 20 calls (the harness), rotating through input sets
that together hold 3x the L2 (A alone is 29 MB at 7168x2048x4, inside the 50-60 MB L2), so A comes
from HBM as it would in a model. (The harness's default times cases over 40 us with CUDA events
around single calls after an L2 flush: that adds the launch gap and the write-back of the flush's
dirty lines to every call; ``--events-above-40us`` restores it.)

Bars (issue 5): the geomean over the three shapes of our best solution at >= 85% of the speed of
light, and ours >= 3.5x faster than the fp16 bmm at every shape. The summary printed last says
which hold.

    python benchmarks/bench_nvfp4_gemv.py [--generator wide] [--no-write] [--cpu-check]
        [--events-above-40us]
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

from kernelarena.testing import build, library_definition, reference

try:
    from benchmarks import harness
except ModuleNotFoundError:  # run as a script: benchmarks/ itself is on sys.path
    import harness  # type: ignore[no-redef]

NAME = "nvfp4_gemv"
SHAPES = [(7168, 16384, 1), (4096, 7168, 8), (7168, 2048, 4)]  # (m, k, l), GPU MODE's benchmark
OURS = ("triton", "triton_permuted", "cuda", "cuda_permuted")
PEERS = ("cublas_fp16_bmm", "torch_dequant_bmm", "reference")
INPUTS = ("a", "b", "sfa", "sfb", "sfa_permuted", "sfb_permuted")
GRAPH_CALLS = 20  # harness.time_cuda_graph captures fn(0) .. fn(19)
REFERENCE_LIMIT = 1 << 27  # values m * k * l above which the reference is not timed
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def bytes_moved(m: int, k: int, batches: int) -> int:
    return batches * (m + 1) * (k // 2 + k // 16) + 2 * m * batches


def dequantize(packed: torch.Tensor, scales: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """[rows, k/2, l] FP4 and [rows, k/16, l] e4m3 -> [l, rows, k] float16 (exact)."""
    raw = packed.view(torch.uint8).permute(2, 0, 1)  # [l, rows, k/2], contiguous storage
    batches, rows, half = raw.shape
    codes = torch.stack((raw & 15, raw >> 4), dim=-1).int()
    values = table[codes].view(batches, rows, half // 8, 16)
    factors = scales.permute(2, 0, 1).to(torch.float16).unsqueeze(-1)  # [l, rows, k/16, 1]
    return (values * factors).view(batches, rows, 2 * half)


_BUILT: dict[str, Any] = {}
CHOICES: dict[str, dict[str, str]] = {}  # case label -> provider -> the launch it chose


def describe_choice(suffix: str, runnable: Any, m: int, k: int, batches: int) -> str:
    """The launch a solution chose for this shape on its first call (CUDA: the variant it
    remembered; Triton: the autotuner's config); '' when it cannot say."""
    try:
        if suffix.startswith("cuda"):
            module = runnable.metadata["module"]
            variant = int(module.chosen_variant(m, k, batches, suffix.endswith("permuted")))
            return f"variant {variant} ({module.variant_name(variant)})" if variant >= 0 else ""
        tuner = runnable.fn.__globals__.get("_nvfp4_gemv_kernel")
        config = getattr(tuner, "best_config", None)
        if config is None:
            return ""
        settings = {**config.kwargs, "num_warps": config.num_warps}
        return "config " + ", ".join(f"{key}={value}" for key, value in settings.items())
    except Exception as error:  # a report line, never a failed run
        return f"unknown ({type(error).__name__})"


def solution(suffix: str, device: torch.device) -> Any:
    if device.type != "cuda" and suffix.startswith("cuda"):
        raise harness.Unsupported("needs a GPU")
    if suffix not in _BUILT:
        try:
            _BUILT[suffix] = build(NAME, suffix, device.type)
        except Exception as error:  # reported as the provider's row
            _BUILT[suffix] = error
    if isinstance(_BUILT[suffix], Exception):
        raise _BUILT[suffix]
    return _BUILT[suffix]


def variant_count(device: torch.device) -> int:
    """Compiled variants of the CUDA solution (0 where it cannot run or build)."""
    if device.type != "cuda":
        return 0
    try:
        return int(solution("cuda", device).metadata["module"].variant_count())
    except Exception:  # the cuda provider's own row reports why
        return 0


def mismatch(got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> str | None:
    g, e = got.float(), expected.float()
    bad = ~((g - e).abs() <= atol + rtol * e.abs())
    count = int(bad.sum())
    if count == 0:
        return None
    worst = float((g - e).abs().nan_to_num(float("inf")).max())
    return f"{count} of {bad.numel()} outside atol={atol} rtol={rtol}; max error {worst:.3g}; first {bad.nonzero()[:3].tolist()}"


def failing(message: str) -> Callable[[int], Any]:
    def fn(_: int) -> Any:
        raise AssertionError(message[:300])

    return fn


def skipped(message: str) -> Callable[[int], Any]:
    def fn(_: int) -> Any:
        raise harness.Unsupported(message)

    return fn


def make_providers(
    m: int, k: int, batches: int, generator: str, l2_bytes: int, device: torch.device
) -> dict[str, Callable[[int], Any]]:
    definition = library_definition(NAME)
    axes = definition.resolve_axes({"m": m, "k": k, "l": batches, "n": 128})
    case_bytes = bytes_moved(m, k, batches)
    assert definition.cost("bytes_moved", axes) == case_bytes
    tolerance = definition.tolerance_for("c")
    ref = reference(NAME)
    sets = max(2, min(GRAPH_CALLS, math.ceil(3 * l2_bytes / case_bytes)))
    inputs = []
    for index in range(sets):
        rng = torch.Generator(device=device).manual_seed(1000 * index + m + k + batches)
        inputs.append(ref["make_inputs"](dict(axes), {}, {"generator": generator}, rng, device))
    arguments = [tuple(made[name] for name in INPUTS) for made in inputs]
    outputs = [
        torch.empty(batches, m, 1, dtype=torch.float16, device=device).permute(1, 2, 0)
        for _ in range(sets)
    ]
    expected = ref["run"](*arguments[0])

    providers: dict[str, Callable[[int], Any]] = {}

    def checked(call: Callable[[int], Any]) -> Callable[[int], Any] | None:
        """``call`` once on set 0 against the reference; a failing provider instead, or None."""
        try:
            outputs[0].fill_(float("nan"))
            call(0)
            problem = mismatch(outputs[0], expected, tolerance.atol, tolerance.rtol)
        except harness.Unsupported as error:
            return skipped(str(error))
        except Exception as error:
            return failing(f"{type(error).__name__}: {error}")
        return failing(f"wrong result, not timed: {problem}") if problem else None

    for suffix in OURS:
        try:
            run = solution(suffix, device)
        except harness.Unsupported as error:
            providers[suffix] = skipped(str(error))
            continue
        except Exception as error:
            providers[suffix] = failing(f"{type(error).__name__}: {error}")
            continue

        def call(i: int, run: Any = run) -> None:
            run(*arguments[i % sets], outputs[i % sets])

        providers[suffix] = checked(call) or call
        if providers[suffix] is call:
            CHOICES.setdefault(f"{m}x{k}x{batches}", {})[suffix] = describe_choice(
                suffix, run, m, k, batches
            )
    for variant in range(variant_count(device)):
        module = solution("cuda", device).metadata["module"]

        def explicit(i: int, variant: int = variant, module: Any = module) -> None:
            if not module.run_variant(*arguments[i % sets], outputs[i % sets], variant, False):
                raise harness.Unsupported(f"variant {variant} does not apply to this shape")

        providers[f"cuda_variant_{variant}"] = checked(explicit) or explicit

    table = torch.tensor(E2M1, dtype=torch.float16, device=device)
    # fp16 A is 3.6x the bytes of NVFP4 A: fewer sets reach 3x the L2.
    fp16_sets = min(sets, max(2, math.ceil(3 * l2_bytes / (2 * m * k * batches))))
    weights = [dequantize(made["a"], made["sfa"], table) for made in inputs[:fp16_sets]]
    vectors = [dequantize(made["b"][:1], made["sfb"][:1], table).transpose(1, 2) for made in inputs]
    providers["cublas_fp16_bmm"] = lambda i: torch.bmm(
        weights[i % fp16_sets], vectors[i % fp16_sets]
    )

    def dequantize_then_bmm(i: int) -> torch.Tensor:
        made = inputs[i % sets]
        return torch.bmm(dequantize(made["a"], made["sfa"], table), vectors[i % sets])

    if m * k * batches > REFERENCE_LIMIT:
        # ~2.5 GB of temporaries a call at 4096x7168x8; a graph of 20 calls must stay small.
        providers["torch_dequant_bmm"] = skipped(
            f"m*k*l above 2^{REFERENCE_LIMIT.bit_length() - 1}"
        )
    else:
        providers["torch_dequant_bmm"] = dequantize_then_bmm
    if m * k * batches > REFERENCE_LIMIT:
        providers["reference"] = skipped(f"m*k*l above 2^{REFERENCE_LIMIT.bit_length() - 1}")
    else:
        providers["reference"] = lambda i: ref["run"](*arguments[i % sets])
    return providers


def cases(
    shapes: list[tuple[int, int, int]], generator: str, l2_bytes: int, device: torch.device
) -> list[tuple[harness.Case, Any]]:
    made = []
    for number, (m, k, batches) in enumerate(shapes, start=1):
        label = f"{m}x{k}x{batches}"
        case = harness.Case(
            label,
            {"m": m, "k": k, "l": batches, "generator": generator},
            bytes_moved=bytes_moved(m, k, batches),
            flops=2 * m * k * batches,
        )

        def factory(m=m, k=k, batches=batches, label=label, number=number):
            print(f"[{number}/{len(shapes)}] {label}", file=sys.stderr, flush=True)
            return make_providers(m, k, batches, generator, l2_bytes, device)

        made.append((case, factory))
    return made


def summary(report: dict[str, Any], shapes: list[tuple[int, int, int]]) -> None:
    copy = report["ceilings"]["copy_gbps"]
    times: dict[str, dict[str, float]] = {}
    for row in report["rows"]:
        if row["status"] == "ok":
            times.setdefault(row["provider"], {})[row["case"]] = row["median_ms"] * 1e3
    labels = [f"{m}x{k}x{b}" for m, k, b in shapes]
    light = {f"{m}x{k}x{b}": bytes_moved(m, k, b) / (copy * 1e9) * 1e6 for m, k, b in shapes}
    print(f"\nsummary: us (fraction of the speed of light; copy {copy:.0f} GB/s in this run)")
    print(f"  {'provider':18s}" + "".join(f"{label:>22s}" for label in labels) + "   geomean")
    print(f"  {'speed of light':18s}" + "".join(f"{light[label]:19.1f} us" for label in labels))
    geomeans: dict[str, float] = {}
    variants = sorted(
        {row["provider"] for row in report["rows"] if row["provider"].startswith("cuda_variant_")}
    )
    for provider in (*OURS, *variants, *PEERS):
        row = times.get(provider, {})
        cells = "".join(
            f"{row[label]:13.1f} ({light[label] / row[label]:4.0%})"
            if label in row
            else f"{'-':>22s}"
            for label in labels
        )
        if all(label in row for label in labels):
            geomeans[provider] = math.exp(
                sum(math.log(light[x] / row[x]) for x in labels) / len(labels)
            )
            cells += f"   {geomeans[provider]:.0%}"
        print(f"  {provider:18s}{cells}")
    for label in labels:
        made = CHOICES.get(label, {})
        for provider in OURS:
            if made.get(provider):
                print(f"  chosen for {label} by {provider}: {made[provider]}")
    ours = {p: g for p, g in geomeans.items() if p in OURS}
    if not ours:
        print("bars: no solution of ours timed at every shape")
        return
    best = max(ours, key=ours.get)
    verdict = "met" if ours[best] >= 0.85 else "MISSED"
    print(f"bar geomean >= 85% of the speed of light: {best} {ours[best]:.0%} {verdict}")
    bmm = times.get("cublas_fp16_bmm", {})
    if all(label in bmm for label in labels):
        speedups = [bmm[label] / times[best][label] for label in labels]
        verdict = "met" if min(speedups) >= 3.5 else "MISSED"
        shown = ", ".join(f"{s:.1f}x" for s in speedups)
        print(f"bar >= 3.5x faster than the fp16 bmm: {best} {shown} {verdict}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generator", default="gpumode", choices=("gpumode", "wide"))
    parser.add_argument("--no-write", action="store_true", help="do not write benchmarks/results")
    parser.add_argument(
        "--cpu-check",
        action="store_true",
        help="check this script's plumbing on CPU at tiny sizes (Triton interpreted); no results",
    )
    parser.add_argument(
        "--events-above-40us",
        action="store_true",
        help="the harness default: cases over 40 us timed with events after an L2 flush",
    )
    args = parser.parse_args(argv)
    shapes = SHAPES
    started = time.perf_counter()
    if args.cpu_check:
        os.environ["TRITON_INTERPRET"] = "1"  # before any solution module defines a kernel
        device, l2_bytes, write = torch.device("cpu"), 1 << 16, False
        shapes = [(28, 256, 1), (16, 128, 8), (28, 64, 4)]
    elif torch.cuda.is_available():
        device, write = torch.device("cuda"), not args.no_write
        l2_bytes = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20))
    else:
        print("bench_nvfp4_gemv: needs a CUDA GPU (or --cpu-check)", file=sys.stderr)
        return 2
    report = harness.run(
        "nvfp4_gemv",
        cases(shapes, args.generator, l2_bytes, device),
        device=device,
        write=write,
        graph_below_us=40.0 if args.events_above_40us else math.inf,
    )
    summary(report, shapes)
    elapsed = time.perf_counter() - started
    print(f"\n{len(report['rows'])} rows in {elapsed:.0f} s; {report.get('path', '')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
