"""The bounds check: a write outside a tensor's elements fails naming the tensor and the byte
offsets of the damage, measured from the tensor's first element."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from kernelaudit import Contract
from kernelaudit.findings import AuditReport, Finding
from kernelaudit.problem.spec import Problem

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("style", "candidate", "tensor", "first_element_past"),
    [
        ("return", "write_past_the_end", "output 0", True),
        ("destination", "write_past_the_end_into", "output 0", True),
        ("return", "write_before_x", "input 0", False),
    ],
)
def test_a_write_one_element_out_of_bounds_fails_with_the_tensor_and_offsets(
    style: str,
    candidate: str,
    tensor: str,
    first_element_past: bool,
    tiny_audit: Callable[..., AuditReport],
    fixture_problem: Callable[[str], Problem],
    finding_of: Callable[[AuditReport, str], Finding],
) -> None:
    problem = replace(fixture_problem("row_scale"), contract=Contract(style=style))
    # bounds plans nothing of its own: it watches the guard bands of every other check's runs
    report = tiny_audit(problem, f"row_scale_kernels.py::{candidate}", ["bounds", "determinism"])
    finding = finding_of(report, "bounds")
    sizes = finding.probe.case.size_map()
    evidence = dict(finding.evidence)
    assert report.verdict == "FAIL"
    assert evidence["tensor"].startswith(tensor)
    assert evidence["bytes changed"] == 4  # one float32
    if first_element_past:
        end = sizes["rows"] * sizes["cols"] * 4
        assert (evidence["first byte offset"], evidence["last byte offset"]) == (end, end + 3)
    else:
        assert (evidence["first byte offset"], evidence["last byte offset"]) == (-4, -1)
    assert tensor in finding.title
    offsets = f"{evidence['first byte offset']}..{evidence['last byte offset']}"
    assert f"byte offsets {offsets} from its first element" in finding.title


def test_an_audit_of_the_bounds_check_alone_still_runs_cases(
    tiny_audit: Callable[..., AuditReport],
) -> None:
    report = tiny_audit("row_scale", "row_scale_kernels.py::write_past_the_end", ["bounds"])
    assert report.records
    assert report.verdict == "FAIL"
