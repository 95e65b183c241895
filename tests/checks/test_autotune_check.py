"""The autotune check: every configuration a Triton autotuner offers is run and judged, not only
the one it picks (here under Triton's interpreter, where it picks its first)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kernelaudit.checks.base import RunPlan, Step
from kernelaudit.findings import AuditReport, Finding

pytestmark = pytest.mark.slow

WRONG_BLOCK = "autotuned_one_block.py::_scale_row"


def test_a_configuration_the_autotuner_did_not_pick_is_run_and_its_error_named(
    tiny_audit: Callable[..., AuditReport], finding_of: Callable[[AuditReport, str], Finding]
) -> None:
    # one boundary size past a block (cols=17) besides the smallest: the 16-column block
    # leaves the last column unwritten
    report = tiny_audit(
        "row_scale",
        "autotuned_one_block.py::assumes_block_covers_row",
        ["autotune"],
        boundary_sizes_per_axis=2,
    )
    finding = finding_of(report, "autotune")
    evidence = dict(finding.evidence)
    assert report.verdict == "FAIL"
    assert finding.key == f"config:{WRONG_BLOCK}#1"
    assert finding.title.startswith(
        f"autotuner {WRONG_BLOCK} configuration 1 (BLOCK=16, num_warps=2, num_stages=3): y "
    )
    assert (evidence["autotuner"], evidence["configuration"]) == (WRONG_BLOCK, 1)
    assert evidence["config"] == "BLOCK=16, num_warps=2, num_stages=3"
    failing = [
        case for case, count in evidence["cases"].items() if not count.startswith("failed 0")
    ]
    assert failing == ["default values @ boundary cols=17 [float32]"]
    assert finding.probe is not None
    assert finding.probe.plan.steps == (Step(autotune=(WRONG_BLOCK, 1)),)


def test_an_autotuner_right_in_every_configuration_passes(
    tiny_audit: Callable[..., AuditReport],
) -> None:
    report = tiny_audit(
        "row_scale",
        "autotuned_blocks.py::loops_over_blocks",
        ["autotune"],
        boundary_sizes_per_axis=2,
    )
    assert report.verdict == "PASS"
    assert report.findings == ()
    forced = [r for r in report.records if r.check == "autotune"]
    # one probe finds the autotuner, then 3 configurations x 5 cases
    assert len(forced) == 1 + 3 * 5


def test_a_forced_configuration_and_the_contended_runs_replay_from_a_report() -> None:
    plan = RunPlan(
        steps=(
            Step(autotune=(WRONG_BLOCK, 2)),
            Step(noise=True, keep=False),
            Step(threads=4),
            Step(memory=True),
        )
    )
    assert RunPlan.from_json(plan.to_json()) == plan
    # plans that use none of them read as they did before
    assert set(Step().to_json()) == {
        "case",
        "poison",
        "reuse",
        "keep",
        "scrub",
        "settle_s",
        "timed",
        "profiled",
    }
