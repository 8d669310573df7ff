"""Decode attention in Triton: split-KV (flash-decoding) with a merge of the splits.

One query token per sequence reads its whole KV cache: the work is memory-bound, so the design
goal is every byte of K and V read once, with enough loads in flight to saturate HBM.

- One program per (sequence, KV head, split of the sequence). The query heads that share a KV head
  (GQA) are processed together as the rows of one small tile, so K and V are read once per group,
  not once per query head; the tile is padded to 16 rows, the smallest tensor-core shape.
- Splits: the sequences times KV heads alone may not fill the GPU (batch 1 has 8 programs for 132
  SMs), so each sequence is cut into ``num_splits`` chunks of equal length, computed on the device
  from its own length (a short sequence's splits share its few tokens instead of idling). No host
  sync is made (CUDA-graph safe). ``plan`` picks the count from the SM count: one program an SM
  while sequences x KV heads fit the SMs (equal chunks, all running at once, finishing together),
  else about 12 an SM so that the last ones to run are short.
- Host cost: a call is mostly Triton's launch; the plan is kept per shape and the partials'
  buffer per stream, so a repeated call allocates nothing outside graph capture.
- Each split writes a normalised partial output and its log2-sum-exp in float32, merged per
  (sequence, query head) either by a second kernel (``combine="kernel"``) or, saving that launch,
  by the last split of each (sequence, KV head) to finish (``combine="fused"``, the default where
  one block of 64 values holds every split of the group's heads): a gpu-scope ticket counter per
  (sequence, KV head) in a zeroed buffer this module keeps per stream (calls on one stream run in
  order), which that last split sets back to 0. A call captured in a CUDA graph gets counters of
  its own, never handed out again: a slice of a zeroed arena allocated outside any capture (no
  memset node between the graph's kernels, which would break their PDL chain), or, once the arena
  is used up, a buffer zeroed in the graph. With one split the first kernel writes the final
  output itself.
- K/V loads are masked pointer loads, software-pipelined by ``num_stages`` (cp.async on sm_80+).
- ``pdl``: programmatic dependent launch (sm_90): each kernel may launch while the one before it
  in the stream finishes, and waits (``griddepcontrol.wait``) before its first read, so whatever
  that kernel wrote (q, the cache) is visible. Off by default (see _GPU_CONFIG); ``"graph"`` asks
  for it only in calls captured in a CUDA graph: there it saved 0.3-0.6 us a call, while eager
  calls with it were no faster and at batch 1 with a 32k cache slower (H100: 99.7 us of wall time
  a call against 65.0 without).
- On the CPU interpreter bfloat16 dots widen to float32 first (``DOT_F32``), as in
  ``attention_prefill``: the interpreter multiplies bfloat16 bit patterns
  (triton-lang/triton#11584).

A sequence of length 0 gets o = 0 and lse = -inf. lse is natural-log, float32.
"""

import torch
import triton
import triton.language as tl

_LOG2E = 1.4426950408889634
_LN2 = tl.constexpr(0.6931471805599453)  # a constexpr: kernels may read it
_SM_COUNT: dict[int, int] = {}
_COUNTERS: dict[tuple[int, int], torch.Tensor] = {}
_PARTIALS: dict[tuple[int, int], torch.Tensor] = {}  # (device, stream) -> the splits' partials
_PLANS: dict[tuple, tuple[int, dict]] = {}  # plan() per shape and device: no work on repeat calls
_GRAPH_ARENA_COUNTERS = 1 << 16  # 256 KB a device: 128 captures of batch 64 x 8 KV heads
_GRAPH_ARENAS: dict[int, list] = {}  # device index -> [zeroed int32 buffer, counters handed out]
_PDL: dict[int, bool] = {}


@triton.jit
def _merge_rows(
    part_o_ptr,
    part_lse_ptr,
    slot0,
    rows,
    num_splits,
    o_ptr,
    stride_oh,
    lse_ptr,
    stride_lh,
    HEAD_DIM: tl.constexpr,
    ROWS: tl.constexpr,
    SPLIT_BLOCK: tl.constexpr,
):
    """o and lse of ``rows`` consecutive query heads of one sequence from their partials (row r's
    ``num_splits`` at ``slot0 + r * num_splits``), all rows at once: one round trip to the L2 a
    block of splits. Every split wrote a finite partial (0 where it saw no key, lse2 = -inf), so
    the loads need no mask but the bounds; .cg reads the L2, where other programs wrote."""
    r = tl.arange(0, ROWS)
    dims = tl.arange(0, HEAD_DIM)
    row_ok = r < rows
    top = tl.full([ROWS], float("-inf"), tl.float32)
    total = tl.zeros([ROWS], tl.float32)
    acc = tl.zeros([ROWS, HEAD_DIM], tl.float32)
    for s0 in range(0, num_splits, SPLIT_BLOCK):
        splits = s0 + tl.arange(0, SPLIT_BLOCK)
        present = row_ok[:, None] & (splits < num_splits)[None, :]
        slots = slot0 + r[:, None] * num_splits + splits[None, :]
        lse2 = tl.load(
            part_lse_ptr + slots, mask=present, other=float("-inf"), cache_modifier=".cg"
        )
        parts = tl.load(
            part_o_ptr + slots[:, :, None] * HEAD_DIM + dims[None, None, :],
            mask=present[:, :, None],
            other=0.0,
            cache_modifier=".cg",
        )
        top_new = tl.maximum(top, tl.max(lse2, 1))
        base = tl.where(top_new == float("-inf"), 0.0, top_new)
        weights = tl.math.exp2(lse2 - base[:, None])  # splits that saw no key weigh 0
        rescale = tl.math.exp2(top - base)
        acc = acc * rescale[:, None] + tl.sum(parts * weights[:, :, None], 1)
        total = total * rescale + tl.sum(weights, 1)
        top = top_new
    total_safe = tl.where(total > 0.0, total, 1.0)
    base = tl.where(top == float("-inf"), 0.0, top)
    tl.store(
        o_ptr + r[:, None] * stride_oh + dims[None, :],
        (acc / total_safe[:, None]).to(o_ptr.dtype.element_ty),
        mask=row_ok[:, None],
    )
    lse = tl.where(total > 0.0, (base + tl.math.log2(total_safe)) * _LN2, float("-inf"))
    tl.store(lse_ptr + r * stride_lh, lse, mask=row_ok)


@triton.jit(do_not_specialize=["stride_lb", "kv_heads", "group", "max_seq", "num_splits"])
def _decode_split_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    seq_lens_ptr,
    o_ptr,
    lse_ptr,
    part_o_ptr,
    part_lse_ptr,
    counter_ptr,
    stride_qb,
    stride_qh,
    stride_kb,
    stride_kh,
    stride_ks,
    stride_vb,
    stride_vh,
    stride_vs,
    stride_ob,
    stride_oh,
    stride_lb,
    stride_lh,
    kv_heads,
    group,
    max_seq,
    num_splits,
    qk_scale,
    HEAD_DIM: tl.constexpr,
    GROUP_PAD: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SINGLE_SPLIT: tl.constexpr,
    FUSED: tl.constexpr,
    MERGE_ROWS: tl.constexpr,
    SPLIT_BLOCK: tl.constexpr,
    USE_PDL: tl.constexpr,
    DOT_F32: tl.constexpr,
):
    pid = tl.program_id(0)
    split = pid % num_splits
    batch_kv = pid // num_splits
    batch = (batch_kv // kv_heads).to(tl.int64)
    kv_head = (batch_kv % kv_heads).to(tl.int64)
    if USE_PDL:
        tl.extra.cuda.gdc_wait()  # the previous kernel in the stream may write q or the cache
    seq_len = tl.minimum(tl.load(seq_lens_ptr + batch), max_seq)  # never read past the cache
    chunk = tl.cdiv(seq_len, num_splits)  # equal chunks of this sequence's own length
    start = split * chunk
    stop = tl.minimum(seq_len, start + chunk)

    rows = tl.arange(0, GROUP_PAD)  # query heads kv_head * group + rows
    dims = tl.arange(0, HEAD_DIM)
    heads = kv_head * group + rows
    q = tl.load(
        q_ptr + batch * stride_qb + heads[:, None] * stride_qh + dims[None, :],
        mask=rows[:, None] < group,
        other=0.0,
    )
    if DOT_F32:
        q = q.to(tl.float32)
    k_base = k_ptr + batch * stride_kb + kv_head * stride_kh
    v_base = v_ptr + batch * stride_vb + kv_head * stride_vh

    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)
    for start_n in tl.range(start, stop, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)
        inside = cols < stop
        k = tl.load(
            k_base + cols[:, None] * stride_ks + dims[None, :], mask=inside[:, None], other=0.0
        )
        k_t = tl.trans(k)
        if DOT_F32:
            k_t = k_t.to(tl.float32)
        qk = tl.dot(q, k_t)
        # Every row shares the column mask and each visited block has a key inside: m stays finite.
        qk = tl.where(inside[None, :], qk * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        v = tl.load(
            v_base + cols[:, None] * stride_vs + dims[None, :], mask=inside[:, None], other=0.0
        )
        if DOT_F32:
            acc = tl.dot(p.to(v.dtype).to(tl.float32), v.to(tl.float32), acc * alpha[:, None])
        else:
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_new

    seen = l_i > 0.0
    l_safe = tl.where(seen, l_i, 1.0)
    out = acc / l_safe[:, None]
    lse2 = tl.where(seen, m_i + tl.math.log2(l_safe), float("-inf"))
    valid = rows < group
    if SINGLE_SPLIT:
        tl.store(
            o_ptr + batch * stride_ob + heads[:, None] * stride_oh + dims[None, :],
            out.to(o_ptr.dtype.element_ty),
            mask=valid[:, None],
        )
        tl.store(lse_ptr + batch * stride_lb + heads * stride_lh, lse2 * _LN2, mask=valid)
    else:
        # Partials: [batch, q_heads, num_splits, dim] and [batch, q_heads, num_splits], contiguous.
        slot = (batch * kv_heads * group + heads) * num_splits + split
        tl.store(part_o_ptr + slot[:, None] * HEAD_DIM + dims[None, :], out, mask=valid[:, None])
        tl.store(part_lse_ptr + slot, lse2, mask=valid)
        if FUSED:
            # Every thread's partial stores come before the one release below (as CUTLASS's
            # semaphore: a CTA barrier, then one thread's gpu-scope release); the scalar atomic's
            # result reaches every thread, so the branch is uniform.
            tl.debug_barrier()
            ticket = tl.atomic_add(counter_ptr + batch_kv, 1, sem="acq_rel", scope="gpu")
            if ticket == num_splits - 1:
                tl.atomic_xchg(counter_ptr + batch_kv, 0, sem="relaxed", scope="gpu")
                head0 = kv_head * group
                _merge_rows(
                    part_o_ptr,
                    part_lse_ptr,
                    (batch * kv_heads * group + head0) * num_splits,
                    group,
                    num_splits,
                    o_ptr + batch * stride_ob + head0 * stride_oh,
                    stride_oh,
                    lse_ptr + batch * stride_lb + head0 * stride_lh,
                    stride_lh,
                    HEAD_DIM,
                    MERGE_ROWS,
                    SPLIT_BLOCK,
                )
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit(do_not_specialize=["stride_lb", "q_heads", "num_splits"])
def _decode_combine_kernel(
    part_o_ptr,
    part_lse_ptr,
    o_ptr,
    lse_ptr,
    stride_ob,
    stride_oh,
    stride_lb,
    stride_lh,
    q_heads,
    num_splits,
    HEAD_DIM: tl.constexpr,
    SPLIT_BLOCK: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    pid = tl.program_id(0).to(tl.int64)  # batch * q_heads + head
    batch = pid // q_heads
    head = pid % q_heads
    if USE_PDL:
        tl.extra.cuda.gdc_wait()  # the split kernel's partials
    _merge_rows(
        part_o_ptr,
        part_lse_ptr,
        pid * num_splits,
        1,
        num_splits,
        o_ptr + batch * stride_ob + head * stride_oh,
        stride_oh,
        lse_ptr + batch * stride_lb + head * stride_lh,
        stride_lh,
        HEAD_DIM,
        1,
        SPLIT_BLOCK,
    )
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()


def _sm_count(device: torch.device) -> int:
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SM_COUNT:
        _SM_COUNT[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _SM_COUNT[index]


def _counters(device: torch.device, count: int, capturing: bool) -> torch.Tensor:
    """The fused merge's zeroed counters, at least ``count``. One buffer per stream, so that calls
    on two streams of a device never share a counter; calls on one stream run in order, and each
    leaves its counters at 0. Inside CUDA graph capture, counters no other call or graph is handed
    (a cached buffer baked into a graph would be freed under it when a larger one replaced it):
    the next slice of the device's arena, zeroed once at its allocation outside any capture, so
    the graph holds no memset between its kernels; past the arena's end, a buffer of the graph's
    own, zeroed in the graph."""
    index = device.index if device.index is not None else -1
    if capturing:
        arena = _GRAPH_ARENAS.get(index)
        if arena is not None and arena[1] + count <= arena[0].numel():
            arena[1] += count
            return arena[0][arena[1] - count : arena[1]]
        return torch.zeros(max(count, 1), dtype=torch.int32, device=device)
    if device.type == "cuda" and index not in _GRAPH_ARENAS:  # warm-up calls precede a capture
        _GRAPH_ARENAS[index] = [
            torch.zeros(_GRAPH_ARENA_COUNTERS, dtype=torch.int32, device=device),
            0,
        ]
    key = _stream_key(device)
    held = _COUNTERS.get(key)
    if held is None or held.numel() < count:
        size = max(count, 2 * (0 if held is None else held.numel()), 1024)
        held = torch.zeros(size, dtype=torch.int32, device=device)
        _COUNTERS[key] = held
    return held


def _stream_key(device: torch.device) -> tuple[int, int]:
    """(device index, current stream's handle): torch's raw query, a tenth of the cost of
    ``torch.cuda.current_stream`` on a slow host (0.5 against 4.9 us an H100 host's call)."""
    if device.type != "cuda":
        return (-1, 0)
    index = device.index if device.index is not None else torch.cuda.current_device()
    return (index, torch._C._cuda_getCurrentRawStream(index))


def _partials(device: torch.device, count: int, capturing: bool) -> torch.Tensor:
    """float32 room for ``count`` values of the splits' partials. Outside capture, one buffer per
    stream, grown as needed and reused: calls on one stream run in order, so a call's merge has
    read its partials before the next call writes them. Inside capture, the graph's own."""
    if capturing or device.type != "cuda":
        return torch.empty(count, dtype=torch.float32, device=device)
    key = _stream_key(device)
    held = _PARTIALS.get(key)
    if held is None or held.numel() < count:
        held = torch.empty(
            max(count, 2 * (0 if held is None else held.numel())),
            dtype=torch.float32,
            device=device,
        )
        _PARTIALS[key] = held
    return held


def _pdl_supported(device: torch.device) -> bool:
    """Programmatic dependent launch: sm_90 and later, and a Triton that has ``griddepcontrol``."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _PDL:
        major = torch.cuda.get_device_capability(index)[0]
        _PDL[index] = major >= 9 and hasattr(getattr(tl.extra, "cuda", None), "gdc_wait")
    return _PDL[index]


_CPU_CONFIG = {"BLOCK_N": 16, "num_warps": 4, "num_stages": 1, "combine": "kernel", "pdl": False}
# On a GPU: 64 x 128 K and V tiles, 2 in flight (3 stages: 70 KB of shared memory, 95 registers);
# other tile sizes, warps and stages were no faster at any shape on an H100. The fused merge saves
# up to ~2 us where it reads every split in one block and costs more where it loops (plan falls
# back to the merge kernel there). PDL stays off: inside CUDA graph capture (Triton 3.6, torch 2.11)
# the third capture of a process fails with "operation failed due to a previous error during
# capture", whatever its shape. The measurements: docs/kernels/attention_decode.md.
_GPU_CONFIG = {"BLOCK_N": 64, "num_warps": 4, "num_stages": 3, "combine": "fused", "pdl": False}
# Splits when batch x KV heads <= SMs: one program an SM. With equal chunks, all of them run at
# once and finish together; more programs only add partials (H100: 2 an SM from 0.6% faster to
# 3.5% slower, and a fractional count of programs an SM, e.g. 3.4, 8-11% slower than a whole one).
_SMALL_PROGRAMS_PER_SM = 1
# Splits when the batch alone fills the SMs: ~12 programs an SM, so that the last ones are short
# (batch 64, 8 KV heads: 4 splits; 1 split was 94% of copy, 4 splits 102-104%).
_LARGE_PROGRAMS_PER_SM = 12
_MIN_CHUNK = 128  # tokens a split at least
_FUSED_MERGE_VALUES = 64  # the fused merge's block: splits x query heads of a group (registers)


def plan(
    batch: int, q_heads: int, kv_heads: int, max_seq: int, head_dim: int, device: torch.device
) -> tuple[int, dict]:
    """(num_splits, config) for a shape. Host-side facts only (no sync): SM count, batch, heads
    and the cache length; the lengths themselves stay on the device."""
    if device.type != "cuda":
        return min(3, max(1, triton.cdiv(max_seq, 16))), dict(_CPU_CONFIG)  # combine runs on CPU
    config = dict(_GPU_CONFIG)
    config["pdl"] = config["pdl"] if _pdl_supported(device) else False
    sms = _sm_count(device)
    items = max(1, batch * kv_heads)
    if items <= sms:
        splits = _SMALL_PROGRAMS_PER_SM * sms // items
    else:
        splits = triton.cdiv(_LARGE_PROGRAMS_PER_SM * sms, items)
    splits = max(1, min(splits, max_seq // _MIN_CHUNK))
    group = max(1, q_heads // max(1, kv_heads))
    merged = triton.next_power_of_2(splits) * triton.next_power_of_2(group)
    if merged > _FUSED_MERGE_VALUES:
        config["combine"] = "kernel"  # the last split would merge in several rounds
    return splits, config


def run(q, k_cache, v_cache, seq_lens, sm_scale, o, lse):
    launch(q, k_cache, v_cache, seq_lens, sm_scale, o, lse)


def launch(q, k_cache, v_cache, seq_lens, sm_scale, o, lse, num_splits=None, config=None):
    """``run`` with the split count and ``config`` open: BLOCK_N, num_warps, num_stages, combine
    ("kernel" or "fused"), pdl (True, False or "graph": inside CUDA graph capture only); missing
    keys and ``None`` take ``plan``'s choice. Returns the compiled split kernel where Triton hands
    it back (its registers and shared memory)."""
    batch, q_heads, head_dim = q.shape
    kv_heads, max_seq = k_cache.shape[1], k_cache.shape[2]
    _check_inputs(q_heads, head_dim, kv_heads, (q, k_cache, v_cache, o))
    if batch == 0 or q_heads == 0:
        return None
    group = q_heads // kv_heads
    num_splits, config = _settled_plan(q, kv_heads, max_seq, num_splits, config)
    single = num_splits == 1
    on_gpu = q.is_cuda
    capturing = on_gpu and torch.cuda.is_current_stream_capturing()
    pdl = on_gpu and (config["pdl"] is True or (config["pdl"] == "graph" and capturing))
    fused = not single and config["combine"] == "fused"
    counters, part_o, part_lse = _workspace(q, o, kv_heads, num_splits, fused, capturing)
    merge_rows, split_block = _fused_merge_block(group, num_splits, fused)
    compiled = _decode_split_kernel[
        (batch * kv_heads * num_splits,)
    ](
        q,
        k_cache,
        v_cache,
        seq_lens,
        o,
        lse,
        part_o,
        part_lse,
        counters if fused else seq_lens,  # unused unless fused
        *q.stride()[:2],
        *k_cache.stride()[:3],
        *v_cache.stride()[:3],
        *o.stride()[:2],
        *lse.stride(),
        kv_heads,
        group,
        max_seq,
        num_splits,
        float(sm_scale) * _LOG2E,
        HEAD_DIM=head_dim,
        GROUP_PAD=max(16, triton.next_power_of_2(group)),
        BLOCK_N=config["BLOCK_N"],
        SINGLE_SPLIT=single,
        FUSED=fused,
        MERGE_ROWS=merge_rows,
        SPLIT_BLOCK=split_block,
        USE_PDL=pdl,
        DOT_F32=not on_gpu and q.dtype == torch.bfloat16,
        num_warps=config["num_warps"],
        num_stages=config["num_stages"],
        **_pdl_launch(pdl),
    )
    if not single and not fused:
        _combine(q, part_o, part_lse, o, lse, num_splits, pdl)
    return compiled


def _check_inputs(q_heads: int, head_dim: int, kv_heads: int, tensors: tuple) -> None:
    if head_dim not in (64, 128) or kv_heads == 0 or q_heads % kv_heads:
        raise ValueError(
            f"attention_decode: head_dim {head_dim} (64 or 128) and q_heads {q_heads} "
            f"a multiple of kv_heads {kv_heads} are required"
        )
    if any(t.stride(-1) != 1 for t in tensors):
        raise ValueError(
            "attention_decode: the last dimension of q, the caches and o must be contiguous"
        )


def _settled_plan(q, kv_heads, max_seq, num_splits, config) -> tuple[int, dict]:
    """(num_splits, config): ``plan``'s for the shape (kept per shape), overridden by the caller's."""
    batch, q_heads, head_dim = q.shape
    shape = (batch, q_heads, kv_heads, max_seq, head_dim, q.device)
    planned_splits, planned = _PLANS.get(shape) or _PLANS.setdefault(shape, plan(*shape))
    config = {**planned, **config} if config else planned
    if num_splits is None:
        num_splits = planned_splits
    return max(1, int(num_splits)), config


def _workspace(q, o, kv_heads, num_splits, fused, capturing):
    """(counters, part_o, part_lse): the fused merge's counters (None unless fused) and the splits'
    partials, both unused with one split."""
    batch, q_heads, head_dim = q.shape
    counters = _counters(q.device, batch * kv_heads, capturing) if fused else None
    if num_splits == 1:
        return counters, o, o
    # One allocation for both: [batch, q_heads, splits, dim] then [batch, q_heads, splits].
    rows = batch * q_heads * num_splits
    parts = _partials(q.device, rows * (head_dim + 1), capturing)
    return counters, parts[: rows * head_dim], parts[rows * head_dim :]


def _fused_merge_block(group: int, num_splits: int, fused: bool) -> tuple[int, int]:
    """The fused merge's (MERGE_ROWS, SPLIT_BLOCK): the group's query heads, padded to a power of
    2, and the splits it reads at once, 2 to 64 (at most 64 values a lane at 4 warps, few builds).
    (1, 16) unless fused: one build for all counts."""
    if not fused:
        return 1, 16
    merge_rows = triton.next_power_of_2(group)
    return merge_rows, max(
        2, min(triton.next_power_of_2(num_splits), _FUSED_MERGE_VALUES // merge_rows)
    )


def _pdl_launch(pdl: bool) -> dict:
    """Triton's launch option for programmatic dependent launch, where it is on."""
    return {"launch_pdl": True} if pdl else {}


def _combine(q, part_o, part_lse, o, lse, num_splits, pdl) -> None:
    """The merge kernel: one program a (sequence, query head), splits read in blocks of 16 to 64
    (few builds; at most 64 values a lane at 4 warps)."""
    batch, q_heads, head_dim = q.shape
    _decode_combine_kernel[(batch * q_heads,)](
        part_o,
        part_lse,
        o,
        lse,
        *o.stride()[:2],
        *lse.stride(),
        q_heads,
        num_splits,
        HEAD_DIM=head_dim,
        SPLIT_BLOCK=min(64, max(16, triton.next_power_of_2(num_splits))),
        USE_PDL=pdl,
        num_warps=4,
        **_pdl_launch(pdl),
    )
