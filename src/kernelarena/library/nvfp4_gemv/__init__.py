"""nvfp4_gemv: c = A @ b per batch, A and b in NVFP4 (FP4 e2m1 with one e4m3 scale per 16 values).

GPU MODE's nvfp4_gemv problem, in its calling convention: inputs (a, b, sfa, sfb, sfa_permuted,
sfb_permuted) and the output c, so a GPU MODE ``custom_kernel(data)`` drops in as
``run(*args): custom_kernel(args)``. c[i, 0, l] = sum_k a[i, k, l] sfa[i, k // 16, l] b[0, k, l]
sfb[0, k // 16, l], accumulated in float32 and rounded once to float16.

Memory layout, as GPU MODE makes it: every tensor is allocated with the batch l outermost and
permuted so that l is the last index ([l, m, k/2] storage viewed as [m, k/2, l]). FP4 values are
packed two a byte, element 2j in the low nibble. b has n rows (GPU MODE pads the vector to 128
rows); only row 0 is read. The permuted scales hold the same values as sfa/sfb in the cuBLAS
block-scaled layout [32, 4, ceil(m/128), 4, k/64, l]: per l, atoms of 512 bytes ordered by (row
block of 128, block of 4 scale columns); row i = 128 mm + 32 mm4 + mm32 and scale column
j = 4 kk + kk4 sit at byte 16 mm32 + 4 mm4 + kk4 of atom (mm, kk). Rows past m are padding.
"""

from pathlib import Path

from kernelarena.data import Tolerance
from kernelarena.library._spec import (
    OperatorSpec,
    SolutionSpec,
    Variant,
    WorkloadSpec,
    const,
    derived,
    tensor,
    var,
)

# GPU MODE's test shapes (m, k, l) and benchmark shapes.
_TEST_SHAPES = [
    (128, 256, 1),
    (128, 1536, 1),
    (128, 3072, 1),
    (256, 7168, 1),
    (2432, 4608, 2),
    (384, 7168, 2),
    (512, 512, 2),
    (512, 4096, 2),
    (512, 1536, 2),
]
_PERFORMANCE_SHAPES = [(7168, 16384, 1), (4096, 7168, 8), (7168, 2048, 4)]
# Odd rows (one row, not a multiple of 128, one past a 128-row atom), k at its minimum of 64,
# several batches, 0 rows (an empty output), and rows longer than the CUDA solution's single
# sweep (k > 16384, a partial last sweep).
_ODD_SHAPES = [(1, 64, 1), (77, 192, 3), (129, 1024, 1), (0, 128, 2), (200, 64, 5), (9, 32832, 2)]
# Over ~4 s each in the Triton interpreter on a CPU.
_LARGE = {
    (2432, 4608, 2),
    (384, 7168, 2),
    (512, 4096, 2),
    (256, 7168, 1),
    (128, 3072, 1),
    (512, 512, 2),
    (512, 1536, 2),
    (200, 64, 5),
    (9, 32832, 2),
}
_GENERATORS = ("gpumode", "wide")


def _axes(m: int, k: int, l: int, n: int = 128) -> dict[str, int]:
    return {"m": m, "k": k, "l": l, "n": n}


def _workloads() -> tuple[WorkloadSpec, ...]:
    made: list[WorkloadSpec] = []
    for generator in _GENERATORS:
        params = {"generator": generator}
        made.append(WorkloadSpec(_axes(128, 256, 1), tags=("smoke", "correctness"), params=params))
        made.append(WorkloadSpec(_axes(1, 64, 1), tags=("smoke", "correctness"), params=params))
        for m, k, l in _TEST_SHAPES[1:]:
            tags = ("correctness", "large") if (m, k, l) in _LARGE else ("correctness",)
            made.append(WorkloadSpec(_axes(m, k, l), tags=tags, params=params))
        for m, k, l in _ODD_SHAPES[1:]:
            tags = ("correctness", "large") if (m, k, l) in _LARGE else ("correctness",)
            made.append(WorkloadSpec(_axes(m, k, l), tags=tags, params=params))
        # b with a single row (no padding to 128), and rows of a and sfa laid out wider than k.
        made.append(WorkloadSpec(_axes(33, 320, 2, n=1), tags=("correctness",), params=params))
        made.append(
            WorkloadSpec(
                _axes(45, 448, 2), tags=("correctness",), params={**params, "padded_rows": True}
            )
        )
    for m, k, l in _PERFORMANCE_SHAPES:
        made.append(
            WorkloadSpec(
                _axes(m, k, l), tags=("performance", "large"), params={"generator": "gpumode"}
            )
        )
    return tuple(made)


_CUDA_HEADERS = (
    "cuda/nvfp4_gemv_details.cuh",
    "cuda/nvfp4_gemv_kernels.cuh",
    "cuda/nvfp4_gemv_rows.cuh",
    "cuda/nvfp4_gemv_tuner.cuh",
)
_CUDA_SHARED = ("mbarrier.cuh", "nvfp4_decode.cuh")
_SOLUTION_NOTES = (
    "FP4 decoded by byte-permute (PRMT) lookups into int8, 16-value blocks summed exactly by "
    "dp4a, scaled in float32"
)

OPERATOR = OperatorSpec(
    name="nvfp4_gemv",
    op_type="gemv",
    description=__doc__.strip().splitlines()[0],
    folder=Path(__file__).parent,
    axes={
        "m": var("rows of A and of c (0 included)"),
        "k": var("FP4 values per row, a multiple of 64"),
        "l": var("batch: independent A, b and c per index"),
        "n": var("rows of b and sfb; only row 0 is used (GPU MODE pads the vector to 128 rows)"),
        "k_packed": derived("k // 2", "bytes per FP4 row, two values a byte"),
        "k_scales": derived("k // 16", "scales per row, one per 16 values"),
        "m_atoms": derived("ceil_div(m, 128)", "128-row blocks of the permuted scales of A"),
        "n_atoms": derived("ceil_div(n, 128)", "128-row blocks of the permuted scales of b"),
        "k_atoms": derived("k // 64", "blocks of 4 scale columns of the permuted scales"),
        "atom_rows": const(32, "rows within a 32-row group of an atom"),
        "atom_groups": const(4, "32-row groups per atom, and scale columns per atom"),
        "one": const(1, "the single output column"),
    },
    inputs={
        "a": tensor(["m", "k_packed", "l"], "float4_e2m1", "A, l outermost in memory"),
        "b": tensor(["n", "k_packed", "l"], "float4_e2m1", "the vector in row 0"),
        "sfa": tensor(["m", "k_scales", "l"], "float8_e4m3fn", "scales of A"),
        "sfb": tensor(["n", "k_scales", "l"], "float8_e4m3fn", "scales of b (row 0 used)"),
        "sfa_permuted": tensor(
            ["atom_rows", "atom_groups", "m_atoms", "atom_groups", "k_atoms", "l"],
            "float8_e4m3fn",
            "sfa in the cuBLAS block-scaled layout",
        ),
        "sfb_permuted": tensor(
            ["atom_rows", "atom_groups", "n_atoms", "atom_groups", "k_atoms", "l"],
            "float8_e4m3fn",
            "sfb in the cuBLAS block-scaled layout",
        ),
    },
    outputs={"c": tensor(["m", "one", "l"], "float16", "l outermost in memory")},
    constraints=("k % 64 == 0", "k >= 64", "n >= 1"),
    # Only row 0 of b and sfb is read: A and its scales, one row of b and sfb per batch, c.
    bytes_moved="l * (m + 1) * (k_packed + k_scales) + 2 * m * l",
    flops="2 * m * k * l",
    variants=(
        Variant(
            "",
            # GPU MODE's tolerance. Every solution sums exact products (e2m1 x e2m1 x e4m3 x e4m3
            # fit in 12 bits) in float32 and rounds once to float16, like the reference: they
            # differ from it by float32 summation order, far below one float16 step (2^-10).
            tolerances={"c": Tolerance(atol=1e-3, rtol=1e-3)},
        ),
    ),
    workloads=_workloads(),
    solutions=(
        SolutionSpec(
            "triton",
            "triton",
            "triton/nvfp4_gemv.py::run",
            extra_files=("triton/nvfp4_gemv_details.py",),
            targets=("cuda", "cpu"),
            description=f"Reads sfa/sfb. {_SOLUTION_NOTES}; steps of 16-32 rows x 1024 values "
            "with the next step's loads in flight, each program an equal row range; the launch "
            "config autotuned per (m, k, l) on the first call.",
        ),
        SolutionSpec(
            "triton_permuted",
            "triton",
            "triton/nvfp4_gemv.py::run_permuted",
            extra_files=("triton/nvfp4_gemv_details.py",),
            targets=("cuda", "cpu"),
            description="The Triton solution reading sfa_permuted/sfb_permuted.",
        ),
        SolutionSpec(
            "cuda",
            "cuda",
            "cuda/nvfp4_gemv.cu::run",
            extra_files=_CUDA_HEADERS,
            shared=_CUDA_SHARED,
            targets=("sm_90a",),
            description=f"Reads sfa/sfb. {_SOLUTION_NOTES}; warps that sweep whole rows alone, "
            "b decoded once a block into shared memory and A in a register ring 3-6 steps deep, "
            "or persistent blocks with b in registers and A through a per-thread cp.async ring, "
            "bulk copies of whole rows by a producer warp, or double-buffered registers: the "
            "variant timed per (m, k, l) on the first call.",
        ),
        SolutionSpec(
            "cuda_permuted",
            "cuda",
            "cuda/nvfp4_gemv.cu::run_permuted",
            extra_files=_CUDA_HEADERS,
            shared=_CUDA_SHARED,
            targets=("sm_90a",),
            description="The CUDA solution reading sfa_permuted/sfb_permuted.",
        ),
        SolutionSpec(
            "cute",
            "cuda",
            "cute/nvfp4_gemv_cute.cu::run",
            extra_files=("cute/nvfp4_gemv_cute.cuh",),
            shared=("nvfp4_decode.cuh",),
            targets=("sm_90a",),
            dependencies=("cutlass",),
            description=f"CuTe (CUTLASS C++ headers). Reads sfa/sfb. {_SOLUTION_NOTES}; the CUDA "
            "solution's whole-row kernel (4-row groups, 2-step register ring, the vector decoded "
            "into shared memory) over CuTe tensors, local_tile and a streaming-load copy atom.",
        ),
    ),
)
