"""Name the tensors the worker labels by position ("input 2", "output 0") as the problem does."""

from __future__ import annotations

from kernelaudit.problem.spec import Problem


def output_name(problem: Problem, index: int) -> str:
    """The declared name of output `index`, or "output k" for one the problem does not
    declare (a candidate returning more tensors than declared)."""
    return problem.outputs[index].name if index < len(problem.outputs) else f"output {index}"


def tensor_name(problem: Problem, label: str) -> str:
    """ "input 1" -> "input 1 ('ids')"; labels without a declared name are returned as they are."""
    kind, _, index = label.partition(" ")
    if not index.isdigit():
        return label
    declared = {"input": problem.inputs, "output": problem.outputs}.get(kind, ())
    position = int(index)
    return f"{label} ({declared[position].name!r})" if position < len(declared) else label
