"""Run the candidate on the large case in a process of its own and read back the checked rows.

The process (`kernelaudit.large.child`) gets the candidate's environment, a session of its own
(killed whole on timeout) and a request that names only plain values; what it sends back is
read with `torch.load(weights_only=True)`, so a candidate cannot smuggle objects into the
auditor.

Its start (the sandbox, Python, torch: about 1.4 s of the check's 2.4-3.0 s for a small
problem on an H200's host) need not wait for the case: the check starts it while the probes
run (`Waiting`), and it waits, its own modules imported and nothing of the candidate's, until
the case's request is written. The case itself still runs after the probes, alone on the
device.
"""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import tempfile
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import torch

from kernelaudit.inputs.batch import axis_position
from kernelaudit.inputs.case import dtype_name
from kernelaudit.large.sizing import LargeCase
from kernelaudit.problem.dims import dim_size, resolve_shape
from kernelaudit.problem.spec import IndexInput, MaskInput, Problem, ScalarInput, TensorInput
from kernelaudit.runner.auditor.launch import ChildExit, end_group, finish_python, start_python
from kernelaudit.runner.auditor.limits import FolderBound, exited
from kernelaudit.runner.auditor.results import Refused, load_plain, read_bounded
from kernelaudit.runner.auditor.sandbox import job_bound
from kernelaudit.runner.candidate import CandidateRef


@dataclass(frozen=True)
class LargeRun:
    """What the candidate's process sent back: the checked rows, or why there are none.

    inputs: every tensor input as drawn, cut to the checked rows where it has the grown axis.
    outputs: the checked rows of every output.
    after: the checked rows of every input the contract lets the candidate mutate, after the
        call.
    kind: "" when the call ran; else "load", "draw" or "memory" (the run could not be made),
        "exception", "contract", "timeout", "crash", "host-memory", "disk", "too-large" or
        "bad-result" (the candidate failed on the case; the last two: its result file held more
        than the checked rows can fill, or what no `torch.load` of weights reads).
    """

    inputs: Mapping[str, torch.Tensor] = field(default_factory=dict)
    outputs: tuple[torch.Tensor, ...] = ()
    after: Mapping[str, torch.Tensor] = field(default_factory=dict)
    seconds: float = 0.0
    """How long the candidate's one call took, device work included."""
    peak_bytes: int = 0
    error: str = ""
    kind: str = ""


_RESULT_SLACK_BYTES = 1 << 20
"""What a large run's result may hold besides its tensors' elements: the pickled containers, a
message, the figures."""

SEED = 0
"""The seed the large case's inputs are drawn with, in the candidate's process and, where the
candidate raises, in the auditor for the reference's run (`checks.large_tensors`)."""


def scalar_value(inp: ScalarInput, sizes: Mapping[str, int]) -> object:
    """The argument's default: the size of its axis, or its own value."""
    return sizes[inp.axis] if inp.axis is not None else inp.value


def input_specs(problem: Problem, case: LargeCase) -> list[dict[str, Any]]:
    """How each input of the large case is drawn (`kernelaudit.large.draws.drawn`), as plain
    JSON values."""
    sizes = case.size_map()
    dtypes = problem.dtype_configs()[case.dtype_config]
    inputs: list[dict[str, Any]] = []
    for inp in problem.inputs:
        if isinstance(inp, ScalarInput):
            inputs.append({"name": inp.name, "kind": "scalar", "value": scalar_value(inp, sizes)})
            continue
        spec: dict[str, Any] = {
            "name": inp.name,
            "shape": list(resolve_shape(inp.shape, sizes)),
            "dtype": dtype_name(dtypes[inp.name]),
            "dim": axis_position(inp.shape, case.axis),
        }
        if isinstance(inp, TensorInput):
            spec["kind"] = "float"
            # the callers' guarantees, kept on the device too (`problem.domain`)
            spec.update(positive=inp.domain.positive, low=inp.domain.low, high=inp.domain.high)
        elif isinstance(inp, IndexInput):
            spec["kind"] = "index"
            spec["bound"] = dim_size(inp.bound, sizes)
            domain = inp.domain
            spec.update(sorted=domain.sorted_ids, unique=domain.unique_ids, below=domain.below)
        elif isinstance(inp, MaskInput):
            spec["kind"] = "additive" if inp.kind == "additive" else "mask"
            spec["min_kept"] = inp.domain.min_kept
        inputs.append(spec)
    return inputs


def request_for(
    problem: Problem, candidate: CandidateRef, case: LargeCase, device: str, seed: int
) -> dict[str, Any]:
    """The child's request, as plain JSON values."""
    sizes = case.size_map()
    dtypes = problem.dtype_configs()[case.dtype_config]
    outputs = [
        {
            "name": out.name,
            "shape": list(resolve_shape(out.shape, sizes)),
            "dtype": dtype_name(problem.output_dtype(out, dtypes)),
            "dim": axis_position(out.shape, case.axis),
        }
        for out in problem.outputs
    ]
    return {
        "path": candidate.path,
        "function": candidate.function,
        "device": device,
        "seed": seed,
        "inputs": input_specs(problem, case),
        "outputs": outputs,
        "slots": problem.contract.style == "destination",
        "mutates": list(problem.contract.mutates),
        "rows": list(case.rows()),
    }


class Waiting:
    """A large case's child in its sandbox and a scratch folder of its own. Started without
    its `request`, it imports its modules and waits for one (`run_large` writes it and tells
    it to go); with it, it reads it as it starts. `close` kills it where no case came (and an
    audit that ended another way leaves none behind)."""

    def __init__(
        self,
        candidate: CandidateRef,
        device: str,
        request: str | None = None,
        result_most: int = 0,
    ) -> None:
        self.candidate = candidate
        self.device = device
        self._folder = tempfile.TemporaryDirectory()
        self.folder = Path(self._folder.name)
        self.request, self.result = self.folder / "request.json", self.folder / "result.pt"
        # open as long as the child runs; `close` closes it
        self.stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115
        child = ["-m", "kernelaudit.large.child", str(self.request), str(self.result)]
        self.job: FolderBound | None = None
        """What its folder may hold once its request is written (`ask`)."""
        if request is not None:
            self.ask(request, result_most)
        self.process = start_python(
            child if request is not None else [*child, "--wait"],
            device,
            candidate.path,
            self.folder,
            stderr=self.stderr,
            cwd=self.folder,
            stdin=subprocess.DEVNULL if request is not None else subprocess.PIPE,
        )
        self._closed = weakref.finalize(
            self, _ended, self.process, self.stderr, self._folder.cleanup
        )

    def ask(self, request: str, result_most: int) -> None:
        """Write the request, before the child reads it, and hold the folder to it and a
        result of `result_most` bytes (`sandbox.job_bound`)."""
        self.request.write_text(request)
        self.job = job_bound(self.folder, result_most)

    def fits(self, candidate: CandidateRef, device: str) -> bool:
        """Whether this child can run `candidate`'s case on `device`: started for them, and
        still waiting."""
        same = (candidate, device) == (self.candidate, self.device)
        return same and self._closed.alive and exited(self.process) is None

    def go(self) -> None:
        """Tell a child started ahead that its request is written."""
        if self.process.stdin is not None:
            self.process.stdin.write(b"go\n")
            self.process.stdin.close()

    def close(self) -> None:
        """Kill the child (and all it started) if it still runs, and remove its folder."""
        self._closed()


def _ended(
    process: subprocess.Popen[bytes], stderr: IO[bytes], cleanup: Callable[[], None]
) -> None:
    end_group(process)
    if process.stdin is not None:
        process.stdin.close()
    stderr.close()
    cleanup()


def run_large(
    problem: Problem,
    candidate: CandidateRef,
    case: LargeCase,
    device: str,
    timeout_s: float,
    seed: int = SEED,
    waiting: Waiting | None = None,
) -> LargeRun:
    """Draw the large case on `device` in a process of its own, call the candidate once, and
    bring back the checked rows: in the child `waiting` where it was started for this
    candidate and device, else in one started now."""
    asked = request_for(problem, candidate, case, device, seed)
    request = json.dumps(asked)
    if waiting is not None and waiting.fits(candidate, device):
        started, waiting = waiting, None
        started.ask(request, result_bytes(asked))
        with contextlib.suppress(OSError):  # it ended already: what it left says why
            started.go()
    else:
        started = Waiting(candidate, device, request, result_bytes(asked))
    try:
        done = finish_python(
            started.process, started.stderr, timeout_s, candidate.path, job=started.job
        )
        return _read(started.result, done, timeout_s, asked)
    finally:
        started.close()
        if waiting is not None:
            waiting.close()


def result_bytes(request: Mapping[str, Any]) -> int:
    """The most bytes the child's result may hold to be read: the checked rows of every tensor
    input (before the call, and after it where the call may write them) and of every output, at
    eight bytes an element, and `_RESULT_SLACK_BYTES` for the rest. Only the request decides
    it, never the child: the result lies in a folder the candidate's process can write."""
    tensors, written, outputs = _checked_shapes(request)
    shapes = (*tensors.values(), *written.values(), *outputs)
    return _RESULT_SLACK_BYTES + sum(8 * math.prod(shape) for shape in shapes)


def _checked_shapes(
    request: Mapping[str, Any],
) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[int, ...]], list[tuple[int, ...]]]:
    """The shapes of the checked rows the child sends back: of every tensor input by name, of
    those the call may write, and of every output (the grown axis cut to the rows asked for)."""
    rows = len(request["rows"])

    def shape(spec: Mapping[str, Any]) -> tuple[int, ...]:
        sizes = list(spec["shape"])
        if spec.get("dim") is not None:
            sizes[spec["dim"]] = rows
        return tuple(sizes)

    tensors = {s["name"]: shape(s) for s in request["inputs"] if s["kind"] != "scalar"}
    written = {name: sizes for name, sizes in tensors.items() if name in request["mutates"]}
    return tensors, written, [shape(s) for s in request["outputs"]]


def _read(result: Path, done: ChildExit, timeout_s: float, request: Mapping[str, Any]) -> LargeRun:
    kind, why = done.failure(result.is_file(), timeout_s, "the candidate's")
    if kind:
        return LargeRun(error=why, kind=kind)
    # the file is the candidate's process's to write: anything may be in it, or be it
    try:
        data = load_plain(read_bounded(result, result_bytes(request), "the checked rows"))
        return _checked(data, request)
    except Refused as refused:
        return LargeRun(error=refused.why, kind=refused.kind)
    except FileNotFoundError:
        return LargeRun(error="its result was gone before it was read", kind="bad-result")
    except Exception as error:  # whatever else its contents make of the auditor's reading
        return LargeRun(
            error=f"its result could not be read ({type(error).__name__}: {error})",
            kind="bad-result",
        )


_FAILED_KINDS = ("load", "draw", "memory", "exception", "contract")
"""The kinds of failure `large.child` writes."""


def _checked(data: object, request: Mapping[str, Any]) -> LargeRun:
    """The run `data` tells of, as `large.child` writes it: a failure of a kind it writes, or
    every tensor input's, output's and written input's checked rows at the shapes the request
    gives them (`Refused` otherwise: nothing else is judged, or computed at its size)."""
    if not isinstance(data, dict):
        raise Refused("bad-result", f"its result is a {type(data).__name__}, not the child's")
    error = data.get("error")
    if not isinstance(error, str):
        raise Refused("bad-result", "its result's error is not text")
    if error:
        if data.get("kind") not in _FAILED_KINDS:
            raise Refused("bad-result", "its result names a failure the child never writes")
        return LargeRun(error=error, kind=data["kind"])
    tensors, written, outputs = _checked_shapes(request)
    inputs, returned, after = data.get("inputs"), data.get("outputs"), data.get("after")
    if not (
        _shaped(inputs, tensors)
        and _shaped(after, written)
        and isinstance(returned, (list, tuple))
        and _shaped(dict(enumerate(returned)), dict(enumerate(outputs)))
        and isinstance(data.get("seconds"), float)
        and isinstance(data.get("peak_bytes"), int)
    ):
        raise Refused("bad-result", "its result is not the checked rows the request asked for")
    assert isinstance(inputs, dict) and isinstance(after, dict) and returned is not None
    return LargeRun(
        inputs=dict(inputs),
        outputs=tuple(returned),
        after=dict(after),
        seconds=float(data["seconds"]),
        peak_bytes=int(data["peak_bytes"]),
    )


def _shaped(found: object, wanted: Mapping[Any, tuple[int, ...]]) -> bool:
    """Whether `found` maps exactly `wanted`'s keys to tensors of the shapes it gives."""
    return (
        isinstance(found, dict)
        and set(found) == set(wanted)
        and all(
            isinstance(found[key], torch.Tensor) and tuple(found[key].shape) == sizes
            for key, sizes in wanted.items()
        )
    )
