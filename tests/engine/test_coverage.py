"""A report says which of its checks could not run on the machine, and why."""

from pathlib import Path

from kernelaudit.engine.audit import audit
from kernelaudit.profiles import PROFILES

ROOT = Path(__file__).parents[1]
PROBLEM = ROOT / "problem" / "fixtures" / "good.py"
CANDIDATES = ROOT / "cli" / "fixtures" / "candidates.py"


def test_on_a_cpu_the_gpu_only_checks_are_listed_as_not_verified_and_nothing_else():
    checks = ["numerics", "races", "memory", "kernels", "sanitizer", "large-tensors"]
    report = audit(PROBLEM, f"{CANDIDATES}::scale", PROFILES["quick"], "cpu", checks)
    assert report.verdict == "PASS"
    missing = dict(report.unverified)
    # large-tensors is not part of the quick profile: not asked for, so not missing
    assert set(missing) == {"races", "memory", "kernels", "sanitizer"}
    assert all(why.startswith("needs a CUDA device") for why in missing.values())
    assert report.to_json()["unverified"] == missing
