"""Before a candidate's audit starts: whether its file compiles and its function can take the
problem's arguments, read from its source without running any of it.

An audit of a candidate that cannot be imported, or that names a function its file does not
define, or one taking another number of arguments than the problem passes, would spend half a
minute drawing, probing and shrinking before it says so; here it is said in a second, with
the whole error, and the candidate fails. Nothing of the candidate runs in the auditor: its
source is compiled (which executes nothing) and its top-level definitions read. A function
that is bound in any other way (an assignment, an import, a decorator that may change its
signature, names made at run time) is left to the audit.
"""

from __future__ import annotations

import ast
from pathlib import Path

from kernelaudit.errors import UsageError
from kernelaudit.findings import AuditReport, Finding
from kernelaudit.problem.spec import Problem
from kernelaudit.runner.candidate import CandidateRef


def refusal(problem: Problem, ref: CandidateRef) -> str:
    """Why the candidate cannot be called as the problem calls it, in full; "" when nothing
    in its source says so. UsageError when its file defines no such function at all (a typo
    on the command line)."""
    path = Path(ref.path)
    try:
        source = path.read_bytes()
    except OSError as error:
        return f"{path}: cannot be read ({error.strerror or error})"
    try:
        tree = ast.parse(source, filename=str(path))
        compile(tree, str(path), "exec", dont_inherit=True)
    except SyntaxError as error:
        return _syntax(error, path)
    except (RecursionError, MemoryError, ValueError):
        return ""  # too deep or odd for the parser here: the audit's import will say
    if ref.autograd is not None or ref.source:
        return ""  # a reader's generated module: its function is the reader's, not the user's
    return _signature(problem, ref, tree)


def refused_report(
    problem: Problem,
    ref: CandidateRef,
    why: str,
    profile: str,
    device: str,
    finding_prefix: str = "",
) -> AuditReport:
    """The report of a candidate refused before its audit: FAIL, with one finding that holds
    the whole error (its id `{finding_prefix}F1`)."""
    finding = Finding(
        id=f"{finding_prefix}F1",
        check="execution",
        key="not-callable",
        severity="fail",
        title="the candidate cannot be called as the problem calls it (found before it ran)",
        evidence=(("error", why),),
        probe=None,
        original=None,
        occurrences=1,
        probes=0,
    )
    return AuditReport(
        problem=problem.name,
        problem_path=problem.source,
        candidate=ref.label,
        candidate_path=ref.path,
        candidate_function=ref.function,
        profile=profile,
        device=device,
        verdict="FAIL",
        findings=(finding,),
        records=(),
        seconds=0.0,
        coverage=(("execution", "ran in part: the candidate's source only, before any call"),),
    )


def arguments(problem: Problem) -> int:
    """How many arguments the problem passes its candidate, positionally."""
    passed = len(problem.inputs)
    if problem.contract.style == "destination":
        passed += len(problem.outputs)
    return passed


def _syntax(error: SyntaxError, path: Path) -> str:
    where = f"{error.filename or path}, line {error.lineno}"
    lines = [f"{where}: SyntaxError: {error.msg}"]
    if error.text:
        lines.append("    " + error.text.rstrip("\n"))
        if error.offset:
            lines.append("    " + " " * (error.offset - 1) + "^")
    return "\n".join(lines)


def _signature(problem: Problem, ref: CandidateRef, tree: ast.Module) -> str:
    bound = _top_level(tree)
    if ref.function not in bound:
        if _dynamic(tree) or ref.function in _names(tree):
            return ""
        defined = ", ".join(sorted(n for n, d in bound.items() if d is not None)) or "none"
        raise UsageError(
            f"candidate {ref.label}: {ref.path} defines no {ref.function!r} at its top level "
            f"(functions there: {defined}); name one of them after '::'"
        )
    definition = bound[ref.function]
    if definition is None or definition.decorator_list:
        return ""
    passed = arguments(problem)
    parameters = definition.args
    positional = len(parameters.posonlyargs) + len(parameters.args)
    required = positional - len(parameters.defaults)
    required_by_name = [
        a.arg
        for a, default in zip(parameters.kwonlyargs, parameters.kw_defaults, strict=True)
        if default is None
    ]
    names = ", ".join(i.name for i in problem.inputs)
    if problem.contract.style == "destination":
        names += ", then the outputs " + ", ".join(o.name for o in problem.outputs)
    said = (
        f"{ref.path}, line {definition.lineno}: {ref.function}() is called with {passed} "
        f"argument(s) by position ({names})"
    )
    if required_by_name:
        return f"{said}, but requires {', '.join(required_by_name)} by name"
    if passed < required:
        return f"{said}, but requires {required}"
    if passed > positional and parameters.vararg is None:
        return f"{said}, but takes at most {positional}"
    return ""


def _top_level(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef | None]:
    """Every name the module binds at its top level: its `def` where it is a plain one (the
    last one), None where it is bound otherwise."""
    bound: dict[str, ast.FunctionDef | ast.AsyncFunctionDef | None] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            bound[node.name] = node
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Store):
                bound[inner.id] = None
            elif isinstance(inner, ast.alias):
                bound[(inner.asname or inner.name).split(".")[0]] = None
            elif isinstance(inner, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                bound[inner.name] = None
    return bound


def _names(tree: ast.Module) -> set[str]:
    """Every name and attribute the module mentions (a function set with setattr, say)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value)
    return found


def _dynamic(tree: ast.Module) -> bool:
    """Whether the module may bind names no reading of it shows (a star import, `globals()`,
    `exec`, a module-level `__getattr__`)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            return True
        if isinstance(node, ast.Name) and node.id in ("globals", "exec", "vars", "__getattr__"):
            return True
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            return True
    return False
