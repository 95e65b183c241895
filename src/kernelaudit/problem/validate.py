"""Validate a problem declaration: the first thing wrong with it, as a ProblemError that names
the file, the field and the fix (with a line number where the declaration's source shows one)."""

from __future__ import annotations

import ast
import difflib
import inspect

import torch

from kernelaudit.errors import ProblemError
from kernelaudit.inputs.batch import structural_reason
from kernelaudit.problem import spec
from kernelaudit.problem.backward import ROLES, validate_backward, validate_scalar
from kernelaudit.problem.dims import dim_axes
from kernelaudit.problem.domain import domain_errors, relation_errors
from kernelaudit.problem.spec import (
    LAYOUTS,
    Axis,
    Contract,
    GeneratedInput,
    IndexInput,
    MaskInput,
    Output,
    Problem,
    Sampler,
    ScalarInput,
    TensorInput,
    Workload,
)


class _Validator:
    """Collects the first problem with a declaration, with a line number where one is found."""

    def __init__(self, problem: Problem, source_text: str):
        self.problem = problem
        self.file = problem.source or f"<problem {problem.name!r}>"
        self.source_text = source_text

    def fail(self, field_path: str, message: str, fix: str, near: str | None = None) -> None:
        raise ProblemError(self.file, field_path, message, fix, self._line(near))

    def _line(self, near: str | None) -> int | None:
        if not self.source_text or near is None:
            return None
        try:
            tree = ast.parse(self.source_text)
        except SyntaxError:
            return None
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value == near:
                return node.lineno
            if isinstance(node, ast.keyword) and node.arg == near:
                return node.lineno
        return None


def validate(problem: Problem, source_text: str = "") -> None:
    """Raise ProblemError for the first thing wrong with `problem`."""
    v = _Validator(problem, source_text)
    if not isinstance(problem.name, str) or not problem.name:
        v.fail("name", "the problem has no name", "give Problem(name=...) a non-empty string")
    axis_names = _validate_axes(v)
    inputs = _validate_inputs(v, axis_names)
    _validate_outputs(v, axis_names, inputs)
    _validate_workloads(v)
    _validate_contract(v, inputs)
    _validate_sampler(v, inputs)
    validate_backward(v.fail, problem, inputs)
    _validate_reference(v)


def _validate_axes(v: _Validator) -> list[str]:
    names: list[str] = []
    for i, axis in enumerate(v.problem.axes):
        where = f"axes[{i}]"
        if not isinstance(axis, Axis) or not isinstance(axis.name, str) or not axis.name:
            v.fail(where, f"{axis!r} is not an axis", 'name it with a string or Axis("name", ...)')
        if axis.name in names:
            v.fail(where, f"axis {axis.name!r} is declared twice", "remove one", near=axis.name)
        numbers = (axis.min, axis.multiple_of, 0 if axis.max is None else axis.max)
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers):
            v.fail(
                f"{where} ({axis.name!r})",
                "min, max and multiple_of must be integers",
                'write them as plain integers, e.g. Axis("n", min=1, multiple_of=16)',
                near=axis.name,
            )
        if axis.min < 0 or axis.multiple_of < 1 or (axis.max is not None and axis.max < axis.min):
            v.fail(
                f"{where} ({axis.name!r})",
                "its min, max or multiple_of cannot hold any size",
                "use min >= 0, multiple_of >= 1 and max >= min",
                near=axis.name,
            )
        names.append(axis.name)
    return names


def _validate_shape(v: _Validator, where: str, shape: object, axes: list[str], near: str) -> None:
    if not isinstance(shape, tuple):
        v.fail(
            f"{where}.shape",
            f"{shape!r} is not a shape",
            'write a tuple such as ("rows", 64)',
            near,
        )
    for dim in shape:  # type: ignore[union-attr]
        if isinstance(dim, bool) or not isinstance(dim, (str, int)):
            v.fail(
                f"{where}.shape",
                f"entry {dim!r} is neither an axis name nor a size",
                "use axis names (strings) and non-negative integers",
                near,
            )
        if isinstance(dim, int) and dim < 0:
            v.fail(f"{where}.shape", f"size {dim} is negative", "use non-negative sizes", near)
        if isinstance(dim, str) and dim not in axes and not _is_expression_over(dim, axes):
            guess = difflib.get_close_matches(dim, axes, n=1)
            hint = f"did you mean {guess[0]!r}? " if guess else ""
            v.fail(
                f"{where}.shape",
                f"names undeclared axis {dim!r}",
                f"{hint}declare it in Problem(axes=...) (declared: {', '.join(axes) or 'none'})",
                near,
            )


def _is_expression_over(dim: str, axes: list[str]) -> bool:
    """Whether `dim` is a size expression ("batch * seq") over declared axes only."""
    if dim.isidentifier():
        return False
    try:
        return all(name in axes for name in dim_axes(dim))
    except ValueError:
        return False


def _validate_inputs(v: _Validator, axes: list[str]) -> dict[str, spec.Input]:
    inputs: dict[str, spec.Input] = {}
    multi = set()
    if not v.problem.inputs:
        v.fail("inputs", "the problem declares no inputs", "list the reference's arguments")
    for i, inp in enumerate(v.problem.inputs):
        if not isinstance(inp, (TensorInput, IndexInput, MaskInput, GeneratedInput, ScalarInput)):
            v.fail(
                f"inputs[{i}]",
                f"{inp!r} is not an input declaration",
                "use TensorInput, IndexInput, MaskInput, GeneratedInput or ScalarInput",
            )
        where = f"inputs[{i}] ({inp.name!r})"
        if inp.name in inputs:
            v.fail(where, f"input {inp.name!r} is declared twice", "rename one", inp.name)
        inputs[inp.name] = inp
        if isinstance(inp, ScalarInput):
            validate_scalar(v.fail, where, inp, axes)
            continue
        _validate_shape(v, where, inp.shape, axes, inp.name)
        if isinstance(inp, TensorInput):
            if not inp.dtypes or not all(
                isinstance(d, torch.dtype) and d.is_floating_point for d in inp.dtypes
            ):
                v.fail(
                    f"{where}.dtypes",
                    f"{inp.dtypes!r} are not all floating dtypes",
                    "list floating torch dtypes, e.g. (torch.bfloat16, torch.float32); "
                    "declare integer tensors as IndexInput",
                    inp.name,
                )
            if inp.role not in ROLES:
                v.fail(
                    f"{where}.role",
                    f"unknown role {inp.role!r}",
                    f"use one of: {', '.join(repr(r) for r in ROLES)}",
                    inp.name,
                )
            if len(inp.dtypes) > 1:
                multi.add(len(inp.dtypes))
        if isinstance(inp, (TensorInput, IndexInput, MaskInput)):
            earlier = {name: e for name, e in inputs.items() if e is not inp}
            found = domain_errors(inp.domain, inp) + relation_errors(inp.domain, inp, earlier)
            for field_name, message, fix in found:
                v.fail(f"{where}.{field_name}", message, fix, inp.name)
        if isinstance(inp, GeneratedInput) and v.problem.sampler is None:
            v.fail(
                where,
                "a GeneratedInput needs the problem's own generator, and the problem has none",
                "give Problem(sampler=Sampler(...)) or declare the input with a role kernelaudit "
                "can draw (TensorInput, IndexInput, MaskInput)",
                inp.name,
            )
        if isinstance(inp, (IndexInput, MaskInput, GeneratedInput)) and not isinstance(
            inp.dtype, torch.dtype
        ):
            v.fail(
                f"{where}.dtype",
                f"{inp.dtype!r} is not a torch dtype",
                "write a torch dtype such as torch.int64 or torch.bool",
                inp.name,
            )
        if isinstance(inp, IndexInput):
            if inp.bound not in axes and not _is_expression_over(inp.bound, axes):
                v.fail(
                    f"{where}.bound",
                    f"bound names undeclared axis {inp.bound!r}",
                    f"bind it to one of: {', '.join(axes)}",
                    inp.name,
                )
            if inp.dtype.is_floating_point or inp.dtype == torch.bool:
                v.fail(
                    f"{where}.dtype",
                    f"{inp.dtype} is not an integer dtype",
                    "use torch.int32 or torch.int64",
                    inp.name,
                )
        if isinstance(inp, MaskInput) and inp.kind not in ("bool", "additive"):
            v.fail(
                f"{where}.kind",
                f"unknown mask kind {inp.kind!r}",
                'use "bool" or "additive"',
                inp.name,
            )
        if isinstance(inp, MaskInput) and (inp.kind == "bool") != (inp.dtype == torch.bool):
            v.fail(
                f"{where}.dtype",
                f"a {inp.kind} mask cannot be {inp.dtype}",
                'use torch.bool for kind="bool" and a floating dtype for kind="additive"',
                inp.name,
            )
    if len(multi) > 1:
        v.fail(
            "inputs",
            "inputs list different numbers of dtypes",
            "give every multi-dtype input the same number of dtypes: the i-th entries form "
            "the i-th configuration",
        )
    return inputs


def _validate_outputs(v: _Validator, axes: list[str], inputs: dict[str, spec.Input]) -> None:
    if not v.problem.outputs:
        v.fail("outputs", "the problem declares no outputs", "list what the reference returns")
    seen: set[str] = set()
    for i, out in enumerate(v.problem.outputs):
        if not isinstance(out, Output):
            v.fail(f"outputs[{i}]", f"{out!r} is not an Output", "use Output(name, shape, dtype)")
        where = f"outputs[{i}] ({out.name!r})"
        if out.name in seen:
            v.fail(where, f"output {out.name!r} is declared twice", "rename one", out.name)
        seen.add(out.name)
        _validate_shape(v, where, out.shape, axes, out.name)
        if isinstance(out.dtype, str):
            source = inputs.get(out.dtype)
            if source is None or isinstance(source, ScalarInput):
                tensors = [n for n, x in inputs.items() if not isinstance(x, ScalarInput)]
                v.fail(
                    f"{where}.dtype",
                    f"{out.dtype!r} is not a tensor input",
                    f"use a torch dtype or one of: {', '.join(tensors)}",
                    out.name,
                )
        elif not isinstance(out.dtype, torch.dtype):
            v.fail(
                f"{where}.dtype",
                f"{out.dtype!r} is not a dtype",
                "use a torch dtype or the name of an input to follow",
                out.name,
            )


def _validate_workloads(v: _Validator) -> None:
    if not isinstance(v.problem.workloads, tuple) or not v.problem.workloads:
        v.fail(
            "workloads",
            "the problem declares no workloads",
            'add at least one, e.g. workloads=[{"rows": 4096, "hidden": 1024}]',
        )
    axes = {a.name: a for a in v.problem.axes}
    for i, workload in enumerate(v.problem.workloads):
        where = f"workloads[{i}]"
        if not isinstance(workload, Workload) or not isinstance(workload.sizes, tuple):
            v.fail(
                where,
                f"{workload!r} is not a mapping of axis names to sizes",
                'write {"axis": size, ...}',
            )
        bound = workload.as_dict()
        missing = [a for a in axes if a not in bound]
        unknown = [a for a in bound if a not in axes]
        if unknown:
            v.fail(
                f"{where}.{unknown[0]}",
                f"binds undeclared axis {unknown[0]!r}",
                f"bind only declared axes: {', '.join(axes)}",
                unknown[0],
            )
        if missing:
            v.fail(
                where,
                f"does not bind axis {missing[0]!r}",
                f"give every axis a size ({', '.join(missing)} missing)",
            )
        for name, size in bound.items():
            if isinstance(size, bool) or not isinstance(size, int):
                v.fail(f"{where}.{name}", f"size {size!r} is not an integer", "use an integer")
            if not axes[name].admits(size):
                v.fail(
                    f"{where}.{name}",
                    f"size {size} breaks the axis's own constraints "
                    f"(min {axes[name].min}, max {axes[name].max}, multiple of "
                    f"{axes[name].multiple_of})",
                    "change the size or the Axis declaration",
                )


def _validate_contract(v: _Validator, inputs: dict[str, spec.Input]) -> None:
    contract = v.problem.contract
    if not isinstance(contract, Contract):
        v.fail("contract", f"{contract!r} is not a Contract", "use Contract(...)")
    if contract.style not in ("return", "destination"):
        v.fail(
            "contract.style",
            f"unknown style {contract.style!r}",
            'use "return" or "destination"',
            "style",
        )
    for flag in ("deterministic", "library_calls", "batch_invariant"):
        if not isinstance(getattr(contract, flag), bool):
            v.fail(
                f"contract.{flag}",
                f"{getattr(contract, flag)!r} is not True or False",
                f"write {flag}=True or {flag}=False",
                flag,
            )
    for name in contract.mutates:
        if name not in inputs or isinstance(inputs[name], ScalarInput):
            v.fail(
                "contract.mutates",
                f"{name!r} is not a tensor input",
                f"name tensor inputs: {', '.join(inputs)}",
                "mutates",
            )
    for layout in contract.layouts:
        if layout not in LAYOUTS:
            v.fail(
                "contract.layouts",
                f"unknown layout {layout!r}",
                f"choose from: {', '.join(LAYOUTS)}",
                "layouts",
            )
    if "contiguous" not in contract.layouts:
        v.fail(
            "contract.layouts",
            "every candidate must accept contiguous tensors",
            'include "contiguous"',
            "layouts",
        )
    if contract.batch_invariant and not contract.deterministic:
        v.fail(
            "contract.batch_invariant",
            "a candidate whose repeated runs may differ cannot promise rows that are bit for bit "
            "the same alone and in a batch",
            "drop batch_invariant=True, or declare deterministic=True",
            "batch_invariant",
        )
    _validate_batch_axes(v)


def _validate_batch_axes(v: _Validator) -> None:
    declared = v.problem.contract.batch_axes
    if declared is None:
        return
    if not isinstance(declared, tuple) or not all(isinstance(a, str) for a in declared):
        v.fail(
            "contract.batch_axes",
            f"{declared!r} is not a list of axis names",
            'write e.g. batch_axes=("rows",), or leave it out to have them inferred',
            "batch_axes",
        )
    for axis in declared:
        reason = structural_reason(v.problem, axis)
        if reason:
            v.fail(
                "contract.batch_axes",
                f"{axis!r} cannot be a batch axis: {reason}",
                "name only axes whose size may vary, that every result has once and no index "
                "input points into, or leave batch_axes out to have them inferred",
                "batch_axes",
            )


def _validate_sampler(v: _Validator, inputs: dict[str, spec.Input]) -> None:
    sampler = v.problem.sampler
    if sampler is None:
        return
    if not isinstance(sampler, Sampler) or not callable(sampler.function):
        v.fail(
            "sampler",
            f"{sampler!r} is not a Sampler with a callable function",
            "use Sampler(function=generate) where generate(sizes, seed) returns every input",
        )
    for name in sampler.default_for:
        if name not in inputs:
            v.fail(
                "sampler.default_for",
                f"{name!r} is not an input",
                f"name declared inputs: {', '.join(inputs)}",
            )


def _validate_reference(v: _Validator) -> None:
    reference = v.problem.reference
    names = [i.name for i in v.problem.inputs]
    if not callable(reference):
        v.fail(
            "reference",
            f"{reference!r} is not callable",
            "pass the function that computes the outputs",
        )
    try:
        signature = inspect.signature(reference)
    except (TypeError, ValueError):
        return  # builtins without a signature: nothing to check
    params = list(signature.parameters.values())
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    if len(required) > len(names) or len(positional) < len(names):
        v.fail(
            "reference",
            f"{reference.__name__}({', '.join(p.name for p in positional)}) "
            f"does not take the {len(names)} declared inputs ({', '.join(names)})",
            "make the reference take exactly the inputs, in declaration order",
            near="reference",
        )
    given = [p.name for p in positional[: len(names)]]
    if sorted(given) == sorted(names) and given != names:
        v.fail(
            "reference",
            f"its parameters ({', '.join(given)}) are the inputs in another "
            f"order than declared ({', '.join(names)})",
            "declare the inputs in the order the reference takes them",
            near="reference",
        )
