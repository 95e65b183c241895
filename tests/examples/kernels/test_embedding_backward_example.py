"""The embedding-gradient example: atomics into a wide accumulator are right everywhere; fp16
atomics pass with uniform ids and drift once Zipf-distributed ids pile thousands of terms onto a
row."""

from __future__ import annotations

import pytest
import torch

from kernelaudit.inputs.indices import draw_index
from kernelaudit.inputs.layouts import present

TOKENS, VOCAB, HIDDEN = 16384, 4096, 64  # the problem's workload


def gradients(
    tokens: int, vocab: int, hidden: int, dtype: torch.dtype, ids: str, device: str, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    grad_out = torch.randn(tokens, hidden, generator=generator).to(dtype)
    token_ids = draw_index(ids, (tokens,), vocab, torch.int64, generator)
    return grad_out.to(device), token_ids.to(device)


@pytest.fixture
def embedding(example):
    return example("embedding_backward")


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize(("tokens", "vocab", "hidden"), [(1, 1, 1), (7, 3, 7), (1025, 13, 65)])
def test_wide_accumulator_matches_the_reference_at_odd_sizes(
    embedding, device, dtype, tokens, vocab, hidden
):
    grad_out, ids = gradients(tokens, vocab, hidden, dtype, "zipf", device)
    run = embedding.run("wide_accumulator", grad_out, ids, vocab)
    assert run.correct, run.describe()


@pytest.mark.parametrize(
    ("tensor", "layout"),
    [
        ("grad_out", "transposed"),
        ("grad_out", "offset"),
        ("grad_out", "strided"),
        ("ids", "strided"),
        ("ids", "offset"),
    ],
)
def test_wide_accumulator_reads_any_layout(embedding, device, tensor, layout):
    grad_out, ids = gradients(257, 31, 33, torch.float16, "zipf", device)
    inputs = {"grad_out": grad_out, "ids": ids}
    inputs[tensor] = present(inputs[tensor], layout)
    run = embedding.run("wide_accumulator", inputs["grad_out"], inputs["ids"], 31)
    assert run.correct, run.describe()


def test_wide_accumulator_sums_every_token_into_one_broadcast_id(embedding, device):
    grad_out, _ = gradients(1000, 5, 16, torch.float32, "uniform", device)
    ids = present(torch.full((1000,), 3, device=device), "expanded")
    run = embedding.run("wide_accumulator", grad_out, ids, 5)
    assert run.correct, run.describe()
    assert torch.count_nonzero(run.result[[0, 1, 2, 4]]) == 0


def test_wide_accumulator_sums_every_token_of_the_workload_into_one_row(embedding, device):
    # 16384 terms with a few large channels: one atomic fp32 accumulator would carry ~100 fp32
    # roundings, many times what the reference's summation loses.
    grad_out, _ = gradients(TOKENS, 1, HIDDEN, torch.float32, "uniform", device)
    grad_out[:, ::16] *= 100
    ids = torch.zeros(TOKENS, dtype=torch.int64, device=device)
    run = embedding.run("wide_accumulator", grad_out, ids, 1)
    assert run.correct, run.describe()


def test_wide_accumulator_carries_nan_and_inf_into_their_rows_only(embedding, device):
    grad_out, ids = gradients(64, 8, 16, torch.float16, "uniform", device)
    grad_out[3, 5] = float("nan")
    grad_out[10, 0] = float("inf")
    run = embedding.run("wide_accumulator", grad_out, ids, 8)
    assert run.correct, run.describe()
    assert torch.isnan(run.result[ids[3], 5])
    assert torch.isposinf(run.result[ids[10], 0])
    assert int(torch.isfinite(run.result).sum()) == run.result.numel() - 2


def test_low_precision_accumulation_passes_with_uniform_ids(embedding, device):
    # About 4 terms per row: a couple of extra fp16 roundings, within what sound kernels differ.
    grad_out, ids = gradients(TOKENS, VOCAB, HIDDEN, torch.float16, "uniform", device)
    run = embedding.run("accumulate_in_low_precision", grad_out, ids, VOCAB)
    assert run.same_nonfinite
    assert run.error <= 4 * run.baseline_error, run.describe()


def test_low_precision_accumulation_drifts_with_zipf_ids(embedding, device):
    grad_out, ids = gradients(TOKENS, VOCAB, HIDDEN, torch.float16, "zipf", device)
    buggy = embedding.run("accumulate_in_low_precision", grad_out, ids, VOCAB)
    correct = embedding.run("wide_accumulator", grad_out, ids, VOCAB)
    assert correct.correct, correct.describe()
    assert buggy.error > 10 * buggy.baseline_error, buggy.describe()
    # The drift sits in the hottest rows.
    hottest = int(torch.bincount(ids.cpu(), minlength=VOCAB).argmax())
    row_error = (buggy.result[hottest].double() - buggy.truth[hottest]).norm()
    assert row_error > 10 * (correct.result[hottest].double() - correct.truth[hottest]).norm()


def test_low_precision_accumulation_costs_far_less_in_fp32(embedding, device):
    grad_out, ids = gradients(TOKENS, VOCAB, HIDDEN, torch.float32, "zipf", device)
    run = embedding.run("accumulate_in_low_precision", grad_out, ids, VOCAB)
    assert run.same_nonfinite
    assert run.error < 1e-5, run.describe()
