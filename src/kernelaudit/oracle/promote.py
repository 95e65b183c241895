"""Running a reference in float64, whatever precision it asks for.

A reference written for bfloat16 casts, allocates and reduces in low precision on purpose. To
compute the truth those requests must all become float64, or the truth inherits the very
rounding the audit measures. `promoted_to_fp64()` rewrites them at the torch-function level:
every floating dtype named anywhere becomes float64 (complex becomes complex128), floating
tensors the reference did not receive as inputs (module weights, captured constants) are
promoted where they are used, and factories without a dtype default to float64.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_WIDER_CAST: dict[Callable[..., Any], Callable[..., Any]] = {
    torch.Tensor.half: torch.Tensor.double,
    torch.Tensor.bfloat16: torch.Tensor.double,
    torch.Tensor.float: torch.Tensor.double,
    torch.Tensor.chalf: torch.Tensor.cdouble,
    torch.Tensor.cfloat: torch.Tensor.cdouble,
}

_LOW_PRECISION_TYPE_NAME = re.compile(r"^(torch(?:\.cuda)?)\.(?:Half|BFloat16|Float)Tensor$")

# In-place dunders and setters write into their first argument: promoting it would write into
# a copy and lose the write. (`x += y` reaches the mode as `add_`, caught by the trailing `_`.)
_WRITES_FIRST_ARGUMENT = frozenset(
    {"__setitem__", "__set__", "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ipow__"}
)


def promoted_copy(value: object) -> object:
    """A floating tensor copied at its promoted dtype; any other value as it is."""
    if not isinstance(value, torch.Tensor):
        return value
    return value.to(dtype=promoted_dtype(value.dtype), copy=True)


def promoted_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the truth computes in instead of `dtype`."""
    if dtype.is_complex:
        return torch.complex128
    if dtype.is_floating_point:
        return torch.float64
    return dtype


def _writes_first_argument(func: Callable[..., Any]) -> bool:
    name = getattr(func, "__name__", "")
    in_place_method = name.endswith("_") and not name.endswith("__")
    return in_place_method or name in _WRITES_FIRST_ARGUMENT


_QUANTIZED = frozenset(
    dtype
    for dtype in (
        getattr(torch, name, None)
        for name in (
            "float8_e4m3fn",
            "float8_e4m3fnuz",
            "float8_e5m2",
            "float8_e5m2fnuz",
            "float8_e8m0fnu",
            "float4_e2m1fn_x2",
        )
    )
    if isinstance(dtype, torch.dtype)
)
"""A cast to one of these inside a reference is a quantization the problem specifies (FP8
activations, scales), not a precision it settles for: the truth rounds there too, then
computes on in float64 (a tensor of these dtypes is still promoted when used, exactly)."""


def _promote(value: object) -> object:
    if isinstance(value, torch.dtype):
        return value if value in _QUANTIZED else promoted_dtype(value)
    if isinstance(value, torch.Tensor):
        wider = promoted_dtype(value.dtype)
        return value if wider == value.dtype else value.to(wider)
    if isinstance(value, str):
        return _LOW_PRECISION_TYPE_NAME.sub(r"\1.DoubleTensor", value)
    if isinstance(value, type) and isinstance(getattr(value, "dtype", None), torch.dtype):
        # legacy tensor types such as torch.cuda.HalfTensor, accepted by Tensor.type()
        return _promote(f"{value.__module__}.{value.__name__}")
    if type(value) in (list, tuple):  # torch.cat([...]) and friends; not namedtuples
        return type(value)(_promote(v) for v in value)  # type: ignore[call-arg]
    return value


_FLOATING_FACTORIES = frozenset(
    f
    for f in (
        torch.empty,
        torch.empty_strided,
        torch.zeros,
        torch.ones,
        torch.rand,
        torch.randn,
        torch.eye,
        torch.linspace,
        torch.logspace,
        torch.hann_window,
        torch.hamming_window,
        torch.blackman_window,
        torch.bartlett_window,
        torch.kaiser_window,
    )
)
"""Factories whose result is floating in the default dtype when no dtype is named."""

_INFERRING_FACTORIES = frozenset(
    (torch.tensor, torch.as_tensor, torch.asarray, torch.full, torch.arange, torch.scalar_tensor)
)
"""Factories whose result takes its dtype from the data (an integer or a bool stays one),
and the default dtype for Python floats."""


class _Float64Mode(TorchFunctionMode):
    def __init__(self, factories: bool = False) -> None:
        super().__init__()
        self.factories = factories
        """Whether the mode gives factories that name no dtype float64 itself (otherwise the
        default dtype does)."""

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: object,
        args: tuple[object, ...] = (),
        kwargs: Mapping[str, object] | None = None,
    ) -> object:
        kwargs = dict(kwargs or {})
        func = _WIDER_CAST.get(func, func)
        if getattr(func, "__name__", "") == "__get__":
            # attribute reads (.shape, .T, .data) keep aliasing the tensor they read
            return func(*args, **kwargs)
        keep = 1 if args and _writes_first_argument(func) else 0
        args = tuple(args[:keep]) + tuple(_promote(a) for a in args[keep:])
        kwargs = {k: v if k == "out" else _promote(v) for k, v in kwargs.items()}
        if self.factories and "dtype" not in kwargs and "out" not in kwargs:
            if func in _FLOATING_FACTORIES:
                return func(*args, dtype=torch.float64, **kwargs)
            if func in _INFERRING_FACTORIES:
                made = func(*args, **kwargs)
                if isinstance(made, torch.Tensor) and promoted_dtype(made.dtype) != made.dtype:
                    # a Python float made in the default dtype: made again from the data
                    return func(*args, dtype=promoted_dtype(made.dtype), **kwargs)
                return made
        return func(*args, **kwargs)


@contextmanager
def full_precision_accumulation() -> Iterator[None]:
    """Turn off TF32 and reduced-precision matmul reductions for the duration.

    They change the results of float32, float16 and bfloat16 matmuls and convolutions on GPUs;
    the native baseline must be an honest computation at the candidate's own precision.
    """
    matmul = torch.backends.cuda.matmul
    saved = (
        matmul.allow_tf32,
        matmul.allow_fp16_reduced_precision_reduction,
        matmul.allow_bf16_reduced_precision_reduction,
        torch.backends.cudnn.allow_tf32,
    )
    matmul.allow_tf32 = False
    matmul.allow_fp16_reduced_precision_reduction = False
    matmul.allow_bf16_reduced_precision_reduction = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        (
            matmul.allow_tf32,
            matmul.allow_fp16_reduced_precision_reduction,
            matmul.allow_bf16_reduced_precision_reduction,
            torch.backends.cudnn.allow_tf32,
        ) = saved


def in_float64(function: Callable[..., Any], args: Sequence[object]) -> Any:
    """`function` run on float64 copies of `args` (`promoted_copy`) inside
    `promoted_to_fp64(process_wide=False)`: a truth computed beside threads that keep torch's
    default dtype and precision flags."""
    promoted = [promoted_copy(a) for a in args]
    with promoted_to_fp64(process_wide=False):
        return function(*promoted)


@contextmanager
def promoted_to_fp64(process_wide: bool = True) -> Iterator[None]:
    """Within this block, every floating computation torch is asked for happens in float64.

    Covered: dtypes passed to any torch function or tensor method, positionally or as `dtype=`
    (`.to`, `.type`, factories, `sum(dtype=)`, `softmax(dtype=)`, ...); `.half()`,
    `.bfloat16()`, `.float()` (and their complex forms); legacy type names given to `.type()`;
    floating tensors of lower precision passed to any function, which are promoted copies (so
    `.to(other)` and `.type_as(other)` follow a promoted `other`); factories with no dtype,
    through the default dtype. Integer and bool dtypes are untouched. Not covered: writes into
    a low-precision tensor created outside the block, which stay in its precision.

    The default dtype and the matmul precision flags are the whole process's: another thread
    making a tensor meanwhile gets float64 too. `process_wide=False` touches neither, so
    other threads may run torch beside it: the factories torch offers are then given float64
    by the block itself (those that infer their dtype from Python floats are made again from
    the data), and float64 matmuls never use TF32 anyway. What only the default dtype reaches
    stays in float32 then: an integer tensor divided, or multiplied by a Python float.
    """
    if not process_wide:
        with _Float64Mode(factories=True):
            yield
        return
    previous_default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with _Float64Mode(), full_precision_accumulation():
            yield
    finally:
        torch.set_default_dtype(previous_default)
