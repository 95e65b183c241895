"""A candidate gets the device memory its limit promises, whatever the auditor's own float64
runs of the same case left cached on the device before its call."""

from pathlib import Path

import pytest
import torch

from kernelaudit.engine.audit import audit
from kernelaudit.engine.executor import release_cached

FIXTURE = Path(__file__).parent / "fixtures" / "large_scratch.py"

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_the_auditor_gives_back_what_its_allocator_keeps_unused() -> None:
    block = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    del block
    assert torch.cuda.memory_reserved() - torch.cuda.memory_allocated() >= 1 << 30
    release_cached("cuda")
    assert torch.cuda.memory_reserved() - torch.cuda.memory_allocated() < 1 << 30


def test_a_reference_whose_truth_fills_the_device_passes_as_its_own_candidate() -> None:
    # the truth's scratch (two thirds of the device) stays cached in the auditor unless it is
    # given back: the candidate's third would then not fit, and a correct kernel would fail
    report = audit(
        FIXTURE,
        f"{FIXTURE}::doubled_through_scratch",
        profile="quick",
        device="cuda",
        checks=["execution", "numerics"],
    )
    assert report.verdict == "PASS", [f.title for f in report.findings]
