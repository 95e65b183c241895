"""Reading Python without running it: the nodes of a scope, what a name stands for after
imports and aliases, and how values flow between the names of one scope. The text of string
literals is `python_strings`'s job."""

from __future__ import annotations

import ast
import builtins
import io
import tokenize
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kernelaudit.tripwires.rules import physical_lines

# What has a scope of its own: the module, functions and lambdas.
Scope = ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True)
class PythonFile:
    """A parsed Python file: its physical lines, its tree and each node's parent."""

    path: Path
    lines: list[str]
    tree: ast.Module
    parents: dict[ast.AST, ast.AST]
    scopes: dict[Scope, list[ast.AST]] = field(default_factory=dict, compare=False)

    def scope(self, owner: Scope) -> list[ast.AST]:
        """The nodes of the module's, a function's or a lambda's scope (see `scope_nodes`),
        listed once."""
        if owner not in self.scopes:
            body = [owner.body] if isinstance(owner, ast.Lambda) else owner.body
            self.scopes[owner] = list(scope_nodes(body))
        return self.scopes[owner]


def parse_python(path: Path) -> PythonFile:
    """Raises OSError, SyntaxError, ValueError, UnicodeDecodeError or RecursionError for a
    file that cannot be read as Python."""
    data = path.read_bytes()
    tree = ast.parse(data, filename=str(path))
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    return PythonFile(path, physical_lines(data.decode(encoding)), tree, parents)


# --- scopes --------------------------------------------------------------------------------------


def scope_nodes(body: Iterable[ast.AST]) -> Iterator[ast.AST]:
    """Every node of a scope's body, not entering nested functions, lambdas or classes (their
    names, decorators and defaults belong to this scope, their bodies do not)."""
    stack = list(body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            stack.extend(node.decorator_list)
            stack.extend(defaults(node.args))
        elif isinstance(node, ast.ClassDef):
            stack.extend(node.decorator_list)
            stack.extend(node.bases)
        elif isinstance(node, ast.Lambda):
            stack.extend(defaults(node.args))
        else:
            stack.extend(ast.iter_child_nodes(node))


def defaults(args: ast.arguments) -> list[ast.expr]:
    return [*args.defaults, *(d for d in args.kw_defaults if d is not None)]


def parameters(args: ast.arguments) -> list[ast.arg]:
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    every.extend(a for a in (args.vararg, args.kwarg) if a is not None)
    return every


def target_names(target: ast.AST) -> Iterator[ast.Name]:
    if isinstance(target, ast.Name):
        yield target
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from target_names(element)
    elif isinstance(target, ast.Starred):
        yield from target_names(target.value)


def root_name(node: ast.AST) -> ast.Name | None:
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return node if isinstance(node, ast.Name) else None


def chain(node: ast.Attribute) -> tuple[str, ...] | None:
    """`a.b.c` as ("a", "b", "c"); None when the chain does not start at a name."""
    parts: list[str] = []
    current: ast.AST = node
    while isinstance(current, ast.Attribute):
        parts.append(current.attr)
        current = current.value
    if not isinstance(current, ast.Name):
        return None
    return (current.id, *reversed(parts))


def is_main_guard(node: ast.stmt) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "__main__"
    )


def string(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def argument(call: ast.Call, position: int, keyword: str | None = None) -> ast.expr | None:
    if len(call.args) > position and not any(
        isinstance(a, ast.Starred) for a in call.args[: position + 1]
    ):
        return call.args[position]
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    return None


def arguments(
    call: ast.Call, positions: tuple[int, ...], keywords: tuple[str, ...]
) -> Iterator[ast.expr]:
    for position in positions:
        if len(call.args) > position:
            yield call.args[position]
    for kw in call.keywords:
        if kw.arg in keywords:
            yield kw.value


def assignments(nodes: Iterable[ast.AST]) -> Iterator[tuple[list[ast.AST], ast.AST]]:
    """(targets, value) of each binding among a scope's nodes: plain, annotated, augmented and
    walrus assignments, `for` targets and `with ... as` names."""
    for node in nodes:
        if isinstance(node, ast.Assign):
            yield list(node.targets), node.value
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
            if node.value is not None:
                yield [node.target], node.value
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            yield [node.target], node.iter
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            yield [node.optional_vars], node.context_expr


def flow(nodes: list[ast.AST], carries: Callable[[ast.AST], bool], found: set[str]) -> None:
    """Adds to `found` the names of a scope bound, directly or through other names, to a
    value that carries something; `carries` may read `found` as it grows."""
    bindings = list(assignments(nodes))
    changed = True
    while changed:
        changed = False
        for targets, value in bindings:
            if not carries(value):
                continue
            for target in targets:
                for name in target_names(target):
                    if name.id not in found:
                        found.add(name.id)
                        changed = True


# --- names ---------------------------------------------------------------------------------------

_BUILTINS = frozenset(dir(builtins))
# Expressions that evaluate to a module named by a literal.
_MODULE_LOOKUPS = frozenset({"importlib.import_module", "__import__", "sys.modules.get"})
RUNTIME_MODULE = "<a module named at run time>"
"""What a module looked up by a name made at run time is called (`sys.modules[name]`,
`importlib.import_module(prefix + name)`, a loop over `sys.modules.values()`): the scan cannot
tell which it is, and it may be kernelaudit's own."""
_OWN_NAMES = frozenset({"__name__", "__package__", "__spec__"})
"""Names a module uses for itself and its package: a lookup built from them is of the
candidate's own modules, not one named at run time."""
_NAMED_BINDINGS = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.ExceptHandler,
    ast.MatchAs,
    ast.MatchStar,
)


def module_named(name: ast.AST | None) -> str | None:
    """The module a lookup by `name` gives: the literal's, `RUNTIME_MODULE` for a name made at
    run time, None for none or for one made from the module's own name."""
    if name is None:
        return None
    literal = string(name)
    if literal is not None:
        return literal
    if any(isinstance(n, ast.Name) and n.id in _OWN_NAMES for n in ast.walk(name)):
        return None
    return RUNTIME_MODULE


@dataclass(frozen=True)
class Frame:
    """A function's scope: its parameters, the names it binds, those it declares global or
    nonlocal and those it binds by import (to their origin)."""

    parameters: set[str]
    local: set[str]
    declared_global: set[str]
    declared_nonlocal: set[str]
    imported: dict[str, str]


def frame(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> Frame:
    body: list[ast.AST] = [node.body] if isinstance(node, ast.Lambda) else list(node.body)
    given = {a.arg for a in parameters(node.args)}
    local = set(given)
    declared_global: set[str] = set()
    declared_nonlocal: set[str] = set()
    imported: dict[str, str] = {}
    for inner in scope_nodes(body):
        if isinstance(inner, ast.Global):
            declared_global.update(inner.names)
        elif isinstance(inner, ast.Nonlocal):
            declared_nonlocal.update(inner.names)
        elif isinstance(inner, ast.Name) and isinstance(inner.ctx, (ast.Store, ast.Del)):
            local.add(inner.id)
        elif isinstance(inner, _NAMED_BINDINGS) and inner.name:
            local.add(inner.name)
        elif isinstance(inner, (ast.Import, ast.ImportFrom)):
            for name, origin in import_aliases(inner):
                local.add(name)
                imported[name] = origin
    declared = declared_global | declared_nonlocal
    return Frame(given, local - declared, declared_global, declared_nonlocal, imported)


def import_aliases(node: ast.Import | ast.ImportFrom) -> Iterator[tuple[str, str]]:
    """(local name, dotted origin) of each name an import binds; relative origins start with
    dots and match nothing in the rule tables."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.asname:
                yield alias.asname, alias.name
            else:
                top = alias.name.split(".")[0]
                yield top, top
        return
    module = "." * node.level + (node.module or "")
    for alias in node.names:
        if alias.name != "*":
            yield alias.asname or alias.name, f"{module}.{alias.name}"


class Names:
    """What a name stands for where a reader stands in a module: an import (as its dotted
    origin), a builtin, or one of the module's own variables; `frames` holds the functions the
    reader is inside, innermost last."""

    def __init__(self, tree: ast.Module):
        self.frames: list[Frame] = []
        self.built: dict[ast.AST, Frame] = {}
        self.aliases: dict[str, str] = {}
        self.module_names: set[str] = set()
        # Top-level definitions (possibly inside module-level if/try blocks): what a candidate
        # function can reach by name.
        self.symbols: set[str] = set()
        for node in scope_nodes(tree.body):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                self.aliases.update(import_aliases(node))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.module_names.add(node.name)
                self.symbols.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                self.module_names.add(node.id)
        self.module_names -= set(self.aliases)

    def frame(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> Frame:
        """A function's frame, built once."""
        if node not in self.built:
            self.built[node] = frame(node)
        return self.built[node]

    def origin(self, name: str) -> str | None:
        """The dotted name a bare name stands for here: an import, a builtin, or None for the
        module's own variables and locals."""
        for scope in reversed(self.frames):
            if name in scope.declared_global:
                break
            if name in scope.declared_nonlocal:
                continue
            if name in scope.imported:
                return scope.imported[name]
            if name in scope.local:
                return None
        if name in self.aliases:
            return self.aliases[name]
        if name in self.module_names:
            return None
        return name if name in _BUILTINS else None

    def qualname(self, node: ast.AST) -> str | None:
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name):
            base = self.origin(node.id)
        elif isinstance(node, ast.Call) and self.qualname(node.func) in _MODULE_LOOKUPS:
            base = module_named(argument(node, 0, "name"))
        elif isinstance(node, ast.Subscript) and self.qualname(node.value) == "sys.modules":
            base = module_named(node.slice)
        else:
            return None
        if base is None:
            return None
        return ".".join([base, *reversed(parts)])

    def is_local(self, name: str) -> bool:
        """Whether a name is bound by one of the functions the reader is inside."""
        for scope in reversed(self.frames):
            if name in scope.declared_global:
                return False
            if name in scope.local:
                return True
        return False
