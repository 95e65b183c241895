"""The sizes of symbolic shapes: an entry of a shape is an axis name, an integer, or an
expression over axis names that the problem's sizes bind."""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from types import MappingProxyType

Dim = str | int
"""One entry of a symbolic shape: an axis name, an integer literal, or an expression over axis
names with integers, `+`, `-`, `*`, `//` and parentheses ("batch * seq", "width // patch"),
for a size that follows from others and is never varied on its own."""


def resolve_shape(shape: tuple[Dim, ...], sizes: Mapping[str, int]) -> tuple[int, ...]:
    """Bind a symbolic shape to concrete sizes."""
    return tuple(dim_size(d, sizes) for d in shape)


def dim_size(dim: Dim, sizes: Mapping[str, int]) -> int:
    """The size of one shape entry: a literal, an axis's size, or an expression's value."""
    if isinstance(dim, int):
        return dim
    if dim in sizes:
        return int(sizes[dim])
    return _evaluate(_parse(dim), sizes)


_OPERATORS: Mapping[type, Callable[[int, int], int]] = MappingProxyType(
    {
        ast.Add: lambda a, b: a + b,
        ast.Sub: lambda a, b: a - b,
        ast.Mult: lambda a, b: a * b,
        ast.FloorDiv: lambda a, b: a // b,
    }
)


def _parse(expression: str) -> ast.expr:
    try:
        return ast.parse(expression, mode="eval").body
    except SyntaxError:
        raise KeyError(expression) from None


def _evaluate(node: ast.expr, sizes: Mapping[str, int]) -> int:
    if isinstance(node, ast.Name):
        return int(sizes[node.id])
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _evaluate(node.left, sizes), _evaluate(node.right, sizes)
        return _OPERATORS[type(node.op)](left, right)
    raise KeyError(ast.unparse(node))


def dim_axes(dim: Dim) -> tuple[str, ...]:
    """The axis names a shape entry depends on (none for a literal); raises ValueError for an
    entry that is neither a name nor an expression kernelaudit can evaluate."""
    if isinstance(dim, int):
        return ()
    if dim.isidentifier():
        return (dim,)
    names: list[str] = []

    def walk(node: ast.expr) -> None:
        if isinstance(node, ast.Name):
            names.append(node.id)
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            pass
        elif isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            walk(node.left)
            walk(node.right)
        else:
            raise ValueError(f"{ast.unparse(node)!r} is not a size expression")

    try:
        walk(_parse(dim))
    except KeyError:
        raise ValueError(f"{dim!r} is not a size expression") from None
    return tuple(dict.fromkeys(names))
