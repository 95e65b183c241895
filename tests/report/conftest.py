"""What the report tests share: the report file a real quick audit on the CPU writes, a real
audit whose findings name source lines, and small reports built by hand."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernelaudit.checks.base import Probe
from kernelaudit.cli import main
from kernelaudit.engine.audit import audit
from kernelaudit.findings import AuditReport, Finding
from kernelaudit.inputs.case import Case

SOFTMAX = Path(__file__).parents[2] / "examples" / "softmax"
INTERPRETED = Path(__file__).parents[1] / "interpret" / "fixtures"
PATCHED_TIMER = "\n_real = time.perf_counter\ntime.perf_counter = lambda: _real() / 10\n"


@pytest.fixture(scope="session")
def checked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The JSON report `kernelaudit check` writes for the softmax example's passing candidate
    and the one that leaves NaN in fully masked rows, with the checks that catch it, a check
    that runs only in part on a CPU (kernels) and the source scan: about 15 s on a CPU."""
    path = tmp_path_factory.mktemp("check") / "report.json"
    code = main(
        [
            "check",
            str(SOFTMAX / "problem.py"),
            f"{SOFTMAX / 'candidates.py'}::guards_masked_rows",
            f"{SOFTMAX / 'candidates.py'}::nan_on_masked_rows",
            *("--profile", "quick", "--device", "cpu", "--json", str(path)),
            *("--checks", "execution,unwritten,numerics,triton-bounds,kernels,tripwires"),
        ]
    )
    assert code == 1 and path.is_file(), "the audit should fail nan_on_masked_rows"
    return path


@pytest.fixture(scope="session")
def located(tmp_path_factory: pytest.TempPathFactory) -> AuditReport:
    """A real audit whose findings name source lines, of a copy of the interpreter tests'
    scale kernels with a patched timer added: triton-bounds sees a store one past the end of
    the output, and the source scan the timer. A few seconds on a CPU."""
    folder = tmp_path_factory.mktemp("located")
    kernels = folder / "scale_kernels.py"
    kernels.write_text((INTERPRETED / "scale_kernels.py").read_text() + PATCHED_TIMER)
    candidate = f"{kernels}::store_one_past_the_end"
    checks = ["execution", "triton-bounds", "tripwires"]
    return audit(INTERPRETED / "scale.py", candidate, "quick", "cpu", checks)


@pytest.fixture
def finding() -> Callable[..., Finding]:
    """finding(check, severity, title, evidence={...}, probed=False, **changes): a finding
    as a check of that name makes it; `probed` gives it a shrunk case to replay."""

    def make(
        check: str,
        severity: str,
        title: str,
        evidence: dict[str, Any] | None = None,
        probed: bool = False,
        **changes: Any,
    ) -> Finding:
        case = Case((("n", 17),), values=(("x", "outliers"),), label="boundary n=17")
        fields: dict[str, Any] = {
            "id": "F1",
            "check": check,
            "key": f"{check}:{title}",
            "severity": severity,
            "title": title,
            "evidence": tuple((evidence or {}).items()),
            "probe": Probe(check, case) if probed else None,
            "original": case if probed else None,
            "occurrences": 3,
            "probes": 12,
        }
        return Finding(**{**fields, **changes})

    return make


@pytest.fixture
def report() -> Callable[..., AuditReport]:
    """report(*findings, **changes): a report of a candidate in /kernels/candidate.py on the
    problem "scale", its verdict FAIL when a finding fails."""

    def make(*findings: Finding, **changes: Any) -> AuditReport:
        fields: dict[str, Any] = {
            "problem": "scale",
            "problem_path": "/problems/scale.py",
            "candidate": "candidate.py::scale",
            "candidate_path": "/kernels/candidate.py",
            "candidate_function": "scale",
            "profile": "quick",
            "device": "cpu",
            "verdict": "FAIL" if any(f.severity == "fail" for f in findings) else "PASS",
            "findings": findings,
            "records": (),
            "seconds": 2.25,
            "isolation": "bubblewrap: private file system, process ids, user and network",
        }
        return AuditReport(**{**fields, **changes})

    return make
