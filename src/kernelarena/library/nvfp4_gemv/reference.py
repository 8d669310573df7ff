import torch

# FP4 e2m1 code -> value: codes 0-7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6; codes 8-15 their negatives.
_E2M1_MAGNITUDES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
_E2M1_VALUES = _E2M1_MAGNITUDES + [-value for value in _E2M1_MAGNITUDES]
_BLOCK = 16  # values per scale
_VALUES_PER_STEP = 1 << 22  # values decoded at once, to bound the float32 temporaries
_TABLES = {}  # device -> the table there: made once, so later calls can be captured in a CUDA graph


def _decode_fp4(packed):
    """[rows, k/2, l] packed FP4 -> [rows, k, l] float32; element 2j is the low nibble of byte j."""
    raw = packed.view(torch.uint8)
    table = _TABLES.get(raw.device)
    if table is None:
        table = _TABLES[raw.device] = torch.tensor(
            _E2M1_VALUES, dtype=torch.float32, device=raw.device
        )
    codes = torch.stack((raw & 0xF, raw >> 4), dim=2).long()  # [rows, k/2, 2, l]
    return table[codes].flatten(1, 2)


def _expand_scales(scales):
    """[rows, k/16, l] e4m3 -> [rows, k, l] float32, one scale repeated over its 16 values."""
    return scales.to(torch.float32).repeat_interleave(_BLOCK, dim=1)


def run(a, b, sfa, sfb, sfa_permuted, sfb_permuted):
    """c[i, 0, l] = sum_k a[i, k, l] sfa[i, k/16, l] b[0, k, l] sfb[0, k/16, l] in float32, rounded
    once to float16. Only row 0 of b and sfb is used; the permuted scales repeat sfa and sfb."""
    m, k_packed, l = a.shape
    vector = _decode_fp4(b[:1]) * _expand_scales(sfb[:1])  # [1, k, l]
    c = torch.empty(m, 1, l, dtype=torch.float32, device=a.device)
    step = max(1, _VALUES_PER_STEP // max(1, 2 * k_packed * l))  # rows a step
    for start in range(0, m, step):
        rows = slice(start, min(m, start + step))
        matrix = _decode_fp4(a[rows]) * _expand_scales(sfa[rows])  # [rows, k, l]
        # Elementwise products summed by torch's float32 reduction (no TF32 matmul path).
        c[rows, 0, :] = (matrix * vector).sum(dim=1)
    return c.to(torch.float16)


# -- inputs ---------------------------------------------------------------------------------------

_GPUMODE_SCALE_CODES = [0x00, 0x38, 0x40]  # e4m3 bytes of 0, 1 and 2
_WIDE_SCALE_MAGNITUDES = 0x48  # e4m3 codes 0x00-0x47: 0, subnormals from 2^-9, normals up to 3.75


def _draw_fp4_bytes(generator_name, shape, generator, device):
    if generator_name == "gpumode":
        # GPU MODE draws bytes 0-3: low nibble 0, 0.5, 1 or 1.5, high nibble 0.
        return torch.randint(0, 4, shape, generator=generator, device=device, dtype=torch.uint8)
    return torch.randint(0, 256, shape, generator=generator, device=device, dtype=torch.uint8)


def _draw_scale_bytes(generator_name, shape, generator, device):
    if generator_name == "gpumode":
        codes = torch.tensor(_GPUMODE_SCALE_CODES, dtype=torch.uint8, device=device)
        return codes[torch.randint(0, 3, shape, generator=generator, device=device)]
    # Every finite magnitude up to 3.75 (wide enough that sums of 16K products stay far below the
    # float16 limit of 65504), either sign. No NaN (0x7F, 0xFF).
    magnitude = torch.randint(0, _WIDE_SCALE_MAGNITUDES, shape, generator=generator, device=device)
    sign = torch.randint(0, 2, shape, generator=generator, device=device) * 0x80
    return (magnitude + sign).to(torch.uint8)


def permute_scales(scales, padding):
    """[rows, k/16, l] scales (l outermost in memory) -> the [32, 4, ceil(rows/128), 4, k/64, l]
    block-scaled layout, rows past ``rows`` taken from ``padding`` ([l, ceil(rows/128)*128, k/16])."""
    rows, k_scales, l = scales.shape
    atoms = -(-rows // 128)
    padded = padding.view(torch.uint8).clone()
    padded[:, :rows, :] = scales.view(torch.uint8).permute(2, 0, 1)
    # [l, mm, mm4, mm32, kk, kk4] -> storage order [l, mm, kk, mm32, mm4, kk4]
    blocked = padded.view(l, atoms, 4, 32, k_scales // 4, 4).permute(0, 1, 4, 3, 2, 5).contiguous()
    return blocked.view(scales.dtype).permute(3, 4, 1, 5, 2, 0)


def make_inputs(axes, inputs, params, generator, device):
    """All six inputs in GPU MODE's layout. Params: ``generator`` is "gpumode" (their values:
    bytes 0-3, scales 0, 1 or 2) or "wide" (all 16 FP4 codes; scales over e4m3 magnitudes from 0
    through the subnormals to 3.75, either sign); ``padded_rows`` lays rows of a and sfa out wider
    than k/2 and k/16 bytes. The permuted scales' padding rows hold values of the same generator."""
    m, k, l, n = axes["m"], axes["k"], axes["l"], axes["n"]
    name = params.get("generator", "gpumode")
    if name not in ("gpumode", "wide"):
        raise ValueError(f"nvfp4_gemv: unknown generator {name!r} (gpumode or wide)")
    row_pad = 64 if params.get("padded_rows") else 0

    def fp4(rows, pad):
        raw = _draw_fp4_bytes(name, (l, rows, k // 2 + pad), generator, device)
        return raw[:, :, : k // 2].view(torch.float4_e2m1fn_x2).permute(1, 2, 0)

    def scales(rows, pad):
        raw = _draw_scale_bytes(name, (l, rows, k // 16 + pad), generator, device)
        plain = raw[:, :, : k // 16].view(torch.float8_e4m3fn).permute(1, 2, 0)
        padding = _draw_scale_bytes(name, (l, -(-rows // 128) * 128, k // 16), generator, device)
        return plain, permute_scales(plain, padding)

    inputs["a"] = fp4(m, row_pad)
    inputs["b"] = fp4(n, 0)
    inputs["sfa"], inputs["sfa_permuted"] = scales(m, row_pad // 8)
    inputs["sfb"], inputs["sfb_permuted"] = scales(n, 0)
    return inputs
