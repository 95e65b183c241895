"""The auditor keeps the cases it prepared for the checks that run them again, within a share
of the host's memory: a large problem's cases are dropped, oldest first, where a small one's
are all kept."""

import pytest
import torch

from kernelaudit.engine import executor, host_memory
from kernelaudit.engine.executor import Executor
from kernelaudit.engine.host_memory import case_bytes
from kernelaudit.inputs.case import Case
from kernelaudit.problem.spec import Output, Problem, TensorInput


def scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2


PROBLEM = Problem(
    name="scale",
    reference=scale,
    axes=("rows", "cols"),
    inputs=(TensorInput("x", ("rows", "cols"), torch.float32),),
    outputs=(Output("y", ("rows", "cols"), "x"),),
    workloads=({"rows": 256, "cols": 256},),
)
CASES = [Case(sizes=(("rows", 256), ("cols", 256)), seed=seed) for seed in range(4)]
CASE_BYTES = 256 * 256 * (4 + 8 + 4)  # the input, the float64 truth, the float32 baseline


@pytest.mark.parametrize(("most", "kept"), [(10 * CASE_BYTES, 4), (2 * CASE_BYTES, 2), (1, 1)])
def test_prepared_cases_are_kept_within_the_memory_share(
    monkeypatch: pytest.MonkeyPatch, most: int, kept: int
) -> None:
    monkeypatch.setattr(executor, "cache_bytes", lambda: most)
    runs = Executor(PROBLEM, worker=None, device="cpu")  # type: ignore[arg-type]
    first = [runs.prepare(case) for case in CASES]
    # the most recent first: kept ones come back as they were, dropped ones are made again
    again = [runs.prepare(case) for case in reversed(CASES)][::-1]
    same = [a is b for a, b in zip(first, again, strict=True)]
    assert same == [False] * (len(CASES) - kept) + [True] * kept
    for (inputs, expect), (inputs_again, expect_again) in zip(first, again, strict=True):
        assert torch.equal(inputs["x"], inputs_again["x"])  # with the same values
        assert torch.equal(expect.truth[0], expect_again.truth[0])


def test_room_for_a_case_is_made_before_its_truth_is_computed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a share that holds one case and a half: the case kept is dropped before the next one's
    # truth and baseline come to the host, not after
    monkeypatch.setattr(executor, "cache_bytes", lambda: CASE_BYTES + CASE_BYTES // 2)
    runs = Executor(PROBLEM, worker=None, device="cpu")  # type: ignore[arg-type]
    held_while_made = []
    made = runs._truth

    def truth(case: Case) -> object:
        held_while_made.append(sum(map(case_bytes, runs._expected.values())))
        return made(case)

    monkeypatch.setattr(runs, "_truth", truth)
    for case in CASES[:3]:
        runs.prepare(case)
    assert held_while_made == [0, 0, 0]
    assert sum(map(case_bytes, runs._expected.values())) == CASE_BYTES  # the last one is kept


@pytest.mark.parametrize(("host_half", "nudged"), [(4 * CASE_BYTES, True), (2 * CASE_BYTES, False)])
def test_a_case_is_nudged_only_where_its_second_truth_fits_beside_it(
    monkeypatch: pytest.MonkeyPatch, host_half: int, nudged: bool
) -> None:
    # the case nudged by one rounding brings a second truth and baseline to the host: where
    # the case and that pair would not fit in half the auditor's half of the host (a probe's
    # other case goes beside them), it is judged as a case the reference cannot nudge is,
    # rather than the auditor being killed for memory
    monkeypatch.setattr(host_memory, "machine_memory", lambda: 2 * host_half)
    runs = Executor(PROBLEM, worker=None, device="cpu")  # type: ignore[arg-type]
    _, expect = runs.prepare(CASES[0])
    made = expect.nudged()
    assert (made is not None) == nudged
    if made is not None:
        assert made[0].truth.shape == expect.truth[0].shape
        return
    # a result failing on its error says that the case was not nudged, and why
    from kernelaudit.checks.numerics import compare_expected

    wrong = (expect.truth[0] * 1.01).float()
    comparison = compare_expected(expect, 0, wrong, torch.device("cpu"))
    assert comparison.failure == "error"
    said = dict(comparison.metrics)["case nudged by one rounding"]
    assert said.startswith("not made: ") and "host memory" in said


def test_a_probe_whose_cases_fit_the_host_only_one_at_a_time_is_not_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kernelaudit.checks.base import Probe, RunPlan, Step
    from kernelaudit.errors import CaseUnavailable

    # room for one case and a half: each case alone is prepared, the two of a probe are not
    monkeypatch.setattr(host_memory, "machine_memory", lambda: 3 * CASE_BYTES)
    runs = Executor(PROBLEM, worker=None, device="cpu")  # type: ignore[arg-type]
    near = Case(sizes=(("rows", 255), ("cols", 256)), label="held-back shape")
    both = Probe("specialisation", near, RunPlan(steps=(Step(), Step(case=CASES[0]))))
    with pytest.raises(CaseUnavailable, match="GiB of host memory together"):
        runs.observe(both)
    # the probe's own case counts though no step runs it
    beside = Probe("specialisation", near, RunPlan(steps=(Step(case=CASES[0]),)))
    with pytest.raises(CaseUnavailable, match="GiB of host memory together"):
        runs.observe(beside)
    assert not runs._expected  # refused before either truth was made
    for case in (near, CASES[0]):
        _, expect = runs.prepare(case)
        assert expect.truth[0].shape[0] == dict(case.sizes)["rows"]


def test_a_kept_case_counts_its_nudged_case_once_made(monkeypatch: pytest.MonkeyPatch) -> None:
    # a share that holds two plain cases: once the first is nudged (a second truth and
    # baseline beside its own), it and the next no longer fit together
    monkeypatch.setattr(executor, "cache_bytes", lambda: 2 * CASE_BYTES)
    runs = Executor(PROBLEM, worker=None, device="cpu")  # type: ignore[arg-type]
    first = runs.prepare(CASES[0])
    runs.prepare(CASES[1])
    assert runs.prepare(CASES[0]) is first  # both kept
    assert first[1].nudged() is not None
    runs.prepare(CASES[2])
    assert CASES[0] not in runs._expected and CASES[2] in runs._expected


def test_a_probe_counts_the_results_of_its_calls_beside_its_case(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kernelaudit.checks.base import Probe, RunPlan, Step
    from kernelaudit.errors import CaseUnavailable

    results = sent = 256 * 256 * 4  # one call's float32 output; the worker's copy of the input
    # room for the case, the worker's copy of its input and one call's results, not two calls'
    room = CASE_BYTES + sent + results
    monkeypatch.setattr(host_memory, "machine_memory", lambda: 2 * room)
    runs = Executor(PROBLEM, worker=None, device="cpu")  # type: ignore[arg-type]
    twice = Probe("replay", CASES[0], RunPlan(steps=(Step(), Step())))
    with pytest.raises(CaseUnavailable, match="results of the probe's 2 call"):
        runs.observe(twice)
    assert not runs._expected  # refused before the truth was made
    host_memory.refuse_unfitting(PROBLEM, [CASES[0]], calls=[(CASES[0], 1)])  # one call fits
    # a step whose results do not come back (only their fingerprints) counts none
    quiet = [(CASES[0], host_memory.result_copies(step)) for step in (Step(keep=False), Step())]
    host_memory.refuse_unfitting(PROBLEM, [CASES[0]], calls=quiet)


def test_a_probe_counts_the_inputs_the_worker_receives_once_per_case(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kernelaudit.checks.base import Probe, RunPlan, Step
    from kernelaudit.errors import CaseUnavailable

    # the worker takes its own copy of each case's inputs as they cross to it: a probe of two
    # cases whose truths fit beside each other does not fit once both copies are counted
    sent = results = 256 * 256 * 4
    two_cases = 2 * CASE_BYTES + 2 * results
    monkeypatch.setattr(host_memory, "machine_memory", lambda: 2 * (two_cases + sent))
    runs = Executor(PROBLEM, worker=None, device="cpu")  # type: ignore[arg-type]
    both = Probe("specialisation", CASES[0], RunPlan(steps=(Step(), Step(case=CASES[1]))))
    with pytest.raises(CaseUnavailable, match="the worker's copy of their inputs") as refused:
        runs.observe(both)
    # the report's untried list says which copy did not fit
    assert refused.value.reason == (
        "the probe's cases do not fit in host memory twice, the auditor's and the worker's"
    )
    assert not runs._expected  # refused before either truth was made
    # calls of one case send its inputs once (the same tensors, in one message): room for
    # the case, one copy of its input and two calls' results is enough
    monkeypatch.setattr(
        host_memory, "machine_memory", lambda: 2 * (CASE_BYTES + sent + 2 * results)
    )
    host_memory.refuse_unfitting(PROBLEM, [CASES[0]], calls=[(CASES[0], 1), (CASES[0], 1)])
