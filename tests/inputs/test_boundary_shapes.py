import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernelaudit.inputs.shapes import boundary_sizes, shape_cases
from kernelaudit.problem.spec import Axis, Output, Problem, TensorInput, Workload


@st.composite
def axis_and_workload(draw: st.DrawFn) -> tuple[Axis, int]:
    multiple = draw(st.sampled_from([1, 1, 2, 8, 16, 64, 128]))
    workload = multiple * draw(st.integers(1, 5000))
    low = draw(st.integers(1, workload))
    high = draw(st.one_of(st.none(), st.integers(workload, 4 * workload)))
    return Axis("n", min=low, max=high, multiple_of=multiple), workload


@settings(max_examples=300, deadline=None)
@given(axis_and_workload(), st.integers(0, 10), st.integers(1, 200))
def test_boundary_sizes_respect_axis_cap_and_workload(
    case: tuple[Axis, int], count: int, sm_count: int
) -> None:
    axis, workload = case
    sizes = boundary_sizes(axis, workload, count, sm_count)
    assert len(sizes) <= count
    assert len(set(sizes)) == len(sizes)
    assert all(axis.admits(s) for s in sizes)
    assert all(s != workload for s in sizes)
    assert all(1 <= s <= max(2 * workload, 2) for s in sizes)
    assert sizes == boundary_sizes(axis, workload, count, sm_count)
    if count and axis.admits(1) and workload != 1:
        assert sizes[0] == 1


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 100_000), st.integers(1, 8))
def test_unconstrained_axes_get_their_full_count(workload: int, count: int) -> None:
    # Only a workload of 1 leaves too little room (its cap is 2).
    expected = 1 if workload == 1 else count if workload > 4 else min(count, 2 * workload - 1)
    assert len(boundary_sizes(Axis("n"), workload, count)) == expected


def test_priority_order_for_a_power_of_two_workload() -> None:
    # one, one past a block, fewer rows than SMs, one short of a power of two, other primes
    assert boundary_sizes(Axis("n"), 1024, 6, sm_count=132) == [1, 1025, 131, 1023, 1021, 1031]
    assert boundary_sizes(Axis("n"), 4096, 4, sm_count=132)[:2] == [1, 4097]
    assert boundary_sizes(Axis("n"), 4096, 4, sm_count=80)[2] == 79


def test_past_block_size_is_the_largest_under_the_cap() -> None:
    assert boundary_sizes(Axis("n"), 100, 2) == [1, 129]
    assert boundary_sizes(Axis("n"), 20, 2) == [1, 33]


def test_multiple_of_rounds_candidates_instead_of_dropping_them() -> None:
    sizes = boundary_sizes(Axis("n", multiple_of=16), 1024, 6)
    assert sizes[:2] == [16, 1040]
    assert 1008 in sizes
    assert all(s % 16 == 0 for s in sizes) and len(sizes) == 6


def test_axis_limits_are_honoured() -> None:
    sizes = boundary_sizes(Axis("n", min=8, max=1024), 1024, 8)
    assert sizes[0] == 8
    assert max(sizes) <= 1024 and 513 in sizes


def test_small_workloads_stay_small() -> None:
    assert boundary_sizes(Axis("n"), 1, 4) == [2]
    assert boundary_sizes(Axis("n", multiple_of=16), 16, 4) == [32]


def _problem(workloads: list[dict[str, int]]) -> Problem:
    return Problem(
        name="rms",
        reference=lambda x: x,
        axes=(Axis("tokens"), Axis("hidden", multiple_of=8)),
        inputs=(TensorInput("x", ("tokens", "hidden"), (torch.float32,)),),
        outputs=(Output("y", ("tokens", "hidden")),),
        workloads=tuple(Workload.of(w, i) for i, w in enumerate(workloads)),
    )


def test_shape_cases_lists_workloads_then_boundaries_around_the_first() -> None:
    problem = _problem([{"tokens": 64, "hidden": 256}, {"tokens": 8, "hidden": 128}])
    cases = shape_cases(problem, boundary_per_axis=2, sm_count=132)
    assert cases[0] == ({"tokens": 64, "hidden": 256}, "workload 0")
    assert cases[1] == ({"tokens": 8, "hidden": 128}, "workload 1")
    assert cases[2:] == [
        ({"tokens": 1, "hidden": 256}, "boundary tokens=1"),
        ({"tokens": 65, "hidden": 256}, "boundary tokens=65"),
        ({"tokens": 64, "hidden": 8}, "boundary hidden=8"),
        ({"tokens": 64, "hidden": 264}, "boundary hidden=264"),
    ]


def test_shape_cases_drops_repeated_size_maps() -> None:
    problem = _problem([{"tokens": 64, "hidden": 256}, {"tokens": 1, "hidden": 256}])
    cases = shape_cases(problem, boundary_per_axis=2, sm_count=132)
    labels = [label for _, label in cases]
    assert "boundary tokens=1" not in labels and labels.count("workload 1") == 1
    keys = [tuple(sorted(sizes.items())) for sizes, _ in cases]
    assert len(keys) == len(set(keys))
