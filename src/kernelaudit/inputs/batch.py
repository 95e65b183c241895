"""Batch axes: the axes along which a problem's rows are independent of one another.

An axis is a batch axis when each row of every result (every output, and every input the
candidate may write) depends only on the same row of the inputs: the rows of a softmax, the `m`
of a matmul, the tokens of an embedding lookup. Cutting a case to some rows along such an axis
(`Case.rows`) then gives exactly those rows of the results. The batch-invariance check holds a
candidate to that; the large-tensors check grows such an axis, so that the truth is needed for
a few rows only.

A problem may declare its batch axes (`Contract.batch_axes`). Otherwise they are inferred from
the reference, once per problem: an axis the declaration allows (`structural_reason`) is a
batch axis when the fp64 truth of a small case, cut to its last row and to a middle one along
the axis, equals the same rows of the whole case's truth.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import torch

from kernelaudit.errors import CaseUnavailable, ProblemError, UsageError
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.cost import case_elements
from kernelaudit.inputs.materialize import materialize
from kernelaudit.inputs.rows import uncuttable
from kernelaudit.problem.dims import dim_axes, resolve_shape
from kernelaudit.problem.spec import Axis, Dim, GeneratedInput, IndexInput, Problem, ScalarInput

if TYPE_CHECKING:
    from kernelaudit.oracle.truth import SharedPromotions

_TRIAL_SIZE = 4
"""Each axis's size in the small case the inference runs: a last row distinct from a middle
one, and even, as head dimensions and vector widths want."""

_TRIAL_ELEMENTS = 1 << 20
"""The most input elements the inference spends on the first workload when the reference
rejects the small sizes."""

_TRIAL_MOST_ELEMENTS = 1 << 27
"""The most elements (inputs and outputs) the inference's small case may hold. It runs the
reference in float64 on the host, three times per axis, before any probe: a case past this (a
rotary table of every position, a layer of a large model's weights, whatever its other axes)
would cost the auditor minutes and tens of GiB of host memory. Such a problem's batch axes
are not inferred; it can declare them (`Contract.batch_axes`)."""

_AGREEMENT = 1e-9
"""How far (relative to the largest magnitude of a result) fp64 rows may differ and still be
the same rows: summation orders change with the batch even in float64."""

_inferred: dict[Problem, tuple[str, ...]] = {}
_SPENT = [0.0]


def seconds_inferring() -> float:
    """Seconds this process has spent so far inferring batch axes and keyed rows from
    references (on the host, before any probe; planning pays them, whichever check asks
    first)."""
    return _SPENT[0]


_T = TypeVar("_T")


def _timed(infer: Callable[[Problem], _T], problem: Problem) -> _T:
    began = time.perf_counter()
    try:
        return infer(problem)
    finally:
        _SPENT[0] += time.perf_counter() - began


@dataclass(frozen=True)
class Keyed:
    """The results' rows along `bound` are keyed by index input `index`: row v of each result
    depends only on the elements of `axis` (the index's own axis) whose index is v."""

    index: str
    axis: str
    bound: str


_keyed: dict[Problem, tuple[Keyed, ...]] = {}


def batch_axes(problem: Problem) -> tuple[str, ...]:
    """The problem's batch axes, in declaration order: those its contract declares, else those
    inferred from its reference (computed once per problem)."""
    declared = problem.contract.batch_axes
    if declared is not None:
        return declared
    try:
        hash(problem)
    except TypeError:  # a problem holding unhashable values is inferred every time
        return _timed(infer_batch_axes, problem)
    if problem not in _inferred:
        _inferred[problem] = _timed(infer_batch_axes, problem)
    return _inferred[problem]


def result_shapes(problem: Problem) -> tuple[tuple[Dim, ...], ...]:
    """The declared shape of every compared result: the outputs in order, then the inputs the
    contract lets the candidate mutate (as `Expected.names` lists them)."""
    mutated = tuple(problem.input(name) for name in problem.contract.mutates)
    return tuple(o.shape for o in problem.outputs) + tuple(
        i.shape for i in mutated if not isinstance(i, ScalarInput)
    )


def axis_position(shape: tuple[Dim, ...], axis: str) -> int | None:
    """Where `axis` stands in `shape` by its own name, or None where it does not."""
    return next((d for d, dim in enumerate(shape) if dim == axis), None)


def structural_reason(problem: Problem, axis: str) -> str:
    """Why the declaration alone rules `axis` out as a batch axis; "" when it does not."""
    declared = {a.name: a for a in problem.axes}
    if axis not in declared:
        return f"{axis!r} is not a declared axis"
    if declared[axis].max == declared[axis].min:
        # a row of it alone, or more rows than that, is a size the problem never takes
        return f"its size is fixed at {declared[axis].min}"

    held = False
    for inp in problem.inputs:
        reason = uncuttable(inp, axis)
        if reason:
            return reason
        if isinstance(inp, ScalarInput):
            continue
        if isinstance(inp, GeneratedInput) and axis in inp.shape:
            return (
                f"input {inp.name!r} comes from the problem's own generator, whose structure a "
                "cut along it would break"
            )
        held = held or axis in inp.shape
    if not held:
        return "no input has it"
    names = [o.name for o in problem.outputs] + list(problem.contract.mutates)
    for name, shape in zip(names, result_shapes(problem), strict=True):
        nested = any(dim != axis and axis in dim_axes(dim) for dim in shape)
        if shape.count(axis) != 1 or nested:
            return f"result {name!r} does not have it once by its own name (it is reduced there)"
    return ""


def inference_skipped(problem: Problem) -> str:
    """Why the batch axes of `problem` are not inferred from its reference although the
    declaration allows some ("" when they are declared, inferred, or none is allowed)."""
    if problem.contract.batch_axes is not None:
        return ""
    if not any(not structural_reason(problem, a.name) for a in problem.axes):
        return ""
    if _trial_cases(problem):
        return ""
    small = Case(tuple({a.name: _small_size(a) for a in problem.axes}.items()))
    return (
        f"its smallest case holds {case_elements(problem, small.size_map()):,} elements, too "
        "many to infer its batch axes from the reference on the host; declare them "
        "(Contract(batch_axes=...))"
    )


def infer_batch_axes(problem: Problem) -> tuple[str, ...]:
    """The axes the declaration allows whose rows the reference computes independently, tried
    in float64 on the CPU at a small case (or the first workload, where the reference rejects
    the small sizes and the workload is small enough); none where even the small case holds
    more than `_TRIAL_MOST_ELEMENTS` (`inference_skipped` says so)."""
    allowed = [a.name for a in problem.axes if not structural_reason(problem, a.name)]
    if not allowed:
        return ()
    shared = _shared()  # the weights a case and its rows are both given, promoted once
    for case in _trial_cases(problem):
        try:
            whole = _truth(problem, case, shared)
        except (ProblemError, UsageError, CaseUnavailable):
            continue  # the reference rejects these sizes, or has no inputs there: try others
        return tuple(axis for axis in allowed if _rows_agree(problem, case, whole, axis, shared))
    return ()


def keyed_rows(problem: Problem) -> tuple[Keyed, ...]:
    """The index inputs that key the results' rows (see the module's text), inferred from the
    reference once per problem, as batch axes are: at a small case, the fp64 truth of only the
    elements holding one id (the last element's, then a middle one's) equals that id's rows of
    the whole case's truth. Only one-axis index inputs are tried."""
    try:
        hash(problem)
    except TypeError:  # a problem holding unhashable values is inferred every time
        return _timed(_infer_keyed, problem)
    if problem not in _keyed:
        _keyed[problem] = _timed(_infer_keyed, problem)
    return _keyed[problem]


def select_keyed(
    problem: Problem, keyed: Keyed, values: Mapping[str, object], ids: torch.Tensor
) -> dict[str, object]:
    """`values` cut to the elements of `keyed.axis` whose index is one of `ids` (copies, in
    order); an argument that is the axis's size becomes the number of elements kept."""
    index = values[keyed.index]
    assert isinstance(index, torch.Tensor)
    kept = torch.isin(index, ids.to(index.device)).nonzero().flatten()
    selected = dict(values)
    for inp in problem.inputs:
        if isinstance(inp, ScalarInput):
            if inp.axis == keyed.axis:
                selected[inp.name] = int(kept.numel())
            continue
        value = values[inp.name]
        if keyed.axis in inp.shape and isinstance(value, torch.Tensor):
            at = inp.shape.index(keyed.axis)
            selected[inp.name] = value.index_select(at, kept.to(value.device))
    return selected


def _infer_keyed(problem: Problem) -> tuple[Keyed, ...]:
    found = []
    for inp in problem.inputs:
        if not isinstance(inp, IndexInput) or len(inp.shape) != 1:
            continue
        keyed = Keyed(inp.name, str(inp.shape[0]), inp.bound)
        if not _keyed_reason(problem, keyed) and _keyed_agree(problem, keyed):
            found.append(keyed)
    return tuple(found)


def _keyed_reason(problem: Problem, keyed: Keyed) -> str:
    """Why the declaration rules `keyed` out ("" when it does not)."""
    if keyed.axis == keyed.bound or keyed.axis not in {a.name for a in problem.axes}:
        return f"{keyed.index!r} has no axis of its own"
    for inp in problem.inputs:
        if isinstance(inp, ScalarInput) or keyed.axis not in _named(inp.shape):
            continue
        if isinstance(inp, GeneratedInput) or inp.shape.count(keyed.axis) != 1:
            return f"input {inp.name!r} cannot be cut along {keyed.axis!r}"
        if any(dim != keyed.axis and keyed.axis in dim_axes(dim) for dim in inp.shape):
            return f"input {inp.name!r} cannot be cut along {keyed.axis!r}"
    for shape in result_shapes(problem):
        if shape.count(keyed.bound) != 1 or keyed.axis in _named(shape):
            return f"a result does not have {keyed.bound!r} once, or keeps {keyed.axis!r}"
    return ""


def _named(shape: tuple[Dim, ...]) -> set[str]:
    """Every axis named anywhere in `shape`."""
    return {axis for dim in shape for axis in dim_axes(dim)}


def _keyed_agree(problem: Problem, keyed: Keyed) -> bool:
    shared = _shared()
    for case in _trial_cases(problem):
        config = problem.dtype_configs()[case.dtype_config]
        try:
            values = materialize(problem, case)
            whole = _truth_of(problem, values, config, shared)
        except (ProblemError, UsageError, CaseUnavailable):
            continue
        index = values[keyed.index]
        assert isinstance(index, torch.Tensor)
        if index.numel() < 2:
            return False
        positions = [axis_position(s, keyed.bound) for s in result_shapes(problem)]
        for element in dict.fromkeys((index.numel() - 1, index.numel() // 2)):
            ids = index[element : element + 1]
            try:
                selected = select_keyed(problem, keyed, values, ids)
                alone = _truth_of(problem, selected, config, shared)
            except (ProblemError, UsageError, CaseUnavailable):
                return False
            for result, at, cut in zip(whole, positions, alone, strict=True):
                assert at is not None
                row = int(ids[0])
                if not _agree(result.narrow(at, row, 1), cut.narrow(at, row, 1)):
                    return False
        return True
    return False


def _trial_cases(problem: Problem) -> list[Case]:
    small = {axis.name: _small_size(axis) for axis in problem.axes}
    if case_elements(problem, small) > _TRIAL_MOST_ELEMENTS:
        return []
    cases = [Case(tuple(small.items()), label="batch-axis trial")]
    if problem.workloads:
        sizes = problem.workloads[0].as_dict()
        try:
            elements = sum(math.prod(resolve_shape(i.shape, sizes)) for i in problem.tensor_inputs)
        except KeyError:
            return cases
        if elements <= _TRIAL_ELEMENTS:
            cases.append(Case(tuple(sizes.items()), label=problem.workloads[0].name))
    return cases


def _small_size(axis: Axis) -> int:
    multiple = max(axis.multiple_of, 1)
    size = -(-max(_TRIAL_SIZE, axis.min) // multiple) * multiple
    if axis.max is not None and size > axis.max:
        size = axis.max // multiple * multiple
    return size


def _truth(problem: Problem, case: Case, shared: SharedPromotions) -> tuple[torch.Tensor, ...]:
    config = problem.dtype_configs()[case.dtype_config]
    return _truth_of(problem, materialize(problem, case), config, shared)


def _rows_agree(
    problem: Problem,
    case: Case,
    whole: tuple[torch.Tensor, ...],
    axis: str,
    shared: SharedPromotions,
) -> bool:
    size = case.size_map()[axis]
    if size < 2:
        return False  # one row cannot tell a batch axis from any other
    shapes = result_shapes(problem)
    for row in dict.fromkeys((size - 1, size // 2)):
        try:
            alone = _truth(problem, case.with_rows(axis, row, row + 1), shared)
        except (ProblemError, UsageError, CaseUnavailable):
            return False
        for result, shape, cut in zip(whole, shapes, alone, strict=True):
            position = axis_position(shape, axis)
            if position is None or not _agree(result.narrow(position, row, 1), cut):
                return False
    return True


def _shared() -> SharedPromotions:
    """Float64 copies of inputs shared by one inference's runs (`oracle.truth`)."""
    # imported here: the oracle imports the checks, which import this module
    from kernelaudit.oracle.truth import SharedPromotions

    return SharedPromotions()


def _truth_of(
    problem: Problem,
    values: Mapping[str, object],
    config: Mapping[str, torch.dtype],
    shared: SharedPromotions,
) -> tuple[torch.Tensor, ...]:
    """The fp64 truth of `values`, on the CPU."""
    from kernelaudit.oracle.truth import truth_only

    return truth_only(problem, values, config, "cpu", shared)


def _agree(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape:
        return False
    if not (a.is_floating_point() or a.is_complex()):
        return torch.equal(a, b)
    finite = torch.isfinite(a)
    if not torch.equal(finite, torch.isfinite(b)):
        return False
    if not torch.equal(a[~finite].isnan(), b[~finite].isnan()):
        return False
    if not torch.equal(a[~finite & ~a.isnan()], b[~finite & ~a.isnan()]):
        return False
    if not finite.any():
        return True
    scale = float(a[finite].abs().max())
    return bool(((a[finite] - b[finite]).abs() <= _AGREEMENT * scale).all())
