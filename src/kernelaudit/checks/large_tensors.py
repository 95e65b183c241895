"""Large tensors: a case whose largest tensor holds more than 2^31 elements.

A kernel that computes offsets in 32-bit integers (`row * stride` with an int32 row, a program
id times a block size) is right at every size a benchmark tries and reads or writes the wrong
memory once an offset passes 2^31. In the default and thorough profiles, on a GPU, this check
grows a batch axis of the first workload until the largest tensor passes 2^31 elements
(`kernelaudit.large`), runs the candidate once on it in a process of its own, and compares the
rows around the 2^31st element and the last rows with the fp64 truth of those rows, by the
error budget. Where the device or its free memory does not allow the case, it says so in a
note; so too where the candidate raises on the case and the reference, run on the same inputs,
raises as well (a library's own size limit, such as a cuFFT plan's past 2^31 elements).
The case's process is started while the probes run, where the problem can make a case
(`large.run.Waiting`: its modules imported, nothing of the candidate's); its case runs after
them, alone on the device.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from kernelaudit.checks.base import NEEDS_CUDA, ConcludingOnly, Failure, PlanContext, Probe, note
from kernelaudit.checks.execution import headline
from kernelaudit.checks.numerics import compare_expected, comparison_evidence
from kernelaudit.device_copies import DEVICE_COPIES
from kernelaudit.errors import ProblemError
from kernelaudit.inputs.batch import axis_position, batch_axes, inference_skipped, result_shapes
from kernelaudit.inputs.case import dtype_name
from kernelaudit.large.draws import drawn_all
from kernelaudit.large.run import SEED, LargeRun, Waiting, input_specs, run_large, scalar_value
from kernelaudit.large.sizing import ELEMENTS, CannotGrow, LargeCase, limit_name, plan_large_case
from kernelaudit.oracle.promote import full_precision_accumulation
from kernelaudit.problem.spec import Problem, ScalarInput
from kernelaudit.profiles import Profile
from kernelaudit.runner.boundary.failures import describe
from kernelaudit.runner.candidate import CandidateRef
from kernelaudit.timing.measure import synchronize

HEADROOM_BYTES = 1 << 30
"""Device memory the case needs besides its inputs and outputs: the child's CUDA context and
the candidate's own scratch."""

_TIMEOUT_FACTOR = 2
"""The large run may take this many times the profile's per-call timeout (drawing the inputs
and compiling the kernel come on top of the call)."""

_GIB = float(1 << 30)


class LargeTensors(ConcludingOnly):
    name: ClassVar[str] = "large-tensors"
    summary: ClassVar[str] = (
        "a case whose largest tensor holds more than 2^31 elements matches the truth in the "
        "rows past the 2^31st element (default and thorough profiles, on a GPU)"
    )

    def __init__(self) -> None:
        super().__init__()
        self._no_case = ""
        self._not_run = ""
        self._waiting: Waiting | None = None

    def plan(self, ctx: PlanContext) -> list[Probe]:
        """Nothing to probe; the case's process started now, where it will run."""
        super().plan(ctx)
        self._stop_waiting()
        candidate = ctx.candidate
        if candidate is None or not ctx.profile.large_tensors:
            return []
        if self.unavailable(ctx.device, ctx.profile) or not torch.cuda.is_available():
            return []
        try:
            plan_large_case(ctx.problem, batch_axes(ctx.problem), ELEMENTS)
        except CannotGrow:
            return []  # `conclude` says why
        # where it cannot start now, the conclusion starts it, and says why where it cannot
        with contextlib.suppress(OSError):
            self._waiting = Waiting(candidate, ctx.device)
        return []

    def _stop_waiting(self) -> None:
        if self._waiting is not None:
            self._waiting.close()
            self._waiting = None

    def not_applicable(self, ctx: PlanContext) -> str:
        if not ctx.profile.large_tensors:
            return f"the {ctx.profile.name} profile makes no case past 2^31 elements"
        return self._no_case

    def not_run(self, ctx: PlanContext) -> str:
        return self._not_run

    def unavailable(self, device: str, profile: Profile) -> str:
        if profile.large_tensors and not device.startswith("cuda"):
            return f"{NEEDS_CUDA}: a case past {limit_name(ELEMENTS)} elements runs on a GPU only"
        return ""

    def conclude(self, found: Sequence[tuple[str, Failure]]) -> list[Failure]:
        waiting, self._waiting = self._waiting, None
        try:
            return self._concluded(waiting)
        finally:
            if waiting is not None:
                waiting.close()

    def _concluded(self, waiting: Waiting | None) -> list[Failure]:
        ctx = self.context
        if ctx is None or ctx.candidate is None or not ctx.profile.large_tensors:
            return []
        if self.unavailable(ctx.device, ctx.profile):
            return []  # the report's list of what was not verified says why
        device = torch.device(ctx.device)
        DEVICE_COPIES.clear()  # results an earlier concluding check kept: the child needs the room
        torch.cuda.empty_cache()  # the auditor's own cached blocks are no use to the child
        free, _ = torch.cuda.mem_get_info(device)
        timeout = ctx.profile.timeout_s * _TIMEOUT_FACTOR
        found = examine(ctx.problem, ctx.candidate, ctx.device, free, timeout, waiting=waiting)
        return self.noted(found)

    def noted(self, concluded: list[Failure]) -> list[Failure]:
        """`concluded`, its not-run notes also kept as what the check's coverage says: no case
        this problem can make is "not applicable", no room or no draw "could not run"."""
        for failure in concluded:
            why = failure.title.removeprefix("not run: ")
            if failure.key == "not-run:no-case":
                self._no_case = why
            elif failure.key.startswith("not-run:"):
                self._not_run = why
        return concluded


def examine(
    problem: Problem,
    candidate: CandidateRef,
    device: str,
    free_bytes: int,
    timeout_s: float,
    elements: int = ELEMENTS,
    waiting: Waiting | None = None,
) -> list[Failure]:
    """The check's work on `device` with `free_bytes` of its memory free, at an element limit
    of `elements` (2^31; the tests run the same path on a CPU at a small one), in the child
    `waiting` where one was started for the case."""
    try:
        case = plan_large_case(problem, batch_axes(problem), elements)
    except CannotGrow as reason:
        skipped = inference_skipped(problem)
        why = f"{reason} ({skipped})" if skipped else f"{reason}"
        return [note("not-run:no-case", f"not run: {why}")]
    needed = case.bytes_needed + HEADROOM_BYTES
    if needed > free_bytes:
        return [
            note(
                "not-run:memory",
                f"not run: the case {case.describe()} needs {needed / _GIB:.1f} GiB of device "
                f"memory and {free_bytes / _GIB:.1f} GiB is free",
                (
                    ("case", case.describe()),
                    ("bytes needed", needed),
                    ("of which inputs and outputs", case.bytes_needed),
                    ("bytes free", free_bytes),
                ),
            )
        ]
    run = run_large(problem, candidate, case, device, timeout_s, SEED, waiting)
    if run.kind == "exception":
        fails_too = _reference_failure(problem, case, device)
        if fails_too:
            return [
                note(
                    "not-run:reference",
                    f"not judged at {case.describe()}: the candidate raised, and the reference "
                    f"raises there too ({fails_too}): a size the problem's own reference cannot "
                    "run",
                    (
                        ("case", case.describe()),
                        ("candidate's error", run.error),
                        ("reference's error", fails_too),
                    ),
                )
            ]
    if run.kind:
        return [_stopped(case, run)]
    return _judged(problem, case, run, device)


def _reference_failure(problem: Problem, case: LargeCase, device: str) -> str:
    """Where the reference, at its own dtypes, raises on the large case drawn as the
    candidate's process drew it: its error's first line; "" where it runs, or where the inputs
    cannot be drawn here or the device runs out of memory (which say nothing about the size). A
    candidate that raises where the reference raises too has met a limit of the problem, not
    shown a fault of its own. The reference runs in the auditor, as it does for every case."""
    where = torch.device(device)
    specs = input_specs(problem, case)
    args: list[object] = []
    try:
        args.extend(drawn_all(specs, where, SEED))
        with torch.no_grad(), full_precision_accumulation():
            problem.reference(*args)
        synchronize(where)
        return ""
    except (MemoryError, torch.OutOfMemoryError):
        return ""
    except Exception as error:
        # an input that could not be drawn leaves the reference never called
        return headline(describe(error)) if len(args) == len(specs) else ""
    finally:
        args.clear()  # the case's tensors go before the cache is given back
        if where.type == "cuda":
            torch.cuda.empty_cache()


def _setting(problem: Problem, case: LargeCase) -> tuple[tuple[str, Any], ...]:
    dtypes = problem.dtype_configs()[case.dtype_config]
    return (
        ("grown axis", case.axis),
        ("sizes", case.size_map()),
        ("largest tensor", {"name": case.largest, "elements": case.largest_elements}),
        ("dtypes", {name: dtype_name(dtype) for name, dtype in dtypes.items()}),
        ("rows checked", {"around the limit": case.around_limit, "last": case.last}),
    )


def _stopped(case: LargeCase, run: LargeRun) -> Failure:
    evidence = (("case", case.describe()), ("kind", run.kind), ("message", run.error))
    if run.kind in ("load", "draw", "memory"):
        what = {
            "load": "the candidate could not be loaded",
            "draw": "its inputs could not be drawn on the device",
            "memory": "the device ran out of memory (the candidate's own allocations come on "
            f"top of the {case.bytes_needed / _GIB:.1f} GiB of inputs and outputs)",
        }[run.kind]
        return note(f"not-run:{run.kind}", f"not run at {case.describe()}: {what}", evidence)
    what = {
        "timeout": run.error,
        "crash": run.error,
        "contract": f"the candidate {run.error}",
        "too-large": f"the candidate's process left a result that was refused: {run.error}",
        "bad-result": f"the candidate's process left a result that was refused: {run.error}",
    }.get(run.kind, f"the candidate failed: {headline(run.error)}")
    return Failure(
        key=f"large-{run.kind}", title=f"at {case.describe()}: {what}", evidence=evidence
    )


def _judged(problem: Problem, case: LargeCase, run: LargeRun, device: str) -> list[Failure]:
    # imported here: the oracle imports the checks package
    from kernelaudit.oracle.truth import expected

    rows = case.rows()
    sizes = {**case.size_map(), case.axis: len(rows)}
    inputs: dict[str, object] = {}
    for inp in problem.inputs:
        inputs[inp.name] = (
            scalar_value(inp, sizes) if isinstance(inp, ScalarInput) else run.inputs[inp.name]
        )
    config = problem.dtype_configs()[case.dtype_config]
    try:
        expect = expected(problem, inputs, config, device)
    except ProblemError as error:
        return [note("not-run:reference", f"not judged: {error}")]
    values = (*run.outputs, *(run.after[name] for name in problem.contract.mutates))
    positions = [axis_position(shape, case.axis) for shape in result_shapes(problem)]
    groups = {
        f"rows around element {limit_name(case.elements)} of {case.largest}": case.around_limit,
        "last rows": case.last,
    }
    setting = _setting(problem, case)
    failures = []
    for k, name in enumerate(expect.names):
        position = positions[k]
        if position is None:
            continue
        failed = []
        for where, wanted in groups.items():
            index = torch.tensor([rows.index(r) for r in wanted], dtype=torch.int64)
            # judged as numerics judges a result, the nudged case included
            comparison = compare_expected(
                expect, k, values[k], expect.truth[k].device, rows=(position, index)
            )
            if not comparison.passed:
                failed.append((where, wanted, comparison))
        if not failed:
            continue
        # the rows around the limit, where they fail, say most about where offsets wrap
        where, wanted, comparison = failed[0]
        failures.append(
            Failure(
                key=f"large-{comparison.failure}:{name}",
                title=f"at {case.describe()}, in the {where} ({list(wanted)}): {comparison.reason}",
                evidence=(
                    *setting,
                    ("failing rows", {w: list(r) for w, r, _ in failed}),
                    *comparison_evidence(comparison),
                ),
                score=max((m.error_ratio for m in comparison.errors), default=1.0),
            )
        )
    if failures:
        return failures
    return [
        note(
            "matches",
            f"at {case.describe()} the rows around element {limit_name(case.elements)} and the "
            "last rows match the truth",
            (*setting, ("seconds", round(run.seconds, 3)), ("peak bytes", run.peak_bytes)),
        )
    ]
