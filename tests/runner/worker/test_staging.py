"""An invocation's large inputs copied to the device once: calls placed from the copy see the
values the auditor sent, whatever earlier calls wrote; a call that fails for memory while
copies are held is made again without them; a copy that would crowd the candidate is not
made."""

from __future__ import annotations

import pytest
import torch

from kernelaudit.runner.boundary.messages import Call, Invocation, TensorArg
from kernelaudit.runner.worker import staging
from kernelaudit.runner.worker.call import run_invocation
from kernelaudit.runner.worker.staging import Staged

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

DEVICE = torch.device("cuda")


def _staged() -> Staged:
    return Staged(DEVICE, least_bytes=1024)


def test_calls_placed_from_the_copy_see_the_sent_values_after_a_call_wrote_its_input() -> None:
    values = torch.arange(4096, dtype=torch.float32)
    calls_made = []

    def candidate(x: torch.Tensor) -> torch.Tensor:
        calls_made.append(x.device)
        out = x * 2
        if len(calls_made) == 2:
            x.zero_()  # writes its input on the second call only
        return out

    staged = _staged()
    invocation = Invocation(
        calls=tuple(Call(args=(TensorArg(values),)) for _ in range(3)), return_inputs=(0,)
    )
    result = run_invocation(candidate, invocation, DEVICE, staged=staged)

    assert not result.error
    assert [len(c.outputs) for c in result.calls] == [1, 1, 1]
    for outcome in result.calls:  # the third call was placed from the copy, not call 2's buffer
        torch.testing.assert_close(outcome.outputs[0], values * 2, rtol=0, atol=0)
    after = [c.inputs_after[0] for c in result.calls]
    assert after[0] is None and after[2] is None  # compared with the copy: left as given
    assert after[1] is not None and not after[1].any()  # the write is seen
    assert staged.tensors() == []  # let go when the invocation ended


def test_a_call_that_fails_for_memory_while_copies_are_held_is_made_again_without_them() -> None:
    values = torch.ones(4096)
    attempts = []

    def candidate(x: torch.Tensor) -> torch.Tensor:
        attempts.append(1)
        if len(attempts) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB")
        return x + 1

    invocation = Invocation(calls=(Call(args=(TensorArg(values),)),))
    result = run_invocation(candidate, invocation, DEVICE, staged=_staged())

    assert not result.error
    assert len(attempts) == 2
    torch.testing.assert_close(result.calls[0].outputs[0], values + 1)


def test_a_call_that_fails_for_memory_without_copies_held_fails_for_memory() -> None:
    values = torch.ones(4096)
    attempts = []

    def candidate(x: torch.Tensor) -> torch.Tensor:
        attempts.append(1)
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB")

    invocation = Invocation(calls=(Call(args=(TensorArg(values),)),))
    result = run_invocation(candidate, invocation, DEVICE, staged=Staged(DEVICE))

    assert result.error_kind == "memory"
    assert "out of memory" in (result.error or "")
    assert len(attempts) == 1


def test_a_copy_larger_than_a_quarter_of_the_room_left_is_not_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    values = torch.ones(4096)  # 16 KiB
    monkeypatch.setattr(staging, "room", lambda device: 4 * values.nbytes - 1)
    staged = _staged()

    assert staged.on_device(values) is values
    assert staged.tensors() == []

    monkeypatch.setattr(staging, "room", lambda device: 4 * values.nbytes)
    roomy = _staged()
    copy = roomy.on_device(values)
    assert copy.device.type == "cuda" and torch.equal(copy.cpu(), values)
    assert roomy.on_device(values) is copy  # made once
