"""The triton-bounds check: Triton kernels run under Triton's interpreter in a child process,
every load, store and atomic checked against the tensors the kernel was launched with."""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from kernelaudit import Output, TensorInput
from kernelaudit.checks import triton_bounds
from kernelaudit.checks.base import PlanContext
from kernelaudit.checks.coverage import coverage
from kernelaudit.checks.triton_bounds import TritonBounds, interpreted_cases
from kernelaudit.engine.audit import audit
from kernelaudit.engine.calls import call_for
from kernelaudit.inputs.materialize import materialize
from kernelaudit.interpret import run as interpret_run
from kernelaudit.interpret.records import Interpretation, OutOfBounds
from kernelaudit.interpret.run import InterpretedRun
from kernelaudit.problem.load import load_problem
from kernelaudit.problem.spec import Axis, Problem
from kernelaudit.profiles import PROFILES
from kernelaudit.runner.auditor.results import Refused
from kernelaudit.runner.boundary.messages import Call, OutputSlot, TensorArg
from kernelaudit.runner.candidate import parse_candidate

FIXTURES = Path(__file__).parent / "fixtures"
KERNELS = FIXTURES / "scale_kernels.py"
EXAMPLES = Path(__file__).parents[2] / "examples"
BLOCK = 128
HANG_LIMIT_S = 5.0


def run(
    function: str, *calls: Call, timeout_s: float = 120.0, host_memory_bytes: int = 0
) -> InterpretedRun:
    candidate = parse_candidate(f"{KERNELS}::{function}")
    return InterpretedRun(candidate, calls, ["x"], ["y"], timeout_s, host_memory_bytes)


def scale_of(n: int) -> Call:
    return Call(args=(TensorArg(torch.randn(n)),))


def softmax_run() -> InterpretedRun:
    problem = load_problem(EXAMPLES / "softmax" / "problem.py")
    candidate = parse_candidate(f"{EXAMPLES / 'softmax' / 'candidates.py'}::guards_masked_rows")
    cases = interpreted_cases(PlanContext(problem, PROFILES["quick"], "cpu", 132, candidate))
    # one row, and one column: each axis at its cheapest boundary
    assert [c.label for c in cases] == ["boundary cols=1", "boundary rows=1"]
    names = [i.name for i in problem.inputs], [o.name for o in problem.outputs]
    return InterpretedRun(
        candidate,
        [call_for(problem, c, materialize(problem, c)) for c in cases],
        *names,
        timeout_s=120.0,
    )


@pytest.fixture(scope="module")
def runs() -> Iterator[dict[str, InterpretedRun]]:
    """Every interpreted run of this module, started at once: each spends most of its time
    starting Python and importing torch, which the others overlap."""
    n = 2 * BLOCK + 1
    into = Call(args=(TensorArg(torch.randn(n)),), slots=(OutputSlot((n,), torch.float32),))
    started = {
        "unmasked_store": run("unmasked_store", scale_of(BLOCK + 1)),
        "scale": run("scale", scale_of(1), scale_of(BLOCK + 1)),
        "masked_wild_addresses": run("masked_wild_addresses", scale_of(1), scale_of(BLOCK + 1)),
        "read_one_past_the_end": run("read_one_past_the_end", scale_of(5)),
        "scale_into": run("scale_into", into),
        "softmax": softmax_run(),
        "launches_then_hangs": run("launches_then_hangs", scale_of(3), timeout_s=HANG_LIMIT_S),
        "hangs_before_launching": run(
            "hangs_before_launching", scale_of(3), timeout_s=HANG_LIMIT_S
        ),
        "hoards_before_launching": run(
            "hoards_before_launching", scale_of(3), host_memory_bytes=3 << 29
        ),
        "crashes_before_launching": run("crashes_before_launching", scale_of(3)),
        "floods_its_result": run("floods_its_result", scale_of(3)),
    }
    yield started
    for started_run in started.values():
        started_run.finish()


def line_of(text: str) -> int:
    lines = KERNELS.read_text().splitlines()
    return next(number for number, line in enumerate(lines, start=1) if text in line)


def only(found: Interpretation) -> OutOfBounds:
    assert found.error == "", found.error
    assert len(found.out_of_bounds) == 1, found.out_of_bounds
    return found.out_of_bounds[0]


@pytest.mark.slow
def test_a_store_one_past_the_end_fails_the_audit_with_kernel_argument_and_offset() -> None:
    report = audit(
        FIXTURES / "scale.py",
        f"{KERNELS}::store_one_past_the_end",
        "quick",
        "cpu",
        ["triton-bounds"],
    )
    assert report.verdict == "FAIL"
    (finding,) = [f for f in report.findings if f.check == "triton-bounds"]
    evidence = dict(finding.evidence)
    assert finding.severity == "fail"
    assert (evidence["kernel"], evidence["argument"], evidence["access"]) == (
        "_scale",
        "y_ptr",
        "store",
    )
    assert evidence["tensor"] == "output y"
    # the cheapest boundary case first: one element, and the lane just past it stored
    assert evidence["case"].startswith("boundary n=1:")
    assert evidence["offsets (elements from the argument's first)"] == [1]
    assert evidence["elements past the end"] == 1
    assert evidence["elements before the start"] == 0
    assert evidence["out-of-bounds element accesses"] == 1
    assert evidence["source"] == [f"scale_kernels.py:{line_of('mask=offsets < n + STORE_EXTRA')}"]
    assert all(lanes == 1 for lanes in evidence["cases"].values())
    assert "kernel _scale writes 1 element past the end of y_ptr (output y) at n=1" in finding.title


@pytest.mark.slow
def test_sizes_the_problems_generator_cannot_make_leave_the_check_idle_not_the_audit_broken():
    report = audit(
        FIXTURES / "scale_generated.py",
        f"{KERNELS}::store_one_past_the_end",
        "quick",
        "cpu",
        ["triton-bounds"],
    )
    assert (
        "the problem can make no input at the interpreted sizes"
        in dict(report.coverage)["triton-bounds"]
    )


def test_an_unmasked_store_reports_every_lane_of_the_last_block_past_the_end(
    runs: dict[str, InterpretedRun],
) -> None:
    found = only(runs["unmasked_store"].finish())
    assert (found.kernel, found.argument, found.kind) == ("_scale", "y_ptr", "store")
    # program 1 holds element 128 and 127 lanes past it
    assert (found.lowest, found.highest, found.lanes) == (BLOCK + 1, 2 * BLOCK - 1, BLOCK - 1)
    assert found.past_end == BLOCK - 1
    assert found.offsets == tuple(range(BLOCK + 1, BLOCK + 9))
    assert (found.program, found.grid) == ((1, 0, 0), (2, 1, 1))
    assert found.outside == found.lanes and found.others == ()


def test_masked_off_wild_addresses_and_correct_masks_are_not_reported(
    runs: dict[str, InterpretedRun],
) -> None:
    for name in ("scale", "masked_wild_addresses"):
        found = runs[name].finish()
        assert found.error == "", (name, found.error)
        assert found.out_of_bounds == (), name
        # the kernels did run under the watch: two launches, one per call
        assert found.launched == 2, name


def test_a_read_past_the_end_of_an_input_is_a_load(runs: dict[str, InterpretedRun]) -> None:
    found = only(runs["read_one_past_the_end"].finish())
    assert (found.kernel, found.argument, found.kind, found.tensor) == (
        "_scale",
        "x_ptr",
        "load",
        "input x",
    )
    assert (found.offsets, found.past_end, found.elements) == ((5,), 1, 5)


def test_an_atomic_add_past_a_scratch_buffer_is_an_atomic_in_a_destination_call(
    runs: dict[str, InterpretedRun],
) -> None:
    found = only(runs["scale_into"].finish())
    assert (found.kernel, found.argument, found.kind) == ("_scale_into", "total_ptr", "atomic")
    # three blocks, three totals: the last program adds to total[3]
    assert (found.offsets, found.elements, found.program) == ((3,), 3, (2, 0, 0))


def test_the_softmax_examples_correct_kernel_stays_in_bounds(
    runs: dict[str, InterpretedRun],
) -> None:
    found = runs["softmax"].finish()
    assert found.error == ""
    assert found.launches == (("_masked_softmax_rows", 2),)
    assert found.out_of_bounds == ()


@pytest.mark.slow
def test_a_candidate_without_triton_kernels_gets_nothing() -> None:
    fixtures = Path(__file__).parents[1] / "checks" / "fixtures"
    report = audit(
        fixtures / "identity.py",
        f"{fixtures / 'identity_kernels.py'}::copy",
        "quick",
        "cpu",
        ["triton-bounds"],
    )
    assert report.verdict == "PASS"
    assert report.findings == ()


def test_a_hung_candidate_is_stopped_at_the_time_limit(runs: dict[str, InterpretedRun]) -> None:
    began = time.monotonic()
    found = runs["launches_then_hangs"].finish()
    assert found.cause == "timeout"
    assert f"still going after {HANG_LIMIT_S:.0f} s" in found.error
    # started with the others: it cannot take much longer than its limit from now
    assert time.monotonic() - began < HANG_LIMIT_S + 2.0


def test_a_run_holding_more_host_memory_than_allowed_is_stopped(
    runs: dict[str, InterpretedRun],
) -> None:
    found = runs["hoards_before_launching"].finish()
    assert found.cause == "host-memory"
    assert "GiB of host memory, more than the limit of 1.50 GiB" in found.error
    # stopped when the watch saw the memory, not at its 120 s limit (that would be a timeout)
    check = TritonBounds()
    check._run = runs["hoards_before_launching"]
    (note,) = check.conclude([])
    assert note.key == "not-watched:host-memory"


def test_a_run_stopped_before_any_launch_is_a_note_and_an_unverified_check(
    runs: dict[str, InterpretedRun],
) -> None:
    check = TritonBounds()
    check._run = runs["hangs_before_launching"]
    (note,) = check.conclude([])
    assert note.severity == "note" and note.key == "not-watched:timeout"
    assert "could not watch every call" in note.title
    ctx = PlanContext(load_problem(FIXTURES / "scale.py"), PROFILES["quick"], "cpu", 132, None)
    said = coverage(check, ctx)
    assert said.startswith("could not run here: the interpreted run stopped before any kernel")
    assert f"still going after {HANG_LIMIT_S:.0f} s" in said


def test_a_run_that_crashes_on_its_first_call_is_a_note_and_an_unverified_check(
    runs: dict[str, InterpretedRun],
) -> None:
    check = TritonBounds()
    check._run = runs["crashes_before_launching"]
    (note,) = check.conclude([])
    assert note.severity == "note" and note.key == "not-watched:crash"
    assert "could not watch every call" in note.title
    assert "was killed by signal SIGSEGV" in note.title
    ctx = PlanContext(load_problem(FIXTURES / "scale.py"), PROFILES["quick"], "cpu", 132, None)
    assert coverage(check, ctx).startswith(
        "could not run here: the interpreted run stopped before any kernel"
    )


def test_a_result_larger_than_any_run_writes_fails_the_candidate_unread(
    runs: dict[str, InterpretedRun],
) -> None:
    # the result lies in a folder the candidate's process can write: its size decides, never
    # what it says
    check = TritonBounds()
    check._run = runs["floods_its_result"]
    (failure,) = check.conclude([])
    assert (failure.severity, failure.key) == ("fail", "result-too-large")
    limit = f"{interpret_run.RESULT_BYTES:,}"
    assert f"more than the {limit} its records can fill" in failure.title
    assert "it was not read" in failure.title


def test_a_result_that_is_not_the_runs_records_fails_the_candidate(tmp_path: Path) -> None:
    # the child replaces its result whole: no honest run, stopped anywhere, leaves one unread
    (tmp_path / "result.json").write_text("not the records")
    with pytest.raises(Refused) as refused:
        interpret_run._read(tmp_path / "result.json")
    assert refused.value.kind == "bad-result"

    class Refusing:
        def finish(self) -> Interpretation:
            return Interpretation(error=refused.value.why, cause=refused.value.kind)

    check = TritonBounds()
    check._run = Refusing()  # type: ignore[assignment]
    (failure,) = check.conclude([])
    assert (failure.severity, failure.key) == ("fail", "result-bad-result")
    assert "its result is not the run's records" in failure.title


def test_a_run_stopped_for_what_it_wrote_fails_the_candidate() -> None:
    why = "the candidate's processes wrote more than 80 MiB to its job's folder, ..."

    class Stopped:
        def finish(self) -> Interpretation:
            return Interpretation(error=why, cause="disk")

    check = TritonBounds()
    check._run = Stopped()  # type: ignore[assignment]
    (failure,) = check.conclude([])
    assert (failure.severity, failure.key) == ("fail", "not-watched:disk")
    assert why in failure.title


def test_a_run_that_watched_its_calls_leaves_nothing_unverified(
    runs: dict[str, InterpretedRun],
) -> None:
    check = TritonBounds()
    check._run = runs["scale"]
    assert check.conclude([]) == []
    ctx = PlanContext(load_problem(FIXTURES / "scale.py"), PROFILES["quick"], "cpu", 132, None)
    assert coverage(check, ctx) == "ran"


def test_index_inputs_are_drawn_at_their_first_and_last_ids() -> None:
    problem = load_problem(EXAMPLES / "embedding_backward" / "problem.py")
    ctx = PlanContext(problem, PROFILES["quick"], "cpu", 132, None)
    cases = interpreted_cases(ctx)
    assert len(cases) == PROFILES["quick"].interpreted_cases
    assert all(dict(case.values).get("ids") == "boundary" for case in cases)


def test_thorough_audits_interpret_more_boundary_cases() -> None:
    problem: Problem = load_problem(FIXTURES / "scale.py")
    quick = interpreted_cases(PlanContext(problem, PROFILES["quick"], "cpu", 132, None))
    thorough = interpreted_cases(PlanContext(problem, PROFILES["thorough"], "cpu", 132, None))
    assert [c.size_map()["n"] for c in quick] == [1, 1025]
    # then one past a power of two: a last block with one live element, after full ones
    assert [c.size_map()["n"] for c in thorough][:2] == [1, 1025] and len(thorough) == 4
    single = replace(PROFILES["quick"], interpreted_cases=1)
    assert len(interpreted_cases(PlanContext(problem, single, "cpu", 132, None))) == 1


def rows_of(width: int) -> Problem:
    """y = 2 x over rows of a fixed `width`: the rows shrink, the width does not (as an expert
    weight's elements stay whatever the tokens)."""
    return Problem(
        name="scale_rows",
        reference=lambda x: 2 * x,
        axes=("rows", Axis("cols", min=width, max=width)),
        inputs=(TensorInput("x", ("rows", "cols")),),
        outputs=(Output("y", ("rows", "cols"), dtype="x"),),
        workloads=({"rows": 8, "cols": width},),
    )


def test_cases_the_interpreter_cannot_get_through_are_left_out_before_their_inputs_are_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def made(*args: object) -> None:
        raise AssertionError("inputs were made for a case the interpreter cannot get through")

    monkeypatch.setattr(triton_bounds, "materialize", made)
    profile = replace(PROFILES["quick"], timeout_s=5.0)
    candidate = parse_candidate(f"{KERNELS}::scale")
    ctx = PlanContext(rows_of(1 << 24), profile, "cpu", 132, candidate)
    check = TritonBounds()
    assert check.plan(ctx) == []
    assert check.conclude([]) == []
    said = coverage(check, ctx)
    assert said.startswith("could not run here: Triton's interpreter would take about")
    assert "at boundary rows=1 (33,554,432 elements), past the 5 s a call may take" in said


def test_a_case_too_long_to_interpret_leaves_the_others_run() -> None:
    # one row of 2^20 fits in 2 s a call under the interpreter's estimate, nine do not
    profile = replace(PROFILES["quick"], timeout_s=2.0)
    identity = Path(__file__).parents[1] / "checks" / "fixtures" / "identity_kernels.py"
    candidate = parse_candidate(f"{identity}::copy")
    ctx = PlanContext(rows_of(1 << 20), profile, "cpu", 132, candidate)
    check = TritonBounds()
    check.plan(ctx)
    try:
        assert [case.label for case in check._cases] == ["boundary rows=1"]
        assert [t.case.label for t in check._too_long] == ["boundary rows=9"]
    finally:
        assert check._run is not None
        check._run.finish()  # its 2 s are soon over


def test_cases_left_out_are_a_note_when_the_candidate_launches_triton_kernels(
    runs: dict[str, InterpretedRun],
) -> None:
    profile = replace(PROFILES["quick"], timeout_s=2.0)
    candidate = parse_candidate(f"{KERNELS}::scale")
    ctx = PlanContext(rows_of(1 << 20), profile, "cpu", 132, candidate)
    check = TritonBounds()
    left_out = [case for case in interpreted_cases(ctx) if case.label == "boundary rows=9"]
    check._too_long = tuple(triton_bounds._TooLong.of(ctx, case) for case in left_out)
    check._run = runs["scale"]
    (note,) = check.conclude([])
    assert note.severity == "note" and note.key == "not-watched:too-large"
    assert note.title.startswith("the interpreted bounds check left out 1 case(s): boundary rows=9")
    assert "past the 2 s a call may take" in note.title
    assert note.title.count("boundary rows=9") == 1


def test_a_run_that_cannot_start_is_a_note_not_a_broken_audit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_room(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(interpret_run, "start_python", no_room)
    check = TritonBounds()
    check._run = run("scale", scale_of(BLOCK + 1))
    (note,) = check.conclude([])
    assert note.severity == "note" and note.key == "not-watched:crash"
    assert "could not start: OSError: [Errno 28] No space left on device" in note.title
    ctx = PlanContext(load_problem(FIXTURES / "scale.py"), PROFILES["quick"], "cpu", 132, None)
    assert coverage(check, ctx).startswith("could not run here: the interpreted run stopped")


def test_the_calls_tensors_are_let_go_once_written_for_the_child() -> None:
    # the audit goes on for minutes after: the interpreted cases' inputs are not held for it
    x = torch.randn(BLOCK + 1)
    held = weakref.ref(x)
    started = run("scale", Call(args=(TensorArg(x),)))
    del x
    started._started.wait(60)
    gc.collect()
    try:
        assert held() is None
    finally:
        started.finish()


@pytest.mark.slow
def test_an_autograd_ops_backward_kernels_are_watched_too() -> None:
    # the forward is right in both: only the run differentiated through autograd reaches the
    # backward's unmasked store
    ops = FIXTURES / "scale_columns_autograd.py"
    report = audit(
        FIXTURES / "scale_columns.py",
        f"{ops}::unmasked_backward",
        "quick",
        "cpu",
        ["triton-bounds"],
    )
    assert report.verdict == "FAIL"
    (finding,) = [f for f in report.failures if f.check == "triton-bounds"]
    evidence = dict(finding.evidence)
    assert (evidence["kernel"], evidence["argument"], evidence["access"]) == (
        "_scale_by_columns",
        "y_ptr",
        "store",
    )
    assert evidence["tensor"] == "output grad_x"
    right = audit(
        FIXTURES / "scale_columns.py", f"{ops}::scale_columns", "quick", "cpu", ["triton-bounds"]
    )
    assert right.verdict == "PASS", [f.title for f in right.findings]
    assert dict(right.coverage)["triton-bounds"] == "ran"
