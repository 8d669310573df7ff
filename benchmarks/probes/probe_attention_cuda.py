"""Probe of the CUDA attention_prefill solution on a Hopper GPU: build, check, time.

Builds ``attention_prefill/cuda`` through the project's builder (from its spec, registered or
not), checks it against the float32 reference on fresh random inputs (outputs poisoned with NaN,
inputs checked unchanged; d64/d128, causal and not, GQA, odd lengths, seq_q != seq_kv, strided
BSHD, strides TMA cannot take, bf16/fp16), then times b4 h32 s4096 (d128 and d64, full and
causal, GQA) against torch SDPA's cuDNN and flash backends and the Triton solution, in TFLOP/s
(4 * b * h * s_q * s_kv * d, halved for causal; median of CUDA-event timings).

Each phase runs in its own process with a time limit, so a hang or a crash in one still leaves
the others' results. Prints a table last; with $OUT set, writes $OUT/probe_attention_cuda.json.

    export CUDA_HOME=/usr/local/cuda; python benchmarks/probes/probe_attention_cuda.py
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import functools
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks.harness

PHASE_LIMITS = {"check": 140, "time": 130}
DTYPES = {"bf16": "bfloat16", "fp16": "float16"}

# (label, dtype, (batch, q_heads, kv_heads, seq_q, seq_kv, head_dim), causal, params)
CHECKS = [
    ("smoke causal", "bf16", (1, 2, 1, 17, 17, 64), True, {}),
    ("one query", "fp16", (1, 1, 1, 1, 17, 128), False, {}),
    ("one tile", "bf16", (2, 4, 2, 128, 128, 128), False, {}),
    ("two tiles causal", "fp16", (2, 4, 2, 256, 256, 64), True, {}),
    ("seq 1000 causal GQA", "bf16", (2, 8, 2, 1000, 1000, 128), True, {}),
    ("seq 1000 bshd", "bf16", (2, 8, 8, 1000, 1000, 64), False, {"layout": "bshd"}),
    ("seq 1000 bshd d128", "fp16", (2, 4, 2, 1000, 1000, 128), True, {"layout": "bshd"}),
    ("seq_q < seq_kv", "fp16", (1, 8, 1, 1000, 3000, 128), True, {}),
    ("seq_q > seq_kv", "bf16", (1, 2, 1, 40, 17, 64), True, {}),
    ("seq_q > seq_kv, tiles", "bf16", (1, 4, 2, 300, 100, 128), True, {}),
    ("sharp softmax", "fp16", (1, 2, 2, 48, 48, 64), True, {"q_scale": 8.0}),
    ("seq 3000 causal", "fp16", (1, 2, 2, 3000, 3000, 64), True, {}),
    ("seq 3000 full", "bf16", (1, 2, 1, 3000, 3000, 128), False, {}),
    ("seq_kv 0", "bf16", (1, 2, 1, 16, 0, 64), False, {}),
    ("batch 0", "fp16", (0, 2, 1, 16, 16, 64), False, {}),
    ("seq 4096 sharp GQA", "bf16", (1, 32, 8, 4096, 4096, 128), True, {"q_scale": 4.0}),
]

# (label, dtype, shape, causal)
TIMINGS = [
    ("d128 full", "bf16", (4, 32, 32, 4096, 4096, 128), False),
    ("d128 causal", "bf16", (4, 32, 32, 4096, 4096, 128), True),
    ("d128 causal GQA 4", "bf16", (4, 32, 8, 4096, 4096, 128), True),
    ("d64 full", "bf16", (4, 32, 32, 4096, 4096, 64), False),
    ("d64 causal", "bf16", (4, 32, 32, 4096, 4096, 64), True),
    ("d128 full fp16", "fp16", (4, 32, 32, 4096, 4096, 128), False),
]


def axes_of(shape):
    names = ("batch", "q_heads", "kv_heads", "seq_q", "seq_kv", "head_dim")
    return dict(zip(names, shape, strict=True))


def cuda_solution(suffix: str):
    """The library's CUDA solution of attention_prefill_<suffix>."""
    from kernelarena.library.attention_prefill import OPERATOR

    variant = next(v for v in OPERATOR.variants if v.suffix == suffix)
    definition = next(d for d in OPERATOR.definitions() if d.name == f"attention_prefill_{suffix}")
    solution = next(s for s in OPERATOR.solutions_for(variant) if s.name.endswith("_cuda"))
    return definition, solution


# Variants built from the same sources with macros set at the top of the .cu file.
VARIANTS = {
    "cuda": "",
    "cuda_early": "#define ATTENTION_PREFILL_EARLY_RESCALE 1\n",  # O rescaled before P V
}
CHECKED_VARIANTS = ("cuda_early",)  # checked on every case besides the default


def built(suffix: str, variant: str = "cuda", cache: dict = {}):  # noqa: B006 - per process
    if (suffix, variant) not in cache:
        from kernelarena.compile import build_solution

        definition, solution = cuda_solution(suffix)
        if VARIANTS[variant]:
            sources = [
                f.model_copy(update={"content": VARIANTS[variant] + f.content})
                if f.path.endswith(".cu")
                else f
                for f in solution.sources
            ]
            solution = solution.model_copy(
                update={"name": f"{solution.name}_{variant}", "sources": sources}
            )
        cache[suffix, variant] = (definition, build_solution(definition, solution, "cuda"))
    return cache[suffix, variant]


def workload(definition, shape, causal, params, uuid):
    from kernelarena.data import Workload

    scalars = {"sm_scale": shape[5] ** -0.5, "causal": causal}
    return Workload(
        axes=axes_of(shape),
        uuid=uuid,
        params=params or None,
        inputs={
            name: (
                {"type": "scalar", "value": scalars[name]}
                if name in scalars
                else {"type": "random"}
            )
            for name in definition.inputs
        },
    )


def check_one(label, suffix, shape, causal, params, variant="cuda", seed_salt="probe"):
    import torch

    from kernelarena.runtime.inputs import generate_inputs, load_reference, seed_for

    definition, runnable = built(suffix, variant)
    w = workload(definition, shape, causal, params, f"probe-{label}-{suffix}")
    axes = definition.resolve_axes(w.axes)
    reference = load_reference(definition)
    device = torch.device("cuda")
    inputs = generate_inputs(
        definition, w, axes, device, seed_for(w, seed_salt), reference.get("make_inputs")
    )
    return run_and_compare(label, definition, runnable, reference, inputs, axes, shape, causal)


def run_and_compare(label, definition, runnable, reference, inputs, axes, shape, causal):
    import torch

    from kernelarena.runtime.compare import compare, inputs_unchanged
    from kernelarena.runtime.inputs import allocate_outputs

    device = torch.device("cuda")
    arguments = [inputs[name] for name in definition.inputs]
    before = [a.clone() if isinstance(a, torch.Tensor) else a for a in arguments]
    with torch.no_grad():
        expected = reference["run"](
            *[a.clone() if isinstance(a, torch.Tensor) else a for a in arguments]
        )
    outputs = allocate_outputs(definition, axes, device)
    runnable(*arguments, *outputs.values())
    torch.cuda.synchronize()
    first = {n: t.clone() for n, t in outputs.items()}
    outputs = allocate_outputs(definition, axes, device)
    runnable(*arguments, *outputs.values())
    torch.cuda.synchronize()
    record = {"label": label, "dtype": definition.name.rsplit("_", 1)[1], "shape": list(shape)}
    record["causal"] = causal
    problems = []
    for name, old, new in zip(definition.inputs, before, arguments, strict=True):
        if isinstance(old, torch.Tensor) and inputs_unchanged(name, old, new) is not None:
            problems.append(f"input {name} changed")
    for (name, produced), wanted in zip(outputs.items(), expected, strict=True):
        result = compare(
            name, produced, wanted, definition.outputs[name].dtype, definition.tolerance_for(name)
        )
        record[f"{name}_max_abs"] = result.max_absolute_error
        if not result.ok:
            problems.append(result.describe()[:600])
        if not torch.equal(produced.nan_to_num(7.0), first[name].nan_to_num(7.0)):
            problems.append(f"{name} differs between two calls on the same inputs")
    record["ok"] = not problems
    record["problems"] = problems
    return record


def misaligned_case(suffix):
    """q, k, v with row strides of 136 + 1 elements (not multiples of 16 bytes): the portable path."""
    import torch

    from kernelarena.runtime.inputs import load_reference

    definition, runnable = built(suffix)
    dtype = getattr(torch, DTYPES[suffix])
    generator = torch.Generator(device="cuda").manual_seed(5)
    shape = (1, 4, 2, 77, 77, 128)
    b, h, kv, sq, skv, d = shape

    def strided(heads, seq):
        wide = torch.randn(b, heads, seq, d + 9, generator=generator, device="cuda").to(dtype)
        return wide[..., :d]

    inputs = {
        "q": strided(h, sq),
        "k": strided(kv, skv),
        "v": strided(kv, skv),
        "sm_scale": d**-0.5,
        "causal": True,
    }
    axes = definition.resolve_axes(axes_of(shape))
    return run_and_compare(
        "unaligned strides (portable path)",
        definition,
        runnable,
        load_reference(definition),
        inputs,
        axes,
        shape,
        True,
    )


def phase_check():
    # The variants compile side by side (one nvcc each) while nothing else needs the GPU.
    with concurrent.futures.ThreadPoolExecutor(len(VARIANTS)) as pool:
        list(pool.map(lambda variant: built("bf16", variant), VARIANTS))
    records = []
    for label, suffix, shape, causal, params in CHECKS:
        started = time.perf_counter()
        try:
            record = check_one(label, suffix, shape, causal, params)
        except Exception as error:  # a failure of one case is reported, the rest still run
            record = {"label": label, "dtype": suffix, "shape": list(shape), "causal": causal}
            record.update(ok=False, problems=[f"{type(error).__name__}: {error}"[:800]])
        record["seconds"] = round(time.perf_counter() - started, 2)
        print(json.dumps(record), flush=True)
        records.append(record)
    for (label, suffix, shape, causal, params), variant in itertools.product(
        CHECKS, CHECKED_VARIANTS
    ):
        label = f"{label} ({variant})"
        try:
            record = check_one(label, suffix, shape, causal, params, variant=variant)
        except Exception as error:
            record = {"label": label, "dtype": suffix, "shape": list(shape), "causal": causal}
            record.update(ok=False, problems=[f"{type(error).__name__}: {error}"[:800]])
        print(json.dumps(record), flush=True)
        records.append(record)
    for suffix in ("bf16",):
        try:
            record = misaligned_case(suffix)
        except Exception as error:
            record = {"label": "unaligned strides", "ok": False, "problems": [repr(error)[:800]]}
        print(json.dumps(record), flush=True)
        records.append(record)
    return records


def _load_peer(name):
    """The peer built as the library builds it (its ``_shared`` helpers need the package layout),
    its module's names as attributes."""
    from types import SimpleNamespace

    from kernelarena.testing import build

    return SimpleNamespace(**build("attention_prefill_bf16", name, "cuda").fn.__globals__)


def time_shape(label, suffix, shape, causal, cudnn):
    import torch
    import torch.nn.functional as F
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from kernelarena.testing import build

    b, h, kv, sq, skv, d = shape
    dtype = getattr(torch, DTYPES[suffix])
    generator = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(b, h, sq, d, generator=generator, device="cuda").to(dtype)
    k = torch.randn(b, kv, skv, d, generator=generator, device="cuda").to(dtype)
    v = torch.randn(b, kv, skv, d, generator=generator, device="cuda").to(dtype)
    scale = d**-0.5
    o = torch.empty_like(q)
    lse = torch.empty(b, h, sq, device="cuda")
    flops = 4 * b * h * sq * skv * d / (2 if causal else 1)
    record = {"label": label, "dtype": suffix, "shape": list(shape), "causal": causal}
    _, ours = built(suffix)
    variants = {v: built(suffix, v)[1] for v in VARIANTS if v != "cuda"}
    triton_run = build(f"attention_prefill_{suffix}", "triton", "cuda")

    def flash():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(
                q, k, v, is_causal=causal, scale=scale, enable_gqa=kv != h
            )

    providers = {
        "cuda": lambda: ours(q, k, v, scale, causal, o, lse),
        "cudnn": lambda: cudnn.attention(q, k, v, scale, causal),
        "flash": flash,
        "triton": lambda: triton_run(q, k, v, scale, causal, o, lse),
        **{
            name: functools.partial(variant, q, k, v, scale, causal, o, lse)
            for name, variant in variants.items()
        },
        "cuda_again": lambda: ours(q, k, v, scale, causal, o, lse),
    }
    for name, fn in providers.items():
        try:
            fn()
            torch.cuda.synchronize()
            ms = triton.testing.do_bench(fn, warmup=50, rep=250, return_mode="median")
            record[f"{name}_ms"] = ms
            record[f"{name}_tflops"] = flops / ms / 1e9
        except Exception as error:
            record[f"{name}_error"] = f"{type(error).__name__}: {error}"[:300]
    # Ours against cuDNN on these inputs: the timed kernel computes the same function.
    try:
        o.fill_(float("nan"))
        lse.fill_(float("nan"))
        ours(q, k, v, scale, causal, o, lse)
        want_o, want_lse = cudnn.attention(q, k, v, scale, causal)
        record["vs_cudnn_o_max_abs"] = (o.float() - want_o.float()).abs().max().item()
        record["vs_cudnn_lse_max_abs"] = (lse - want_lse.float()).abs().max().item()
    except Exception as error:
        record["vs_cudnn_error"] = repr(error)[:300]
    return record


def phase_time():
    cudnn = _load_peer("sdpa_cudnn")
    records = []
    for label, suffix, shape, causal in TIMINGS:
        try:
            record = time_shape(label, suffix, shape, causal, cudnn)
        except Exception as error:
            record = {"label": label, "dtype": suffix, "error": repr(error)[:500]}
        print(json.dumps(record), flush=True)
        records.append(record)
    return records


def environment():
    import torch
    from benchmarks.harness import toolchain

    info = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    info["torch"] = torch.__version__
    info["cuda_runtime"] = torch.version.cuda
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        pass
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    info.update(toolchain())
    return info


def run_phase(phase):
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, __file__, "--phase", phase],
            capture_output=True,
            text=True,
            timeout=PHASE_LIMITS[phase],
        )
        out, err, code = done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired as expired:
        out = (
            (expired.stdout or b"").decode()
            if isinstance(expired.stdout, bytes)
            else (expired.stdout or "")
        )
        err = f"timed out after {PHASE_LIMITS[phase]} s"
        code = None
    records = []
    for line in out.splitlines():
        if line.startswith("{"):
            records.append(json.loads(line))
        else:
            print(line)
    if code != 0:
        print(f"[{phase}] exit {code}: {err[-3000:]}")
    print(f"[{phase}] {time.perf_counter() - started:.0f} s")
    return records, code, err[-3000:]


PROVIDERS = ("cuda", "cuda_again", *list(VARIANTS)[1:], "cudnn", "flash", "triton")


def table(checks, timings):
    lines = ["checks:"]
    for r in checks:
        status = "ok  " if r.get("ok") else "FAIL"
        errs = " ".join(f"{k[:-8]}={r[k]:.2e}" for k in r if k.endswith("_max_abs"))
        lines.append(
            f"  {status} {r.get('dtype', '')} {r['label']:<34} {r.get('shape', '')} {errs}"
        )
        for problem in r.get("problems", []):
            lines.append(f"       {problem[:300]}")
    lines.append("TFLOP/s (median):")
    header = f"  {'shape':<22}" + "".join(f"{p:>12}" for p in PROVIDERS)
    lines.append(header + f"{'cuda/cudnn':>12}{'o diff':>10}")
    for r in timings:
        row = f"  {r['label'] + ' ' + r['dtype']:<22}"
        for p in PROVIDERS:
            value = r.get(f"{p}_tflops")
            row += f"{value:12.1f}" if value else f"{'err':>12}"
        if r.get("cuda_tflops") and r.get("cudnn_tflops"):
            row += f"{r['cuda_tflops'] / r['cudnn_tflops']:12.3f}"
        else:
            row += f"{'-':>12}"
        row += f"{r.get('vs_cudnn_o_max_abs', float('nan')):10.2e}"
        lines.append(row)
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase", choices=sorted(PHASE_LIMITS))
    args = parser.parse_args()
    if args.phase == "check":
        phase_check()
        return
    if args.phase == "time":
        phase_time()
        return
    info = environment()
    print(json.dumps(info))
    checks, check_code, check_err = run_phase("check")
    timings, time_code, time_err = run_phase("time")
    result = {
        "environment": info,
        "checks": checks,
        "timings": timings,
        "phase_errors": {
            "check": check_err if check_code else None,
            "time": time_err if time_code else None,
        },
    }
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "probe_attention_cuda.json").write_text(
            json.dumps(result, indent=1)
        )
    print(table(checks, timings))
    ok = (
        all(r.get("ok") for r in checks)
        and len(checks) == len(CHECKS) * (1 + len(CHECKED_VARIANTS)) + 1
    )
    print("all checks passed" if ok else "some checks failed or did not run")


if __name__ == "__main__":
    main()
