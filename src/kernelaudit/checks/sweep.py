"""The cases a numerics sweep runs: distributions x shapes x layouts x dtypes, planned so the
count grows with the sum of the factors, not their product."""

from __future__ import annotations

from kernelaudit.checks.base import PlanContext
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.cost import case_elements, cost_model
from kernelaudit.inputs.distributions import ACTIVATIONS_ONLY, PEAKED
from kernelaudit.inputs.indices import ARGMAX
from kernelaudit.inputs.layouts import geometry
from kernelaudit.inputs.masks import FULLY_MASKED
from kernelaudit.inputs.materialize import (
    GENERATOR,
    argmax_source,
    default_distribution,
    distributions_for,
)
from kernelaudit.inputs.shapes import shape_cases
from kernelaudit.problem.spec import (
    GeneratedInput,
    IndexInput,
    MaskInput,
    Problem,
    ScalarInput,
    TensorInput,
    resolve_shape,
)


def _profile_names(ctx: PlanContext, inp: TensorInput | IndexInput | MaskInput) -> tuple[str, ...]:
    if isinstance(inp, TensorInput):
        wanted = tuple(d for d in ctx.profile.float_distributions if inp.domain.admits(d))
        if inp.role != "activation":
            wanted = tuple(name for name in wanted if name not in ACTIVATIONS_ONLY)
    elif isinstance(inp, IndexInput):
        wanted = ctx.profile.index_distributions
    else:
        wanted = ctx.profile.mask_distributions
        if inp.domain.min_kept:  # its callers never mask a whole row
            wanted = tuple(name for name in wanted if name != FULLY_MASKED)
    valid = distributions_for(inp, ctx.problem)
    return tuple(name for name in wanted if name in valid)


def _generator_variant(problem: Problem) -> tuple[tuple[str, str], ...]:
    """Every input the problem's own generator does not fill by default, taken from it too:
    the benchmark's joint distribution, one variant among kernelaudit's."""
    if problem.sampler is None:
        return ()
    return tuple(
        (inp.name, GENERATOR)
        for inp in problem.tensor_inputs
        if default_distribution(inp, problem) != GENERATOR
        and not (isinstance(inp, TensorInput) and inp.role == "saved")
    )


def activations(problem: Problem) -> list[TensorInput]:
    return [i for i in problem.inputs if isinstance(i, TensorInput) and i.role == "activation"]


def value_variants(ctx: PlanContext) -> list[tuple[tuple[str, str], ...]]:
    """One input's distribution (or one argument's mode) changed at a time, the others at their
    defaults. Saved inputs are computed by the forward, not drawn."""
    variants: list[tuple[tuple[str, str], ...]] = [()]
    for inp in ctx.problem.inputs:
        if isinstance(inp, ScalarInput):
            variants += [((inp.name, str(mode)),) for mode in inp.modes()[1:]]
            continue
        if isinstance(inp, TensorInput) and inp.role == "saved":
            continue
        if isinstance(inp, TensorInput) and inp.role == "weight" and not ctx.profile.vary_weights:
            continue
        if isinstance(inp, GeneratedInput):
            continue
        default = default_distribution(inp, ctx.problem)
        for name in _profile_names(ctx, inp):
            if name != default:
                variants.append(((inp.name, name),))
    variants += _confident_labels(ctx)
    joint = _generator_variant(ctx.problem)
    if joint:
        variants.append(joint)
    return variants


def _confident_labels(ctx: PlanContext) -> list[tuple[tuple[str, str], ...]]:
    """Peaked rows with the ids at each row's argmax, together: the confident, correct
    predictions of a trained model, where a cross-entropy is almost zero and rounding its
    row's maximum loses all of it. Neither draw alone makes that case."""
    profile = ctx.profile
    if PEAKED not in profile.float_distributions or ARGMAX not in profile.index_distributions:
        return []
    variants = []
    for inp in ctx.problem.inputs:
        if not isinstance(inp, IndexInput):
            continue
        source = argmax_source(ctx.problem, inp)
        if source is not None:
            variants.append(((source.name, PEAKED), (inp.name, ARGMAX)))
    return variants


COVERAGE, SAMPLED_WORKLOADS, MORE_WORKLOAD_VALUES, MORE_CONFIGS, SAMPLED_OUT = range(5)
"""Ranks of numerics cases (`Probe.rank`): what every audit runs, then the optional cases in
the order they are worth their time."""

_VARIANT_SHARE = 0.4
"""The share of the time budget the value variants at their anchor workload may take."""
_WORKLOAD_SHARE = 0.25
"""The share of the time budget every workload at default values may take before the
workloads are sampled."""
_SAMPLED_ODD = 6
"""Odd-sized workloads kept, at most, when the workloads are sampled."""


def _odd(sizes: dict[str, int]) -> bool:
    """A size map with an axis that is not a multiple of 16: where tails and masks matter."""
    return any(size % 16 for size in sizes.values())


def affordable(ctx: PlanContext, sizes: dict[str, int], calls: int = 1) -> bool:
    """Whether `calls` calls at `sizes` fit the audit's whole budget: a case that does not is
    never run whatever the budget, only while it allows (a workload of billions of elements)."""
    seconds = cost_model(ctx.device).seconds(case_elements(ctx.problem, sizes), calls)
    return seconds <= ctx.profile.budget_s


def kept_workloads(ctx: PlanContext) -> tuple[list[str], list[str], list[str]]:
    """The workloads an audit runs whatever its budget, those it runs first among the optional
    cases, and those it runs only if the budget still allows. All of them are required when
    they are cheap; otherwise the first, the smallest, the largest and the cheapest odd-sized
    one are, and up to `_SAMPLED_ODD` other odd-sized ones, spread over the list, come first
    among the optional cases. A workload one call of which costs more than the whole budget is
    never required unless it is the smallest."""
    problem = ctx.problem
    names = [w.name for w in problem.workloads]
    model = cost_model(ctx.device)
    sizes = {w.name: w.as_dict() for w in problem.workloads}
    seconds = {name: model.seconds(case_elements(problem, sizes[name])) for name in names}
    configs = len(problem.dtype_configs())
    if sum(seconds.values()) * configs <= _WORKLOAD_SHARE * ctx.profile.budget_s:
        return names, [], []
    by_size = sorted(names, key=lambda name: seconds[name])
    required = {names[0], by_size[0], by_size[-1]}
    odd = [n for n in names if _odd(sizes[n])]
    if odd and not required & set(odd):
        required.add(min(odd, key=lambda name: seconds[name]))
    odd = [n for n in odd if n not in required]
    stride = max(1, len(odd) // _SAMPLED_ODD)
    sampled = {n for n in odd[::stride][:_SAMPLED_ODD] if affordable(ctx, sizes[n])}
    required = {n for n in required if n == by_size[0] or affordable(ctx, sizes[n])}
    return (
        [n for n in names if n in required],
        [n for n in names if n in sampled],
        [n for n in names if n not in required and n not in sampled],
    )


def _anchor(ctx: PlanContext, kept: list[str], variants: int) -> str:
    """The workload every value variant is tried at: the largest kept one at which all of
    them fit their share of the budget (larger sizes reveal more: longer reductions, more
    repeated ids), else the smallest."""
    problem = ctx.problem
    model = cost_model(ctx.device)
    sizes = {w.name: w.as_dict() for w in problem.workloads}
    configs = len(problem.dtype_configs())
    cost = {name: model.seconds(case_elements(problem, sizes[name])) for name in kept}
    fitting = [
        n for n in kept if cost[n] * variants * configs <= _VARIANT_SHARE * ctx.profile.budget_s
    ]
    pool = fitting or [min(kept, key=lambda name: cost[name])]
    return max(pool, key=lambda name: cost[name])


def numerics_cases(ctx: PlanContext) -> list[tuple[Case, int]]:
    """Every case of the sweep with its rank (see `Probe.rank`), for every dtype configuration.

    Always run: each required workload at default values; every value variant at one anchor
    workload; every boundary shape at default values and with offset-mean activations; every
    allowed layout, one input at a time, at the first workload. Optional: the sampled odd-sized
    workloads, the value variants at the other workloads (largest first), the layouts in the
    other dtype configurations, more seeds, and the workloads left out of the sample."""
    problem, profile = ctx.problem, ctx.profile
    shapes = shape_cases(problem, profile.boundary_sizes_per_axis, ctx.sm_count)
    if not shapes:
        return []
    # a workload whose sizes repeat an earlier one's has no shape case of its own
    labels = {label for _, label in shapes}
    kept, sampled, left_out = ([n for n in names if n in labels] for names in kept_workloads(ctx))
    variants = value_variants(ctx)
    anchor = _anchor(ctx, kept, len(variants)) if kept else ""
    size_of = {label: case_elements(problem, sizes) for sizes, label in shapes}
    offset = tuple((i.name, "offset") for i in activations(problem))
    ranked: list[tuple[Case, int]] = []

    def add(sizes: dict[str, int], label: str, config: int, values: tuple, rank: int) -> None:
        for seed in range(profile.seeds):
            case = Case(tuple(sizes.items()), config, tuple(sorted(values)), (), seed, label)
            ranked.append((case, rank if seed == 0 else max(rank, MORE_CONFIGS)))

    for config in range(len(problem.dtype_configs())):
        for sizes, label in shapes:
            if label in left_out:
                add(sizes, label, config, (), SAMPLED_OUT)
            elif label in sampled:
                add(sizes, label, config, (), SAMPLED_WORKLOADS)
            elif label == anchor:
                for values in variants:
                    add(sizes, label, config, values, COVERAGE)
            elif label in kept:
                add(sizes, label, config, (), COVERAGE)
            else:
                add(sizes, label, config, (), COVERAGE)
                if offset:
                    add(sizes, label, config, offset, COVERAGE)
    others = sorted((label for label in kept if label != anchor), key=lambda n: -size_of[n])
    for config in range(len(problem.dtype_configs())):
        for label in others:
            sizes = next(s for s, name in shapes if name == label)
            for values in variants[1:]:
                add(sizes, label, config, values, MORE_WORKLOAD_VALUES)
    first_sizes, first_label = shapes[0]
    allowed = [layout for layout in profile.layouts if layout in problem.contract.layouts]
    for inp in problem.tensor_inputs:
        if problem.domain(inp.name).contiguous:
            continue  # its callers always pass it contiguous
        shape = resolve_shape(inp.shape, first_sizes)
        for layout in allowed:
            if layout == "expanded" and inp.name in problem.contract.mutates:
                continue  # a stride-0 view cannot be written element by element
            if layout in ("expanded", "broadcast") and getattr(inp, "role", "") == "saved":
                continue  # computed by the forward, a saved tensor varies along every axis
            if geometry(layout, shape) is None:
                continue
            for config in range(len(problem.dtype_configs())):
                layouts = ((inp.name, layout),)
                case = Case(tuple(first_sizes.items()), config, (), layouts, 0, first_label)
                ranked.append((case, COVERAGE if config == 0 else MORE_CONFIGS))
    return ranked


def boundary_cases(ctx: PlanContext, limit: int) -> list[Case]:
    """The first workload, then up to `limit` boundary shapes with default values, taken
    round-robin across axes so every axis gets its most telling sizes first."""
    shapes = shape_cases(ctx.problem, ctx.profile.boundary_sizes_per_axis, ctx.sm_count)
    per_axis: dict[str, list[tuple[dict[str, int], str]]] = {}
    for sizes, label in shapes[1:]:
        if label.startswith("boundary "):
            per_axis.setdefault(label.split()[1].split("=")[0], []).append((sizes, label))
    picked = shapes[:1]
    rank = 0
    while len(picked) < limit + 1 and any(rank < len(v) for v in per_axis.values()):
        picked += [v[rank] for v in per_axis.values() if rank < len(v)]
        rank += 1
    return [Case(tuple(sizes.items()), 0, (), (), 0, label) for sizes, label in picked[: limit + 1]]
