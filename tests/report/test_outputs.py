"""The report's drawing library loaded while a GPU audit runs: only on a GPU, and never in
the way of the report drawn after it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from kernelaudit.findings import AuditReport, Finding, write_reports

_LOADED = """
import sys
from kernelaudit.engine import beside
from kernelaudit.outputs import load_figures_ahead
load_figures_ahead({device!r})
beside.settle()
names = ("matplotlib.figure", "matplotlib.backends.backend_svg")
print(sorted(m for m in names if m in sys.modules))
"""

_DRAWN_AT_ONCE = """
import sys
from pathlib import Path
from kernelaudit.findings import read_reports
from kernelaudit.outputs import load_figures_ahead
from kernelaudit.report.html import write_html
reports = read_reports(Path(sys.argv[1]))
load_figures_ahead("cuda")
write_html(reports, Path(sys.argv[2]))
"""


@pytest.mark.parametrize(
    ("device", "loaded"),
    [
        ("cuda", "['matplotlib.backends.backend_svg', 'matplotlib.figure']"),
        ("cuda:1", "['matplotlib.backends.backend_svg', 'matplotlib.figure']"),
        # a CPU's cores run the candidate's calls: the import waits for the report
        ("cpu", "[]"),
    ],
)
def test_the_report_figures_library_is_loaded_ahead_only_on_a_gpu(device: str, loaded: str) -> None:
    ran = subprocess.run(
        [sys.executable, "-c", _LOADED.format(device=device)], capture_output=True, text=True
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.strip().splitlines()[-1] == loaded


def test_a_report_drawn_while_the_library_is_still_loading_has_its_figures(
    finding: Callable[..., Finding], report: Callable[..., AuditReport], tmp_path: Path
) -> None:
    # a GPU timing finding's figure is this report's first, and it imports a part of
    # matplotlib of its own: begun while the thread is inside another, both imports would
    # fail and leave matplotlib broken for the rest of the process
    timed = {"median_s": 2e-3, "p10_s": 1.9e-3, "p90_s": 2.2e-3, "samples_s": [2e-3] * 5}
    slow = finding("timing", "warn", "slower than the reference", {"candidate": timed})
    written = tmp_path / "report.json"
    write_reports([report(slow, device="cuda:0")], written)
    page = tmp_path / "report.html"
    ran = subprocess.run(
        [sys.executable, "-c", _DRAWN_AT_ONCE, str(written), str(page)],
        capture_output=True,
        text=True,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    html = page.read_text()
    assert "<svg" in html
    assert "could not be drawn" not in html
