import torch


def run(x):
    """out = gelu_tanh(x[:, :d]) * x[:, d:], GELU in its tanh approximation; gate first."""
    d = x.shape[-1] // 2
    gate = x[:, :d].to(torch.float32)
    up = x[:, d:].to(torch.float32)
    return (torch.nn.functional.gelu(gate, approximate="tanh") * up).to(x.dtype)


def make_inputs(axes, inputs, params, generator, device):
    """``row_stride`` (params): rows of x lie this many elements apart (wider than ``two_d``).
    ``gate_range`` (params): the gate half is uniform in [-R, R], its first column alternating
    -R and +R by row, so that the exponentials inside GELU overflow and underflow (R = 30)."""
    x = inputs["x"]
    rows, two_d = axes["rows"], axes["two_d"]
    stride = params.get("row_stride")
    if stride:
        wide = torch.randn(rows, stride, generator=generator, device=device).to(x.dtype)
        x = wide[:, :two_d]
    gate_range = params.get("gate_range")
    d = two_d // 2
    if gate_range and rows > 0 and d > 0:
        gate = (
            torch.rand(rows, d, generator=generator, device=device) * (2 * gate_range) - gate_range
        )
        gate[0::2, 0] = -gate_range
        gate[1::2, 0] = gate_range
        x[:, :d] = gate.to(x.dtype)
    inputs["x"] = x
    return inputs
