"""Probe of the FlashInfer peers (attention_prefill, attention_prefill_varlen, attention_decode) on
a GPU: compile FlashInfer's kernels, check the peers, time them against torch SDPA and the
project's Triton solutions. Installs nothing: flashinfer-python must be importable (see
scripts/flashinfer_wheels.sh for a machine without internet).

Phases, each in its own process with a time limit inside one overall budget (``--budget``, 235 s
by default), so a hang or crash in one leaves the others' results:
- ``jit``: FlashInfer's nvcc builds of every kernel the later phases use, in one parallel ninja
  run (``flashinfer.jit.core.build_jit_specs``); the time is reported apart. They land in
  FlashInfer's cache (``~/.cache/flashinfer/<version>/<arch>/cached_ops``).
- ``check``: every library workload (smoke, correctness, large) of the three operators in the
  dtypes of ``--dtypes`` (bf16 by default): odd lengths, GQA, causal with seq_q < seq_kv and
  seq_q > seq_kv, strided BSHD and packed QKV, zero-length sequences, decode with mixed lengths
  and an empty sequence; outputs NaN-poisoned, inputs checked unchanged, float32 reference and
  the definition's tolerances, as the engine does.
- ``time``: prefill b4 h32 s4096 (d128 full, causal, GQA 32/8 causal; d64 full) bf16 against
  SDPA cuDNN and flash; varlen (8 sequences, 16k tokens) against torch's FA2 varlen op; decode
  batch 1/8/64 with 8k/32k caches (h32/8, d128) against SDPA's efficient backend and the Triton
  solution, with FlashInfer's CUDA-core and tensor-core (FA3) decode. Median of
  triton.testing.do_bench (L2 flushed between calls); TFLOP/s (prefill: 4 b h s_q s_kv d, halved
  when causal) and GB/s (decode: K and V read plus q, o, lse).

Prints a table last; with $OUT set, writes $OUT/probe_flashinfer.json.

    export CUDA_HOME=/usr/local/cuda; python3 scripts/probe_flashinfer.py
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

LIBRARY = Path(__file__).resolve().parents[1] / "src" / "kernelarena" / "library"
PEERS = {
    "attention_prefill": "attention_prefill/torch/flashinfer_prefill.py",
    "attention_prefill_varlen": "attention_prefill_varlen/torch/flashinfer_varlen.py",
    "attention_decode": "attention_decode/torch/flashinfer_decode.py",
}
PHASE_LIMITS = {"jit": 170, "check": 70, "time": 90}
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


def load_file(relative: str, name: str):
    spec = importlib.util.spec_from_file_location(name, LIBRARY / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- jit -------------------------------------------------------------------------------------------


def jit_specs(dtypes):
    """The FlashInfer modules the peers use on this GPU for these dtypes, head_dim 64 and 128."""
    import torch
    from flashinfer.jit import (
        gen_batch_decode_module,
        gen_batch_prefill_module,
        gen_single_prefill_module,
    )
    from flashinfer.utils import is_sm90a_supported

    backend = "fa3" if is_sm90a_supported(torch.device("cuda")) else "fa2"
    specs = []
    for suffix in dtypes:
        dtype = getattr(torch, DTYPES[suffix])
        for head_dim in (128, 64):
            common = (head_dim, head_dim, 0, False, False)
            specs.append(gen_single_prefill_module(backend, dtype, dtype, dtype, *common, False))
            specs.append(gen_batch_decode_module(dtype, dtype, dtype, torch.int32, *common))
            specs.append(
                gen_batch_prefill_module(backend, dtype, dtype, dtype, torch.int32, *common, False)
            )
    return specs


def phase_jit(dtypes):
    from flashinfer.jit import env as jit_env
    from flashinfer.jit.core import build_jit_specs

    specs = jit_specs(dtypes)
    cached = [s.name for s in specs if s.is_compiled]
    started = time.perf_counter()
    build_jit_specs(specs, verbose=False)
    record = {
        "jit_seconds": round(time.perf_counter() - started, 1),
        "modules": [s.name for s in specs],
        "already_compiled": cached,
        "cache_dir": str(jit_env.FLASHINFER_JIT_DIR),
        "cpu_count": os.cpu_count(),
    }
    sizes = {}
    for spec in specs:
        path = spec.get_library_path()
        if path.exists():
            sizes[spec.name] = path.stat().st_size
    record["module_bytes"] = sizes
    # Loading a compiled module (what a later process pays on its first call).
    started = time.perf_counter()
    for spec in specs:
        spec.build_and_load()
    record["load_seconds"] = round(time.perf_counter() - started, 2)
    print(json.dumps(record), flush=True)
    return [record]


# -- check -----------------------------------------------------------------------------------------


def phase_check(dtypes):
    import torch

    from kernelarena.evaluate.compare import compare, inputs_unchanged
    from kernelarena.evaluate.inputs import (
        allocate_outputs,
        generate_inputs,
        load_reference,
        seed_for,
    )
    from kernelarena.library import load_library

    library = load_library()
    device = torch.device("cuda")
    records = []
    for operator, path in PEERS.items():
        peer = load_file(path, f"probe_{operator}")
        for suffix in dtypes:
            name = f"{operator}_{suffix}"
            definition = library.definitions[name]
            reference = load_reference(definition)
            for workload in library.workloads_for(name, tags=("smoke", "correctness")):
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


def time_prefill(records):

    from kernelarena.testing import build

    ours = load_file(PEERS["attention_prefill"], "probe_fi_prefill")
    cudnn = load_file("attention_prefill/torch/sdpa_cudnn.py", "probe_cudnn")
    flash = load_file("attention_prefill/torch/sdpa_flash.py", "probe_flash")
    triton_run, triton_error = None, None
    try:
        triton_run = build("attention_prefill_bf16", "triton", "cuda")
    except Exception as error:
        triton_error = repr(error)[:300]
    for label, shape, causal in PREFILL_TIMINGS:
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

    from kernelarena.evaluate.inputs import generate_inputs, load_reference, seed_for
    from kernelarena.library import load_library

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


def time_decode(records):

    from kernelarena.testing import build

    ours = load_file(PEERS["attention_decode"], "probe_fi_decode")
    efficient = load_file("attention_decode/torch/sdpa_efficient.py", "probe_efficient")
    cudnn = load_file("attention_prefill/torch/sdpa_cudnn.py", "probe_cudnn_decode")
    triton_run, triton_error = None, None
    try:
        triton_run = build("attention_decode_bf16", "triton", "cuda")
    except Exception as error:
        triton_error = repr(error)[:300]

    def variant(tensor_cores, backend, page):
        def call(*args):
            ours._TENSOR_CORES, ours._BACKEND, ours._PAGE = tensor_cores, backend, page
            return ours.run(*args)

        return call

    variants = {
        "flashinfer": variant(False, "auto", 16),
        "flashinfer_p64": variant(False, "auto", 64),
        "flashinfer_tc_fa3": variant(True, "fa3", 16),
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


def phase_time(dtypes):
    records = []
    for part in (time_prefill, time_varlen, time_decode):
        try:
            part(records)
        except Exception as error:
            record = {"kind": part.__name__, "error": f"{type(error).__name__}: {error}"[:600]}
            print(json.dumps(record), flush=True)
            records.append(record)
    return records


# -- driver ----------------------------------------------------------------------------------------


def environment():
    import torch

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
    try:
        nvcc = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"
        info["nvcc"] = (
            subprocess.run([str(nvcc), "--version"], capture_output=True, text=True)
            .stdout.strip()
            .splitlines()[-1]
        )
        smi = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,clocks.max.sm,power.limit",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
        )
        info["nvidia_smi"] = smi.stdout.strip()
    except (OSError, IndexError):
        pass
    return info


def run_phase(phase, dtypes, limit):
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, __file__, "--phase", phase, "--dtypes", ",".join(dtypes)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: ninja and nvcc end with it
    )
    try:
        out, err = process.communicate(timeout=max(limit, 1))
        code = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        err = f"timed out after {limit:.0f} s\n{err}"
        code = None
    records = []
    for line in out.splitlines():
        if line.startswith("{"):
            records.append(json.loads(line))
        else:
            print(line)
    if code != 0:
        print(f"[{phase}] exit {code}: {err[-3000:]}")
    seconds = round(time.perf_counter() - started, 1)
    print(f"[{phase}] {seconds} s", flush=True)
    return {"records": records, "exit": code, "stderr": err[-3000:], "seconds": seconds}


def table(result):
    lines = []
    jit = result["phases"].get("jit", {}).get("records", [])
    if jit:
        lines.append(
            f"jit: {jit[0]['jit_seconds']} s for {len(jit[0]['modules'])} modules "
            f"({len(jit[0]['already_compiled'])} cached), load {jit[0]['load_seconds']} s"
        )
    checks = result["phases"].get("check", {}).get("records", [])
    passed = sum(1 for r in checks if r.get("ok"))
    refused = sum(1 for r in checks if r.get("ok") is None)
    lines.append(
        f"checks: {passed} passed, {refused} refused, {len(checks) - passed - refused} failed"
    )
    for r in checks:
        if not r.get("ok"):
            status = "refused" if r.get("ok") is None else "FAIL"
            lines.append(f"  {status} {r['operator']} {r['dtype']} {r['axes']} {r['params']}")
            for problem in r.get("problems", []) or [r.get("refused", "")]:
                lines.append(f"       {problem[:300]}")
    for r in result["phases"].get("time", {}).get("records", []):
        unit = "gbs" if r.get("kind") == "decode" else "tflops"
        values = " ".join(f"{k[: -len(unit) - 1]}={r[k]}" for k in r if k.endswith("_" + unit))
        errors = " ".join(f"{k}" for k in r if k.endswith("_error"))
        lines.append(f"  {r.get('kind')} {r.get('label', '')}: {values} {errors}".rstrip())
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--phase", choices=list(PHASE_LIMITS))
    parser.add_argument("--dtypes", default="bf16", help="comma-separated: bf16,fp16")
    parser.add_argument("--budget", type=float, default=235.0, help="seconds for all phases")
    parser.add_argument("--phases", default="jit,check,time")
    args = parser.parse_args()
    dtypes = [d for d in args.dtypes.split(",") if d]
    if args.phase:
        {"jit": phase_jit, "check": phase_check, "time": phase_time}[args.phase](dtypes)
        return
    deadline = time.perf_counter() + args.budget
    result = {"environment": environment(), "dtypes": dtypes, "phases": {}}
    print(json.dumps(result["environment"]), flush=True)
    out = os.environ.get("OUT")
    for phase in args.phases.split(","):
        left = deadline - time.perf_counter()
        if left < 5:
            result["phases"][phase] = {"skipped": "no time left"}
            continue
        result["phases"][phase] = run_phase(phase, dtypes, min(PHASE_LIMITS[phase], left))
        if out:
            Path(out, "probe_flashinfer.json").write_text(json.dumps(result, indent=1))
    print(table(result))


if __name__ == "__main__":
    main()
