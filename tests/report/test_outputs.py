"""Where the reports are written, and the drawing library loaded while a GPU audit runs."""

from __future__ import annotations

import subprocess
import sys

import pytest

_SCRIPT = """
import sys, threading
from kernelaudit.outputs import load_figures_ahead
load_figures_ahead({device!r})
for thread in threading.enumerate():
    if thread.name == "figures-ahead":
        thread.join()
names = ("matplotlib.figure", "matplotlib.backends.backend_svg")
print(sorted(m for m in names if m in sys.modules))
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
        [sys.executable, "-c", _SCRIPT.format(device=device)], capture_output=True, text=True
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.strip().splitlines()[-1] == loaded
