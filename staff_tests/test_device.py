import pytest
import torch

from cs_basics.harness import device as device_module
from cs_basics.harness.cases import placed, run_case
from cs_basics.harness.device import DEVICE_ENV, choose_device, use_exact_float32
from tests import adapters


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


def test_without_cuda_or_mps_the_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert device_module.available_device() == "cpu"


def test_mps_is_taken_only_where_torch_sees_it(monkeypatch):
    monkeypatch.delenv(DEVICE_ENV, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(ValueError, match="torch sees no Apple MPS device"):
        choose_device("mps")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert choose_device("mps") == choose_device(None) == torch.device("mps")


def test_mps_has_no_float64_so_those_arguments_and_checks_go_to_the_cpu():
    mps, cuda, cpu = torch.device("mps"), torch.device("cuda"), torch.device("cpu")
    assert placed(mps, torch.float64) == cpu
    assert all(placed(mps, dtype) == mps for dtype in (torch.float32, torch.float16, torch.bfloat16))
    assert placed(cuda, torch.float64) == cuda and placed(cpu, torch.float64) == cpu


def test_float64_cases_pass_on_a_stand_in_mps_by_running_on_the_cpu(monkeypatch, assignment):
    """Every float64 case with the reference, on an MPS device torch is told it has (this machine has none):
    the rule puts their arguments, and the check's expected device, on the CPU. A float32 case does go to
    the MPS device, which is not there: the stand-in is only as good as that split."""
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    mps = choose_device("mps")
    float64 = [c for c in assignment.cases if c.dtype == torch.float64]
    assert len(float64) >= 2
    for case in float64:
        run_case(case, adapters, assignment.store_for(case), mps)
    float32 = next(c for c in assignment.cases if c.dtype == torch.float32)
    with pytest.raises(RuntimeError, match="mps"):
        run_case(float32, adapters, assignment.store_for(float32), mps)
