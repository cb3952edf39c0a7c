import math

import torch

from .softmax import stable_softmax


def attention(Q, K, V, mask=None):
    S = Q @ K.mT / math.sqrt(Q.shape[-1])
    if mask is not None:
        S = S.masked_fill(~mask, -float("inf"))
    P = stable_softmax(S, -1)
    if mask is not None:
        P = torch.nan_to_num(P)
    return P @ V
