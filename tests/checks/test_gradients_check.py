"""The gradients check: backward kernels judged under the upstream gradients training produces."""

from __future__ import annotations

from collections.abc import Callable

import torch

from kernelaudit import Contract, Forward, IndexInput, Output, Problem, ScalarInput, TensorInput
from kernelaudit.findings import AuditReport, Finding
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.materialize import materialize


def _cross_entropy_backward(
    grad_loss: torch.Tensor, logits: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    probabilities = torch.softmax(logits, dim=-1)
    one_hot = torch.nn.functional.one_hot(targets, logits.shape[-1]).to(logits.dtype)
    return (probabilities - one_hot) * grad_loss[:, None]


CROSS_ENTROPY = Problem(
    name="cross_entropy_backward",
    reference=_cross_entropy_backward,
    axes=("rows", "vocab"),
    inputs=(
        TensorInput("grad_loss", ("rows",), role="upstream"),
        TensorInput("logits", ("rows", "vocab")),
        IndexInput("targets", ("rows",), bound="vocab"),
    ),
    outputs=(Output("grad_logits", ("rows", "vocab"), dtype="logits"),),
    workloads=({"rows": 12, "vocab": 24},),
)


def _linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x @ w


LINEAR = Problem(
    name="linear",
    reference=_linear,
    axes=("rows", "k", "n"),
    inputs=(TensorInput("x", ("rows", "k")), TensorInput("w", ("k", "n"), role="weight")),
    outputs=(Output("y", ("rows", "n"), dtype="x"),),
    workloads=({"rows": 256, "k": 8, "n": 4},),
    contract=Contract(gradients=("x", "w")),
)


def _reduce_rows(x: torch.Tensor, reduction: str) -> torch.Tensor:
    return x.sum(dim=-1) if reduction == "sum" else x.mean(dim=-1)


MODES = Problem(
    name="reduce_rows",
    reference=_reduce_rows,
    axes=("rows", "cols"),
    inputs=(
        TensorInput("x", ("rows", "cols")),
        ScalarInput("reduction", "mean", choices=("sum",)),
    ),
    outputs=(Output("y", ("rows",), dtype="x"),),
    workloads=({"rows": 4, "cols": 8},),
)


def _failing(report: AuditReport, check: str) -> list[Finding]:
    return [f for f in report.failures if f.check == check]


def test_upstream_read_as_a_scalar_fails_but_passes_with_all_ones_upstream(
    tiny_audit: Callable[..., AuditReport],
) -> None:
    report = tiny_audit(
        CROSS_ENTROPY, "backward_candidates.py::cross_entropy_first_row", ["gradients"]
    )
    assert report.verdict == "FAIL"
    finding = _failing(report, "gradients")[0]
    assert "upstream gradient" in finding.title
    ones = [r for r in report.records if ("grad_loss", "ones") in r.case.values]
    varying = [r for r in report.records if r.check == "gradients" and r not in ones]
    assert ones and all(r.failures == () for r in ones)
    assert any(r.failures for r in varying)


def test_correct_backward_passes_every_upstream_layout(
    tiny_audit: Callable[..., AuditReport],
) -> None:
    report = tiny_audit(
        CROSS_ENTROPY, "backward_candidates.py::cross_entropy_backward", ["gradients"]
    )
    assert report.verdict == "PASS", [f.title for f in report.findings]
    layouts = {dict(r.case.layouts).get("grad_loss", "contiguous") for r in report.records}
    assert {"contiguous", "strided", "broadcast"} <= layouts


def test_backward_assuming_contiguous_upstream_fails_on_non_contiguous_upstream(
    tiny_audit: Callable[..., AuditReport],
) -> None:
    report = tiny_audit(
        CROSS_ENTROPY,
        "backward_candidates.py::cross_entropy_contiguous_upstream",
        ["gradients"],
    )
    assert report.verdict == "FAIL"
    failed = {dict(r.case.layouts).get("grad_loss") for r in report.records if r.failures}
    assert failed == {"strided", "expanded", "broadcast"}  # every non-contiguous one


def test_autograd_op_is_audited_through_its_backward(
    tiny_audit: Callable[..., AuditReport],
) -> None:
    good = tiny_audit(LINEAR, "backward_candidates.py::linear", ["gradients"])
    assert good.verdict == "PASS", [f.title for f in good.findings]
    assert any(r.check == "gradients" for r in good.records)
    low = tiny_audit(LINEAR, "backward_candidates.py::linear_bf16_weight_grad", ["gradients"])
    assert low.verdict == "FAIL"
    assert {f.key.split(":")[-1] for f in _failing(low, "gradients")} == {"grad_w"}


def test_an_autograd_backward_that_writes_into_its_upstream_gradient_fails_mutation(
    tiny_audit: Callable[..., AuditReport],
) -> None:
    checks = ["gradients", "mutation"]
    report = tiny_audit(LINEAR, "backward_candidates.py::linear_clearing_its_upstream", checks)
    assert report.verdict == "FAIL"
    (finding,) = [f for f in report.failures if f.check == "mutation"]
    assert finding.key.startswith("mutated:grad")
    assert not [f for f in report.failures if f.check == "gradients"]  # its gradients are right
    good = tiny_audit(LINEAR, "backward_candidates.py::linear", checks)
    assert good.verdict == "PASS"


def test_an_autograd_backward_that_writes_past_its_upstream_gradient_fails_bounds(
    tiny_audit: Callable[..., AuditReport],
) -> None:
    # what the backward does besides its gradients is judged too: a write past a tensor
    checks = ["gradients", "bounds"]
    report = tiny_audit(LINEAR, "backward_candidates.py::linear_writing_past_its_upstream", checks)
    assert report.verdict == "FAIL", [f.title for f in report.findings]
    found = [f for f in report.failures if f.check == "bounds"]
    assert found and all("grad" in f.title for f in found), [f.title for f in found]
    assert not [f for f in report.failures if f.check == "gradients"]  # its gradients are right


def test_autograd_op_without_a_backward_fails(tiny_audit: Callable[..., AuditReport]) -> None:
    report = tiny_audit(LINEAR, "backward_candidates.py::linear_without_backward", ["gradients"])
    assert report.verdict == "FAIL"
    assert any("autograd" in f.title or "autograd" in str(f.evidence) for f in report.failures)


def test_every_argument_mode_is_exercised(tiny_audit: Callable[..., AuditReport]) -> None:
    report = tiny_audit(MODES, "backward_candidates.py::scale_rows_sum_mode_wrong", ["numerics"])
    assert report.verdict == "FAIL"
    assert all(("reduction", "sum") in r.case.values for r in report.records if r.failures)
    passing = tiny_audit(MODES, "backward_candidates.py::scale_rows", ["numerics"])
    assert passing.verdict == "PASS"


def _rstd(x: torch.Tensor) -> torch.Tensor:
    return torch.rsqrt(x.pow(2).mean(-1) + 1e-6)


def test_saved_tensors_come_from_the_forward() -> None:
    problem = Problem(
        name="scale_by_rstd_backward",
        reference=lambda grad, x, rstd: grad * rstd[:, None],
        axes=("rows", "cols"),
        inputs=(
            TensorInput("grad", ("rows", "cols"), role="upstream"),
            TensorInput("x", ("rows", "cols"), dtypes=(torch.float16,)),
            TensorInput("rstd", ("rows",), role="saved"),
        ),
        outputs=(Output("grad_x", ("rows", "cols"), dtype="x"),),
        workloads=({"rows": 3, "cols": 5},),
        forward=Forward(_rstd, takes=("x",), gives=("rstd",)),
    )
    values = materialize(problem, Case((("rows", 3), ("cols", 5)), values=(("x", "large"),)))
    x, rstd = values["x"], values["rstd"]
    assert isinstance(x, torch.Tensor) and isinstance(rstd, torch.Tensor)
    assert rstd.dtype == torch.float32
    assert torch.equal(rstd, _rstd(x.double()).float())
