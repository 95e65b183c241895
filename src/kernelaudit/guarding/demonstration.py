"""The guard's part of `kernelaudit demo`: the embedding example's two kernels behind a guard
in a short training run (`examples/embedding_backward/guard_training.py`), one that sums in
fp16 and must be caught in its hottest rows, one that sums in fp32 and must not be.

Each run is a child process in the candidates' sandbox (`runner.auditor.launch`): the example's
kernels are code to be checked, and the auditor's process never imports a kernel. The
child's guard writes its summary into the child's own folder, which this reads.
"""

from __future__ import annotations

import json
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from kernelaudit.runner.auditor.launch import run_python
from kernelaudit.runner.auditor.limits import CACHE_MOST_BYTES

SCRIPT = Path("embedding_backward") / "guard_training.py"

STEPS = 4
"""Training steps a run takes: every one is checked (the guard checks every early call)."""

RUNS = (("accumulate_in_low_precision", True), ("wide_accumulator", False))
"""(kernel, whether the guard must report failing calls)."""

_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class GuardRun:
    kernel: str
    must_fail: bool
    summary: dict[str, Any]
    seconds: float
    error: str = ""
    """Why the run gave no summary ("" when it did)."""

    @property
    def met(self) -> bool:
        return not self.error and (self.summary.get("failed", 0) > 0) == self.must_fail

    def describe(self) -> str:
        if self.error:
            return f"{self.kernel}: the run failed: {self.error}"
        said = (
            f"{self.kernel}: {self.summary['calls']} call(s), {self.summary['checked']} "
            f"checked, {self.summary['failed']} failed"
        )
        rows = next(iter(self.summary.get("failing_rows", {}).values()), {})
        if rows:
            row, calls = next(iter(rows.items()))
            said += f"; worst in row {row} ({calls} call(s))"
            counted = [
                count
                for failure in self.summary.get("failures", ())
                for _, at, count in failure.get("occurrences", ())
                if str(at) == str(row)
            ]
            if counted:
                said += f", the id of {max(counted):,} tokens a step"
        return said


def demonstrate(examples: Path, device: str) -> list[GuardRun]:
    """Both runs, at once, on `device`; none where the examples hold no guard script."""
    script = (examples / SCRIPT).resolve()
    if not script.is_file():
        return []
    with ThreadPoolExecutor(len(RUNS), thread_name_prefix="guard-run") as runs:
        return list(runs.map(lambda run: _run(script, *run, device), RUNS))


def show_demonstration(runs: list[GuardRun], console: Console) -> bool:
    """Say how each of `runs` (`demonstrate`) went; whether the guard caught the kernel that
    sums in fp16 and passed the other (True where the examples hold no guard script)."""
    if runs:
        console.print(
            f"\nkernelaudit.guard inside a training job (AdamW, Zipf tokens, {STEPS} steps, "
            "embedding gradient in fp16):"
        )
    for run in runs:
        colour = "green" if run.met else "red"
        expected = "must fail" if run.must_fail else "must pass"
        console.print(f"  [{colour}]{escape(run.describe())}[/] ({expected}; {run.seconds:.0f} s)")
    return all(run.met for run in runs)


def _run(script: Path, kernel: str, must_fail: bool, device: str) -> GuardRun:
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="guard-") as scratch:
        arguments = [str(script), "--kernel", kernel, "--steps", str(STEPS)]
        arguments += ["--records", scratch, "--device", device]
        # its records (one a failing call, each up to the guard's `keep_bytes`) go there too
        ended = run_python(
            arguments, device, _TIMEOUT_S, script, scratch, result_bytes=CACHE_MOST_BYTES
        )
        written = Path(scratch) / f"{kernel}-summary.json"
        seconds = time.perf_counter() - began
        if not written.is_file():
            why = "timed out" if ended.timed_out else ended.stderr_tail or "no summary written"
            return GuardRun(kernel, must_fail, {}, seconds, why)
        return GuardRun(kernel, must_fail, json.loads(written.read_text()), seconds)
