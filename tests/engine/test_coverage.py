"""A report says which of its checks could not run on the machine, and why."""

from dataclasses import replace
from pathlib import Path

from kernelaudit.checks.timing import Timing
from kernelaudit.engine.audit import audit
from kernelaudit.findings import Finding, unconfirmed_of
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


def test_every_chosen_check_says_what_it_did():
    checks = [
        "numerics",
        "races",
        "kernels",
        "gradients",
        "training",
        "large-tensors",
        "triton-bounds",
        "autotune",
    ]
    default = replace(PROFILES["default"], boundary_sizes_per_axis=1, layouts=())
    report = audit(PROBLEM, f"{CANDIDATES}::scale", default, "cpu", checks)
    said = dict(report.coverage)
    assert set(said) == {"execution", *checks}  # every chosen check (execution always runs)
    assert said["numerics"] == "ran"
    assert said["races"] == "could not run here: needs a CUDA device"
    assert said["large-tensors"].startswith("could not run here: needs a CUDA device")
    assert said["kernels"].startswith("ran in part: needs a CUDA device for the rest")
    assert said["gradients"].startswith("not applicable: the problem takes no upstream gradient")
    assert said["training"].startswith("not applicable: the problem plugs into no slot")
    assert said["triton-bounds"] == "not applicable: the candidate launched no Triton kernel"
    assert said["autotune"] == (
        "not applicable: the candidate reaches no autotuner with several configurations"
    )
    assert report.to_json()["coverage"] == said
    quick = audit(PROBLEM, f"{CANDIDATES}::scale", PROFILES["quick"], "cpu", ["large-tensors"])
    said = dict(quick.coverage)
    assert said["large-tensors"] == (
        "not applicable: the quick profile makes no case past 2^31 elements"
    )


def test_a_plain_run_that_cannot_start_is_a_check_that_did_not_run(monkeypatch):
    import kernelaudit.checks.unwatched as unwatched

    def cannot_start(*args, **kwargs):
        raise OSError("no room for a process")

    monkeypatch.setattr(unwatched, "run_plain", cannot_start)
    report = audit(PROBLEM, f"{CANDIDATES}::scale", PROFILES["quick"], "cpu", ["unwatched"])
    said = dict(report.coverage)
    assert said["unwatched"] == (
        "could not run here: the plain run could not start: no room for a process"
    )
    # listed with what this run could not verify, which --strict turns into exit code 1
    assert "plain run could not start" in dict(report.unverified)["unwatched"]


def test_a_check_whose_optional_cases_the_budget_left_out_ran_in_part():
    # a problem with optional cases (value variants past the covering set, at two dtypes)
    problem = ROOT.parent / "examples" / "layernorm" / "problem.py"
    candidate = ROOT / "oracle" / "fixtures" / "single_pass_layernorms.py"
    tight = replace(PROFILES["default"], budget_s=8.0, layouts=())
    report = audit(problem, f"{candidate}::single_pass", tight, "cpu", ["numerics"])
    left = sum(count for where, count in report.untried if where.startswith("numerics @"))
    assert left > 0, report.untried  # the budget's doing, listed case by case
    said = dict(report.coverage)["numerics"]
    assert said == (
        f"ran in part: the time budget left {left} optional case{'s' * (left != 1)} untried "
        "(--budget SECONDS gives it more)"
    )
    # the user's budget, not the machine's limit: nothing unverified for --strict
    assert "numerics" not in dict(report.unverified)


def test_a_check_whose_required_cases_the_budget_left_out_is_not_verified():
    """Past `REQUIRED_MOST` budgets even the cases every audit runs are cut: the check says how
    many, lists them, and is not verified, which --strict turns into exit code 1."""
    problem = ROOT.parent / "examples" / "layernorm" / "problem.py"
    candidate = ROOT / "oracle" / "fixtures" / "single_pass_layernorms.py"
    tiny = replace(PROFILES["default"], budget_s=0.15, layouts=())
    report = audit(problem, f"{candidate}::single_pass", tiny, "cpu", ["numerics"])
    left = sum(count for where, count in report.untried if where.startswith("numerics @"))
    cut = int(dict(report.budget)["probes_required_untried"])
    assert 0 < cut <= left == dict(report.budget)["probes_untried"]
    optional = left - cut
    said = dict(report.coverage)["numerics"]
    assert said == (
        f"ran in part: the time budget left {cut} of the cases every audit runs and "
        f"{optional} optional case{'s' * (optional != 1)} untried, their estimate being past "
        "10 budgets (--budget SECONDS or --profile thorough runs more)"
    )
    # the same words in every audit, for a corpus's runs to group by
    assert dict(report.unverified)["numerics"] == (
        "ran in part: the time budget left some of the cases every audit runs untried, their "
        "estimate being past 10 budgets (--budget SECONDS or --profile thorough runs more)"
    )
    assert report.verdict == "PASS"  # what did run, the candidate got right


def test_checks_that_watch_the_sweep_alone_are_not_verified_where_its_cases_were_cut():
    """Chosen alone, the execution and bounds checks judge the numerics sweep's cases: what the
    budget cut of those is theirs, and --strict counts it."""
    problem = ROOT.parent / "examples" / "layernorm" / "problem.py"
    candidate = ROOT / "oracle" / "fixtures" / "single_pass_layernorms.py"
    tiny = replace(PROFILES["default"], budget_s=0.15, layouts=())
    report = audit(problem, f"{candidate}::single_pass", tiny, "cpu", ["execution", "bounds"])
    cut = int(dict(report.budget)["probes_required_untried"])
    assert cut > 0
    for name in ("execution", "bounds"):
        assert dict(report.coverage)[name].startswith(
            f"ran in part: the time budget left {cut} of the cases every audit runs"
        )
        assert "cases every audit runs untried" in dict(report.unverified)[name]


def _finding(check: str, severity: str) -> Finding:
    return Finding("F1", check, "k", severity, "t", (), None, None, 1, 1)  # type: ignore[arg-type]


def test_a_risk_is_unconfirmed_only_where_the_device_leaves_it_so_and_nothing_failed():
    # the checks this device leaves something unverified in
    unverified_here = ["tripwires", "kernels", "races"]
    findings = [
        _finding("tripwires", "note"),
        _finding("kernels", "fail"),  # seen here: a failure, confirmed
        _finding("timing", "note"),  # a check the device leaves nothing unverified in
    ]
    assert unconfirmed_of(unverified_here, findings) == ("tripwires",)
    assert unconfirmed_of(unverified_here, findings[1:]) == ()


def test_a_check_this_audit_alone_left_unsettled_is_no_unconfirmed_risk(monkeypatch):
    # the host too busy for the timing check to settle: not verified, but not the candidate's
    monkeypatch.setattr(Timing, "ran_in_part", lambda self, ctx: "the host was too busy")
    checks = ["numerics", "timing"]
    report = audit(PROBLEM, f"{CANDIDATES}::scale", PROFILES["quick"], "cpu", checks)
    assert dict(report.unverified)["timing"] == "the host was too busy"
    assert any(f.check == "timing" for f in report.findings)  # its note of the times
    assert report.unconfirmed == ()
