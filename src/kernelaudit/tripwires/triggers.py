"""Triggers: decisions that a call count, the clock, the process or a file's state can flip, so
that a candidate computes one way while it is checked and another while it is timed or used.

A decision is an `if` or `while`, a conditional expression, a comprehension's filter, a `match`
subject, a subscript that picks by the value, or (for files) a `try` around a file's use. A
value reaches a decision directly or through the names of its scope, through module-level
names, and through the module's own functions that return it. A branch that only builds code,
makes folders or logs changes no output: honest wrappers compile on first use and keep
extensions on disk.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator, Set

from kernelaudit.tripwires.counters import counters
from kernelaudit.tripwires.python_names import matches
from kernelaudit.tripwires.python_source import (
    FUNCTIONS,
    Names,
    PythonFile,
    argument,
    flow,
    scope_nodes,
    string,
)

CALL_COUNT = "call-count-trigger"
CLOCK = "clock-trigger"
PROCESS = "process-trigger"
FILE = "file-trigger"
TRIGGERS = (CALL_COUNT, CLOCK, PROCESS, FILE)

CLOCK_CALLS = frozenset(
    {
        *(
            f"time.{name}{suffix}"
            for name in ("time", "monotonic", "perf_counter", "process_time", "thread_time")
            for suffix in ("", "_ns")
        ),
        "time.clock_gettime",
        "time.clock_gettime_ns",
        "time.localtime",
        "time.gmtime",
        "time.ctime",
        "time.asctime",
        "time.strftime",
        "timeit.default_timer",
        "datetime.datetime.now",
        "datetime.datetime.utcnow",
        "datetime.datetime.today",
        "datetime.date.today",
        "os.times",
        "os.getloadavg",
        "psutil.boot_time",
    }
)
# A call that names one of these paths reads the clock too.
CLOCK_PATHS = re.compile(r"/proc/uptime\b")
# os.getppid, os.environ and sys.argv are the environment rule's, flagged wherever they appear.
PROCESS_CALLS = frozenset(
    {
        "os.getpid",
        "os.getpgrp",
        "os.getpgid",
        "os.getsid",
        "threading.current_thread",
        "threading.currentThread",
        "threading.get_ident",
        "threading.get_native_id",
        "threading.main_thread",
        "threading.active_count",
        "threading.enumerate",
        "_thread.get_ident",
        "_thread.get_native_id",
        "multiprocessing.current_process",
        "multiprocessing.parent_process",
        "multiprocessing.active_children",
        "multiprocessing.process.current_process",
        "multiprocessing.process.parent_process",
        "torch.multiprocessing.current_process",
    }
)
FILE_CALLS = frozenset(
    {
        "open",
        "io.open",
        "os.open",
        "os.fdopen",
        "os.path.exists",
        "os.path.lexists",
        "os.path.isfile",
        "os.path.isdir",
        "os.path.islink",
        "os.path.getsize",
        "os.path.getmtime",
        "os.path.getatime",
        "os.path.getctime",
        "os.stat",
        "os.lstat",
        "os.access",
        "os.listdir",
        "os.scandir",
        "glob.glob",
        "glob.iglob",
        "shelve.open",
        "dbm.open",
        "sqlite3.connect",
        "numpy.load",
        "numpy.fromfile",
        "numpy.loadtxt",
        "torch.load",
        "safetensors.torch.load_file",
    }
)
# Methods of pathlib paths (whatever the receiver: a path is rarely seen being made).
FILE_METHODS = frozenset(
    {"exists", "is_file", "is_dir", "is_symlink", "read_text", "read_bytes", "stat", "iterdir"}
)
# A file can keep state only where the candidate writes one, or looks at places other processes
# share: a module with none of these reads only files it ships (a table of tuned configs).
FILE_WRITES = frozenset(
    {
        "os.open",
        "os.mknod",
        "os.mkfifo",
        "os.makedirs",
        "os.mkdir",
        "os.rename",
        "os.replace",
        "os.link",
        "os.symlink",
        "os.utime",
        "os.truncate",
        "os.remove",
        "os.unlink",
        "shutil.*",
        "torch.save",
        "numpy.save",
        "numpy.savez",
        "numpy.savetxt",
        "pickle.dump",
        "json.dump",
        "shelve.open",
        "dbm.open",
        "sqlite3.connect",
        "fcntl.*",
        "tempfile.*",
        "pathlib.Path.home",
        "os.path.expanduser",
    }
)
FILE_WRITE_METHODS = frozenset(
    {"write_text", "write_bytes", "touch", "mkdir", "unlink", "rename", "replace", "tofile"}
)
SHARED_PATHS = re.compile(r"^(?:~|/(?:tmp|var/tmp|dev/shm|proc|run)(?:/|$))")
# A mode string of open() that writes: "w", "a", "x", "r+", "wb" and the like.
_WRITE_MODES = re.compile(r"^[rbt]*[wax+][rwxabt+]*$")
# What a harmless branch may do besides building code.
PREPARING_CALLS = frozenset({"os.makedirs", "os.mkdir", "print", "warnings.warn", "logging.*"})
PREPARING_METHODS = frozenset(
    {"mkdir", "debug", "info", "warning", "error", "exception", "critical", "log"}
)
# A subscript picks a result by a count or a time (`results[calls % 2]`); one keyed by a process
# or thread id is a cache per process or thread.
_PICKED_BY = frozenset({CALL_COUNT, CLOCK})
# Helpers that return a trigger's value through other helpers are followed this deep.
_HELPER_DEPTH = 4
_TRIES = (ast.Try, ast.TryStar) if hasattr(ast, "TryStar") else (ast.Try,)
_NOTHING: frozenset[str] = frozenset()


class Triggers:
    """The decisions of a module that a trigger reaches, one scope at a time."""

    def __init__(self, names: Names, file: PythonFile, makes_code: Callable[[ast.AST], bool]):
        self.names = names
        self.makes_code = makes_code
        self.counters = counters(names, file)
        self.keeps_files = keeps_files(names, file)
        # Module-level names bound to a trigger's value, and functions that return one.
        self.module: dict[str, set[str]] = {rule: set() for rule in TRIGGERS}
        self.returning: dict[str, set[str]] = {rule: set() for rule in TRIGGERS}
        module = file.scope(file.tree)
        functions: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
        for node in module:
            if isinstance(node, ast.ClassDef):
                functions.extend(n for n in node.body if isinstance(n, FUNCTIONS))
            elif isinstance(node, FUNCTIONS):
                functions.append(node)
        for _ in range(_HELPER_DEPTH):
            before = self._size()
            for rule in self._present(module):
                self.module[rule] = self._tainted(rule, module)
            for function in functions:
                self.names.frames.append(names.frame(function))
                self._note_returns(function.name, file.scope(function))
                self.names.frames.pop()
            if self._size() == before:
                break

    def _size(self) -> int:
        return sum(map(len, (*self.module.values(), *self.returning.values())))

    def decisions(self, nodes: list[ast.AST]) -> Iterator[tuple[str, ast.AST]]:
        """(rule, node) of each decision among a scope's nodes that a trigger reaches."""
        rules = self._present(nodes)
        if not rules:
            return
        tainted = {rule: self._tainted(rule, nodes) for rule in rules}
        for node in nodes:
            if isinstance(node, _TRIES) and node.handlers:
                if FILE in rules and self._file_try(node, tainted[FILE]):
                    yield FILE, node
                continue
            picks = isinstance(node, ast.Subscript)
            for test in self._tests(node):
                for rule in rules:
                    if picks and rule not in _PICKED_BY:
                        continue
                    if self._carries(rule, test, tainted[rule]):
                        # A comprehension has no line of its own: its filter has.
                        yield rule, test if isinstance(node, ast.comprehension) else node

    def _file_try(self, node: ast.Try, tainted: set[str]) -> bool:
        """Whether a `try` decides on a file: its handlers, which run when the file is missing
        or unreadable, do more than pass or log."""
        handled = [statement for handler in node.handlers for statement in handler.body]
        if self._prepares(handled):
            return False
        return any(self._carries(FILE, statement, tainted) for statement in node.body)

    def _tests(self, node: ast.AST) -> list[ast.AST]:
        if isinstance(node, ast.If):
            return [] if self._prepares(node.body) and self._prepares(node.orelse) else [node.test]
        if isinstance(node, ast.IfExp):
            harmless = self.makes_code(node.body) and self.makes_code(node.orelse)
            return [] if harmless else [node.test]
        if isinstance(node, ast.While):
            return [node.test]
        if isinstance(node, ast.comprehension):
            return list(node.ifs)
        if isinstance(node, ast.Match):
            return [node.subject]
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            return [node.slice]
        return []

    def _prepares(self, statements: list[ast.stmt]) -> bool:
        """Whether a branch only builds code, makes folders or logs."""
        for statement in statements:
            if isinstance(statement, (ast.Pass, ast.Global, ast.Nonlocal)):
                continue
            if isinstance(statement, ast.If):
                if self._prepares(statement.body) and self._prepares(statement.orelse):
                    continue
                return False
            value = getattr(statement, "value", None)
            if not isinstance(statement, (ast.Expr, ast.Assign, ast.AnnAssign, ast.Return)):
                return False
            if value is None or not (self.makes_code(value) or self._logs(statement, value)):
                return False
        return True

    def _logs(self, statement: ast.stmt, value: ast.AST) -> bool:
        if not isinstance(statement, ast.Expr):
            return False
        if isinstance(value, ast.Constant):
            return True
        if not isinstance(value, ast.Call):
            return False
        if isinstance(value.func, ast.Attribute) and value.func.attr in PREPARING_METHODS:
            return True
        name = self.names.qualname(value.func)
        return name is not None and matches(PREPARING_CALLS, name)

    def _note_returns(self, name: str, nodes: list[ast.AST]) -> None:
        returned = [n.value for n in nodes if isinstance(n, ast.Return) and n.value is not None]
        if not returned:
            return
        for rule in self._present(nodes):
            if name not in self.returning[rule]:
                tainted = self._tainted(rule, nodes)
                if any(self._carries(rule, value, tainted) for value in returned):
                    self.returning[rule].add(name)

    def _present(self, nodes: list[ast.AST]) -> list[str]:
        """The triggers whose values a scope reads at all: only those can reach a decision."""
        return [rule for rule in TRIGGERS if any(self._reads(rule, n, _NOTHING) for n in nodes)]

    def _tainted(self, rule: str, nodes: list[ast.AST]) -> set[str]:
        found: set[str] = set()
        flow(nodes, lambda value: self._carries(rule, value, found), found)
        return found

    def _carries(self, rule: str, expr: ast.AST, tainted: Set[str]) -> bool:
        return any(self._reads(rule, node, tainted) for node in scope_nodes([expr]))

    def _reads(self, rule: str, node: ast.AST, tainted: Set[str]) -> bool:
        """Whether a node itself reads a trigger's value (its children aside)."""
        if isinstance(node, ast.Name):
            return isinstance(node.ctx, ast.Load) and (
                node.id in tainted or self._name_carries(rule, node.id)
            )
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            return rule == CALL_COUNT and isinstance(node.ctx, ast.Load) and self._counted(node)
        return isinstance(node, ast.Call) and self._source(rule, node)

    def _name_carries(self, rule: str, name: str) -> bool:
        frames = self.names.frames
        if name in self.module[rule] and not self.names.is_local(name):
            return True
        if rule != CALL_COUNT:
            return False
        if name in self.counters.globals and not self.names.is_local(name):
            return True
        return bool(frames) and name in self.counters.closures and name not in frames[-1].local

    def _counted(self, node: ast.AST) -> bool:
        """Whether an attribute or item (or `getattr(owner, "attribute", default)`) reads a
        count kept across calls."""
        if isinstance(node, ast.Call):
            owner = node.args[0]
            written = f"{ast.unparse(owner)}.{string(node.args[1])}"
        elif isinstance(node, (ast.Attribute, ast.Subscript)):
            owner = node.value
            written = None
        else:
            return False
        if not isinstance(owner, ast.Name) or owner.id not in self.counters.owners:
            return False
        if (written or ast.unparse(node)) not in self.counters.cells:
            return False
        return owner.id in ("self", "cls") or not self.names.is_local(owner.id)

    def _source(self, rule: str, call: ast.Call) -> bool:
        func = call.func
        if self._returns(rule, func):
            return True
        name = self.names.qualname(func)
        if rule == CLOCK:
            return name in CLOCK_CALLS or any(
                CLOCK_PATHS.search(string(arg) or "") for arg in call.args
            )
        if rule == PROCESS:
            return name in PROCESS_CALLS
        if rule == FILE:
            return self.keeps_files and (
                name in FILE_CALLS
                or (isinstance(func, ast.Attribute) and func.attr in FILE_METHODS)
            )
        if name == "getattr" and len(call.args) >= 2:
            return self._counted(call)
        counted = call.args[0] if name == "next" and call.args else None
        if isinstance(func, ast.Attribute) and func.attr == "__next__":
            counted = func.value
        return isinstance(counted, ast.Name) and self._kept_iterator(counted.id)

    def _returns(self, rule: str, func: ast.AST) -> bool:
        """Whether a callee is one of the module's functions (or a method on `self`) that
        returns the trigger's value."""
        if isinstance(func, ast.Name):
            return func.id in self.returning[rule] and not self.names.is_local(func.id)
        return (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id in ("self", "cls")
            and func.attr in self.returning[rule]
        )

    def _kept_iterator(self, name: str) -> bool:
        if name not in self.counters.iterators:
            return False
        frames = self.names.frames
        return not frames or name not in frames[-1].local or name in frames[-1].parameters


def keeps_files(names: Names, file: PythonFile) -> bool:
    """Whether a module writes a file or looks at places other processes share."""
    for node in file.parents:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if SHARED_PATHS.match(node.value):
                return True
        elif isinstance(node, ast.Call) and _writes(names, node):
            return True
    return False


def _writes(names: Names, call: ast.Call) -> bool:
    func = call.func
    name = names.qualname(func)
    if name is not None and matches(FILE_WRITES, name):
        return True
    if isinstance(func, ast.Attribute) and func.attr in FILE_WRITE_METHODS:
        return True
    if name in ("open", "io.open"):
        mode = argument(call, 1, "mode")
    elif isinstance(func, ast.Attribute) and func.attr == "open":
        mode = argument(call, 0, "mode")
    else:
        return False
    return bool(_WRITE_MODES.match(string(mode) or ""))
