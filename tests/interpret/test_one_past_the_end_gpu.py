"""One Triton store one element past the end of its output, caught three ways on a GPU: by the
guard bands around every tensor (`bounds`), by the interpreter's check of every store
(`triton-bounds`), and by compute-sanitizer's memcheck on the candidate's kernel (`sanitizer`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelaudit.engine.audit import audit
from kernelaudit.sanitizer.locate import locate

FIXTURES = Path(__file__).parent / "fixtures"
KERNELS = FIXTURES / "scale_kernels.py"

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _failing_checks(function: str, checks: list[str]) -> set[str]:
    report = audit(FIXTURES / "scale.py", f"{KERNELS}::{function}", "quick", "cuda", checks)
    return {f.check for f in report.findings if f.severity == "fail"}


def _detectors() -> list[str]:
    # guard bands watch the probes other checks run: numerics supplies them
    return ["bounds", "triton-bounds", *(["sanitizer"] if locate().path else [])]


def test_a_store_one_past_the_end_fails_guard_bands_interpreter_and_sanitizer() -> None:
    detectors = _detectors()
    failing = _failing_checks("store_one_past_the_end", ["numerics", *detectors])
    assert failing >= set(detectors)


def test_the_correct_kernel_fails_none_of_them() -> None:
    assert _failing_checks("scale", ["numerics", *_detectors()]) == set()
