"""The auditor's side of an interpreted run: start the child, stop it at its time limit, read
back what it saw.

The run starts as soon as it is made and goes on in the background, so an audit can start it
while it plans and collect it once its probes are done: writing the calls' tensors for the
child (a second for a case of a few hundred million elements) and the child's start (importing
torch, Triton and the candidate) cost seconds that the probes then hide.
"""

from __future__ import annotations

import json
import math
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch

from kernelaudit.interpret.records import Interpretation, UnreadableResult
from kernelaudit.runner.auditor.launch import exit_description, start_python, wait_then_end
from kernelaudit.runner.auditor.limits import FolderBound, passed_bound
from kernelaudit.runner.auditor.results import Refused, read_bounded
from kernelaudit.runner.auditor.sandbox import cache_bound, job_bound
from kernelaudit.runner.boundary.messages import Call
from kernelaudit.runner.candidate import CandidateRef

_STDERR_TAIL_LINES = 3

_ORPHAN_GRACE_S = 30
"""How long past its time limit a child whose auditor never collects it ends by itself."""

RESULT_BYTES = 16 << 20
"""The most a run's result file may hold to be read. Its records are capped (`interpret.access`:
offsets and groups of lanes) and an honest one takes kilobytes; the file lies in a folder the
candidate's process can write, so one past this was written by something else there, and is
not read (the auditor's memory is not the candidate's to fill)."""


class InterpretedRun:
    """`calls` of `candidate` made under Triton's interpreter on the CPU, every memory access
    watched (see `kernelaudit.interpret.child`), in a child process started at once.

    inputs, outputs: the problem's input and output names, in declaration order.
    timeout_s: wall time for the whole run from now, the child's start included; `finish`
        kills the child's process group past it and keeps what the finished calls saw.
    host_memory_bytes: host memory the child's processes may hold (0: half of the machine's);
        `finish` kills them past it.
    """

    def __init__(
        self,
        candidate: CandidateRef,
        calls: Sequence[Call],
        inputs: Sequence[str],
        outputs: Sequence[str],
        timeout_s: float,
        host_memory_bytes: int = 0,
    ) -> None:
        self._calls = len(calls)
        self._timeout_s = timeout_s
        self._host_memory_bytes = host_memory_bytes
        self._deadline = time.monotonic() + timeout_s
        self._folder = tempfile.TemporaryDirectory()
        self._result = Path(self._folder.name) / "result.json"
        self._seen: Interpretation | None = None
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (held until `finish`)
        self._process: subprocess.Popen[bytes] | None = None
        self._unstarted = ""
        self._cache: FolderBound | None = None
        self._job: FolderBound | None = None
        self._started = threading.Event()
        self._collected = threading.Event()
        self._request: dict[str, object] | None = {
            "path": candidate.path,
            "function": candidate.function,
            "autograd": candidate.autograd_argument(),
            "inputs": list(inputs),
            "outputs": list(outputs),
            "calls": list(calls),  # nothing else holds these tensors: no one writes them
            "alarm_s": math.ceil(timeout_s) + _ORPHAN_GRACE_S,
        }
        threading.Thread(
            target=self._start, args=(candidate,), name="interpreted-run", daemon=True
        ).start()

    def _start(self, candidate: CandidateRef) -> None:
        """Write the request and start the child (in the background: see the module). The
        thread then waits until the run is collected: the sandbox ends the child with the
        thread that started it (`--die-with-parent` watches the starting thread). The calls'
        tensors are let go of once written."""
        try:
            self._cache = cache_bound(candidate.path)
            path = Path(self._folder.name) / "request.pt"
            request, self._request = self._request, None
            torch.save(request, path)
            del request
            self._job = job_bound(self._folder.name, RESULT_BYTES)
            self._process = start_python(
                ["-m", "kernelaudit.interpret.child", str(path), str(self._result)],
                "cpu",
                candidate.path,
                self._folder.name,
                # the interpreter runs on host memory: the child has no business with a device
                environment={"CUDA_VISIBLE_DEVICES": ""},
                stdout=self._stderr,
                stderr=self._stderr,
            )
        except Exception as error:  # a full disk, a sandbox that cannot start
            self._unstarted = f"{type(error).__name__}: {error}"
        finally:
            self._started.set()
        if self._process is not None:
            self._collected.wait()

    def finish(self) -> Interpretation:
        """Wait for the run (until its deadline) and return what it saw (the same again on
        later calls)."""
        if self._seen is None:
            self._seen = self._collect()
        return self._seen

    def _collect(self) -> Interpretation:
        self._started.wait()
        if self._process is None:
            self._stderr.close()
            self._folder.cleanup()
            return Interpretation(
                error=f"the interpreted run could not start: {self._unstarted}", cause="crash"
            )
        try:
            # whatever the candidate started goes with it
            waited = wait_then_end(
                self._process,
                self._deadline,
                self._host_memory_bytes,
                folders=(self._cache, self._job),
            )
        finally:
            self._collected.set()  # the starting thread may end
        try:
            self._stderr.seek(0)
            tail = self._stderr.read().decode(errors="replace").strip().splitlines()
            written = self._result.is_file()
            refused: Refused | None = None
            try:
                seen = _read(self._result) if written else None
            except Refused as error:
                seen, refused = None, error
        finally:
            self._stderr.close()
            self._folder.cleanup()
        cause, why = passed_bound(waited.over_memory, waited.over_disk)
        if cause:
            return replace(seen or Interpretation(), error=why, cause=cause)
        if refused is not None:
            # no honest run leaves it: something in the candidate's process wrote it
            return Interpretation(
                error=f"the interpreted run left a result that was refused: {refused.why}",
                cause=refused.kind,
            )
        if waited.timed_out:
            return replace(
                seen or Interpretation(),
                error=f"the interpreted run was still going after {self._timeout_s:.0f} s and "
                "was stopped",
                cause="timeout",
            )
        if seen is None or (seen.calls_done < self._calls and not seen.error):
            ended = (
                "left a result that was gone before it was read"
                if written and seen is None
                else f"stopped (it {exit_description(self._process, 0.0)})"
            )
            last = " / ".join(tail[-_STDERR_TAIL_LINES:]) or "no message"
            done = seen.calls_done if seen else 0
            return replace(
                seen or Interpretation(),
                error=f"the interpreted run {ended} after {done} of {self._calls} call(s): {last}",
                cause="crash",
            )
        return seen


def _read(result: Path) -> Interpretation | None:
    """What the run's result file says; None where it is gone. `Refused` where it is larger
    than `RESULT_BYTES`, not a regular file, or not the records the child writes: the child
    replaces the file whole (`os.replace`), so no honest run, stopped at any point, leaves one
    it cannot read."""
    try:
        data = read_bounded(result, RESULT_BYTES, "its records")
    except FileNotFoundError:
        return None
    try:
        return Interpretation.from_json(json.loads(data))
    except (ValueError, UnreadableResult, RecursionError) as error:
        raise Refused("bad-result", f"its result is not the run's records ({error})") from None
