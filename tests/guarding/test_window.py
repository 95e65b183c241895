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


# An embedding gradient with a fixed width: no batch axis at all (the tokens are summed, the
# vocabulary is indexed), but the ids key the gradient's rows.
SUMMED_BY_ID = kernelaudit.Problem(
    name="embedding_backward_fixed_width",
    reference=kernels.embedding_backward,
    axes=(
        kernelaudit.Axis("tokens"),
        kernelaudit.Axis("vocab"),
        kernelaudit.Axis("hidden", min=8, max=8),
    ),
    inputs=(
        kernelaudit.TensorInput("grad_out", ("tokens", "hidden"), dtypes=(torch.float16,)),
        kernelaudit.IndexInput("ids", ("tokens",), bound="vocab"),
        kernelaudit.ScalarInput("num_embeddings", value="vocab"),
    ),
    outputs=(kernelaudit.Output("grad_weight", ("vocab", "hidden"), dtype="grad_out"),),
    workloads=({"tokens": 256, "vocab": 64, "hidden": 8},),
)


def _one_hot_id(device: str, tokens: int = 16384, vocab: int = 1024, hot: int = 7) -> tuple:
    """A quarter of the tokens hold id `hot`, the rest spread evenly: 384 KiB of inputs."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (tokens,), generator=generator)
    ids[torch.randperm(tokens, generator=generator)[: tokens // 4]] = hot
    grad = torch.rand(tokens, 8, generator=generator).half()
    return grad.to(device), ids.to(device), vocab


def test_a_large_call_with_rows_keyed_by_ids_is_judged_on_its_most_frequent_ids(
    device: str,
) -> None:
    fast = kernelaudit.guard(
        kernels.embedding_backward_fp16_sums, SUMMED_BY_ID, sample=1.0, check_bytes=128 << 10
    )
    grad, ids, vocab = _one_hot_id(device)
    fast(grad, ids, vocab)
    summary = fast.flush()
    assert summary.too_large == 0
    (failure,) = summary.failures
    assert "most frequent values of ids" in failure.verdict.why
    (output,) = failure.verdict.outputs
    # the worst row is named by its id in the whole gradient, and every token of it was kept
    assert output.worst_row == 7
    assert ("argument 1", 7, int((ids == 7).sum())) in failure.occurrences


def test_a_right_kernel_passes_on_its_most_frequent_ids(device: str) -> None:
    fast = kernelaudit.guard(
        kernels.embedding_backward, SUMMED_BY_ID, sample=1.0, check_bytes=128 << 10
    )
    fast(*_one_hot_id(device))
    summary = fast.flush()
    assert (summary.checked, summary.failed, summary.too_large) == (1, 0, 0)


def test_a_call_whose_most_frequent_id_alone_is_past_the_bound_is_counted() -> None:
    fast = kernelaudit.guard(
        kernels.embedding_backward, SUMMED_BY_ID, sample=1.0, check_bytes=32 << 10
    )
    fast(*_one_hot_id("cpu"))  # 4096 tokens of id 7 take 96 KiB
    summary = fast.flush()
    assert (summary.checked, summary.too_large) == (0, 1)
