"""Which axis an integer input of a SOL-ExecBench problem indexes, read from the source of the
benchmark's own input generator: `torch.randint(0, n, ...)` with `n` an axis's size (a name
bound to one, `sizes["axis"]`, or a constant only one const axis has). Anything else (offsets,
positions, top-k picks, grids) has a structure kernelaudit would break by drawing it again, so
its values are kept as the generator gives them."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any


class GeneratorSource:
    """The generator function's assignments, as the reader asks about them."""

    def __init__(self, source: str, entry: object, axes: Mapping[str, Mapping[str, Any]]):
        self.axes = axes
        self.assigned: dict[str, list[ast.expr]] = {}
        """Within the generator function: every value assigned to each local name."""
        for function in ast.parse(source).body:
            if not isinstance(function, ast.FunctionDef) or function.name != entry:
                continue
            for node in ast.walk(function):
                if (
                    isinstance(node, ast.Assign)
                    and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                ):
                    self.assigned.setdefault(node.targets[0].id, []).append(node.value)

    def indexed_axis(self, name: str) -> tuple[str | None, str]:
        """The axis the input `name` is drawn below, or None with the reason."""
        assigned = self.assigned.get(name, [])
        call = assigned[0] if len(assigned) == 1 else None
        if not isinstance(call, ast.Call) or not _is_randint(call):
            return None, "integer values kept as the benchmark's generator gives them"
        low, high = call.args[:2]
        if not _is_zero(low):
            return None, "integer values kept as the generator gives them (not drawn from 0)"
        axis = self.axis_of(high)
        if axis is None:
            return None, "integer values kept as the generator gives them (bound is not an axis)"
        return axis, f"read as indices into axis {axis} (get_inputs draws randint(0, {axis}))"

    def axis_of(self, node: ast.expr) -> str | None:
        if isinstance(node, ast.Name):
            assigned = self.assigned.get(node.id, [])
            if not assigned:
                return node.id if node.id in self.axes else None
            return self.axis_of(assigned[0]) if len(assigned) == 1 else None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            key = node.slice.value
            return key if isinstance(key, str) and key in self.axes else None
        if isinstance(node, ast.Constant) and type(node.value) is int:
            matches = [
                a
                for a, spec in self.axes.items()
                if spec.get("type") == "const" and spec.get("value") == node.value
            ]
            return matches[0] if len(matches) == 1 else None
        return None


def _is_randint(call: ast.Call) -> bool:
    function = call.func
    return (
        isinstance(function, ast.Attribute) and function.attr == "randint" and len(call.args) >= 2
    )


def _is_zero(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value == 0
