"""kernelaudit's pytest plugin, installed with the package (the `pytest11` entry point).

It adds:

- command-line options that set every audit of the run (`kernelaudit.testing`):
  `--kernelaudit-profile`, `--kernelaudit-budget SECONDS`, `--kernelaudit-device`,
  `--kernelaudit-reports DIR`, the folder every audit's JSON report is written to, with an
  index of them all (`index.json`, `index.html`) at the end of the run, and
  `--kernelaudit-strict`, which fails a passing audit that left checks unverified on this
  machine (without it, such a pass is listed in pytest's warnings summary);
- the marker `@pytest.mark.kernelaudit(problem, candidate, **options)` and the fixture
  `kernelaudit_report`: a test marked with a problem and a candidate gets the report of their
  audit, and fails with its findings when the audit does;
- the fixture `kernelaudit_audit`: `assert_passes` with the marker's options as defaults, for
  tests that audit several candidates or build their problem in code.

Under pytest-xdist each process tells its audits their share of the host's cores, as a corpus's
slots do, and takes its own GPU in turn where there are several. On success the plugin prints
nothing of its own but those warnings.

Loading it imports nothing heavy: torch and the engine are imported when an audit runs.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernelaudit import testing
from kernelaudit.runner.auditor.threads import THREADS_VARIABLE, usable_cores

PROFILES = ("quick", "default", "thorough")

_BEGAN = pytest.StashKey[float]()
"""When the run began: the reports folder's index lists the reports written since."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kernelaudit", "kernelaudit audits (kernelaudit.testing)")
    group.addoption(
        "--kernelaudit-profile",
        choices=PROFILES,
        help="the profile of every audit in the run, whatever the tests ask for",
    )
    group.addoption(
        "--kernelaudit-budget",
        type=float,
        metavar="SECONDS",
        help="the time budget of every audit in the run, overriding the profile's",
    )
    group.addoption(
        "--kernelaudit-device",
        metavar="DEVICE",
        help="cpu, cuda or cuda:N for every audit (default: each pytest-xdist process its "
        "own GPU in turn, where there are several)",
    )
    group.addoption(
        "--kernelaudit-reports",
        metavar="DIR",
        type=Path,
        help="write every audit's JSON report to DIR, and an index of them at the end",
    )
    group.addoption(
        "--kernelaudit-strict",
        action="store_true",
        help="fail an audit that passes but left checks unverified on this machine (a race "
        "on a CPU, say), as `kernelaudit check --strict` exits 1",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "kernelaudit(problem, candidate, **options): audit candidate against problem for the "
        "kernelaudit_report fixture; options as kernelaudit.testing.assert_passes takes them",
    )
    config.stash[_BEGAN] = time.time()
    reports = config.getoption("kernelaudit_reports")
    testing.configure(
        testing.Settings(
            profile=config.getoption("kernelaudit_profile"),
            budget=config.getoption("kernelaudit_budget"),
            device=config.getoption("kernelaudit_device"),
            reports=reports.resolve() if reports else None,
            strict=config.getoption("kernelaudit_strict"),
        )
    )
    processes = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if processes.isdigit() and int(processes) > 1 and THREADS_VARIABLE not in os.environ:
        os.environ[THREADS_VARIABLE] = str(max(1, usable_cores() // int(processes)))


@pytest.fixture
def kernelaudit_audit(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """`kernelaudit.testing.assert_passes`, with the test's `kernelaudit` marker's options
    (other than problem and candidate) as defaults, and relative paths read from the test
    file's folder where they are there."""
    marker = request.node.get_closest_marker("kernelaudit")
    options = dict(marker.kwargs) if marker else {}
    options.pop("problem", None)
    options.pop("candidate", None)
    bound = testing.with_options(**options)

    def audit(problem: Any, candidate: Any, **more: Any) -> Any:
        return bound(_beside(request, problem), _beside(request, candidate), **more)

    return audit


@pytest.fixture
def kernelaudit_report(request: pytest.FixtureRequest) -> Any:
    """The report of the audit the test's `kernelaudit` marker declares; the test fails with
    the audit's findings when it does not pass."""
    marker = request.node.get_closest_marker("kernelaudit")
    if marker is None:
        raise pytest.UsageError(
            f"{request.node.nodeid} uses kernelaudit_report without a kernelaudit marker: add "
            '@pytest.mark.kernelaudit(problem="problem.py", candidate="kernel.py::function")'
        )
    options = dict(marker.kwargs)
    named = list(marker.args)
    problem = options.pop("problem", named[0] if named else None)
    candidate = options.pop("candidate", named[1] if len(named) > 1 else None)
    if problem is None or candidate is None:
        raise pytest.UsageError(
            f"{request.node.nodeid}: the kernelaudit marker names a problem and a candidate, "
            'e.g. @pytest.mark.kernelaudit(problem="problem.py", candidate="kernel.py::fn")'
        )
    return testing.assert_passes(_beside(request, problem), _beside(request, candidate), **options)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Index every report the run wrote (once, in the process that ran the session)."""
    folder = testing.settings().reports
    if folder is None or hasattr(session.config, "workerinput") or not folder.is_dir():
        return
    began = session.config.stash.get(_BEGAN, 0.0)
    # this run's reports: a folder kept from an earlier run keeps its files, not in the index
    files = sorted(
        p for p in folder.glob("*.json") if p.name != "index.json" and p.stat().st_mtime >= began
    )
    if not files:
        return
    from kernelaudit.findings import read_reports
    from kernelaudit.report.html import write_html
    from kernelaudit.report.seal import write_atomically

    reports, entries = [], []
    for file in files:
        for report in read_reports(file):
            reports.append(report)
            entries.append(
                {
                    "report": file.name,
                    "problem": report.problem,
                    "candidate": report.candidate,
                    "verdict": report.verdict,
                    "failing_checks": sorted({f.check for f in report.failures}),
                    "seconds": report.seconds,
                }
            )
    write_atomically(folder / "index.json", json.dumps({"audits": entries}, indent=1) + "\n")
    write_html(reports, folder / "index.html")


def _beside(request: pytest.FixtureRequest, named: Any) -> Any:
    """A relative path in a marker, read from the test file's folder where it is there."""
    if not isinstance(named, str):
        return named
    file, sep, function = named.partition("::")
    here = Path(request.node.path).parent / file
    if not Path(file).is_absolute() and not Path(file).exists() and here.exists():
        return f"{here}{sep}{function}"
    return named
