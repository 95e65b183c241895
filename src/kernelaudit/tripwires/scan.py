"""Reading a candidate's source for constructs that can game a benchmark, without running it.

The candidate file is parsed with `ast`, never imported. Local modules it imports (files under
its own folder) are read too, each once, and so are CUDA and C++ sources it compiles: string
literals handed to `load_inline`, CuPy and the like (or that look like CUDA source), and source
files named in `sources=[...]`, with the local headers they include.

Every tripwire is a warning: the scan engine turns one into a failure only when a runtime
check of `Tripwire.confirmed_by` fails too.
"""

from __future__ import annotations

import ast
import builtins
import io
import re
import tokenize
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kernelaudit.errors import UsageError
from kernelaudit.tripwires.rules import (
    CALLS,
    CODE_FACTORIES,
    CODE_METHODS,
    CONTAINER_FACTORIES,
    CUDA_PATTERNS,
    DYNAMIC_CODE_CALLS,
    FRAME_ATTRIBUTES,
    IDENTITY_ATTRIBUTES,
    IDENTITY_METHODS,
    IMPORTS,
    INLINE_SOURCE_CALLS,
    INSTALLER_WORDS,
    KEY_BUILDERS,
    KEY_METHODS,
    LIBRARY_SETTINGS,
    LIBRARY_TARGETS,
    MEMO_DECORATORS,
    MOCK_PATCH_CALLS,
    MOCK_PATCH_OBJECT_CALLS,
    MUTATING_METHODS,
    PRECISION_ENVIRONMENT,
    PROCESS_HOOKS,
    PROCESS_PATHS,
    RAW_MEMORY_METHODS,
    RAW_MEMORY_PATHS,
    REFERENCES,
    RULES,
    SETATTR_CALLS,
    SETATTR_METHODS,
    SHELL_CALLS,
    SOURCE_FILE_CALLS,
    SOURCE_MARKERS,
    SOURCE_SUFFIXES,
    TENSOR_FACTORIES,
    TENSOR_VERDICT_METHODS,
    TIMER_TARGETS,
    TORCH_LIBRARY_CALLS,
    TORCH_NAMESPACES,
)

_TEXT_LIMIT = 160


@dataclass(frozen=True)
class Tripwire:
    """A suspicious construct at one line of the candidate's source (or a file it uses).

    path: absolute path of the file the line is in; line: 1-based; text: the line, stripped.
    confirmed_by: the runtime checks whose failure confirms it (see `rules.RULES`).
    """

    rule: str
    path: str
    line: int
    text: str
    why: str
    confirmed_by: tuple[str, ...]


def scan_candidate(path: str | Path, function: str | None = None) -> tuple[Tripwire, ...]:
    """The tripwires of a candidate file, sorted by (path, line, rule).

    With `function`, only code that can run for that function counts: the module-level code of
    the file and of the local modules it imports, and the functions and classes reachable from
    `function` by name. Without it (or when the name is not defined statically in the file),
    everything in the file and its local modules counts. A file that does not parse yields no
    tripwires: the worker reports its syntax error.
    """
    file = Path(path).expanduser()
    if not file.is_file():
        what = "is a directory" if file.is_dir() else "does not exist"
        raise UsageError(
            f"candidate file {file.resolve()} {what}; name the .py file that defines the kernel."
        )
    file = file.resolve()
    return _Scan(file).run(function)


# --- the candidate and its local modules -------------------------------------------------------


@dataclass
class _Reading:
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


# Stands for every top-level function and class of a module (a module object passed around).
_EVERY_SYMBOL = "*"


class _Scan:
    """One candidate's scan: the Python modules read so far and the source files scanned."""

    def __init__(self, candidate: Path):
        self.candidate = candidate
        self.root = candidate.parent
        self.readings: dict[Path, _Reading | None] = {}
        self.sources = _SourceFiles(self.root)

    def run(self, function: str | None) -> tuple[Tripwire, ...]:
        reading = self.read(self.candidate)
        if reading is None:
            return ()
        everything = function is None or not (
            function in reading.symbols
            or function in reading.bindings
            or function in reading.module_names
        )
        queue: deque[tuple[Path, str | None]] = deque([(self.candidate, None)])
        if function is not None and not everything:
            queue.append((self.candidate, function))
        seen: set[tuple[Path, str | None]] = set()
        kept: set[Tripwire] = set()
        while queue:
            item = queue.popleft()
            if item in seen:
                continue
            seen.add(item)
            module = self.read(item[0])
            if module is None:
                continue
            owner = item[1]
            if owner == _EVERY_SYMBOL:
                queue.extend((module.path, symbol) for symbol in module.symbols)
                continue
            if owner is not None and owner not in module.symbols:
                if owner in module.bindings:
                    queue.extend(self._targets(module.bindings[owner], ()))
                continue
            kept.update(tripwire for tripwire, where in module.found if where == owner)
            for dotted in module.imports[owner]:
                target = self.find(dotted)
                if target is not None:
                    queue.append((target, None))
            for chain in module.references[owner]:
                queue.extend(self._resolve(module, chain))
            if owner is None and everything:
                queue.append((module.path, _EVERY_SYMBOL))
        return tuple(sorted(kept, key=lambda t: (t.path, t.line, t.rule)))

    def read(self, path: Path) -> _Reading | None:
        if path not in self.readings:
            self.readings[path] = _read_python(path, self)
        return self.readings[path]

    def find(self, dotted: str) -> Path | None:
        """The local file of a module name, as the worker's import would find it (the
        candidate's folder comes first on its path)."""
        if not dotted or any(not part.isidentifier() for part in dotted.split(".")):
            return None
        base = self.root.joinpath(*dotted.split("."))
        for file in (base.with_suffix(".py"), base / "__init__.py"):
            found = self.sources.locate(file)
            if found is not None:
                return found
        return None

    def dotted_name(self, path: Path) -> str:
        parts = list(path.relative_to(self.root).with_suffix("").parts)
        if parts and parts[-1] == "__init__":
            parts.pop()
        return ".".join(parts)

    def _resolve(self, module: _Reading, chain: tuple[str, ...]) -> list[tuple[Path, str | None]]:
        head = chain[0]
        if head in module.symbols:
            return [(module.path, head)]
        if head in module.bindings:
            return self._targets(module.bindings[head], chain[1:])
        return []

    def _targets(
        self, binding: tuple[str, str | None], rest: tuple[str, ...]
    ) -> list[tuple[Path, str | None]]:
        dotted, symbol = binding
        if symbol is not None:
            target = self.find(dotted)
            return [] if target is None else [(target, None), (target, symbol)]
        # `import pkg.sub` then `pkg.sub.fn`: the longest prefix that is a local module.
        for size in range(len(rest), -1, -1):
            target = self.find(".".join((dotted, *rest[:size])))
            if target is not None:
                symbol = rest[size] if size < len(rest) else _EVERY_SYMBOL
                return [(target, None), (target, symbol)]
        return []


def _read_python(path: Path, scan: _Scan) -> _Reading | None:
    try:
        data = path.read_bytes()
        tree = ast.parse(data, filename=str(path))
        source = _decode_python(data)
    except (SyntaxError, ValueError, UnicodeDecodeError, RecursionError, OSError):
        return None
    reader = _PythonReader(path, source, tree, scan)
    try:
        reader.visit(tree)
    except RecursionError:
        return None
    return reader.reading


def _decode_python(data: bytes) -> str:
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding)


def _physical_lines(source: str) -> list[str]:
    # The parser's notion of a line: form feeds and other Unicode breaks do not end one.
    return source.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _line_text(lines: list[str], line: int) -> str:
    text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    return text if len(text) <= _TEXT_LIMIT else text[: _TEXT_LIMIT - 1] + "…"


def _tripwire(rule: str, path: Path, line: int, lines: list[str]) -> Tripwire:
    spec = RULES[rule]
    return Tripwire(
        rule=rule,
        path=str(path),
        line=line,
        text=_line_text(lines, line),
        why=spec.why,
        confirmed_by=spec.confirmed_by,
    )


def _matches(patterns: frozenset[str], name: str) -> bool:
    if name in patterns:
        return True
    parts = name.split(".")
    return any(".".join(parts[:size]) + ".*" in patterns for size in range(1, len(parts)))


def _lookup(table: Mapping[str, str], name: str) -> str | None:
    found = table.get(name)
    parts = name.split(".")
    for size in range(len(parts) - 1, 0, -1):
        if found is not None:
            break
        found = table.get(".".join(parts[:size]) + ".*")
    return found


def _module_rule(module: str) -> str | None:
    parts = module.split(".")
    for size in range(len(parts), 0, -1):
        rule = IMPORTS.get(".".join(parts[:size]))
        if rule is not None:
            return rule
    return None


# --- Python scopes -------------------------------------------------------------------------------

_BUILTINS = frozenset(dir(builtins))
# Expressions that evaluate to a module named by a literal.
_MODULE_LOOKUPS = frozenset({"importlib.import_module", "__import__"})


def _scope_nodes(body: Iterable[ast.AST]) -> Iterator[ast.AST]:
    """Every node of a scope's body, not entering nested functions, lambdas or classes (their
    names, decorators and defaults belong to this scope, their bodies do not)."""
    stack = list(body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            stack.extend(node.decorator_list)
            stack.extend(_defaults(node.args))
        elif isinstance(node, ast.ClassDef):
            stack.extend(node.decorator_list)
            stack.extend(node.bases)
        elif isinstance(node, ast.Lambda):
            stack.extend(_defaults(node.args))
        else:
            stack.extend(ast.iter_child_nodes(node))


def _defaults(args: ast.arguments) -> list[ast.expr]:
    return [*args.defaults, *(d for d in args.kw_defaults if d is not None)]


def _parameters(args: ast.arguments) -> list[ast.arg]:
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    every.extend(a for a in (args.vararg, args.kwarg) if a is not None)
    return every


_NAMED_BINDINGS = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.ExceptHandler,
    ast.MatchAs,
    ast.MatchStar,
)


@dataclass
class _Frame:
    """A function's scope: the names it binds, those it declares global or nonlocal, those it
    binds by import (to their origin) and those it binds to compiled code."""

    local: set[str]
    declared_global: set[str]
    declared_nonlocal: set[str]
    imported: dict[str, str]
    code_names: set[str]


def _frame(
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, reader: _PythonReader
) -> _Frame:
    body: list[ast.AST] = [node.body] if isinstance(node, ast.Lambda) else list(node.body)
    local = {a.arg for a in _parameters(node.args)}
    declared_global: set[str] = set()
    declared_nonlocal: set[str] = set()
    imported: dict[str, str] = {}
    code_names: set[str] = set()
    for inner in _scope_nodes(body):
        if isinstance(inner, ast.Global):
            declared_global.update(inner.names)
        elif isinstance(inner, ast.Nonlocal):
            declared_nonlocal.update(inner.names)
        elif isinstance(inner, ast.Name) and isinstance(inner.ctx, (ast.Store, ast.Del)):
            local.add(inner.id)
        elif isinstance(inner, _NAMED_BINDINGS) and inner.name:
            local.add(inner.name)
        elif isinstance(inner, (ast.Import, ast.ImportFrom)):
            for name, origin in _import_aliases(inner):
                local.add(name)
                imported[name] = origin
        if isinstance(inner, ast.Assign) and reader.makes_code(inner.value):
            code_names.update(n.id for t in inner.targets for n in _target_names(t))
    declared = declared_global | declared_nonlocal
    return _Frame(local - declared, declared_global, declared_nonlocal, imported, code_names)


def _import_aliases(node: ast.Import | ast.ImportFrom) -> Iterator[tuple[str, str]]:
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


def _target_names(target: ast.AST) -> Iterator[ast.Name]:
    if isinstance(target, ast.Name):
        yield target
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _target_names(element)
    elif isinstance(target, ast.Starred):
        yield from _target_names(target.value)


def _root_name(node: ast.AST) -> ast.Name | None:
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return node if isinstance(node, ast.Name) else None


def _is_main_guard(node: ast.stmt) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "__main__"
    )


def _string(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _argument(call: ast.Call, position: int, keyword: str | None = None) -> ast.expr | None:
    if len(call.args) > position and not any(
        isinstance(a, ast.Starred) for a in call.args[: position + 1]
    ):
        return call.args[position]
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    return None


# --- the Python reader ---------------------------------------------------------------------------


class _PythonReader(ast.NodeVisitor):
    """One pass over a module: tripwires, tagged with their owner, and the names each owner
    refers to (for following a candidate function into the code it can reach)."""

    def __init__(self, path: Path, source: str, tree: ast.Module, scan: _Scan):
        self.path = path
        self.lines = _physical_lines(source)
        self.scan = scan
        self.parents = {
            child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)
        }
        self.frames: list[_Frame] = []
        self.module_code_names: set[str] = set()
        self.owner: str | None = None
        self.class_owner: str | None = None
        self.tree = tree
        self.aliases: dict[str, str] = {}
        self.module_names: set[str] = set()
        # Top-level definitions (possibly inside module-level if/try blocks): what a candidate
        # function can reach by name.
        symbols: set[str] = set()
        for node in _scope_nodes(tree.body):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                self.aliases.update(_import_aliases(node))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.module_names.add(node.name)
                symbols.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                self.module_names.add(node.id)
        self.module_names -= set(self.aliases)
        self.reading = _Reading(
            path=path,
            dotted=scan.dotted_name(path),
            symbols=symbols,
            bindings={},
            module_names=self.module_names | set(self.aliases),
        )
        self.kept_state = self._kept_state(tree)
        self.module_code_names = {
            name.id
            for node in _scope_nodes(tree.body)
            if isinstance(node, ast.Assign) and self.makes_code(node.value)
            for target in node.targets
            for name in _target_names(target)
        }
        self.memoised = {
            node.name
            for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and self._memoised(node)
        }

    # -- names ---------------------------------------------------------------------------------

    def origin(self, name: str) -> str | None:
        """The dotted name a bare name stands for here: an import, a builtin, or None for the
        module's own variables and locals."""
        for frame in reversed(self.frames):
            if name in frame.declared_global:
                break
            if name in frame.declared_nonlocal:
                continue
            if name in frame.imported:
                return frame.imported[name]
            if name in frame.local:
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
            base = _string(_argument(node, 0, "name"))
        elif isinstance(node, ast.Subscript) and self.qualname(node.value) == "sys.modules":
            base = _string(node.slice)
        else:
            return None
        if base is None:
            return None
        return ".".join([base, *reversed(parts)])

    def is_local(self, name: str) -> bool:
        for frame in reversed(self.frames):
            if name in frame.declared_global:
                return False
            if name in frame.local:
                return True
        return False

    def makes_code(self, value: ast.AST | None) -> bool:
        """Whether a value is compiled code (a kernel, an extension module), not data."""
        if isinstance(value, ast.Name):
            if any(value.id in frame.code_names for frame in self.frames):
                return True
            return value.id in self.module_code_names and not self.is_local(value.id)
        if isinstance(value, ast.Attribute):
            # A function of a compiled module: `_launch = module.scale`.
            return self.makes_code(value.value)
        if isinstance(value, (ast.Await, ast.NamedExpr)):
            return self.makes_code(value.value)
        if not isinstance(value, ast.Call):
            return False
        if isinstance(value.func, ast.Attribute) and value.func.attr in CODE_METHODS:
            return True
        name = self.qualname(value.func)
        if name in CODE_FACTORIES:
            return True
        # `triton.jit(fn)`, `torch.compile(mode=...)(fn)`
        return isinstance(value.func, ast.Call) and self.makes_code(value.func)

    # -- recording -----------------------------------------------------------------------------

    def flag(self, rule: str, node: ast.AST | int) -> None:
        line = node if isinstance(node, int) else getattr(node, "lineno", 0)
        self.reading.found.append((_tripwire(rule, self.path, line, self.lines), self.owner))

    def in_function(self) -> bool:
        return bool(self.frames)

    # -- scopes --------------------------------------------------------------------------------

    def visit_Module(self, node: ast.Module) -> None:
        self._flag_identity_keys(node.body)
        for statement in node.body:
            self.visit(statement)

    def visit_If(self, node: ast.If) -> None:
        # The main block never runs when the worker imports the file.
        if not self.frames and self.owner is None and _is_main_guard(node):
            for statement in node.orelse:
                self.visit(statement)
            return
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for expr in (*node.decorator_list, *_defaults(node.args)):
            self.visit(expr)
        outer = self.owner
        if outer is None:
            self.owner = self.class_owner or node.name
        if node.name in self.memoised and self._takes_tensors(node):
            self.flag("address-keyed-cache", node)
        self.frames.append(_frame(node, self))
        self._flag_identity_keys(node.body)
        for statement in node.body:
            self.visit(statement)
        self.frames.pop()
        self.owner = outer

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        for expr in _defaults(node.args):
            self.visit(expr)
        self.frames.append(_frame(node, self))
        self._flag_identity_keys([node.body])
        self.visit(node.body)
        self.frames.pop()

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
        if _string(node.value) is None and not isinstance(node.value, ast.JoinedStr):
            self.visit(node.value)

    # -- names and attributes ------------------------------------------------------------------

    def visit_Name(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Load):
            return
        parent = self.parents.get(node)
        if not (isinstance(parent, ast.Attribute) and parent.value is node):
            self.reading.references[self.owner].add((node.id,))
            self._reference(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in FRAME_ATTRIBUTES:
            self.flag("frame-walking", node)
        if node.attr in RAW_MEMORY_METHODS:
            self.flag("ctypes", node)
        if isinstance(node.ctx, ast.Load):
            parent = self.parents.get(node)
            if not (isinstance(parent, ast.Attribute) and parent.value is node):
                chain = _chain(node)
                if chain is not None:
                    self.reading.references[self.owner].add(chain)
            self._reference(node)
        self.generic_visit(node)

    def _reference(self, node: ast.Name | ast.Attribute) -> None:
        name = self.qualname(node)
        if name is None:
            return
        rule = _lookup(REFERENCES, name)
        if rule is None or self._harmless(name, node):
            return
        self.flag(rule, node)

    def _harmless(self, name: str, node: ast.AST) -> bool:
        """Uses of names in REFERENCES that read nothing: writes to the environment, and a
        module looking itself up in sys.modules."""
        parent = self.parents.get(node)
        if name in ("os.environ", "os.environb"):
            if isinstance(parent, ast.Subscript) and not isinstance(parent.ctx, ast.Load):
                return True
            return isinstance(parent, ast.Attribute) and parent.attr in (
                "setdefault",
                "update",
                "pop",
                "clear",
                "__setitem__",
                "__delitem__",
            )
        if name == "sys.modules":
            if isinstance(parent, ast.Subscript):
                key: ast.AST | None = parent.slice
                if not isinstance(parent.ctx, ast.Load):
                    return True
            elif isinstance(parent, ast.Attribute) and parent.attr in ("get", "pop"):
                call = self.parents.get(parent)
                key = call.args[0] if isinstance(call, ast.Call) and call.args else None
            else:
                return False
            return isinstance(key, ast.Name) and key.id == "__name__"
        return False

    # -- imports -------------------------------------------------------------------------------

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            rule = _module_rule(alias.name)
            if rule is not None:
                self.flag(rule, node)
            parts = alias.name.split(".")
            loaded = [".".join(parts[:size]) for size in range(1, len(parts) + 1)]
            self._load_local(loaded)
            if self.scan.find(alias.name) is not None or self.scan.find(parts[0]) is not None:
                bound = alias.asname or parts[0]
                self.reading.bindings[bound] = (alias.name if alias.asname else parts[0], None)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level == 0:
            names = [module, *(f"{module}.{alias.name}" for alias in node.names)]
            for rule in set(filter(None, map(_module_rule, names))):
                self.flag(rule, node)
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

    # -- calls ---------------------------------------------------------------------------------

    def visit_Call(self, node: ast.Call) -> None:
        name = self.qualname(node.func)
        if name is not None:
            self._known_call(node, name)
        self._patching_call(node, name)
        self._counter_call(node, name)
        if isinstance(node.func, ast.Attribute):
            self._method_call(node, node.func)
        self.generic_visit(node)

    def _known_call(self, node: ast.Call, name: str) -> None:
        rule = _lookup(CALLS, name)
        if rule is not None:
            self.flag(rule, node)
        if name in DYNAMIC_CODE_CALLS:
            first = _argument(node, 0, "source") or _argument(node, 0, "name")
            if first is not None and _string(first) is None:
                self.flag("dynamic-code", node)
        if name in SHELL_CALLS:
            words = " ".join(filter(None, map(_string, ast.walk(node))))
            self.flag(
                "package-install" if INSTALLER_WORDS.search(words) else SHELL_CALLS[name], node
            )
        if name in TORCH_LIBRARY_CALLS:
            target = _string(_argument(node, 0))
            if target is not None and re.split(r"::|\.", target)[0] in TORCH_NAMESPACES:
                self.flag("torch-patching", node)
        if name in INLINE_SOURCE_CALLS:
            positions, keywords = INLINE_SOURCE_CALLS[name]
            for expr in _arguments(node, positions, keywords):
                self._scan_sources(expr)
        if name in SOURCE_FILE_CALLS:
            positions, keywords = SOURCE_FILE_CALLS[name]
            for expr in _arguments(node, positions, keywords):
                self._scan_source_files(expr)
        if name == "os.putenv" and _string(_argument(node, 0)) in PRECISION_ENVIRONMENT:
            self.flag("torch-patching", node)

    def _counter_call(self, node: ast.Call, name: str | None) -> None:
        """`next(_calls)` on a module-level counter."""
        if name == "next" and node.args and self.in_function():
            root = _root_name(node.args[0])
            if root is not None and self._kept_name(root):
                self.flag("module-state", node)

    def _method_call(self, node: ast.Call, func: ast.Attribute) -> None:
        receiver = self.qualname(func.value)
        if receiver in ("os.environ", "os.environb"):
            keys = (
                [_string(_argument(node, 0))] if func.attr in ("setdefault", "__setitem__") else []
            )
            if func.attr == "update":
                keys = [kw.arg for kw in node.keywords]
                if node.args and isinstance(node.args[0], ast.Dict):
                    keys.extend(_string(key) for key in node.args[0].keys)
            if any(key in PRECISION_ENVIRONMENT for key in keys):
                self.flag("torch-patching", node)
        if not self.in_function():
            return
        root = _root_name(func.value)
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
            root = _root_name(kw.value) if kw.arg == "out" else None
            if root is not None and self._kept_name(root):
                self.flag("module-state", node)

    def _patching_call(self, node: ast.Call, name: str | None) -> None:
        """setattr, delattr, mock.patch and monkeypatch on timers and libraries."""
        target: str | None = None
        if name in MOCK_PATCH_CALLS:
            target = _string(_argument(node, 0, "target"))
        elif name in MOCK_PATCH_OBJECT_CALLS:
            target = self._attribute_target(_argument(node, 0), _argument(node, 1))
        elif name in SETATTR_CALLS or (
            isinstance(node.func, ast.Attribute) and node.func.attr in SETATTR_METHODS
        ):
            first = _argument(node, 0)
            dotted = _string(first)
            if dotted is not None:
                target = dotted if "." in dotted else None
            else:
                target = self._attribute_target(first, _argument(node, 1))
        if target is not None:
            self._flag_write(target, node)

    def _attribute_target(self, owner: ast.expr | None, attribute: ast.expr | None) -> str | None:
        base = None if owner is None else self.qualname(owner)
        if base is None or attribute is None:
            return None
        return f"{base}.{_string(attribute) or '<computed>'}"

    def _flag_write(self, target: str, node: ast.AST) -> None:
        if _matches(TIMER_TARGETS, target):
            self.flag("timer-patching", node)
        elif _matches(LIBRARY_TARGETS, target) and not _matches(LIBRARY_SETTINGS, target):
            self.flag("torch-patching", node)
        elif target in PROCESS_HOOKS:
            self.flag("process-control", node)

    # -- writes --------------------------------------------------------------------------------

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._write(target, node.value, node)
        self.generic_visit(node)

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
            frame = self.frames[-1]
            rebinds = target.id in frame.declared_global | frame.declared_nonlocal
            if rebinds and not (
                isinstance(node, ast.Assign)
                and (isinstance(value, ast.Constant) or self.makes_code(value))
            ):
                self.flag("module-state", node)

    def _subscript_write(
        self, target: ast.Subscript, value: ast.AST | None, node: ast.stmt
    ) -> None:
        key = _string(target.slice)
        container = target.value
        container_name = self.qualname(container)
        if key is not None:
            if container_name == "sys.modules":
                self._flag_write(key, node)
            elif container_name in ("os.environ", "os.environb") and key in PRECISION_ENVIRONMENT:
                self.flag("torch-patching", node)
            elif isinstance(container, ast.Attribute) and container.attr == "__dict__":
                owner = self.qualname(container.value)
                if owner is not None:
                    self._flag_write(f"{owner}.{key}", node)
            elif (
                isinstance(container, ast.Call)
                and self.qualname(container.func) == "vars"
                and container.args
            ):
                owner = self.qualname(container.args[0])
                if owner is not None:
                    self._flag_write(f"{owner}.{key}", node)
        root = _root_name(target)
        if (
            root is not None
            and self.in_function()
            and self._kept_name(root)
            and not (isinstance(node, ast.Assign) and self.makes_code(value))
        ):
            self.flag("module-state", node)

    def _kept_name(self, name: ast.Name) -> bool:
        return name.id in self.kept_state and not self.is_local(name.id)

    def _kept_state(self, tree: ast.Module) -> set[str]:
        """Module-level names bound to mutable containers or to tensors."""
        kept: set[str] = set()
        for node in _scope_nodes(tree.body):
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            if self._is_mutable(value):
                kept.update(n.id for t in targets for n in _target_names(t))
        return kept

    def _is_mutable(self, value: ast.AST) -> bool:
        if isinstance(
            value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)
        ):
            return True
        if isinstance(value, ast.Call):
            name = self.qualname(value.func)
            return name in CONTAINER_FACTORIES or name in TENSOR_FACTORIES
        return False

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
        text = _string_text(node, self.lines) if marked else None
        if text is not None:
            self._scan_text(text)
        self.generic_visit(node)

    # -- tensor identity -----------------------------------------------------------------------

    def _flag_identity_keys(self, body: list[ast.stmt] | list[ast.expr]) -> None:
        nodes = list(_scope_nodes(body))
        keyed = _IdentityFlow(self, nodes)
        for node in keyed.key_uses():
            self.flag("address-keyed-cache", node)

    def _memoised(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        for decorator in node.decorator_list:
            func = decorator.func if isinstance(decorator, ast.Call) else decorator
            if self.qualname(func) in MEMO_DECORATORS:
                return True
        return False

    def _takes_tensors(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        for arg in _parameters(node.args):
            annotation = arg.annotation
            if annotation is None:
                continue
            if re.search(r"\bTensor\b", _string(annotation) or ast.unparse(annotation)):
                return True
        return False

    # -- CUDA and C++ sources ------------------------------------------------------------------

    def _scan_sources(self, expr: ast.AST) -> None:
        for text in _SourceResolver(self).texts(expr):
            self._scan_text(text)

    def _scan_source_files(self, expr: ast.AST) -> None:
        for file in _SourceResolver(self).files(expr):
            for tripwire in self.scan.sources.scan_file(file):
                self.reading.found.append((tripwire, self.owner))

    def _scan_text(self, text: _Text) -> None:
        for rule, offset in _cuda_sightings(text.text):
            self.flag(rule, text.lines[offset] if offset < len(text.lines) else text.lines[-1])
        for include in _local_includes(text.text):
            file = self.scan.sources.locate(self.path.parent / include)
            if file is not None:
                for tripwire in self.scan.sources.scan_file(file):
                    self.reading.found.append((tripwire, self.owner))


def _chain(node: ast.Attribute) -> tuple[str, ...] | None:
    parts: list[str] = []
    current: ast.AST = node
    while isinstance(current, ast.Attribute):
        parts.append(current.attr)
        current = current.value
    if not isinstance(current, ast.Name):
        return None
    return (current.id, *reversed(parts))


def _arguments(
    call: ast.Call, positions: tuple[int, ...], keywords: tuple[str, ...]
) -> Iterator[ast.expr]:
    for position in positions:
        if len(call.args) > position:
            yield call.args[position]
    for kw in call.keywords:
        if kw.arg in keywords:
            yield kw.value


# --- tensor identity used as a key ----------------------------------------------------------------


class _IdentityFlow:
    """Where a tensor's address, id or version reaches a key in one scope: a subscript, a
    dictionary method, a membership test, a comparison with kept state, or a memoised call.
    Alignment tests (`x.data_ptr() % 16`) and kernel arguments are not keys."""

    def __init__(self, reader: _PythonReader, nodes: list[ast.AST]):
        self.reader = reader
        self.nodes = nodes
        self.tainted: set[str] = set()
        changed = True
        while changed:
            changed = False
            for node in nodes:
                targets: list[ast.AST]
                if isinstance(node, ast.Assign):
                    targets, value = node.targets, node.value
                elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
                    targets, value = [node.target], node.value
                else:
                    continue
                if value is None or not self.carries(value):
                    continue
                for target in targets:
                    for name in _target_names(target):
                        if name.id not in self.tainted:
                            self.tainted.add(name.id)
                            changed = True

    def carries(self, expr: ast.AST) -> bool:
        if isinstance(expr, ast.Call):
            func = expr.func
            if isinstance(func, ast.Attribute) and func.attr in IDENTITY_METHODS:
                return True
            if isinstance(func, ast.Name) and self.reader.origin(func.id) == "id":
                return True
            builds = (
                isinstance(func, ast.Name) and self.reader.origin(func.id) in KEY_BUILDERS
            ) or (isinstance(func, ast.Attribute) and func.attr in ("format", "join"))
            return builds and any(
                self.carries(a) for a in (*expr.args, *(k.value for k in expr.keywords))
            )
        if isinstance(expr, ast.Attribute):
            return expr.attr in IDENTITY_ATTRIBUTES
        if isinstance(expr, ast.Name):
            return expr.id in self.tainted
        if isinstance(expr, ast.BinOp):
            if isinstance(expr.op, (ast.Mod, ast.BitAnd)):
                return False
            return self.carries(expr.left) or self.carries(expr.right)
        if isinstance(expr, ast.Subscript):
            return self.carries(expr.value)
        if isinstance(expr, ast.IfExp):
            return self.carries(expr.body) or self.carries(expr.orelse)
        if isinstance(expr, (ast.Tuple, ast.List, ast.Set, ast.JoinedStr)):
            return any(self.carries(e) for e in ast.iter_child_nodes(expr))
        if isinstance(expr, (ast.FormattedValue, ast.Starred)):
            return self.carries(expr.value)
        return False

    def key_uses(self) -> Iterator[ast.AST]:
        for node in self.nodes:
            if isinstance(node, ast.Subscript) and self.carries(node.slice):
                yield node
            elif isinstance(node, ast.Call):
                func = node.func
                arguments = [*node.args, *(k.value for k in node.keywords)]
                if isinstance(func, ast.Attribute) and func.attr in KEY_METHODS:
                    if node.args and self.carries(node.args[0]):
                        yield node
                elif (
                    isinstance(func, ast.Name)
                    and func.id in self.reader.memoised
                    and not self.reader.is_local(func.id)
                    and any(self.carries(a) for a in arguments)
                ):
                    yield node
            elif isinstance(node, ast.Compare):
                yield from self._compared(node)

    def _compared(self, node: ast.Compare) -> Iterator[ast.AST]:
        left = node.left
        for op, right in zip(node.ops, node.comparators, strict=True):
            if isinstance(op, (ast.In, ast.NotIn)) and self.carries(left):
                yield node
                return
            if isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)):
                for mine, other in ((left, right), (right, left)):
                    if self.carries(mine) and not self.carries(other) and self._kept(other):
                        yield node
                        return
            left = right

    def _kept(self, expr: ast.AST) -> bool:
        """Whether an expression reads state kept across calls: a module-level variable or an
        attribute of `self`."""
        root = _root_name(expr)
        if root is None:
            return False
        if root.id == "self":
            return root is not expr
        return (
            root.id in self.reader.module_names
            and root.id not in self.reader.memoised
            and not self.reader.is_local(root.id)
            and self.reader.origin(root.id) is None
        )


# --- source text inside Python strings ---------------------------------------------------------


@dataclass(frozen=True)
class _Text:
    """Source text as the compiler sees it, with the file line of each character."""

    text: str
    lines: tuple[int, ...]

    def __add__(self, other: _Text) -> _Text:
        return _Text(self.text + other.text, self.lines + other.lines)


_STRING_START = re.compile(r"([rRbBuUfF]{0,2})('''|\"\"\"|'|\")")
_SIMPLE_ESCAPES = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "v": "\v",
    "0": "\0",
}
_ESCAPE = re.compile(
    r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|N\{[^}]*\}|[0-7]{1,3}|.)", re.S
)


def _string_text(node: ast.Constant | ast.JoinedStr, lines: list[str]) -> _Text | None:
    """The text of a string literal (implicitly concatenated parts and f-strings included,
    replacement fields as a placeholder) with each character's line in the file."""
    segment = _segment(node, lines)
    first_line = node.lineno
    if segment is None:
        return None
    parsed = _literal_parts(segment, first_line)
    if parsed is not None:
        return parsed
    # Fall back on the value with every character on the literal's first line.
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _Text(node.value, (first_line,) * len(node.value))
    return None


def _segment(node: ast.expr, lines: list[str]) -> str | None:
    """The source of a node (ast.get_source_segment, without splitting the file each time);
    columns are UTF-8 byte offsets."""
    first, last = node.lineno - 1, (node.end_lineno or 0) - 1
    if not 0 <= first <= last < len(lines) or node.end_col_offset is None:
        return None
    if first == last:
        return lines[first].encode()[node.col_offset : node.end_col_offset].decode(errors="replace")
    head = lines[first].encode()[node.col_offset :].decode(errors="replace")
    tail = lines[last].encode()[: node.end_col_offset].decode(errors="replace")
    return "\n".join([head, *lines[first + 1 : last], tail])


def _literal_parts(segment: str, first_line: int) -> _Text | None:
    chars: list[str] = []
    lines: list[int] = []
    line = first_line
    position = 0
    while position < len(segment):
        ch = segment[position]
        if ch == "\n":
            line += 1
            position += 1
            continue
        if ch in " \t\r\f\\":
            position += 1
            continue
        if ch == "#":
            end = segment.find("\n", position)
            position = len(segment) if end < 0 else end
            continue
        start = _STRING_START.match(segment, position)
        if start is None:
            return None
        prefix, quote = start.group(1).lower(), start.group(2)
        if "b" in prefix:
            return None
        body_start = cursor = start.end()
        while not segment.startswith(quote, cursor):
            if cursor >= len(segment):
                return None
            cursor += 2 if segment[cursor] == "\\" else 1
        body = segment[body_start:cursor]
        line = _decode_body(body, prefix, line, chars, lines)
        position = cursor + len(quote)
    return _Text("".join(chars), tuple(lines))


def _decode_body(body: str, prefix: str, line: int, chars: list[str], lines: list[int]) -> int:
    """Append the decoded characters of one literal's body; return the line it ends on."""
    raw, formatted = "r" in prefix, "f" in prefix
    position = 0
    while position < len(body):
        ch = body[position]
        if ch == "\n":
            chars.append("\n")
            lines.append(line)
            line += 1
            position += 1
        elif formatted and body.startswith(("{{", "}}"), position):
            chars.append(ch)
            lines.append(line)
            position += 2
        elif formatted and ch == "{":
            end, depth = position + 1, 1
            while end < len(body) and depth:
                depth += {"{": 1, "}": -1}.get(body[end], 0)
                end += 1
            chars.append("_")
            lines.append(line)
            line += body.count("\n", position, end)
            position = end
        elif ch == "\\" and not raw and (escape := _ESCAPE.match(body, position)):
            code = escape.group(1)
            if code == "\n":
                line += 1
            else:
                decoded = _unescape(code)
                chars.extend(decoded)
                lines.extend([line] * len(decoded))
            position = escape.end()
        else:
            chars.append(ch)
            lines.append(line)
            position += 1
    return line


def _unescape(code: str) -> str:
    if code in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[code]
    if code[0] in "xuU":
        return chr(int(code[1:], 16))
    if code[0] in "01234567":
        return chr(int(code, 8))
    if code.startswith("N{"):
        return "?"
    return "\\" + code


class _SourceResolver:
    """Follows the expression handed to a compiler back to the string literals (or the source
    files) it is built from: names assigned in the same function or at module level, `+`,
    lists, `.format()` and friends, `textwrap.dedent`."""

    _DEPTH = 8
    # Expressions followed per compiler argument: a file cannot make the scan blow up by
    # reassigning a name to combinations of itself.
    _BUDGET = 500

    def __init__(self, reader: _PythonReader):
        self.reader = reader
        self.budget = self._BUDGET

    def _spend(self, depth: int) -> bool:
        self.budget -= 1
        return depth <= self._DEPTH and self.budget > 0

    def texts(self, expr: ast.AST, depth: int = 0) -> list[_Text]:
        if not self._spend(depth):
            return []
        if isinstance(expr, (ast.Constant, ast.JoinedStr)):
            if isinstance(expr, ast.Constant) and not isinstance(expr.value, str):
                return []
            text = _string_text(expr, self.reader.lines)
            return [] if text is None else [text]
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            left, right = self.texts(expr.left, depth + 1), self.texts(expr.right, depth + 1)
            if len(left) == 1 and len(right) == 1:
                return [left[0] + right[0]]
            return left + right
        if isinstance(expr, (ast.List, ast.Tuple)):
            return [text for e in expr.elts for text in self.texts(e, depth + 1)]
        if isinstance(expr, ast.Name):
            return [text for v in self._values(expr) for text in self.texts(v, depth + 1)]
        if isinstance(expr, ast.Call):
            func = expr.func
            parts: list[ast.AST] = []
            if isinstance(func, ast.Attribute) and func.attr == "join" and expr.args:
                parts.append(expr.args[0])
            elif isinstance(func, ast.Attribute) and func.attr in _TEXT_METHODS:
                parts.append(func.value)
            elif self.reader.qualname(func) in _TEXT_FUNCTIONS and expr.args:
                parts.append(expr.args[0])
            return [text for part in parts for text in self.texts(part, depth + 1)]
        return []

    def files(self, expr: ast.AST, depth: int = 0) -> list[Path]:
        """Local C/CUDA files named by string literals inside an expression."""
        if not self._spend(depth):
            return []
        found: list[Path] = []
        for node in ast.walk(expr):
            value = _string(node)
            if value is not None and Path(value).suffix in SOURCE_SUFFIXES:
                file = self.reader.scan.sources.locate(self.reader.path.parent / value)
                if file is not None:
                    found.append(file)
            elif isinstance(node, ast.Name):
                for assigned in self._values(node):
                    found.extend(self.files(assigned, depth + 1))
        return found

    def _values(self, name: ast.Name) -> list[ast.AST]:
        """Values assigned to a name in its function (when local) or at module level."""
        scope = self._enclosing_function(name)
        body: list[ast.stmt] = self.reader.tree.body
        if scope is not None and name.id in {
            node.id
            for node in _scope_nodes(scope.body)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
        }:
            body = scope.body
        values: list[ast.AST] = []
        for node in _scope_nodes(body):
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
                targets = [node.target]
            else:
                continue
            if any(n.id == name.id for t in targets for n in _target_names(t)):
                values.append(node.value)
        return values

    def _enclosing_function(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        parent = self.reader.parents.get(node)
        while parent is not None:
            if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return parent
            parent = self.reader.parents.get(parent)
        return None


_TEXT_METHODS = frozenset(
    {"format", "format_map", "replace", "strip", "lstrip", "rstrip", "encode", "expandtabs"}
)
_TEXT_FUNCTIONS = frozenset({"textwrap.dedent", "textwrap.indent", "inspect.cleandoc", "str"})


# --- CUDA and C++ text ---------------------------------------------------------------------------


class _SourceFiles:
    """C, C++ and CUDA files under the candidate's folder, each scanned once."""

    def __init__(self, root: Path):
        self.root = root
        self.scanned: dict[Path, tuple[Tripwire, ...]] = {}

    def locate(self, path: Path) -> Path | None:
        try:
            resolved = path.resolve()
        except (OSError, RuntimeError):
            return None
        if resolved.is_relative_to(self.root) and resolved.is_file():
            return resolved
        return None

    def scan_file(self, path: Path) -> tuple[Tripwire, ...]:
        if path in self.scanned:
            return self.scanned[path]
        self.scanned[path] = ()
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ()
        lines = _physical_lines(text)
        flat = "\n".join(lines)
        found = [
            _tripwire(rule, path, flat.count("\n", 0, offset) + 1, lines)
            for rule, offset in _cuda_sightings(flat)
        ]
        for include in _local_includes(flat):
            file = self.locate(path.parent / include)
            if file is not None:
                found.extend(self.scan_file(file))
        self.scanned[path] = tuple(found)
        return self.scanned[path]


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"\n]+)"', re.M)


def _local_includes(text: str) -> list[str]:
    return _INCLUDE.findall(text)


def _cuda_sightings(text: str) -> Iterator[tuple[str, int]]:
    """(rule, character offset) of each suspicious construct in C, C++ or CUDA source."""
    code, skeleton = _blank(text)
    for rule, pattern in CUDA_PATTERNS:
        for match in pattern.finditer(code):
            yield rule, match.start()
    yield from (("module-state", offset) for offset in _device_globals(skeleton))
    yield from (("module-state", offset) for offset in _function_statics(skeleton))


def _blank(text: str) -> tuple[str, str]:
    """The text with comments blanked, and with comments and string and character literals
    blanked; both keep every offset and newline."""
    code, skeleton = list(text), list(text)
    position, size = 0, len(text)

    def blank(start: int, end: int, *targets: list[str]) -> None:
        for index in range(start, end):
            if text[index] != "\n":
                for target in targets:
                    target[index] = " "

    while position < size:
        ch = text[position]
        if text.startswith("//", position):
            end = text.find("\n", position)
            end = size if end < 0 else end
            blank(position, end, code, skeleton)
            position = end
        elif text.startswith("/*", position):
            end = text.find("*/", position + 2)
            end = size if end < 0 else end + 2
            blank(position, end, code, skeleton)
            position = end
        elif ch == '"' or (ch == "'" and not (position and (text[position - 1].isalnum()))):
            end = position + 1
            while end < size and text[end] != ch and text[end] != "\n":
                end += 2 if text[end] == "\\" else 1
            blank(position + 1, min(end, size), skeleton)
            position = end + 1
        else:
            position += 1
    return "".join(code), "".join(skeleton)


_DEVICE_KEYWORD = re.compile(r"\b__(?:device|managed)__\b")
_DECLARATION_END = re.compile(r"[;{=(]")
_IMMUTABLE = re.compile(r"\b(?:const|constexpr|__constant__|__shared__)\b")


def _device_globals(skeleton: str) -> Iterator[int]:
    """`__device__` or `__managed__` variables (functions, constants and lambdas are fine)."""
    for match in _DEVICE_KEYWORD.finditer(skeleton):
        end = _DECLARATION_END.search(skeleton, match.end())
        if end is None or end.group() == "(":
            continue
        start = max(skeleton.rfind(c, 0, match.start()) for c in ";{}\n#")
        if _IMMUTABLE.search(skeleton, start + 1, end.start()):
            continue
        yield match.start()


_STATIC = re.compile(r"\bstatic\b")
_FUNCTION_HEADER = re.compile(
    r"\)\s*(?:(?:const|volatile|noexcept|override|final|mutable)\b\s*|noexcept\s*\([^)]*\)\s*"
    r"|->\s*[\w:<>,\s*&]+)*$"
)


def _function_statics(skeleton: str) -> Iterator[int]:
    """`static` variables inside function bodies (constants are fine)."""
    bodies = _function_bodies(skeleton)
    for match in _STATIC.finditer(skeleton):
        if not any(start < match.start() < end for start, end in bodies):
            continue
        end = _DECLARATION_END.search(skeleton, match.end())
        stop = len(skeleton) if end is None else end.start()
        if _IMMUTABLE.search(skeleton, match.end(), stop):
            continue
        yield match.start()


def _function_bodies(skeleton: str) -> list[tuple[int, int]]:
    """Spans of the outermost function bodies: a brace that follows a parameter list (and
    qualifiers) outside any other function body."""
    spans: list[tuple[int, int]] = []
    stack: list[tuple[bool, int]] = []
    statement = 0
    for position, ch in enumerate(skeleton):
        if ch == "{":
            inside = bool(stack) and stack[-1][0]
            header = "\n".join(
                line
                for line in skeleton[statement:position].split("\n")
                if not line.lstrip().startswith("#")
            ).strip()
            opens = inside or bool(_FUNCTION_HEADER.search(header))
            stack.append((opens, position))
            statement = position + 1
        elif ch == "}":
            if stack:
                opens, start = stack.pop()
                if opens and not (stack and stack[-1][0]):
                    spans.append((start, position))
            statement = position + 1
        elif ch == ";":
            statement = position + 1
    spans.extend((start, len(skeleton)) for opens, start in stack if opens)
    return spans
