"""gelu_and_mul and gelu_tanh_and_mul: out = gelu(x[:, :d]) * x[:, d:], the GeGLU activation.

FlashInfer's names: ``gelu_and_mul`` is the exact GELU, 0.5 g (1 + erf(g / sqrt 2)), and
``gelu_tanh_and_mul`` its tanh approximation, 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))).
This folder declares both (``OPERATORS``); their kernels share its files (``run`` and
``run_tanh`` in each solution file), their references are ``reference.py`` and
``reference_tanh.py``.

x is [rows, 2 d], gate first; out is [rows, d]. Axes, shapes and conventions are the gated
activations' (library/_gated_activation_family.py).
"""

from pathlib import Path

from kernelarena.library import _gated_activation_family as gated
from kernelarena.library._spec import OperatorSpec, SolutionSpec

# Tolerances (the family's): in fp32 the tanh form runs through one fast exp and one fast division
# (below 3e-6 relative), the exact form through a branch-free erfc (the normal CDF within 2.3e-7
# absolute, 1.2e-6 relative for g > -3); the float32 reference itself loses about 6e-8 |g|
# absolute in 1 + tanh or 1 + erf near -1.


def _operator(tanh: bool) -> OperatorSpec:
    gelu = "gelu_tanh" if tanh else "gelu"
    return gated.operator(
        name=f"{gelu}_and_mul",
        activation=gelu,
        folder=Path(__file__).parent,
        reference="reference_tanh.py" if tanh else "reference.py",
        flops=("10" if tanh else "8")
        + " * rows * d",  # the GELU polynomial or erf, then the product
        # The exponentials overflow at gate = -30 and vanish at +30: GELU gives -0 and 30.
        gate_range=30.0,
        solutions=_solutions(tanh),
    )


def _solutions(tanh: bool) -> tuple[SolutionSpec, ...]:
    """This folder's kernels (each file holds both forms: ``run``, ``run_tanh``) and the peers
    they are measured against; Liger for the tanh form only (it has no exact-GELU kernel)."""
    entry = "run_tanh" if tanh else "run"
    kernels = gated.kernels(
        "gelu_and_mul",
        entry,
        triton_description="Tiles tuned on the device (6 candidates, 512 to 4096 outputs)"
        + (
            "; GELU as g * sigmoid(2 z) with exp2."
            if tanh
            else "; the normal CDF from a branch-free erfc (one exp2)."
        ),
        cuda_description="16-byte streaming loads of both halves"
        + (
            "; GELU as g * sigmoid(2 z) with __expf."
            if tanh
            else "; the normal CDF from a branch-free erfc (one exp2f)."
        ),
    )
    peers = gated.torch_peers(
        entry,
        f"torch eager: F.gelu (approximate={'tanh' if tanh else 'none'}), then torch.mul.",
    )
    liger = (gated.liger_peer("run_tanh", "LigerGELUMulFunction"),) if tanh else ()
    return (*kernels, *peers, *liger)


# One folder serves both of FlashInfer's names: gelu_and_mul (erf) and gelu_tanh_and_mul.
OPERATORS = (_operator(tanh=False), _operator(tanh=True))
