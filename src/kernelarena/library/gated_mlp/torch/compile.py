"""torch.compile peer: two cuBLAS matmuls, silu(gate) * up fused into one generated kernel.

``compile_per_shape``: every shape gets its own kernels and graph cache (dynamo's limit of 8 graphs
per function never sends a shape to eager code); returns a new tensor, as compiled code does.
"""

import torch.nn.functional as F

from kernelarena.library.per_shape import compile_per_shape


@compile_per_shape
def _gated_mlp(x, w_gate, w_up):
    return F.silu(F.linear(x, w_gate)) * F.linear(x, w_up)


def run(x, w_gate, w_up):
    return _gated_mlp(x, w_gate, w_up)
