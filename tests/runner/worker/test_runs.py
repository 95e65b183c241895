"""The worker, end to end: one candidate file with many behaviours, run through one worker."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest
import torch

from kernelaudit.inputs.layouts import geometry
from kernelaudit.problem.spec import LAYOUTS
from kernelaudit.runner.auditor import process
from kernelaudit.runner.auditor.process import Worker
from kernelaudit.runner.boundary.messages import (
    Call,
    Invocation,
    InvocationResult,
    OutputSlot,
    TensorArg,
)
from kernelaudit.runner.boundary.poison import AUDIT_SENTINEL, poison_value
from kernelaudit.runner.candidate import parse_candidate

FIXTURE = Path(__file__).parents[1] / "fixtures" / "behaviours.py"
TIMEOUT_S = 2.0


def _names() -> tuple[str, ...]:
    spec = importlib.util.spec_from_file_location("runner_behaviours", FIXTURE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.NAMES


NAMES = _names()


@pytest.fixture(scope="module")
def worker(module_device: str):
    ref = parse_candidate(f"{FIXTURE}::candidate")
    with Worker(ref, module_device, timeout_s=TIMEOUT_S) as running:
        yield running


def call(behaviour: str, *args, slots=(), poison="nan") -> Call:
    """A call of one behaviour. Its arguments start at position 1 ("input 1"): position 0
    picks the behaviour."""
    return Call(
        args=(NAMES.index(behaviour), *args), slots=slots, poison=poison, sentinel=AUDIT_SENTINEL
    )


def run(worker: Worker, *calls: Call, return_inputs=()) -> InvocationResult:
    return worker.run(Invocation(calls=calls, return_inputs=return_inputs))


def only_output(result: InvocationResult) -> torch.Tensor:
    assert result.error == "", result.error
    (outcome,) = result.calls
    (output,) = outcome.outputs
    return output


def pid_of(worker: Worker) -> int:
    return int(only_output(run(worker, call("pid", TensorArg(torch.zeros(1))))))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_candidate_gets_right_values_in_each_layout(worker: Worker, layout: str) -> None:
    x = torch.randn(2, 3, 4)
    if layout == "expanded":
        x = x[:1].expand(2, 3, 4).contiguous()
    if layout == "broadcast":
        x = x.reshape(-1)[:1].reshape(1, 1, 1).expand(2, 3, 4).contiguous()
    y = torch.randn(2, 3, 4)
    result = run(worker, call("add", TensorArg(x, layout), TensorArg(y)))
    assert torch.equal(only_output(result), x + y)
    assert result.breaches == () and result.calls[0].aliases == ()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_candidate_sees_the_layouts_strides_and_offset(worker: Worker, layout: str) -> None:
    shape = (2, 3, 4)
    where = geometry(layout, shape)
    assert where is not None
    seen = only_output(run(worker, call("layout_of", TensorArg(torch.ones(shape), layout))))
    assert tuple(seen[:-1].tolist()) == where.stride
    assert int(seen[-1]) == where.storage_offset * 4 % 16


def test_every_call_gets_fresh_inputs(worker: Worker) -> None:
    x = torch.arange(6.0)
    result = run(
        worker,
        call("bump_input", TensorArg(x)),
        call("bump_input", TensorArg(x)),
        return_inputs=(1,),
    )
    assert result.error == ""
    for outcome in result.calls:
        assert torch.equal(outcome.outputs[0], x + 1)
        assert torch.equal(outcome.inputs_after[0], x + 1)


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "offset"])
def test_only_inputs_a_call_changed_come_back(worker: Worker, layout: str) -> None:
    """An input the call left bit for bit as given comes back as None (nothing to judge, no
    bytes to carry); one it wrote comes back whole; one the contract lets it write comes back
    whatever happened to it. A NaN left in place is unchanged too."""
    x = torch.tensor([[1.0, float("nan")], [-0.0, 3.0]])
    y = torch.ones(2, 2)
    kept = worker.run(
        Invocation(calls=(call("add", TensorArg(x, layout), TensorArg(y)),), return_inputs=(1, 2))
    )
    assert kept.error == "" and kept.calls[0].inputs_after == (None, None)
    judged = worker.run(
        Invocation(
            calls=(call("add", TensorArg(x, layout), TensorArg(y)),),
            return_inputs=(1, 2),
            always_return=(2,),
        )
    )
    (untouched, always) = judged.calls[0].inputs_after
    assert untouched is None and always is not None and torch.equal(always, y)
    bumped = run(
        worker, call("bump_input", TensorArg(torch.arange(4.0), layout)), return_inputs=(1,)
    )
    assert torch.equal(bumped.calls[0].inputs_after[0], torch.arange(4.0) + 1)


def test_destination_style_returns_the_filled_slots(worker: Worker) -> None:
    x = torch.randn(8)
    slot = OutputSlot((8,), torch.float32)
    result = run(worker, call("double_into", TensorArg(x), slots=(slot,)))
    assert torch.equal(only_output(result), 2 * x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32])
@pytest.mark.parametrize("poison", ["nan", "sentinel"])
def test_unwritten_slot_elements_hold_the_poison(worker: Worker, dtype, poison: str) -> None:
    x = torch.arange(8).to(dtype)
    slot = OutputSlot((8,), dtype)
    out = only_output(run(worker, call("half_into", TensorArg(x), slots=(slot,), poison=poison)))
    assert torch.equal(out[:4], x[:4])
    expected = torch.full((4,), poison_value(poison, dtype), dtype=dtype)
    assert torch.equal(out[4:], expected) or (poison == "nan" and bool(out[4:].isnan().all()))


@pytest.mark.parametrize("poison", ["nan", "sentinel"])
def test_unwritten_elements_of_torch_empty_hold_the_poison(worker: Worker, poison: str) -> None:
    x = torch.arange(8.0)
    out = only_output(run(worker, call("half_of_empty", TensorArg(x), poison=poison)))
    assert torch.equal(out[:4], x[:4])
    if poison == "nan":
        assert bool(out[4:].isnan().all())
    else:
        assert bool((out[4:] == poison_value(poison, torch.float32)).all())


def test_write_past_the_end_of_a_slot_is_a_breach(worker: Worker) -> None:
    slot = OutputSlot((8,), torch.float32)
    result = run(worker, call("past_the_end", TensorArg(torch.randn(8)), slots=(slot,)))
    (breach,) = result.breaches
    assert (breach.tensor, breach.call) == ("output 0", 0)
    assert (breach.bytes_changed, breach.first_offset, breach.last_offset) == (8, 32, 39)


def test_write_before_an_input_is_a_breach(worker: Worker) -> None:
    result = run(worker, call("before_input", TensorArg(torch.randn(8))))
    (breach,) = result.breaches
    assert breach.tensor == "input 1"
    assert (breach.bytes_changed, breach.first_offset, breach.last_offset) == (4, -4, -1)


def test_write_into_the_gaps_of_a_strided_input_is_a_breach(worker: Worker) -> None:
    result = run(worker, call("over_the_gaps", TensorArg(torch.randn(3, 5), "strided")))
    (breach,) = result.breaches
    # Row 0 spans 9 elements, 4 of them gaps between the view's elements.
    assert breach.tensor == "input 1"
    assert (breach.bytes_changed, breach.first_offset, breach.last_offset) == (16, 4, 31)


def test_write_past_a_scratch_allocation_is_a_breach(worker: Worker) -> None:
    result = run(worker, call("scratch_overrun", TensorArg(torch.randn(8))))
    (breach,) = result.breaches
    assert (breach.tensor, breach.first_offset, breach.bytes_changed) == ("scratch 0", 16, 4)


def test_output_that_is_an_input_is_reported(worker: Worker) -> None:
    result = run(worker, call("identity", TensorArg(torch.randn(4))))
    assert result.calls[0].aliases == ("output 0 ~ input 1",)


def test_outputs_sharing_memory_are_reported(worker: Worker) -> None:
    result = run(worker, call("twice", TensorArg(torch.randn(4))))
    assert result.calls[0].aliases == ("output 0 ~ output 1",)


def test_outputs_that_interleave_in_one_storage_share_no_memory(worker: Worker) -> None:
    x = torch.randn(3, 4)
    result = run(worker, call("split_rows", TensorArg(x)))
    assert result.error == ""
    assert torch.equal(result.calls[0].outputs[1], x * 2)
    assert result.calls[0].aliases == ()


def test_outputs_sharing_part_of_their_elements_are_reported(worker: Worker) -> None:
    result = run(worker, call("overlapping_rows", TensorArg(torch.randn(8))))
    assert result.calls[0].aliases == ("output 0 ~ output 1",)


def test_returning_a_cached_buffer_shows_in_changed_later(worker: Worker) -> None:
    first, second = torch.zeros(4), torch.ones(4)
    result = run(worker, call("cached", TensorArg(first)), call("cached", TensorArg(second)))
    assert result.error == ""
    assert torch.equal(result.calls[0].outputs[0], first)
    assert result.changed_later == ((0, 0),)


def test_exception_is_reported_and_the_worker_stays_up(worker: Worker) -> None:
    before = pid_of(worker)
    result = run(worker, call("fail", TensorArg(torch.randn(4))))
    assert result.error_kind == "exception"
    assert "ValueError: shape not supported by this kernel" in result.error
    assert "behaviours.py" in result.error
    assert "kernelaudit/runner" not in result.error
    assert pid_of(worker) == before


def test_segfault_is_a_crash_and_the_next_run_works(worker: Worker) -> None:
    result = run(worker, call("segfault", TensorArg(torch.randn(4))))
    assert result.error_kind == "crash"
    assert "SIGSEGV" in result.error
    x = torch.randn(4)
    assert torch.equal(only_output(run(worker, call("add", TensorArg(x), TensorArg(x)))), 2 * x)


def test_hang_is_a_timeout_and_the_next_run_works(worker: Worker) -> None:
    began = time.monotonic()
    result = run(worker, call("spin", TensorArg(torch.randn(4))))
    assert time.monotonic() - began < TIMEOUT_S + 3
    assert result.error_kind == "timeout"
    assert f"{TIMEOUT_S:g} s" in result.error
    x = torch.randn(4)
    assert torch.equal(only_output(run(worker, call("add", TensorArg(x), TensorArg(x)))), 2 * x)


def test_prints_do_not_break_the_channel(worker: Worker) -> None:
    x = torch.randn(4)
    assert torch.equal(only_output(run(worker, call("chatty", TensorArg(x)))), x + 1)


def test_returning_a_non_tensor_breaks_the_contract(worker: Worker) -> None:
    result = run(worker, call("not_a_tensor", TensorArg(torch.randn(4))))
    assert result.error_kind == "contract"
    assert "returned a float" in result.error


@pytest.mark.parametrize("region_most", [1 << 31, 1 << 16])
def test_large_inputs_and_outputs_cross_whole_in_the_regions_or_past_them(
    monkeypatch: pytest.MonkeyPatch, region_most: int
) -> None:
    """Through the shared regions where they fit, through the pipe where they do not: the
    candidate gets the same values and the auditor the same results either way."""
    monkeypatch.setattr(process, "region_most_bytes", lambda: region_most)
    x, y = torch.randn(300, 1000), torch.randn(70_000)
    with Worker(parse_candidate(f"{FIXTURE}::candidate"), "cpu", timeout_s=TIMEOUT_S) as fresh:
        for values in (x, y, x):
            result = run(fresh, call("twice", TensorArg(values)), call("identity", TensorArg(y)))
            assert result.error == "", result.error
            assert torch.equal(result.calls[0].outputs[0], values * 2)
            assert torch.equal(result.calls[1].outputs[0], y)
