"""Run by the package at import, as a fresh Python: torch.softmax on request."""
import socket
import struct
import sys

import numpy as np
import torch

sock = socket.socket(fileno=int(sys.argv[1]))
sock.sendall(b"R")  # torch imported: ready


def exactly(n):
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            sys.exit(0)
        data += chunk
    return bytes(data)


while True:
    ndim, dim = struct.unpack("<ii", exactly(8))
    shape = struct.unpack(f"<{ndim}q", exactly(8 * ndim))
    size = int(np.prod(shape)) * 8
    x = torch.from_numpy(np.frombuffer(exactly(size), dtype=np.float64).reshape(shape).copy())
    sock.sendall(torch.softmax(x, dim).numpy().tobytes())
