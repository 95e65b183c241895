"""Turn a case into input values: the one place where a problem's inputs get drawn."""

from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Callable, Hashable, Mapping
from dataclasses import replace

import torch

from kernelaudit.errors import ProblemError, UsageError
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.distributions import FLOAT_DISTRIBUTIONS, default_float, draw_float
from kernelaudit.inputs.generated import generated_tensor, generator_values
from kernelaudit.inputs.indices import ARGMAX, INDEX_DISTRIBUTIONS, draw_index
from kernelaudit.inputs.layouts import expand_dim
from kernelaudit.inputs.masks import MASK_DISTRIBUTIONS, draw_mask
from kernelaudit.inputs.recorded import is_recorded, recorded_tensor
from kernelaudit.inputs.relations import held_below
from kernelaudit.inputs.reuse import DRAWS
from kernelaudit.inputs.rows import restrict_rows
from kernelaudit.problem.dims import dim_axes, dim_size, resolve_shape
from kernelaudit.problem.domain import arranged, within
from kernelaudit.problem.spec import (
    LAYOUTS,
    GeneratedInput,
    IndexInput,
    Input,
    MaskInput,
    Problem,
    ScalarInput,
    TensorInput,
)


def input_generator(seed: int, name: str) -> torch.Generator:
    """The generator for one input of a case: independent of every other input's draws, so
    changing one input's distribution leaves the others' values as they were."""
    # The CPU generator keeps only the low 32 bits of its seed, so seed and name are hashed
    # together into 32 bits; crc32 is stable across processes, unlike hash().
    generator = torch.Generator(device="cpu")
    generator.manual_seed(zlib.crc32(f"{seed}\0{name}".encode()))
    return generator


GENERATOR = "get_inputs"
"""The distribution that takes an input's values from the problem's own generator."""


def distributions_for(inp: Input, problem: Problem | None = None) -> tuple[str, ...]:
    """The distribution names that can fill `inp` (none for scalars); with `problem`, the
    problem's own generator too when it has one."""
    generator = (GENERATOR,) if problem is not None and problem.sampler is not None else ()
    if isinstance(inp, TensorInput):
        return (*FLOAT_DISTRIBUTIONS, *generator)
    if isinstance(inp, IndexInput):
        paired = problem is None or argmax_source(problem, inp) is not None
        return (*(d for d in INDEX_DISTRIBUTIONS if d != ARGMAX or paired), *generator)
    if isinstance(inp, MaskInput):
        return (*MASK_DISTRIBUTIONS, *generator)
    if isinstance(inp, GeneratedInput):
        return (GENERATOR,)
    return ()


def default_distribution(
    inp: TensorInput | IndexInput | MaskInput | GeneratedInput, problem: Problem | None = None
) -> str:
    """The distribution `inp` gets when a case names none."""
    if isinstance(inp, GeneratedInput):
        return GENERATOR
    if problem is not None and problem.sampler and inp.name in problem.sampler.default_for:
        return GENERATOR
    if isinstance(inp, TensorInput):
        return default_float(inp.role)
    if isinstance(inp, IndexInput):
        return "uniform"
    return "random"


def argmax_source(problem: Problem, inp: IndexInput) -> TensorInput | None:
    """The floating input whose rows `inp`'s ids point into: shaped like the ids with the
    bound's axis last (logits [rows, vocab] for targets [rows] in [0, vocab)); None when the
    problem has none, or more than one."""
    wanted = (*inp.shape, inp.bound)
    sources = [
        i
        for i in problem.inputs
        if isinstance(i, TensorInput) and i.role != "saved" and tuple(i.shape) == wanted
    ]
    return sources[0] if len(sources) == 1 else None


def _axis_size(sizes: dict[str, int], axis: str, inp: Input, case: Case) -> int:
    if axis not in sizes:
        raise UsageError(
            f"input {inp.name!r} uses axis {axis!r}, which case {case.label or case.describe()!r} "
            f"gives no size; add {axis!r} to the case's sizes (or to every workload)"
        )
    return sizes[axis]


def _check_case_names(problem: Problem, case: Case) -> None:
    names = {i.name for i in problem.inputs}
    for field, named in (("values", case.values), ("layouts", case.layouts)):
        unknown = sorted(name for name, _ in named if name not in names)
        if unknown:
            raise UsageError(
                f"case {field} name inputs {unknown} that problem {problem.name!r} does not "
                f"declare; use one of: {', '.join(sorted(names))}"
            )
    for name, layout in case.layouts:
        if layout not in LAYOUTS:
            raise UsageError(
                f"input {name!r} has unknown layout {layout!r}; choose one of: {', '.join(LAYOUTS)}"
            )


def _draw(
    inp: TensorInput | IndexInput | MaskInput,
    distribution: str,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    generator: torch.Generator,
    bound: int,
) -> torch.Tensor:
    if isinstance(inp, TensorInput):
        return within(draw_float(distribution, shape, dtype, generator), inp.domain)
    if isinstance(inp, IndexInput):
        return arranged(
            draw_index(distribution, shape, bound, dtype, generator), bound, inp.domain, generator
        )
    return draw_mask(distribution, shape, inp.kind, dtype, generator, inp.domain.min_kept)


def keyed_draw(
    inp: TensorInput | IndexInput | MaskInput,
    distribution: str,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    case: Case,
    bound: int,
) -> tuple[Hashable, Callable[[], torch.Tensor]]:
    """A drawn input's key in `DRAWS` (everything that decides its values, so a large draw is
    made once: `reuse`), and the draw."""
    generator = input_generator(case.seed, inp.name)
    key = (inp, distribution, shape, dtype, case.seed, bound)
    return key, functools.partial(_draw, inp, distribution, shape, dtype, generator, bound)


def materialize(problem: Problem, case: Case) -> dict[str, torch.Tensor | int | float]:
    """The logical value of every input of `problem` for `case`, in declaration order.

    Tensors are dense, contiguous and on the CPU, in the case's dtype configuration. The same
    (problem, case) gives bit-identical values in every process. A case with `rows` gets the
    values of the whole case cut to its row window (`restrict_rows`).
    """
    with DRAWS.together():  # the case's large draws never push out each other (`reuse`)
        return _materialize(problem, case)


def _materialize(problem: Problem, case: Case) -> dict[str, torch.Tensor | int | float]:
    if case.rows is not None:
        return restrict_rows(problem, case, materialize(problem, replace(case, rows=None)))
    configs = problem.dtype_configs()
    if not 0 <= case.dtype_config < len(configs):
        raise UsageError(
            f"case dtype_config {case.dtype_config} is out of range; problem {problem.name!r} "
            f"has {len(configs)} dtype configuration(s), numbered from 0"
        )
    config = configs[case.dtype_config]
    sizes = case.size_map()
    _check_case_names(problem, case)
    values: dict[str, torch.Tensor | int | float] = {}
    generated = _generated(problem, case, sizes)
    at_argmax: list[IndexInput] = []
    for inp in problem.inputs:
        if isinstance(inp, ScalarInput):
            values[inp.name] = _scalar(inp, case, sizes, generated)
            continue
        distribution = case.value_of(inp.name, default_distribution(inp, problem))
        if is_recorded(distribution):  # a real call's input (`inputs.recorded`)
            shape = input_shape(inp, sizes, case)
            values[inp.name] = recorded_tensor(distribution, shape, config[inp.name])
            continue
        valid = distributions_for(inp, problem)
        if distribution not in valid:
            raise UsageError(
                f"input {inp.name!r} cannot take distribution {distribution!r}; "
                f"choose one of: {', '.join(valid)}"
            )
        if isinstance(inp, TensorInput | IndexInput) and not inp.domain.admits(distribution):
            raise UsageError(
                f"input {inp.name!r} is declared {inp.domain.describe()}, and distribution "
                f"{distribution!r} draws values outside it; choose another one"
            )
        shape = input_shape(inp, sizes, case)
        dtype = config[inp.name]
        layout = case.layout_of(inp.name)
        if distribution == GENERATOR:
            values[inp.name] = _from_generator(problem, inp, generated, shape, dtype, layout, sizes)
            continue
        if distribution == ARGMAX:
            assert isinstance(inp, IndexInput)
            at_argmax.append(inp)  # once every floating input is drawn
            continue
        assert not isinstance(inp, GeneratedInput)
        generator = input_generator(case.seed, inp.name)
        bound = _bound(inp, sizes, case) if isinstance(inp, IndexInput) else 0
        if layout == "broadcast" and math.prod(shape) > 1:
            one = _draw(inp, distribution, (1,) * len(shape), dtype, generator, bound)
            values[inp.name] = one.expand(shape).contiguous()
            continue
        d = expand_dim(shape) if layout == "expanded" else None
        if d is None:
            values[inp.name] = DRAWS.get(*keyed_draw(inp, distribution, shape, dtype, case, bound))
            continue
        # Drawn with size 1 where the layout broadcasts, so presenting the values with stride 0
        # there shows the candidate exactly these values.
        narrow = (*shape[:d], 1, *shape[d + 1 :])
        drawn = _draw(inp, distribution, narrow, dtype, generator, bound)
        values[inp.name] = drawn.expand(shape).contiguous()
    for inp in at_argmax:
        values[inp.name] = _at_argmax(problem, inp, values, config[inp.name], case)
    for inp in problem.inputs:
        limit = inp.domain.below if isinstance(inp, IndexInput) else ""
        if limit and not any(is_recorded(case.value_of(n, "")) for n in (inp.name, limit)):
            assert isinstance(inp, IndexInput)
            ids, limits = values[inp.name], values[limit]
            assert isinstance(ids, torch.Tensor) and isinstance(limits, torch.Tensor)
            bound = _bound(inp, sizes, case)
            layout = case.layout_of(inp.name)
            values[inp.name], values[limit] = held_below(ids, limits, bound, layout)
    if problem.forward is not None:
        try:
            values.update(forward_values(problem, values))
        except Exception as error:
            raise ProblemError(
                file=problem.source or problem.name,
                field="forward",
                message=f"running the forward for case {case.describe()!r} failed: {error}",
                fix="make the forward run in float64 on the inputs it takes and return one "
                "tensor of the declared shape per saved input",
            ) from error
    return values


def shapes_only(problem: Problem, case: Case) -> dict[str, torch.Tensor | int | float] | None:
    """Every input of `case` as `materialize` gives it, but with tensors on the meta device
    (shapes and dtypes, no values): drawing nothing and running no code of the problem's, so
    it can run beside anything. None when a value decides a shape or an argument here (the
    problem's own input generator)."""
    if problem.sampler is not None or case.rows is not None:
        return None
    config = problem.dtype_configs()[case.dtype_config]
    sizes = case.size_map()
    _check_case_names(problem, case)
    values: dict[str, torch.Tensor | int | float] = {}
    for inp in problem.inputs:
        if isinstance(inp, GeneratedInput):
            return None
        if isinstance(inp, ScalarInput):
            values[inp.name] = _scalar(inp, case, sizes, {})  # type: ignore[assignment]
            continue
        values[inp.name] = torch.empty(
            input_shape(inp, sizes, case), dtype=config[inp.name], device="meta"
        )
    return values


def forward_values(problem: Problem, values: Mapping[str, object]) -> dict[str, torch.Tensor]:
    """The saved inputs of a backward problem, computed by its forward as the oracle computes
    truth (inputs and dtype literals promoted to float64) from `values`, and rounded to each
    saved input's dtype (taken from `values`' drawn tensors)."""
    # imported here: the oracle package imports the checks, which import this module
    from kernelaudit.oracle.promote import promoted_copy, promoted_to_fp64

    forward = problem.forward
    if forward is None:
        return {}
    name = getattr(forward.function, "__name__", "function")
    args = [promoted_copy(values[n]) for n in forward.takes]
    with torch.no_grad(), promoted_to_fp64():
        returned = forward.function(*args)
    results = tuple(returned) if isinstance(returned, (tuple, list)) else (returned,)
    if len(results) != len(forward.gives) or not all(isinstance(r, torch.Tensor) for r in results):
        raise ValueError(
            f"forward {name}() returned {len(results)} value(s); it must return one tensor per "
            f"name in gives ({', '.join(forward.gives)})"
        )
    saved: dict[str, torch.Tensor] = {}
    for given, result in zip(forward.gives, results, strict=True):
        drawn = values[given]
        assert isinstance(drawn, torch.Tensor) and isinstance(result, torch.Tensor)
        if tuple(result.shape) != tuple(drawn.shape):
            raise ValueError(
                f"forward {name}() returned shape {tuple(result.shape)} for saved input "
                f"{given!r}, declared {tuple(drawn.shape)}"
            )
        saved[given] = result.detach().to(device="cpu", dtype=drawn.dtype).contiguous()
    return saved


def input_shape(inp: Input, sizes: dict[str, int], case: Case) -> tuple[int, ...]:
    """The shape of `inp` at the case's sizes (a `UsageError` naming a size the case lacks)."""
    for dim in inp.shape:  # type: ignore[union-attr]
        for axis in dim_axes(dim):
            _axis_size(sizes, axis, inp, case)
    return resolve_shape(inp.shape, sizes)  # type: ignore[union-attr]


def _bound(inp: IndexInput, sizes: dict[str, int], case: Case) -> int:
    for axis in dim_axes(inp.bound):
        _axis_size(sizes, axis, inp, case)
    return dim_size(inp.bound, sizes)


def _generated(problem: Problem, case: Case, sizes: dict[str, int]) -> dict[str, object]:
    """The problem's own generator's values for the case, when any input takes them."""
    sampler = problem.sampler
    if sampler is None:
        return {}
    wanted = [
        inp.name
        for inp in problem.inputs
        if (isinstance(inp, ScalarInput) and inp.name in sampler.default_for)
        or (
            not isinstance(inp, ScalarInput)
            and case.value_of(inp.name, default_distribution(inp, problem)) == GENERATOR
        )
    ]
    if not wanted:
        return {}
    return generator_values(problem, sizes, case.seed, wanted, DRAWS)


def _from_generator(
    problem: Problem,
    inp: TensorInput | IndexInput | MaskInput | GeneratedInput,
    generated: dict[str, object],
    shape: tuple[int, ...],
    dtype: torch.dtype,
    layout: str,
    sizes: dict[str, int],
) -> torch.Tensor:
    value = generated_tensor(problem, inp.name, generated, shape, dtype, sizes)
    # the generator's first slice stands for the rest where the layout broadcasts
    return _as_presented(value, shape, layout)


def _at_argmax(
    problem: Problem,
    inp: IndexInput,
    values: Mapping[str, object],
    dtype: torch.dtype,
    case: Case,
) -> torch.Tensor:
    """The ids of `inp` at the argmax of each row of its source input's values as drawn."""
    source = argmax_source(problem, inp)
    if source is None:
        raise UsageError(
            f"input {inp.name!r} cannot take distribution {ARGMAX!r}: no single floating input "
            f"of problem {problem.name!r} has the shape of the ids with {inp.bound!r} last; "
            "choose another index distribution"
        )
    rows = values[source.name]
    assert isinstance(rows, torch.Tensor)
    ids = rows.double().argmax(dim=-1).to(dtype)
    return _as_presented(ids, tuple(ids.shape), case.layout_of(inp.name))


def _as_presented(value: torch.Tensor, shape: tuple[int, ...], layout: str) -> torch.Tensor:
    """Logical values that a stride-0 presentation (`broadcast`, `expanded`) shows as they
    are: its first slice repeated where it broadcasts."""
    if layout == "broadcast" and value.numel() > 1:
        return value.reshape(-1)[:1].reshape((1,) * len(shape)).expand(shape).contiguous()
    d = expand_dim(shape) if layout == "expanded" else None
    if d is not None:
        return value.narrow(d, 0, 1).expand(shape).contiguous()
    return value


def _scalar(
    inp: ScalarInput, case: Case, sizes: dict[str, int], generated: dict[str, object]
) -> object:
    """The argument's default (an axis size, a literal or the problem's generator's value), or
    the mode the case names."""
    named = dict(case.values).get(inp.name)
    if named is not None:
        modes = {str(mode): mode for mode in inp.modes()}
        if len(modes) < 2:
            raise UsageError(
                f"case values name scalar input {inp.name!r}, which has no distribution and no "
                "choices; remove it from the case's values"
            )
        if named not in modes:
            raise UsageError(
                f"case names mode {named!r} for {inp.name!r}; its modes are: {', '.join(modes)}"
            )
        return modes[named]
    if inp.name in generated:
        value = generated[inp.name]
        return value.item() if isinstance(value, torch.Tensor) else value
    if inp.axis is not None:
        return _axis_size(sizes, inp.axis, inp, case)
    return inp.value
