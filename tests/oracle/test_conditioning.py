"""A case whose structure or conditioning makes the baseline's error meaningless (a
cancellation down to rounding residue, a constant row) is judged against the same case with its
inputs moved by one rounding; well-conditioned cases are judged as before."""

import pytest
import torch

from kernelaudit.checks.numerics import judge_results
from kernelaudit.inputs import draws
from kernelaudit.oracle.compare import compare
from kernelaudit.oracle.conditioning import Nudged, nudged
from kernelaudit.oracle.truth import expected
from kernelaudit.problem.spec import Output, Problem, TensorInput

ROWS, COLS = 32, 1000


def softmax_backward(g: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return y * (g - (g * y).sum(-1, keepdim=True))


def reordered_softmax_backward(g: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The same formula with the dot product summed in another order and not factored."""
    dot = (g * y).flip(-1).cumsum(-1)[..., -1:]
    return y * g - y * dot


def probabilities() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.softmax(torch.randn(ROWS, COLS), -1)


def layernorm(x: torch.Tensor) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    variance = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(variance + 1e-5)


def single_pass_layernorm(x: torch.Tensor) -> torch.Tensor:
    """Variance as E[x^2] - E[x]^2: correct, and on a constant row off by its mean's rounding
    divided by sqrt(eps)."""
    mean = x.mean(-1, keepdim=True)
    variance = (x * x).mean(-1, keepdim=True) - mean * mean
    return (x - mean) / torch.sqrt(variance.clamp_min(0) + 1e-5)


def judged(candidate, reference, *inputs: torch.Tensor, nudge: bool):
    truth = reference(*(t.double() for t in inputs))
    shaken = [nudged(t, i) for i, t in enumerate(inputs)]
    near = Nudged(reference(*(t.double() for t in shaken)), reference(*shaken))
    return compare(
        "out",
        candidate(*inputs),
        truth,
        reference(*inputs),
        torch.float32,
        depth=inputs[0].shape[-1],
        nudged=near if nudge else None,
    )


def test_inputs_move_to_a_neighbouring_value_the_same_way_in_every_run():
    x = probabilities().bfloat16()
    moved = nudged(x, 0)
    assert moved.dtype == torch.bfloat16 and torch.equal(nudged(x, 0), moved)
    steps = (moved.double() - x.double()).abs() / x.double().abs()
    assert bool((steps > 0).all()) and float(steps.max()) <= 2 * torch.finfo(torch.bfloat16).eps
    assert not torch.equal(nudged(x, 1), moved)  # another input, other signs
    assert torch.equal(nudged(torch.arange(4), 0), torch.arange(4))  # integers stay


def test_a_large_input_moves_by_one_rounding_with_the_same_bits_on_every_device(device: str):
    x = torch.randn(3, draws.CHUNK + 7, generator=torch.Generator().manual_seed(3)).bfloat16()
    moved = nudged(x.to(device), 2).cpu()
    assert torch.equal(moved, nudged(x, 2))
    nonzero = x != 0
    assert torch.equal(moved[~nonzero], x[~nonzero])
    steps = (moved.double() - x.double())[nonzero] / x.double()[nonzero].abs()
    eps = torch.finfo(torch.bfloat16).eps
    assert bool((steps.abs() > 0).all()) and float(steps.abs().max()) <= 2 * eps
    up = float((steps > 0).double().mean())
    assert 0.49 < up < 0.51  # either way, as often
    assert not torch.equal(moved, nudged(x, 3))  # another input, other signs


def test_a_constant_upstream_gradient_leaves_only_rounding_residue_and_is_judged_by_it():
    y, g = probabilities(), torch.ones(ROWS, COLS)
    strict = judged(reordered_softmax_backward, softmax_backward, g, y, nudge=False)
    assert not strict.passed and strict.failure == "error"  # every fp32 kernel loses it all
    conditioned = judged(reordered_softmax_backward, softmax_backward, g, y, nudge=True)
    assert conditioned.passed, conditioned.reason
    sensitivity = dict(conditioned.metrics)["normwise_sensitivity"]
    assert sensitivity > 0.1  # the truth moves by about itself


def key_bias_gradient(g: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """An attention's key-bias gradient: the softmax backward summed over each row's keys, zero
    whatever the inputs (softmax ignores a shift shared by a row's logits)."""
    return softmax_backward(g, torch.softmax(logits, -1)).sum(-1)


def reordered_key_bias_gradient(g: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    return reordered_softmax_backward(g, torch.softmax(logits, -1)).sum(-1)


def test_a_result_that_is_zero_whatever_the_inputs_is_judged_by_the_ratio_alone():
    torch.manual_seed(4)
    g, logits = torch.randn(ROWS, COLS), torch.randn(ROWS, COLS)
    reordered = judged(reordered_key_bias_gradient, key_bias_gradient, g, logits, nudge=True)
    assert reordered.passed, reordered.reason  # float32 residue against float64 residue
    normwise = next(m for m in reordered.errors if m.metric == "normwise")
    assert normwise.candidate > 1e6 and normwise.sensitivity >= 0.5
    strict = judged(reordered_key_bias_gradient, key_bias_gradient, g, logits, nudge=False)
    assert not strict.passed  # without the nudged case nothing tells residue from an error

    # the residue of a lower precision is many times the baseline's; so is anything else
    def in_bfloat16(g: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        return key_bias_gradient(g.bfloat16(), logits.bfloat16()).float()

    def offset(g: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        return key_bias_gradient(g, logits) + 1e-4

    for wrong in (in_bfloat16, offset):
        result = judged(wrong, key_bias_gradient, g, logits, nudge=True)
        assert not result.passed and result.failure == "error", wrong.__name__


@pytest.mark.parametrize("seed", range(4))
def test_a_constant_row_is_judged_by_what_a_correct_kernel_does_on_a_row_just_like_it(seed):
    torch.manual_seed(seed)
    x = (torch.randn(ROWS, 1) + 0.3).expand(ROWS, COLS).contiguous()
    strict = judged(single_pass_layernorm, layernorm, x, nudge=False)
    assert not strict.passed  # the two-pass baseline is exact on constant rows
    assert judged(single_pass_layernorm, layernorm, x, nudge=True).passed


def test_a_layernorm_that_drops_epsilon_still_fails_on_constant_rows():
    torch.manual_seed(0)
    x = (torch.randn(ROWS, 1) + 0.3).expand(ROWS, COLS).contiguous()

    def no_epsilon(x):
        mean = x.mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(((x - mean) ** 2).mean(-1, keepdim=True) + 1e-12)

    assert not judged(no_epsilon, layernorm, x, nudge=True).passed


def test_lost_precision_on_a_well_conditioned_case_still_fails_and_names_the_floor():
    torch.manual_seed(2)
    y, g = probabilities(), torch.randn(ROWS, COLS)

    def rounded_to_bf16(g, y):
        return softmax_backward(g, y).bfloat16().float()

    result = judged(rounded_to_bf16, softmax_backward, g, y, nudge=True)
    assert not result.passed and result.failure == "error"
    normwise = next(m for m in result.errors if m.metric == "normwise")
    assert 0 < max(normwise.sensitivity, normwise.nearby) < normwise.floor  # the noise floor


def test_a_result_failing_against_the_sensitivity_says_so():
    torch.manual_seed(3)
    truth = torch.randn(ROWS, COLS, dtype=torch.float64)
    moved = truth * (1 + 1e-3 * torch.randn(ROWS, COLS, dtype=torch.float64))
    shaken = Nudged(moved, moved.float())
    candidate = (truth * 1.05).float()
    result = compare("out", candidate, truth, truth.float(), torch.float32, nudged=shaken)
    assert not result.passed
    assert "the truth's own sensitivity" in result.reason
    assert compare(
        "out", (truth * 1.002).float(), truth, truth.float(), torch.float32, nudged=shaken
    ).passed
    # a baseline that is poor only nearby lowers the ratio, never the budget
    poor = Nudged(truth, (truth * 1.1).float())
    result = compare("out", candidate, truth, truth.float(), torch.float32, nudged=poor)
    assert not result.passed and "above the float32 budget" in result.reason


def problem() -> Problem:
    return Problem(
        name="softmax_backward",
        reference=softmax_backward,
        axes=("rows", "cols"),
        inputs=(
            TensorInput("g", ("rows", "cols"), dtypes=(torch.float32,)),
            TensorInput("y", ("rows", "cols"), dtypes=(torch.float32,)),
        ),
        outputs=(Output("dx", ("rows", "cols"), "y"),),
        workloads=({"rows": ROWS, "cols": COLS},),
        source="problems/softmax_backward.py",
    )


def test_the_nudged_truth_is_computed_once_per_case_and_the_same_in_every_run():
    calls = []

    def counted(g, y):
        calls.append(g.dtype)
        return softmax_backward(g, y)

    p = Problem(**{**problem().__dict__, "reference": counted})
    inputs = {"g": torch.ones(ROWS, COLS), "y": probabilities()}
    config = {"g": torch.float32, "y": torch.float32}
    case = expected(p, inputs, config, "cpu")
    assert len(calls) == 2  # truth and baseline; the nudge waits until a result needs it
    first = case.nudged()
    assert first is not None and case.nudged() is first
    assert len(calls) == 4  # the nudged case's truth and baseline, once
    again = expected(p, inputs, config, "cpu").nudged()
    assert again is not None and torch.equal(again[0].truth, first[0].truth)
    assert not torch.equal(first[0].truth, case.truth[0])
    assert first[0].baseline.dtype == torch.float32


def test_a_numerics_judgement_passes_a_correct_kernel_on_an_ill_conditioned_case():
    from types import SimpleNamespace

    inputs = {"g": torch.ones(ROWS, COLS), "y": probabilities()}
    config = {"g": torch.float32, "y": torch.float32}
    case = expected(problem(), inputs, config, "cpu")
    outputs = (reordered_softmax_backward(inputs["g"], inputs["y"]),)
    observation = SimpleNamespace(
        problem=problem(),
        expected_at=lambda call: case,
        inputs_at=lambda call: inputs,
        aligned=lambda values, call: values,
        judged=[],
        result=SimpleNamespace(calls=[SimpleNamespace(outputs=outputs)]),
        device="cpu",
    )
    assert judge_results(observation, call=0) == []  # type: ignore[arg-type]
    wrong = (outputs[0] + 1e-3 * inputs["y"],)
    failures = judge_results(observation, call=0, outputs=wrong)  # type: ignore[arg-type]
    assert [f.key for f in failures] == ["error:dx"]


def test_a_reference_that_refuses_the_nudged_inputs_leaves_the_judgement_as_it_was():
    def whole_numbers_only(g, y):
        if not torch.equal(y, y.round()):
            raise ValueError("y must hold whole numbers")
        return softmax_backward(g, y)

    p = Problem(**{**problem().__dict__, "reference": whole_numbers_only})
    inputs = {"g": torch.ones(ROWS, COLS), "y": torch.full((ROWS, COLS), 3.0)}
    case = expected(p, inputs, {"g": torch.float32, "y": torch.float32}, "cpu")
    assert case.nudged() is None and case.nudged() is None  # asked once, kept
