import pytest
import torch

from cs_basics.harness import device as device_module
from cs_basics.harness.device import DEVICE_ENV, choose_device, use_exact_float32


def test_option_wins_over_environment(monkeypatch):
    monkeypatch.setenv(DEVICE_ENV, "meta")
    assert choose_device("cpu") == torch.device("cpu")
    assert choose_device(None) == torch.device("meta")


def test_default_is_the_best_device_present(monkeypatch):
    monkeypatch.delenv(DEVICE_ENV, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert device_module.available_device() == "mps"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert device_module.available_device() == "cuda"


def test_unknown_or_absent_device_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="unknown device 'gpu'"):
        choose_device("gpu")
    with pytest.raises(ValueError, match="torch sees no CUDA GPU"):
        choose_device("cuda")


def test_float32_checks_are_not_loosened_by_tf32():
    torch.backends.cuda.matmul.allow_tf32 = True
    use_exact_float32()
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    assert torch.get_float32_matmul_precision() == "highest"
