"""Reading a SOL-ExecBench problem's files: `definition.json` and `workload.jsonl`, checked
field by field (`DefinitionReader`), with what the definition says about each axis, input and
workload; `definition.read_definition` makes the kernelaudit problem of them."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

import torch

from kernelaudit.errors import ProblemError
from kernelaudit.formats.solexecbench.indices import GeneratorSource
from kernelaudit.formats.solexecbench.structure import (
    KEPT_FROM_GENERATOR,
    Structure,
    generator_structure,
    named_structure,
)
from kernelaudit.problem.dims import dim_size
from kernelaudit.problem.spec import (
    Axis,
    Dim,
    GeneratedInput,
    IndexInput,
    Input,
    MaskInput,
    ScalarInput,
    TensorInput,
)

DEFINITION = "definition.json"
WORKLOADS = "workload.jsonl"

_UPSTREAM_NAME = re.compile(r"^(grad_|d_?out|dy$|grad$)|_grad$")
_NAME = re.compile(r"[A-Za-z_]\w*")


def is_definition(path: Path) -> bool:
    """Whether `path` is a SOL-ExecBench problem: its definition.json or the folder holding it."""
    return (path.is_dir() and (path / DEFINITION).is_file()) or path.name == DEFINITION


def definition_file(path: Path) -> Path:
    return path / DEFINITION if path.is_dir() else path


def read_json(file: Path, what: str) -> Any:
    try:
        return json.loads(file.read_text())
    except FileNotFoundError:
        raise ProblemError(str(file), what, "the file does not exist", "check the path") from None
    except json.JSONDecodeError as error:
        raise ProblemError(
            str(file), what, f"not valid JSON: {error.msg}", "fix the JSON", error.lineno
        ) from None


def read_workloads(file: Path) -> list[dict[str, Any]]:
    lines = []
    try:
        text = file.read_text()
    except FileNotFoundError:
        raise ProblemError(
            str(file),
            "workloads",
            "the problem has no workload.jsonl",
            "put the workloads next to definition.json, one JSON object per line",
        ) from None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            workload = json.loads(line)
        except json.JSONDecodeError as error:
            raise ProblemError(
                str(file), "workload", f"line is not JSON: {error.msg}", "fix the line", number
            ) from None
        if not isinstance(workload, dict) or not isinstance(workload.get("axes"), dict):
            raise ProblemError(
                str(file),
                "workload.axes",
                "the workload has no `axes` object",
                'give every line {"uuid": ..., "axes": {...}, "inputs": {...}}',
                number,
            )
        workload["_line"] = number
        lines.append(workload)
    if not lines:
        raise ProblemError(str(file), "workloads", "the file holds no workload", "add one")
    return lines


def torch_dtype(name: object, file: Path, field: str) -> torch.dtype:
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    if not isinstance(dtype, torch.dtype):
        raise ProblemError(
            str(file),
            field,
            f"{name!r} is not a dtype this torch knows",
            "use a torch dtype name such as float32, bfloat16, int64 or bool",
        )
    return dtype


class DefinitionReader:
    """A definition.json and its workload.jsonl, read into what a Problem needs."""

    def __init__(self, path: Path):
        self.file = definition_file(path)
        self.folder = self.file.parent
        self.data = read_json(self.file, "definition")
        if not isinstance(self.data, dict):
            raise ProblemError(str(self.file), "definition", "not a JSON object", "fix the file")
        self.workloads = read_workloads(self.folder / WORKLOADS)
        self.notes: list[str] = []
        self.weights: list[str] = []
        self.axes: dict[str, dict[str, Any]] = self._field("axes", dict)
        self.spec_inputs: dict[str, dict[str, Any]] = self._field("inputs", dict)
        self.spec_outputs: dict[str, dict[str, Any]] = self._field("outputs", dict)
        self.name: str = self._field("name", str)
        entry = self.data.get("custom_inputs_entrypoint")
        self.structured = (
            generator_structure(str(self.data.get("reference", "")), entry)
            if isinstance(entry, str)
            else {}
        )
        self.named: dict[str, Structure] = {}

    def _field(self, name: str, kind: type) -> Any:
        value = self.data.get(name)
        if not isinstance(value, kind):
            raise ProblemError(
                str(self.file),
                name,
                f"`{name}` is missing or not a JSON {kind.__name__}",
                f"give the definition its `{name}`",
            )
        return value

    # ---- axes and shapes -------------------------------------------------------------------

    def declared_axes(self) -> tuple[Axis, ...]:
        axes = []
        for name, axis in self.axes.items():
            kind = axis.get("type") if isinstance(axis, dict) else None
            if kind == "const":
                value = axis.get("value")
                if not isinstance(value, int):
                    raise ProblemError(
                        str(self.file),
                        f"axes.{name}.value",
                        "a const axis needs an integer value",
                        "give it one",
                    )
                axes.append(Axis(name, min=value, max=value))
            elif kind == "var":
                # some workloads bind a var axis to 0 (an empty cache, no images)
                smallest = min(
                    (w["axes"].get(name, 1) for w in self.workloads if name in w["axes"]),
                    default=1,
                )
                axes.append(Axis(name, min=0 if smallest == 0 else 1))
            elif kind == "expr":
                self.expression(name)  # fails early on a bad expression
            else:
                raise ProblemError(
                    str(self.file),
                    f"axes.{name}.type",
                    f"unknown axis type {kind!r}",
                    'use "const", "var" or "expr"',
                )
        return tuple(axes)

    def expression(self, name: str, seen: tuple[str, ...] = ()) -> str:
        """An expr axis as an expression over const and var axes only."""
        if name in seen:
            raise ProblemError(
                str(self.file),
                f"axes.{name}",
                "expr axes depend on each other in a circle",
                "break the cycle",
            )
        text = self.axes[name].get("expression")
        if not isinstance(text, str):
            raise ProblemError(
                str(self.file),
                f"axes.{name}.expression",
                "an expr axis needs an expression",
                'write one such as "batch_size * seq_len"',
            )

        def expand(match: re.Match[str]) -> str:
            word = match.group(0)
            if word not in self.axes:
                raise ProblemError(
                    str(self.file),
                    f"axes.{name}.expression",
                    f"{text!r} names {word!r}, which is not an axis",
                    f"use declared axes: {', '.join(self.axes)}",
                )
            if self.axes[word].get("type") == "expr":
                return f"({self.expression(word, (*seen, name))})"
            return word

        return _NAME.sub(expand, text)

    def dim(self, entry: object, where: str) -> Dim:
        if isinstance(entry, int) and not isinstance(entry, bool):
            return entry
        if isinstance(entry, str) and entry.isdigit():
            return int(entry)
        if isinstance(entry, str) and entry in self.axes:
            kind = self.axes[entry].get("type")
            return self.expression(entry) if kind == "expr" else entry
        raise ProblemError(
            str(self.file),
            where,
            f"shape entry {entry!r} is neither an axis nor an integer",
            f"use axes declared in `axes` ({', '.join(self.axes)}) or integer literals",
        )

    def shape(self, spec: dict[str, Any], where: str) -> tuple[Dim, ...] | None:
        shape = spec.get("shape")
        if shape is None:
            return None
        if not isinstance(shape, list):
            raise ProblemError(str(self.file), f"{where}.shape", "not a list", "write a list")
        return tuple(self.dim(entry, f"{where}.shape") for entry in shape)

    def sizes(self, workload: dict[str, Any]) -> dict[str, int]:
        sizes = {}
        for name, axis in self.axes.items():
            kind = axis.get("type")
            if kind == "const":
                sizes[name] = int(axis["value"])
            elif kind == "var":
                value = workload["axes"].get(name)
                if not isinstance(value, int) or isinstance(value, bool):
                    raise ProblemError(
                        str(self.folder / WORKLOADS),
                        f"axes.{name}",
                        f"the workload gives var axis {name!r} no integer size",
                        "bind every var axis",
                        workload["_line"],
                    )
                sizes[name] = value
        return sizes

    def all_sizes(self, sizes: Mapping[str, int]) -> dict[str, int]:
        """Every axis, expr ones included, for sizes of the const and var axes."""
        full = dict(sizes)
        for name, axis in self.axes.items():
            if axis.get("type") == "expr":
                full[name] = dim_size(self.expression(name), sizes)
        return full

    # ---- inputs ----------------------------------------------------------------------------

    def kinds(self, name: str) -> set[str]:
        """How the workloads produce an input ("random", "custom", "scalar", "safetensors")."""
        kinds = set()
        for workload in self.workloads:
            described = workload.get("inputs", {}).get(name)
            if isinstance(described, dict) and isinstance(described.get("type"), str):
                kinds.add(described["type"])
            elif name in workload["axes"]:  # a scalar given among the axes
                kinds.add("scalar")
        return kinds or {"random"}

    def scalar_values(self, name: str) -> list[object]:
        values = []
        for workload in self.workloads:
            described = workload.get("inputs", {}).get(name)
            if isinstance(described, dict) and "value" in described:
                values.append(described["value"])
            elif name in workload["axes"]:
                values.append(workload["axes"][name])
        return values

    def scalar(self, name: str, kinds: set[str]) -> ScalarInput:
        values = self.scalar_values(name)
        if "custom" in kinds or not values:
            self.notes.append(f"{name}: a scalar the benchmark's get_inputs gives")
            return ScalarInput(name, None)
        var_axes = [a for a, spec in self.axes.items() if spec.get("type") != "const"]
        for axis in var_axes:
            if all(
                value == self.all_sizes(self.sizes(w))[axis]
                for value, w in zip(values, self.workloads, strict=False)
            ) and len(values) == len(self.workloads):
                self.notes.append(f"{name}: a scalar equal to axis {axis} in every workload")
                return ScalarInput(name, axis)
        distinct = list(dict.fromkeys(values))
        if len(distinct) > 1:
            self.notes.append(
                f"{name}: a scalar the workloads set to {len(distinct)} values, each tried"
            )
        return ScalarInput(name, distinct[0], tuple(distinct) if len(distinct) > 1 else ())

    def inputs(self) -> tuple[list[Input], list[str]]:
        """The inputs, and those the benchmark's own generator produces by default."""
        inputs: list[Input] = []
        generated: list[str] = []
        for name, spec in self.spec_inputs.items():
            where = f"inputs.{name}"
            if not isinstance(spec, dict):
                raise ProblemError(str(self.file), where, "not a JSON object", "fix it")
            kinds = self.kinds(name)
            shape = self.shape(spec, where)
            if shape is None:
                inputs.append(self.scalar(name, kinds))
                if "custom" in kinds:
                    generated.append(name)
                continue
            dtype = torch_dtype(spec.get("dtype"), self.file, f"{where}.dtype")
            if kinds & {"custom", "safetensors"}:
                generated.append(name)
            structure = named_structure(name, dtype, shape, self.spec_inputs)
            if (
                structure is not None
                and self._free(name, kinds)
                and self._free(structure.partner, kinds)
            ):
                if structure.kind in KEPT_FROM_GENERATOR and "custom" in kinds:
                    self.structured[name] = f"{structure.kind}, by its name"
                else:
                    self.named[name] = structure
            inputs.append(self.tensor(name, shape, dtype, kinds))
        if self.weights:
            self.notes.append(
                f"{', '.join(self.weights)}: read as weights (no var axis in their shapes)"
            )
        return inputs, generated

    def _free(self, name: str, kinds: set[str]) -> bool:
        """Whether an input's values are one plain draw the reader may give a structure."""
        return (
            name not in self.structured
            and "safetensors" not in kinds
            and (not _UPSTREAM_NAME.search(name))
        )

    def tensor(
        self,
        name: str,
        shape: tuple[Dim, ...],
        dtype: torch.dtype,
        kinds: set[str],
    ) -> Input:
        if name in self.structured and "safetensors" not in kinds:
            self.notes.append(f"{name}: kept as get_inputs gives it ({self.structured[name]})")
            return GeneratedInput(name, shape, dtype)
        if name in self.named:
            self.notes.append(self.named[name].describe(name))
            return GeneratedInput(name, shape, dtype)
        if dtype == torch.bool:
            return MaskInput(name, shape, kind="bool")
        if dtype.is_floating_point:
            if _UPSTREAM_NAME.search(name):
                self.notes.append(f"{name}: read as an upstream gradient (by its name)")
                return TensorInput(name, shape, (dtype,), role="upstream")
            if not any(self._varies(d) for d in shape):
                self.weights.append(name)
                return TensorInput(name, shape, (dtype,), role="weight")
            return TensorInput(name, shape, (dtype,))
        if dtype.is_complex or dtype.itemsize == 0 or not _is_integer(dtype):
            self.notes.append(f"{name}: {dtype} values come only from the benchmark's generator")
            return GeneratedInput(name, shape, dtype)
        if "random" in kinds and "custom" not in kinds:
            last = next((d for d in reversed(shape) if isinstance(d, str)), None)
            if last is not None:
                self.notes.append(
                    f"{name}: random integers with no generator to sample, read as indices "
                    f"into its last axis ({last})"
                )
                return IndexInput(name, shape, bound=last, dtype=dtype)
        bound, why = self.index_bound(name)
        self.notes.append(f"{name}: {why}")
        if bound is None:
            return GeneratedInput(name, shape, dtype)
        return IndexInput(name, shape, bound=bound, dtype=dtype)

    def _varies(self, dim: Dim) -> bool:
        if isinstance(dim, int):
            return False
        return any(self.axes.get(word, {}).get("type") == "var" for word in _NAME.findall(dim))

    def index_bound(self, name: str) -> tuple[str | None, str]:
        """The axis (an expression over const and var axes for an expr axis) an integer input
        indexes, read from the benchmark's generator (`indices.GeneratorSource`); None, with
        the reason, where its values are kept as the generator gives them."""
        axis, why = self.generator_source.indexed_axis(name)
        if axis is None:
            return None, why
        kind = self.axes[axis].get("type")
        return (self.expression(axis) if kind == "expr" else axis), why

    @cached_property
    def generator_source(self) -> GeneratorSource:
        return GeneratorSource(
            str(self.data.get("reference", "")),
            self.data.get("custom_inputs_entrypoint"),
            self.axes,
        )


def _is_integer(dtype: torch.dtype) -> bool:
    return dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
