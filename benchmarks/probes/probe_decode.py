"""Development aid for the Triton attention_decode on a GPU: per shape, split counts and Triton
configs swept through the solution's ``launch(..., num_splits=, config=)``, each checked against
the float32 reference under the definition's tolerances (outputs poisoned first; checked again
after the timed replays), then timed as CUDA graph replays over input sets rotated to exceed the
L2, against the copy bandwidth measured in the same run.

Shapes: q_heads 32 / kv_heads 8, head_dim 128, bf16; batch 1, 4, 8 and 64 with caches of 8192 and
32768 filled, and batch 1 at 32768 with a length drawn in [1, 32768]. Per shape:

- ``plan``: the solution's own choice (``plan``), and ``--baseline FILE``'s (an earlier version of
  the solution file, e.g. ``git show 42c9227:src/.../attention_decode.py``), both also timed the
  way ``bench_attention`` used to (CUDA events, L2 flushed, host launch included) with the host's
  submit time per call;
- ``floor``: a bare Triton kernel streaming the same K and V once (launch and ramp included), the
  most one kernel of these bytes reaches;
- ``--sweep focus`` (default): one and two programs an SM (or 2-6 splits for batch 64) x the
  configs that did best in the wide sweep x each merge (combine kernel, with PDL, fused with PDL);
- ``--sweep wide``: the default config at split counts around whole waves of the resident
  programs; BLOCK_N x num_warps x num_stages at the best counts and at one or two waves of each
  config's residency (registers and shared memory of its build); fused merge and PDL on the best;
- ``--sweep quick``: plan, baseline and floor only (~10 s after the set-up on an H100).

Bytes: the K and V rows actually read plus q, o and lse. A ``--budget`` in seconds stops the sweep
early (the table is printed regardless). Every measurement goes to ``$OUT/probe_decode.json``. On
an H100 a focus sweep took 48 s and a wide one 53 s after ~20 s of set-up.

    python benchmarks/probes/probe_decode.py [--baseline FILE] [--sweep quick|focus|wide] [--budget 200]
        [--shapes 1x8192,1x32768m,...] [--cpu-check]
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

if "--cpu-check" in sys.argv:  # before any kernel below or in the solution is defined
    os.environ["TRITON_INTERPRET"] = "1"
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kernelarena.data import Workload
from kernelarena.evaluate.judge.ceilings import measure_ceilings
from kernelarena.evaluate.sandbox.graph_timing import capture_graph, time_replays
from kernelarena.evaluate.sandbox.timing import time_cpu, time_cuda
from kernelarena.runtime.compare import compare
from kernelarena.runtime.inputs import allocate_outputs, generate_inputs, load_reference
from kernelarena.testing import build, library_definition

DEFINITION = "attention_decode_bf16"
Q_HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
SHAPES = [(b, s, False) for b in (1, 4, 8, 64) for s in (8192, 32768)] + [(1, 32768, True)]
# (BLOCK_N, num_warps, num_stages); the solution's default first.
CONFIGS = [
    (64, 4, 3),
    (64, 4, 2),
    (64, 4, 4),
    (32, 4, 3),
    (32, 4, 5),
    (128, 4, 2),
    (128, 8, 2),
    (128, 8, 3),
    (64, 8, 3),
]
GRAPH_GPU_MS = 3.0  # GPU time per captured graph
REPLAYS = 10
SMEM_PER_SM = 233472  # H100/H200: 228 KB, 1 KB of it reserved per block


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def shape_label(batch: int, cache: int, mixed: bool) -> str:
    return f"b{batch} cache {cache}{' mixed' if mixed else ''}"


def load_baseline(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location("probe_decode_baseline", path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


class Shape:
    """Input sets (enough to exceed the L2 three times), outputs per set, the reference of set 0."""

    def __init__(self, batch: int, cache: int, mixed: bool, device: torch.device) -> None:
        self.batch, self.cache, self.mixed = batch, cache, mixed
        self.label = shape_label(batch, cache, mixed)
        definition = library_definition(DEFINITION)
        self.definition = definition
        axes = {
            "batch": batch,
            "q_heads": Q_HEADS,
            "kv_heads": KV_HEADS,
            "max_seq": cache,
            "head_dim": HEAD_DIM,
        }
        workload = Workload(
            uuid=f"probe-{batch}-{cache}-{int(mixed)}",
            axes=axes,
            inputs={
                name: (
                    {"type": "scalar", "value": 1.0 / math.sqrt(HEAD_DIM)}
                    if name == "sm_scale"
                    else {"type": "random"}
                )
                for name in definition.inputs
            },
            params={"min_len": 1} if mixed else None,
        )
        self.axes = definition.resolve_axes(workload.axes)
        reference = load_reference(definition)
        kv_set = 2 * batch * KV_HEADS * cache * HEAD_DIM * 2
        l2 = torch.cuda.get_device_properties(device).L2_cache_size if device.type == "cuda" else 0
        self.sets = max(1, math.ceil(3 * l2 / kv_set))
        self.arguments = []
        for index in range(self.sets):
            inputs = generate_inputs(
                definition, workload, self.axes, device, 1000 + index, reference["make_inputs"]
            )
            if mixed:  # every set the same lengths, so that each call reads the same bytes
                inputs["seq_lens"] = (
                    self.arguments[0][3].clone() if self.arguments else inputs["seq_lens"]
                )
            self.arguments.append([inputs[name] for name in definition.inputs])
        self.outputs = [
            list(allocate_outputs(definition, self.axes, device).values()) for _ in range(self.sets)
        ]
        with torch.no_grad():
            self.expected = reference["run"](*self.arguments[0])
        q = self.arguments[0][0]
        self.tokens = int(self.arguments[0][3].sum())
        self.bytes = (
            2 * self.tokens * KV_HEADS * HEAD_DIM * 2 + 2 * q.numel() * 2 + 4 * batch * Q_HEADS
        )

    def check(self, call: Callable[[int], Any]) -> str | None:
        """None when set 0's outputs (poisoned first) match the reference, else the problem."""
        for out in self.outputs[0]:
            out.fill_(float("nan"))
        call(0)
        synchronize()
        problems = []
        for name, produced, wanted in zip(
            self.definition.outputs, self.outputs[0], self.expected, strict=True
        ):
            result = compare(
                name,
                produced,
                wanted,
                self.definition.outputs[name].dtype,
                self.definition.tolerance_for(name),
            )
            if not result.ok:
                problems.append(result.describe()[:300])
        return "; ".join(problems) or None

    def relative_error(self) -> float:
        """||o - ref|| / ||ref|| of set 0's last output."""
        produced, wanted = self.outputs[0][0].double(), self.expected[0].double()
        return float((produced - wanted).norm() / wanted.norm().clamp_min(1e-30))


def resident(compiled: Any, props: Any) -> dict[str, int] | None:
    """Registers, shared memory and programs an SM can hold of a compiled split kernel."""
    try:
        regs, shared = int(compiled.n_regs), int(compiled.metadata.shared)
        warps = int(compiled.metadata.num_warps)
    except AttributeError:
        return None
    smem = getattr(props, "shared_memory_per_multiprocessor", SMEM_PER_SM)
    by_regs = 65536 // max(1, math.ceil(regs * 32 / 256) * 256 * warps)
    by_smem = smem // (shared + 1024)
    by_threads = 2048 // (32 * warps)
    return {
        "regs": regs,
        "shared": shared,
        "spills": int(getattr(compiled, "n_spills", 0)),
        "resident": max(1, min(by_regs, by_smem, by_threads, 32)),
    }


class Probe:
    def __init__(self, module: Any, device: torch.device, copy_gbps: float, budget_s: float):
        self.module, self.device, self.copy_gbps = module, device, copy_gbps
        self.gpu = device.type == "cuda"
        self.props = torch.cuda.get_device_properties(device) if self.gpu else None
        self.sms = self.props.multi_processor_count if self.gpu else 4
        self.started = time.perf_counter()
        self.budget_s = budget_s
        self.records: list[dict[str, Any]] = []
        self.residency: dict[tuple, dict[str, int] | None] = {}

    def over_budget(self) -> bool:
        return time.perf_counter() - self.started > self.budget_s

    def measure(
        self,
        shape: Shape,
        stage: str,
        launch: Callable[..., Any],
        splits: int | None,
        config: dict[str, Any] | None,
        label: str = "",
        events: bool = False,
        checked: bool = True,
    ) -> dict[str, Any]:
        record: dict[str, Any] = {
            "shape": shape.label,
            "batch": shape.batch,
            "cache": shape.cache,
            "mixed": shape.mixed,
            "stage": stage,
            "label": label,
            "splits": splits,
            "config": config,
            "bytes": shape.bytes,
        }
        kwargs: dict[str, Any] = {}
        if splits is not None:
            kwargs["num_splits"] = splits
        if config is not None:
            kwargs["config"] = config

        def call(i: int) -> Any:
            s = i % shape.sets
            return launch(*shape.arguments[s], *shape.outputs[s], **kwargs)

        try:
            for out in shape.outputs[0]:
                out.fill_(float("nan"))
            compiled = call(0)
            synchronize()
            if compiled is not None and config is not None:
                key = tuple(sorted((k, str(v)) for k, v in config.items()))
                if key not in self.residency:
                    self.residency[key] = resident(compiled, self.props)
                record.update(self.residency[key] or {})
            problem = shape.check(call) if checked else None
            if checked:
                record["rel_error"] = shape.relative_error()
            if problem is not None:
                record.update(status="wrong", problem=problem)
                self.records.append(record)
                print(f"    {stage} {label} splits {splits} {config}: WRONG {problem}", flush=True)
                return record
            estimate_ms = shape.bytes / (self.copy_gbps * 1e9) * 1e3
            calls = max(2, min(50, round(GRAPH_GPU_MS / max(estimate_ms, 1e-3))))
            if self.gpu:
                graph = capture_graph(call, self.device, calls=calls, warmup=2)
                timing = time_replays(graph, self.device, calls, replays=REPLAYS)
                del graph
            else:
                timing = time_cpu(call, max_iterations=2, min_iterations=1)
            # After the replays: the fused merge's counters were reset by every call.
            problem = shape.check(call) if checked else None
            if problem is not None:
                record.update(status="wrong after replays", problem=problem)
                self.records.append(record)
                print(f"    {stage} {label}: WRONG after replays {problem}", flush=True)
                return record
            us = timing.median_ms * 1e3
            gbps = shape.bytes / (us * 1e-6) / 1e9
            record.update(
                status="ok",
                us=us,
                p20_us=timing.p20_ms * 1e3,
                p80_us=timing.p80_ms * 1e3,
                calls_per_graph=calls,
                samples_us=[s * 1e3 for s in timing.samples_ms],
                gbps=gbps,
                copy_fraction=gbps / self.copy_gbps,
            )
            if events and self.gpu:
                # As bench_attention timed before: one event pair a call, L2 flushed, host included.
                timed = time_cuda(call, self.device, max_iterations=30, budget_ms=150)
                record["events_us"] = timed.median_ms * 1e3
                torch.cuda.synchronize()
                begun = time.perf_counter()
                for i in range(20):
                    call(i)
                record["host_submit_us"] = (time.perf_counter() - begun) / 20 * 1e6
                torch.cuda.synchronize()
        except Exception as error:  # a config that does not build or run is a row, not the end
            record.update(status="error", problem=f"{type(error).__name__}: {error}"[:400])
            print(f"    {stage} {label} splits {splits} {config}: ERROR {record['problem']}")
            synchronize()
        self.records.append(record)
        if record["status"] == "ok":
            extra = (
                f", events {record['events_us']:.1f} us, host {record['host_submit_us']:.1f} us"
                if "events_us" in record
                else ""
            )
            print(
                f"    {stage:6} {label:10} splits {splits!s:>4} {describe(config):26} "
                f"{record['us']:8.1f} us {record['gbps']:6.0f} GB/s "
                f"{record['copy_fraction']:5.1%}{extra}",
                flush=True,
            )
        return record


def describe(config: dict[str, Any] | None) -> str:
    if not config:
        return "plan"
    text = f"n{config['BLOCK_N']} w{config['num_warps']} s{config['num_stages']}"
    if config.get("combine") == "fused":
        text += " fused"
    if config.get("pdl"):
        text += " pdl"
    return text


def config_of(block_n: int, warps: int, stages: int, **extra: Any) -> dict[str, Any]:
    return {
        "BLOCK_N": block_n,
        "num_warps": warps,
        "num_stages": stages,
        "combine": "kernel",
        "pdl": False,
        **extra,
    }


def split_candidates(items: int, slots: int, cache: int) -> list[int]:
    """Split counts that fill 1-4 waves of ``slots`` resident programs, and powers of two."""
    wanted = {max(1, math.ceil(w * slots / items)) for w in (1, 2, 3, 4)}
    wanted |= {max(1, (w * slots) // items) for w in (1, 2)}
    wanted |= {2**k for k in range(0, 9)}
    most = max(1, cache // 64)
    return sorted(s for s in wanted if s <= most and items * s <= 8 * slots)


def sweep(probe: Probe, shape: Shape, mode: str, baseline: Any) -> None:
    module, sms = probe.module, probe.sms
    items = shape.batch * KV_HEADS
    planned_splits, planned = module.plan(
        shape.batch, Q_HEADS, KV_HEADS, shape.cache, HEAD_DIM, probe.device
    )
    print(
        f"\n{shape.label}: {shape.bytes / 1e6:.1f} MB, {shape.sets} input sets, "
        f"plan: splits {planned_splits} {describe(planned)}",
        flush=True,
    )
    probe.measure(shape, "plan", module.launch, None, None, "plan", events=True)
    if baseline is not None:
        probe.measure(shape, "plan", baseline.launch, None, None, "baseline", events=True)
    if not shape.mixed:  # the floor reads whole caches
        probe.measure(shape, "floor", read_floor, None, None, "read floor", checked=False)
    if mode == "quick" or probe.over_budget():
        return
    if mode == "focus":
        focus(probe, shape, planned_splits)
        return
    default = config_of(*CONFIGS[0])
    first = probe.measure(shape, "splits", module.launch, 1, default)
    slots = sms * (first.get("resident") or 3)
    for splits in split_candidates(items, slots, shape.cache):
        if splits == 1 or probe.over_budget():
            continue
        probe.measure(shape, "splits", module.launch, splits, default)

    def best(stage: str, count: int) -> list[dict[str, Any]]:
        rows = [
            r
            for r in probe.records
            if r["shape"] == shape.label and r["status"] == "ok" and r["stage"] in stage.split(",")
        ]
        return sorted(rows, key=lambda r: r["us"])[:count]

    top_splits = [r["splits"] for r in best("splits", 2)] or [planned_splits]
    for block_n, warps, stages in CONFIGS[1:]:
        if probe.over_budget():
            break
        config = config_of(block_n, warps, stages)
        seen: set[int] = set()
        held = None
        for splits in top_splits:
            seen.add(splits)
            held = probe.measure(shape, "config", module.launch, splits, config).get("resident")
        if held and items < held * sms:
            for waves in (1, 2):
                splits = max(1, waves * held * sms // items)
                if splits not in seen and splits <= shape.cache // 64:
                    seen.add(splits)
                    probe.measure(shape, "config", module.launch, splits, config)
    split = [r for r in best("splits,config", 99) if r["splits"] > 1]
    for row in split[:3]:
        if probe.over_budget():
            break
        base = dict(row["config"])
        for extra in ({"combine": "fused"}, {"pdl": True}, {"combine": "fused", "pdl": True}):
            probe.measure(shape, "merge", module.launch, row["splits"], {**base, **extra})


# --sweep focus: around the plan's rule (one or two programs an SM while batch x KV heads <= SMs,
# else a few splits), the configs that did best in the wide sweep, each merge.
FOCUS_CONFIGS = [(64, 4, 3), (64, 4, 4), (128, 8, 3), (32, 4, 5)]
FOCUS_MERGES = [{}, {"pdl": True}, {"combine": "fused", "pdl": True}]


def focus(probe: Probe, shape: Shape, planned_splits: int) -> None:
    items = shape.batch * KV_HEADS
    if items <= probe.sms:
        counts = {max(1, k * probe.sms // items) for k in (1, 2)}
        configs, merges = FOCUS_CONFIGS, FOCUS_MERGES
    else:
        counts = {2, 3, 4, 6}
        configs, merges = [(64, 4, 3), (64, 4, 2), (128, 8, 3)], FOCUS_MERGES[1:]
    for splits in sorted(counts | {planned_splits}):
        for config in configs:
            for extra in merges:
                if probe.over_budget():
                    return
                probe.measure(
                    shape, "focus", probe.module.launch, splits, config_of(*config, **extra)
                )


@triton.jit
def _read_kernel(k_ptr, v_ptr, count, per_program, sink_ptr, BLOCK: tl.constexpr):
    """Streams [start, start + per_program) of K and V, as a one-kernel floor for the same bytes."""
    start = tl.program_id(0).to(tl.int64) * per_program
    stop = tl.minimum(start + per_program, count)
    acc = tl.zeros([BLOCK], tl.float32)
    for offset in tl.range(start, stop, BLOCK, num_stages=3):
        index = offset + tl.arange(0, BLOCK)
        inside = index < stop
        acc += tl.load(k_ptr + index, mask=inside, other=0.0).to(tl.float32)
        acc += tl.load(v_ptr + index, mask=inside, other=0.0).to(tl.float32)
    tl.store(sink_ptr + tl.program_id(0), tl.sum(acc, 0))


_SINKS: dict[str, torch.Tensor] = {}


def read_floor(q, k_cache, v_cache, seq_lens, sm_scale, o, lse) -> None:
    """The caches read once by a bare streaming kernel, two programs an SM: what one kernel of
    these bytes takes, launch and ramp included. Writes nothing the check looks at."""
    count = k_cache.numel()
    programs = 2 * (
        torch.cuda.get_device_properties(k_cache.device).multi_processor_count
        if k_cache.is_cuda
        else 2
    )
    block = 4096
    per_program = triton.cdiv(triton.cdiv(count, programs), block) * block
    sink = _SINKS.setdefault(str(k_cache.device), torch.empty(4096, device=k_cache.device))
    _read_kernel[(triton.cdiv(count, per_program),)](
        k_cache, v_cache, count, per_program, sink, BLOCK=block, num_warps=8
    )


def table(probe: Probe, shapes: list[Shape]) -> list[dict[str, Any]]:
    rows = []
    print(
        f"\n{'shape':22} {'baseline':>12} {'plan':>12} {'best found':>42} {'read floor':>12}"
        f"   (us, % of copy {probe.copy_gbps:.0f} GB/s)"
    )
    for shape in shapes:
        mine = [r for r in probe.records if r["shape"] == shape.label and r["status"] == "ok"]
        base = next((r for r in mine if r["label"] == "baseline"), None)
        plan = next((r for r in mine if r["label"] == "plan"), None)
        floor = next((r for r in mine if r["label"] == "read floor"), None)
        best = min((r for r in mine if r["stage"] != "floor"), key=lambda r: r["us"], default=None)

        def cell(r: dict[str, Any] | None, what: str = "") -> str:
            if r is None:
                return "-"
            return f"{r['us']:.1f} {r['copy_fraction']:.0%}{what}"

        found = cell(best, f" s{best['splits']} {describe(best['config'])}") if best else "-"
        print(f"{shape.label:22} {cell(base):>12} {cell(plan):>12} {found:>42} {cell(floor):>12}")
        rows.append(
            {
                "shape": shape.label,
                "baseline": base and base["copy_fraction"],
                "plan": plan and plan["copy_fraction"],
                "best": best and best["copy_fraction"],
                "best_splits": best and best["splits"],
                "best_config": best and best["config"],
                "read_floor": floor and floor["copy_fraction"],
            }
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, default=None, help="an earlier solution file")
    parser.add_argument(
        "--sweep",
        choices=("quick", "focus", "wide"),
        default="focus",
        help="quick: the plan, baseline and floor; focus: around the plan; wide: everything",
    )
    parser.add_argument("--budget", type=float, default=200.0, help="seconds for the sweep")
    parser.add_argument(
        "--cpu-check",
        action="store_true",
        help="check this script's plumbing on CPU at tiny sizes (Triton interpreted)",
    )
    parser.add_argument(
        "--shapes", default=None, help="comma-separated BATCHxCACHE[m] (m: mixed lengths)"
    )
    args = parser.parse_args()
    if args.cpu_check:
        device = torch.device("cpu")
    elif torch.cuda.is_available():
        device = torch.device("cuda")
    else:
        print("probe_decode: needs a CUDA GPU (or --cpu-check)", file=sys.stderr)
        return 2

    name = torch.cuda.get_device_properties(device).name if device.type == "cuda" else "cpu"
    sms = (
        torch.cuda.get_device_properties(device).multi_processor_count
        if device.type == "cuda"
        else 0
    )
    print(
        f"{name}, {sms} SMs; torch {torch.__version__}, triton {triton.__version__}, "
        f"CUDA {torch.version.cuda}; "
        f"{datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}"
    )
    module = sys.modules[build(DEFINITION, "triton", device.type).fn.__module__]
    baseline = load_baseline(args.baseline) if args.baseline else None
    copy_gbps = measure_ceilings(device)["copy_gbps"]
    print(f"copy ceiling {copy_gbps:.0f} GB/s (512 MB copy, read + write)")
    chosen = [(2, 64, False), (1, 100, True)] if args.cpu_check else SHAPES
    if args.shapes:
        chosen = []
        for text in args.shapes.split(","):
            mixed = text.endswith("m")
            batch, cache = text.rstrip("m").split("x")
            chosen.append((int(batch), int(cache), mixed))
    probe = Probe(module, device, copy_gbps, args.budget)
    shapes = []
    # Small shapes first: they are the point, and the budget may stop the big ones' sweep.
    for batch, cache, mixed in sorted(chosen, key=lambda s: (s[0] == 64, s[0], s[1], s[2])):
        shape = Shape(batch, cache, mixed, device)
        shapes.append(shape)
        sweep(probe, shape, args.sweep, baseline)
        shape.arguments = shape.outputs = []  # type: ignore[assignment]
        if device.type == "cuda":
            torch.cuda.empty_cache()
    summary = table(probe, shapes)
    elapsed = time.perf_counter() - probe.started
    print(f"\n{len(probe.records)} measurements in {elapsed:.0f} s")
    out = os.environ.get("OUT")
    if out:
        report = {
            "device": name,
            "sms": sms,
            "torch": torch.__version__,
            "triton": triton.__version__,
            "cuda": torch.version.cuda,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "copy_gbps": copy_gbps,
            "summary": summary,
            "records": probe.records,
        }
        Path(out, "probe_decode.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
