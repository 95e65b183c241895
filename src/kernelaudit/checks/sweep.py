"""The cases a numerics sweep runs: distributions x shapes x layouts x dtypes, planned so the
count grows with the sum of the factors, not their product."""

from __future__ import annotations

from collections import Counter

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
from kernelaudit.problem.dims import resolve_shape
from kernelaudit.problem.spec import (
    GeneratedInput,
    IndexInput,
    MaskInput,
    Problem,
    ScalarInput,
    TensorInput,
)


def _profile_names(ctx: PlanContext, inp: TensorInput | IndexInput | MaskInput) -> tuple[str, ...]:
    if isinstance(inp, TensorInput):
        wanted = tuple(d for d in ctx.profile.float_distributions if inp.domain.admits(d))
        if inp.role != "activation":
            wanted = tuple(name for name in wanted if name not in ACTIVATIONS_ONLY)
    elif isinstance(inp, IndexInput):
        wanted = tuple(d for d in ctx.profile.index_distributions if inp.domain.admits(d))
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


Variant = tuple[tuple[str, str], ...]
"""Inputs drawn otherwise than by default, with how: (name, distribution or argument mode)."""


def value_variants(ctx: PlanContext) -> list[Variant]:
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


COVERAGE, MORE_VARIANTS, SAMPLED_WORKLOADS = 0, 1, 2
MORE_WORKLOAD_VALUES, MORE_CONFIGS, SAMPLED_OUT = 3, 4, 5
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


def required_budget(ctx: PlanContext) -> float:
    """The seconds the shares that decide what every audit runs are taken of: the budget, as
    the device's cost model counts it (`CostModel.required_share`)."""
    return ctx.profile.budget_s * cost_model(ctx.device).required_share


def affordable(ctx: PlanContext, sizes: dict[str, int], calls: int = 1) -> bool:
    """Whether `calls` calls at `sizes` fit the audit's whole budget (`required_budget`): a
    case that does not is never run whatever the budget, only while it allows (a workload of
    billions of elements)."""
    seconds = cost_model(ctx.device).seconds(case_elements(ctx.problem, sizes), calls)
    return seconds <= required_budget(ctx)


_BASE_CALLS = 100
"""Roughly how many calls an audit makes at its base workload and the boundary shapes around
it: the numerics sweep's boundary and layout cases and every check's own probes (unwritten
outputs, replays, races, determinism, memory, ...)."""
_BASE_SHARE = 0.3
"""The share of the time budget the sizes of those calls may take (their fixed cost aside)."""


def workloads_cheap(ctx: PlanContext) -> bool:
    """Whether every workload, in every dtype configuration, at default values fits its share
    of the budget: then every one of them runs, and the checks depart from the first."""
    model, problem = cost_model(ctx.device), ctx.problem
    seconds = sum(model.seconds(case_elements(problem, w.as_dict())) for w in problem.workloads)
    return seconds * len(problem.dtype_configs()) <= _WORKLOAD_SHARE * required_budget(ctx)


def base_workload(ctx: PlanContext) -> str:
    """The workload the boundary shapes, the layouts and the checks' own probes depart from:
    the first listed (the one a problem's author put first), unless the calls made around it
    would not fit their share of the budget; then the largest workload around which they fit
    (larger sizes reveal more: longer reductions, more programs), else the smallest."""
    problem = ctx.problem
    if not problem.workloads:
        return ""
    model = cost_model(ctx.device)
    allowance = _BASE_SHARE * required_budget(ctx) / (_BASE_CALLS * model.per_element_s)
    elements = {w.name: case_elements(problem, w.as_dict()) for w in problem.workloads}
    first = problem.workloads[0].name
    if elements[first] <= allowance or workloads_cheap(ctx):
        return first
    fitting = [name for name, count in elements.items() if count <= allowance]
    pool = fitting or [min(elements, key=lambda name: elements[name])]
    return max(pool, key=lambda name: elements[name])


def shapes_for(ctx: PlanContext) -> list[tuple[dict[str, int], str]]:
    """The audit's size maps: its base workload (`base_workload`), the other workloads, then
    the boundary shapes around the base."""
    return shape_cases(
        ctx.problem, ctx.profile.boundary_sizes_per_axis, ctx.sm_count, base_workload(ctx)
    )


def kept_workloads(ctx: PlanContext) -> tuple[list[str], list[str], list[str]]:
    """The workloads an audit runs as required probes (`Probe.rank` 0), those it runs first
    among the optional cases, and those it runs only if the budget still allows. All of them
    are required when they are cheap; otherwise the first, the base (`base_workload`), the
    smallest, the largest and the cheapest odd-sized one are, and up to `_SAMPLED_ODD` other
    odd-sized ones, spread over the list, come first among the optional cases. A workload one
    call of which costs more than the whole budget is never required unless it is the
    smallest."""
    problem = ctx.problem
    names = [w.name for w in problem.workloads]
    model = cost_model(ctx.device)
    sizes = {w.name: w.as_dict() for w in problem.workloads}
    seconds = {name: model.seconds(case_elements(problem, sizes[name])) for name in names}
    if workloads_cheap(ctx):
        return names, [], []
    by_size = sorted(names, key=lambda name: seconds[name])
    required = {names[0], base_workload(ctx), by_size[0], by_size[-1]}
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


def covering_variants(ctx: PlanContext, variants: list[Variant]) -> list[bool]:
    """Which of `variants` an audit runs whatever its budget when not all of them fit: the
    default values, every argument mode, every variant that sets several inputs together (the
    benchmark's own generator, confident labels), and, of the variants that change one
    input's distribution, a covering set: every distribution family at least once for each
    kind of input (activations, weights, upstream gradients, ids, masks), each on the input of
    that kind varied least so far (the families spread over the inputs), then every input not
    yet varied with its first variant. A problem with one input of each kind keeps every
    variant. The others wait for the budget, most telling first (`MORE_VARIANTS`)."""
    kinds = {inp.name: getattr(inp, "role", type(inp).__name__) for inp in ctx.problem.inputs}
    scalars = {inp.name for inp in ctx.problem.inputs if isinstance(inp, ScalarInput)}
    chosen = [len(values) != 1 or values[0][0] in scalars for values in variants]
    by_family: dict[tuple[str, str], list[int]] = {}
    for k, values in enumerate(variants):
        if not chosen[k]:
            name, family = values[0]
            by_family.setdefault((kinds[name], family), []).append(k)
    varied: Counter[str] = Counter()
    for indices in by_family.values():
        k = min(indices, key=lambda k: varied[variants[k][0][0]])
        chosen[k] = True
        varied[variants[k][0][0]] += 1
    for k, values in enumerate(variants):
        if not chosen[k] and not varied[values[0][0]]:
            chosen[k] = True
            varied[values[0][0]] += 1
    return chosen


def _anchor(ctx: PlanContext, kept: list[str], variants: list[Variant]) -> tuple[str, list[bool]]:
    """The workload the value variants are tried at, and which of them every audit runs
    there: all of them at the largest kept workload at which they fit their share of the
    budget (larger sizes reveal more: longer reductions, more repeated ids); where none fits
    them all, the covering set (`covering_variants`) at the largest kept workload at which it
    fits, else at the smallest."""
    problem = ctx.problem
    model = cost_model(ctx.device)
    sizes = {w.name: w.as_dict() for w in problem.workloads}
    configs = len(problem.dtype_configs())
    cost = {name: model.seconds(case_elements(problem, sizes[name])) for name in kept}
    allowance = _VARIANT_SHARE * required_budget(ctx)
    every = [True] * len(variants)
    covering = covering_variants(ctx, variants)
    for chosen in (every, covering):
        fitting = [n for n in kept if cost[n] * sum(chosen) * configs <= allowance]
        if fitting:
            return max(fitting, key=lambda name: cost[name]), chosen
    return min(kept, key=lambda name: cost[name]), covering


def numerics_cases(ctx: PlanContext) -> list[tuple[Case, int]]:
    """Every case of the sweep with its rank (see `Probe.rank`), for every dtype configuration.

    Always run: each required workload at default values; every value variant at one anchor
    workload, or where they do not all fit the budget a covering set of them
    (`covering_variants`); every boundary shape at default values and with offset-mean
    activations; every allowed layout, one input at a time, at the base workload
    (`base_workload`). Optional: the other value variants at the anchor, the sampled odd-sized
    workloads, the value variants at the other workloads (largest first), the layouts in the
    other dtype configurations, more seeds, and the workloads left out of the sample."""
    problem, profile = ctx.problem, ctx.profile
    shapes = shapes_for(ctx)
    if not shapes:
        return []
    # a workload whose sizes repeat an earlier one's has no shape case of its own
    labels = {label for _, label in shapes}
    kept, sampled, left_out = ([n for n in names if n in labels] for names in kept_workloads(ctx))
    variants = value_variants(ctx)
    anchor, required = _anchor(ctx, kept, variants) if kept else ("", [])
    size_of = {label: case_elements(problem, sizes) for sizes, label in shapes}
    offset = tuple((i.name, "offset") for i in activations(problem))
    # the real calls a guard recorded first: a failure seen in the job stays a regression case
    ranked: list[tuple[Case, int]] = [(case, COVERAGE) for case in problem.recorded_cases]

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
                for values, needed in zip(variants, required, strict=True):
                    add(sizes, label, config, values, COVERAGE if needed else MORE_VARIANTS)
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
    base_sizes, base_label = shapes[0]
    allowed = [layout for layout in profile.layouts if layout in problem.contract.layouts]
    for inp in problem.tensor_inputs:
        if problem.domain(inp.name).contiguous:
            continue  # its callers always pass it contiguous
        shape = resolve_shape(inp.shape, base_sizes)
        for layout in allowed:
            if layout == "expanded" and inp.name in problem.contract.mutates:
                continue  # a stride-0 view cannot be written element by element
            if layout in ("expanded", "broadcast") and getattr(inp, "role", "") == "saved":
                continue  # computed by the forward, a saved tensor varies along every axis
            if layout in ("expanded", "broadcast") and problem.domain(inp.name).unique_ids:
                continue  # a stride-0 view repeats its ids, which its callers never do
            if geometry(layout, shape) is None:
                continue
            for config in range(len(problem.dtype_configs())):
                layouts = ((inp.name, layout),)
                case = Case(tuple(base_sizes.items()), config, (), layouts, 0, base_label)
                ranked.append((case, COVERAGE if config == 0 else MORE_CONFIGS))
    return ranked


def boundary_cases(ctx: PlanContext, limit: int) -> list[Case]:
    """The base workload (`base_workload`), then up to `limit` boundary shapes with default
    values, taken round-robin across axes so every axis gets its most telling sizes first."""
    shapes = shapes_for(ctx)
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
