"""Compare a result with its expected tensor and say exactly what differs.

torch.testing.assert_close reports the same facts, but its first call imports
torch.distributed and sympy (seconds on a small machine, longer than the graded
tests themselves), so the graded run uses this small helper instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float


@dataclass(frozen=True)
class Foreign:
    """A non-tensor value that a graded child process returned, known only by its description."""

    description: str
    sequence: str = ""  # "tuple" or "list" when it was one


def describe(value: object) -> str:
    """A short description of a value: shape, dtype and device for tensors."""
    if isinstance(value, Foreign):
        return value.description
    if isinstance(value, torch.Tensor):
        return f"Tensor(shape={tuple(value.shape)}, dtype={value.dtype}, device={value.device.type})"
    if isinstance(value, tuple | list):
        inner = ", ".join(describe(v) for v in value)
        return f"{type(value).__name__}({inner})"
    return type(value).__name__


def mismatch(
    actual: object,
    expected: torch.Tensor,
    tol: Tolerance,
    *,
    key: str,
    dtype: torch.dtype | None = None,
    device: torch.device | None = None,
    want: str = "a torch.Tensor",
) -> str | None:
    """Return None when `actual` matches `expected`, else a message saying how it differs.

    `expected` is usually the float64 oracle: values are compared in float64, and
    `dtype` / `device`, when given, are what `actual` itself must have; `want` is what it must be, in words.
    """
    if not isinstance(actual, torch.Tensor):
        sequence = isinstance(actual, tuple | list) or (isinstance(actual, Foreign) and actual.sequence)
        hint = " (return only the output tensor, not a tuple)" if sequence and want == "a torch.Tensor" else ""
        return f"{key}: expected {want}, got {describe(actual)}{hint}"
    if tuple(actual.shape) != tuple(expected.shape):
        return f"{key}: shape mismatch: expected {tuple(expected.shape)}, got {tuple(actual.shape)}"
    if dtype is not None and actual.dtype != dtype:
        return f"{key}: dtype mismatch: expected {dtype}, got {actual.dtype}"
    if device is not None and actual.device.type != torch.device(device).type:
        return f"{key}: device mismatch: expected {torch.device(device).type}, got {actual.device.type}"
    return value_mismatch(actual, expected, tol, key=key)


def value_mismatch(actual: torch.Tensor, expected: torch.Tensor, tol: Tolerance, *, key: str) -> str | None:
    """Elementwise |actual - expected| <= atol + rtol * |expected|, NaN never equal."""
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    abs_err = (a - e).abs()
    bad = ~(abs_err <= tol.atol + tol.rtol * e.abs())  # NaN compares False, so it is bad
    n_bad = int(bad.sum())
    if n_bad == 0:
        return None
    if e.dim() == 0:  # one number: the numbers themselves say it all
        return f"{key}: expected {float(e):.8g}, got {float(a):.8g} (atol={tol.atol:.1e}, rtol={tol.rtol:.1e})"
    lines = [
        f"{key}: {n_bad} of {e.numel()} elements differ "
        f"(atol={tol.atol:.1e}, rtol={tol.rtol:.1e}), shape {tuple(e.shape)}"
    ]
    n_nan = int(a.isnan().sum())
    if n_nan:
        first = _index(a.isnan().flatten().nonzero()[0, 0], e.shape)
        lines.append(f"  {n_nan} NaN in the result, first at index {first}")
    finite = torch.where(bad & ~a.isnan(), abs_err, torch.zeros_like(abs_err))
    if finite.max() > 0:
        worst = int(finite.flatten().argmax())
        idx = _index(worst, e.shape)
        lines.append(
            f"  worst absolute error {float(finite.flatten()[worst]):.3e} at index {idx}: "
            f"expected {float(e.flatten()[worst]):.8g}, got {float(a.flatten()[worst]):.8g}"
        )
        rel = finite / e.abs().clamp_min(torch.finfo(torch.float64).tiny)
        worst_rel = int(rel.flatten().argmax())
        lines.append(
            f"  worst relative error {float(rel.flatten()[worst_rel]):.3e} at index {_index(worst_rel, e.shape)}"
        )
    return "\n".join(lines)


def _index(flat: int | torch.Tensor, shape: torch.Size) -> tuple[int, ...]:
    flat = int(flat)
    idx = []
    for size in reversed(shape):
        idx.append(flat % size)
        flat //= size
    return tuple(reversed(idx))


def assert_close(
    actual: object,
    expected: torch.Tensor,
    tol: Tolerance,
    *,
    key: str,
    fix: str | None = None,
    **kwargs: object,
) -> None:
    """Raise AssertionError with the mismatch message (and how to rerun) if they differ."""
    message = mismatch(actual, expected, tol, key=key, **kwargs)
    if message is not None:
        if fix:
            message += f"\n  rerun: {fix}"
        raise AssertionError(message)
