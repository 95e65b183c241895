"""Suite-wide ordering (the longest tests first), and the `device` fixtures: each test that
takes one runs on the CPU and, marked `gpu`, on a CUDA device where there is one.

The suite runs on two processes (`pytest -n 2 --dist load --maxschedchunk 1`): each starts on
two tests, then takes one more whenever it comes free. Started last, an audit of a bundled
example leaves one process busy for minutes while the other idles; started first, the two share
them out and the many short tests fill in around them. (Without `--maxschedchunk 1` the first
eighth of the suite goes to one process in a block, long tests and all.)

The processes share the host as a corpus's slots do: each tells the audits it runs their share
of the cores (KERNELAUDIT_THREADS), or every audit sizes its thread pools, and those of the
processes it starts, to the whole machine. Measured on a 2-core CPU: two demo audits at once
took 146 s each that way, 63 s each with a core apiece (one alone: 54 s).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from kernelaudit.runner.auditor.sandbox import isolation
from kernelaudit.runner.auditor.threads import THREADS_VARIABLE, usable_cores


def pytest_configure(config: pytest.Config) -> None:
    processes = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if processes.isdigit() and int(processes) > 1:
        # a share set already (by whoever runs the suite, or kernelaudit's pytest plugin) holds
        told = os.environ.get(THREADS_VARIABLE, "")
        share = int(told) if told.isdigit() else max(1, usable_cores() // int(processes))
        os.environ[THREADS_VARIABLE] = str(share)
        torch.set_num_threads(share)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Where no sandbox can start, say so at the end of the run: the tests that confine
    candidates were skipped, and a run that only lists skips would hide it."""
    found = isolation()
    if not found.confined:
        terminalreporter.write_line(
            f"the sandbox's tests were skipped: {found.reason} (README, 'Run the tests')",
            yellow=True,
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # sorted() is stable: within each group the collection order stays as it was
    items[:] = sorted(items, key=lambda item: item.get_closest_marker("long") is None)


DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
        ],
    ),
]


@pytest.fixture(scope="session", autouse=True)
def _reports_hold_to_their_schema() -> Iterator[None]:
    """Every report file written in the tests' processes holds to the published schema
    (`kernelaudit.report.schema`): a field added to the report and not to the schema fails
    whichever test wrote it."""
    from kernelaudit import findings
    from kernelaudit.report.schema import validate_document

    real = findings.write_atomically

    def validated(path: Path, text: str) -> None:
        validate_document(json.loads(text))
        real(path, text)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(findings, "write_atomically", validated)
        yield


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module", params=DEVICES)
def module_device(request: pytest.FixtureRequest) -> str:
    """`device` for fixtures that live as long as their module (a worker kept across tests)."""
    return request.param


@pytest.fixture
def staged_copies(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The element counts of the copies to the host that go through the page-locked staging
    buffers (`host_copies._staged`), in order, while the test runs."""
    from kernelaudit import host_copies

    staged: list[int] = []
    real = host_copies._staged

    def spy(value: torch.Tensor, copy: torch.Tensor) -> object:
        staged.append(value.numel())
        return real(value, copy)

    monkeypatch.setattr(host_copies, "_staged", spy)
    return staged


@pytest.fixture
def host_memory_run() -> Callable[..., list[str]]:
    """Run a Python script with arguments in a process of its own, without a GPU, and give
    back the lines it printed. Large blocks are mapped and unmapped as they come and go there,
    so that the high-water mark of its resident memory (`ru_maxrss`, which such a script
    reads before and after what it measures) is that of the tensors alive at once (glibc's
    `MALLOC_MMAP_THRESHOLD_`: the Python of Debian and of PyPI's torch wheels)."""

    def run(script: str, *args: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-c", script, *args],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "MALLOC_MMAP_THRESHOLD_": str(1 << 20)},
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    return run
