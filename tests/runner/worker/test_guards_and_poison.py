"""Guarded buffers and poison, in process: what a breach report says, what poison holds."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from kernelaudit.runner.boundary.guard import GUARD_BYTES, allocate, breach, holds, place, same_bits
from kernelaudit.runner.boundary.poison import PoisonMode, poison_value


def test_untouched_buffer_has_no_breach() -> None:
    guarded = place("input 0", torch.randn(3, 5), "strided", "cpu")
    guarded.view.mul_(2)  # writing every element is in bounds
    assert breach(guarded, call=0) is None


def test_breach_offsets_are_bytes_from_the_first_element() -> None:
    guarded = allocate("output 0", (4,), (1,), torch.float32, "cpu")
    base = guarded.first_byte
    guarded.buffer[base - 3] = 0
    guarded.buffer[base + 16 + 5] = 0
    found = breach(guarded, call=2)
    assert found is not None
    assert (found.tensor, found.call, found.bytes_changed) == ("output 0", 2, 2)
    assert (found.first_offset, found.last_offset) == (-3, 21)


def test_both_bands_are_guard_bytes() -> None:
    guarded = allocate("output 0", (4,), (1,), torch.float32, "cpu")
    assert guarded.first_byte == GUARD_BYTES
    assert guarded.buffer.numel() == 2 * GUARD_BYTES + 16


def test_expanded_input_shares_memory_and_keeps_its_values() -> None:
    values = torch.randn(1, 6).expand(4, 6).contiguous()
    guarded = place("input 0", values, "expanded", "cpu")
    assert guarded.view.stride()[0] == 0
    assert torch.equal(guarded.view, values)
    assert breach(guarded, call=0) is None


@pytest.mark.parametrize(
    ("dtype", "nan", "sentinel"),
    [
        (torch.float32, math.nan, -12345.6789),
        (torch.float16, math.nan, -12345.6789),
        (torch.bfloat16, math.nan, -12345.6789),
        (torch.int32, -(2**31), 0x2F2F2F2F),
        (torch.int8, -128, 0x2F),
        (torch.uint8, 255, 0x2F),
        (torch.bool, True, True),
    ],
)
def test_poison_values(dtype: torch.dtype, nan: float, sentinel: float) -> None:
    got = poison_value("nan", dtype)
    assert got == nan or (math.isnan(nan) and math.isnan(got))
    assert poison_value("sentinel", dtype, sentinel=-12345.6789) == sentinel


def test_canary_and_sentinel_differ_from_one_process_to_the_next() -> None:
    """Nothing a candidate can read off its memory is a constant it could know in advance:
    the bytes around its tensors and the sentinel poison are drawn anew in every process."""
    script = (
        "import torch; from kernelaudit.runner.boundary.guard import allocate, GUARD_BYTES;"
        "from kernelaudit.runner.boundary.poison import AUDIT_SENTINEL;"
        "g = allocate('input 0', (4,), (1,), torch.float32, 'cpu');"
        "print(bytes(g.buffer[:GUARD_BYTES].tolist()).hex(), AUDIT_SENTINEL)"
    )
    seen = [
        subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True
        ).stdout.split()
        for _ in range(2)
    ]
    (band_a, sentinel_a), (band_b, sentinel_b) = seen
    assert band_a != band_b and sentinel_a != sentinel_b
    assert len(set(bytes.fromhex(band_a))) > 64, "a band is not one byte repeated"
    assert 1e3 <= abs(float(sentinel_a)) < 3e4


def test_float8_sentinel_is_finite() -> None:
    value = torch.tensor(poison_value("sentinel", torch.float8_e4m3fn)).to(torch.float8_e4m3fn)
    assert bool(value.float().isfinite())


def test_poison_mode_poisons_and_guards_empty_but_not_zeros() -> None:
    with PoisonMode("sentinel") as mode:
        scratch = torch.empty(3, 2).t()
        like = torch.empty_like(scratch)
        zeros = torch.zeros(4)
    assert bool((scratch == poison_value("sentinel", torch.float32)).all())
    assert like.stride() == scratch.stride()
    assert bool((like == poison_value("sentinel", torch.float32)).all())
    assert bool((zeros == 0).all())
    assert [a.label for a in mode.allocations] == ["scratch 0", "scratch 1"]
    assert mode.allocations[0].view.data_ptr() == scratch.data_ptr()


def test_expanded_layout_refuses_values_that_vary_along_the_broadcast() -> None:
    with pytest.raises(ValueError, match="stride 0"):
        place("input 0", torch.randn(4, 6), "expanded", "cpu")


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "broadcast"])
def test_a_buffer_holds_its_values_until_one_bit_of_them_changes(device: str, layout: str) -> None:
    values = torch.full((4, 6), 1.5) if layout == "broadcast" else torch.randn(4, 6)
    guarded = place("input 0", values, layout, device)
    assert holds(guarded.view, values)
    changed = values.clone()
    changed[3, 5] = torch.nextafter(changed[3, 5], torch.tensor(math.inf))
    assert not holds(guarded.view, changed)
    with torch.no_grad():
        guarded.view[0, 0] = -0.0 if values[0, 0] == 0.0 else 0.0
    assert not holds(guarded.view, values)


def test_bits_compare_equal_only_when_every_byte_does_wherever_the_views_start() -> None:
    # views starting one element (4 bytes) or one byte into their storage, against fresh
    # tensors that start at 0: the same bytes whatever word the comparison runs in
    values = torch.arange(9.0)
    assert same_bits(values[1:5], torch.arange(1.0, 5.0))
    assert not same_bits(values[1:5], torch.arange(2.0, 6.0))
    raw = torch.arange(12, dtype=torch.uint8)
    assert same_bits(raw[1:6], raw.clone()[1:6])
    assert not same_bits(raw[1:6], raw[2:7])
    # NaN payloads and the sign of zero count; shapes and dtypes must agree
    nan = torch.full((4,), float("nan"))
    assert same_bits(nan, nan.clone())
    assert not same_bits(torch.tensor([0.0, -0.0]), torch.tensor([0.0, 0.0]))
    assert not same_bits(torch.zeros(4), torch.zeros(2, 2))
    assert not same_bits(torch.zeros(4), torch.zeros(4, dtype=torch.int32))
