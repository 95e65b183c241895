"""Audits spread over lanes give what one run in turn gives: the same verdicts, the reports in
the jobs' order, finding ids unique across them."""

from pathlib import Path

import pytest

from kernelaudit.engine.lanes import Job, audit_in_lanes, deal, lane_count
from kernelaudit.profiles import profile_named
from kernelaudit.report import html

FIXTURES = Path(__file__).parent / "fixtures"


def test_whole_problems_go_to_lanes_the_longest_first():
    jobs = [Job("b", "1"), Job("a", "1"), Job("a", "2"), Job("c", "1"), Job("a", "3")]
    assert deal(jobs) == [[1, 2, 4], [0], [3]]
    # with each job's expected seconds, the problem expected to take longest starts first
    assert deal(jobs, [5.0, 1.0, 1.0, 60.0, 1.0]) == [[3], [0], [1, 2, 4]]
    assert lane_count("cpu", jobs[1:3]) == 1  # never more lanes than problems


@pytest.mark.slow
def test_lanes_keep_the_order_the_verdicts_and_unique_finding_ids():
    add = str(FIXTURES / "plain_add.py")
    scale = str(FIXTURES / "recorded_inputs.py")
    jobs = [
        Job(add, f"{add}::subtracted"),
        Job(scale, f"{scale}::doubled"),
        Job(add, f"{add}::summed"),
        Job(scale, f"{scale}::tripled"),
    ]
    idle: list[int] = []
    drawn: dict[int, str] = {}
    reports = audit_in_lanes(
        jobs,
        profile_named("quick"),
        "cpu",
        2,
        checks=["execution", "numerics"],
        idle=lambda: idle.append(len(drawn)),
        drawn=drawn.__setitem__,
    )
    assert [r.candidate.split("::")[-1] for r in reports] == [
        "subtracted",
        "doubled",
        "summed",
        "tripled",
    ]
    assert [r.verdict for r in reports] == ["FAIL", "PASS", "PASS", "FAIL"]
    ids = [f.id for r in reports for f in r.findings]
    assert len(ids) == len(set(ids))
    assert all(f.id.startswith(f"C{k + 1}.") for k, r in enumerate(reports) for f in r.findings)
    # a lane went idle once the first problem's two reports were in, and each report's HTML
    # section came back drawn in its lane, as the page would draw it
    assert idle == [2]
    assert [html.section(r, k) for k, r in enumerate(reports)] == [drawn[k] for k in range(4)]
