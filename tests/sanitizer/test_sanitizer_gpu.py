"""On a CUDA machine with compute-sanitizer: a Triton store one element past the end of its
output is caught and named; correct candidates built on cuBLAS and on torch's own kernels get
no finding blamed on them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelaudit.engine.audit import audit
from kernelaudit.findings import AuditReport
from kernelaudit.sanitizer.locate import locate

FIXTURES = Path(__file__).parent / "fixtures"
EXAMPLES = Path(__file__).parents[2] / "examples"

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(not locate().found, reason="needs compute-sanitizer"),
]


def _sanitized(problem: Path, candidate: str, profile: str) -> AuditReport:
    return audit(problem, str(candidate), profile, "cuda", ["sanitizer"])


def test_an_unmasked_store_one_past_the_end_is_caught_and_names_the_kernel() -> None:
    report = _sanitized(
        FIXTURES / "copy_problem.py", f"{FIXTURES / 'oob_store.py'}::copy_one_past", "quick"
    )
    failing = [f for f in report.findings if f.check == "sanitizer" and f.severity == "fail"]
    listing = [f"{f.severity}: {f.title}" for f in report.findings]
    assert len(failing) == 1, listing
    (finding,) = failing
    assert "_oob_store" in finding.title and "global write of 4 bytes" in finding.title, listing
    evidence = dict(finding.evidence)
    assert "out of bounds" in evidence["address"]
    assert report.verdict == "FAIL"


@pytest.mark.parametrize(
    ("problem", "candidate"),
    [
        (EXAMPLES / "matmul" / "problem.py", "matmul"),
        (FIXTURES / "copy_problem.py", "copy"),
    ],
)
def test_correct_library_candidates_get_no_sanitizer_finding(problem: Path, candidate: str) -> None:
    report = _sanitized(problem, f"{FIXTURES / 'library_candidates.py'}::{candidate}", "default")
    blamed = [
        f"{f.severity}: {f.title}"
        for f in report.findings
        if f.check == "sanitizer" and f.severity != "note"
    ]
    assert blamed == []
    cost = [f for f in report.findings if f.key == "cost"]
    assert cost and "memcheck, initcheck, synccheck" in cost[0].title, cost


def test_a_correct_triton_matmul_gets_no_sanitizer_finding() -> None:
    report = _sanitized(
        EXAMPLES / "matmul" / "problem.py",
        f"{EXAMPLES / 'matmul' / 'candidates.py'}::masked_tiles",
        "default",
    )
    blamed = [f.title for f in report.findings if f.check == "sanitizer" and f.severity != "note"]
    assert blamed == []
