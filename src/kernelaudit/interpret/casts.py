"""Triton's interpreter's float casts, made faster where the bits cannot differ.

On a CPU, Triton's interpreter holds a kernel's blocks as NumPy arrays, and a cast between
float dtypes is NumPy's (`InterpreterBuilder.cast_impl`). Two of the casts kernels make most
are slow there:

- float32 to float16, where the results are float16's subnormals: NumPy's conversion takes
  28.5 ms for a (2048, 256) block of values around 1e-5 on the 2-core CPU, 0.8 ms for values
  around 1. In an audit of the cross-entropy backward example, the training worker's
  candidate rounded its float32 gradients (that small) to float16 900 times, 10.2 of the
  check's 28 s.
- bfloat16 to float32 and back, which NumPy has no dtype for: the interpreter takes each
  element apart into sign, exponent and significand (`_convert_float`), and wherever a block
  holds an exponent of zero (a zero, which every masked load's `other=0` fills in) walks the
  significand's bits one at a time, seven passes for bfloat16 and twenty-three for float32.

Here the same bits come another way: float32 to float16 by torch's conversion (round to
nearest even, as NumPy's), with NumPy's own for the NaNs, whose payloads the two keep
differently; between float32 and bfloat16 (truncating, as the interpreter's cast does) by a
shift, for every value but the subnormal ones, which the interpreter converts its own way (it
flushes bfloat16's to zero), so a block holding one takes the interpreter's path. Every one of
the 2^32 float32 values converts to float16 bit for bit as NumPy converts it
(`benchmarks/results/interpreter-casts-cpu.txt`); the tests check every bfloat16 value and
float32 values of every exponent (`tests/interpret/test_casts.py`).

Installed in the processes that run a candidate's Triton kernels through the interpreter (the
worker, the training worker, the interpreted bounds run), once Triton is imported; the
unwatched run's plain process runs the interpreter as it comes.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

_FLOAT32_EXPONENT = 0x7F800000
_FLOAT32_SIGNIFICAND = 0x007FFFFF
_BFLOAT16_EXPONENT = 0x7F80
_BFLOAT16_SIGNIFICAND = 0x007F

Shortcut = Callable[[np.ndarray], np.ndarray | None]
"""A cast's values another way, or None where it does not give the interpreter's bits."""


def interpreted_triton() -> tuple[Any, Any] | None:
    """Triton's interpreter module and its language module, where this process has imported
    them and interprets kernels (`TRITON_INTERPRET=1`); None otherwise."""
    module = sys.modules.get("triton.runtime.interpreter")
    language = sys.modules.get("triton.language")
    if module is None or language is None or os.environ.get("TRITON_INTERPRET") != "1":
        return None
    return module, language


def install() -> bool:
    """Make this process's interpreter take the shortcuts where they give the same bits;
    whether it did (Triton imported, interpreting, and not done already)."""
    found = interpreted_triton()
    if found is None:
        return False
    module, language = found
    builder = getattr(module, "InterpreterBuilder", None)
    original = getattr(builder, "cast_impl", None)
    if original is None or getattr(original, "_shortcuts", False) or not _as_known(module):
        return False
    shortcuts: list[tuple[Any, Any, Shortcut]] = [
        (language.float32, language.float16, to_float16),
        (language.bfloat16, language.float32, bfloat16_to_float32),
        (language.float32, language.bfloat16, float32_to_bfloat16),
    ]
    handle, numpy_dtype = module.TensorHandle, module._get_np_dtype

    def cast_impl(self: Any, src: Any, dst_type: Any) -> Any:
        source, target = src.dtype.scalar, dst_type.scalar
        for known_source, known_target, shortcut in shortcuts:
            if source == known_source and target == known_target:
                made = shortcut(src.data)
                if made is not None:
                    return handle(made.view(numpy_dtype(dst_type)), target)
                break
        return original(self, src, dst_type)

    cast_impl._shortcuts = True  # type: ignore[attr-defined]
    builder.cast_impl = cast_impl
    return True


def _as_known(module: Any) -> bool:
    """Whether the interpreter's casts are laid out as this module was written against
    (`cast_impl(self, src, dst_type)` beside `TensorHandle` and `_get_np_dtype`, as in Triton
    3.9): another layout keeps its own casts."""
    try:
        parameters = list(inspect.signature(module.InterpreterBuilder.cast_impl).parameters)
    except (TypeError, ValueError):
        return False
    return parameters == ["self", "src", "dst_type"] and all(
        hasattr(module, name) for name in ("TensorHandle", "_get_np_dtype")
    )


def to_float16(data: np.ndarray) -> np.ndarray | None:
    """`data` (float32) as float16, bit for bit as NumPy's `astype` rounds it."""
    values = np.ascontiguousarray(data)
    if values.dtype != np.float32:
        return None
    if not values.flags.writeable:
        values = values.copy()
    half = torch.from_numpy(values).to(torch.float16).numpy()
    nan = np.isnan(values)
    if nan.any():
        half[nan] = values[nan].astype(np.float16)
    return half.reshape(np.shape(data))


def bfloat16_to_float32(data: np.ndarray) -> np.ndarray | None:
    """The float32 bits (as uint32) of bfloat16 values held as 16-bit words, shaped as `data`;
    None where a value is subnormal."""
    return _shifted(
        data,
        np.uint16,
        _BFLOAT16_EXPONENT,
        _BFLOAT16_SIGNIFICAND,
        lambda b: b.astype(np.uint32) << 16,
    )


def float32_to_bfloat16(data: np.ndarray) -> np.ndarray | None:
    """The bfloat16 bits (as uint16) of float32 values truncated, shaped as `data`; None where
    a value is subnormal."""
    return _shifted(
        data,
        np.uint32,
        _FLOAT32_EXPONENT,
        _FLOAT32_SIGNIFICAND,
        lambda b: (b >> 16).astype(np.uint16),
    )


def _shifted(
    data: np.ndarray,
    word: type[np.unsignedinteger[Any]],
    exponent: int,
    significand: int,
    shift: Callable[[np.ndarray], np.ndarray],
) -> np.ndarray | None:
    """`shift` of `data`'s bits read as `word`s, shaped as `data`; None where `data` is not
    of that width or holds a subnormal value (an exponent of zero, a significand that is not)."""
    bits = np.ascontiguousarray(data)
    if bits.dtype.itemsize != np.dtype(word).itemsize:
        return None
    bits = bits.view(word)
    if np.any(((bits & exponent) == 0) & ((bits & significand) != 0)):
        return None
    return shift(bits).reshape(np.shape(data))
