"""Cases made of a real call's inputs: a failing call a guard recorded (`kernelaudit.guarding`)
audited again as a case of its own, so the failure seen in the real job stays a regression case.

Each tensor input of such a case names its recorded value as its distribution,
"recorded:<record>#<argument>", so the case travels (to the report, to `kernelaudit repro`) as
any case does and is made again from the record. Its sizes are those the recording binds; at
any other size (a shrinking step) the case cannot be made (`CaseUnavailable`), and its other
simplifications are drawn as usual.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

import torch

from kernelaudit.errors import CaseUnavailable, UsageError
from kernelaudit.inputs.case import Case
from kernelaudit.problem.spec import Problem, ScalarInput

RECORDED = "recorded:"


def is_recorded(distribution: str) -> bool:
    return distribution.startswith(RECORDED)


def recorded_tensor(distribution: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """The recorded value a "recorded:" distribution names, where it has `shape` and `dtype`."""
    path, _, position = distribution[len(RECORDED) :].rpartition("#")
    _, args = _read(path)
    value = args[int(position)]
    if not isinstance(value, torch.Tensor):
        raise UsageError(f"{path}: argument {position} of the recorded call is not a tensor")
    if tuple(value.shape) != tuple(shape) or value.dtype != dtype:
        raise CaseUnavailable("a recorded call's inputs exist at their own sizes and dtypes only")
    return value.clone()


def recorded_case(problem: Problem, path: Path) -> Case:
    """The case of the call recorded in `path`: the problem's inputs, by position, are the
    call's arguments. UsageError when they do not fit the problem."""
    record, args = _read(str(path.resolve()))
    if len(args) != len(problem.inputs):
        raise UsageError(
            f"{path}: the recorded call has {len(args)} argument(s), and problem "
            f"{problem.name!r} takes {len(problem.inputs)}; record the call of this problem's "
            "kernel"
        )
    from kernelaudit.oracle.truth import axis_sizes  # the oracle imports the inputs

    by_name = {spec.name: value for spec, value in zip(problem.inputs, args, strict=True)}
    dtypes = {name: v.dtype for name, v in by_name.items() if isinstance(v, torch.Tensor)}
    configs = problem.dtype_configs()
    config = next(
        (i for i, c in enumerate(configs) if all(c.get(n) == d for n, d in dtypes.items())), None
    )
    if config is None:
        said = ", ".join(f"{n} {d}" for n, d in dtypes.items())
        raise UsageError(
            f"{path}: the recorded call's dtypes ({said}) are none of problem {problem.name!r}'s "
            "dtype configurations; declare them in the problem to audit this call"
        )
    values = tuple(
        (spec.name, f"{RECORDED}{path.resolve()}#{i}")
        for i, spec in enumerate(problem.inputs)
        if not isinstance(spec, ScalarInput)
    )
    label = f"recorded call {record.get('call')} of {record.get('guard')}"
    return Case(tuple(axis_sizes(problem, by_name).items()), config, values, (), 0, label)


def with_recorded(problem: Problem, records: list[Path]) -> Problem:
    """`problem` with the calls in `records` (a guard's) among its cases."""
    if not records:
        return problem
    cases = tuple(recorded_case(problem, path) for path in records)
    return replace(problem, recorded_cases=problem.recorded_cases + cases)


def _read(path: str) -> tuple[dict, list[object]]:
    """The record at `path`, read once while the file stays as it is."""
    try:
        changed = Path(path).stat().st_mtime_ns
    except OSError as error:
        raise UsageError(f"{path}: the recorded call cannot be read ({error})") from None
    return _read_as_of(path, changed)


@functools.lru_cache(maxsize=8)
def _read_as_of(path: str, changed: int) -> tuple[dict, list[object]]:
    from kernelaudit.guarding.records import read_record  # it imports the oracle

    return read_record(Path(path))
