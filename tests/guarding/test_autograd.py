"""`kernelaudit.guard_autograd`: a differentiable function guarded forward and backward, its
gradients judged against the reference's own, by autograd in float64."""

from __future__ import annotations

import torch

import kernelaudit

from .fixtures import kernels


def _step(op: object, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 32, generator=generator, requires_grad=True)
    w = torch.randn(32, generator=generator, requires_grad=True)
    y = op(x, w)  # type: ignore[operator]
    (y * torch.randn(64, 32, generator=generator)).sum().backward()
    assert x.grad is not None and w.grad is not None
    return x.grad, w.grad


def test_a_right_function_passes_forward_and_backward_and_its_gradients_are_its_own() -> None:
    op = kernelaudit.guard_autograd(kernels.scaled_product_right, kernels.scaled_product)
    for seed in range(5):
        got = _step(op, seed)
        plain = _step(kernels.scaled_product_right, seed)
        assert all(torch.equal(a, b) for a, b in zip(got, plain, strict=True))
    forward, backward = op.flush()
    assert (forward.calls, forward.checked, forward.failed) == (5, 5, 0)
    assert (backward.calls, backward.checked, backward.failed) == (5, 5, 0)


def test_a_backward_wrong_while_its_forward_is_right_fails_the_backward_alone() -> None:
    op = kernelaudit.guard_autograd(kernels.scaled_product_wrong_backward, kernels.scaled_product)
    for seed in range(3):
        _step(op, seed)
    forward, backward = op.flush()
    assert forward.failed == 0
    assert backward.failed == 3
    failing = [o for o in backward.failures[0].verdict.outputs if not o.passed]
    assert [o.name for o in failing] == ["output 1"]  # the weight's gradient, not the input's


def test_gradients_only_for_inputs_that_want_them_are_judged() -> None:
    op = kernelaudit.guard_autograd(kernels.scaled_product_wrong_backward, kernels.scaled_product)
    x = torch.randn(8, 4, requires_grad=True)
    w = torch.randn(4)  # a constant: no gradient asked for it
    op(x, w).sum().backward()
    _, backward = op.flush()
    assert (backward.checked, backward.failed) == (1, 0)


def test_a_torch_library_op_is_guarded_forward_and_backward_as_it_is_called() -> None:
    op = kernelaudit.guard_autograd(
        torch.ops.kernelaudit_tests.scaled_product, kernels.scaled_product, name="op"
    )
    _step(op, 0)
    forward, backward = op.flush()
    assert (forward.failed, backward.failed) == (0, 1)
