"""One pass over a Python module that knows, at each node, which top-level function or class
owns it and which functions it is inside, and records what each owner refers to and imports:
what the scan follows from a candidate function into the code it can reach. The rules ride on
this walk (`python_tripwires`)."""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kernelaudit.tripwires.python_source import (
    Frame,
    Names,
    PythonFile,
    Scope,
    chain,
    defaults,
    is_main_guard,
    string,
)
from kernelaudit.tripwires.rules import Tripwire

if TYPE_CHECKING:
    from kernelaudit.tripwires.scan import Scan


@dataclass
class Reading:
    """What one Python file says: tripwires by owner (the top-level function or class whose
    body holds them; None for code that runs at import) and the names that link owners."""

    path: Path
    dotted: str
    symbols: set[str]
    bindings: dict[str, tuple[str, str | None]]
    found: list[tuple[Tripwire, str | None]] = field(default_factory=list)
    references: dict[str | None, set[tuple[str, ...]]] = field(
        default_factory=lambda: defaultdict(set)
    )
    imports: dict[str | None, set[str]] = field(default_factory=lambda: defaultdict(set))
    module_names: set[str] = field(default_factory=set)


class ModuleWalk(ast.NodeVisitor):
    """The walk, with hooks for what rides on it: `scope` for each scope (the module, a
    function, a lambda) before its statements are visited, `function` for each function before
    its body, `reference` for each name or attribute read, and `enter`/`leave` around each
    function's frame."""

    def __init__(self, file: PythonFile, scan: Scan):
        self.file = file
        self.path = file.path
        self.lines = file.lines
        self.parents = file.parents
        self.scan = scan
        self.names = Names(file.tree)
        self.frames: list[Frame] = self.names.frames
        self.owner: str | None = None
        self.class_owner: str | None = None
        self.reading = Reading(
            path=file.path,
            dotted=scan.dotted_name(file.path),
            symbols=set(self.names.symbols),
            bindings={},
            module_names=self.names.module_names | set(self.names.aliases),
        )

    def scope(self, owner: Scope) -> None:
        pass

    def function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        pass

    def reference(self, node: ast.Name | ast.Attribute) -> None:
        pass

    def enter(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        self.frames.append(self.names.frame(node))

    def leave(self) -> None:
        self.frames.pop()

    def in_function(self) -> bool:
        return bool(self.frames)

    # -- scopes --------------------------------------------------------------------------------

    def visit_Module(self, node: ast.Module) -> None:
        self.scope(node)
        for statement in node.body:
            self.visit(statement)

    def visit_If(self, node: ast.If) -> None:
        # The main block never runs when the worker imports the file.
        if not self.frames and self.owner is None and is_main_guard(node):
            for statement in node.orelse:
                self.visit(statement)
            return
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for expr in (*node.decorator_list, *defaults(node.args)):
            self.visit(expr)
        outer = self.owner
        if outer is None:
            self.owner = self.class_owner or node.name
        self.function(node)
        self.enter(node)
        self.scope(node)
        for statement in node.body:
            self.visit(statement)
        self.leave()
        self.owner = outer

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        for expr in defaults(node.args):
            self.visit(expr)
        self.enter(node)
        self.scope(node)
        self.visit(node.body)
        self.leave()

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for expr in (*node.decorator_list, *node.bases, *(k.value for k in node.keywords)):
            self.visit(expr)
        outer = self.class_owner
        if self.owner is None and not self.frames and self.class_owner is None:
            self.class_owner = node.name
        for statement in node.body:
            self.visit(statement)
        self.class_owner = outer

    def visit_Expr(self, node: ast.Expr) -> None:
        # A bare string is documentation, never compiled.
        if string(node.value) is None and not isinstance(node.value, ast.JoinedStr):
            self.visit(node.value)

    # -- names and attributes ------------------------------------------------------------------

    def visit_Name(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Load):
            return
        parent = self.parents.get(node)
        if not (isinstance(parent, ast.Attribute) and parent.value is node):
            self.reading.references[self.owner].add((node.id,))
            self.reference(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.ctx, ast.Load):
            parent = self.parents.get(node)
            if not (isinstance(parent, ast.Attribute) and parent.value is node):
                names = chain(node)
                if names is not None:
                    self.reading.references[self.owner].add(names)
            self.reference(node)
        self.generic_visit(node)

    # -- imports -------------------------------------------------------------------------------

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            parts = alias.name.split(".")
            loaded = [".".join(parts[:size]) for size in range(1, len(parts) + 1)]
            self._load_local(loaded)
            if self.scan.find(alias.name) is not None or self.scan.find(parts[0]) is not None:
                bound = alias.asname or parts[0]
                self.reading.bindings[bound] = (alias.name if alias.asname else parts[0], None)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level == 0:
            base = module
        else:
            package = self.reading.dotted.split(".") if self.reading.dotted else []
            if self.path.name != "__init__.py":
                package = package[:-1]
            if node.level - 1 > len(package):
                return
            package = package[: len(package) - (node.level - 1)]
            base = ".".join([*package, *([module] if module else [])])
        if base:
            self._load_local([base])
        for alias in node.names:
            if alias.name == "*":
                continue
            bound = alias.asname or alias.name
            submodule = f"{base}.{alias.name}" if base else alias.name
            if self.scan.find(submodule) is not None:
                self._load_local([submodule])
                self.reading.bindings[bound] = (submodule, None)
            elif base and self.scan.find(base) is not None:
                self.reading.bindings[bound] = (base, alias.name)

    def _load_local(self, modules: list[str]) -> None:
        for module in modules:
            if self.scan.find(module) is not None:
                self.reading.imports[self.owner].add(module)
