"""Peer: FlashInfer's batch decode (flashinfer-python ``BatchDecodeWithPagedKVCacheWrapper``)
reading the definition's cache [batch, kv_heads, max_seq, dim] in place, as a paged cache.

- Paged view: with page size P (16, or the largest power of two below it that divides max_seq and
  the batch stride), the cache is an "HND" paged cache whose page (b, p) holds positions
  [p P, p P + P) of sequence b: a strided view (page stride P * the position stride, head stride
  and position stride as they are), page index b * (batch stride / page stride) + p. Nothing is
  copied and the kernel reads only the first seq_lens[b] positions; FlashInfer's split-KV plan
  splits long sequences over the SMs (batch 1 at 32k keeps the GPU busy).
- The kernel: FlashInfer's CUDA-core decode kernel (``use_tensor_cores=False``), or its
  tensor-core path (the prefill kernels with one query per sequence) when ``_TENSOR_CORES`` is set;
  the probe (scripts/probe_flashinfer.py) times both.
- lse: FlashInfer returns log2(sum_j 2^(score_ij log2 e)); it is multiplied by ln 2. A sequence of
  length 0 gets o = 0 and lse = -inf here.
- Reuse: one wrapper (its 128 MiB float workspace, int workspace and pinned host buffer) per
  (device, dtype, heads, head_dim, layout) in a module dict, as a serving engine keeps one for all
  layers. ``plan`` needs the lengths on the host, so each call reads seq_lens back (one
  device-to-host copy); the plan (page table on the device, split-KV schedule) is redone only when
  the lengths, page layout or sm_scale differ from the previous call's, as an engine plans once
  per step and runs every layer on it. Inside CUDA graph capture no copy to the host can be made:
  the call replays the plan of the last call made outside the capture (the lengths it was made
  for), as an engine plans each step before it replays that step's graph. So a call costs one small copy and sync, one decode launch
  (plus its merge kernel when it splits) and one element-wise kernel for lse. FlashInfer compiles
  each kernel with nvcc on first use (cached under ``~/.cache/flashinfer``; about a minute on 2
  cores for this one, minutes for the FA3 tensor-core path: build them ahead with
  ``scripts/flashinfer_wheels.sh --prebuild`` or one call outside the engine).
"""

import math

import torch

_LN2 = math.log(2.0)
_PAGE = 16  # positions per page: the largest power of two <= this that fits the cache is used
_TENSOR_CORES = False
_BACKEND = "auto"  # with _TENSOR_CORES: "auto" (FA2 prefill kernels) or "fa3" (Hopper)
_WORKSPACE_BYTES = 128 * 1024 * 1024  # FlashInfer's recommended float workspace
_WORKSPACES: dict[torch.device, torch.Tensor] = {}
_WRAPPERS: dict[tuple, list] = {}  # key -> [wrapper, plan key, page tables kept alive]


def _page_size(max_seq: int, batch_stride: int, seq_stride: int) -> int:
    page = _PAGE
    while page > 1 and (max_seq % page or batch_stride % (page * seq_stride)):
        page //= 2
    return page


def _paged(cache, page, pages):
    """[pages, kv_heads, page, dim] view of [batch, kv_heads, max_seq, dim] ("HND" pages)."""
    _, kv_heads, _, head_dim = cache.shape
    stride_h, stride_s = cache.stride(1), cache.stride(2)
    return cache.as_strided(
        (pages, kv_heads, page, head_dim),
        (page * stride_s, stride_h, stride_s, 1),
        cache.storage_offset(),
    )


def page_table(lengths, page, step, device):
    """FlashInfer's paged-cache indices for sequences of these lengths: (indptr on the host, page
    indices on ``device``, positions used in each last page on the host); sequence b's pages are
    b * step, b * step + 1, ..."""
    counts = [(n + page - 1) // page for n in lengths]
    indptr = [0]
    for count in counts:
        indptr.append(indptr[-1] + count)
    first = [b * step - indptr[b] for b in range(len(lengths))]
    indices = torch.arange(indptr[-1], dtype=torch.int64).to(device) + torch.repeat_interleave(
        torch.tensor(first, dtype=torch.int64).to(device),
        torch.tensor(counts, dtype=torch.int64).to(device),
        output_size=indptr[-1],
    )
    last = [n - (c - 1) * page if c else 0 for n, c in zip(lengths, counts)]
    return (
        torch.tensor(indptr, dtype=torch.int32),
        indices.to(torch.int32),
        torch.tensor(last, dtype=torch.int32),
    )


def _wrapper(key, device):
    entry = _WRAPPERS.get(key)
    if entry is None:
        import flashinfer

        workspace = _WORKSPACES.get(device)
        if workspace is None:
            workspace = _WORKSPACES[device] = torch.zeros(
                _WORKSPACE_BYTES, dtype=torch.uint8, device=device
            )
        wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            workspace, "HND", use_tensor_cores=_TENSOR_CORES, backend=_BACKEND
        )
        entry = _WRAPPERS[key] = [wrapper, None, None]
    return entry


def _check(q, k_cache, v_cache) -> None:
    if q.dtype not in (torch.float16, torch.bfloat16):
        raise NotImplementedError(f"flashinfer_decode: dtype {q.dtype} (fp16 and bf16 only)")
    if q.device.type != "cuda":
        raise NotImplementedError("flashinfer_decode: FlashInfer runs on CUDA devices only")
    if q.shape[-1] not in (64, 128):
        raise NotImplementedError(f"flashinfer_decode: head_dim {q.shape[-1]} (64 and 128 only)")
    if k_cache.stride() != v_cache.stride() or k_cache.stride(-1) != 1:
        raise NotImplementedError(
            "flashinfer_decode: K and V caches need one layout, dim innermost"
        )


def _host_lengths(entry, seq_lens, plan_shape: tuple) -> list[int]:
    """The sequence lengths on the host, where plan() needs them. No device-to-host copy can be
    captured in a CUDA graph: there the graph replays the plan of the last call made outside it
    (``entry``'s, for the same ``plan_shape``: max_seq, page, step, sm_scale), as an engine plans a
    step before replaying that step's graph."""
    if not torch.cuda.is_current_stream_capturing():
        return seq_lens.tolist()
    planned = entry[1]
    if planned is None or planned[1:] != plan_shape:
        raise RuntimeError(
            "flashinfer_decode: inside CUDA graph capture, the plan of an earlier call on "
            "the same cache and sm_scale is replayed; make one call outside the capture first"
        )
    return list(planned[0])


def run(q, k_cache, v_cache, seq_lens, sm_scale, o, lse):
    batch, q_heads, head_dim = q.shape
    kv_heads, max_seq = k_cache.shape[1], k_cache.shape[2]
    if batch == 0 or q_heads == 0:
        return
    if max_seq == 0:
        o.zero_()
        lse.fill_(-math.inf)
        return
    _check(q, k_cache, v_cache)
    batch_stride, seq_stride = k_cache.stride(0), k_cache.stride(2)
    page = _page_size(max_seq, batch_stride, seq_stride)
    step = batch_stride // (page * seq_stride)  # pages from one sequence to the next
    pages = (batch - 1) * step + max_seq // page
    key = (q.device, q.dtype, q_heads, kv_heads, head_dim, _TENSOR_CORES, _BACKEND)
    entry = _wrapper(key, q.device)
    wrapper = entry[0]
    lengths = _host_lengths(entry, seq_lens, (max_seq, page, step, float(sm_scale)))
    if not any(lengths):
        o.zero_()
        lse.fill_(-math.inf)
        return
    plan_key = (tuple(lengths), max_seq, page, step, float(sm_scale))
    if entry[1] != plan_key:
        indptr_host, indices, last = page_table(lengths, page, step, q.device)
        wrapper.plan(  # indptr and last_page_len on the host: plan() reads them there
            indptr_host,
            indices,
            last,
            q_heads,
            kv_heads,
            head_dim,
            page,
            pos_encoding_mode="NONE",
            q_data_type=q.dtype,
            kv_data_type=q.dtype,
            sm_scale=float(sm_scale),
        )
        entry[1] = plan_key
        entry[2] = indices
    wrapper.run(
        q,
        (_paged(k_cache, page, pages), _paged(v_cache, page, pages)),
        out=o,
        lse=lse,
        return_lse=True,
    )
    lse.mul_(_LN2)
    if not all(lengths):
        empty = seq_lens == 0
        o.masked_fill_(empty[:, None, None], 0.0)
        lse.masked_fill_(empty[:, None], -math.inf)
