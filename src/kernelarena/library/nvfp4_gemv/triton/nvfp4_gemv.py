"""NVFP4 block-scaled GEMV in Triton: c[i, 0, l] = sum_k a sfa b sfb, float32 sums, float16 out.

Design (the operator is purely memory-bound: m*k/2 + m*k/16 bytes per call):
- A is read as 8-byte words, each the 16 FP4 codes of one scale block, in steps of 16 rows x 64
  blocks (1024 values, 512 bytes a row; fewer for short rows), streamed past the caches
  (evict_first). The loop carries the next step's loads (A, sfa, b, sfb), issued before the
  current step is decoded: a software prefetch, since Triton pipelines no loads here by itself.
- Hopper has no FP4 conversion instruction (cvt for e2m1x2 is sm_100+). On the GPU each block's
  dot product is one inline-PTX sequence per 8-byte word: byte-permute (PRMT) lookups turn 4 codes
  at a time into int8 (12 + 2*value for non-negative codes from one table, 12 - 2*|value| for
  negative codes from a second table on the sign-flipped codes; PRMT's sign-replicate mode zeroes
  the other table's byte) and dp4a accumulates them against the int8 vector, starting from
  -12 * sum(2b) to cancel the offset. 16 products of 2a * 2b sum exactly in int32. The vector's
  words are decoded the same way once a step and shared by the step's 16 rows.
- Scales: e4m3 -> float32 (native cvt from sm_89), one per 16 values; the exact block sum times
  sfa * sfb / 4 accumulates in a [16, 64] float32 tile (no cross-thread reduction inside the k
  loop), summed over k at the end and rounded once to float16.
- Under the interpreter (no PTX) the same block sums come from integer arithmetic on the nibbles.
- Scale layouts: ``run`` reads sfa/sfb, ``run_permuted`` reads the block-scaled copies; both are the
  same kernel with a scale address of the form row_part(i) + column_part(j) + batch part.
- Work split, every shape: a grid of (P, l) programs of 4 warps, P = round(4 * SMs / l), program p
  taking rows [p m / P, (p + 1) m / P) of its batch: ~4 programs an SM in all, equal in rows to
  within one, so no SM waits on a last partial wave. 7168x16384x1: 528 programs of 13-14 rows;
  4096x7168x8: 66 x 8 programs of 62-63 rows; 7168x2048x4: 132 x 4 programs of 54-55 rows.
- SASS (sm_90, Triton 3.7): the k loop is ~3.5 instructions per FP4 value (1.4 of them the A-side
  PRMT/dp4a; the vector decode, repeated by each of the 4 warps, and the scales most of the rest),
  126 registers: 4 programs an SM. 32 x 64 steps without the prefetch cost 2.8, 64 x 64 2.5 but
  232 registers.
"""

import os

import torch
import triton
import triton.language as tl

_BLOCK_M = 16  # rows a step
_BLOCK_K = 64  # scale blocks (16 values, one 8-byte word) a row a step

# One scale block (16 codes, $1) against the int8 vector ($2: values 0-7, $3: 8-15), starting
# from $4 = -12 * sum(2b). Tables: byte c of tp = 12 + 2 * e2m1(c), of tn = 12 - 2 * e2m1(c), c < 8.
_BLOCK_DOT_PTX = tl.constexpr(
    """
{
.reg .b32 x0, x1, v0, v1, v2, v3, n0, n1, h, t, acc;
mov.b64 {x0, x1}, $1;
mov.b64 {v0, v1}, $2;
mov.b64 {v2, v3}, $3;
xor.b32 n0, x0, 0x88888888;
xor.b32 n1, x1, 0x88888888;
prmt.b32 t, $5, $6, x0;
dp4a.s32.s32 acc, t, v0, $4;
prmt.b32 t, $7, $8, n0;
dp4a.s32.s32 acc, t, v0, acc;
shr.u32 h, x0, 16;
prmt.b32 t, $5, $6, h;
dp4a.s32.s32 acc, t, v1, acc;
shr.u32 h, n0, 16;
prmt.b32 t, $7, $8, h;
dp4a.s32.s32 acc, t, v1, acc;
prmt.b32 t, $5, $6, x1;
dp4a.s32.s32 acc, t, v2, acc;
prmt.b32 t, $7, $8, n1;
dp4a.s32.s32 acc, t, v2, acc;
shr.u32 h, x1, 16;
prmt.b32 t, $5, $6, h;
dp4a.s32.s32 acc, t, v3, acc;
shr.u32 h, n1, 16;
prmt.b32 t, $7, $8, h;
dp4a.s32.s32 $0, t, v3, acc;
}
"""
)

# The vector's 16 codes ($3) -> int8 2 * value, codes 0-7 in $0 and 8-15 in $1, and $2 = -12 * their
# sum. The tables give 12 + 2 * value; (w | 0x80) - 12 then ^ 0x80 per byte makes that the signed
# byte 2 * value without borrows between bytes.
_PACK_VECTOR_PTX = tl.constexpr(
    """
{
.reg .b32 x0, x1, n0, n1, h, p, q, w0, w1, w2, w3, s, ones;
mov.b32 ones, 0x01010101;
mov.b64 {x0, x1}, $3;
xor.b32 n0, x0, 0x88888888;
xor.b32 n1, x1, 0x88888888;
prmt.b32 p, $4, $5, x0;
prmt.b32 q, $6, $7, n0;
or.b32 w0, p, q;
shr.u32 h, x0, 16;
prmt.b32 p, $4, $5, h;
shr.u32 h, n0, 16;
prmt.b32 q, $6, $7, h;
or.b32 w1, p, q;
prmt.b32 p, $4, $5, x1;
prmt.b32 q, $6, $7, n1;
or.b32 w2, p, q;
shr.u32 h, x1, 16;
prmt.b32 p, $4, $5, h;
shr.u32 h, n1, 16;
prmt.b32 q, $6, $7, h;
or.b32 w3, p, q;
dp4a.u32.u32 s, w0, ones, 0;
dp4a.u32.u32 s, w1, ones, s;
dp4a.u32.u32 s, w2, ones, s;
dp4a.u32.u32 s, w3, ones, s;
sub.s32 s, s, 192;
mul.lo.s32 $2, s, -12;
or.b32 w0, w0, 0x80808080;
sub.u32 w0, w0, 0x0C0C0C0C;
xor.b32 w0, w0, 0x80808080;
or.b32 w1, w1, 0x80808080;
sub.u32 w1, w1, 0x0C0C0C0C;
xor.b32 w1, w1, 0x80808080;
or.b32 w2, w2, 0x80808080;
sub.u32 w2, w2, 0x0C0C0C0C;
xor.b32 w2, w2, 0x80808080;
or.b32 w3, w3, 0x80808080;
sub.u32 w3, w3, 0x0C0C0C0C;
xor.b32 w3, w3, 0x80808080;
mov.b64 $0, {w0, w1};
mov.b64 $1, {w2, w3};
}
"""
)


@triton.jit
def _permute_tables(blocks, m):
    """PRMT tables, byte c: 12 + 2 * e2m1(c) (positive pair), 12 - 2 * e2m1(c) (negative pair).
    The low words go in as registers, the high ones as immediates. ptxas copies a constant (or
    uniform) low word into a fresh register before every PRMT that reads it (128 extra moves per
    256 values); adding (blocks * m) >> 62, always 0 but per thread, keeps each in one register."""
    zero = ((blocks.to(tl.int64) * m) >> 62).to(tl.int32)
    return (
        zero + 0x0F0E0D0C,
        tl.full(blocks.shape, 0x18141210, tl.int32),
        zero + 0x090A0B0C,
        tl.full(blocks.shape, 0x00040608, tl.int32),
    )


@triton.jit
def _fp4_doubled(codes):
    """FP4 codes (0-15) -> 2 * value, an integer in [-12, 12]."""
    exponent = (codes >> 1) & 3
    mantissa = codes & 1
    magnitude = tl.where(exponent == 0, mantissa, ((2 + mantissa) << exponent) >> 1)
    return tl.where((codes & 8) != 0, -magnitude, magnitude)


@triton.jit
def _pack_vector(words):
    """16 codes a word -> int8 bytes of 2 * value (codes 0-7 in ``low``, 8-15 in ``high``) and
    -12 * their sum, which cancels the +12 offset of the PTX tables."""
    low = tl.zeros_like(words)
    high = tl.zeros_like(words)
    total = tl.zeros_like(words)
    for i in tl.static_range(8):
        value = _fp4_doubled((words >> (4 * i)) & 15)
        low |= (value & 255) << (8 * i)
        total += value
    for i in tl.static_range(8):
        value = _fp4_doubled((words >> (4 * i + 32)) & 15)
        high |= (value & 255) << (8 * i)
        total += value
    return low, high, (-12 * total).to(tl.int32)


@triton.jit
def _signed_byte(packed, i: tl.constexpr):
    byte = (packed >> (8 * i)) & 255
    return tl.where(byte >= 128, byte - 256, byte)


@triton.jit
def _block_dot_integer(words, low, high):
    """sum of 2a * 2b over one block from nibbles: the interpreter's path, same value as the PTX."""
    total = tl.zeros(words.shape, dtype=tl.int64)
    for i in tl.static_range(8):
        total += _fp4_doubled((words >> (4 * i)) & 15) * _signed_byte(low, i)
    for i in tl.static_range(8):
        total += _fp4_doubled((words >> (4 * i + 32)) & 15) * _signed_byte(high, i)
    return total.to(tl.int32)


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


@triton.jit
def _step_products(words, sfa, vector, sfb, blocks, m, USE_PTX: tl.constexpr):
    """Per row and block: the exact block sum of 2a * 2b, times sfa * sfb / 4, in float32."""
    if USE_PTX:
        positive_low, positive_high, negative_low, negative_high = _permute_tables(blocks, m)
        low, high, start_sum = tl.inline_asm_elementwise(
            _PACK_VECTOR_PTX,
            "=l,=l,=r,l,r,r,r,r",
            [vector, positive_low, positive_high, negative_low, negative_high],
            dtype=(tl.int64, tl.int64, tl.int32),
            is_pure=True,
            pack=1,
        )
        dots = tl.inline_asm_elementwise(
            _BLOCK_DOT_PTX,
            "=r,l,l,l,r,r,r,r,r",
            [
                words,
                tl.broadcast_to(low[None, :], words.shape),
                tl.broadcast_to(high[None, :], words.shape),
                tl.broadcast_to(start_sum[None, :], words.shape),
                tl.broadcast_to(positive_low[None, :], words.shape),
                tl.broadcast_to(positive_high[None, :], words.shape),
                tl.broadcast_to(negative_low[None, :], words.shape),
                tl.broadcast_to(negative_high[None, :], words.shape),
            ],
            dtype=tl.int32,
            is_pure=True,
            pack=1,
        )
    else:
        low, high, start_sum = _pack_vector(vector)
        dots = _block_dot_integer(words, low[None, :], high[None, :])
    sfa = sfa.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    # The block sums count 2a * 2b: a quarter of the products.
    sfb = sfb.to(tl.float8e4nv, bitcast=True).to(tl.float32) * 0.25
    return dots.to(tl.float32) * sfa * sfb[None, :]


# Specialized (by Triton's divisibility-by-16 and ==1 rules) only where it pays: A's and b's strides
# (16-byte vector loads) and the scales' column stride (adjacent bytes); the rest would only
# multiply compiled variants across shapes.
_GENERIC = ["m", "k_blocks", "sfa_r32", "sfa_r4", "sfa_r128", "sfa_c_rest", "sfa_batch"]
_GENERIC += ["sfb_c_rest", "sfb_batch", "c_row", "c_batch"]


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
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
    USE_PTX: tl.constexpr,
):
    """Program (p, l) takes rows [p m / P, (p + 1) m / P) of batch l, BLOCK_M at a time. a/b
    strides in 8-byte words, scale strides in bytes, c strides in elements. A scale's byte:
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
            acc += _step_products(words, sfa, vector, sfb, steps + start, m, USE_PTX)
            loaded = upcoming
        c = tl.sum(acc, axis=1)
        tl.store(c_ptr + batch * c_batch + rows * c_row, c.to(tl.float16), mask=row_ok)


_MULTIPROCESSORS = {}


def _programs_per_batch(m, l, device):
    """About 4 programs of 4 warps an SM in all (so ~16 warps an SM stream A), each batch split
    evenly: rows per program differ by at most one."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        if index not in _MULTIPROCESSORS:
            _MULTIPROCESSORS[index] = torch.cuda.get_device_properties(index).multi_processor_count
        multiprocessors = _MULTIPROCESSORS[index]
    else:
        multiprocessors = 1  # the interpreter: fewest programs
    return max(1, min(triton.cdiv(m, _BLOCK_M), round(4 * multiprocessors / l)))


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


def _launch(a, b, c, sfa, sfb, sfa_strides, sfb_strides):
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
    grid = (_programs_per_batch(m, l, a.device), l)
    _nvfp4_gemv_kernel[grid](
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
        BLOCK_M=_BLOCK_M,
        BLOCK_K=min(_BLOCK_K, triton.next_power_of_2(k_blocks)),
        USE_PTX=os.environ.get("TRITON_INTERPRET", "0") != "1",
        num_warps=4,
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
