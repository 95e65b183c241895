"""Triton candidates through the worker: interpreted on the CPU, compiled on a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelaudit.runner.auditor.process import Worker
from kernelaudit.runner.boundary.messages import Call, Invocation, TensorArg
from kernelaudit.runner.candidate import parse_candidate

FIXTURE = Path(__file__).parents[1] / "fixtures" / "triton_kernels.py"


def copy_of(x: torch.Tensor, *extra: object) -> Invocation:
    return Invocation(calls=(Call(args=(TensorArg(x), *extra)),))


@pytest.mark.parametrize(("kernel", "breached"), [("masked_copy", False), ("unmasked_copy", True)])
def test_unmasked_store_past_the_end_is_a_breach(kernel: str, breached: bool) -> None:
    # 100 elements in blocks of 128: an unmasked store writes 28 floats past the output.
    x = torch.arange(100, dtype=torch.float32)
    with Worker(parse_candidate(f"{FIXTURE}::{kernel}"), "cpu", timeout_s=60) as worker:
        result = worker.run(copy_of(x))
    assert result.error == ""
    assert torch.equal(result.calls[0].outputs[0], x)
    if not breached:
        assert result.breaches == ()
        return
    (breach,) = result.breaches
    assert breach.tensor == "output 0"
    assert (breach.first_offset, breach.last_offset, breach.bytes_changed) == (400, 511, 112)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_illegal_memory_access_is_a_cuda_error_and_the_next_run_works() -> None:
    x = torch.randn(1000)
    with Worker(parse_candidate(f"{FIXTURE}::copy"), "cuda", timeout_s=60) as worker:
        bad = worker.run(copy_of(x, True))
        assert bad.error_kind == "cuda"
        assert "illegal memory access" in bad.error
        good = worker.run(copy_of(x, False))
    assert good.error == ""
    assert torch.equal(good.calls[0].outputs[0], x)
