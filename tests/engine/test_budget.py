"""An audit plans to its time budget: what every audit needs always runs, the optional cases
run most revealing first while the estimate fits, and the rest is reported as untried."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from kernelaudit.checks import build_checks
from kernelaudit.checks.base import PlanContext, Probe
from kernelaudit.checks.numerics import Numerics
from kernelaudit.checks.sweep import (
    COVERAGE,
    MORE_VARIANTS,
    SAMPLED_OUT,
    SAMPLED_WORKLOADS,
    base_workload,
    covering_variants,
    kept_workloads,
    shapes_for,
    value_variants,
)
from kernelaudit.checks.timing import timing_probe
from kernelaudit.engine.budget import (
    PROBE_SHARE,
    REQUIRED_MOST,
    expected_all,
    fit,
    fit_ahead,
    probe_seconds,
    untried_summary,
)
from kernelaudit.errors import UsageError
from kernelaudit.formats import read_problem
from kernelaudit.formats.readers import read_candidate
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.cost import cost_model
from kernelaudit.problem.spec import Output, Problem, TensorInput
from kernelaudit.profiles import Profile, profile_named, profile_with_budget
from kernelaudit.runner.candidate import CandidateRef
from kernelaudit.training.estimate import training_seconds

_FIXED = cost_model("cuda").per_audit_s
"""What a GPU audit's probing costs besides its probes' calls: part of every plan."""


def _add(x, y):
    return x + y


def _problem(workloads: list[dict[str, int]]) -> Problem:
    return Problem(
        name="add",
        reference=_add,
        axes=("rows", "cols"),
        inputs=(
            TensorInput("x", ("rows", "cols"), (torch.float32, torch.bfloat16)),
            TensorInput("y", ("rows", "cols"), (torch.float32, torch.bfloat16)),
        ),
        outputs=(Output("out", ("rows", "cols"), "x"),),
        workloads=tuple(workloads),
    )


def _context(problem: Problem, profile: str = "default", budget_s: float | None = None):
    chosen = profile_named(profile)
    if budget_s is not None:
        chosen = replace(chosen, budget_s=budget_s)
    return PlanContext(problem, chosen, "cuda", 132)


def test_required_probes_run_past_the_budget_and_optional_ones_only_within_it():
    problem = _problem([{"rows": 64, "cols": 64}])
    case = Case((("rows", 64), ("cols", 64)))
    required = [Probe("numerics", replace(case, seed=s)) for s in range(3)]
    optional = [Probe("numerics", replace(case, seed=10 + s), rank=1) for s in range(3)]
    one = probe_seconds(problem, required[0], "cuda")

    # the required probes are four budgets' worth: all of them run, and no optional one
    tight = fit(required + optional, problem, "cuda", budget_s=(3 * one + _FIXED) / 4)
    assert tight.probes == tuple(required)
    assert tight.untried == tuple(optional)
    assert tight.cut == ()

    # room for exactly two optional probes beyond the required ones and the device's own
    # probing cost
    roomy = fit(required + optional, problem, "cuda", budget_s=(5.5 * one + _FIXED) / PROBE_SHARE)
    assert roomy.probes == tuple(required + optional[:2])
    assert roomy.untried == (optional[2],)
    assert untried_summary(roomy.untried) == (("numerics @ ", 1),)


def test_required_probes_past_their_most_keep_every_check_and_are_taken_a_round_at_a_time():
    problem = _problem([{"rows": 1024, "cols": 1024}])
    case = Case((("rows", 1024), ("cols", 1024)))
    numerics = [Probe("numerics", replace(case, seed=s)) for s in range(6)]
    replay = [Probe("replay", replace(case, seed=20)), Probe("replay", _costly())]
    races = [Probe("races", replace(case, seed=30)), Probe("races", replace(case, seed=31))]
    one = probe_seconds(problem, numerics[0], "cuda")
    big = probe_seconds(problem, replay[1], "cuda")
    assert big > 5 * one
    # room for the device's own probing cost and six and a half of the small probes
    budget = (_FIXED + 6.5 * one) / REQUIRED_MOST
    fitted = fit([*numerics, *replay, *races], problem, "cuda", budget)
    # every check's first probe, then a round at a time while they fit: the costly second
    # replay gives way to the races' second, and numerics takes the room left
    assert fitted.probes == (*numerics[:3], replay[0], *races)
    assert fitted.cut == (*numerics[3:], replay[1])
    assert fitted.untried == fitted.cut
    assert fitted.estimate_s == pytest.approx(_FIXED + 6 * one)
    assert untried_summary(fitted.untried) == (("numerics @ ", 3), ("replay @ ", 1))
    # a probe making the calls of one taken costs nothing more, and is taken
    again = Probe("races", numerics[0].case)
    fitted = fit([*numerics, *replay, *races, again], problem, "cuda", budget)
    assert again in fitted.probes and fitted.cut == (*numerics[3:], replay[1])
    # a first probe runs whatever it costs, and one on its run costs nothing more even with
    # the room spent
    shared = Probe("numerics", replay[1].case)
    alone = fit([replay[1], numerics[0], shared], problem, "cuda", budget)
    assert alone.probes == (replay[1], numerics[0], shared) and alone.cut == ()
    # a plan of nothing, on a budget smaller than the device's own probing cost
    assert fit([], problem, "cuda", 0.01).probes == ()
    # with room for them all, nothing is cut
    roomy = fit([*numerics, *replay, *races], problem, "cuda", (_FIXED + big + 9 * one) / 4)
    assert roomy.cut == () and len(roomy.probes) == 10


def _costly() -> Case:
    return Case((("rows", 4096), ("cols", 4096)))


def test_probes_of_other_checks_making_the_same_calls_are_counted_once():
    problem = _problem([{"rows": 64, "cols": 64}])
    case = Case((("rows", 64), ("cols", 64)))
    numerics, gradients = Probe("numerics", case), Probe("gradients", case)
    one = probe_seconds(problem, numerics, "cuda")
    alone = fit([numerics], problem, "cuda", budget_s=one / 10)
    both = fit([numerics, gradients], problem, "cuda", budget_s=one / 10)
    assert both.estimate_s == alone.estimate_s == one + _FIXED  # one run, judged as each's own
    # an optional probe on that run costs nothing more, so it is taken with no room left
    shared = Probe("autotune", case, rank=1)
    other = Probe("autotune", replace(case, seed=7), rank=1)
    fitted = fit([numerics, shared, other], problem, "cuda", budget_s=(one + _FIXED) / PROBE_SHARE)
    assert fitted.probes == (numerics, shared)
    assert fitted.untried == (other,)
    assert fitted.estimate_s == one + _FIXED


def test_lower_ranks_are_taken_before_higher_ones():
    problem = _problem([{"rows": 64, "cols": 64}])
    case = Case((("rows", 64), ("cols", 64)))
    late = Probe("numerics", replace(case, seed=1), rank=3)
    early = Probe("numerics", replace(case, seed=2), rank=1)
    one = probe_seconds(problem, late, "cuda")
    fitted = fit([late, early], problem, "cuda", budget_s=(1.5 * one + _FIXED) / PROBE_SHARE)
    assert fitted.probes == (early,)
    assert fitted.untried == (late,)


def test_the_plan_is_the_same_every_time():
    problem = _problem([{"rows": 4096, "cols": 4096}, {"rows": 333, "cols": 1000}])
    ctx = _context(problem, budget_s=2.0)
    plans = [fit(Numerics().plan(ctx), problem, "cuda", 2.0) for _ in range(3)]
    assert plans[0] == plans[1] == plans[2]


def test_every_value_variant_runs_where_they_fit_the_budget():
    problem = _problem([{"rows": 64, "cols": 64}, {"rows": 32, "cols": 32}])
    ctx = _context(problem)
    fitted = fit(Numerics().plan(ctx), problem, "cuda", ctx.profile.budget_s)
    ran = {(p.case.values, p.case.dtype_config) for p in fitted.probes if p.rank == COVERAGE}
    for config in range(2):
        for values in value_variants(ctx):
            assert (tuple(sorted(values)), config) in ran


def test_every_family_input_and_boundary_shape_runs_however_tight_the_budget_of_a_sweep():
    problem = _problem([{"rows": 8192, "cols": 8192}, {"rows": 4096, "cols": 4096}])
    ctx = _context(problem, budget_s=0.001)
    probes = Numerics().plan(ctx)
    # the sweep's covering set, planned for a budget far below it, fitted to one that holds
    # its required probes within `REQUIRED_MOST` budgets but leaves no room for another
    required = fit([p for p in probes if p.rank == 0], problem, "cuda", 1e9).estimate_s
    fitted = fit(probes, problem, "cuda", required / (REQUIRED_MOST - 0.5))
    assert fitted.cut == ()
    variants = value_variants(ctx)
    for config in range(2):
        ran = [dict(p.case.values) for p in fitted.probes if p.case.dtype_config == config]
        for name in ("x", "y"):
            assert any(name in values for values in ran)
        families = {family for values in variants for _, family in values}
        assert families == {family for values in ran for family in values.values()}
    # fewer than every input in every family: the rest wait, first among the optional cases
    assert {p.rank for p in fitted.untried if p.case.values} >= {MORE_VARIANTS}
    assert len({p.case.values for p in fitted.probes}) < len(variants)
    boundaries = {p.case.label for p in probes if p.case.label.startswith("boundary")}
    assert boundaries
    assert boundaries <= {p.case.label for p in fitted.probes}


def test_the_families_are_spread_over_the_inputs():
    problem = _problem([{"rows": 8192, "cols": 8192}])
    ctx = _context(problem, budget_s=0.001)
    variants = value_variants(ctx)
    chosen = [
        v for v, needed in zip(variants, covering_variants(ctx, variants), strict=True) if needed
    ]
    varied = [values[0][0] for values in chosen if values]
    assert abs(varied.count("x") - varied.count("y")) <= 1


def test_costly_first_workloads_give_way_to_a_cheaper_base_for_the_checks():
    cheap_first = _problem([{"rows": 256, "cols": 256}, {"rows": 16384, "cols": 16384}])
    assert base_workload(_context(cheap_first)) == "workload 0"
    costly_first = _problem(
        [{"rows": 16384, "cols": 16384}, {"rows": 64, "cols": 64}, {"rows": 512, "cols": 512}]
    )
    ctx = _context(costly_first)
    assert base_workload(ctx) == "workload 2"  # the largest around which the probes fit
    shapes = shapes_for(ctx)
    assert shapes[0] == ({"rows": 512, "cols": 512}, "workload 2")
    boundaries = [sizes for sizes, label in shapes if label.startswith("boundary")]
    assert boundaries and all(max(sizes.values()) <= 1024 for sizes in boundaries)
    # the checks' own probes depart from it; the timed run stays at the first workload
    replays = next(p for p in build_checks() if p.name == "replay").plan(ctx)
    assert {p.case.label for p in replays} == {"workload 2"}
    assert timing_probe(ctx).case.label == "workload 0"
    kept, _, _ = kept_workloads(ctx)
    assert {"workload 0", "workload 2"} <= set(kept)


def test_cheap_workloads_all_run_and_costly_ones_are_sampled():
    cheap = _problem([{"rows": 16 * (i + 1), "cols": 64} for i in range(12)])
    kept, sampled, left_out = kept_workloads(_context(cheap))
    assert len(kept) == 12 and not sampled and not left_out

    sizes = [4096 + 16 * i for i in range(20)] + [8192, 4097, 6001, 7001]
    costly = _problem([{"rows": rows, "cols": 4096} for rows in sizes])
    kept, sampled, left_out = kept_workloads(_context(costly, budget_s=5.0))
    assert left_out
    names = {f"workload {i}": rows for i, rows in enumerate(sizes)}
    kept_rows = {names[name] for name in kept}
    # the first, the smallest, the largest, and the cheapest odd size, where tails matter
    assert kept_rows == {sizes[0], min(sizes), max(sizes), 4097}
    # the other odd sizes are the first optional cases
    assert {names[name] for name in sampled} == {6001, 7001}
    ranks: dict[str, set[int]] = {}
    for probe in Numerics().plan(_context(costly, budget_s=5.0)):
        ranks.setdefault(probe.case.label, set()).add(probe.rank)
    assert all(ranks[name] == {SAMPLED_OUT} for name in left_out)
    assert all(ranks[name] == {SAMPLED_WORKLOADS} for name in sampled)
    assert all(COVERAGE in ranks[name] for name in kept)


def test_workloads_that_repeat_the_sizes_of_another_are_planned_once():
    problem = _problem([{"rows": 64, "cols": 64}, {"rows": 64, "cols": 64}])
    probes = Numerics().plan(_context(problem))
    assert {p.case.label for p in probes if p.case.label.startswith("workload")} == {"workload 0"}


def test_a_workload_too_costly_for_the_whole_budget_runs_only_if_the_budget_allows():
    sizes = [{"rows": 64 + i, "cols": 64} for i in range(30)] + [{"rows": 1 << 20, "cols": 8192}]
    problem = _problem(sizes)
    ctx = _context(problem, budget_s=30.0)
    kept, _, left_out = kept_workloads(ctx)
    assert "workload 30" in left_out and "workload 0" in kept
    ranks = {p.rank for p in Numerics().plan(ctx) if p.case.label == "workload 30"}
    assert ranks == {SAMPLED_OUT}


def test_a_probe_planned_twice_keeps_its_lowest_rank():
    problem = _problem([{"rows": 64, "cols": 64}])
    case = Case((("rows", 64), ("cols", 64)))
    fitted = fit([Probe("numerics", case, rank=3), Probe("numerics", case)], problem, "cuda", 1e-6)
    assert len(fitted.probes) == 1 and not fitted.untried


@pytest.mark.parametrize("given", [0.0, -5.0, float("inf"), float("nan")])
def test_a_budget_must_be_a_positive_finite_number_of_seconds(given):
    with pytest.raises(UsageError, match="--budget"):
        profile_with_budget("quick", given)
    assert profile_with_budget("quick", 2.5).budget_s == 2.5


def test_the_sanitizer_gets_twice_the_audits_budget_and_follows_a_given_one():
    default = profile_named("default")
    assert default.sanitizer_budget_s == 2 * default.budget_s
    # an audit given ten times the time lets the sanitizer's runs take ten times as long
    assert profile_with_budget("default", 300.0).sanitizer_budget_s == 600.0
    assert profile_with_budget("quick", 5.0).sanitizer_budget_s == pytest.approx(
        profile_named("quick").sanitizer_budget_s / 2
    )


def test_time_left_follows_the_pace_this_machine_kept() -> None:
    from kernelaudit.engine.budget import time_left

    estimates = [100.0, 100.0, 50.0, 50.0]
    # nothing finished: the cost model's own figure, shared by the lanes
    assert time_left(estimates, {}, 2) == 150.0
    # the first audit took 40 s where 100 were expected: the rest at four tenths of theirs
    assert time_left(estimates, {0: 40.0}, 1) == 200.0 * 0.4
    # slower than the model: the rest take longer too
    assert time_left(estimates, {2: 100.0, 3: 100.0}, 2) == 200.0 * 2.0 / 2
    # what a lane already spent on the problem it audits is not waited for again: 60 s in, at
    # four tenths of the estimates, the second (40 s, started at 0) and the third (20 s,
    # started at 40, when the first ended) should be done; the fourth's 20 s are left
    assert time_left(estimates, {0: 40.0}, 2, elapsed_s=60.0, ended_s=[40.0]) == 20.0
    # fewer problems left than lanes: the longest is what is waited for
    assert time_left(estimates, {}, 2, dealt=[[0, 1], [2], [3]]) == 200.0
    # never less than nothing, however long the last audit runs past its estimate
    finished = {0: 40.0, 2: 20.0, 3: 20.0}
    assert time_left(estimates, finished, 2, elapsed_s=600.0, ended_s=[40.0, 45.0, 50.0]) == 0.0


def test_time_left_leans_on_the_pace_this_machine_kept_until_the_audits_say_otherwise() -> None:
    from kernelaudit.engine.budget import time_left

    estimates = [100.0, 100.0, 50.0, 50.0]
    # a kept pace of 0.5 and nothing finished: the estimates at that pace
    assert time_left(estimates, {}, 2, pace=0.5) == 300.0 * 0.5 / 2
    # the first audit ran at 1.0, off the model: the rest are not all taken at its pace, the
    # kept one weighs as one lane's share of the estimates (150 s): 0.7. At 100 s the second
    # (70 s) should be done, the third started as the first ended: its 35 s are left
    rate = (100.0 + 0.5 * 150.0) / (100.0 + 150.0)
    left = time_left(estimates, {0: 100.0}, 2, elapsed_s=100.0, pace=0.5, ended_s=[100.0])
    assert left == pytest.approx(50.0 * rate) == 35.0


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_no_bundled_example_has_its_required_probes_cut_in_any_profile(device: str) -> None:
    """The required probes are cut only past `REQUIRED_MOST` budgets, which no bundled
    example's come near: the demo keeps every case it had."""
    examples = sorted(Path(__file__).parents[2].joinpath("examples").glob("*/problem.py"))
    assert examples
    for path in examples:
        problem = read_problem(path)
        for name in ("quick", "default", "thorough"):
            fitted = fit_ahead(PlanContext(problem, profile_named(name), device, 132))
            assert fitted.probes and fitted.cut == (), (path.parent.name, name)


def _embedding_jobs() -> list[tuple[Problem, CandidateRef]]:
    folder = Path(__file__).parents[2] / "examples" / "embedding_backward"
    problem = read_problem(folder / "problem.py")
    return [
        read_candidate(f"{folder / 'candidates.py'}::{name}", problem)
        for name in ("wide_accumulator", "accumulate_in_low_precision")
    ]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_estimate_counts_the_training_and_the_reference_runs_once_a_problem(
    device: str,
) -> None:
    """A candidate that trains is expected to take its training steps longer than one that
    does not train, and the first of its problem longer still: it makes the reference's
    runs, which the next one takes from it. Without the training check, neither trains."""
    jobs = _embedding_jobs()
    quick = profile_named("quick")
    first, second = expected_all(jobs, quick, device, 132)
    untrained = expected_all(jobs, quick, device, 132, trains=False)
    problem = jobs[0][0]
    assert untrained[0] == pytest.approx(untrained[1])
    made = training_seconds(problem, quick, device, reference_runs=True)
    taken = training_seconds(problem, quick, device, reference_runs=False)
    assert first - untrained[0] == pytest.approx(made)
    assert second - untrained[1] == pytest.approx(taken)
    assert first > second > untrained[1] and made > taken > 0


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_training_estimate_follows_the_steps_and_configurations_a_profile_trains(
    device: str,
) -> None:
    problem = _embedding_jobs()[0][0]
    configs = len(problem.dtype_configs())
    one = replace(profile_named("quick"), training_configs=1, training_length=0.5)

    def seconds(profile: Profile) -> float:
        return training_seconds(problem, profile, device, reference_runs=True)

    # twice the steps, twice the time
    assert seconds(replace(one, training_length=1.0)) == pytest.approx(2 * seconds(one))
    # every configuration (0: all of them), and never more than the problem has
    assert seconds(replace(one, training_configs=0)) == pytest.approx(configs * seconds(one))
    assert seconds(replace(one, training_configs=configs + 3)) == pytest.approx(
        configs * seconds(one)
    )


def test_a_problem_without_a_slot_has_no_training_in_its_estimate() -> None:
    problem = _problem([{"rows": 64, "cols": 64}])
    assert problem.slot == ""
    assert training_seconds(problem, profile_named("default"), "cuda", reference_runs=True) == 0.0


def test_a_gpu_demo_is_announced_with_its_training_steps() -> None:
    """On a GPU the training check is most of a bundled example's `quick` audit: the probes'
    estimate alone announced about 3 minutes for a demo that took 7 on an H200. The
    announcement now holds the steps: between 5 and 10 minutes for the bundled examples."""
    root = Path(__file__).parents[2] / "examples"
    jobs = []
    for example in sorted(root.glob("*/expected.json")):
        problem = read_problem(example.parent / "problem.py")
        for listed in json.loads(example.read_text())["candidates"]:
            jobs.append(read_candidate(str(example.parent / listed["candidate"]), problem))
    estimates = expected_all(jobs, profile_named("quick"), "cuda", 132)
    assert 300 <= sum(estimates) <= 600
