"""Device helpers of the Triton NVFP4 GEMV (nvfp4_gemv.py): the FP4 decode, on the GPU as inline
PTX (byte-permute lookups and dp4a), under the interpreter as integer arithmetic on the nibbles,
both giving the same exact block sums.

Words: an 8-byte word of A or b holds the 16 FP4 codes of one scale block, value i in nibble i.
"""

import triton
import triton.language as tl

# One scale block (16 codes, $1) against the int8 vector ($2: values 0-7, $3: 8-15), starting
# from $4 = -12 * sum(2b). Tables: byte c of tp = 12 + 2 * e2m1(c), of tn = 12 - 2 * e2m1(c), c < 8.
BLOCK_DOT_PTX = tl.constexpr(
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
PACK_VECTOR_PTX = tl.constexpr(
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
def permute_tables(blocks, m):
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
def fp4_doubled(codes):
    """FP4 codes (0-15) -> 2 * value, an integer in [-12, 12]."""
    exponent = (codes >> 1) & 3
    mantissa = codes & 1
    magnitude = tl.where(exponent == 0, mantissa, ((2 + mantissa) << exponent) >> 1)
    return tl.where((codes & 8) != 0, -magnitude, magnitude)


@triton.jit
def pack_vector(words):
    """16 codes a word -> int8 bytes of 2 * value (codes 0-7 in ``low``, 8-15 in ``high``) and
    -12 * their sum, which cancels the +12 offset of the PTX tables."""
    low = tl.zeros_like(words)
    high = tl.zeros_like(words)
    total = tl.zeros_like(words)
    for i in tl.static_range(8):
        value = fp4_doubled((words >> (4 * i)) & 15)
        low |= (value & 255) << (8 * i)
        total += value
    for i in tl.static_range(8):
        value = fp4_doubled((words >> (4 * i + 32)) & 15)
        high |= (value & 255) << (8 * i)
        total += value
    return low, high, (-12 * total).to(tl.int32)


@triton.jit
def signed_byte(packed, i: tl.constexpr):
    byte = (packed >> (8 * i)) & 255
    return tl.where(byte >= 128, byte - 256, byte)


@triton.jit
def block_dot_integer(words, low, high):
    """sum of 2a * 2b over one block from nibbles: the interpreter's path, same value as the PTX."""
    total = tl.zeros(words.shape, dtype=tl.int64)
    for i in tl.static_range(8):
        total += fp4_doubled((words >> (4 * i)) & 15) * signed_byte(low, i)
    for i in tl.static_range(8):
        total += fp4_doubled((words >> (4 * i + 32)) & 15) * signed_byte(high, i)
    return total.to(tl.int32)


@triton.jit
def vector_operands(vector, sfb, blocks, m, USE_PTX: tl.constexpr):
    """The vector's words and scale bytes -> the operands of ``block_dots``: int8 2b (codes 0-7 in
    ``low``, 8-15 in ``high``), the dot's start value -12 * sum(2b), sfb / 4 in float32 (the block
    sums count 2a * 2b: four times the products), and the four PRMT table words."""
    positive_low, positive_high, negative_low, negative_high = permute_tables(blocks, m)
    if USE_PTX:
        low, high, start = tl.inline_asm_elementwise(
            PACK_VECTOR_PTX,
            "=l,=l,=r,l,r,r,r,r",
            [vector, positive_low, positive_high, negative_low, negative_high],
            dtype=(tl.int64, tl.int64, tl.int32),
            is_pure=True,
            pack=1,
        )
    else:
        low, high, start = pack_vector(vector)
    scale = sfb.to(tl.float8e4nv, bitcast=True).to(tl.float32) * 0.25
    return low, high, start, scale, positive_low, positive_high, negative_low, negative_high


@triton.jit
def block_products(
    words,
    sfa,
    low,
    high,
    start,
    scale,
    positive_low,
    positive_high,
    negative_low,
    negative_high,
    USE_PTX: tl.constexpr,
):
    """Per row and block of A ([rows, blocks] words and scale bytes) against the vector operands
    ([blocks]): the exact block sum of 2a * 2b, times sfa * sfb / 4, in float32."""
    if USE_PTX:
        dots = tl.inline_asm_elementwise(
            BLOCK_DOT_PTX,
            "=r,l,l,l,r,r,r,r,r",
            [
                words,
                tl.broadcast_to(low[None, :], words.shape),
                tl.broadcast_to(high[None, :], words.shape),
                tl.broadcast_to(start[None, :], words.shape),
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
        dots = block_dot_integer(words, low[None, :], high[None, :])
    sfa = sfa.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    return dots.to(tl.float32) * sfa * scale[None, :]
