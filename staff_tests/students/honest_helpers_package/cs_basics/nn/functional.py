"""helpers in a sub-package, re-exported through __init__."""
from .ops import attention, stable_softmax


def softmax(in_features, dim):
    return stable_softmax(in_features, dim)


def scaled_dot_product_attention(Q, K, V, mask=None):
    return attention(Q, K, V, mask)
