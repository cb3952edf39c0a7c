import torch


def stable_softmax(x, dim):
    x = x - x.max(dim=dim, keepdim=True).values
    return torch.exp(x) / torch.exp(x).sum(dim=dim, keepdim=True)
