"""A case's truth and baseline stay on the device they were made on while the case is kept:
comparisons there take that copy instead of copying the host's again, and judge exactly as
the host's copy would."""

import gc
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch

from kernelaudit.device_copies import DEVICE_COPIES, DeviceCopies, moved
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.materialize import materialize
from kernelaudit.oracle import resident as resident_module
from kernelaudit.oracle.compare import compare
from kernelaudit.oracle.resident import Resident
from kernelaudit.oracle.truth import expected
from kernelaudit.problem.spec import Output, Problem, TensorInput

# a device other than the host's, where tensors have shapes and dtypes but no values: enough
# to follow what is kept and what is copied
ELSEWHERE = torch.device("meta")
FOUR_FLOATS = 4 * 4


def test_a_host_copy_is_taken_where_it_was_made_and_copied_where_it_was_not() -> None:
    kept = DeviceCopies(most_bytes=1 << 20)
    host = torch.arange(4.0)
    there = torch.empty(4, device=ELSEWHERE)
    kept.hold(host, there)
    assert kept.on(host, ELSEWHERE) is there
    widened = kept.on(host, ELSEWHERE, torch.float64)
    assert widened.device == ELSEWHERE and widened.dtype == torch.float64
    assert kept.on(host, torch.device("cpu")) is host  # already where it is asked for
    other = torch.arange(4.0)  # the same values, another tensor: nothing kept for it
    copied = kept.on(other, ELSEWHERE)
    assert copied is not there and copied.device == ELSEWHERE
    with pytest.raises(ValueError, match="dtype and shape"):
        kept.hold(torch.arange(4.0), torch.empty(5, device=ELSEWHERE))
    with pytest.raises(ValueError, match="dtype and shape"):
        kept.hold(torch.arange(4.0), torch.empty(4, dtype=torch.float64, device=ELSEWHERE))


def test_what_is_kept_stays_within_its_bytes_and_goes_with_its_host_copy() -> None:
    kept = DeviceCopies(most_bytes=2 * FOUR_FLOATS)
    a, b, c = (torch.full((4,), float(i)) for i in range(3))
    there = {}
    for name, host in zip("ab", (a, b), strict=True):
        there[name] = torch.empty(4, device=ELSEWHERE)
        kept.hold(host, there[name])
    assert kept.on(a, ELSEWHERE) is there["a"]  # now the most recently used
    kept.hold(c, torch.empty(4, device=ELSEWHERE))  # past the bytes: "b"'s goes
    assert kept.held_bytes() == 2 * FOUR_FLOATS
    assert kept.on(b, ELSEWHERE) is not there["b"]
    assert kept.on(a, ELSEWHERE) is there["a"]
    too_large = torch.zeros(12)
    kept.hold(too_large, torch.empty(12, device=ELSEWHERE))  # larger than all it may keep
    assert kept.held_bytes() == 2 * FOUR_FLOATS
    del a
    gc.collect()
    assert kept.held_bytes() == FOUR_FLOATS  # the case was dropped: so is its copy
    kept.clear()
    assert kept.held_bytes() == 0


def test_a_copy_made_to_compare_is_held_for_the_next_comparison_while_its_host_lives() -> None:
    kept = DeviceCopies(most_bytes=2 * FOUR_FLOATS)
    given = torch.arange(4.0)
    there = kept.copied(given, ELSEWHERE)
    assert there.device == ELSEWHERE and there.shape == given.shape
    assert kept.copied(given, ELSEWHERE) is there  # the next call of the case: no new copy
    assert kept.copied(given, torch.device("cpu")) is given  # already where it is asked for
    other = torch.arange(4.0)  # the same values, another tensor: a copy of its own
    assert kept.copied(other, ELSEWHERE) is not there
    too_large = torch.zeros(12)
    assert kept.copied(too_large, ELSEWHERE).device == ELSEWHERE  # made, never held
    assert kept.held_bytes() == 2 * FOUR_FLOATS
    del given
    gc.collect()
    assert kept.held_bytes() == FOUR_FLOATS


def test_out_of_device_memory_with_results_kept_is_computed_again_without_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kept = DeviceCopies(most_bytes=1 << 20)
    monkeypatch.setattr(resident_module, "DEVICE_COPIES", kept)
    host = torch.zeros(4)
    kept.hold(host, torch.empty(4, device=ELSEWHERE))
    tries: list[int] = []

    def truth() -> str:
        tries.append(kept.held_bytes())
        if kept.held_bytes():
            raise torch.cuda.OutOfMemoryError("no room beside the kept results")
        return "computed"

    assert Resident(resident_module.DRAWS, most_bytes=1 << 20).retried_without(truth) == "computed"
    assert tries == [FOUR_FLOATS, 0]


# a reference that returns the same buffer at every call, written again each time
_BUFFERS: dict[tuple[object, ...], torch.Tensor] = {}


def _into_its_buffer(x: torch.Tensor) -> torch.Tensor:
    out = _BUFFERS.setdefault((x.shape, x.dtype, x.device), torch.empty_like(x))
    torch.mul(x, 3.0, out=out)
    return out


TRIPLED = Problem(
    name="tripled",
    reference=_into_its_buffer,
    axes=("rows", "cols"),
    inputs=(TensorInput("x", ("rows", "cols")),),
    outputs=(Output("y", ("rows", "cols"), "x"),),
    workloads=({"rows": 64, "cols": 96},),
)


def _case(**values: str) -> Case:
    return Case((("rows", 64), ("cols", 96)), 0, tuple(sorted(values.items())), (), 0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_results_kept_on_a_gpu_are_the_host_copies_bits_and_judge_as_they_would() -> None:
    cuda = torch.device("cuda", torch.cuda.current_device())
    config = {"x": torch.bfloat16}
    DEVICE_COPIES.clear()
    try:
        first = expected(TRIPLED, materialize(TRIPLED, _case()), config, "cuda")
        # the same buffer written with other values: what is kept of the first case is its own
        second = expected(TRIPLED, materialize(TRIPLED, _case(x="large")), config, "cuda")
        assert not torch.equal(first.truth[0], second.truth[0])
        for case in (first, second):
            for host in (*case.truth, *case.baseline):
                on_device = DEVICE_COPIES.on(host, cuda)
                assert on_device.device == cuda
                assert DEVICE_COPIES.on(host, cuda) is on_device  # kept, not copied again
                assert torch.equal(on_device.cpu(), host)
        wrong = (first.truth[0] * 1.25).to(torch.bfloat16)
        right = first.baseline[0].clone()
        judged = [
            compare("y", values, first.truth[0], first.baseline[0], torch.bfloat16, device=cuda)
            for values in (wrong, right)
        ]
        DEVICE_COPIES.clear()
        from_host = [
            compare("y", values, first.truth[0], first.baseline[0], torch.bfloat16, device=cuda)
            for values in (wrong, right)
        ]
        assert [c.passed for c in judged] == [False, True]
        assert judged == from_host
    finally:
        DEVICE_COPIES.clear()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_large_result_laid_out_otherwise_comes_to_the_host_through_the_staging_buffers(
    monkeypatch: pytest.MonkeyPatch, staged_copies: list[int]
) -> None:
    from kernelaudit import host_copies
    from kernelaudit.oracle.kept_results import copied_to_host

    # the sizes scaled down, and no page-locked block to be had: the copy is pageable
    monkeypatch.setattr(host_copies, "STAGED_LEAST_BYTES", 1 << 20)
    monkeypatch.setattr(host_copies, "pinned_most_bytes", lambda: 0)
    # a patch embedding's output: (batch, hidden, patches) transposed to (batch, patches, hidden)
    result = torch.randn(2, 64, 4099, device="cuda").transpose(1, 2)
    host = copied_to_host(result, torch.float64)
    assert staged_copies == [result.numel()]
    assert host.is_contiguous() and host.shape == result.shape and not host.is_pinned()
    assert torch.equal(host, result.double().cpu())
    held = DEVICE_COPIES.on(host, result.device)
    assert held.device == result.device and torch.equal(held, result.double())


class _Moves(torch.overrides.TorchFunctionMode):
    """The tensors' `to` calls made while it is on: (source device, source dtype, result
    device, result dtype)."""

    def __init__(self) -> None:
        super().__init__()
        self.moves: list[tuple[str, torch.dtype, str, torch.dtype]] = []

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: object,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        result = func(*args, **(kwargs or {}))
        if func is torch.Tensor.to:
            source = args[0]
            self.moves.append((source.device.type, source.dtype, result.device.type, result.dtype))
        return result


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.uint8])
def test_a_host_tensor_judged_wider_elsewhere_crosses_at_its_own_dtype(
    dtype: torch.dtype,
) -> None:
    """A result or a kept draw sent to the device at float64 is not cast on the host first
    (four times the bytes for a bfloat16 one, from fresh pageable memory): it crosses as it
    is and is widened there."""
    host = torch.arange(12).reshape(3, 4).to(dtype)
    with _Moves() as seen:
        there = DeviceCopies(most_bytes=1 << 20).on(host, ELSEWHERE, torch.float64)
    assert there.device == ELSEWHERE and there.dtype == torch.float64
    assert there.shape == host.shape
    assert seen.moves[0] == ("cpu", dtype, "meta", dtype)
    assert all(source != "cpu" for source, _, _, wanted in seen.moves if wanted != dtype)


def test_a_narrowing_or_inexact_move_is_cast_on_the_host_and_a_copy_asked_for_is_one() -> None:
    """A float64 draw sent at bfloat16 is cast where it is (fewer bytes cross), and so are
    integers that a float may not hold exactly (the host's rounding, as torch's own move has
    it); a 16-bit integer widened to float32 is exact, and crosses as it is. One asked to be
    copied is never the tensor given, wherever it goes."""
    drawn = torch.linspace(-3, 3, 8, dtype=torch.float64)
    with _Moves() as seen:
        sent = moved(drawn, ELSEWHERE, torch.bfloat16)
        moved(torch.arange(8), ELSEWHERE, torch.float64)
        moved(torch.arange(8, dtype=torch.int32), ELSEWHERE, torch.complex128)
    assert sent.dtype == torch.bfloat16 and sent.device == ELSEWHERE
    assert seen.moves == [
        ("cpu", torch.float64, "meta", torch.bfloat16),
        ("cpu", torch.int64, "meta", torch.float64),
        ("cpu", torch.int32, "meta", torch.complex128),
    ]
    with _Moves() as seen:
        moved(torch.arange(8, dtype=torch.int16), ELSEWHERE, torch.float32)
    assert seen.moves[0] == ("cpu", torch.int16, "meta", torch.int16)
    same = moved(drawn, "cpu", torch.float64, copy=True)
    assert same is not drawn and torch.equal(same, drawn)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_results_widened_on_a_device_hold_the_bits_the_host_cast_gives() -> None:
    """Cast there or on the host, a widened result holds the same values to the bit (a NaN
    as a NaN), infinities, signed zeros, subnormals and strided views included."""
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        info = torch.finfo(dtype)
        special = torch.tensor(
            [math.inf, -math.inf, math.nan, 0.0, -0.0, info.tiny / 4, info.max, info.min],
            dtype=torch.float64,
        ).to(dtype)
        values = torch.cat([special, torch.randn(4088, dtype=torch.float64).to(dtype)])
        strided = values.reshape(64, -1)[:, ::3]
        for host in (values, strided):
            there = moved(host, "cuda", torch.float64)
            assert there.is_cuda
            expected, got = host.to(torch.float64), there.cpu()
            nan = expected.isnan()
            assert torch.equal(got.isnan(), nan)
            # bit for bit where there is a number: the sign of a zero, a subnormal's last bit
            assert torch.equal(got[~nan].view(torch.int64), expected[~nan].view(torch.int64))
