"""A call too large to copy whole is checked on its last rows along a batch axis."""

from __future__ import annotations

import torch

import kernelaudit

from .fixtures import kernels

ROWS = kernelaudit.Problem(
    name="scale_rows",
    reference=kernels.scale,
    axes=(kernelaudit.Axis("rows"), kernelaudit.Axis("cols")),
    inputs=(kernelaudit.TensorInput("x", ("rows", "cols")),),
    outputs=(kernelaudit.Output("y", ("rows", "cols")),),
    workloads=({"rows": 64, "cols": 16},),
)


def test_a_large_call_is_judged_on_its_last_rows() -> None:
    fast = kernelaudit.guard(
        kernels.scale_rows_wrong_past_row_3000, ROWS, sample=1.0, check_bytes=64 << 10
    )
    fast(torch.randn(4096, 64))  # 1 MiB of inputs: 256 rows fit in 64 KiB
    summary = fast.flush()
    assert summary.too_large == 0
    (failure,) = summary.failures
    assert failure.verdict.why.endswith("on rows 3840 to 4095 of rows")
    (output,) = failure.verdict.outputs
    assert output.name == "y" and not output.passed


def test_a_right_kernel_passes_on_its_window_and_small_calls_are_judged_whole() -> None:
    fast = kernelaudit.guard(kernels.scale_right, ROWS, sample=1.0, check_bytes=64 << 10)
    fast(torch.randn(4096, 64))
    fast(torch.randn(16, 8))
    summary = fast.flush()
    assert (summary.checked, summary.failed, summary.too_large) == (2, 0, 0)


def test_a_large_call_with_no_batch_axis_is_counted_not_copied() -> None:
    """A whole sum: every result depends on every row and every column."""
    problem = kernelaudit.Problem(
        name="total",
        reference=torch.sum,
        axes=(kernelaudit.Axis("rows"), kernelaudit.Axis("cols")),
        inputs=(kernelaudit.TensorInput("x", ("rows", "cols")),),
        outputs=(kernelaudit.Output("y", ()),),
        workloads=({"rows": 64, "cols": 16},),
    )
    fast = kernelaudit.guard(torch.sum, problem, sample=1.0, check_bytes=64 << 10)
    fast(torch.randn(4096, 64))
    summary = fast.flush()
    assert (summary.checked, summary.too_large) == (0, 1)


def test_the_window_is_copied_before_a_kernel_that_writes_its_input() -> None:
    fast = kernelaudit.guard(kernels.scale_writes_its_input, ROWS, sample=1.0, check_bytes=64 << 10)
    fast(torch.randn(4096, 64))
    summary = fast.flush()
    assert (summary.checked, summary.failed) == (1, 0)
