"""The numerics check: results are compared with fp64 truth across value distributions and
boundary sizes, and a failure says by how much, and under which inputs it shows."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kernelaudit.findings import AuditReport, Finding
from kernelaudit.oracle.rule import RATIO_LIMIT

pytestmark = pytest.mark.slow

DISTRIBUTIONS = ("normal", "offset", "small_integers", "large")


@pytest.fixture(scope="module")
def audit_of(tiny_audit: Callable[..., AuditReport]) -> Callable[[str], AuditReport]:
    def run(candidate: str) -> AuditReport:
        return tiny_audit(
            "row_scale",
            f"row_scale_kernels.py::{candidate}",
            ["numerics"],
            float_distributions=DISTRIBUTIONS,
        )

    return run


def _keyed(report: AuditReport) -> dict[str, Finding]:
    return {f.key: f for f in report.findings}


def _cases(finding: Finding) -> dict[str, str]:
    """The finding's failing/total count per variant, keyed by the variant without its dtype
    suffix ("default values @ workload 0")."""
    cases = dict(finding.evidence)["cases"]
    return {variant.split(" [")[0]: count for variant, count in cases.items()}


def test_computing_in_float16_fails_with_its_error_ratio(
    audit_of: Callable[[str], AuditReport],
) -> None:
    report = audit_of("in_half")
    finding = _keyed(report)["error:y"]
    metrics = dict(finding.evidence)["metrics"]
    assert report.verdict == "FAIL"
    assert finding.check == "numerics"
    # float16 rounds about 8000 times coarser than float32
    assert metrics["normwise_error_ratio"] > 10 * RATIO_LIMIT
    assert finding.title.startswith("y: normwise error ")
    assert f"limit {RATIO_LIMIT:g}x" in finding.title
    # float16 also overflows where float32 does not
    assert "inf-where-finite:y" in _keyed(report)


def test_a_bug_at_odd_sizes_is_found_at_a_boundary_size_and_kept_odd(
    audit_of: Callable[[str], AuditReport],
) -> None:
    report = audit_of("drop_odd_tail")
    finding = _keyed(report)["error:y"]
    cases = _cases(finding)
    assert report.verdict == "FAIL"
    assert finding.probe.case.size_map()["cols"] % 2 == 1
    assert finding.original.label.startswith("boundary cols=")
    assert cases["default values @ workload 0"] == "failed 0 of 1"
    assert cases["default values @ boundary cols=1"] == "failed 1 of 1"


def test_a_bug_under_large_values_shows_which_distributions_expose_it(
    audit_of: Callable[[str], AuditReport],
) -> None:
    report = audit_of("clamp_above_16")
    finding = _keyed(report)["error:y"]
    cases = _cases(finding)
    assert report.verdict == "FAIL"
    assert cases["default values @ workload 0"] == "failed 0 of 1"
    assert cases["x~offset @ workload 0"] == "failed 1 of 1"
    assert cases["x~large @ workload 0"] == "failed 1 of 1"
    assert dict(finding.probe.case.values)["x"] in ("offset", "large")


def test_nan_where_the_truth_is_finite_fails(audit_of: Callable[[str], AuditReport]) -> None:
    report = audit_of("nan_on_zero")
    finding = _keyed(report)["nan-where-finite:y"]
    assert report.verdict == "FAIL"
    assert "NaN where the truth is finite" in finding.title
    assert "nan instead of 0" in finding.title
    # only exact small integers put zeros in x
    assert dict(finding.probe.case.values) == {"x": "small_integers"}
    assert _cases(finding)["default values @ workload 0"] == "failed 0 of 1"
    # where the NaNs lie, as the unwritten check locates unwritten elements: a report draws it
    evidence = dict(finding.evidence)
    assert 0 < evidence["elements"] <= evidence["of"]
    assert evidence["first indices"] and "dim 0 indices" in evidence
    from kernelaudit.report.plots.region import region_of

    region = region_of(evidence)
    assert region is not None and region.elements == evidence["elements"]


def test_every_row_is_binned_by_how_often_its_id_occurs() -> None:
    """The flagship's picture in numbers: where an index input addresses the output's rows,
    every row's error binned by its id's count (powers of two), with the rows, median and
    largest error of each bin."""
    import torch

    from kernelaudit.checks.numerics import _by_id_count

    counts = torch.tensor([0, 1, 1, 2, 3, 5, 4000])
    errors = counts.double() * 1e-6  # an error that grows with the sum's length
    bins = _by_id_count(errors, counts)
    assert [b["ids occurring"] for b in bins] == ["1", "2-3", "4-7", "2048-4095"]
    assert [b["rows"] for b in bins] == [2, 2, 1, 1]
    assert bins[1]["median error"] == pytest.approx(2e-6)  # the lower of the middle two
    assert bins[-1]["max error"] == pytest.approx(4e-3)
    assert _by_id_count(errors, torch.zeros(7, dtype=torch.long)) == []


_LARGE_FAILURE = """
import resource, sys, torch
from kernelaudit.checks.base import Expected, Observation, Probe, RunPlan
from kernelaudit.checks.numerics import judge_results
from kernelaudit.inputs.case import Case
from kernelaudit.problem.spec import Output, Problem, TensorInput
from kernelaudit.runner.boundary.messages import CallOutcome, InvocationResult

rows = int(sys.argv[1])
problem = Problem(
    name="copy",
    reference=lambda x: x.clone(),
    axes=("rows", "cols"),
    inputs=(TensorInput("x", ("rows", "cols"), torch.bfloat16),),
    outputs=(Output("y", ("rows", "cols"), "x"),),
    workloads=({"rows": rows, "cols": 1024},),
)
truth = torch.randn(rows, 1024, dtype=torch.float64)
baseline = truth.to(torch.bfloat16)
wrong = baseline.clone()
wrong[-3:] *= -3  # the last rows wrong
expected = Expected(("y",), (truth,), (baseline,), (torch.bfloat16,))
returned = InvocationResult(calls=(CallOutcome(outputs=(wrong,)),))
probe = Probe("numerics", Case(sizes=(("rows", rows), ("cols", 1024))), RunPlan())
seen = Observation(problem, probe, returned, {"x": baseline}, expected)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
failure, = judge_results(seen, 0)
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
evidence = dict(failure.evidence)
print(sorted(row["row"] for row in evidence["worst rows"])[-3:])
print(round(evidence["share of squared error in the 5 worst rows"], 3))
print(grown)
"""


def test_a_large_failing_result_is_located_without_float64_copies_of_it_whole(
    host_memory_run: Callable[..., list[str]],
) -> None:
    """Where a result of 2**27 bfloat16 elements fails, its worst rows and their share of the
    squared error are found, and the judging process grows by less than half of one float64
    copy of the result (1 GiB): the rows are read a chunk at a time. Whole float64 copies of a
    video patch embedding's result (5.3 G elements) had the auditor killed for memory while it
    told where a failure was."""
    rows = 1 << 17
    worst, share, grown = host_memory_run(_LARGE_FAILURE, str(rows))
    assert worst == str([rows - 3, rows - 2, rows - 1])
    assert float(share) > 0.9
    assert int(grown) < rows * 1024 * 8 // 2
