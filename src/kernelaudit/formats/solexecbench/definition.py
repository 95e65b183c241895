"""SOL-ExecBench problems: `definition.json` (axes, inputs, outputs, the reference's source)
and `workload.jsonl` (one axis binding per line, with how each input is produced) read as a
kernelaudit problem.

The format says less than kernelaudit needs, so some of it is inferred, and every inference is
written into `Problem.notes`:
- const axes are axes held at their value; expr axes become size expressions in shapes;
- integer inputs the benchmark generates are sampled, and read as indices into the axis their
  values cover, or kept as the generator gives them when they have structure (offsets, rows of
  distinct picks);
- inputs with a structure (computed by get_inputs, or named as rotary tables, softmax rows,
  dropout masks, float positions or inverse frequencies) keep the generator's values
  (`structure`);
- float inputs named like gradients are upstream gradients; those whose shape has no var axis
  are weights;
- scalars equal to an axis in every workload follow that axis; others take every value the
  workloads give them as modes.
"""

from __future__ import annotations

from pathlib import Path

import torch

from kernelaudit.formats.solexecbench.reader import (
    DEFINITION,
    WORKLOADS,
    DefinitionReader,
    is_definition,
    read_json,
    read_workloads,
    torch_dtype,
)
from kernelaudit.formats.solexecbench.reference import generator, reference, reference_module
from kernelaudit.formats.solexecbench.tensor_files import unreadable
from kernelaudit.problem.spec import Contract, Output, Problem, Sampler, Workload
from kernelaudit.problem.validate import validate

__all__ = ["DEFINITION", "WORKLOADS", "is_definition", "read_definition", "unrunnable"]


def read_definition(path: str | Path) -> Problem:
    """The problem of a SOL-ExecBench folder (or its definition.json)."""
    reader = DefinitionReader(Path(path))
    axes = reader.declared_axes()
    module = reference_module(reader)
    workloads = tuple(
        Workload(tuple(reader.sizes(w).items()), name=str(w.get("uuid") or f"line {w['_line']}"))
        for w in reader.workloads
    )
    scalars = {
        name: (reader.scalar_values(name) or [None])[0]
        for name, spec in reader.spec_inputs.items()
        if isinstance(spec, dict) and spec.get("shape") is None
    }
    generate = generator(reader, module, scalars)
    inputs, generated = reader.inputs()
    outputs = tuple(
        Output(
            name,
            reader.shape(spec, f"outputs.{name}") or (),
            torch_dtype(spec.get("dtype"), reader.file, f"outputs.{name}.dtype"),
        )
        for name, spec in reader.spec_outputs.items()
    )
    reader.notes.append(
        "contract as SOL-ExecBench evaluates: contiguous inputs, run-to-run differences held to "
        "the error budget rather than bit-exact"
    )
    problem = Problem(
        name=reader.name,
        reference=reference(module, tuple(o.name for o in outputs)),
        axes=axes,
        inputs=tuple(inputs),
        outputs=outputs,
        workloads=workloads,
        contract=Contract(deterministic=False, layouts=("contiguous",)),
        description=str(reader.data.get("description", "")),
        source=str(reader.file.resolve()),
        sampler=Sampler(function=generate, default_for=tuple(generated)),
        notes=tuple(reader.notes),
    )
    validate(problem)
    return problem


def unrunnable(problem: Problem) -> str | None:
    """Why `problem`'s reference cannot run on this machine, or None."""
    file = Path(problem.source)
    data = read_json(file, "definition")
    dtypes = {str(s.get("dtype")) for s in data.get("inputs", {}).values() if isinstance(s, dict)}
    # NVFP4 data, or a reference that quantizes to it inside, needs Blackwell's fp4 support
    nvfp4 = "float4_e2m1fn" in str(data.get("reference", "")) or "nvfp4" in problem.name.lower()
    if nvfp4 or any(d.startswith("float4") for d in dtypes):
        capability = torch.cuda.get_device_capability() if torch.cuda.is_available() else None
        if capability is None or capability < (10, 0):
            return "NVFP4 (float4_e2m1fn_x2) inputs need a Blackwell GPU (compute capability 10+)"
    return unreadable(file.parent, read_workloads(file.parent / WORKLOADS))
