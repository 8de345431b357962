"""Python tests: fixtures shared by the suite (devices, awkward shapes, poisoned outputs).

Runs from a source tree (PYTHONPATH=python, library from FLASHATTN_LIBRARY or build*/src)
or against an installed package. CUDA cases carry the `gpu` marker and skip without a GPU.
"""

import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]

try:
    import flashattn  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT / "python"))
    import flashattn  # noqa: F401

from flashattn import _ops  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU and a libflashattn built with CUDA")
    config.addinivalue_line("markers", "slow: long-running case")


def cuda_ready():
    """(ready, reason) for running CUDA cases."""
    if not torch.cuda.is_available():
        return False, "no CUDA device visible to torch"
    if not flashattn.has_cuda():
        return False, f"{flashattn.library_path()} was built without the CUDA backend"
    return True, ""


_CUDA_OK, _CUDA_WHY = cuda_ready()

DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param("cuda", id="cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not _CUDA_OK, reason=_CUDA_WHY)]),
]


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


@pytest.fixture(autouse=True)
def poison_outputs(monkeypatch):
    """Every output the ops allocate starts as NaN, so a row left unwritten fails the checks."""
    monkeypatch.setattr(_ops, "poison_outputs", True)
    yield


@pytest.fixture(autouse=True)
def fresh_seed():
    """Fresh random inputs every run; the seed is printed on failure."""
    seed = int.from_bytes(os.urandom(4), "little") if "FLASHATTN_TEST_SEED" not in os.environ else int(
        os.environ["FLASHATTN_TEST_SEED"])
    torch.manual_seed(seed)
    yield seed


def pytest_runtest_makereport(item, call):
    if call.when == "call" and call.excinfo is not None and "fresh_seed" in item.funcargs:
        item.add_report_section("call", "seed", f"FLASHATTN_TEST_SEED={item.funcargs['fresh_seed']}")
