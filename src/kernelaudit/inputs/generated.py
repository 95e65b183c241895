"""A problem's own input generator (SOL-ExecBench's and KernelBench's `get_inputs`): its values
for a case's sizes and seed, made once for them and checked against the declaration."""

from __future__ import annotations

from collections.abc import Collection, Mapping

import torch

from kernelaudit.errors import CaseUnavailable, ProblemError
from kernelaudit.inputs.reuse import Draws
from kernelaudit.problem.spec import Problem


def generator_values(
    problem: Problem,
    sizes: Mapping[str, int],
    seed: int,
    wanted: Collection[str],
    draws: Draws,
) -> dict[str, object]:
    """The generator's values of the inputs `wanted`, by name. They depend on the sizes and
    the seed alone, so they are made once for them and kept in `draws` (`inputs.reuse`)."""
    assert problem.sampler is not None, "only a problem with a generator has its values"
    function = problem.sampler.function
    key = ("generator", function, tuple(sorted(sizes.items())), seed)
    try:
        generated = draws.get(key, lambda: dict(function(dict(sizes), seed)), set(wanted))
    except CaseUnavailable:
        raise
    except Exception as error:
        if _off_workloads(problem, sizes):
            # which the generator cannot make (a square root of the patches left for its last
            # grid, say)
            raise _unavailable(
                sizes, f"cannot make inputs there: {type(error).__name__}: {error}"
            ) from error
        raise ProblemError(
            file=problem.source or problem.name,
            field="get_inputs",
            message=f"the problem's own input generator failed for sizes {dict(sizes)}: "
            f"{type(error).__name__}: {error}",
            fix="make the generator run on the CPU at these sizes, or narrow the axes it "
            "cannot take",
        ) from error
    missing = [name for name in wanted if name not in generated]
    if missing:
        raise ProblemError(
            file=problem.source or problem.name,
            field="get_inputs",
            message=f"the problem's own input generator gives no value for {', '.join(missing)}",
            fix="return every input the workload says it generates",
        )
    return dict(generated)


def generated_tensor(
    problem: Problem,
    name: str,
    generated: Mapping[str, object],
    shape: tuple[int, ...],
    dtype: torch.dtype,
    sizes: Mapping[str, int],
) -> torch.Tensor:
    """Input `name`'s generated value at `sizes`, contiguous on the CPU at `dtype`, once its
    shape is the declared one."""
    value = generated[name]
    if not isinstance(value, torch.Tensor) or tuple(value.shape) != shape:
        got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
        if _off_workloads(problem, sizes):
            # where the generator makes other shapes (fewer sequences in fewer tokens)
            raise _unavailable(sizes, f"gives {got} for input {name!r}, declared {shape}")
        raise ProblemError(
            file=problem.source or problem.name,
            field="get_inputs",
            message=f"the problem's own input generator gives {got} for input {name!r} at "
            f"sizes {dict(sizes)}, declared {shape}",
            fix="make the generator and the declared shape agree",
        )
    return value.detach().to(device="cpu", dtype=dtype).contiguous()


def _off_workloads(problem: Problem, sizes: Mapping[str, int]) -> bool:
    """Whether no workload has `sizes`: what the generator does there is a constraint the
    declaration does not state, and a failure there no case to judge a candidate on."""
    return not any(workload.held_by(sizes) for workload in problem.workloads)


def _unavailable(sizes: Mapping[str, int], what: str) -> CaseUnavailable:
    return CaseUnavailable(
        f"at sizes {dict(sizes)}, which no workload has, the problem's input generator {what}",
        "the input generator cannot make these sizes",
    )
