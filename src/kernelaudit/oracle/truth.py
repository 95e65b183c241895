"""The trusted side of a case: the reference's fp64 truth and its native-precision baseline."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable, Mapping
from contextlib import AbstractContextManager

import torch

from kernelaudit.checks.base import Expected
from kernelaudit.device_copies import moved
from kernelaudit.errors import ProblemError
from kernelaudit.inputs.case import dtype_name
from kernelaudit.oracle.compare import is_exact
from kernelaudit.oracle.conditioning import Nudged, nudged
from kernelaudit.oracle.kept_results import copied_to_host
from kernelaudit.oracle.promote import (
    full_precision_accumulation,
    promoted_copy,
    promoted_dtype,
    promoted_to_fp64,
)
from kernelaudit.oracle.resident import RESIDENT
from kernelaudit.oracle.selection import held, matched, recording, selections
from kernelaudit.problem.dims import dim_axes, dim_size
from kernelaudit.problem.spec import Dim, Problem, ScalarInput

_TRUTH_RUN = "with every floating tensor and dtype promoted to float64, to compute the truth"
_BASELINE_RUN = "at the inputs' own dtypes, to compute the baseline"
_NUDGED_RUN = "on inputs nudged by one rounding, to measure what the precision allows"


def expected(
    problem: Problem,
    inputs: Mapping[str, object],
    dtype_config: Mapping[str, torch.dtype],
    device: str,
) -> Expected:
    """Run the reference twice on copies of `inputs` moved to `device`: once promoted to float64
    (the truth) and once at the dtypes of `dtype_config` (the baseline).

    `inputs` holds every declared input by name (scalars included). Results are on the CPU:
    the declared outputs in order, then every input the contract lets the candidate mutate, as
    it is after the call. Floating truth is float64 (complex128); integer and bool results keep
    the declared dtype. A reference that fails, or returns what the problem does not declare,
    raises ProblemError. The case with its inputs nudged by one rounding (`oracle.conditioning`)
    is computed only if a comparison asks for it (`Expected.nudged`). On a GPU the device copy
    each result was copied to the host from is held beside it while the room allows
    (`oracle.kept_results`), so comparisons there need not copy it back.

    The two runs do not share the device: the float64 copies (each made from its native copy,
    one input at a time) are freed before the native copies of the baseline are made, so the
    largest problem that fits is bounded by its float64 inputs, not by both sets together.
    """
    sizes, dtypes, mutated, promoted = _promoted_run(problem, inputs, dtype_config, device)
    # selections are recorded only where an output could be one (the recording costs every
    # torch call of the run some time)
    indices = any(is_exact(dtype) and dtype != torch.bool for dtype in dtypes)
    with recording(indices) as chosen:
        truth = _truth(problem, promoted, sizes, dtypes, mutated, _TRUTH_RUN)
    del promoted
    # the selections integer outputs are, and every choice made on the way, kept on the host
    positions = matched(truth[: len(problem.outputs)], chosen)
    kept = [held(c) for c in chosen] if any(p is not None for p in positions) else []
    del chosen

    native = [
        native_copy(inputs[spec.name], dtype_config.get(spec.name), device)
        for spec in problem.inputs
    ]
    with recording(bool(kept)) as native_chosen:
        baseline = _baseline(problem, native, sizes, dtypes, mutated, _BASELINE_RUN)
    chosen_by = selections(positions, kept, native_chosen)
    del native_chosen

    names = tuple(out.name for out in problem.outputs)
    names += tuple(f"{name} (after call)" for name in problem.contract.mutates)
    declared = dtypes
    dtypes += tuple(t.dtype for t in _tensors(native, mutated))

    def nudged_case() -> tuple[Nudged, ...]:
        # nudged one input at a time on the device (`_nudged_native`), then run as above:
        # float64 copies first and alone
        shaken = [
            _nudged_native(inputs[spec.name], dtype_config.get(spec.name), position, device)
            for position, spec in enumerate(problem.inputs)
        ]
        promoted = [_promoted_on(value, None, device) for value in shaken]
        truth = _truth(problem, promoted, sizes, declared, mutated, _NUDGED_RUN)
        del promoted
        on_device = [native_copy(value, None, device) for value in shaken]
        baseline = _baseline(problem, on_device, sizes, declared, mutated, _NUDGED_RUN)
        return tuple(Nudged(t, b) for t, b in zip(truth, baseline, strict=True))

    def nudge() -> tuple[Nudged, ...] | None:
        try:
            return RESIDENT.retried_without(nudged_case)
        except (ProblemError, torch.cuda.OutOfMemoryError):
            # a reference that refuses inputs off its structure, or no room for a second
            # case: the result is judged as it was
            return None

    return Expected(
        names=names,
        truth=truth,
        baseline=baseline,
        dtypes=dtypes,
        depths=result_depths(problem, sizes),
        selections=chosen_by,
        nudge=nudge,
    )


class SharedPromotions:
    """Float64 copies of the inputs that several truth runs are given (the same tensor in each:
    a weight drawn once for every size), made once for all of them. A copy that a run wrote to,
    or whose input changed since, is made again for the next run; a copy is let go with its
    input (the activations of one run are new tensors the next). Writes that bypass torch's
    version counters (through `.data` or NumPy) are not seen."""

    def __init__(self) -> None:
        self._made: dict[
            tuple[int, object, str], tuple[weakref.ref[torch.Tensor], int, torch.Tensor, int]
        ] = {}

    def promoted(self, value: object, dtype: torch.dtype | None, device: str) -> object:
        """The float64 copy of `value` on `device` (rounded to `dtype` first) that an earlier
        run was given, where it still holds `value`'s values; else one made now."""
        if not isinstance(value, torch.Tensor):
            return _promoted_on(value, dtype, device)
        key = (id(value), dtype, device)
        made = self._made.get(key)
        if made is not None:
            given, version, copy, copy_version = made
            same = given() is value and _version(value) == version
            if same and _version(copy) == copy_version:
                return copy
        copy = _promoted_on(value, dtype, device)
        assert isinstance(copy, torch.Tensor)
        version, copy_version = _version(value), _version(copy)
        if version is not None and copy_version is not None:
            # the entry goes when the input does, before its id can name another tensor
            gone = weakref.ref(value, lambda _: self._made.pop(key, None))
            self._made[key] = (gone, version, copy, copy_version)
        return copy


def _version(tensor: torch.Tensor) -> int | None:
    """How many times `tensor` was written in place; None for a tensor made in inference mode,
    which keeps no count (its copy is then never shared)."""
    try:
        return tensor._version
    except RuntimeError:
        return None


def truth_only(
    problem: Problem,
    inputs: Mapping[str, object],
    dtype_config: Mapping[str, torch.dtype],
    device: str,
    shared: SharedPromotions | None = None,
) -> tuple[torch.Tensor, ...]:
    """The truth `expected` computes for `inputs`, without the baseline's run: for what needs
    the reference's float64 results alone (which axes' rows are independent). With `shared`,
    the float64 copies of the inputs other runs were given too are made once for all."""
    sizes, dtypes, mutated, promoted = _promoted_run(problem, inputs, dtype_config, device, shared)
    return _truth(problem, promoted, sizes, dtypes, mutated, _TRUTH_RUN)


def _promoted_run(
    problem: Problem,
    inputs: Mapping[str, object],
    dtype_config: Mapping[str, torch.dtype],
    device: str,
    shared: SharedPromotions | None = None,
) -> tuple[dict[str, int], tuple[torch.dtype, ...], list[int], list[object]]:
    """What the truth's run needs: the axes' sizes, the declared outputs' dtypes, where the
    mutated inputs stand, and every input's float64 copy on `device` (those of the inputs the
    contract lets the call write made anew whatever `shared` holds)."""
    sizes = axis_sizes(problem, inputs)
    dtypes = tuple(problem.output_dtype(out, dtype_config) for out in problem.outputs)
    mutated = [_mutated_position(problem, name) for name in problem.contract.mutates]
    written = set(problem.contract.mutates)
    promoted = [
        shared.promoted(inputs[spec.name], dtype_config.get(spec.name), device)
        if shared is not None and spec.name not in written
        else _promoted_on(inputs[spec.name], dtype_config.get(spec.name), device)
        for spec in problem.inputs
    ]
    return sizes, dtypes, mutated, promoted


def _truth(
    problem: Problem,
    promoted: list[object],
    sizes: Mapping[str, int],
    dtypes: tuple[torch.dtype, ...],
    mutated: list[int],
    how: str,
) -> tuple[torch.Tensor, ...]:
    """The reference's float64 results on `promoted` inputs, on the CPU: the declared outputs,
    then the mutated inputs as the call left them."""
    returned = _call_reference(problem, promoted, promoted_to_fp64, how)
    truth = _outputs(problem, returned, sizes, dtypes, how, to_truth=True)
    return truth + tuple(copied_to_host(t, t.dtype) for t in _tensors(promoted, mutated))


def _baseline(
    problem: Problem,
    native: list[object],
    sizes: Mapping[str, int],
    dtypes: tuple[torch.dtype, ...],
    mutated: list[int],
    how: str,
) -> tuple[torch.Tensor, ...]:
    """The reference's results at the native dtypes of `native` (float32 accumulation), on the
    CPU: the declared outputs, then the mutated inputs as the call left them."""
    returned = _call_reference(problem, native, full_precision_accumulation, how)
    baseline = _outputs(problem, returned, sizes, dtypes, how, to_truth=False)
    return baseline + tuple(copied_to_host(t, t.dtype) for t in _tensors(native, mutated))


def native_copy(value: object, dtype: torch.dtype | None, device: str) -> object:
    """A tensor copied to `device` at `dtype` (its own dtype when None); other values as is.
    A kept draw's copy is made on the device from the one held there (`oracle.resident`)."""
    if not isinstance(value, torch.Tensor):
        return value
    kept = _on_device(value, dtype, device)
    if kept is not None:
        return kept.clone()
    return moved(value.detach(), device, dtype, copy=True)


def _nudged_native(value: object, dtype: torch.dtype | None, position: int, device: str) -> object:
    """`conditioning.nudged` of the native value, computed on `device` (the same bits as on
    the host, many times faster for a large tensor) and returned on the host, where it takes
    no room while the truth runs; a kept draw's stays on the device instead, held once for
    every case that takes that draw (`oracle.resident`) and only ever copied from."""
    if isinstance(value, torch.Tensor):
        kept = _on_device(value, dtype, device, (("nudged", position), _nudge_of(position)))
        if kept is not None:
            return kept
    moved = nudged(native_copy(value, dtype, device), position)
    return moved.to("cpu") if isinstance(moved, torch.Tensor) else moved


def _nudge_of(position: int) -> Callable[[torch.Tensor], torch.Tensor]:
    def nudge(native: torch.Tensor) -> torch.Tensor:
        moved = nudged(native.clone(), position)  # a float64 input is nudged in place
        assert isinstance(moved, torch.Tensor)
        return moved

    return nudge


def _promoted_on(value: object, dtype: torch.dtype | None, device: str) -> object:
    """The float64 copy on `device` of a tensor rounded to `dtype` first (its native value);
    the native value is a temporary, never a second copy held beside it."""
    if not isinstance(value, torch.Tensor):
        return value
    kept = _on_device(value, dtype, device)
    if kept is not None:
        return promoted_copy(kept)  # a copy, whatever the dtype: `kept` is shared
    return promoted_copy(moved(value.detach(), device, dtype))


def _on_device(
    value: torch.Tensor,
    dtype: torch.dtype | None,
    device: str,
    derived: tuple[Hashable, Callable[[torch.Tensor], torch.Tensor]] | None = None,
) -> torch.Tensor | None:
    """The copy held on a GPU of the kept draw `value` is a copy of, or what `derived` makes
    of it (never to be written to), or None (`oracle.resident`)."""
    where = torch.device(device)
    if where.type != "cuda":
        return None
    if where.index is None:
        where = torch.device("cuda", torch.cuda.current_device())
    return RESIDENT.get(value, dtype or value.dtype, where, derived)


def _tensors(args: list[object], positions: list[int]) -> list[torch.Tensor]:
    tensors = [args[i] for i in positions]
    assert all(isinstance(t, torch.Tensor) for t in tensors), "mutated inputs are tensors"
    return tensors  # type: ignore[return-value]


def _where(problem: Problem) -> str:
    return problem.source or problem.name


def _mutated_position(problem: Problem, name: str) -> int:
    for position, spec in enumerate(problem.inputs):
        if spec.name == name and not isinstance(spec, ScalarInput):
            return position
    raise ProblemError(
        file=_where(problem),
        field="contract.mutates",
        message=f"'{name}' is listed as mutated but is not a tensor input of the problem",
        fix="List in `mutates` only names of tensor inputs the reference writes into.",
    )


def axis_sizes(problem: Problem, inputs: Mapping[str, object]) -> dict[str, int]:
    """Axis sizes as the inputs bind them (outputs are checked against these)."""
    sizes: dict[str, int] = {}
    for spec in problem.inputs:
        value = inputs[spec.name]
        if isinstance(spec, ScalarInput):
            if spec.axis is not None and isinstance(value, int):
                sizes.setdefault(spec.axis, value)
        elif isinstance(value, torch.Tensor) and value.dim() == len(spec.shape):
            for dim, size in zip(spec.shape, value.shape, strict=True):
                if isinstance(dim, str):
                    sizes.setdefault(dim, int(size))
    return sizes


def _call_reference(
    problem: Problem,
    args: list[object],
    context: Callable[[], AbstractContextManager[None]],
    how: str,
) -> object:
    try:
        with torch.no_grad(), context():
            return problem.reference(*args)
    except torch.cuda.OutOfMemoryError:
        raise  # the machine ran out of memory; the reference is not at fault
    except Exception as error:
        reference = problem.reference
        name = getattr(reference, "__name__", type(reference).__name__)
        raise ProblemError(
            file=_where(problem),
            field="reference",
            message=f"{name}() raised {type(error).__name__}: {error} (run {how})",
            fix=(
                "Make the reference run on the declared inputs, passed positionally in "
                "declaration order, in float64 as well as in their own dtypes (it must be "
                "written with torch operations that accept float64)."
            ),
        ) from error


def _outputs(
    problem: Problem,
    returned: object,
    sizes: Mapping[str, int],
    dtypes: tuple[torch.dtype, ...],
    how: str,
    to_truth: bool,
) -> tuple[torch.Tensor, ...]:
    where = _where(problem)
    declared = ", ".join(out.name for out in problem.outputs) or "none"
    if returned is None and not problem.outputs:
        values: tuple[object, ...] = ()
    elif isinstance(returned, (tuple, list)):
        values = tuple(returned)
    else:
        values = (returned,)
    if len(values) != len(problem.outputs):
        raise ProblemError(
            file=where,
            field="outputs",
            message=(
                f"the reference returns {len(values)} value(s) but the problem declares "
                f"{len(problem.outputs)} output(s) ({declared}) (run {how})"
            ),
            fix=(
                "Return one tensor per declared output, in declaration order (a single tensor "
                "when there is one output), or declare the outputs the reference returns."
            ),
        )
    results = []
    for out, value, dtype in zip(problem.outputs, values, dtypes, strict=True):
        if not isinstance(value, torch.Tensor):
            raise ProblemError(
                file=where,
                field="outputs",
                message=(
                    f"the reference returns a {type(value).__name__} for output '{out.name}', "
                    "not a tensor"
                ),
                fix=f"Return a torch.Tensor for '{out.name}', or remove it from `outputs`.",
            )
        want = tuple(_declared_size(d, sizes) for d in out.shape)
        got = tuple(value.shape)
        if len(got) != len(want) or any(w not in (-1, g) for w, g in zip(want, got, strict=True)):
            shown = tuple("?" if w == -1 else w for w in want)
            raise ProblemError(
                file=where,
                field="outputs",
                message=(
                    f"the reference returns shape {got} for output '{out.name}', but its "
                    f"declared shape {out.shape} is {shown} for these inputs (run {how})"
                ),
                fix=f"Correct the shape of output '{out.name}', or the reference.",
            )
        if is_exact(value.dtype) != is_exact(dtype):
            raise ProblemError(
                file=where,
                field="outputs",
                message=(
                    f"the reference returns {dtype_name(value.dtype)} for output '{out.name}', "
                    f"but the problem declares {dtype_name(dtype)}"
                ),
                fix=f"Declare the dtype the reference returns for '{out.name}', or cast to it.",
            )
        # a floating baseline is rounded to the declared dtype, as a correct candidate's must be
        results.append(copied_to_host(value, promoted_dtype(dtype) if to_truth else dtype))
    return tuple(results)


def _declared_size(dim: Dim, sizes: Mapping[str, int]) -> int:
    """The size a shape entry has for these inputs; -1 where they do not tell."""
    try:
        return dim_size(dim, sizes)
    except KeyError:
        return -1


def reduction_depth(problem: Problem, sizes: Mapping[str, int], result: tuple[object, ...]) -> int:
    """How many terms a result of shape `result` may sum: the product of the sizes of the axes
    some input has and the result does not (the k of a matmul, the tokens of an embedding
    gradient, the batch and sequence of a bias gradient)."""

    def named(shapes: object) -> set[str]:
        return {a for shape in shapes for d in shape for a in dim_axes(d)}  # type: ignore[attr-defined]

    reduced = named(i.shape for i in problem.tensor_inputs) - named([result])
    depth = 1
    for axis in reduced:
        depth *= max(int(sizes.get(axis, 1)), 1)
    return depth


def result_depths(problem: Problem, sizes: Mapping[str, int]) -> tuple[int, ...]:
    """`reduction_depth` of each compared result: the outputs, then every input the contract
    lets the candidate mutate (its value after the call)."""
    depths = [reduction_depth(problem, sizes, tuple(o.shape)) for o in problem.outputs]
    by_name = {i.name: i for i in problem.tensor_inputs}
    for name in problem.contract.mutates:
        spec = by_name.get(name)
        depths.append(reduction_depth(problem, sizes, tuple(spec.shape)) if spec else 1)
    return tuple(depths)
