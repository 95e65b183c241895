"""Triton's interpreter's float casts taken a faster way (`interpret.casts`): the same bits as
the interpreter's own, value for value, and a kernel's results unchanged."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

interpreter = pytest.importorskip("triton.runtime.interpreter")
language = pytest.importorskip("triton.language")

from kernelaudit.interpret import casts  # noqa: E402


def _own(values: np.ndarray, source: object, target: object) -> np.ndarray:
    """The interpreter's own conversion between bfloat16 and float32 (truncating)."""
    return interpreter._convert_float(values, source, target, None)


def _float32_of_every_exponent() -> np.ndarray:
    rng = np.random.default_rng(0)
    exponents = np.repeat(np.arange(256, dtype=np.uint32), 128)
    significands = rng.integers(0, 1 << 23, exponents.size, dtype=np.uint32)
    significands[::128] = 0  # zeros, infinities and powers of two among them
    signs = rng.integers(0, 2, exponents.size, dtype=np.uint32)
    return (signs << 31) | (exponents << 23) | significands


def test_every_bfloat16_value_widens_to_the_interpreters_bits() -> None:
    every = np.arange(1 << 16, dtype=np.uint16)
    subnormal = ((every & 0x7F80) == 0) & ((every & 0x7F) != 0)
    normal = every[~subnormal]
    assert np.array_equal(
        casts.bfloat16_to_float32(normal), _own(normal, language.bfloat16, language.float32)
    )
    # a block holding a subnormal is the interpreter's to convert (it flushes them to zero)
    assert casts.bfloat16_to_float32(every) is None


def test_float32_values_of_every_exponent_narrow_to_the_interpreters_bits() -> None:
    bits = _float32_of_every_exponent()
    subnormal = ((bits & 0x7F800000) == 0) & ((bits & 0x7FFFFF) != 0)
    normal = bits[~subnormal].reshape(-1, 7)
    assert np.array_equal(
        casts.float32_to_bfloat16(normal), _own(normal, language.float32, language.bfloat16)
    )
    assert casts.float32_to_bfloat16(bits) is None


def test_float32_narrows_to_float16_as_numpy_rounds_it() -> None:
    # every float16 value, the float32 values either side of it, and the ties between two
    # neighbours (where rounding to nearest even decides), with NaNs of several payloads
    halves = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    finite = halves[np.isfinite(halves)].astype(np.float32)
    below = np.nextafter(finite, np.float32(-np.inf))
    above = np.nextafter(finite, np.float32(np.inf))
    ordered = np.unique(finite)
    ties = ((ordered[:-1].astype(np.float64) + ordered[1:]) / 2).astype(np.float32)
    nans = (np.array([0x7FC00000, 0x7F800001, 0xFFC12345, 0x7FFFFFFF], np.uint32)).view(np.float32)
    past = np.array([65520.0, 65519.99, 1e30, -1e30, np.inf, -np.inf], np.float32)
    values = np.concatenate([finite, below, above, ties, nans, past])
    with np.errstate(over="ignore"):
        wanted = values.astype(np.float16)
    made = casts.to_float16(values)
    assert made is not None and made.dtype == np.float16
    assert np.array_equal(made.view(np.uint16), wanted.view(np.uint16))
    assert casts.to_float16(finite.astype(np.float64)) is None  # only float32 is taken


_KERNEL = textwrap.dedent(
    """
    import sys
    import numpy as np
    import torch
    import triton
    import triton.language as tl

    from kernelaudit.interpret import casts

    @triton.jit
    def _rounded(x_ptr, half_ptr, brain_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        inside = offsets < n
        x = tl.load(x_ptr + offsets, mask=inside, other=0.0)
        tl.store(half_ptr + offsets, x.to(tl.float16), mask=inside)
        brain = x.to(tl.bfloat16)
        tl.store(brain_ptr + offsets, (brain.to(tl.float32) * 2.0).to(tl.bfloat16), mask=inside)

    def run() -> list[bytes]:
        torch.manual_seed(0)
        x = torch.randn(1000) * 1000
        x[::10] = 0.0
        x[5] = 1e-40  # a float32 subnormal: that block is the interpreter's own
        x[7] = float("nan")
        half = torch.empty(1000, dtype=torch.float16)
        brain = torch.empty(1000, dtype=torch.bfloat16)
        _rounded[(8,)](x, half, brain, 1000, BLOCK=128)
        return [t.view(torch.int16).numpy().tobytes() for t in (half, brain)]

    plain = run()
    assert casts.install() and not casts.install()
    assert run() == plain
    print("same")
    """
)


def test_a_kernel_under_the_interpreter_gives_the_same_bits_with_the_shortcuts() -> None:
    # the package where this test finds it (installed, or on PYTHONPATH)
    env = {
        "TRITON_INTERPRET": "1",
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    ran = subprocess.run(
        [sys.executable, "-c", _KERNEL], capture_output=True, text=True, env=env, timeout=300
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.split()[-1] == "same"
