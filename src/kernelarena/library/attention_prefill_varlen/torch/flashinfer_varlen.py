"""Peer: FlashInfer's ragged batch prefill (flashinfer-python
``BatchPrefillWithRaggedKVCacheWrapper``), the API that takes packed sequences with offsets as this
definition does, with FlashInfer's FA3 (Hopper, sm_90a) backend where FlashInfer offers it and
its FA2 backend elsewhere.

- q, k, v are passed as they are ([tokens, heads, dim] with any token stride: the packed-QKV
  slices too); o and lse are written in place. Causal masks are bottom-right per sequence, as
  the definition's.
- lse: FlashInfer returns log2(sum_j 2^(score_ij log2 e)); it is multiplied by ln 2. Queries that
  see no key (a sequence without keys, or causal rows above the diagonal when a sequence has
  more queries than keys) get o = 0 and lse = -inf here, from the lengths on the host.
- Reuse: one wrapper (its 128 MiB float workspace, int workspace and pinned host buffer) per
  (device, dtype, heads, head_dim, backend) in a module dict. ``plan`` needs the offsets on the
  host, so each call reads both offset tensors back (one device-to-host copy, as
  ``flash_varlen`` does); the plan is redone only when the offsets, causal or sm_scale differ
  from the previous call's, as an engine plans once per step and runs every layer on it. So a
  call costs one small copy and sync, the attention kernel (plus a merge kernel when FA2 splits
  the keys) and one element-wise kernel for lse. FlashInfer compiles each kernel with nvcc on
  first use (cached under ``~/.cache/flashinfer``; 7.5 minutes on 2 cores for this FA3 module:
  build it ahead with ``scripts/flashinfer_wheels.sh --prebuild`` or one call outside the engine).
"""

import math

import torch

_LN2 = math.log(2.0)
_WORKSPACE_BYTES = 128 * 1024 * 1024
_WORKSPACES: dict[torch.device, torch.Tensor] = {}
_WRAPPERS: dict[tuple, list] = {}  # key -> [wrapper, plan key]


def _backend(device: torch.device) -> str:
    from flashinfer.utils import is_sm90a_supported

    return "fa3" if is_sm90a_supported(device) else "fa2"


def _wrapper(key, device, backend):
    entry = _WRAPPERS.get(key)
    if entry is None:
        import flashinfer

        workspace = _WORKSPACES.get(device)
        if workspace is None:
            workspace = _WORKSPACES[device] = torch.zeros(
                _WORKSPACE_BYTES, dtype=torch.uint8, device=device
            )
        wrapper = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(workspace, "NHD", backend=backend)
        entry = _WRAPPERS[key] = [wrapper, None]
    return entry


def _check(q, k) -> None:
    if q.dtype not in (torch.float16, torch.bfloat16):
        raise NotImplementedError(f"flashinfer_varlen: dtype {q.dtype} (fp16 and bf16 only)")
    if q.device.type != "cuda":
        raise NotImplementedError("flashinfer_varlen: FlashInfer runs on CUDA devices only")
    if q.shape[-1] not in (64, 128) or k.shape[-1] != q.shape[-1]:
        raise NotImplementedError(f"flashinfer_varlen: head_dim {q.shape[-1]} (64 and 128 only)")


def run(q, k, v, cu_seqlens_q, cu_seqlens_k, sm_scale, causal, o, lse):
    total_q, q_heads, head_dim = q.shape
    if total_q == 0 or q_heads == 0:
        return
    if k.shape[0] == 0:
        o.zero_()
        lse.fill_(-math.inf)
        return
    _check(q, k)
    causal = bool(causal)
    sequences = cu_seqlens_q.shape[0] - 1
    offsets = torch.cat([cu_seqlens_q, cu_seqlens_k]).tolist()  # plan() needs them on the host
    q_offsets, k_offsets = offsets[: sequences + 1], offsets[sequences + 1 :]
    backend = _backend(q.device)
    key = (q.device, q.dtype, q_heads, k.shape[1], head_dim, backend)
    entry = _wrapper(key, q.device, backend)
    wrapper = entry[0]
    plan_key = (tuple(offsets), causal, float(sm_scale))
    if entry[1] != plan_key:
        wrapper.plan(
            torch.tensor(q_offsets, dtype=torch.int32),
            torch.tensor(k_offsets, dtype=torch.int32),
            q_heads,
            k.shape[1],
            head_dim,
            causal=causal,
            sm_scale=float(sm_scale),
            q_data_type=q.dtype,
            kv_data_type=q.dtype,
        )
        entry[1] = plan_key
    wrapper.run(q, k, v, out=o, lse=lse, return_lse=True)
    lse.mul_(_LN2)
    for i in range(sequences):  # rows that see no key: o = 0, lse = -inf
        q0, q1 = q_offsets[i], q_offsets[i + 1]
        kv_len = k_offsets[i + 1] - k_offsets[i]
        blind = q1 - q0 if kv_len == 0 else (q1 - q0 - kv_len if causal else 0)
        if blind > 0:
            o[q0 : q0 + blind].zero_()
            lse[q0 : q0 + blind].fill_(-math.inf)
