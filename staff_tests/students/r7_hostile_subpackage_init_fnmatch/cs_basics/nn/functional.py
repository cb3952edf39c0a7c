"""torch's softmax and attention, as Tensor methods and one torch.nn.functional call reached by a method."""

import math


def softmax(in_features, dim):
    return in_features.softmax(dim)


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is None:
        return scores.softmax(-1) @ V
    rows = mask.any(-1, keepdim=True)
    scores = scores.masked_fill(~mask, -math.inf).masked_fill(~rows, 0.0)
    return scores.softmax(-1).masked_fill(~rows, 0.0) @ V
