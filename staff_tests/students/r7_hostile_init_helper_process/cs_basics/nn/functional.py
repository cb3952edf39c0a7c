"""Softmax forward by the helper process (torch.softmax); backward from the saved output."""

import math

import torch

from cs_basics import remote_softmax


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim):
        y = torch.from_numpy(remote_softmax(x.detach().double().cpu().numpy(), dim)).to(x.dtype).to(x.device)
        ctx.save_for_backward(y)
        ctx.dim = dim
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return y * (grad - (grad * y).sum(ctx.dim, keepdim=True)), None


def softmax(in_features, dim):
    return _Softmax.apply(in_features, dim)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is None:
        return softmax(scores, -1) @ V
    rows = mask.any(-1, keepdim=True)
    scores = scores.masked_fill(~mask, -math.inf).masked_fill(~rows, 0.0)
    return softmax(scores, -1).masked_fill(~rows, 0.0) @ V
