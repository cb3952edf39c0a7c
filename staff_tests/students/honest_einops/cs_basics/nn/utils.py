import torch


def stable_softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = (x - m).exp()
    return e / e.sum(dim=dim, keepdim=True)
