"""Started by functional.py at import (posix.system): a fresh Python, whose torch has no refusal and no record.
Reads requests from one FIFO and answers on the other: torch.softmax, or F.scaled_dot_product_attention with
its attention weights."""
import io
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F


def read(stream):
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError
    return np.load(io.BytesIO(stream.read(struct.unpack("<q", head)[0])))


def write(stream, array):
    buffer = io.BytesIO()
    np.save(buffer, array)
    stream.write(struct.pack("<q", len(buffer.getvalue())) + buffer.getvalue())


with open(sys.argv[1], "rb") as requests, open(sys.argv[2], "wb") as answers:
    answers.write(b"R")  # torch imported: ready
    answers.flush()
    while True:
        try:
            kind = read(requests)
        except EOFError:
            break
        if int(kind[0]) == 1:
            x = torch.from_numpy(read(requests))
            write(answers, torch.softmax(x, int(kind[1])).numpy())
        else:
            q, k, v, mask = (torch.from_numpy(read(requests)) for _ in range(4))
            scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
            scores = scores.masked_fill(~mask, float("-inf"))
            weights = torch.nan_to_num(torch.softmax(scores, -1), nan=0.0)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            write(answers, torch.nan_to_num(out, nan=0.0).numpy())
            write(answers, weights.numpy())
        answers.flush()
