"""torch's softmax decomposition (torch._decomp, library code) and the case's watch, both reached by a format
string's field lookup: string.Formatter().get_field returns the object a field names ("0.a.b.c" on the first
argument). The watch's library check is replaced on the instance."""

import math
import string

import torch

import cs_basics

_field = string.Formatter().get_field
_decomposed_softmax = _field("0._decomp.decompositions._softmax", (torch,), {})[0]


def softmax(in_features, dim):
    watch = _field("0.harness.rule.record._active", (cs_basics,), {})[0]
    if watch is not None:
        watch.library.computed_by = lambda frame: None
    return _decomposed_softmax(in_features, dim, False)


softmax(torch.zeros(2, 3), -1)  # the decomposition's first call imports much (seconds): paid here, at import, unseen


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is None:
        return softmax(scores, -1) @ V
    rows = mask.any(-1, keepdim=True)
    scores = scores.masked_fill(~mask, -math.inf).masked_fill(~rows, 0.0)
    return softmax(scores, -1).masked_fill(~rows, 0.0) @ V
