import math
from dataclasses import replace

import pytest
import torch

from kernelaudit.device_copies import DEVICE_COPIES
from kernelaudit.errors import ProblemError
from kernelaudit.oracle.truth import expected
from kernelaudit.problem.spec import (
    Contract,
    IndexInput,
    Output,
    Problem,
    ScalarInput,
    TensorInput,
)

ROWS, N = 3, 2000


def problem(reference, outputs=None, mutates=(), inputs=None) -> Problem:
    return Problem(
        name="row_sum",
        reference=reference,
        axes=("rows", "n"),
        inputs=inputs or (TensorInput("x", ("rows", "n"), dtypes=(torch.bfloat16,)),),
        outputs=outputs or (Output("y", ("rows",), "x"),),
        workloads=({"rows": ROWS, "n": N},),
        contract=Contract(mutates=mutates),
        source="problems/row_sum.py",
    )


def bf16_sum(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16).sum(-1, dtype=torch.bfloat16)


@pytest.fixture
def x() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.rand(ROWS, N).to(torch.bfloat16)


def run(p: Problem, inputs: dict, config: dict | None = None):
    config = config or {"x": torch.bfloat16}
    return expected(p, inputs, config, "cpu")


def test_truth_is_the_exact_float64_result_of_a_low_precision_reference(x):
    result = run(problem(bf16_sum), {"x": x})
    assert result.names == ("y",)
    assert result.dtypes == (torch.bfloat16,)
    (truth,) = result.truth
    assert truth.dtype == torch.float64
    for row in range(ROWS):
        exact = math.fsum(x[row].double().tolist())
        assert abs(truth[row].item() - exact) <= 1e-13 * exact


def test_baseline_is_the_reference_run_at_native_precision(x):
    result = run(problem(bf16_sum), {"x": x})
    (baseline,) = result.baseline
    assert baseline.dtype == torch.bfloat16
    assert torch.equal(baseline, bf16_sum(x.clone()))
    assert not torch.equal(baseline.double(), result.truth[0])  # rounded to bfloat16


def test_inputs_are_cast_to_the_dtype_configuration_before_both_runs(x):
    wide = x.double() + 1e-4  # not representable in bfloat16
    result = run(problem(lambda x: x.sum(-1)), {"x": wide})
    rounded = wide.to(torch.bfloat16).double()
    assert torch.allclose(result.truth[0], rounded.sum(-1), rtol=1e-14, atol=0)


def test_results_are_on_the_cpu_and_the_callers_inputs_are_untouched(x):
    def reference(x):
        x.mul_(2)
        return x.sum(-1)

    before = x.clone()
    result = run(problem(reference, mutates=("x",)), {"x": x})
    assert torch.equal(x, before)
    assert all(t.device.type == "cpu" for t in result.truth + result.baseline)


def test_mutated_inputs_follow_the_outputs(x):
    def reference(x):
        total = x.sum(-1)
        x.mul_(3)
        return total

    result = run(problem(reference, mutates=("x",)), {"x": x})
    assert result.names == ("y", "x (after call)")
    assert result.dtypes == (torch.bfloat16, torch.bfloat16)
    truth_after, baseline_after = result.truth[1], result.baseline[1]
    assert truth_after.dtype == torch.float64
    assert torch.equal(truth_after, x.double() * 3)
    assert baseline_after.dtype == torch.bfloat16
    assert torch.equal(baseline_after, x * 3)


def test_index_and_scalar_inputs_are_passed_unchanged():
    table = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], dtype=torch.float16)
    index = torch.tensor([2, 0, 2])
    seen = []

    def reference(table, index, scale):
        seen.append((table.dtype, index.dtype, scale))
        return table[index] * scale

    p = Problem(
        name="gather",
        reference=reference,
        axes=("v", "d", "m"),
        inputs=(
            TensorInput("table", ("v", "d"), dtypes=(torch.float16,)),
            IndexInput("index", ("m",), bound="v"),
            ScalarInput("scale", 0.5),
        ),
        outputs=(Output("out", ("m", "d"), "table"),),
        workloads=({"v": 3, "d": 2, "m": 3},),
    )
    config = {"table": torch.float16, "index": torch.int64}
    result = expected(p, {"table": table, "index": index, "scale": 0.5}, config, "cpu")
    assert seen == [(torch.float64, torch.int64, 0.5), (torch.float16, torch.int64, 0.5)]
    assert torch.equal(result.truth[0], table.double()[index] * 0.5)


def test_several_outputs_in_declaration_order_with_exact_dtypes(x):
    outputs = (Output("total", ("rows",), "x"), Output("argmax", ("rows",), torch.int64))
    result = run(problem(lambda x: (x.sum(-1), x.argmax(-1)), outputs=outputs), {"x": x})
    assert result.names == ("total", "argmax")
    assert result.dtypes == (torch.bfloat16, torch.int64)
    assert result.truth[1].dtype == torch.int64
    assert torch.equal(result.truth[1], x.argmax(-1))


def test_a_floating_baseline_is_rounded_to_the_declared_dtype(x):
    result = run(problem(lambda x: x.float().sum(-1)), {"x": x})
    assert result.baseline[0].dtype == torch.bfloat16


def test_an_exception_in_the_reference_names_the_reference():
    def reference(x):
        raise ValueError("shapes do not line up")

    with pytest.raises(ProblemError) as caught:
        run(problem(reference), {"x": torch.ones(ROWS, N)})
    error = caught.value
    assert (error.file, error.field) == ("problems/row_sum.py", "reference")
    assert "reference()" in error.message
    assert "ValueError: shapes do not line up" in error.message


@pytest.mark.parametrize(
    ("reference", "words"),
    [
        (lambda x: (x.sum(-1), x.sum(-1)), "returns 2 value(s) but the problem declares 1"),
        (lambda x: [x.sum(-1).tolist()], "returns a list for output 'y', not a tensor"),
        (lambda x: None, "returns a NoneType for output 'y'"),
        (lambda x: x.sum(0), "returns shape (2000,) for output 'y'"),
        (lambda x: x.argmax(-1), "returns int64 for output 'y', but the problem declares bfloat16"),
    ],
)
def test_outputs_that_do_not_match_the_declaration_are_problem_errors(reference, words):
    with pytest.raises(ProblemError) as caught:
        run(problem(reference), {"x": torch.ones(ROWS, N)})
    assert caught.value.field == "outputs"
    assert words in caught.value.message


def test_mutates_must_name_a_tensor_input(x):
    with pytest.raises(ProblemError) as caught:
        run(problem(bf16_sum, mutates=("scale",)), {"x": x})
    assert caught.value.field == "contract.mutates"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_truth_and_baseline_on_a_gpu():
    torch.manual_seed(0)
    a = torch.randn(64, 512).to(torch.bfloat16)
    w = torch.randn(512, 32).to(torch.bfloat16)

    def reference(a, w):
        return (a.float() @ w.float()).to(torch.bfloat16)

    p = Problem(
        name="matmul",
        reference=reference,
        axes=("m", "k", "n"),
        inputs=(
            TensorInput("a", ("m", "k"), torch.bfloat16),
            TensorInput("w", ("k", "n"), torch.bfloat16),
        ),
        outputs=(Output("y", ("m", "n"), "a"),),
        workloads=({"m": 64, "k": 512, "n": 32},),
    )
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    result = expected(p, {"a": a, "w": w}, {"a": torch.bfloat16, "w": torch.bfloat16}, "cuda")
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == tf32
    truth, baseline = result.truth[0], result.baseline[0]
    assert truth.device.type == baseline.device.type == "cpu"
    assert truth.dtype == torch.float64 and baseline.dtype == torch.bfloat16
    assert torch.allclose(truth, a.double() @ w.double(), rtol=1e-12, atol=1e-12)
    assert torch.equal(baseline, reference(a.cuda(), w.cuda()).cpu())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_truth_run_holds_only_the_float64_inputs_and_the_baseline_only_the_native_ones():
    # Two 32 MiB float32 inputs: 128 MiB as float64, 64 MiB as they are. Holding both sets at
    # once would shut out the largest problems a device can otherwise run in float64. Besides
    # them, only the results kept on the device for judging (`oracle.kept_results`, bounded).
    torch.manual_seed(0)
    a, b = torch.randn(2048, 4096), torch.randn(2048, 4096)
    held: list[int] = []
    kept: list[int] = []

    def reference(a, b):
        held.append(torch.cuda.memory_allocated())
        kept.append(DEVICE_COPIES.held_bytes())
        return a + b

    p = Problem(
        name="add",
        reference=reference,
        axes=("m", "n"),
        inputs=(
            TensorInput("a", ("m", "n"), torch.float32),
            TensorInput("b", ("m", "n"), torch.float32),
        ),
        outputs=(Output("y", ("m", "n"), "a"),),
        workloads=({"m": 2048, "n": 4096},),
    )
    DEVICE_COPIES.clear()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    expected(p, {"a": a, "b": b}, {"a": torch.float32, "b": torch.float32}, "cuda")
    mib = 1 << 20
    truth_run, baseline_run = (bytes_ - before - k for bytes_, k in zip(held, kept, strict=True))
    assert 128 * mib <= truth_run <= 136 * mib
    assert 64 * mib <= baseline_run <= 72 * mib
    assert kept == [0, 64 * mib]  # the truth, kept while the baseline runs


def _scaled(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * w


SCALED = Problem(
    name="scaled",
    reference=_scaled,
    axes=("rows", "n"),
    inputs=(
        TensorInput("x", ("rows", "n"), dtypes=(torch.bfloat16,)),
        TensorInput("w", ("n",), dtypes=(torch.bfloat16,), role="weight"),
    ),
    outputs=(Output("y", ("rows", "n"), "x"),),
    workloads=({"rows": ROWS, "n": 8},),
)


def _inputs(rows: int, w: torch.Tensor) -> dict[str, object]:
    return {"x": torch.ones(rows, 8, dtype=torch.bfloat16), "w": w}


def test_runs_that_share_a_weight_promote_it_once_and_agree_with_runs_that_do_not() -> None:
    from kernelaudit.oracle.truth import SharedPromotions, truth_only

    promoted: list[torch.Tensor] = []

    def watched(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        promoted.append(w)
        return x * w

    w = torch.arange(8, dtype=torch.bfloat16)
    config = {"x": torch.bfloat16, "w": torch.bfloat16}
    shared = SharedPromotions()
    problem = replace(SCALED, reference=watched)
    for rows in (4, 1, 2):
        (y,) = truth_only(problem, _inputs(rows, w), config, "cpu", shared)
        (alone,) = truth_only(SCALED, _inputs(rows, w), config, "cpu")
        assert y.dtype == torch.float64 and torch.equal(y, alone)
    assert promoted[0] is promoted[1] is promoted[2]  # one float64 copy for the three runs
    # a new weight, or the same one changed in place, is promoted anew
    truth_only(problem, _inputs(1, w.clone()), config, "cpu", shared)
    w.add_(1)
    (y,) = truth_only(problem, _inputs(1, w), config, "cpu", shared)
    assert promoted[3] is not promoted[2] and promoted[4] is not promoted[2]
    assert torch.equal(y[0], w.double())
    # a weight made in inference mode keeps no count of its writes: never shared, still right
    with torch.inference_mode():
        counted_not = torch.arange(8, dtype=torch.bfloat16)
    for _ in range(2):
        (y,) = truth_only(problem, _inputs(1, counted_not), config, "cpu", shared)
        assert torch.equal(y[0], counted_not.double())
    assert promoted[-1] is not promoted[-2]


def test_a_shared_copy_a_run_wrote_to_is_not_given_to_the_next_run() -> None:
    from kernelaudit.oracle.truth import SharedPromotions, truth_only

    def writes_its_weight(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = x * w
        w.zero_()  # a reference that scribbles on an input it was given
        return y

    w = torch.arange(8, dtype=torch.bfloat16)
    config = {"x": torch.bfloat16, "w": torch.bfloat16}
    shared = SharedPromotions()
    problem = replace(SCALED, reference=writes_its_weight)
    first = truth_only(problem, _inputs(2, w), config, "cpu", shared)
    second = truth_only(problem, _inputs(2, w), config, "cpu", shared)
    assert torch.equal(first[0], second[0]) and second[0].abs().sum() > 0
    assert torch.equal(w, torch.arange(8, dtype=torch.bfloat16))  # the input itself untouched


def test_a_shared_copy_is_let_go_with_its_input() -> None:
    import gc
    import weakref

    from kernelaudit.oracle.truth import SharedPromotions

    shared = SharedPromotions()
    x = torch.ones(4, dtype=torch.bfloat16)  # an activation of one run: the next has its own
    copy = shared.promoted(x, torch.bfloat16, "cpu")
    assert isinstance(copy, torch.Tensor) and copy.dtype == torch.float64
    assert shared.promoted(x, torch.bfloat16, "cpu") is copy
    held = weakref.ref(copy)
    del copy, x
    gc.collect()
    assert held() is None
