"""silu_and_mul: out = silu(x[:, :d]) * x[:, d:], the SwiGLU activation of LLM MLPs.

x is [rows, 2 d], gate first; out is [rows, d]. Axes, shapes and conventions are the gated
activations' (library/_gated_activation_family.py).
"""

from pathlib import Path

from kernelarena.library import _gated_activation_family as gated

# Tolerances (the family's): in fp32, __expf / tl.exp2 and the fast division add below 3e-6
# relative (the float32 reference rounds too).
OPERATOR = gated.operator(
    name="silu_and_mul",
    activation="silu",
    folder=Path(__file__).parent,
    flops="5 * rows * d",  # negate, exp, add, divide, multiply per output
    # exp(-gate) overflows at gate = -100 and vanishes at +100: silu gives -0 and 100.
    gate_range=100.0,
    solutions=(
        *gated.kernels(
            "silu_and_mul",
            "run",
            triton_description="Tiles tuned on the device (6 candidates, 512 to 4096 outputs); "
            "exp2 and fast division.",
            cuda_description="16-byte streaming loads of both halves, two of each per thread in "
            "flight.",
        ),
        *gated.torch_peers("run", "torch eager: F.silu then torch.mul into out (two kernels)."),
        gated.liger_peer("run", "LigerSiLUMulFunction"),
    ),
)
