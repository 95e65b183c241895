"""On a CPU, a Triton candidate that launches none of its kernels is caught as the GPU's
profiler catches a fallback: through the launches Triton's interpreter makes."""

from pathlib import Path

import pytest

from kernelaudit.engine.audit import audit
from kernelaudit.profiles import PROFILES

FIXTURES = Path(__file__).parent / "fixtures"
PROBLEM = FIXTURES / "large_rows.py"
CANDIDATES = FIXTURES / "double_launches.py"

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("candidate", "verdict"),
    [
        ("launches", "PASS"),
        ("launches_through_a_helper", "PASS"),
        ("hands_it_to_torch", "FAIL"),
        # names no kernel, but its file defines them: written, then left for torch
        ("plain_torch", "FAIL"),
        # no Triton anywhere in its file: nothing to launch
        (f"{FIXTURES / 'torch_only.py'}::plain_torch", "PASS"),
    ],
)
def test_a_triton_candidate_that_launches_none_of_its_kernels_fails_on_a_cpu(
    candidate: str, verdict: str
) -> None:
    spec = candidate if "::" in candidate else f"{CANDIDATES}::{candidate}"
    report = audit(PROBLEM, spec, PROFILES["quick"], "cpu", ["kernels", "timing"])
    found = [f for f in report.findings if f.check == "kernels"]
    assert report.verdict == verdict, [f.title for f in report.findings]
    if verdict == "FAIL":
        assert [f.key for f in found] == ["no-triton-launch"]
        assert "launched none of them" in found[0].title
        # reported at the workload it was seen at: a smaller case may go to torch rightly
        assert found[0].shrink_steps == ()
        assert found[0].probe is not None and found[0].probe.case == found[0].original
        assert found[0].probe.case.size_map() == {"rows": 64, "cols": 4096}
    else:
        assert found == []
    # on a CPU the check still says what it could not look at, but a launch it did not see is
    # a failure it saw, not a risk the verdict leaves unconfirmed
    assert "only whether a Triton candidate launches" in dict(report.unverified)["kernels"]
    assert report.unconfirmed == ()


def test_the_kernels_check_chosen_alone_on_a_cpu_judges_the_numerics_sweep() -> None:
    # nothing timed: the calls at the first workload the sweep makes are the ones judged
    report = audit(
        PROBLEM, f"{CANDIDATES}::hands_it_to_torch", PROFILES["quick"], "cpu", ["kernels"]
    )
    assert report.verdict == "FAIL", [f.title for f in report.findings]
    assert [f.key for f in report.failures] == ["no-triton-launch"]
