"""The reference's side of the training check, trained in helper processes beside the auditor.

The reference's runs of one dtype configuration (for each optimizer: its own run, the perturbed
runs and the biased one, then the perturbed, biased and native plugs shadowing the correctly
rounded centre) do not depend on the candidate, and each is bound by the host: every operation
of the tiny model is a Python call. In the auditor they run in one thread while the candidate's
runs go on in another, and the two take turns for the interpreter; the reference's side, three
times the candidate's work or more, then sets the experiment's time. Where the audit's share of
the cores leaves room (`helper_count`), they run in helper processes instead, several at once,
and the auditor's interpreter is left to the candidate's runs.

The helpers are trusted: each runs kernelaudit's code and the problem's reference, read again
from the problem's file after its digest is checked against the bytes the auditor read. No
candidate code runs in them. The results are the same bits as in the auditor: each run starts
from the same seeds, a perturbed plug's shadow goes on from the count of calls its free run
made (its random moves are seeded by it), and shadowing plugs in groups changes nothing of any
plug's result (`loop.shadow_all`). A helper that fails (the problem's file changed or cannot be
read, the device out of memory) raises `HelpersFailed`, and the auditor trains the runs itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import pickle
import select
import signal
import subprocess
import sys
import tempfile
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any

import torch

from kernelaudit.runner.launch import child_environment, file_tail
from kernelaudit.runner.threads import thread_environment, thread_share
from kernelaudit.sourcefile import compiled_digest
from kernelaudit.training.loop import (
    OPTIMIZERS,
    Biased,
    Experiment,
    Native,
    Perturbed,
    Rounded,
    Shadowed,
    Trajectory,
    shadow_all,
    train,
)
from kernelaudit.training.slots import Plug

_MOST_HELPERS = 8
"""At most this many helpers: each holds a process with torch loaded (on a GPU, a context of
several hundred MB), and an experiment has about a dozen runs to share out."""

_AUDITOR_CORES = 2
"""Cores left to the auditor: its own thread and the candidate's runs."""

_POLL_S = 0.1
"""How often the auditor asks whether the runs are still wanted while helpers train."""

Envelope = tuple[Trajectory, list[Trajectory], list[Shadowed]]
"""The reference's run, the perturbed runs and the perturbed runs' shadows of one optimizer."""


class HelpersFailed(Exception):
    """A helper could not train its run; the message says why."""


@dataclass(frozen=True)
class Member:
    """One plug of the envelope: the reference "perturbed" (with its seed), "biased" or
    "native"."""

    kind: str
    seed: int = 0


@dataclass(frozen=True)
class Unit:
    """One helper's task: a free run of `members[0]` under `optimizer`, or (`shadows`) the
    shadows of `members` along the centre's trajectory, each perturbed member going on from the
    count of calls in `calls`."""

    optimizer: str
    members: tuple[Member, ...]
    shadows: bool = False
    calls: tuple[int, ...] = ()


def helper_count(device: str) -> int:
    """How many helpers this audit's share of the cores leaves room for (0: train in the
    auditor). None on a GPU: there every run launches the model's small kernels one after
    another, and runs in several processes take turns on the device (each process its own
    context) instead of running side by side. Measured on an H100 (docs/benchmarks.md), the
    reference's runs of the cross-entropy example took 61 s in the auditor and 67 s in eight
    helpers."""
    if torch.device(device).type != "cpu":
        return 0
    spare = thread_share(device) - _AUDITOR_CORES
    return min(spare, _MOST_HELPERS) if spare >= 2 else 0


def envelope_members(experiment: Experiment, biased: bool) -> list[Member]:
    """The envelope's perturbed plugs, in the order the check reports them: the perturbed
    runs by seed, then the biased run where there is one."""
    members = [Member("perturbed", seed) for seed in range(1, experiment.perturbed_runs + 1)]
    return members + ([Member("biased")] if biased else [])


def train_references(
    source: str,
    digest: str,
    mark: str,
    slot: str,
    dtypes: tuple[torch.dtype | None, ...],
    members: Sequence[Member],
    experiment: Experiment,
    tokens: torch.Tensor,
    device: str,
    helpers: int,
    wanted: Callable[[], str] = lambda: "all",
) -> dict[str, Envelope] | None:
    """Every optimizer's envelope, trained by `helpers` processes reading the problem from
    `source`, whose text must have the sha256 `digest` (the text the auditor compiled it from)
    and whose reference must bear `mark` (`reference_mark`). `wanted()` is asked as the
    runs come in, as in the auditor: "none" stops them all (None), anything but "all" once the
    reference's own runs are in returns those alone (no envelope). Raises `HelpersFailed` when
    a helper cannot train its run."""
    threads = torch.get_num_threads() if torch.device(device).type == "cpu" else 1
    start = (source, digest, mark, slot, dtypes, experiment, tokens, device, threads)
    plain = [Unit(o, (Member("native"),)) for o in OPTIMIZERS]
    queue = deque([*plain, *(Unit(o, (m,)) for o in OPTIMIZERS for m in members)])
    done: dict[Unit, tuple[Any, int]] = {}
    groups: dict[str, list[Unit]] = {}
    with contextlib.ExitStack() as stack:
        idle = [stack.enter_context(_Helper(device, threads, start)) for _ in range(helpers)]
        busy: dict[int, tuple[_Helper, Unit]] = {}
        while queue or busy:
            while idle and queue:
                helper, unit = idle.pop(), queue.popleft()
                helper.send(unit)
                busy[helper.answers] = (helper, unit)
            for fd in select.select(list(busy), [], [], _POLL_S)[0]:
                helper, unit = busy.pop(fd)
                done[unit] = helper.receive()
                idle.append(helper)
            asked = wanted()
            if asked == "none":
                return None
            if asked != "all" and all(u in done for u in plain):
                return {u.optimizer: (done[u][0], [], []) for u in plain}
            for optimizer in OPTIMIZERS:
                runs = [Unit(optimizer, (m,)) for m in members]
                if optimizer not in groups and all(u in done for u in runs):
                    calls = {m: done[u][1] for m, u in zip(members, runs, strict=True)}
                    groups[optimizer] = _shadow_units(optimizer, members, calls, helpers)
                    queue.extend(groups[optimizer])
    return {
        optimizer: (
            done[Unit(optimizer, (Member("native"),))][0],
            [done[Unit(optimizer, (m,))][0] for m in members],
            [s for unit in groups[optimizer] for s in done[unit][0]],
        )
        for optimizer in OPTIMIZERS
    }


class _Helper:
    """One helper process, started with `start` (what `_start` takes) and given one unit at a
    time. Messages are length-prefixed: pickles from the auditor, torch.save's bytes of plain
    fields back (read with weights_only). Stopped, with whatever it started, on exit."""

    def __init__(self, device: str, threads: int, start: tuple[Any, ...]) -> None:
        env = child_environment(device)
        env.update(thread_environment(threads))
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed with the helper)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kernelaudit.training.helpers"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            start_new_session=True,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self._to, self._from = self.process.stdin, self.process.stdout
        self.answers = self._from.fileno()
        self.send(start)

    def __enter__(self) -> _Helper:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        for stream in (self._to, self._from, self._stderr):
            with contextlib.suppress(OSError):
                stream.close()

    def send(self, message: object) -> None:
        try:
            _write(self._to, pickle.dumps(message))
        except OSError:
            raise self._failed("it stopped") from None

    def receive(self) -> tuple[Any, int]:
        data = _read(self._from)
        if data is None:
            raise self._failed("it exited")
        answer = torch.load(io.BytesIO(data), weights_only=True)
        if answer["error"]:
            raise self._failed(answer["error"])
        result = answer["result"]
        if isinstance(result, list):
            return [Shadowed(**s) for s in result], answer["calls"]
        return Trajectory(**{**result, "losses": tuple(result["losses"])}), answer["calls"]

    def _failed(self, why: str) -> HelpersFailed:
        tail = file_tail(self._stderr)
        return HelpersFailed(f"a training helper failed: {why}" + (f" ({tail})" if tail else ""))


def _write(stream: IO[bytes], data: bytes) -> None:
    stream.write(len(data).to_bytes(8, "big") + data)
    stream.flush()


def _read(stream: IO[bytes]) -> bytes | None:
    """The next message, or None at the end of the stream."""
    head = stream.read(8)
    if len(head) < 8:
        return None
    data = stream.read(int.from_bytes(head, "big"))
    return data if len(data) == int.from_bytes(head, "big") else None


def _shadow_units(
    optimizer: str, members: Sequence[Member], calls: dict[Member, int], helpers: int
) -> list[Unit]:
    """The shadows of the members and the native reference, in contiguous groups, about as
    many groups over both optimizers as there are helpers: each group follows the centre's
    trajectory once more, so fewer groups cost less in all and more finish sooner."""
    plugs = [*members, Member("native")]
    count = max(1, min(len(plugs), helpers // len(OPTIMIZERS)))
    size = -(-len(plugs) // count)
    return [
        Unit(
            optimizer,
            tuple(plugs[i : i + size]),
            shadows=True,
            calls=tuple(calls.get(m, 0) for m in plugs[i : i + size]),
        )
        for i in range(0, len(plugs), size)
    ]


# The helper's side: what `_start` read, for every unit the helper trains.
_helper: dict[str, Any] = {}


def reference_mark(reference: Callable[..., object]) -> str:
    """What tells a reference read again from its file from another function: its name, and a
    digest of its compiled code and constants where it has some."""
    code = getattr(reference, "__code__", None)
    body = hashlib.sha256(code.co_code + repr(code.co_consts).encode()).hexdigest() if code else ""
    return f"{getattr(reference, '__qualname__', type(reference).__qualname__)}:{body}"


def _start(
    source: str,
    digest: str,
    mark: str,
    slot: str,
    dtypes: tuple[torch.dtype | None, ...],
    experiment: Experiment,
    tokens: torch.Tensor,
    device: str,
    threads: int,
) -> None:
    """Read the problem again, the file's digest checked; a failure is kept and raised by
    every unit (a pool whose start raises would start helpers over and over)."""
    _helper.clear()
    try:
        torch.set_num_threads(threads)
        from kernelaudit.formats.readers import read_problem  # the formats import the checks

        problem = read_problem(source)
        if compiled_digest(problem.reference, source) != digest:
            raise HelpersFailed(f"{source} changed since the auditor read it")
        if reference_mark(problem.reference) != mark:
            raise HelpersFailed(f"the reference read from {source} is not the auditor's")
        where = torch.device(device)
        if where.type == "cuda" and where.index is not None:
            torch.cuda.set_device(where)
        _helper.update(
            reference=problem.reference,
            slot=slot,
            dtypes=dtypes,
            experiment=experiment,
            tokens=tokens,
            device=device,
        )
    except BaseException as error:
        _helper["error"] = f"{type(error).__name__}: {error}"


def _train(unit: Unit) -> tuple[Any, int]:
    """Train `unit`: its result as plain fields, and a free run's count of calls of its
    perturbed plug."""
    if "error" in _helper:
        raise HelpersFailed(_helper["error"])
    h = _helper
    reference = h["reference"]

    def plug(member: Member, calls: int = 0) -> Plug:
        function: Callable[..., object]
        if member.kind == "native":
            function = Native(reference)
        elif member.kind == "biased":
            function = Biased(reference)
        else:
            function = Perturbed(reference, member.seed)
        if isinstance(function, Rounded):
            function.calls = calls
        return Plug(h["slot"], function, h["dtypes"])

    if unit.shadows:
        plugs = [plug(m, c) for m, c in zip(unit.members, unit.calls, strict=True)]
        centre = Plug(h["slot"], Rounded(reference), h["dtypes"])
        found = shadow_all(h["experiment"], unit.optimizer, centre, plugs, h["tokens"], h["device"])
        return [_fields(s) for s in found], 0
    member = plug(unit.members[0])
    run = train(h["experiment"], unit.optimizer, member, h["tokens"], h["device"])
    calls = member.function.calls if isinstance(member.function, Rounded) else 0
    return _fields(run), calls


def main() -> int:
    """A helper: the start message, then one unit after another until the auditor closes the
    stream. Whatever the reference prints goes to stderr, never into the answers."""
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    requests = sys.stdin.buffer
    start = _read(requests)
    if start is None:
        return 0
    _start(*pickle.loads(start))
    while (request := _read(requests)) is not None:
        try:
            result, calls = _train(pickle.loads(request))
            answer = {"error": "", "calls": calls, "result": result}
        except BaseException as error:
            answer = {"error": f"{type(error).__name__}: {error}", "calls": 0, "result": None}
        buffer = io.BytesIO()
        torch.save(answer, buffer)
        _write(answers, buffer.getvalue())
    return 0


def _fields(run: Trajectory | Shadowed) -> dict[str, Any]:
    fields = dict(vars(run))
    for name in ("parameters", "drift"):
        if name in fields:
            fields[name] = dict(fields[name])
    if "losses" in fields:
        fields["losses"] = list(fields["losses"])
    return fields


if __name__ == "__main__":
    sys.exit(main())
