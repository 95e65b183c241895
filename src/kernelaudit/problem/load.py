"""Load a native problem file: import it from its source text and validate its `problem`
(`problem.validate`), turning every mistake into a ProblemError that names the file, the field
and the fix."""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import re
import sys
import traceback
import weakref
from dataclasses import fields, replace
from pathlib import Path
from types import ModuleType

from kernelaudit.errors import ProblemError, UsageError
from kernelaudit.problem.domain import Domain
from kernelaudit.problem.spec import (
    Axis,
    Contract,
    Forward,
    GeneratedInput,
    IndexInput,
    MaskInput,
    Output,
    Problem,
    Sampler,
    ScalarInput,
    TensorInput,
)
from kernelaudit.problem.validate import validate
from kernelaudit.sourcefile import import_source

_DECLARATIONS = {
    cls.__name__: cls
    for cls in (
        Problem,
        Domain,
        Axis,
        TensorInput,
        IndexInput,
        MaskInput,
        ScalarInput,
        Output,
        Contract,
        Forward,
        GeneratedInput,
        Sampler,
    )
}
_UNKNOWN_KWARG = re.compile(r"(\w+)\.__init__\(\) got an unexpected keyword argument '(\w+)'")


def load_problem(path: str | Path) -> Problem:
    """Import a problem module and return its validated `problem`."""
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"problem file {str(file)!r} does not exist; pass the path of a .py file")
    if file.suffix != ".py":
        raise UsageError(f"problem file {str(file)!r} is not a Python file; pass a .py file")
    module = _execute(file)
    problem = getattr(module, "problem", None)
    if problem is None:
        raise ProblemError(
            str(file),
            "problem",
            "the module defines no `problem`",
            "add `problem = Problem(name=..., reference=..., axes=..., inputs=..., outputs=..., "
            "workloads=...)` at module level",
        )
    if not isinstance(problem, Problem):
        raise ProblemError(
            str(file),
            "problem",
            f"`problem` is a {type(problem).__name__}, not a Problem",
            "build it with kernelaudit.Problem(...)",
        )
    problem = replace(problem, source=str(file.resolve()), source_files=loaded_from(file))
    validate(problem, source_text=file.read_text())
    return problem


_FIRST_SEEN: weakref.WeakKeyDictionary[ModuleType, str] = weakref.WeakKeyDictionary()
"""The digest of each module's file as `loaded_from` first saw it while the module was loaded:
a module imported once runs as it was then, whatever its file holds later."""


def loaded_from(file: Path) -> tuple[tuple[str, str], ...]:
    """`file` and every module now loaded from its folder or below (installed packages that
    lie there left out), each as its path within the folder and the sha256 of its bytes; empty
    where a loaded module's file has changed since this process first saw it (the code it runs
    is not what the file says)."""
    home = file.resolve().parent
    prefixes = (str(home), str(file.parent.absolute()))
    found: dict[Path, ModuleType | None] = {file.resolve(): None}
    for module in list(sys.modules.values()):
        try:
            location = getattr(module, "__file__", None)
            if not isinstance(location, str) or not location.startswith(prefixes):
                continue
            path = Path(location).resolve()
        except Exception:  # a lazy module that cannot say
            continue
        if path.suffix != ".py" or not path.is_relative_to(home):
            continue
        if not {"site-packages", "dist-packages"} & set(path.relative_to(home).parts):
            found.setdefault(path, module)
    files = []
    for path, module in sorted(found.items(), key=lambda item: item[0]):
        try:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            continue
        if module is not None:
            with contextlib.suppress(TypeError):  # a module type that takes no weak reference
                if _FIRST_SEEN.setdefault(module, digest) != digest:
                    return ()
        files.append((str(path.relative_to(home)), digest))
    return tuple(files)


def _execute(file: Path) -> object:
    name = f"kernelaudit_problem_{abs(hash(file.resolve()))}"
    sys.path.insert(0, str(file.parent))
    try:
        # from its source text: bytecode planted beside it is never run
        module = import_source(file, name, folder_on_path=False)
    except SyntaxError as error:
        raise ProblemError(
            str(file),
            "syntax",
            error.msg or "invalid syntax",
            "fix the Python syntax",
            line=error.lineno,
        ) from None
    except TypeError as error:
        line = _line_in(file, error)
        unknown = _UNKNOWN_KWARG.search(str(error))
        if unknown is None:
            raise ProblemError(str(file), "module", str(error), "fix the call", line) from None
        owner, field_name = unknown.groups()
        known = [f.name for f in fields(_DECLARATIONS[owner])] if owner in _DECLARATIONS else []
        guess = difflib.get_close_matches(field_name, known, n=1)
        fix = f"did you mean {guess[0]!r}?" if guess else f"known fields: {', '.join(known)}"
        raise ProblemError(
            str(file), f"{owner}.{field_name}", f"{owner} has no field {field_name!r}", fix, line
        ) from None
    except Exception as error:  # the user's module failed while importing
        raise ProblemError(
            str(file),
            "module",
            f"importing the problem raised {type(error).__name__}: {error}",
            "fix the module so `python " + file.name + "` runs",
            _line_in(file, error),
        ) from None
    finally:
        sys.path.remove(str(file.parent))
    return module


def _line_in(file: Path, error: BaseException) -> int | None:
    frames = [f for f in traceback.extract_tb(error.__traceback__) if Path(f.filename) == file]
    return frames[-1].lineno if frames else None
