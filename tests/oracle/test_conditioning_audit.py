"""Constant rows end to end: a correct layer normalisation whose statistics come from one pass
(blocks merged as a fused kernel merges its tiles) passes the default profile's constant rows,
where its variance is a rounding residue that 1/sqrt(eps) amplifies and the baseline's may be
exact (`oracle.conditioning` judges that case by the error of a correct kernel on rows just
like it), and its twin that forgets epsilon still fails there."""

from dataclasses import replace
from pathlib import Path

import pytest

from kernelaudit.engine.audit import audit
from kernelaudit.profiles import PROFILES

ROOT = Path(__file__).parents[2]
PROBLEM = ROOT / "examples" / "layernorm" / "problem.py"
CANDIDATES = Path(__file__).parent / "fixtures" / "single_pass_layernorms.py"

# the default profile's draws on constant rows, at the workload and the boundary shapes
CONSTANT_ROWS = replace(
    PROFILES["default"], float_distributions=("normal", "constant_rows"), layouts=(), seeds=1
)

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("candidate", "verdict"), [("single_pass", "PASS"), ("single_pass_without_epsilon", "FAIL")]
)
def test_a_single_pass_layernorm_on_constant_rows(candidate: str, verdict: str) -> None:
    report = audit(PROBLEM, f"{CANDIDATES}::{candidate}", CONSTANT_ROWS, "cpu", ["numerics"])
    assert report.verdict == verdict, [f.title for f in report.failures]
    cases = {r.case.values for r in report.records}
    assert any("constant_rows" in dict(values).values() for values in cases)
    if verdict == "FAIL":
        failing = [f for f in report.failures if f.check == "numerics"]
        assert any("constant_rows" in str(f.original.values) for f in failing if f.original)
