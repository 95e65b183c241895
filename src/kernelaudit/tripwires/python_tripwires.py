"""The tripwires of one Python file: the Python rules applied on the walk of `python_walk`,
each tripwire tagged with the owner the walk is in. CUDA and C++ source in the file's strings,
and the source files it compiles, are handed to `c_source`."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import TYPE_CHECKING

from kernelaudit.tripwires.c_source import read_c
from kernelaudit.tripwires.identity import IdentityFlow, memoised, takes_tensors
from kernelaudit.tripwires.python_names import (
    FRAME_ATTRIBUTES,
    INLINE_SOURCE_CALLS,
    PROCESS_PATHS,
    RAW_MEMORY_METHODS,
    RAW_MEMORY_PATHS,
    REFERENCES,
    SOURCE_FILE_CALLS,
    SOURCE_MARKERS,
    call_rules,
    lookup,
    module_rule,
    reads_nothing,
)
from kernelaudit.tripwires.python_source import (
    RUNTIME_MODULE,
    PythonFile,
    Scope,
    arguments,
    parse_python,
    root_name,
    string,
    target_names,
)
from kernelaudit.tripwires.python_strings import SourceResolver, Text, string_text
from kernelaudit.tripwires.python_walk import ModuleWalk, Reading
from kernelaudit.tripwires.python_writes import (
    CODE_FACTORIES,
    CODE_METHODS,
    MUTATING_METHODS,
    PRECISION_ENVIRONMENT,
    TENSOR_VERDICT_METHODS,
    kept_state,
    patched_target,
    sets_precision,
    subscript_target,
    write_rule,
)
from kernelaudit.tripwires.rules import tripwire
from kernelaudit.tripwires.triggers import Triggers

if TYPE_CHECKING:
    from kernelaudit.tripwires.scan import Scan


def read_python(path: Path, scan: Scan) -> Reading | str:
    """The reading of a Python file, or why it could not be read or parsed."""
    try:
        file = parse_python(path)
    except SyntaxError as error:
        where = f" at line {error.lineno}" if error.lineno else ""
        return f"{type(error).__name__}{where}: {error.msg}"
    except RecursionError:
        return "an expression nested too deeply to parse"
    except (ValueError, UnicodeDecodeError, OSError) as error:
        return f"{type(error).__name__}: {error}"
    reader = PythonReader(file, scan)
    try:
        reader.visit(file.tree)
    except RecursionError:
        return "an expression nested too deeply to walk"
    return reader.reading


class PythonReader(ModuleWalk):
    """The rules, applied as the walk reaches each node."""

    def __init__(self, file: PythonFile, scan: Scan):
        super().__init__(file, scan)
        # Names bound to compiled code, one set per frame.
        self.code_names: list[set[str]] = []
        self.module_code_names: set[str] = set()
        self.kept_state = kept_state(self.names, file.scope(file.tree))
        self.module_code_names = {
            name.id
            for node in file.scope(file.tree)
            if isinstance(node, ast.Assign) and self.makes_code(node.value)
            for target in node.targets
            for name in target_names(target)
        }
        self.memoised = memoised(self.names, file.tree)
        self.triggers = Triggers(self.names, file, self.makes_code)

    def qualname(self, node: ast.AST) -> str | None:
        return self.names.qualname(node)

    def makes_code(self, value: ast.AST | None) -> bool:
        """Whether a value is compiled code (a kernel, an extension module), not data."""
        if isinstance(value, ast.Name):
            if any(value.id in names for names in self.code_names):
                return True
            return value.id in self.module_code_names and not self.names.is_local(value.id)
        if isinstance(value, ast.Attribute):
            # A function of a compiled module: `_launch = module.scale`.
            return self.makes_code(value.value)
        if isinstance(value, (ast.Await, ast.NamedExpr)):
            return self.makes_code(value.value)
        if not isinstance(value, ast.Call):
            return False
        if isinstance(value.func, ast.Attribute) and value.func.attr in CODE_METHODS:
            return True
        if self.qualname(value.func) in CODE_FACTORIES:
            return True
        # `triton.jit(fn)`, `torch.compile(mode=...)(fn)`
        return isinstance(value.func, ast.Call) and self.makes_code(value.func)

    def flag(self, rule: str, node: ast.AST | int) -> None:
        line = node if isinstance(node, int) else getattr(node, "lineno", 0)
        self.reading.found.append((tripwire(rule, self.path, line, self.lines), self.owner))

    # -- the walk's hooks ----------------------------------------------------------------------

    def scope(self, owner: Scope) -> None:
        nodes = self.file.scope(owner)
        for node in IdentityFlow(self.names, self.memoised, nodes).key_uses():
            self.flag("address-keyed-cache", node)
        for rule, node in self.triggers.decisions(nodes):
            self.flag(rule, node)

    def function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if node.name in self.memoised and takes_tensors(node):
            self.flag("address-keyed-cache", node)

    def enter(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        code_names = {
            name.id
            for inner in self.file.scope(node)
            if isinstance(inner, ast.Assign) and self.makes_code(inner.value)
            for target in inner.targets
            for name in target_names(target)
        }
        super().enter(node)
        self.code_names.append(code_names)

    def leave(self) -> None:
        super().leave()
        self.code_names.pop()

    def reference(self, node: ast.Name | ast.Attribute) -> None:
        name = self.qualname(node)
        if name is None:
            return
        rule = lookup(REFERENCES, name)
        if rule is not None and not reads_nothing(name, node, self.parents):
            self.flag(rule, node)

    # -- names, attributes and imports ---------------------------------------------------------

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in FRAME_ATTRIBUTES:
            self.flag("frame-walking", node)
        if node.attr in RAW_MEMORY_METHODS:
            self.flag("ctypes", node)
        super().visit_Attribute(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            rule = module_rule(alias.name)
            if rule is not None:
                self.flag(rule, node)
        super().visit_Import(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level == 0:
            module = node.module or ""
            names = [module, *(f"{module}.{alias.name}" for alias in node.names)]
            for rule in set(filter(None, map(module_rule, names))):
                self.flag(rule, node)
        super().visit_ImportFrom(node)

    # -- calls ---------------------------------------------------------------------------------

    def visit_Call(self, node: ast.Call) -> None:
        name = self.qualname(node.func)
        if name is not None:
            self._known_call(node, name)
        target = patched_target(self.names, node, name)
        if target is not None:
            self._flag_write(target, node)
        if sets_precision(self.names, node, name):
            self.flag("gpu-flags", node)
        if name == "next" and node.args and self.in_function():
            # `next(_calls)` on a module-level counter
            root = root_name(node.args[0])
            if root is not None and self._kept_name(root):
                self.flag("module-state", node)
        if isinstance(node.func, ast.Attribute):
            self._method_call(node, node.func)
        self.generic_visit(node)

    def _known_call(self, node: ast.Call, name: str) -> None:
        for rule in call_rules(node, name):
            self.flag(rule, node)
        if name in INLINE_SOURCE_CALLS:
            positions, keywords = INLINE_SOURCE_CALLS[name]
            for expr in arguments(node, positions, keywords):
                self._scan_sources(expr)
        if name in SOURCE_FILE_CALLS:
            positions, keywords = SOURCE_FILE_CALLS[name]
            for expr in arguments(node, positions, keywords):
                self._scan_source_files(expr)

    def _method_call(self, node: ast.Call, func: ast.Attribute) -> None:
        if not self.in_function():
            return
        root = root_name(func.value)
        mutates = func.attr in MUTATING_METHODS or (
            func.attr.endswith("_") and not func.attr.startswith("_")
        )
        stored = [*node.args, *(kw.value for kw in node.keywords)]
        if (
            root is not None
            and mutates
            and self._kept_name(root)
            and not any(self.makes_code(value) for value in stored)
        ):
            self.flag("module-state", node)
        for kw in node.keywords:
            root = root_name(kw.value) if kw.arg == "out" else None
            if root is not None and self._kept_name(root):
                self.flag("module-state", node)

    def _flag_write(self, target: str, node: ast.AST) -> None:
        rule = write_rule(target)
        if rule is not None:
            self.flag(rule, node)

    # -- writes --------------------------------------------------------------------------------

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._write(target, node.value, node)
        self._note_module_alias(node)
        self.generic_visit(node)

    def _note_module_alias(self, node: ast.Assign) -> None:
        """`name = sys.modules["m"]` (or `importlib.import_module("m")`) binds `name` to module
        `m` as an import would: writes through it are writes into `m`."""
        value = node.value
        if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
            return
        if not isinstance(value, (ast.Subscript, ast.Call)):
            return
        module = self.qualname(value)
        if module is not None:
            self._bind_module(node.targets[0].id, module)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self._note_module_loop(node)
        self.generic_visit(node)

    visit_AsyncFor = visit_For

    def _note_module_loop(self, node: ast.For | ast.AsyncFor) -> None:
        """`for module in sys.modules.values()` (or `name, module in ... .items()`, through
        `list`, `tuple` or `sorted`) binds `module` to each loaded module in turn: writes
        through it are writes into modules named at run time, kernelaudit's among them."""
        iterated = node.iter
        while (
            isinstance(iterated, ast.Call)
            and self.qualname(iterated.func) in {"list", "tuple", "sorted", "reversed"}
            and iterated.args
        ):
            iterated = iterated.args[0]
        if not (
            isinstance(iterated, ast.Call)
            and isinstance(iterated.func, ast.Attribute)
            and self.qualname(iterated.func.value) == "sys.modules"
        ):
            return
        target = node.target
        if iterated.func.attr == "items" and isinstance(target, ast.Tuple) and target.elts:
            target = target.elts[-1]
        elif iterated.func.attr != "values":
            return
        if isinstance(target, ast.Name):
            self._bind_module(target.id, RUNTIME_MODULE)

    def _bind_module(self, name: str, module: str) -> None:
        """Writes through `name` are writes into `module` from here on, as after an import."""
        if self.in_function():
            self.frames[-1].imported[name] = module
        else:
            self.names.aliases[name] = module
            self.names.module_names.discard(name)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._write(node.target, node.value, node)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._write(node.target, None, node)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._write(target, None, node)
        self.generic_visit(node)

    def _write(self, target: ast.AST, value: ast.AST | None, node: ast.stmt) -> None:
        """`value` is None for augmented assignments and deletions."""
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._write(element, None, node)
        elif isinstance(target, ast.Starred):
            self._write(target.value, None, node)
        elif isinstance(target, ast.Attribute):
            if target.attr == "__code__":
                self.flag("dynamic-code", node)
            name = self.qualname(target)
            if name is not None:
                self._flag_write(name, node)
            elif target.attr in TENSOR_VERDICT_METHODS:
                self.flag("torch-patching", node)
        elif isinstance(target, ast.Subscript):
            self._subscript_write(target, value, node)
        elif isinstance(target, ast.Name) and self.in_function():
            scope = self.frames[-1]
            rebinds = target.id in scope.declared_global | scope.declared_nonlocal
            if rebinds and not (
                isinstance(node, ast.Assign)
                and (isinstance(value, ast.Constant) or self.makes_code(value))
            ):
                self.flag("module-state", node)

    def _subscript_write(
        self, target: ast.Subscript, value: ast.AST | None, node: ast.stmt
    ) -> None:
        replaced = subscript_target(self.names, target)
        if replaced is not None:
            self._flag_write(replaced, node)
        elif (
            self.qualname(target.value) in ("os.environ", "os.environb")
            and string(target.slice) in PRECISION_ENVIRONMENT
        ):
            self.flag("gpu-flags", node)
        root = root_name(target)
        if (
            root is not None
            and self.in_function()
            and self._kept_name(root)
            and not (isinstance(node, ast.Assign) and self.makes_code(value))
        ):
            self.flag("module-state", node)

    def _kept_name(self, name: ast.Name) -> bool:
        return name.id in self.kept_state and not self.names.is_local(name.id)

    # -- other statements ----------------------------------------------------------------------

    def visit_Raise(self, node: ast.Raise) -> None:
        exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        if exc is not None and self.qualname(exc) in ("SystemExit", "KeyboardInterrupt"):
            self.flag("process-control", node)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if not isinstance(node.value, str):
            return
        if RAW_MEMORY_PATHS.search(node.value):
            self.flag("ctypes", node)
        elif PROCESS_PATHS.search(node.value):
            self.flag("environment", node)
        if not isinstance(self.parents.get(node), ast.JoinedStr) and SOURCE_MARKERS.search(
            node.value
        ):
            self._scan_sources(node)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        marked = any(
            SOURCE_MARKERS.search(part.value)
            for part in node.values
            if isinstance(part, ast.Constant) and isinstance(part.value, str)
        )
        text = string_text(node, self.lines) if marked else None
        if text is not None:
            self._scan_text(text)
        self.generic_visit(node)

    # -- CUDA and C++ sources ------------------------------------------------------------------

    def _scan_sources(self, expr: ast.AST) -> None:
        for text in SourceResolver(self.file, self.names).texts(expr):
            self._scan_text(text)

    def _scan_source_files(self, expr: ast.AST) -> None:
        sources = self.scan.sources
        for file in SourceResolver(self.file, self.names).files(expr, sources.locate):
            for wire in sources.scan_file(file):
                self.reading.found.append((wire, self.owner))

    def _scan_text(self, text: Text) -> None:
        source = read_c(text.text)
        for rule, offset in source.sightings:
            self.flag(rule, text.lines[offset] if offset < len(text.lines) else text.lines[-1])
        for wire in self.scan.sources.included(self.path.parent, source.includes):
            self.reading.found.append((wire, self.owner))
