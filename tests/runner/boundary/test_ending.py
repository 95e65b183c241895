"""A child that ends at once still hands over everything it wrote, with its own exit status."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap


def _run(body: str) -> subprocess.CompletedProcess[str]:
    code = textwrap.dedent(
        """
        import atexit, sys
        from kernelaudit.runner.boundary.ending import end_now
        atexit.register(lambda: print("exit hook", flush=True))
        """
    ) + textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )


def test_unflushed_output_is_delivered_and_the_status_kept() -> None:
    done = _run(
        """
        sys.stdout.write("answer without a newline")
        sys.stderr.write("a note")
        end_now(3)
        """
    )
    assert done.returncode == 3
    assert done.stdout == "answer without a newline"  # no exit hook ran after it
    assert done.stderr == "a note"


def test_a_closed_output_does_not_keep_the_process_alive() -> None:
    done = _run(
        """
        sys.stdout.close()
        end_now(0)
        """
    )
    assert done.returncode == 0
    assert done.stderr == ""
