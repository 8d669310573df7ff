"""nvfp4_gemv: the reference against a float64 decode from the bit definitions, the inputs' layouts,
the PTX decode sequences (emulated), Triton under the interpreter, CUDA compiled (and its host-side
variant list); GPU runs (marked ``gpu``) of every solution on every workload of the operator, of
every compiled CUDA variant explicitly, and of the CUDA launch choice (remembered, deterministic,
falling back where the ring variants do not apply)."""

from __future__ import annotations

import random

import pytest
import torch

from kernelarena.library.nvfp4_gemv import OPERATOR
from kernelarena.testing import assert_close, build, library_definition, reference

NAME = "nvfp4_gemv"
INPUTS = ("a", "b", "sfa", "sfb", "sfa_permuted", "sfb_permuted")
# GPU MODE's tolerance for the float16 output. Every solution sums exact products in float32 and
# rounds once, like the reference: they differ by float32 summation order (~1e-6 relative), far
# below one float16 step (2^-10 relative, inside rtol 1e-3).
TOLERANCE = {"c": {"atol": 1e-3, "rtol": 1e-3}}
# The reference against exact float64 sums: its float16 rounding (half a step, 2^-11 relative)
# plus float32 summation order.
REFERENCE_TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}
SOLUTIONS = ("triton", "triton_permuted", "cuda", "cuda_permuted")


# -- independent decode, from the format definitions -----------------------------------------------


def e2m1_value(code: int) -> float:
    """FP4 e2m1: sign bit 3, exponent bits 2-1 (bias 1), mantissa bit 0; exponent 0 is subnormal."""
    sign = -1.0 if code & 8 else 1.0
    exponent, mantissa = (code >> 1) & 3, code & 1
    if exponent == 0:
        return sign * mantissa * 0.5
    return sign * 2.0 ** (exponent - 1) * (1 + mantissa / 2)


def e4m3_value(code: int) -> float:
    """FP8 e4m3fn: sign bit 7, exponent bits 6-3 (bias 7), mantissa bits 2-0; S.1111.111 is NaN."""
    sign = -1.0 if code & 0x80 else 1.0
    exponent, mantissa = (code >> 3) & 15, code & 7
    if exponent == 15 and mantissa == 7:
        return float("nan")
    if exponent == 0:
        return sign * mantissa / 8 * 2.0**-6
    return sign * 2.0 ** (exponent - 7) * (1 + mantissa / 8)


def exact_gemv(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """c in float64 from the raw bytes, element 2j the low nibble of byte j."""
    fp4 = torch.tensor([e2m1_value(c) for c in range(16)], dtype=torch.float64)
    fp8 = torch.tensor([e4m3_value(c) for c in range(256)], dtype=torch.float64)

    def values(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
        raw = packed.view(torch.uint8).cpu().long()  # [rows, k/2, l]
        pairs = torch.stack((fp4[raw & 15], fp4[raw >> 4]), dim=2).flatten(1, 2)  # [rows, k, l]
        factors = fp8[scales.view(torch.uint8).cpu().long()].repeat_interleave(16, dim=1)
        return pairs * factors

    matrix = values(inputs["a"], inputs["sfa"])
    vector = values(inputs["b"][:1], inputs["sfb"][:1])[0]
    return torch.einsum("mkl,kl->ml", matrix, vector).unsqueeze(1)


def make(
    m: int,
    k: int,
    batches: int,
    generator: str,
    *,
    n: int = 128,
    seed: int = 0,
    device: str = "cpu",
    **params,
) -> dict[str, torch.Tensor]:
    axes = library_definition(NAME).resolve_axes({"m": m, "k": k, "l": batches, "n": n})
    rng = torch.Generator(device=device).manual_seed(seed)
    ref = reference(NAME)
    return ref["make_inputs"](
        axes, {}, {"generator": generator, **params}, rng, torch.device(device)
    )


def poisoned_output(m: int, batches: int, device: str, gpumode_layout: bool = True) -> torch.Tensor:
    """c filled with NaN; GPU MODE's layout ([l, m, 1] storage) or a contiguous [m, 1, l]."""
    if gpumode_layout:
        return torch.full(
            (batches, m, 1), float("nan"), dtype=torch.float16, device=device
        ).permute(1, 2, 0)
    return torch.full((m, 1, batches), float("nan"), dtype=torch.float16, device=device)


def snapshot(inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: inputs[name].view(torch.uint8).clone() for name in INPUTS}


def assert_unchanged(inputs: dict[str, torch.Tensor], before: dict[str, torch.Tensor]) -> None:
    for name in INPUTS:
        assert torch.equal(inputs[name].view(torch.uint8), before[name]), f"{name} was modified"


# -- the reference ---------------------------------------------------------------------------------


def test_reference_decodes_every_code_like_the_definitions():
    """Row r holds FP4 code r in all 64 values, the vector is 1.0, sfa takes every finite e4m3
    code in turn: c[r] = 64 * e2m1(r) * e4m3(scale), exact in float32, rounded once."""
    run = reference(NAME)["run"]
    codes = torch.arange(16, dtype=torch.uint8)
    a = (codes | (codes << 4)).view(16, 1, 1).expand(16, 32, 1).contiguous()  # k = 64
    b = torch.full((1, 32, 1), 0x22, dtype=torch.uint8)  # e2m1 code 2 is 1.0
    sfb = torch.full((1, 4, 1), 0x38, dtype=torch.uint8).view(torch.float8_e4m3fn)  # 1.0
    fp4 = torch.float4_e2m1fn_x2
    for scale in [code for code in range(256) if code not in (0x7F, 0xFF)]:
        sfa = torch.full((16, 4, 1), scale, dtype=torch.uint8).view(torch.float8_e4m3fn)
        c = run(a.view(fp4), b.view(fp4), sfa, sfb, None, None)
        expected = torch.tensor([64 * e2m1_value(r) * e4m3_value(scale) for r in range(16)])
        assert c.dtype == torch.float16 and c.shape == (16, 1, 1)
        assert torch.equal(c.flatten(), expected.to(torch.float16)), hex(scale)


@pytest.mark.parametrize("generator", ["gpumode", "wide"])
@pytest.mark.parametrize(
    ("m", "k", "batches", "n"), [(128, 256, 1, 128), (77, 192, 3, 1), (5, 2048, 2, 128)]
)
def test_reference_matches_float64(generator, m, k, batches, n):
    inputs = make(m, k, batches, generator, n=n, seed=m + k)
    got = reference(NAME)["run"](*(inputs[name] for name in INPUTS))
    assert got.dtype == torch.float16 and got.shape == (m, 1, batches)
    assert_close(got, exact_gemv(inputs), **REFERENCE_TOLERANCE, name="c")


def test_reference_empty_rows():
    inputs = make(0, 128, 2, "wide")
    assert reference(NAME)["run"](*(inputs[name] for name in INPUTS)).shape == (0, 1, 2)


# -- inputs ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("generator", ["gpumode", "wide"])
def test_inputs_follow_gpumode_layout(generator):
    m, k, batches, n = 200, 320, 3, 128
    inputs = make(m, k, batches, generator, n=n)
    # [l, rows, cols] storage viewed as [rows, cols, l]: l outermost in memory.
    assert inputs["a"].shape == (m, k // 2, batches) and inputs["a"].stride() == (
        k // 2,
        1,
        m * k // 2,
    )
    assert inputs["b"].shape == (n, k // 2, batches) and inputs["b"].stride() == (
        k // 2,
        1,
        n * k // 2,
    )
    assert inputs["sfa"].shape == (m, k // 16, batches) and inputs["sfa"].stride() == (
        k // 16,
        1,
        m * k // 16,
    )
    assert (
        inputs["a"].dtype == torch.float4_e2m1fn_x2 and inputs["sfa"].dtype == torch.float8_e4m3fn
    )
    for name, rows in (("sfa", m), ("sfb", n)):
        permuted = inputs[f"{name}_permuted"]
        atoms, k_atoms = -(-rows // 128), k // 64
        assert permuted.shape == (32, 4, atoms, 4, k_atoms, batches)
        # Atoms of 512 bytes ordered by (l, row block, column block); byte 16 mm32 + 4 mm4 + kk4.
        assert permuted.stride() == (16, 4, 512 * k_atoms, 1, 512, 512 * k_atoms * atoms)
        plain = inputs[name].view(torch.uint8)
        flat = (
            permuted.view(torch.uint8)
            .permute(5, 2, 4, 0, 1, 3)
            .reshape(batches, atoms * 128 * k_atoms * 4)
        )
        i, j, batch = torch.meshgrid(
            torch.arange(rows), torch.arange(k // 16), torch.arange(batches), indexing="ij"
        )
        offset = (
            (i // 128) * 512 * k_atoms
            + (j // 4) * 512
            + (i % 32) * 16
            + (i % 128 // 32) * 4
            + j % 4
        )
        assert torch.equal(flat[batch, offset], plain[i, j, batch]), name


def test_gpumode_values_are_narrow():
    inputs = make(256, 512, 2, "gpumode")
    for name in ("a", "b"):
        assert int(inputs[name].view(torch.uint8).max()) <= 3  # bytes 0-3
    for name in ("sfa", "sfb", "sfa_permuted", "sfb_permuted"):
        values = set(inputs[name].float().unique().tolist())
        assert values <= {0.0, 1.0, 2.0}, name


def test_wide_values_cover_all_codes():
    inputs = make(256, 512, 2, "wide")
    raw = inputs["a"].view(torch.uint8)
    assert set((raw & 15).unique().tolist()) == set(range(16))
    assert set((raw >> 4).unique().tolist()) == set(range(16))
    scales = inputs["sfa"].view(torch.uint8)
    magnitudes = scales & 0x7F
    assert (
        not torch.isnan(inputs["sfa"].float()).any()
        and not torch.isnan(inputs["sfb"].float()).any()
    )
    assert bool((magnitudes < 8).any()) and bool((magnitudes > 0x40).any())  # subnormal and > 2
    assert bool((scales >= 0x80).any())  # negative scales too


def test_inputs_are_seeded_and_padded_rows_are_wider():
    first, second = make(33, 448, 2, "wide", seed=3), make(33, 448, 2, "wide", seed=3)
    for name in INPUTS:
        assert torch.equal(first[name].view(torch.uint8), second[name].view(torch.uint8))
    padded = make(33, 448, 2, "wide", padded_rows=True)
    assert padded["a"].stride(0) > 448 // 2 and padded["sfa"].stride(0) > 448 // 16


# -- the PTX decode, emulated ----------------------------------------------------------------------

_MASK = 0xFFFFFFFF


def _prmt(low: int, high: int, selector: int) -> int:
    """PTX prmt.b32 default mode: nibble n picks byte (n & 7) of {high, low}; bit 3 replicates its sign."""
    pool, out = (high << 32) | low, 0
    for n in range(4):
        pick = (selector >> (4 * n)) & 15
        byte = (pool >> (8 * (pick & 7))) & 0xFF
        if pick & 8:
            byte = 0xFF if byte & 0x80 else 0
        out |= byte << (8 * n)
    return out


def _signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def _dp4a(a: int, b: int, c: int, signed: bool) -> int:
    byte = (lambda v: _signed(v, 8)) if signed else (lambda v: v & 0xFF)
    return _signed(c, 32) + sum(byte(a >> (8 * n)) * byte(b >> (8 * n)) for n in range(4))


def _execute(op: str, v: list[int]) -> int:
    if op == "prmt.b32":
        return _prmt(v[0], v[1], v[2])
    if op.startswith("dp4a"):
        return _dp4a(v[0], v[1], v[2], signed=op == "dp4a.s32.s32")
    if op in ("sub.s32", "mul.lo.s32"):
        x, y = _signed(v[0], 32), _signed(v[1], 32)
        return x - y if op == "sub.s32" else x * y
    binary = {
        "xor.b32": lambda x, y: x ^ y,
        "or.b32": lambda x, y: x | y,
        "shr.u32": lambda x, y: x >> y,
        "sub.u32": lambda x, y: x - y,
    }
    return v[0] if op == "mov.b32" else binary[op](v[0], v[1])


def run_ptx(text: str, registers: dict[str, int]) -> dict[str, int]:
    """Executes the instructions the Triton solution's inline PTX uses (32/64-bit integers)."""
    regs = dict(registers)

    def value(token: str) -> int:
        token = token.strip()
        return regs[token] if token in regs else int(token, 0) & _MASK

    for line in text.strip().splitlines():
        line = line.strip().rstrip(";")
        if not line or line in "{}" or line.startswith(".reg"):
            continue
        op, rest = line.split(None, 1)
        if op == "mov.b64" and rest.startswith("{"):
            names, source = rest[1 : rest.index("}")].split(","), rest[rest.index("}") + 2 :]
            regs[names[0].strip()], regs[names[1].strip()] = (
                value(source) & _MASK,
                value(source) >> 32,
            )
            continue
        if op == "mov.b64":
            target, pair = rest.split(",", 1)
            low, high = pair.strip().strip("{}").split(",")
            regs[target.strip()] = value(low) | (value(high) << 32)
            continue
        target, *args = (a.strip() for a in rest.split(","))
        result = _execute(op, [value(a) for a in args])
        regs[target] = result & _MASK
    return regs


def test_triton_ptx_decode_emulated():
    """Both inline-PTX sequences of the Triton solution, instruction by instruction, on random and
    single-code words: the int8 vector, its start value, and the exact block sum of 2a * 2b."""
    from importlib import util

    spec = util.spec_from_file_location(
        "nvfp4_triton_details", OPERATOR.folder / "triton" / "nvfp4_gemv_details.py"
    )
    module = util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tables = (0x0F0E0D0C, 0x18141210, 0x090A0B0C, 0x00040608)
    doubled = [round(2 * e2m1_value(c)) for c in range(16)]
    rng = random.Random(0)
    words = [int(f"{c:x}" * 16, 16) for c in range(16)] + [rng.getrandbits(64) for _ in range(400)]
    for index, a in enumerate(words):
        b = words[(index * 7 + 3) % len(words)]
        packed = run_ptx(
            module.PACK_VECTOR_PTX.value, {"$3": b, **dict(zip(("$4", "$5", "$6", "$7"), tables))}
        )
        b_codes = [(b >> (4 * i)) & 15 for i in range(16)]
        b_bytes = [doubled[c] & 0xFF for c in b_codes]
        assert packed["$0"] == sum(x << (8 * i) for i, x in enumerate(b_bytes[:8]))
        assert packed["$1"] == sum(x << (8 * i) for i, x in enumerate(b_bytes[8:]))
        assert _signed(packed["$2"], 32) == -12 * sum(doubled[c] for c in b_codes)
        operands = {"$1": a, "$2": packed["$0"], "$3": packed["$1"], "$4": packed["$2"]}
        dot = run_ptx(
            module.BLOCK_DOT_PTX.value, {**operands, **dict(zip(("$5", "$6", "$7", "$8"), tables))}
        )
        a_codes = [(a >> (4 * i)) & 15 for i in range(16)]
        assert _signed(dot["$0"], 32) == sum(
            doubled[x] * doubled[y] for x, y in zip(a_codes, b_codes)
        )


# -- Triton under the interpreter (or on the GPU), small shapes ------------------------------------


@pytest.mark.parametrize("suffix", ["triton", "triton_permuted"])
@pytest.mark.parametrize("generator", ["gpumode", "wide"])
@pytest.mark.parametrize(
    ("m", "k", "batches", "n", "params"),
    [
        (128, 256, 1, 128, {}),
        (1, 64, 1, 128, {}),
        (77, 192, 3, 1, {}),
        (33, 448, 1, 128, {"padded_rows": True}),  # 3 programs of 11 rows in the interpreter
    ],
)
def test_triton_small(device, suffix, generator, m, k, batches, n, params):
    solution = build(NAME, suffix, str(device))
    inputs = make(m, k, batches, generator, n=n, seed=k, device=str(device), **params)
    before = snapshot(inputs)
    expected = reference(NAME)["run"](*(inputs[name] for name in INPUTS))
    c = poisoned_output(m, batches, str(device), gpumode_layout=generator == "gpumode")
    solution(*(inputs[name] for name in INPUTS), c)
    assert_close(c, expected, **TOLERANCE["c"], name="c")
    assert_unchanged(inputs, before)


@pytest.mark.parametrize("permuted", [False, True])
@pytest.mark.parametrize(("m", "k", "batches"), [(77, 192, 3), (40, 1088, 1)])
def test_triton_every_config(device, permuted, m, k, batches):
    """Each launch config the autotuner chooses from, run explicitly (under the interpreter too:
    the row tiling, masks and program split differ between configs)."""
    runnable = build(NAME, "triton", str(device))
    module = runnable.fn.__globals__
    inputs = make(m, k, batches, "wide", seed=m + k, device=str(device))
    expected = reference(NAME)["run"](*(inputs[name] for name in INPUTS))
    for index in range(module["config_count"]()):
        c = poisoned_output(m, batches, str(device))
        module["run_config"](*(inputs[name] for name in INPUTS), c, index, permuted)
        assert_close(c, expected, **TOLERANCE["c"], name=f"c (config {index})")


def test_triton_empty_rows(device):
    inputs = make(0, 128, 2, "wide", device=str(device))
    c = poisoned_output(0, 2, str(device))
    build(NAME, "triton", str(device))(*(inputs[name] for name in INPUTS), c)
    assert c.shape == (0, 1, 2)


def test_cuda_compiles():
    """Both CUDA entry points come from one source set: one nvcc build for sm_90a, both symbols."""
    for suffix in ("cuda", "cuda_permuted"):
        assert build(NAME, suffix, "cpu").metadata["arch"] == "sm_90a"


def test_cuda_exports_its_variants():
    """The module's host-only helpers answer without a GPU: the variant list (the register kernel
    first), and no remembered choice before any call."""
    module = build(NAME, "cuda", "cpu").metadata["module"]
    count = module.variant_count()
    assert 2 <= count <= 12
    names = [str(module.variant_name(i)) for i in range(count)]
    assert names[0].startswith("registers") and all(names) and len(set(names)) == count
    kinds = [str(module.variant_kind(i)) for i in range(count)]
    assert kinds[0] == "registers" and set(kinds) == {"registers", "ring", "bulk", "rows"}
    assert module.chosen_variant(7168, 16384, 1, False) == -1


# -- every solution on every workload, on the GPU --------------------------------------------------


def _workload_cases() -> list:
    cases = []
    for spec in OPERATOR.workloads:
        axes = spec.axes
        label = f"{axes['m']}x{axes['k']}x{axes['l']}-n{axes['n']}-{spec.params.get('generator')}"
        if spec.params.get("padded_rows"):
            label += "-padded"
        cases.append(pytest.param(dict(axes), dict(spec.params), id=label))
    return cases


@pytest.mark.gpu
@pytest.mark.parametrize("suffix", SOLUTIONS)
@pytest.mark.parametrize(("axes", "params"), _workload_cases())
def test_solution_on_workload(suffix, axes, params):
    solution = build(NAME, suffix, "cuda")
    m, k, batches, n = axes["m"], axes["k"], axes["l"], axes["n"]
    shaping = {key: value for key, value in params.items() if key != "generator"}
    generator = params["generator"]
    inputs = make(m, k, batches, generator, n=n, seed=m * 7 + k, device="cuda", **shaping)
    before = snapshot(inputs)
    expected = reference(NAME)["run"](*(inputs[name] for name in INPUTS))
    for gpumode_layout in (True, False):
        c = poisoned_output(m, batches, "cuda", gpumode_layout)
        solution(*(inputs[name] for name in INPUTS), c)
        torch.cuda.synchronize()
        assert_close(c, expected, **TOLERANCE["c"], name=f"c ({suffix}, {generator})")
    assert_unchanged(inputs, before)


@pytest.mark.gpu
@pytest.mark.parametrize("suffix", SOLUTIONS)
def test_solution_rejects_a_not_contiguous_along_k(suffix):
    """A [m, k/2, l] tensor contiguous in l (not GPU MODE's layout) is refused, not misread."""
    inputs = make(64, 128, 2, "wide", device="cuda")
    raw = inputs["a"].view(torch.uint8).contiguous()  # strides (k/2 * l, l, 1)
    inputs["a"] = raw.view(torch.float4_e2m1fn_x2)
    c = poisoned_output(64, 2, "cuda")
    with pytest.raises(Exception, match="contiguous along k"):
        build(NAME, suffix, "cuda")(*(inputs[name] for name in INPUTS), c)
        torch.cuda.synchronize()


# -- every CUDA variant explicitly, on the GPU -----------------------------------------------------

# Shapes for the variants: the three work splits (k/32 chunks a row <= 32, 129-256, else), odd
# rows, several batches, b of one row, padded rows, the benchmark's k values, and rows longer than
# one sweep (k > 16384: only the register kernel applies).
VARIANT_SHAPES = [
    (1, 64, 1, 128, {}),
    (77, 192, 3, 1, {}),
    (129, 1024, 1, 128, {}),
    (45, 448, 2, 128, {"padded_rows": True}),
    (77, 768, 3, 128, {}),
    (200, 2048, 3, 128, {}),
    (333, 7168, 2, 128, {}),
    (257, 16384, 1, 128, {}),
    (9, 32832, 2, 128, {}),
]


def _cuda_module():
    return build(NAME, "cuda", "cuda").metadata["module"]


def _variant_applies(kind: str, k: int, permuted: bool, sfa: torch.Tensor) -> bool:
    """The register kernel takes every input; the whole-row kernels k <= 65536 (their decoded
    vector in shared memory); the ring kernels rows of one sweep (k <= 16384) with 4-byte aligned
    scale groups (every shape here); the bulk kernels also the plain scale layout, with each
    row's k/16 scale bytes a multiple of 16 bytes long and 16-byte aligned."""
    if kind == "registers":
        return True
    if kind == "rows":
        return k <= 65536
    if k > 16384:
        return False
    if kind == "ring":
        return True
    parts = sfa.data_ptr() | sfa.stride(0) | sfa.stride(2) | (k // 16)
    return not permuted and parts % 16 == 0


@pytest.mark.gpu
@pytest.mark.parametrize("generator", ["gpumode", "wide"])
@pytest.mark.parametrize(
    ("m", "k", "batches", "n", "params"),
    [pytest.param(*shape, id=f"{shape[0]}x{shape[1]}x{shape[2]}") for shape in VARIANT_SHAPES],
)
def test_cuda_every_variant(generator, m, k, batches, n, params):
    """run_variant runs one variant explicitly: each one that applies must match the reference
    on both scale layouts and both output layouts, and it runs exactly where it applies."""
    module = _cuda_module()
    inputs = make(m, k, batches, generator, n=n, seed=m + 3 * k, device="cuda", **params)
    before = snapshot(inputs)
    expected = reference(NAME)["run"](*(inputs[name] for name in INPUTS))
    arguments = [inputs[name] for name in INPUTS]
    for variant in range(module.variant_count()):
        for permuted in (False, True):
            for gpumode_layout in (True, False):
                c = poisoned_output(m, batches, "cuda", gpumode_layout)
                ran = module.run_variant(*arguments, c, variant, permuted)
                torch.cuda.synchronize()
                kind = str(module.variant_kind(variant))
                assert ran == _variant_applies(kind, k, permuted, inputs["sfa"]), (kind, permuted)
                if ran:
                    label = f"c (variant {variant}, permuted {permuted}, {generator})"
                    assert_close(c, expected, **TOLERANCE["c"], name=label)
                else:
                    assert torch.isnan(c.float()).all(), "a variant that does not apply wrote c"
    assert_unchanged(inputs, before)


@pytest.mark.gpu
def test_cuda_ring_variants_decline_unaligned_scale_groups():
    """Scale rows 2 bytes wider than k/16 (even, but not a multiple of 4): the ring and bulk
    variants read 4-scale groups as aligned words, so they decline; the register and whole-row
    kernels read pairs and stay correct, and the default call picks one of those."""
    m, k, batches = 96, 512, 2
    module = _cuda_module()
    inputs = make(m, k, batches, "wide", device="cuda")
    wide = torch.zeros(batches, m, k // 16 + 2, dtype=torch.uint8, device="cuda")
    wide[:, :, : k // 16] = inputs["sfa"].view(torch.uint8).permute(2, 0, 1)
    inputs["sfa"] = wide[:, :, : k // 16].view(torch.float8_e4m3fn).permute(1, 2, 0)
    assert inputs["sfa"].stride(0) % 4 == 2
    expected = reference(NAME)["run"](*(inputs[name] for name in INPUTS))
    arguments = [inputs[name] for name in INPUTS]
    pair_readers = ("registers", "rows")
    for variant in range(module.variant_count()):
        c = poisoned_output(m, batches, "cuda")
        kind = str(module.variant_kind(variant))
        assert module.run_variant(*arguments, c, variant, False) == (kind in pair_readers)
        if kind in pair_readers:
            torch.cuda.synchronize()
            assert_close(
                c, expected, **TOLERANCE["c"], name=f"c (variant {variant}, unaligned groups)"
            )
    c = poisoned_output(m, batches, "cuda")
    build(NAME, "cuda", "cuda")(*arguments, c)
    torch.cuda.synchronize()
    assert_close(c, expected, **TOLERANCE["c"], name="c (default, unaligned groups)")
    assert str(module.variant_kind(module.chosen_variant(m, k, batches, False))) in pair_readers


@pytest.mark.gpu
@pytest.mark.parametrize("permuted", [False, True])
def test_cuda_choice_is_remembered_and_deterministic(permuted):
    """The first call of a shape times the candidates and remembers one; later calls use it and
    give bit-identical results (a fixed kernel sums in a fixed order)."""
    m, k, batches = 1024, 4096, 2
    module = _cuda_module()
    solution = build(NAME, "cuda_permuted" if permuted else "cuda", "cuda")
    inputs = make(m, k, batches, "wide", device="cuda")
    arguments = [inputs[name] for name in INPUTS]
    expected = reference(NAME)["run"](*arguments)
    outputs = []
    for _ in range(3):
        c = poisoned_output(m, batches, "cuda")
        solution(*arguments, c)
        torch.cuda.synchronize()
        assert_close(c, expected, **TOLERANCE["c"], name="c (tuned)")
        outputs.append(c.clone())
    chosen = module.chosen_variant(m, k, batches, permuted)
    assert 0 <= chosen < module.variant_count()
    assert all(torch.equal(outputs[0], other) for other in outputs[1:])
    # The remembered variant, run explicitly, gives the same bits.
    c = poisoned_output(m, batches, "cuda")
    assert module.run_variant(*arguments, c, chosen, permuted)
    torch.cuda.synchronize()
    assert torch.equal(c, outputs[0])


@pytest.mark.gpu
def test_cuda_first_call_inside_graph_capture():
    """A shape's first call made while a CUDA graph is being captured cannot time anything: it
    records the default variant untimed, remembers no choice, and the replayed graph is correct."""
    m, k, batches = 640, 1536, 3  # a key no other test uses
    module = _cuda_module()
    solution = build(NAME, "cuda", "cuda")
    inputs = make(m, k, batches, "wide", device="cuda")
    arguments = [inputs[name] for name in INPUTS]
    expected = reference(NAME)["run"](*arguments)
    c = poisoned_output(m, batches, "cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        solution(*arguments, c)
    assert module.chosen_variant(m, k, batches, False) == -1
    graph.replay()
    torch.cuda.synchronize()
    assert_close(c, expected, **TOLERANCE["c"], name="c (first call captured)")
