"""`kernelaudit.guard`: a kernel checked against its reference inside the real job.

    fast = kernelaudit.guard(my_kernel, reference, sample=0.01, on_failure="log")

`fast` is called as `my_kernel` is and returns what it returns. On the calls the sampler picks
(`sampling`: every call at first, then `sample` of them, every new shape or dtype, and every
call for a while after a failure) the guard keeps copies of the inputs (taken before the call,
which may write into them) and of the outputs, and judges the outputs against the reference
(`judged`) away from the job: on a thread of its own, and on a GPU on a stream of its own that
waits only for the call's results. A failing call is written as a record with its inputs
(`records`), which `kernelaudit repro` replays, and reported as `on_failure` says. The calls
that are not sampled cost a counter and a draw.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import queue
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from kernelaudit.guarding.judged import (
    CallVerdict,
    OutputVerdict,
    copied,
    judge,
    results,
    tensor_bytes,
)
from kernelaudit.guarding.records import Failure, Located, Summary, occurrences, write_record
from kernelaudit.guarding.sampling import Sampler
from kernelaudit.guarding.window import Slice, sliced
from kernelaudit.oracle.truth import axis_sizes, result_depths
from kernelaudit.problem.spec import Problem
from kernelaudit.report.seal import write_atomically

LOGGER = logging.getLogger("kernelaudit.guard")

ON_FAILURE = ("log", "warn", "raise")

KEEP_BYTES = 256 << 20
"""The inputs a failing call's record keeps, at most, by default."""

CHECK_BYTES = 1 << 30
"""The inputs a sampled call may take to be checked whole, by default: a larger call is checked
on a slice of its rows where the problem allows one (`window`), else counted, not copied."""

MAX_PENDING = 8
"""Checked calls waiting for their check, at most: past it a sampled call is counted, not
copied, so a job that calls faster than its checks finish holds a bounded number of copies."""


class GuardWarning(UserWarning):
    """A guarded kernel's checked call failed (`on_failure="warn"`)."""


class GuardFailure(AssertionError):
    """A guarded kernel's checked call failed (`on_failure="raise"`)."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.describe())
        self.failure = failure


@dataclass(frozen=True)
class _Pending:
    call: int
    why: str
    args: tuple[object, ...]
    outputs: tuple[torch.Tensor, ...]
    ready: torch.cuda.Event | None
    rows: Slice | None = None
    """The slice of the call the inputs and outputs are, where they are not the whole."""


class Guard:
    """A kernel with its reference: callable as the kernel is (see the module's text).

    reference: a callable with the kernel's signature, or a kernelaudit `Problem` (its
        reference, its outputs' names and how many terms each sums).
    sample: the fraction of calls checked once past the first ones.
    on_failure: "log" (an error on the `kernelaudit.guard` logger), "warn" (`GuardWarning`),
        "raise" (`GuardFailure` from the call that failed, checked there and then), or a
        callable given the `Failure`.
    name: what its records and summary are called (default: the kernel's name).
    records: the folder failing calls and, at exit, the summary are written to (None: none).
    first, after_failure: calls checked at the start, and after each failing one (`sampling`).
    keep_bytes: the most input bytes a record keeps. check_bytes: the most bytes of inputs a
        call may have to be checked.
    background: check on a thread of the guard's own (default: unless `on_failure="raise"`).
    seed: the sampling's seed.
    """

    def __init__(
        self,
        kernel: Callable[..., object],
        reference: Callable[..., object] | Any,
        *,
        sample: float = 0.01,
        on_failure: str | Callable[[Failure], None] = "log",
        name: str | None = None,
        records: str | Path | None = None,
        first: int = 8,
        after_failure: int = 16,
        keep_bytes: int = KEEP_BYTES,
        check_bytes: int = CHECK_BYTES,
        background: bool | None = None,
        seed: int = 0,
    ) -> None:
        if not callable(kernel):
            raise TypeError(f"guard() takes the kernel first, a callable; got {type(kernel)}")
        if not (callable(on_failure) or on_failure in ON_FAILURE):
            raise ValueError(
                f"on_failure is one of {', '.join(ON_FAILURE)} or a callable taking the "
                f"failure; got {on_failure!r}"
            )
        self.kernel = kernel
        self.reference, self._names = _reference_of(reference)
        self._problem = reference if isinstance(reference, Problem) else None
        self.name = name or getattr(kernel, "__name__", "kernel")
        self.on_failure = on_failure
        self.records = Path(records) if records is not None else None
        self.keep_bytes = keep_bytes
        self.check_bytes = check_bytes
        self.sampler = Sampler(sample, first=first, after_failure=after_failure, seed=seed)
        self.summary = Summary(self.name)
        # a failure raised at the call that failed: checked there and then
        self.background = on_failure != "raise" if background is None else background
        self.replayable = True
        """Whether its records name the kernel, so `kernelaudit repro` can run it again."""
        self._kernel_at = Located.of(kernel)
        self._reference_at = _located_reference(reference)
        self._lock = threading.Lock()
        self._queue: queue.Queue[_Pending | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._stream: dict[torch.device, torch.cuda.Stream] = {}
        self._raised: Failure | None = None
        atexit.register(self.close)

    def __call__(self, *args: object, **keywords: object) -> object:
        if keywords:
            raise TypeError(
                f"the guarded {self.name} takes its arguments by position (the reference gets "
                f"them in the same order); got {', '.join(keywords)} by name"
            )
        call, why = self.choose(args)
        if why is None:
            return self.kernel(*args)
        rows = None
        if self._problem is not None and tensor_bytes(args) > self.check_bytes:
            rows = sliced(self._problem, args, self.check_bytes)
        if rows is None and self.oversized(args):
            return self.kernel(*args)
        # copied before the call, which may write into them
        if rows is None:
            kept = tuple(copied(a) for a in args)
        else:
            assert self._problem is not None
            kept = rows.inputs(self._problem, args)
        returned = self.kernel(*args)
        outputs = results(returned)
        if rows is not None:
            outputs, why = rows.outputs(outputs), f"{why}, on {rows.describe()}"
        self.submit(call, why, kept, outputs, rows)
        return returned

    def choose(self, args: Sequence[object]) -> tuple[int, str | None]:
        """Count a call with arguments `args`: its number, and why it is to be checked (None:
        it is not, or it cannot be now). Raises a failure `on_failure="raise"` still holds."""
        self._raise_pending()
        with self._lock:
            why = self.sampler.decide(_signature(args))
            call = self.summary.calls = self.sampler.calls
            if why is not None and self.background and self._queue.qsize() >= MAX_PENDING:
                self.summary.behind += 1
                return call, None
        return call, why

    def counted(self) -> int:
        """Count a call that is never chosen here (a guarded backward, checked when its
        forward was); its number."""
        with self._lock:
            self.summary.calls += 1
            return self.summary.calls

    def oversized(self, args: Sequence[object]) -> bool:
        """Whether a chosen call's inputs are past `check_bytes` (counted as too large)."""
        if tensor_bytes(args) <= self.check_bytes:
            return False
        with self._lock:
            self.summary.too_large += 1
        return True

    def submit(
        self,
        call: int,
        why: str,
        args: tuple[object, ...],
        outputs: Sequence[torch.Tensor],
        rows: Slice | None = None,
    ) -> None:
        """Check call `call`: the kernel's `outputs` for `args` (copies taken before the call;
        both a slice `rows` of the call, where given), copied now, and judged away from the
        job (or here, when checks are not in the background)."""
        kept = tuple(t.detach().clone() for t in outputs)
        ready = None
        if any(t.is_cuda for t in kept):
            ready = torch.cuda.Event()
            ready.record()
        pending = _Pending(call, why, args, kept, ready, rows)
        if self.background:
            self._start()
            self._queue.put(pending)
        else:
            self._check(pending)
            self._raise_pending()

    def flush(self) -> Summary:
        """Wait for every check queued so far; the summary as it stands then."""
        if self._thread is not None:
            self._queue.join()
        self._raise_pending()
        return self.summary

    @property
    def failures(self) -> list[Failure]:
        return list(self.summary.failures)

    def close(self) -> None:
        """Finish the checks, stop the checking thread, and write the summary next to the
        records (where the guard writes records)."""
        with contextlib.suppress(GuardFailure):
            self.flush()
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        if self.records is not None and self.summary.calls:
            self.records.mkdir(parents=True, exist_ok=True)
            path = self.records / f"{self.summary.guard}-summary.json"
            text = json.dumps(self.summary.to_json(), indent=1, allow_nan=False) + "\n"
            write_atomically(path, text)

    # --- checking, away from the job ---

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._work, name="kernelaudit-guard", daemon=True
            )
            self._thread.start()

    def _work(self) -> None:
        while True:
            pending = self._queue.get()
            try:
                if pending is None:
                    return
                self._check(pending)
            except Exception:  # a record that cannot be written, a callback that raises
                LOGGER.exception("%s: checking call %d failed", self.name, pending.call)
            finally:
                self._queue.task_done()

    def _check(self, pending: _Pending) -> None:
        began = time.perf_counter()
        judged: tuple[OutputVerdict, ...] = ()
        error = ""
        with self._on_side_stream(pending):
            try:
                depths = _depths(self._problem, pending.args)
                reference = self.reference
                if pending.rows is not None:
                    reference = pending.rows.reference(reference)
                judged = judge(reference, pending.args, pending.outputs, self._names, depths)
                if pending.rows is not None:
                    judged = _rows_of_the_call(judged, pending.rows)
            except Exception as raised:  # the reference's failure: not the kernel's
                error = f"{type(raised).__name__}: {raised}"
        seconds = time.perf_counter() - began
        verdict = CallVerdict(pending.call, pending.why, judged, seconds, error)
        failure = None
        if not verdict.error and not verdict.passed:
            failure = self._failure(verdict, pending.args)
        with self._lock:
            self.summary.add(verdict, failure)
        if failure is not None:
            with self._lock:
                self.sampler.failed()
            self._report(failure)

    @contextlib.contextmanager
    def _on_side_stream(self, pending: _Pending) -> Any:
        if pending.ready is None:
            yield
            return
        device = next(t.device for t in pending.outputs if t.is_cuda)
        stream = self._stream.setdefault(device, torch.cuda.Stream(device))
        stream.wait_event(pending.ready)
        with torch.cuda.stream(stream):
            yield

    def _failure(self, verdict: CallVerdict, args: Sequence[object]) -> Failure:
        record = ""
        if self.records is not None:
            path = write_record(
                self.records,
                self.name,
                verdict,
                args,
                self._kernel_at if self.replayable else None,
                self._reference_at,
                self.keep_bytes,
            )
            record = str(path)
        return Failure(self.name, verdict, record, occurrences(args, verdict))

    def _report(self, failure: Failure) -> None:
        if callable(self.on_failure):
            self.on_failure(failure)
        elif self.on_failure == "log":
            LOGGER.error(failure.describe(), extra={"guard_failure": failure})
        elif self.on_failure == "warn":
            warnings.warn(failure.describe(), GuardWarning, stacklevel=2)
        else:
            with self._lock:
                self._raised = self._raised or failure

    def _raise_pending(self) -> None:
        with self._lock:
            failure, self._raised = self._raised, None
        if failure is not None:
            raise GuardFailure(failure)


def guard(
    kernel: Callable[..., object], reference: Callable[..., object] | Any, **options: Any
) -> Guard:
    """`kernel` checked against `reference` (a callable with the kernel's signature, or a
    kernelaudit `Problem` whose reference it is) on a sample of its calls; see `Guard`."""
    return Guard(kernel, reference, **options)


def _reference_of(
    reference: Callable[..., object] | Any,
) -> tuple[Callable[..., object], tuple[str, ...]]:
    """The reference callable and its outputs' names (a problem's, where it is one)."""
    if isinstance(reference, Problem):
        return reference.reference, tuple(o.name for o in reference.outputs)
    if not callable(reference):
        raise TypeError(
            "guard() takes the reference second: a callable with the kernel's signature, or "
            f"a kernelaudit Problem; got {type(reference).__name__}"
        )
    return reference, ()


def _depths(problem: Problem | None, args: Sequence[object]) -> tuple[int, ...]:
    """How many terms each output sums at most (the noise floor's depth), where a problem
    says which axes the outputs reduce; none (1 each) for a plain reference."""
    if problem is None:
        return ()
    by_name = dict(zip((i.name for i in problem.inputs), args, strict=False))
    return result_depths(problem, axis_sizes(problem, by_name))


def _rows_of_the_call(judged: tuple[OutputVerdict, ...], rows: Slice) -> tuple[OutputVerdict, ...]:
    """The verdicts with their worst rows counted in the whole call, not in its slice."""
    return tuple(replace(o, worst_row=rows.row(k, o.worst_row)) for k, o in enumerate(judged))


def _located_reference(reference: Callable[..., object] | Any) -> Located | None:
    if isinstance(reference, Problem):
        return Located.of(reference.reference)
    return Located.of(reference) if callable(reference) else None


def _signature(args: Sequence[object]) -> tuple[object, ...]:
    return tuple(
        (tuple(a.shape), a.dtype, a.device.type) if isinstance(a, torch.Tensor) else type(a)
        for a in args
    )
