"""Naming a candidate kernel and loading it from its file.

A candidate is always named by a file and a module-level function in it, so that the worker
process can import it by itself: the auditor never hands live objects across the process
boundary.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kernelaudit.errors import UsageError
from kernelaudit.problem.backward import GradientsOf
from kernelaudit.sourcefile import import_source

_SPEC_HINT = 'write it as "path/to/file.py::function_name"'


@dataclass(frozen=True)
class CandidateRef:
    """A candidate: the Python file that defines it (absolute path) and the function's name.

    autograd: for an autograd-enabled candidate audited through its backward, the
        `GradientsOf` wrapping as (inputs, positions, upstream_of); the worker calls the
        wrapped function. Empty for a candidate called as it is.
    """

    path: str
    function: str
    autograd: tuple[int, tuple[int, ...], tuple[int, ...]] | None = None
    source: str = ""
    """The file the candidate was read from when a format reader generated `path` (a
    SOL-ExecBench solution.json, a KernelBench ModelNew file); "" otherwise."""
    name: str = ""
    """The candidate's own name, where its format gives one."""
    languages: tuple[str, ...] = ()
    """The languages its format declares it is written in (a SOL-ExecBench solution's
    `spec.languages`); empty where the format declares none."""

    @property
    def label(self) -> str:
        return self.name or f"{Path(self.path).name}::{self.function}"

    def autograd_argument(self) -> str:
        """`autograd` as one word ("-" when absent), for a child told what to import."""
        if self.autograd is None:
            return "-"
        inputs, positions, upstream_of = self.autograd
        return f"{inputs};{','.join(map(str, positions))};{','.join(map(str, upstream_of))}"

    @staticmethod
    def parse_autograd(word: str) -> tuple[int, tuple[int, ...], tuple[int, ...]] | None:
        if word == "-":
            return None
        inputs, positions, upstream_of = word.split(";")

        def numbers(text: str) -> tuple[int, ...]:
            return tuple(int(n) for n in text.split(",") if n)

        return int(inputs), numbers(positions), numbers(upstream_of)


def parse_candidate(spec: str) -> CandidateRef:
    """Read a "path/file.py::function" spec, checking that the file is there."""
    file, sep, function = spec.rpartition("::")
    if not sep or not file:
        raise UsageError(f'candidate "{spec}" does not name a function: {_SPEC_HINT}.')
    if not function.isidentifier():
        raise UsageError(
            f'candidate "{spec}": "{function}" is not a Python function name; {_SPEC_HINT}.'
        )
    path = Path(file).expanduser()
    if path.suffix != ".py":
        raise UsageError(
            f'candidate "{spec}": {path.name} is not a Python file; name the .py file that '
            f'defines (or loads) the kernel, e.g. "kernel.py::{function}".'
        )
    if not path.is_file():
        raise UsageError(
            f'candidate "{spec}": there is no file {path.resolve()}; check the path '
            f"(relative paths start from {Path.cwd()})."
        )
    return CandidateRef(path=str(path.resolve()), function=function)


def from_callable(fn: Callable[..., object]) -> CandidateRef:
    """The file and name of a module-level function, so a worker can import it again."""
    fix = (
        "pass a module-level function (defined at the top level of a .py file) "
        'or a "file.py::function" spec'
    )
    if not inspect.isfunction(fn):
        raise UsageError(f"candidate {fn!r} is not a Python function; {fix}.")
    if fn.__name__ == "<lambda>":
        raise UsageError(f"candidate {fn!r} is a lambda, which a worker cannot import; {fix}.")
    if fn.__qualname__ != fn.__name__:
        raise UsageError(
            f"candidate {fn.__qualname__} is defined inside another function or class, which a "
            f"worker cannot import; {fix}."
        )
    file = inspect.getsourcefile(fn)
    if file is None or not file.endswith(".py") or not Path(file).is_file():
        raise UsageError(f"candidate {fn.__name__} has no .py source file; {fix}.")
    module = sys.modules.get(fn.__module__)
    if getattr(module, fn.__name__, None) is not fn:
        raise UsageError(
            f"candidate {fn.__name__} is not reachable as {Path(file).name}::{fn.__name__} "
            f"(the name now refers to something else); {fix}."
        )
    return CandidateRef(path=str(Path(file).resolve()), function=fn.__name__)


def load_candidate(ref: CandidateRef) -> Callable[..., object]:
    """Import the candidate's file as a fresh module and return its function.

    Exceptions raised while the file runs propagate unchanged: they are the candidate's
    failures, not the user's. A missing file or function is a UsageError.
    """
    path = Path(ref.path)
    if not path.is_file():
        raise UsageError(f"candidate {ref.label}: there is no file {path}; check the path.")
    # A name of our own keeps two candidates called "kernel.py" from sharing one module.
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
    name = f"kernelaudit_candidate_{digest}_{path.stem}".replace("-", "_")
    # its folder first on the path (its sibling modules win over same-named packages), and
    # compiled from its source text: bytecode planted beside it is never run
    module = import_source(path, name)
    fn = getattr(module, ref.function, None)
    if fn is None:
        defined = sorted(
            key
            for key, value in vars(module).items()
            if callable(value)
            and not isinstance(value, type)
            and getattr(value, "__module__", name) == name
            and not key.startswith("_")
        )
        listing = ", ".join(defined) if defined else "none"
        raise UsageError(
            f"{path.name} defines no function '{ref.function}'; functions there: {listing}. "
            f'Name one of them after "::".'
        )
    if not callable(fn):
        raise UsageError(
            f"{path.name}: '{ref.function}' is a {type(fn).__name__}, not a function; name a "
            f'function after "::".'
        )
    if ref.autograd is not None:
        inputs, positions, upstream_of = ref.autograd
        return GradientsOf(fn, inputs, positions, upstream_of)
    return fn
