"""The counts a module keeps across calls: names and attributes its functions step by a
constant (`global`, `nonlocal`, `self` and function attributes), and its itertools.count
iterators. A decision on one is a call-count trigger (`triggers`)."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from kernelaudit.tripwires.python_source import (
    FUNCTIONS,
    Names,
    PythonFile,
    string,
    target_names,
)

COUNTERS = frozenset({"itertools.count"})


@dataclass(frozen=True)
class Counters:
    """The counts a module keeps across calls, each stepped by a constant somewhere in it.

    globals: module-level names a function steps through `global`; closures: names a function
    steps through `nonlocal`; cells: attributes and items stepped, as written (`self.calls`,
    `candidate.calls`, `_calls[0]`), and owners: the names they hang on; iterators: names bound
    to an itertools.count (parameter defaults included)."""

    globals: frozenset[str]
    closures: frozenset[str]
    cells: frozenset[str]
    owners: frozenset[str]
    iterators: frozenset[str]


def counters(names: Names, file: PythonFile) -> Counters:
    """The counts a module keeps across calls."""
    globals_: set[str] = set()
    closures: set[str] = set()
    cells: set[str] = set()
    owners: set[str] = set()
    iterators: set[str] = set()
    for node in file.parents:
        if isinstance(node, ast.Assign) and names.qualname(_callee(node.value)) in COUNTERS:
            iterators.update(n.id for t in node.targets for n in target_names(t))
        if not isinstance(node, FUNCTIONS):
            continue
        args = node.args
        positional = [*args.posonlyargs, *args.args]
        given = [
            *zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True),
            *zip(args.kwonlyargs, args.kw_defaults, strict=True),
        ]
        iterators.update(
            arg.arg
            for arg, default in given
            if default is not None and names.qualname(_callee(default)) in COUNTERS
        )
        steps = [t for t in map(_stepped, file.scope(node)) if t is not None]
        if not steps:
            continue
        scope = names.frame(node)
        for target in steps:
            if isinstance(target, ast.Name) and target.id in scope.declared_global:
                globals_.add(target.id)
            elif isinstance(target, ast.Name) and target.id in scope.declared_nonlocal:
                closures.add(target.id)
            elif isinstance(target, (ast.Attribute, ast.Subscript)):
                owner = target.value
                kept = isinstance(owner, ast.Name) and (
                    owner.id in ("self", "cls") or owner.id not in scope.local
                )
                if kept:
                    cells.add(ast.unparse(target))
                    owners.add(owner.id)
    return Counters(
        frozenset(globals_),
        frozenset(closures),
        frozenset(cells),
        frozenset(owners),
        frozenset(iterators),
    )


def _callee(value: ast.AST) -> ast.AST:
    return value.func if isinstance(value, ast.Call) else value


def _stepped(node: ast.AST) -> ast.expr | None:
    """The name or attribute a statement steps by a constant: `n += 1`, `n = n + 1`,
    `f.calls = getattr(f, "calls", 0) + 1`."""
    if isinstance(node, ast.AugAssign) and isinstance(node.op, (ast.Add, ast.Sub)):
        return node.target if _is_step(node.value) else None
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
        return None
    target, value = node.targets[0], node.value
    if not (isinstance(value, ast.BinOp) and isinstance(value.op, (ast.Add, ast.Sub))):
        return None
    for step, base in ((value.right, value.left), (value.left, value.right)):
        if _is_step(step) and _reads(base, target):
            return target
    return None


def _is_step(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float))
        and not isinstance(node.value, bool)
    )


def _reads(base: ast.AST, target: ast.AST) -> bool:
    """Whether `base` reads what `target` writes: the same name, attribute or item, or
    `getattr(owner, "attribute", default)`."""
    if not isinstance(target, (ast.Name, ast.Attribute, ast.Subscript)):
        return False
    if ast.unparse(base) == ast.unparse(target):
        return True
    return (
        isinstance(target, ast.Attribute)
        and isinstance(base, ast.Call)
        and isinstance(base.func, ast.Name)
        and base.func.id == "getattr"
        and len(base.args) >= 2
        and ast.unparse(base.args[0]) == ast.unparse(target.value)
        and string(base.args[1]) == target.attr
    )
