"""Peer: FlashInfer's prefill kernel (flashinfer-python), one launch per sequence of the batch, with
FlashInfer's FA3 (Hopper, sm_90a) backend where FlashInfer offers it and its FA2 backend elsewhere.

- Layout: FlashInfer's single-request kernel takes q [seq_q, heads, dim] and k, v [seq_kv,
  kv_heads, dim] ("NHD") with any token and head strides, so ``q[b].transpose(0, 1)`` is passed
  as it is: nothing is copied. Its batch API wants one ragged token axis, which [batch, heads,
  seq, dim] tensors are not (that would be a copy of q, k and v per call), hence one launch per
  sequence. The FA3 kernel writes o through its strides too; the FA2 kernel writes a contiguous
  [seq_q, heads, dim] tensor, which is copied into o.
- Causal: FlashInfer aligns the mask bottom-right, as the definition does. With seq_q > seq_kv
  the first seq_q - seq_kv queries see no key: they get o = 0 and lse = -inf here, and FlashInfer
  is given only the last seq_kv queries (its causal kernels want kv_len >= qo_len).
- lse: FlashInfer's kernels return log2(sum_j 2^(score_ij log2 e)); it is multiplied by ln 2.
- Reuse: the compiled module (FlashInfer compiles it with nvcc on the first call for a dtype and
  head_dim and caches it under ``~/.cache/flashinfer/<version>/<arch>/cached_ops``, or under
  ``$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer``) and the scratch buffer are kept in a module
  dict per (device, dtype, head_dim), so a call pays what a user who keeps them pays: one launch
  per sequence plus one element-wise kernel for lse. The module is FlashInfer's own
  ``get_single_prefill_module`` (what ``single_prefill_with_kv_cache`` calls after allocating its
  outputs), called with the outputs' views; where this FlashInfer's signature differs, the public
  ``single_prefill_with_kv_cache`` is used and its outputs copied.
- First use: FlashInfer's nvcc build of its FA3 module takes minutes (2.5-6 min on 2 cores per
  head_dim and dtype), more than the engine's per-job limit allows on a slow host; build them
  ahead (``scripts/flashinfer_wheels.sh --prebuild``, or run one call outside the engine) so that
  ``kernelarena run`` finds them cached or in FlashInfer's AOT folder.
"""

import math

import torch

_LN2 = math.log(2.0)
_SCRATCH_BYTES = 32 * 1024 * 1024  # FlashInfer's SINGLE_KERNEL_TMP_SIZE (used by FA2 only)
_MODULES: dict[tuple, tuple] = {}  # (device, dtype, head_dim) -> (backend, module, scratch)
_PUBLIC_ONLY: set[tuple] = set()  # keys whose module signature did not match: public API


def _backend(device: torch.device) -> str:
    from flashinfer.utils import is_sm90a_supported

    return "fa3" if is_sm90a_supported(device) else "fa2"


def _module(device: torch.device, dtype: torch.dtype, head_dim: int) -> tuple:
    key = (device, dtype, head_dim)
    entry = _MODULES.get(key)
    if entry is None:
        from flashinfer.prefill import get_single_prefill_module

        backend = _backend(device)
        # (backend, dtype_q, dtype_kv, dtype_o, head_dim_qk, head_dim_vo, pos_encoding NONE,
        #  sliding window, logits soft cap, fp16 qk reduction)
        module = get_single_prefill_module(
            backend, dtype, dtype, dtype, head_dim, head_dim, 0, False, False, False
        )
        scratch = torch.empty(_SCRATCH_BYTES, dtype=torch.uint8, device=device)
        entry = _MODULES[key] = (backend, module, scratch)
    return entry


def _check(q, k) -> None:
    if q.dtype not in (torch.float16, torch.bfloat16):
        raise NotImplementedError(f"flashinfer_prefill: dtype {q.dtype} (fp16 and bf16 only)")
    if q.device.type != "cuda":
        raise NotImplementedError("flashinfer_prefill: FlashInfer runs on CUDA devices only")
    if q.shape[-1] not in (64, 128) or k.shape[-1] != q.shape[-1]:
        raise NotImplementedError(f"flashinfer_prefill: head_dim {q.shape[-1]} (64 and 128 only)")


def _public(qb, kb, vb, causal, sm_scale):
    import flashinfer

    return flashinfer.single_prefill_with_kv_cache(
        qb, kb, vb, causal=causal, sm_scale=sm_scale, kv_layout="NHD", return_lse=True
    )


def run(q, k, v, sm_scale, causal, o, lse):
    batch, q_heads, seq_q, head_dim = q.shape
    seq_kv = k.shape[2]
    if batch == 0 or q_heads == 0 or seq_q == 0:
        return
    if seq_kv == 0:
        o.zero_()
        lse.fill_(-math.inf)
        return
    _check(q, k)
    causal = bool(causal)
    sm_scale = float(sm_scale)
    hidden = seq_q - seq_kv if causal and seq_q > seq_kv else 0
    if hidden:  # queries that see no key; FlashInfer gets the last seq_kv queries only
        o[:, :, :hidden].zero_()
        lse[:, :, :hidden].fill_(-math.inf)
    lse_log2 = torch.empty(batch, seq_q - hidden, q_heads, dtype=torch.float32, device=q.device)
    key = (q.device, q.dtype, head_dim)
    if key in _PUBLIC_ONLY or not _run_module(q, k, v, o, lse_log2, hidden, causal, sm_scale):
        _run_public(q, k, v, o, lse_log2, hidden, causal, sm_scale)
    torch.mul(lse_log2.transpose(1, 2), _LN2, out=lse[:, :, hidden:])


def _run_module(q, k, v, o, lse_log2, hidden, causal, sm_scale) -> bool:
    """Each sequence through the kept module, queries from ``hidden`` on; False where this
    FlashInfer's module signature differs (remembered in _PUBLIC_ONLY): nothing was written."""
    batch, _, _, head_dim = q.shape
    from flashinfer.utils import MaskMode, TensorLayout

    backend, module, scratch = _module(q.device, q.dtype, head_dim)
    mask = (MaskMode.CAUSAL if causal else MaskMode.NON_CAUSAL).value
    layout = TensorLayout["NHD"].value
    for b in range(batch):
        qb = q[b, :, hidden:].transpose(0, 1)
        ob = o[b, :, hidden:].transpose(0, 1)
        out = (
            ob if backend == "fa3" else torch.empty_like(qb, memory_format=torch.contiguous_format)
        )
        try:
            # (q, k, v, tmp, o, lse, mask_mode, layout, window_left, packed_custom_mask,
            #  alibi_slopes, logits_soft_cap, sm_scale, scale_q, scale_k, scale_v,
            #  rope_scale, rope_theta): FlashInfer 0.5 to 0.6
            module.run(
                qb, k[b].transpose(0, 1), v[b].transpose(0, 1), scratch, out, lse_log2[b], mask,
                layout, -1, None, None, 0.0, sm_scale, None, None, None, 1.0, 1e4,
            )  # fmt: skip
        except TypeError:
            if b:
                raise
            _PUBLIC_ONLY.add((q.device, q.dtype, head_dim))
            return False
        if out is not ob:
            ob.copy_(out)
    return True


def _run_public(q, k, v, o, lse_log2, hidden, causal, sm_scale) -> None:
    """Each sequence through the public single_prefill_with_kv_cache, its outputs copied."""
    for b in range(q.shape[0]):
        out, lse_b = _public(
            q[b, :, hidden:].transpose(0, 1),
            k[b].transpose(0, 1),
            v[b].transpose(0, 1),
            causal,
            sm_scale,
        )
        o[b, :, hidden:].copy_(out.transpose(0, 1))
        lse_log2[b].copy_(lse_b)
