"""Name the tensors the worker labels by position ("input 2", "output 0") as the problem does."""

from __future__ import annotations

from kernelaudit.problem.spec import Problem


def tensor_name(problem: Problem, label: str) -> str:
    """ "input 1" -> "input 1 ('ids')"; labels without a declared name are returned as they are."""
    kind, _, index = label.partition(" ")
    if not index.isdigit():
        return label
    declared = {"input": problem.inputs, "output": problem.outputs}.get(kind, ())
    position = int(index)
    return f"{label} ({declared[position].name!r})" if position < len(declared) else label
