"""A failed comparison in words: which metric failed worst and against what, the non-finite
pattern and the bit-exact rule's mismatches, with the numbers a reader needs to judge it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from kernelaudit.inputs.case import dtype_name

if TYPE_CHECKING:  # the comparisons use these words
    from kernelaudit.oracle.metrics import ErrorMetrics
    from kernelaudit.oracle.mismatches import Mismatch, Value
    from kernelaudit.oracle.rule import MetricResult


def number(x: float) -> str:
    return f"{x:.3g}"


def value(x: Value) -> str:
    # enough digits to tell neighbouring float32 values apart
    return f"{x:.9g}" if isinstance(x, float) else str(x)


def listing(shown: tuple[Mismatch, ...]) -> str:
    first = "; ".join(
        f"{m.index}: {value(m.candidate)} instead of {value(m.expected)}" for m in shown
    )
    return f"first at {first}"


_NONFINITE_WORDS = {
    "nan-where-finite": "NaN where the truth is finite",
    "inf-where-finite": "inf where the truth is finite and representable",
    "wrong-where-nan": "not NaN (nor the baseline's NaN or infinity) where the truth is NaN",
    "wrong-where-inf": "not the same infinity (nor the baseline's NaN or infinity) where the "
    "truth is infinite",
    "wrong-where-overflow": "neither an infinity nor the largest finite value of the same sign "
    "(nor the baseline's NaN or infinity) where the truth overflows the dtype",
}


def nonfinite_reason(name: str, failing: list[tuple[str, int, tuple[Mismatch, ...]]]) -> str:
    parts = [f"{count} {_NONFINITE_WORDS[key]} ({listing(shown)})" for key, count, shown in failing]
    return f"{name} has " + "; ".join(parts)


def error_reason(
    name: str,
    failed: list[MetricResult],
    measured: ErrorMetrics,
    worst: tuple[int, ...],
    dtype: torch.dtype,
) -> str:
    r = max(failed, key=lambda m: max(m.error_ratio / m.ratio_limit, m.candidate / m.budget))
    where = ""
    if r.metric == "worst_row":
        where = f" (row {measured.worst_row_index})"
    elif r.metric == "componentwise":
        where = (
            f" (at {worst}: {value(measured.worst_element_value)} instead of "
            f"{value(measured.worst_element_truth)})"
        )
    head = f"{name}: {r.metric} error {number(r.candidate)}{where}"
    if r.error_ratio > r.ratio_limit:
        if r.baseline >= r.floor:
            text = f"{head} is {r.error_ratio:.3g}x the baseline's {number(r.baseline)}"
        elif r.sensitivity >= r.floor:
            text = (
                f"{head} is {r.error_ratio:.3g}x the truth's own sensitivity "
                f"{number(r.sensitivity)} (how far it moves when the inputs move by one "
                f"rounding; the baseline's error is {number(r.baseline)}; limit "
                f"{r.ratio_limit:g}x)"
            )
        elif r.nearby >= r.floor:
            text = (
                f"{head} is {r.error_ratio:.3g}x the baseline's error {number(r.nearby)} on "
                f"the same case with its inputs moved by one rounding (here the baseline's "
                f"error is {number(r.baseline)}; limit {r.ratio_limit:g}x)"
            )
        else:
            text = (
                f"{head} is {r.error_ratio:.3g}x the noise floor {number(r.floor)} "
                f"(the baseline's error is {number(r.baseline)}; limit {r.ratio_limit:g}x)"
            )
        text += f" (limit {r.ratio_limit:g}x)" if r.baseline >= r.floor else ""
        if r.candidate > r.budget:
            text += f" and above the {dtype_name(dtype)} budget {number(r.budget)}"
        return text
    return (
        f"{head} is above the {dtype_name(dtype)} budget {number(r.budget)}, more than half "
        f"the significant bits lost, whatever the baseline's {number(r.baseline)}"
    )


def bit_exact_reason(name: str, count: int, shown: tuple[Mismatch, ...]) -> str:
    return (
        f"{name} differs from the truth at {count} element(s) ({listing(shown)}), though the "
        f"truth is exactly representable and the baseline reproduces it bit for bit"
    )
