"""The runner's trust boundary as the package lays it out: no module outside the worker's
folder loads the code that runs beside the candidate."""

from __future__ import annotations

import subprocess
import sys

_IMPORT_ALL_BUT_THE_WORKER = """
import importlib, pkgutil, sys

def import_under(package):
    for found in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        name = found.name
        if name == "kernelaudit.runner.worker" or name.endswith(".__main__"):
            continue
        module = importlib.import_module(name)
        if found.ispkg:
            import_under(module)

import_under(importlib.import_module("kernelaudit"))
print(" ".join(sorted(m for m in sys.modules if m.startswith("kernelaudit.runner.worker"))))
"""


def test_no_module_outside_the_worker_loads_the_worker() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL_BUT_THE_WORKER],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert done.stdout.split() == []


def test_the_worker_is_started_from_its_folder() -> None:
    from kernelaudit.runner.auditor.prestart import WORKER
    from kernelaudit.runner.boundary.messages import CANDIDATE_MAINS

    assert WORKER.startswith("kernelaudit.runner.worker.")
    assert WORKER in CANDIDATE_MAINS
