"""Without a GPU, the example kernels' own tests (tests/examples/kernels/) run through Triton's
interpreter, which must be switched on before triton is first imported: this process may have
imported it already, so they run in one fresh pytest process with TRITON_INTERPRET=1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

KERNEL_TESTS = Path(__file__).parent / "kernels"


@pytest.mark.skipif(
    torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1",
    reason="the kernel tests run in this process already",
)
def test_example_kernels_pass_under_the_triton_interpreter():
    done = subprocess.run(
        [sys.executable, "-m", "pytest", str(KERNEL_TESTS), "-q", "-p", "no:cacheprovider"],
        env={**os.environ, "TRITON_INTERPRET": "1"},
        cwd=KERNEL_TESTS.parents[2],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-2000:]
