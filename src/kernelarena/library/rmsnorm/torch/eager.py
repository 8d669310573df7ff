import torch


def run(x, weight, eps):
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps)
