"""A Triton interpreter that fails correct kernels is named before an audit on a CPU, and in its
report: Triton up to 3.6 with NumPy 2.4 or later cannot run a loop bounded by a kernel argument."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelaudit.cli import main
from kernelaudit.engine.audit import environment
from kernelaudit.interpret import versions

ROOT = Path(__file__).parents[1]


def _installed(monkeypatch: pytest.MonkeyPatch, **found: str) -> None:
    """Pretend these versions are installed (and nothing else), for the interpreter's check
    alone: every other package keeps its own."""
    monkeypatch.setattr(versions, "_version", found.get)


@pytest.mark.parametrize(
    ("triton", "numpy", "defective"),
    [
        ("3.6.0", "2.4.6", True),
        ("3.5.1", "2.5.0rc1", True),
        ("3.7.0", "2.4.6", False),
        ("3.9.0", "2.5.2", False),
        ("3.6.0", "2.3.5", False),
        ("3.6.0", "1.26.4", False),
    ],
)
def test_the_interpreter_defect_is_named_for_the_versions_that_have_it(
    monkeypatch: pytest.MonkeyPatch, triton: str, numpy: str, defective: bool
) -> None:
    _installed(monkeypatch, triton=triton, numpy=numpy)
    found = versions.interpreter_defects()
    assert bool(found) == defective
    if defective:
        assert f"Triton {triton}" in found[0] and f"NumPy {numpy}" in found[0]
        assert "triton>=3.7" in found[0]


def test_without_triton_nothing_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(monkeypatch, numpy="2.4.6")
    assert versions.interpreter_defects() == ()


def test_a_cpu_audit_warns_before_it_starts_and_its_report_keeps_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _installed(monkeypatch, triton="3.6.0", numpy="2.4.6")
    assert ("triton interpreter", versions.interpreter_defects()[0]) in environment("cpu")
    report = tmp_path / "report.json"
    problem = ROOT / "problem" / "fixtures" / "good.py"
    candidate = ROOT / "cli" / "fixtures" / "candidates.py"
    command = ["check", str(problem), f"{candidate}::scale", "--profile", "quick"]
    code = main([*command, "--device", "cpu", "--checks", "numerics", "--json", str(report)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "warning: Triton 3.6.0's interpreter" in printed.replace("\n", " ")
    assert printed.index("warning: Triton") < printed.index("PASS")
    assert "triton interpreter" in report.read_text()
