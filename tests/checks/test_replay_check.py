"""A cache is confirmed even when the candidate is wrong from its first call: a call on other
inputs that returns the first call's very bits does not follow its inputs. A cache keyed on the
version counter is told apart: derived state kept that way is a warning that says which writes
it misses, the results kept that way fail."""

from pathlib import Path

import pytest

from kernelaudit.engine.audit import audit
from kernelaudit.profiles import PROFILES

FIXTURES = Path(__file__).parent / "fixtures"
PROBLEM = FIXTURES / "row_scale.py"
CANDIDATES = FIXTURES / "row_scale_kernels.py"

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("candidate", "cached"),
    [("off_by_a_percent", False), ("off_by_a_percent_and_cached", True)],
)
def test_a_cache_shows_even_when_the_first_call_is_already_wrong(candidate: str, cached: bool):
    report = audit(
        PROBLEM, f"{CANDIDATES}::{candidate}", PROFILES["quick"], "cpu", ["numerics", "replay"]
    )
    assert report.verdict == "FAIL"
    assert any(f.check == "numerics" for f in report.failures)  # wrong from the first call
    replay = [f for f in report.failures if f.check == "replay"]
    if cached:
        keys = {f.key for f in replay}
        # reused buffers always hit an address-keyed cache; fresh tensors may land on the
        # freed addresses too, so other sequences can show it as well
        assert "same-buffers:repeated" in keys and all(k.endswith(":repeated") for k in keys)
        assert all("what call 1 returned on other inputs" in f.title for f in replay)
    else:
        assert replay == []


CACHES = FIXTURES / "weight_caches.py"


def _replay(candidate: str):
    report = audit(PROBLEM, f"{CACHES}::{candidate}", PROFILES["quick"], "cpu", ["replay"])
    return report, [f for f in report.findings if f.check == "replay"]


def test_state_kept_by_version_counter_is_a_warning_that_names_the_writes_it_misses():
    report, (finding,) = _replay("column_by_version")
    assert report.verdict == "PASS"
    assert finding.severity == "warn" and finding.key.startswith("same-buffers:version:")
    assert "version counters" in finding.title and "`.data`" in finding.title


def test_state_kept_by_object_misses_an_optimizer_step_and_fails():
    report, findings = _replay("column_by_id")
    assert report.verdict == "FAIL"
    assert all(f.severity == "fail" and ":version" not in f.key for f in findings)
    assert any("updated in place" in f.title for f in findings)


def test_results_kept_by_version_counter_fail():
    report, _ = _replay("result_by_version")
    assert report.verdict == "FAIL"
    assert any(f.key.startswith("same-buffers:version-result:") for f in report.failures)


@pytest.mark.parametrize(
    ("candidate", "severity"),
    [("column_by_id_and_off_when_large", "fail"), ("column_by_version_and_off_when_large", "warn")],
)
def test_a_cache_behind_a_first_failure_is_confirmed_where_the_candidate_is_right(
    candidate: str, severity: str
):
    # wrong at the base workload from its first call, right on smaller shapes: the sequences
    # run again at the smallest boundary shape, where every call is judged
    report = audit(
        PROBLEM, f"{CACHES}::{candidate}", PROFILES["quick"], "cpu", ["numerics", "replay"]
    )
    assert report.verdict == "FAIL"
    assert any(f.check == "numerics" for f in report.failures)
    found = [f for f in report.findings if f.check == "replay" and f.severity == severity]
    assert found, [(f.check, f.key, f.title) for f in report.findings]
    assert all(
        f.probe is not None and f.probe.case.size_map() != {"rows": 8, "cols": 16} for f in found
    )
    if severity == "warn":
        assert any(f.key.startswith("same-buffers:version:") for f in found)
    else:
        assert any("updated in place" in f.title for f in found)
