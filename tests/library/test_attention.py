"""attention_prefill, attention_prefill_varlen and attention_decode.

Every solution runs the library's own workloads (the ones ``kernelarena run`` uses) on inputs the
engine would draw (``generate_inputs``: standard normal, then the reference's ``make_inputs``,
which lays out strided q/k/v, packs sequences with offsets and draws cache lengths), with outputs
poisoned by NaN before the call and inputs checked unchanged after it, against the float32
reference under the definition's tolerances. The tolerance table and its reasons live in
``library/attention_prefill/__init__.py`` (P rounded to the input dtype before P @ V, o rounded
once; lse float32). -inf in lse (a query that sees no key) must match by position.

On CPU (Triton interpreter): every workload not tagged ``large``: seq 1 and 17, head_dim 64 and
128, GQA, causal with seq_q < seq_kv and seq_q > seq_kv (rows that see no key), a sharp softmax,
strided (BSHD, packed QKV) layouts, batch 0, seq_kv 0, varlen with zero-length sequences, decode
with an empty cache. The Triton solutions pick their portable path there (masked pointer loads);
the Hopper path (per-head TMA descriptors whose bounds do the masking) is forced on as well, since
the interpreter emulates descriptors, so its indexing is checked without a GPU (on a GPU the
pointer path is forced instead). The sm_90 binaries are also compiled here (Triton's ptxas needs
no GPU) and checked for wgmma, TMA and cp.async.

One interpreter-only switch: the interpreter multiplies bfloat16 bit patterns in ``tl.dot``
(triton-lang/triton#11584), so in bfloat16 the kernels widen their tiles to float32 there, after
the same rounding of P to bfloat16 (the interpreter's float32 -> bfloat16 cast truncates rather
than rounds: up to one output ulp instead of half, inside the tolerance).

On a GPU (``gpu``): every workload, odd lengths 1, 17, 1000 and 3000, both dtypes and head dims,
one seq 4096 case; and every peer (torch SDPA backends), which skips the cases its backend
refuses, with the backend's message (a shape all backends take must pass without refusal).
"""

from __future__ import annotations

import functools
import math
import sys
from pathlib import Path

import pytest
import torch

from kernelarena.compile import Runnable
from kernelarena.data import Workload
from kernelarena.evaluate.compare import compare, inputs_unchanged
from kernelarena.evaluate.inputs import allocate_outputs, generate_inputs, load_reference, seed_for
from kernelarena.library import load_library
from kernelarena.testing import build, library_definition
from tests.library.solution_files import write_solution_package

OPERATORS = ("attention_prefill", "attention_prefill_varlen", "attention_decode")
DTYPES = ("fp16", "bf16")
PEERS = {
    "attention_prefill": ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient"),
    "attention_prefill_varlen": ("flash_varlen",),
    "attention_decode": ("sdpa_efficient",),
}


def workloads(definition: str, large: bool) -> list[Workload]:
    chosen = load_library().workloads_for(definition, tags=("smoke", "correctness"))
    return [w for w in chosen if large or "large" not in (w.tags or [])]


def workload_cases(large: bool) -> list:
    cases = []
    for operator in OPERATORS:
        for dtype in DTYPES:
            name = f"{operator}_{dtype}"
            for workload in workloads(name, large):
                label = (
                    f"{name}-{'-'.join(f'{v}' for v in workload.axes.values())}-{workload.uuid[:6]}"
                )
                cases.append(pytest.param(name, workload, id=label))
    return cases


@functools.cache
def runnable(definition: str, solution: str, device: str) -> Runnable:
    return build(definition, solution, device)


def launcher(definition: str, device: str):
    """The Triton solution module's ``launch`` (``run`` with its choices open)."""
    return sys.modules[runnable(definition, "triton", device).fn.__module__].launch


def check(
    definition_name: str,
    workload: Workload,
    device: str,
    call=None,
    solution: str = "triton",
    salt: str = "test",
) -> None:
    """Draw inputs, poison outputs, call (``call`` or the built solution), compare with the
    reference."""
    definition = library_definition(definition_name)
    axes = definition.resolve_axes(workload.axes)
    reference = load_reference(definition)
    inputs = generate_inputs(
        definition,
        workload,
        axes,
        torch.device(device),
        seed_for(workload, salt),
        reference.get("make_inputs"),
    )
    arguments = [inputs[name] for name in definition.inputs]
    before = [a.clone() if isinstance(a, torch.Tensor) else a for a in arguments]
    with torch.no_grad():
        expected = reference["run"](
            *[a.clone() if isinstance(a, torch.Tensor) else a for a in arguments]
        )
    outputs = allocate_outputs(definition, axes, torch.device(device))  # NaN-poisoned
    (call or runnable(definition_name, solution, device))(*arguments, *outputs.values())
    label = f"{definition_name} {solution} {axes} {workload.params or {}}"
    for name, old, new in zip(definition.inputs, before, arguments):
        if isinstance(old, torch.Tensor):
            assert inputs_unchanged(name, old, new) is None, f"{label}: input {name} changed"
    for (name, produced), wanted in zip(outputs.items(), expected):
        spec = definition.outputs[name]
        result = compare(name, produced, wanted, spec.dtype, definition.tolerance_for(name))
        assert result.ok, f"{label}: {result.describe()}"


# -- definitions and inputs ----------------------------------------------------------------------


def test_definitions_workloads_and_solutions() -> None:
    library = load_library()
    for operator in OPERATORS:
        for dtype in DTYPES:
            name = f"{operator}_{dtype}"
            definition = library.definitions[name]
            assert definition.outputs["lse"].dtype.value == "float32"
            for output in ("o", "lse"):
                assert definition.tolerance_for(output).atol > 0, f"{name}: {output} tolerance"
            for suite in ("smoke", "performance"):
                assert library.workloads_for(name, tags=(suite,)), f"{name}: no {suite} workload"
            for solution in ("triton", *PEERS[operator]):
                assert f"{name}_{solution}" in library.solutions
    with pytest.raises(ValueError, match="constraint"):
        library_definition("attention_prefill_bf16").resolve_axes(
            {"batch": 1, "q_heads": 6, "kv_heads": 4, "seq_q": 8, "seq_kv": 8, "head_dim": 128}
        )


def test_reference_matches_torch_sdpa_math() -> None:
    """The reference (chunked, bottom-right causal) against torch's math SDPA in float64 with an
    explicit bottom-right mask, including GQA and rows that see no key."""
    reference = load_reference(library_definition("attention_prefill_fp16"))
    generator = torch.Generator().manual_seed(0)
    for seq_q, seq_kv, causal in ((9, 9, True), (5, 12, True), (12, 5, True), (7, 11, False)):
        q = torch.randn(2, 4, seq_q, 64, generator=generator).half()
        k = torch.randn(2, 2, seq_kv, 64, generator=generator).half()
        v = torch.randn(2, 2, seq_kv, 64, generator=generator).half()
        o, lse = reference["run"](q, k, v, 0.125, causal)
        visible = torch.ones(seq_q, seq_kv, dtype=torch.bool)
        if causal:
            visible = torch.ones(seq_q, seq_kv, dtype=torch.bool).tril(diagonal=seq_kv - seq_q)
        k64, v64 = (t.double().repeat_interleave(2, dim=1) for t in (k, v))
        scores = (q.double() @ k64.transpose(-1, -2) * 0.125).masked_fill(~visible, -math.inf)
        seen = visible.any(-1)
        want_o = torch.nn.functional.scaled_dot_product_attention(
            q.double()[:, :, seen], k64, v64, attn_mask=visible[seen], scale=0.125
        )
        torch.testing.assert_close(o[:, :, seen].double(), want_o, atol=1e-3, rtol=1e-3)
        torch.testing.assert_close(lse.double(), torch.logsumexp(scores, -1), atol=1e-5, rtol=1e-5)
        assert bool((o[:, :, ~seen] == 0).all()) and bool((lse[:, :, ~seen] == -math.inf).all())


def test_make_inputs_offsets_and_lengths() -> None:
    varlen = library_definition("attention_prefill_varlen_bf16")
    reference = load_reference(varlen)
    generator = torch.Generator().manual_seed(1)
    axes = varlen.resolve_axes(
        {
            "len_indptr": 6,
            "total_q": 50,
            "total_kv": 70,
            "q_heads": 2,
            "kv_heads": 1,
            "head_dim": 64,
        }
    )
    inputs = {"q": torch.zeros(50, 2, 64), "k": torch.zeros(70, 1, 64), "v": torch.zeros(70, 1, 64)}
    made = reference["make_inputs"](axes, inputs, {}, generator, "cpu")
    for name, total in (("cu_seqlens_q", 50), ("cu_seqlens_k", 70)):
        offsets = made[name]
        assert offsets.dtype == torch.int32 and offsets.shape == (6,)
        assert offsets[0] == 0 and offsets[-1] == total and bool((offsets.diff() >= 0).all())
    with pytest.raises(ValueError):
        reference["make_inputs"](axes, inputs, {"q_lens": [10, 10]}, generator, "cpu")
    decode = library_definition("attention_decode_fp16")
    axes = decode.resolve_axes(
        {"batch": 64, "q_heads": 4, "kv_heads": 1, "max_seq": 30, "head_dim": 64}
    )
    made = load_reference(decode)["make_inputs"](
        axes,
        {"k_cache": torch.zeros(1), "v_cache": torch.zeros(1)},
        {"min_len": 3},
        generator,
        "cpu",
    )
    lengths = made["seq_lens"]
    assert lengths.dtype == torch.int32 and int(lengths.min()) >= 3 and int(lengths.max()) <= 30


# -- Triton on CPU (interpreter) -------------------------------------------------------------------


@pytest.mark.parametrize(("definition", "workload"), workload_cases(large=False))
def test_triton(definition: str, workload: Workload, device: torch.device) -> None:
    check(definition, workload, str(device))


@pytest.mark.parametrize("operator", ["attention_prefill", "attention_prefill_varlen"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_triton_other_path(operator: str, dtype: str, device: torch.device) -> None:
    """The path a device does not take by itself, on every small workload: on CPU the sm_90 path
    (descriptors bounded by each head's or sequence's length, emulated by the interpreter); on a
    GPU the masked pointer loads (the fallback for misaligned strides and pre-Hopper GPUs)."""
    if device.type == "cuda" and dtype == "fp16":
        pytest.skip("on a GPU one dtype covers the fallback path (each case is another compile)")
    name = f"{operator}_{dtype}"
    use_tma = device.type != "cuda"
    launch = launcher(name, str(device))
    for workload in workloads(name, large=False):
        axes = library_definition(name).resolve_axes(workload.axes)
        if use_tma and operator == "attention_prefill" and axes["seq_kv"] == 0:
            continue  # the solution never builds descriptors over an empty sequence
        check(
            name,
            workload,
            str(device),
            call=functools.partial(launch, use_tma=use_tma),
            salt="path",
        )


@pytest.mark.parametrize(
    ("splits", "combine"),
    [(1, "kernel"), (4, "kernel"), (4, "fused"), (50, "kernel"), (50, "fused")],
)
def test_decode_splits(splits: int, combine: str, device: torch.device) -> None:
    """One split writes the output directly; several are merged by the combine kernel or by the
    last split of each (sequence, KV head) (``fused``). Chunks are cut from each sequence's own
    length, so lengths 0 and 1 in a 33-position cache leave splits with no key; 50 splits is more
    than the positions of any sequence (every chunk 1 token or empty). Twice in a row: the fused
    merge's counters must be back at 0 after a call."""
    module = sys.modules[runnable("attention_decode_fp16", "triton", str(device)).fn.__module__]
    for dtype in DTYPES:
        name = f"attention_decode_{dtype}"
        launch = launcher(name, str(device))
        config = {"combine": combine}
        for workload in load_library().workloads_for(name, tags=("smoke",)):
            for salt in ("splits", "again"):
                check(
                    name,
                    workload,
                    str(device),
                    call=functools.partial(launch, num_splits=splits, config=config),
                    salt=salt,
                )
    for counters in module._COUNTERS.values():
        assert int(counters.abs().sum()) == 0, "a fused merge left a counter set"


@pytest.mark.gpu
def test_decode_fused_merge_on_two_streams_and_in_a_graph() -> None:
    """The fused merge's counters: one buffer per stream (calls on two streams never share one),
    and each captured call its own counters, leaving the cached ones as they were (a cached buffer
    baked into a graph would be freed under it once a larger one replaced it): a fresh slice of
    the zeroed arena, or, past its end, a buffer zeroed inside the graph. Every counter is back
    at 0 after the replays."""
    device, name = "cuda:0", "attention_decode_bf16"
    module = sys.modules[runnable(name, "triton", device).fn.__module__]
    fused = functools.partial(launcher(name, device), num_splits=4, config={"combine": "fused"})
    workload = next(
        w for w in load_library().workloads_for(name, tags=("smoke",)) if w.axes["batch"] > 1
    )
    side = torch.cuda.Stream()

    def on_side_stream(*arguments):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fused(*arguments)
        torch.cuda.current_stream().wait_stream(side)

    def in_a_graph(*arguments):
        cached = {key: held.data_ptr() for key, held in module._COUNTERS.items()}
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fused(*arguments)
            fused(*arguments)  # a second captured call: counters of its own
        assert {key: held.data_ptr() for key, held in module._COUNTERS.items()} == cached
        for _ in range(3):
            graph.replay()
        torch.cuda.synchronize()

    def past_the_arena(*arguments):
        arena = module._GRAPH_ARENAS[0]
        handed_out = arena[1]
        arena[1] = arena[0].numel()  # as if every slice were taken: the memset fallback
        try:
            in_a_graph(*arguments)
        finally:
            arena[1] = handed_out

    check(name, workload, device, call=fused, salt="default stream")
    check(name, workload, device, call=on_side_stream, salt="side stream")
    handed_out = module._GRAPH_ARENAS[0][1]
    check(name, workload, device, call=in_a_graph, salt="graph")
    assert module._GRAPH_ARENAS[0][1] > handed_out, "a captured call did not take arena counters"
    check(name, workload, device, call=past_the_arena, salt="graph past the arena")
    assert len({stream for _, stream in module._COUNTERS}) >= 2
    for held in [*module._COUNTERS.values(), module._GRAPH_ARENAS[0][0]]:
        assert int(held.abs().sum()) == 0, "a fused merge left a counter set"


def test_decode_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """The split counts a 132-SM GPU gets (what benchmarks/probes/probe_decode.py measured best on an H100):
    one program an SM while batch x KV heads fit the SMs, ~12 an SM beyond; never more splits
    than 128-token chunks; the fused merge only where one block holds a group's splits."""
    module = sys.modules[runnable("attention_decode_bf16", "triton", "cpu").fn.__module__]
    monkeypatch.setitem(module._SM_COUNT, 0, 132)
    monkeypatch.setitem(module._PDL, 0, True)
    gpu = torch.device("cuda", 0)
    expected = {  # (batch, q_heads, kv_heads, max_seq): (splits, combine)
        (1, 32, 8, 8192): (16, "fused"),
        (1, 32, 8, 32768): (16, "fused"),
        (4, 32, 8, 8192): (4, "fused"),
        (8, 32, 8, 32768): (2, "fused"),
        (16, 32, 8, 32768): (1, "fused"),  # 128 programs: no merge at all
        (17, 32, 8, 32768): (12, "fused"),  # 16 x 4 values: one block
        (1, 64, 8, 32768): (16, "kernel"),  # 16 splits x 8 heads: two blocks
        (64, 32, 8, 8192): (4, "fused"),
        (1, 32, 4, 32768): (33, "kernel"),
        (1, 32, 8, 1000): (7, "fused"),  # 128-token chunks at least
        (1, 32, 8, 100): (1, "fused"),
        (3, 8, 8, 0): (1, "fused"),
    }
    for (batch, q_heads, kv_heads, max_seq), (splits, combine) in expected.items():
        got, config = module.plan(batch, q_heads, kv_heads, max_seq, 128, gpu)
        assert (got, config["combine"]) == (splits, combine), (batch, q_heads, kv_heads, max_seq)
        assert config["pdl"] is False and config["BLOCK_N"] == 64
        if batch * kv_heads <= 132:
            assert batch * kv_heads * got <= 132
    splits, config = module.plan(1, 32, 8, 8192, 128, torch.device("cpu"))
    assert splits == 3 and not config["pdl"]


def test_decode_odd_lengths_many_splits(device: torch.device) -> None:
    """The correctness workloads (lengths drawn from 0, BSHD caches, batch 0, GQA 4 and 1, head_dim
    64 and 128) at split counts a GPU plan picks for small batches, both merges."""
    name = "attention_decode_bf16"
    launch = launcher(name, str(device))
    for workload in workloads(name, large=device.type == "cuda"):
        for splits, combine in ((7, "fused"), (33, "kernel")):
            check(
                name,
                workload,
                str(device),
                call=functools.partial(launch, num_splits=splits, config={"combine": combine}),
                salt=f"odd{splits}",
            )


# The sm_90 code the GPU will run, compiled here (Triton's bundled ptxas needs no GPU): a change
# that breaks the Hopper build fails on CPU, and the instructions that carry the speed are there.
SM90_KERNELS = [  # (solution, kernel, tile dtype, constexprs, options, PTX instructions)
    (
        "attention_prefill_bf16_triton",
        "_prefill_kernel",
        "bf16",
        dict(HEAD_DIM=128, BLOCK_M=128, BLOCK_N=128, CAUSAL=True, USE_TMA=True),
        dict(num_warps=8, num_stages=2),
        ("wgmma.mma_async", "cp.async.bulk.tensor"),
    ),
    (
        "attention_prefill_varlen_fp16_triton",
        "_varlen_kernel",
        "fp16",
        dict(HEAD_DIM=64, BLOCK_M=128, BLOCK_N=128, BATCH_PAD=16, CAUSAL=True, USE_TMA=True),
        dict(num_warps=8, num_stages=3),
        ("wgmma.mma_async", "cp.async.bulk.tensor"),
    ),
    (
        "attention_decode_bf16_triton",
        "_decode_split_kernel",
        "bf16",
        dict(
            HEAD_DIM=128,
            GROUP_PAD=16,
            BLOCK_N=64,
            SINGLE_SPLIT=False,
            FUSED=True,
            MERGE_ROWS=4,
            SPLIT_BLOCK=16,
            USE_PDL=True,
        ),
        dict(num_warps=4, num_stages=3),
        # the fused merge's gpu-scope acq_rel ticket and PDL's wait
        ("mma.sync", "cp.async.cg", "atom.global.gpu.acq_rel.add", "griddepcontrol.wait"),
    ),
]


_COMPILE_SM90 = """
import importlib, inspect, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

missing = {}
FLOAT32 = ("lse_ptr", "part_o_ptr", "part_lse_ptr")
INT32 = ("cu_q_ptr", "cu_k_ptr", "seq_lens_ptr", "counter_ptr")
sys.path.insert(0, sys.argv[2])
for module_name, name, dtype, constexprs, options, expected in json.loads(sys.argv[1]):
    module = importlib.import_module(module_name)
    kernel = getattr(module, name)
    params = list(inspect.signature(kernel.fn).parameters)
    constexprs["DOT_F32"] = False
    pointers = {p: "*fp32" if p in FLOAT32 else "*i32" if p in INT32 else "*" + dtype
                for p in params if p.endswith("_ptr")}
    scalars = {"qk_scale": "fp32"}
    signature = {p: "constexpr" if p in constexprs else pointers.get(p, scalars.get(p, "i32"))
                 for p in params}
    # What the JIT infers for aligned tensors at launch: 16-divisible pointers and strides.
    fixed = set(kernel.do_not_specialize or ()) | set(constexprs)
    attrs = {(i,): [["tt.divisibility", 16]] for i, p in enumerate(params)
             if (p in pointers or p.startswith("stride")) and p not in fixed}
    source = ASTSource(fn=kernel, signature=signature, attrs=attrs,
                       constexprs={(params.index(k),): v for k, v in constexprs.items()})
    ptx = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options).asm["ptx"]
    missing[name] = [i for i in expected if i not in ptx]
print(json.dumps(missing))
"""


@pytest.mark.slow
def test_triton_compiles_for_sm90(device: torch.device, tmp_path: Path) -> None:
    """In a fresh process (the interpreter, which this one runs, cannot also compile)."""
    if device.type == "cuda":
        pytest.skip("on a GPU the tests above compile and run these kernels")
    import json
    import os
    import subprocess

    cases = [[write_solution_package(name, tmp_path), *rest] for name, *rest in SM90_KERNELS]
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-c", _COMPILE_SM90, json.dumps(cases), str(tmp_path)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )
    assert done.returncode == 0, f"compiling for sm_90 failed:\n{done.stderr[-3000:]}"
    missing = json.loads(done.stdout.strip().splitlines()[-1])
    assert not any(missing.values()), f"instructions missing from the sm_90 PTX: {missing}"


# -- GPU -------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("definition", "workload"),
    [c for c in workload_cases(large=True) if "large" in (c.values[1].tags or [])],
)
def test_triton_gpu_large(definition: str, workload: Workload) -> None:
    check(definition, workload, "cuda")


def peer_cases() -> list:
    cases = []
    for case in workload_cases(large=True):
        definition, workload = case.values
        for peer in PEERS[definition.rsplit("_", 1)[0]]:
            cases.append(pytest.param(definition, workload, peer, id=f"{case.id}-{peer}"))
    return cases


@pytest.mark.gpu
@pytest.mark.parametrize(("definition", "workload", "peer"), peer_cases())
def test_peers_gpu(definition: str, workload: Workload, peer: str) -> None:
    """A backend may refuse a case (cuDNN's top-left causal mask, a length it has no kernel for):
    that is the peer's limit, reported as a skip with the backend's message; wrong numbers fail."""
    try:
        check(definition, workload, "cuda", solution=peer)
    except (NotImplementedError, RuntimeError) as refused:
        pytest.skip(f"{peer} refuses {workload.axes}: {type(refused).__name__}: {refused}"[:400])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_peers_gpu_common_shape(dtype: str) -> None:
    """The shape every backend supports (equal lengths, MHA, seq 1024): no refusal allowed."""
    scale = 128**-0.5
    for operator, axes, scalars in (
        (
            "attention_prefill",
            dict(batch=2, q_heads=8, kv_heads=8, seq_q=1024, seq_kv=1024, head_dim=128),
            dict(sm_scale=scale, causal=True),
        ),
        (
            "attention_prefill_varlen",
            dict(len_indptr=3, total_q=2048, total_kv=2048, q_heads=8, kv_heads=8, head_dim=128),
            dict(sm_scale=scale, causal=True),
        ),
        (
            "attention_decode",
            dict(batch=4, q_heads=8, kv_heads=8, max_seq=1024, head_dim=128),
            dict(sm_scale=scale),
        ),
    ):
        workload = Workload(
            axes=axes,
            uuid=f"common-{operator}",
            inputs={
                name: (
                    {"type": "scalar", "value": scalars[name]}
                    if name in scalars
                    else {"type": "random"}
                )
                for name in library_definition(f"{operator}_{dtype}").inputs
            },
        )
        for peer in PEERS[operator]:
            check(f"{operator}_{dtype}", workload, "cuda", solution=peer)
