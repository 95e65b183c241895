"""Process-wide state a candidate must leave alone, and how to see that it did.

A candidate that flips TF32 or the float32 matmul precision changes what a same-process
reference computes; one that replaces `time.perf_counter`, `torch.cuda.synchronize` or
`torch.allclose` changes what a same-process harness measures and concludes; one that draws
random numbers or reseeds changes every later draw. The worker takes a snapshot before it
imports the candidate and compares against it around every call.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from kernelaudit.runner.boundary.messages import StateChange


def _flag(read: Callable[[], object]) -> Callable[[], str]:
    def value() -> str:
        try:
            return repr(read())
        except Exception as error:  # a flag this build lacks
            return f"<unreadable: {type(error).__name__}>"

    return value


_FLAGS: dict[str, Callable[[], str]] = {
    "torch.backends.cuda.matmul.allow_tf32": _flag(lambda: torch.backends.cuda.matmul.allow_tf32),
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction": _flag(
        lambda: torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction
    ),
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction": _flag(
        lambda: torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
    ),
    "torch.backends.cudnn.allow_tf32": _flag(lambda: torch.backends.cudnn.allow_tf32),
    "torch.backends.cudnn.deterministic": _flag(lambda: torch.backends.cudnn.deterministic),
    "torch.backends.cudnn.benchmark": _flag(lambda: torch.backends.cudnn.benchmark),
    "torch.get_float32_matmul_precision()": _flag(torch.get_float32_matmul_precision),
    "torch.are_deterministic_algorithms_enabled()": _flag(
        torch.are_deterministic_algorithms_enabled
    ),
    "torch.get_default_dtype()": _flag(torch.get_default_dtype),
    "torch.is_grad_enabled()": _flag(torch.is_grad_enabled),
}

FLAG_NAMES = tuple(_FLAGS)
"""The precision and determinism flags watched, each named by the expression that reads it
from `torch` (a plain process reads them by these names: `plain.caller`)."""

RNG_NAMES = ("torch RNG state (CPU)", "torch RNG state (CUDA)")
"""The random number generators' states, as a snapshot names them (CUDA's on a GPU only)."""

_FUNCTIONS: dict[str, Callable[[], object]] = {
    name: read
    for name, read in {
        "time.perf_counter": lambda: time.perf_counter,
        "time.perf_counter_ns": lambda: time.perf_counter_ns,
        "time.time": lambda: time.time,
        "time.time_ns": lambda: time.time_ns,
        "time.monotonic": lambda: time.monotonic,
        "time.monotonic_ns": lambda: time.monotonic_ns,
        "time.process_time": lambda: time.process_time,
        "torch.cuda.synchronize": lambda: torch.cuda.synchronize,
        "torch.cuda.Event": lambda: torch.cuda.Event,
        "torch.cuda.Event.elapsed_time": lambda: torch.cuda.Event.elapsed_time,
        "torch.cuda.Event.record": lambda: torch.cuda.Event.record,
        "torch.cuda.Event.synchronize": lambda: torch.cuda.Event.synchronize,
        "torch.cuda.current_stream": lambda: torch.cuda.current_stream,
        "torch.cuda.Stream.synchronize": lambda: torch.cuda.Stream.synchronize,
        "torch.allclose": lambda: torch.allclose,
        "torch.isclose": lambda: torch.isclose,
        "torch.equal": lambda: torch.equal,
        "torch.testing.assert_close": lambda: torch.testing.assert_close,
        "torch.Tensor.__eq__": lambda: torch.Tensor.__eq__,
        "torch.Tensor.allclose": lambda: torch.Tensor.allclose,
        "torch.Tensor.equal": lambda: torch.Tensor.equal,
        "torch.Tensor.cpu": lambda: torch.Tensor.cpu,
        "torch.Tensor.to": lambda: torch.Tensor.to,
        "torch.Tensor.copy_": lambda: torch.Tensor.copy_,
        "torch.Tensor.__torch_function__": lambda: torch.Tensor.__torch_function__,
    }.items()
}


FUNCTION_NAMES = tuple(_FUNCTIONS)
"""The functions whose identity is watched, each named by its path from `time` or `torch`."""


@dataclass(frozen=True)
class Snapshot:
    """Flag values, the identity of watched functions, and digests of the RNG states."""

    values: tuple[tuple[str, str], ...]
    functions: tuple[tuple[str, object], ...]

    def changes_to(self, later: Snapshot) -> tuple[StateChange, ...]:
        """What differs in `later`, in a stable order."""
        found = []
        now = dict(later.values)
        for name, before in self.values:
            after = now.get(name, "<missing>")
            if after != before:
                found.append(StateChange(name, before, after))
        current = dict(later.functions)
        for name, before in self.functions:
            after = current.get(name)
            # `is` for functions; `==` for methods, which are made anew on every lookup
            if after is not before and after != before:
                found.append(StateChange(name, _describe(before), _describe(after)))
        return tuple(found)


def snapshot(device: torch.device) -> Snapshot:
    values = [(name, read()) for name, read in _FLAGS.items()]
    values.append((RNG_NAMES[0], _digest(torch.get_rng_state())))
    if device.type == "cuda" and torch.cuda.is_initialized():
        values.append((RNG_NAMES[1], _digest(torch.cuda.get_rng_state(device))))
    functions = []
    for name, read in _FUNCTIONS.items():
        try:
            functions.append((name, read()))
        except Exception:  # an attribute this build lacks
            continue
    return Snapshot(tuple(values), tuple(functions))


def _digest(state: torch.Tensor) -> str:
    return hashlib.sha1(state.numpy().tobytes()).hexdigest()[:12]


def _describe(value: object) -> str:
    if value is None:
        return "<removed>"
    module = getattr(value, "__module__", None) or type(value).__module__
    name = getattr(value, "__qualname__", None) or type(value).__qualname__
    return f"{module}.{name}"
