"""NVFP4 block-scaled GEMV in Triton: c[i, 0, l] = sum_k a sfa b sfb, float32 sums, float16 out.

Design (the operator is purely memory-bound: m*k/2 + m*k/16 bytes per call):
- A is read as 8-byte words, each the 16 FP4 codes of one scale block, streamed past the caches
  (evict_first). Each loop carries the next step's loads, issued before the current step is
  decoded: a software prefetch, since Triton pipelines no loads here by itself.
- Hopper has no FP4 conversion instruction (cvt for e2m1x2 is sm_100+). On the GPU each block's
  dot product is one inline-PTX sequence per 8-byte word (nvfp4_gemv_details.py): byte-permute
  (PRMT) lookups turn 4 codes at a time into int8 (12 + 2*value for non-negative codes from one
  table, 12 - 2*|value| for negative codes from a second table on the sign-flipped codes; PRMT's
  sign-replicate mode zeroes the other table's byte) and dp4a accumulates them against the int8
  vector, starting from -12 * sum(2b) to cancel the offset. 16 products of 2a * 2b sum exactly in
  int32, then times sfa * sfb / 4 in float32 (e4m3 -> float32 is a native cvt from sm_89); each row
  is summed in float32 and rounded once to float16.
- Under the interpreter (no PTX) the same block sums come from integer arithmetic on the nibbles.
- Scale layouts: ``run`` reads sfa/sfb, ``run_permuted`` reads the block-scaled copies; both are the
  same kernels with a scale address of the form row_part(i) + column_part(j) + batch part.
- Work split, every shape: a grid of (P, l) programs, P = round(PROGRAMS_PER_SM * SMs / l),
  program p taking rows [p m / P, (p + 1) m / P) of its batch, equal in rows to within one, so no
  SM waits on a last partial wave. A program steps over its rows BLOCK_M at a time and, for each,
  over k 64 blocks (1024 values, 512 bytes a row) at a time; the vector's words are decoded each
  step and shared by the step's BLOCK_M rows; the block products accumulate in a [BLOCK_M, 64]
  float32 tile (no cross-thread reduction inside the k loop), summed over k at the end.
- It is issue-bound, not latency-bound (16 warps an SM x 2 steps x 64 bytes = 64 KB of A in
  flight an SM is enough): the k loop's SASS instructions a value are what set its speed. Hence
  k_blocks is specialized (divisible by 16 at the benchmark shapes: the masks are uniform over word
  pairs, A loads are 16 bytes) and the launch config is autotuned per (m, k, l) over three configs
  (below), of which 32-row steps share each vector decode between twice the rows; each is timed on
  the first call's inputs with the L2 flushed; calls under 2^24 values take the first config (each
  config is a compile). The interpreter runs only the first. Measurements and what was tried:
  docs/kernels/nvfp4_gemv.md.
"""

import os

import torch
import triton
import triton.language as tl

from .nvfp4_gemv_details import block_products, vector_operands

_INTERPRETING = os.environ.get("TRITON_INTERPRET", "0") == "1"
_BLOCK_K = 64  # scale blocks (16 values, one 8-byte word) a row a step, at most
_TUNED_ABOVE = 1 << 24  # values m * k * l: smaller calls (tests, odd shapes) take the first config

# Specialized (by Triton's divisibility-by-16 and ==1 rules) only where it pays: A's and b's strides
# (16-byte vector loads) and the scales' column stride (adjacent bytes); the rest would only
# multiply compiled variants across shapes.
_GENERIC = ["m", "sfa_r32", "sfa_r4", "sfa_r128", "sfa_c_rest", "sfa_batch"]
_GENERIC += ["sfb_c_rest", "sfb_batch", "c_row", "c_batch", "batches"]


def _prune(configs, named_args, **kwargs):
    """Only the first config below _TUNED_ABOVE values (each config is a compile and a timing)."""
    values = named_args["m"] * named_args["k_blocks"] * 16 * named_args["batches"]
    return configs if values > _TUNED_ABOVE else configs[:1]


def _bench(kernel_call, quantiles):
    """Triton's timer (L2 flushed before each call) with short budgets: 5 ms warm-up, 25 ms."""
    return triton.testing.do_bench(kernel_call, warmup=5, rep=25, quantiles=quantiles)


def _autotune(configs):
    return triton.autotune(
        configs=configs[:1] if _INTERPRETING else configs,
        key=["m", "k_blocks", "batches"],
        prune_configs_by={"early_config_prune": _prune},
        do_bench=_bench,
    )


@triton.jit
def _load_step(
    a_rows,
    sfa_rows,
    b_words,
    sfb_base,
    row_ok,
    blocks,
    k_blocks,
    sfa_c4,
    sfa_c_rest,
    sfb_c4,
    sfb_c_rest,
):
    """One step's loads: A words [rows, blocks] (streamed), sfa bytes, b words and sfb bytes."""
    block_ok = blocks < k_blocks
    mask = row_ok[:, None] & block_ok[None, :]
    words = tl.load(
        a_rows[:, None] + blocks[None, :], mask=mask, other=0, eviction_policy="evict_first"
    )
    columns = (blocks % 4) * sfa_c4 + (blocks // 4) * sfa_c_rest
    sfa = tl.load(sfa_rows[:, None] + columns[None, :], mask=mask, other=0)
    vector = tl.load(b_words + blocks, mask=block_ok, other=0)
    sfb_columns = (blocks % 4) * sfb_c4 + (blocks // 4) * sfb_c_rest
    sfb = tl.load(sfb_base + sfb_columns, mask=block_ok, other=0)
    return words, sfa, vector, sfb


# Launch configs, programs an SM set to what fits (registers from ptxas, sm_90, Triton 3.7; more
# than fit would leave a second, partial wave). SASS instructions a value in the k loop:
#   16 rows x 4 warps: 3.5, 126 registers, 4 programs (16 warps) an SM: the measured baseline;
#   32 rows x 4 warps: 2.9 (each thread's vector decode shared by twice the rows), 255
#     registers, 2 programs (8 warps) an SM, the same bytes in flight (16 words a thread);
#   16 rows x 2 warps: 2.9, 254 registers, 4 programs (8 warps) an SM: finer row ranges.
_CONFIGS = [
    triton.Config({"BLOCK_M": 16, "PROGRAMS_PER_SM": 4}, num_warps=4),
    triton.Config({"BLOCK_M": 32, "PROGRAMS_PER_SM": 2}, num_warps=4),
    triton.Config({"BLOCK_M": 16, "PROGRAMS_PER_SM": 4}, num_warps=2),
]


@_autotune(_CONFIGS)
@triton.jit(do_not_specialize=_GENERIC)
def _nvfp4_gemv_kernel(
    a_ptr,
    b_ptr,
    sfa_ptr,
    sfb_ptr,
    c_ptr,
    m,
    k_blocks,
    a_row,
    a_batch,
    b_batch,
    sfa_r32,
    sfa_r4,
    sfa_r128,
    sfa_c4,
    sfa_c_rest,
    sfa_batch,
    sfb_c4,
    sfb_c_rest,
    sfb_batch,
    c_row,
    c_batch,
    batches,
    BLOCK_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    PROGRAMS_PER_SM: tl.constexpr,
    USE_PTX: tl.constexpr,
):
    """Program (p, l) takes rows [p m / P, (p + 1) m / P) of batch l, BLOCK_M at a time; P is
    about PROGRAMS_PER_SM * SMs / l (the launch grid; batches only keys the tuning). a/b strides
    in 8-byte words, scale strides in bytes, c strides in elements. A scale's byte:
    (i % 32) r32 + (i // 32 % 4) r4 + (i // 128) r128 + (j % 4) c4 + (j // 4) c_rest + l batch."""
    batch = tl.program_id(1).to(tl.int64)
    program = tl.program_id(0).to(tl.int64)
    first = program * m // tl.num_programs(0)
    last = (program + 1) * m // tl.num_programs(0)
    a_batch_words = a_ptr.to(tl.pointer_type(tl.int64)) + batch * a_batch
    b_words = b_ptr.to(tl.pointer_type(tl.int64)) + batch * b_batch
    sfb_base = sfb_ptr + batch * sfb_batch
    steps = tl.arange(0, BLOCK_K)
    for row0 in range(first, last, BLOCK_M):
        rows = row0 + tl.arange(0, BLOCK_M)
        row_ok = rows < last
        a_rows = a_batch_words + rows * a_row
        sfa_rows = sfa_ptr + batch * sfa_batch + (rows % 32) * sfa_r32
        sfa_rows += (rows // 32 % 4) * sfa_r4 + (rows // 128) * sfa_r128
        # Summed over k once at the end: a reduction per step would cross threads every step.
        acc = tl.zeros([BLOCK_M, BLOCK_K], dtype=tl.float32)
        loaded = _load_step(
            a_rows, sfa_rows, b_words, sfb_base, row_ok, steps, k_blocks,
            sfa_c4, sfa_c_rest, sfb_c4, sfb_c_rest,
        )  # fmt: skip
        for start in range(0, k_blocks, BLOCK_K):
            # The next step's loads are issued before this step is decoded (software prefetch:
            # the loop carries them), so memory stays busy while the SM computes.
            upcoming = _load_step(
                a_rows, sfa_rows, b_words, sfb_base, row_ok, steps + (start + BLOCK_K), k_blocks,
                sfa_c4, sfa_c_rest, sfb_c4, sfb_c_rest,
            )  # fmt: skip
            words, sfa, vector, sfb = loaded
            operands = vector_operands(vector, sfb, steps + start, m, USE_PTX)
            low, high, start_sum, scale, pos_low, pos_high, neg_low, neg_high = operands
            acc += block_products(
                words, sfa, low, high, start_sum, scale, pos_low, pos_high, neg_low, neg_high,
                USE_PTX,
            )  # fmt: skip
            loaded = upcoming
        c = tl.sum(acc, axis=1)
        tl.store(c_ptr + batch * c_batch + rows * c_row, c.to(tl.float16), mask=row_ok)


_MULTIPROCESSORS = {}


def _programs_per_batch(m, l, device, block_m, programs_per_sm):
    """About programs_per_sm programs an SM in all, each batch split evenly: rows per program
    differ by at most one."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        if index not in _MULTIPROCESSORS:
            _MULTIPROCESSORS[index] = torch.cuda.get_device_properties(index).multi_processor_count
        multiprocessors = _MULTIPROCESSORS[index]
    else:
        multiprocessors = 1  # the interpreter: fewest programs
    return max(1, min(triton.cdiv(m, block_m), round(programs_per_sm * multiprocessors / l)))


def _check(condition, message):
    if not condition:
        raise ValueError(f"nvfp4_gemv (triton): {message}")


def _plain_scale_strides(scales):
    """(r32, r4, r128, c4, c_rest, batch) of a [rows, k/16, l] scale tensor."""
    row, column, batch = scales.stride()
    return row, 32 * row, 128 * row, column, 4 * column, batch


def _permuted_scale_strides(scales):
    """(r32, r4, r128, c4, c_rest, batch) of a [32, 4, rows/128, 4, k/64, l] scale tensor."""
    return tuple(scales.stride())


def _launch(a, b, c, sfa, sfb, sfa_strides, sfb_strides, config=None):
    """``config``: one of _CONFIGS to launch directly; None lets the autotuner choose."""
    m, k_packed, l = a.shape
    if m == 0 or l == 0:
        return
    k_blocks = k_packed // 8
    for name, packed in (("a", a), ("b", b)):
        _check(packed.stride(1) == 1, f"{name} must be contiguous along k")
        _check(
            packed.stride(0) % 8 == 0 and packed.stride(2) % 8 == 0 and packed.data_ptr() % 8 == 0,
            f"{name} rows and batches must start on 8-byte boundaries",
        )

    def grid(meta):
        return (_programs_per_batch(m, l, a.device, meta["BLOCK_M"], meta["PROGRAMS_PER_SM"]), l)

    kernel, settings = _nvfp4_gemv_kernel, {}
    if config is not None:
        kernel, settings = _nvfp4_gemv_kernel.fn, {**config.kwargs, "num_warps": config.num_warps}
    kernel[grid](
        a.view(torch.uint8),
        b.view(torch.uint8),
        sfa.view(torch.uint8),
        sfb.view(torch.uint8),
        c,
        m,
        k_blocks,
        a.stride(0) // 8,
        a.stride(2) // 8,
        b.stride(2) // 8,
        *sfa_strides,
        sfb_strides[3],
        sfb_strides[4],
        sfb_strides[5],
        c.stride(0),
        c.stride(2),
        l,
        BLOCK_K=min(_BLOCK_K, triton.next_power_of_2(k_blocks)),
        USE_PTX=not _INTERPRETING,
        **settings,
    )


def run(a, b, sfa, sfb, sfa_permuted, sfb_permuted, c):
    """Reads the plain scales sfa [m, k/16, l] and sfb [n, k/16, l]."""
    _launch(a, b, c, sfa, sfb, _plain_scale_strides(sfa), _plain_scale_strides(sfb))


def run_permuted(a, b, sfa, sfb, sfa_permuted, sfb_permuted, c):
    """Reads the block-scaled scales [32, 4, ceil(rows/128), 4, k/64, l]."""
    _launch(
        a,
        b,
        c,
        sfa_permuted,
        sfb_permuted,
        _permuted_scale_strides(sfa_permuted),
        _permuted_scale_strides(sfb_permuted),
    )


def config_count():
    """The launch configs the autotuner chooses from."""
    return len(_CONFIGS)


def run_config(a, b, sfa, sfb, sfa_permuted, sfb_permuted, c, index, permuted=False):
    """Launch config ``index`` of _CONFIGS explicitly, bypassing the autotuner (tests)."""
    scales = (sfa_permuted, sfb_permuted) if permuted else (sfa, sfb)
    strides = _permuted_scale_strides if permuted else _plain_scale_strides
    _launch(a, b, c, *scales, strides(scales[0]), strides(scales[1]), config=_CONFIGS[index])
