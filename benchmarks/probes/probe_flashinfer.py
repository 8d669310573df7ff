"""Probe of the FlashInfer peers (attention_prefill, attention_prefill_varlen, attention_decode) on
a GPU: compile FlashInfer's kernels, check the peers, time them against torch SDPA and the
project's Triton solutions. Installs nothing: flashinfer-python must be importable (see
scripts/flashinfer_wheels.sh for a machine without internet).

FlashInfer compiles each kernel module with nvcc on first use, and its Hopper (FA3) modules take
minutes, so the probe starts every build at once (``--groups``: a module per kind and head_dim,
bf16 by default, each its own ninja run with a share of the cores, every finished step timed) and
runs each group's phases as soon as its module is there, one phase at a time, all within
``--budget`` seconds (what is unfinished then is reported with the steps it got through):
- ``build``: the module's nvcc build; its seconds, size and load time (what a later process pays).
  Modules land in FlashInfer's cache (``~/.cache/flashinfer/<version>/<arch>/cached_ops``). A
  module found in FlashInfer's AOT folder (``flashinfer/data/aot/<name>/<name>.so``, where
  prebuilt modules go) is loaded, not built.
- ``check``: every library workload (smoke, correctness, large) of the operator with that
  head_dim: odd lengths, GQA, causal with seq_q < seq_kv and seq_q > seq_kv, strided BSHD and
  packed QKV, zero-length sequences, decode with mixed lengths and an empty sequence; outputs
  NaN-poisoned, inputs checked unchanged, two calls (the second on the kept plan), float32
  reference and the definition's tolerances, as the engine does.
- ``time``: prefill b4 h32 s4096 (d128 full, causal, GQA 32/8 causal; d64 full) bf16 against
  SDPA cuDNN and flash and the Triton solution; varlen (the library's performance workloads)
  against torch's FA2 varlen op; decode batch 1/8/64 with 8k/32k caches (h32/8, d128) against
  SDPA's efficient backend, cuDNN on full caches and the Triton solution, with FlashInfer's
  CUDA-core decode (pages of 16 and 64) and its tensor-core FA3 path. Median of
  triton.testing.do_bench (L2 flushed between calls); TFLOP/s (prefill: 4 b h s_q s_kv d, halved
  when causal) and GB/s (decode: K and V read plus q, o, lse). Timings of early groups overlap
  the later groups' nvcc builds on the CPU (the GPU is the probe's alone).

Prints a table last; with $OUT set, writes $OUT/probe_flashinfer.json after every step.

    export CUDA_HOME=/usr/local/cuda; python benchmarks/probes/probe_flashinfer.py --budget 270

On the lent GPU machine (no internet; 300 s a call), with the wheels and the prebuilt bf16 modules
of ``scripts/flashinfer_wheels.sh --prebuild`` carried (.whl, .whl-flashinfer, .fi-aot):

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl .whl-flashinfer/*.whl && export PYTHONPATH=$PWD/src:/tmp/site \
      PYTHONUNBUFFERED=1 CUDA_HOME=/usr/local/cuda || exit 1; mkdir -p /tmp/site/flashinfer/data/aot \
      && cp -r .fi-aot/* /tmp/site/flashinfer/data/aot/; python benchmarks/probes/probe_flashinfer.py \
      --budget 266 --groups decode128,single128,batch128,decode64,single64,batch64,single128fp16
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks.harness

LIBRARY = Path(__file__).resolve().parents[2] / "src" / "kernelarena" / "library"
PEERS = {
    "attention_prefill": "attention_prefill/torch/flashinfer_prefill.py",
    "attention_prefill_varlen": "attention_prefill_varlen/torch/flashinfer_varlen.py",
    "attention_decode": "attention_decode/torch/flashinfer_decode.py",
}
PHASE_LIMIT = 75  # seconds for one check or timing phase
DTYPES = {"bf16": "bfloat16", "fp16": "float16"}

# (label, shape (batch, q_heads, kv_heads, seq_q, seq_kv, head_dim), causal)
PREFILL_TIMINGS = [
    ("d128 full", (4, 32, 32, 4096, 4096, 128), False),
    ("d128 causal", (4, 32, 32, 4096, 4096, 128), True),
    ("d128 causal GQA 4", (4, 32, 8, 4096, 4096, 128), True),
    ("d64 full", (4, 32, 32, 4096, 4096, 64), False),
]
# (label, (batch, q_heads, kv_heads, max_seq, head_dim))
DECODE_TIMINGS = [
    (f"b{b} {s // 1024}k", (b, 32, 8, s, 128)) for b in (1, 8, 64) for s in (8192, 32768)
]


def peer_module(definition: str, suffix: str):
    """A library peer built as the library builds it (its ``_shared`` helpers need the package
    layout), its module's names as attributes."""
    from types import SimpleNamespace

    from kernelarena.testing import build

    return SimpleNamespace(**build(definition, suffix, "cuda").fn.__globals__)


def load_file(relative: str, name: str):
    spec = importlib.util.spec_from_file_location(name, LIBRARY / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- jit -------------------------------------------------------------------------------------------


# Build groups, in the order their follow-ups run: (group, kind, head_dim, ninja jobs, dtype).
GROUPS = [
    ("decode128", "decode", 128, 3, "bf16"),
    ("decode64", "decode", 64, 2, "bf16"),
    ("single128", "single", 128, 6, "bf16"),
    ("batch128", "batch", 128, 10, "bf16"),
    ("single64", "single", 64, 6, "bf16"),
    ("batch64", "batch", 64, 10, "bf16"),
    ("decode128fp16", "decode", 128, 3, "fp16"),
    ("single128fp16", "single", 128, 8, "fp16"),
]
# What a group's module lets the probe do once compiled: (phase, argument) in order.
FOLLOW_UPS = {
    "decode128": [("check", "attention_decode:128"), ("time", "decode")],
    "decode64": [("check", "attention_decode:64")],
    "single128": [("check", "attention_prefill:128"), ("time", "prefill")],
    "batch128": [("check", "attention_prefill_varlen:128"), ("time", "varlen,decode_tc")],
    "single64": [("check", "attention_prefill:64"), ("time", "prefill64")],
    "batch64": [("check", "attention_prefill_varlen:64")],
    "decode128fp16": [("check", "attention_decode:128:fp16")],
    "single128fp16": [("check", "attention_prefill:128:fp16")],
}


def module_spec(kind, suffix, head_dim):
    """FlashInfer's JIT spec of the module a peer uses for this dtype and head_dim."""
    import torch
    from flashinfer.jit import (
        gen_batch_decode_module,
        gen_batch_prefill_module,
        gen_single_prefill_module,
    )
    from flashinfer.utils import is_sm90a_supported

    backend = "fa3" if is_sm90a_supported(torch.device("cuda")) else "fa2"
    dtype = getattr(torch, DTYPES[suffix])
    common = (head_dim, head_dim, 0, False, False)
    if kind == "single":
        return gen_single_prefill_module(backend, dtype, dtype, dtype, *common, False)
    if kind == "decode":
        return gen_batch_decode_module(dtype, dtype, dtype, torch.int32, *common)
    return gen_batch_prefill_module(backend, dtype, dtype, dtype, torch.int32, *common, False)


def compiled(kind, suffix, head_dim):
    return module_spec(kind, suffix, head_dim).is_compiled


def phase_build(dtypes, group):
    """One module's nvcc build through its ninja file, each finished step timed (stdout)."""
    _, kind, head_dim, jobs, suffix = next(g for g in GROUPS if g[0] == group)
    spec = module_spec(kind, suffix, head_dim)
    record = {"group": group, "module": spec.name, "cached": spec.is_compiled, "aot": spec.is_aot}
    if spec.is_aot:  # shipped prebuilt (FlashInfer's AOT folder): nothing to compile
        loading = time.perf_counter()
        spec.build_and_load()
        record.update(seconds=0.0, compiled=True, exit=0, steps=[], errors=[])
        record["bytes"] = spec.get_library_path().stat().st_size
        record["load_seconds"] = round(time.perf_counter() - loading, 2)
        print(json.dumps(record), flush=True)
        return
    started = time.perf_counter()
    spec.write_ninja()
    command = ["ninja", "-C", str(spec.build_dir), "-f", str(spec.ninja_path), "-j", str(jobs)]
    ninja = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    steps, failed = [], []
    for line in ninja.stdout:
        line = line.rstrip()
        if line.startswith("["):
            steps.append([round(time.perf_counter() - started, 1), line.split("]")[0] + "]"])
            print(json.dumps({"group": group, "step": steps[-1]}), flush=True)
        elif line.startswith("FAILED") or "error" in line:
            failed.append(line[:400])
    record.update(
        exit=ninja.wait(),
        seconds=round(time.perf_counter() - started, 1),
        steps=steps,
        errors=failed[:10],
        compiled=spec.is_compiled,
    )
    if spec.is_compiled:
        record["bytes"] = spec.get_library_path().stat().st_size
        loading = time.perf_counter()
        spec.build_and_load()
        record["load_seconds"] = round(time.perf_counter() - loading, 2)
    print(json.dumps(record), flush=True)


# -- check -----------------------------------------------------------------------------------------


def phase_check(dtypes, target):
    """``target``: "operator:head_dim[:dtype]" (only workloads whose kernels are compiled)."""
    import torch

    from kernelarena.library import load_library
    from kernelarena.runtime.compare import compare, inputs_unchanged
    from kernelarena.runtime.inputs import (
        allocate_outputs,
        generate_inputs,
        load_reference,
        seed_for,
    )

    library = load_library()
    device = torch.device("cuda")
    records = []
    chosen, head_dim, *dtype = target.split(":")
    dtypes = dtype or dtypes
    for operator, path in PEERS.items():
        if operator != chosen:
            continue
        peer = load_file(path, f"probe_{operator}")
        for suffix in dtypes:
            name = f"{operator}_{suffix}"
            definition = library.definitions[name]
            reference = load_reference(definition)
            for workload in library.workloads_for(name, tags=("smoke", "correctness")):
                if workload.axes["head_dim"] != int(head_dim):
                    continue
                axes = definition.resolve_axes(workload.axes)
                record = {"operator": operator, "dtype": suffix, "axes": workload.axes}
                record["params"] = workload.params or {}
                record["scalars"] = {
                    n: i.value for n, i in workload.inputs.items() if i.type == "scalar"
                }
                started = time.perf_counter()
                try:
                    inputs = generate_inputs(
                        definition,
                        workload,
                        axes,
                        device,
                        seed_for(workload, "probe"),
                        reference.get("make_inputs"),
                    )
                    arguments = [inputs[n] for n in definition.inputs]
                    before = [a.clone() if isinstance(a, torch.Tensor) else a for a in arguments]
                    with torch.no_grad():
                        expected = reference["run"](
                            *[a.clone() if isinstance(a, torch.Tensor) else a for a in arguments]
                        )
                    problems = []
                    for attempt in range(2):  # the second call reuses the plan
                        outputs = allocate_outputs(definition, axes, device)
                        peer.run(*arguments, *outputs.values())
                        torch.cuda.synchronize()
                        for (out, produced), wanted in zip(outputs.items(), expected, strict=True):
                            result = compare(
                                out,
                                produced,
                                wanted,
                                definition.outputs[out].dtype,
                                definition.tolerance_for(out),
                            )
                            record[f"{out}_max_abs"] = result.max_absolute_error
                            if not result.ok:
                                problems.append(f"call {attempt + 1}: {result.describe()[:400]}")
                    for n, old, new in zip(definition.inputs, before, arguments, strict=True):
                        if isinstance(old, torch.Tensor) and inputs_unchanged(n, old, new):
                            problems.append(f"input {n} changed")
                    record["ok"] = not problems
                    record["problems"] = problems
                except NotImplementedError as refused:
                    record.update(ok=None, refused=str(refused)[:300])
                except Exception as error:  # one failure is reported, the rest still run
                    record.update(ok=False, problems=[f"{type(error).__name__}: {error}"[:600]])
                record["seconds"] = round(time.perf_counter() - started, 2)
                print(json.dumps(record), flush=True)
                records.append(record)
    return records


# -- time ------------------------------------------------------------------------------------------


def bench(fn):
    import torch
    import triton

    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=25, rep=150, return_mode="median")


def measure(record, name, fn, work, unit):
    try:
        ms = bench(fn)
        record[f"{name}_ms"] = round(ms, 4)
        record[f"{name}_{unit}"] = round(work / ms / 1e9, 1)
    except Exception as error:
        record[f"{name}_error"] = f"{type(error).__name__}: {error}"[:300]


def time_prefill(records, head_dims):

    from kernelarena.testing import build

    ours = load_file(PEERS["attention_prefill"], "probe_fi_prefill")
    cudnn = peer_module("attention_prefill_bf16", "sdpa_cudnn")
    flash = peer_module("attention_prefill_bf16", "sdpa_flash")
    triton_run, triton_error = None, None
    try:
        triton_run = build("attention_prefill_bf16", "triton", "cuda")
    except Exception as error:
        triton_error = repr(error)[:300]
    for label, shape, causal in PREFILL_TIMINGS:
        if shape[5] not in head_dims:
            continue
        record = prefill_case(shape, causal, ours, cudnn, flash, triton_run, triton_error)
        record["label"] = label
        print(json.dumps(record), flush=True)
        records.append(record)


def prefill_case(shape, causal, ours, cudnn, flash, triton_run, triton_error):
    import torch

    b, h, kv, sq, skv, d = shape
    generator = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(b, h, sq, d, generator=generator, device="cuda").bfloat16()
    k = torch.randn(b, kv, skv, d, generator=generator, device="cuda").bfloat16()
    v = torch.randn(b, kv, skv, d, generator=generator, device="cuda").bfloat16()
    scale = d**-0.5
    o = torch.empty_like(q)
    lse = torch.empty(b, h, sq, device="cuda")
    flops = 4 * b * h * sq * skv * d / (2 if causal else 1)
    record = {"kind": "prefill", "shape": list(shape), "causal": causal}
    providers = {
        "flashinfer": lambda: ours.run(q, k, v, scale, causal, o, lse),
        "cudnn": lambda: cudnn.attention(q, k, v, scale, causal),
        "flash": lambda: flash.attention(q, k, v, scale, causal),
        "triton": (lambda: triton_run(q, k, v, scale, causal, o, lse)) if triton_run else None,
    }
    for name, fn in providers.items():
        if fn is None:
            record[f"{name}_error"] = triton_error
            continue
        measure(record, name, fn, flops, "tflops")
    try:  # FlashInfer against cuDNN on the timed inputs
        ours.run(q, k, v, scale, causal, o, lse)
        want_o, want_lse = cudnn.attention(q, k, v, scale, causal)
        record["vs_cudnn_o_max_abs"] = (o.float() - want_o.float()).abs().max().item()
        record["vs_cudnn_lse_max_abs"] = (lse - want_lse.float()).abs().max().item()
    except Exception as error:
        record["vs_cudnn_error"] = repr(error)[:300]
    return record


def time_varlen(records):
    import torch

    from kernelarena.library import load_library
    from kernelarena.runtime.inputs import generate_inputs, load_reference, seed_for

    ours = load_file(PEERS["attention_prefill_varlen"], "probe_fi_varlen")
    flash = load_file("attention_prefill_varlen/torch/flash_varlen.py", "probe_flash_varlen")
    library = load_library()
    name = "attention_prefill_varlen_bf16"
    definition = library.definitions[name]
    reference = load_reference(definition)
    for workload in library.workloads_for(name, tags=("performance",)):
        axes = definition.resolve_axes(workload.axes)
        inputs = generate_inputs(
            definition,
            workload,
            axes,
            torch.device("cuda"),
            seed_for(workload, "probe"),
            reference.get("make_inputs"),
        )
        q, k, v = inputs["q"], inputs["k"], inputs["v"]
        cq, ck = inputs["cu_seqlens_q"], inputs["cu_seqlens_k"]
        scale, causal = inputs["sm_scale"], inputs["causal"]
        o = torch.empty_like(q)
        lse = torch.empty(q.shape[0], q.shape[1], device="cuda")
        lq, lk = cq.diff().tolist(), ck.diff().tolist()
        pairs = sum(
            (a * c - a * (a - 1) // 2 if a <= c else c * (c + 1) // 2) if causal else a * c
            for a, c in zip(lq, lk, strict=True)
        )  # visible (query, key) pairs, causal bottom-right
        flops = 4 * pairs * q.shape[1] * q.shape[2]
        record = {"kind": "varlen", "label": f"{len(lq)} seqs", "axes": workload.axes}
        record["q_lens"], record["kv_lens"], record["causal"] = lq, lk, causal
        measure(
            record,
            "flashinfer",
            lambda: ours.run(q, k, v, cq, ck, scale, causal, o, lse),  # noqa: B023 - called now
            flops,
            "tflops",
        )
        measure(
            record,
            "flash_varlen",
            lambda: flash.run(q, k, v, cq, ck, scale, causal, o, lse),  # noqa: B023 - called now
            flops,
            "tflops",
        )
        print(json.dumps(record), flush=True)
        records.append(record)


def time_decode(records, tensor_cores):

    from kernelarena.testing import build

    ours = load_file(PEERS["attention_decode"], "probe_fi_decode")
    efficient = load_file("attention_decode/torch/sdpa_efficient.py", "probe_efficient")
    cudnn = peer_module("attention_prefill_bf16", "sdpa_cudnn")
    triton_run, triton_error = None, None
    if not tensor_cores:
        try:
            triton_run = build("attention_decode_bf16", "triton", "cuda")
        except Exception as error:
            triton_error = repr(error)[:300]

    def variant(tensor_cores, backend, page):
        def call(*args):
            ours._TENSOR_CORES, ours._BACKEND, ours._PAGE = tensor_cores, backend, page
            return ours.run(*args)

        return call

    if tensor_cores:
        variants = {"flashinfer_tc_fa3": variant(True, "fa3", 16)}
        efficient = cudnn = triton_run = None
    else:
        variants = {
            "flashinfer": variant(False, "auto", 16),
            "flashinfer_p64": variant(False, "auto", 64),
        }
    for label, shape in DECODE_TIMINGS:
        record = decode_case(shape, ours, variants, efficient, cudnn, triton_run, triton_error)
        record["label"] = label
        print(json.dumps(record), flush=True)
        records.append(record)


def decode_case(shape, ours, variants, efficient, cudnn, triton_run, triton_error):
    import torch

    b, h, kv, s, d = shape
    generator = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(b, h, d, generator=generator, device="cuda").bfloat16()
    k = torch.randn(b, kv, s, d, generator=generator, device="cuda").bfloat16()
    v = torch.randn(b, kv, s, d, generator=generator, device="cuda").bfloat16()
    lens = torch.full((b,), s, dtype=torch.int32, device="cuda")
    scale = d**-0.5
    o = torch.empty_like(q)
    lse = torch.empty(b, h, device="cuda")
    moved = 2 * k.numel() * 2 + 2 * q.numel() * 2 + lse.numel() * 4
    record = {"kind": "decode", "shape": list(shape), "bytes": moved}
    for name, call in variants.items():
        measure(record, name, lambda call=call: call(q, k, v, lens, scale, o, lse), moved, "gbs")
    ours._TENSOR_CORES, ours._BACKEND, ours._PAGE = False, "auto", 16
    if efficient is None:  # the tensor-core variant alone
        return record
    measure(
        record, "sdpa_efficient", lambda: efficient.run(q, k, v, lens, scale, o, lse), moved, "gbs"
    )
    measure(
        record,
        "cudnn_full",  # SDPA cuDNN, one query row, every sequence full (no length mask)
        lambda: cudnn.attention(q[:, :, None], k, v, scale, False),
        moved,
        "gbs",
    )
    record["cudnn_full_expands_kv"] = bool(cudnn._EXPANDS_KV.get((h, kv)))
    if triton_run:
        measure(record, "triton", lambda: triton_run(q, k, v, lens, scale, o, lse), moved, "gbs")
    else:
        record["triton_error"] = triton_error
    return record


def phase_time(dtypes, parts):
    records = []
    table = {
        "prefill": lambda r: time_prefill(r, (128,)),
        "prefill64": lambda r: time_prefill(r, (64,)),
        "varlen": time_varlen,
        "decode": lambda r: time_decode(r, tensor_cores=False),
        "decode_tc": lambda r: time_decode(r, tensor_cores=True),
    }
    for part in parts.split(","):
        try:
            table[part](records)
        except Exception as error:
            record = {"kind": part, "error": f"{type(error).__name__}: {error}"[:600]}
            print(json.dumps(record), flush=True)
            records.append(record)
    return records


# -- driver ----------------------------------------------------------------------------------------


def environment():
    import torch
    from benchmarks.harness import toolchain

    info = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    info["python"] = sys.version.split()[0]
    info["torch"] = torch.__version__
    info["cuda_runtime"] = torch.version.cuda
    for package in ("flashinfer", "triton", "tvm_ffi"):
        try:
            info[package] = __import__(package).__version__
        except Exception as error:  # recorded, not raised
            info[package] = f"not importable: {type(error).__name__}: {error}"[:300]
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    info.update(toolchain())
    return info


def spawn(phase, dtypes, argument):
    """A phase in a process of its own (and its own process group: ninja and nvcc end with it)."""
    command = [sys.executable, __file__, "--phase", phase, "--dtypes", ",".join(dtypes)]
    command += ["--argument", argument]
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def collect(process, limit, label):
    started = time.perf_counter()
    try:
        out, err = process.communicate(timeout=max(limit, 1))
        code = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        err = f"timed out after {limit:.0f} s\n{err}"
        code = None
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    for line in out.splitlines():
        if not line.startswith("{"):
            print(line)
    if code != 0:
        print(f"[{label}] exit {code}: {err[-2000:]}")
    seconds = round(time.perf_counter() - started, 1)
    print(f"[{label}] {seconds} s", flush=True)
    return {"records": records, "exit": code, "stderr": err[-3000:], "seconds": seconds}


def table(result):
    lines = []
    for group, build in result["builds"].items():
        final = [r for r in build.get("records", []) if "module" in r]
        steps = [r["step"] for r in build.get("records", []) if "step" in r]
        if final:
            r = final[0]
            lines.append(
                f"build {group}: {r['seconds']} s, compiled={r['compiled']}, "
                f"{r.get('bytes', 0) / 2**20:.1f} MiB, load {r.get('load_seconds')} s"
            )
        else:
            lines.append(f"build {group}: unfinished; steps {steps[-3:]}")
    checks = [r for k, v in result["phases"].items() if k.startswith("check") for r in v["records"]]
    passed = sum(1 for r in checks if r.get("ok"))
    refused = sum(1 for r in checks if r.get("ok") is None)
    lines.append(
        f"checks: {passed} passed, {refused} refused, {len(checks) - passed - refused} failed"
    )
    for r in checks:
        status = {True: "ok", None: "refused", False: "FAIL"}[r.get("ok")]
        errors = " ".join(f"{k[:-8]}={r[k]:.1e}" for k in r if k.endswith("_max_abs"))
        lines.append(f"  {status} {r['dtype']} {r['axes']} {r['params']} {errors}")
        for problem in r.get("problems", []) or ([r["refused"]] if "refused" in r else []):
            lines.append(f"       {problem[:300]}")
    for key, phase in result["phases"].items():
        if not key.startswith("time"):
            continue
        for r in phase["records"]:
            unit = "gbs" if r.get("kind") == "decode" else "tflops"
            values = " ".join(f"{k[: -len(unit) - 1]}={r[k]}" for k in r if k.endswith("_" + unit))
            errors = " ".join(f"{k}={r[k][:80]}" for k in r if k.endswith("error"))
            lines.append(f"  {r.get('kind')} {r.get('label', '')}: {values} {errors}".rstrip())
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--phase", choices=("build", "check", "time"))
    parser.add_argument("--argument", default="")
    parser.add_argument("--dtypes", default="bf16", help="comma-separated: bf16,fp16")
    parser.add_argument("--budget", type=float, default=235.0, help="seconds in all")
    parser.add_argument(
        "--groups",
        default="decode128,decode64,single128,batch128",
        help="modules to build, of " + ",".join(g[0] for g in GROUPS),
    )
    args = parser.parse_args()
    dtypes = [d for d in args.dtypes.split(",") if d]
    if args.phase:
        {"build": phase_build, "check": phase_check, "time": phase_time}[args.phase](
            dtypes, args.argument
        )
        return
    deadline = time.perf_counter() + args.budget
    result = {"environment": environment(), "dtypes": dtypes, "builds": {}, "phases": {}}
    print(json.dumps(result["environment"]), flush=True)
    out = os.environ.get("OUT")

    def save():
        if out:
            Path(out, "probe_flashinfer.json").write_text(json.dumps(result, indent=1))

    # Every build at once (nvcc is the long pole); each group's checks and timings as soon as
    # its module is there, one at a time so timings do not overlap each other.
    groups = [g for g in args.groups.split(",") if g]
    builds = {g: spawn("build", dtypes, g) for g in groups}
    started = {g: time.perf_counter() for g in groups}
    pending = list(groups)
    while pending and time.perf_counter() < deadline - 3:
        ready = next((g for g in pending if builds[g].poll() is not None), None)
        if ready is None:
            time.sleep(0.5)
            continue
        pending.remove(ready)
        result["builds"][ready] = collect(builds[ready], 5, f"build {ready}")
        result["builds"][ready]["wall_from_start"] = round(time.perf_counter() - started[ready], 1)
        save()
        if builds[ready].returncode != 0:
            continue
        for phase, argument in FOLLOW_UPS[ready]:
            left = deadline - time.perf_counter()
            if left < 5:
                break
            key = f"{phase} {argument}"
            limit = min(left, PHASE_LIMIT)
            result["phases"][key] = collect(spawn(phase, dtypes, argument), limit, key)
            save()
    for group in pending:  # not finished in the budget: what it got through
        result["builds"][group] = collect(builds[group], 0, f"build {group}")
    save()
    print(table(result))


if __name__ == "__main__":
    main()
