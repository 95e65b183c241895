"""The float32 noise floor widens with how many terms a result sums, and only that much."""

import torch

from kernelaudit import Contract, Output, Problem, TensorInput
from kernelaudit.oracle.compare import compare
from kernelaudit.oracle.rule import noise_floor
from kernelaudit.oracle.truth import result_depths


def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


MATMUL = Problem(
    name="matmul",
    reference=_matmul,
    axes=("m", "n", "k"),
    inputs=[TensorInput("a", ("m", "k")), TensorInput("b", ("k", "n"))],
    outputs=[Output("c", ("m", "n"))],
    workloads=[{"m": 4, "n": 4, "k": 64}],
)


def test_depth_is_the_product_of_the_axes_the_output_does_not_have() -> None:
    assert result_depths(MATMUL, {"m": 8, "n": 8, "k": 4096}) == (4096,)


def _linear_backward(g: torch.Tensor, x: torch.Tensor, w: torch.Tensor, acc: torch.Tensor):
    acc += g.sum(0)
    return g @ w, g.t() @ x, g.sum(0)


LINEAR_BACKWARD = Problem(
    name="linear_backward",
    reference=_linear_backward,
    axes=("tokens", "n", "k"),
    inputs=[
        TensorInput("g", ("tokens", "n")),
        TensorInput("x", ("tokens", "k")),
        TensorInput("w", ("n", "k")),
        TensorInput("acc", ("n",)),
    ],
    outputs=[
        Output("grad_x", ("tokens", "k")),
        Output("grad_w", ("n", "k")),
        Output("grad_b", ("n",)),
    ],
    workloads=[{"tokens": 8, "n": 4, "k": 4}],
    contract=Contract(mutates=("acc",)),
)


def test_each_result_sums_over_the_axes_it_does_not_have() -> None:
    sizes = {"tokens": 4096, "n": 32, "k": 16}
    # every axis is some output's: counted over the outputs together, none would be summed
    # grad_x sums over n, grad_w over the tokens; for grad_b, and acc after the call, shapes
    # alone cannot tell that k is not summed into them: an upper bound, counted in
    assert result_depths(LINEAR_BACKWARD, sizes) == (32, 4096, 4096 * 16, 4096 * 16)


def test_a_sound_long_float32_sum_passes_and_a_tf32_sum_still_fails() -> None:
    generator = torch.Generator().manual_seed(0)
    terms = torch.randn(32, 16384, dtype=torch.float64, generator=generator).float()
    truth = terms.double().sum(dim=1)
    # one term at a time, in fp32, in a shuffled order: what float atomics do
    order = torch.randperm(16384, generator=generator)
    sequential = torch.zeros(32, dtype=torch.float32)
    for start in range(0, 16384, 512):
        for column in order[start : start + 512]:
            sequential += terms[:, column]
    pairwise = terms.sum(dim=1)  # torch's own, far more accurate, is the baseline
    verdict = compare("s", sequential, truth, pairwise, torch.float32, depth=16384)
    assert verdict.passed, verdict.reason
    # rounding every term to TF32's 10-bit mantissa: a precision downgrade
    tf32 = (terms.view(torch.int32) & ~0x1FFF).view(torch.float32).sum(dim=1)
    verdict = compare("s", tf32, truth, pairwise, torch.float32, depth=16384)
    assert not verdict.passed


def test_depth_never_loosens_low_precision_outputs() -> None:
    for dtype in (torch.bfloat16, torch.float16):
        assert noise_floor("normwise", dtype, depth=1) == noise_floor("normwise", dtype, 16384)


def test_subnormal_terms_flushed_inside_a_float32_sum_are_forgiven_and_no_more() -> None:
    tiny = torch.finfo(torch.float32).smallest_normal
    # 16 terms: 8 normal, 8 subnormal; a GPU atomic add flushes the subnormal ones
    terms = torch.tensor([3 * tiny] * 8 + [tiny / 4] * 8, dtype=torch.float64)
    truth = terms.sum().reshape(1)
    flushed = terms[:8].sum().reshape(1).to(torch.bfloat16)
    verdict = compare("s", flushed, truth, flushed, torch.bfloat16, depth=16)
    assert verdict.passed, verdict.reason
    # losing the normal terms as well is an error, not a flush
    halved = (truth / 2).to(torch.bfloat16)
    assert not compare(
        "s", halved, truth, truth.to(torch.bfloat16), torch.bfloat16, depth=16
    ).passed
