"""Which device the graded tests run on: CUDA, then Apple MPS, then the CPU."""

from __future__ import annotations

import os

import torch

DEVICE_ENV = "CS_BASICS_DEVICE"


def available_device() -> str:
    if torch.cuda.is_available():
        return "cuda"
    if torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def choose_device(requested: str | None = None) -> torch.device:
    """The --device option, else $CS_BASICS_DEVICE, else the best device present."""
    name = requested or os.environ.get(DEVICE_ENV) or available_device()
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise ValueError(f"unknown device {name!r} (from --device or ${DEVICE_ENV}): {err}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} was asked for, but torch sees no CUDA GPU")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {name!r} was asked for, but torch sees no Apple MPS device")
    return device


def use_exact_float32() -> None:
    """Keep CUDA from using TF32 for float32 matmuls, which would loosen float32 checks."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def supports_float64(device: torch.device) -> bool:
    return device.type != "mps"
