"""SOL-ExecBench solutions: a `solution.json` holding the candidate's sources inline, the entry
point as `file::function`, the languages, and whether outputs are passed in (destination-passing
style, the format's default) or returned.

The sources are written into the cache and the worker imports the entry file from there, as it
imports any candidate. CUDA C++ sources are built with torch's extension builder when the
worker imports a small generated module, so a build failure is the candidate's failure, seen
and reported like any other import error."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from kernelaudit.errors import UsageError
from kernelaudit.formats.cache import cache_folder, write_if_changed

if TYPE_CHECKING:
    from kernelaudit.problem.spec import Problem
    from kernelaudit.runner.candidate import CandidateRef

PYTHON_LANGUAGES = ("pytorch", "triton", "tlx", "cute_dsl", "cutile", "cudnn_frontend")
CPP_LANGUAGES = ("cuda_cpp", "cutlass", "cudnn", "cublas")
LANGUAGES = PYTHON_LANGUAGES + CPP_LANGUAGES
"""The languages the SOL-ExecBench harness knows; one solution never mixes the two kinds."""
_CPP_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx", ".c")
_CPP_ENTRY_SUFFIXES = (*_CPP_SUFFIXES, ".h", ".hpp", ".cuh")
COMPILE_DEFAULTS = {
    "cflags": (),
    "cuda_cflags": ("-O3", "--use_fast_math"),
    "ld_flags": ("-lcuda",),
}
"""The harness's flags for a C++ solution's build, field by field, where the solution gives
none."""
EXTENSION_NAME = "benchmark_kernel"
"""The module name the format builds CUDA C++ solutions under; a solution's PYBIND11_MODULE
may name it literally."""


def is_solution(path: Path) -> bool:
    """Whether `path` is a solution file: JSON with `sources` and a `spec`."""
    if path.suffix != ".json" or not path.is_file():
        return False
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    return isinstance(data, dict) and "sources" in data and "spec" in data


def _fail(path: Path, field: str, message: str, fix: str) -> UsageError:
    return UsageError(f"solution {path}: field '{field}': {message}; {fix}")


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"solution {path} does not exist; check the path") from None
    except json.JSONDecodeError as error:
        raise UsageError(
            f"solution {path} is not JSON (line {error.lineno}: {error.msg}); fix the file"
        ) from None
    if not isinstance(data, dict):
        raise _fail(path, "(top level)", "not a JSON object", "write the solution as an object")
    return data


@dataclass(frozen=True)
class Unpacked:
    """A solution's sources written out, and what its fields say about calling them."""

    file: Path
    """The solution.json."""
    entry: Path
    """The file the worker imports: the Python entry point, or the module that builds the
    C++/CUDA sources."""
    function: str
    destination: bool
    """Whether outputs are passed in (destination-passing style) rather than returned."""
    name: str
    definition: str
    """The problem it names ("" when it names none)."""
    languages: tuple[str, ...] = ()
    """`spec.languages`, as the harness knows them."""


def read_solution(path: str | Path, problem: Problem) -> tuple[Problem, CandidateRef]:
    """The candidate a solution.json holds, and `problem` with the calling convention the
    solution declares."""
    from kernelaudit.runner.candidate import CandidateRef  # see unpack_solution

    unpacked = unpack_solution(path)
    if unpacked.definition and unpacked.definition != problem.name:
        raise _fail(
            unpacked.file,
            "definition",
            f"the solution is for {unpacked.definition!r}, the problem is {problem.name!r}",
            "audit it against the problem it was written for",
        )
    style = "destination" if unpacked.destination else "return"
    ref = CandidateRef(
        path=str(unpacked.entry),
        function=unpacked.function,
        source=str(unpacked.file),
        name=unpacked.name,
        languages=unpacked.languages,
    )
    return replace(problem, contract=replace(problem.contract, style=style)), ref


def unpack_solution(path: str | Path) -> Unpacked:
    """Check a solution.json's fields and write its sources into the cache. Needs no problem
    and no torch: `kernelaudit check` does it before importing torch, to start the
    candidate's worker at once (`runner.auditor.prestart`)."""
    file = Path(path).resolve()
    data = _read(file)
    spec = data.get("spec")
    if not isinstance(spec, dict):
        raise _fail(file, "spec", "missing or not an object", "give languages and entry_point")
    definition = data.get("definition")
    languages = spec.get("languages", spec.get("language"))
    if isinstance(languages, str):
        languages = [languages]
    if not isinstance(languages, list) or not languages:
        raise _fail(file, "spec.languages", "missing", f"list some of: {', '.join(LANGUAGES)}")
    unknown = [lang for lang in languages if lang not in LANGUAGES]
    if unknown:
        raise _fail(
            file,
            "spec.languages",
            f"{unknown[0]!r} is not a language the SOL-ExecBench harness knows",
            f"use some of: {', '.join(LANGUAGES)}",
        )
    python = [lang for lang in languages if lang in PYTHON_LANGUAGES]
    cpp = [lang for lang in languages if lang in CPP_LANGUAGES]
    if python and cpp:
        raise _fail(
            file,
            "spec.languages",
            f"C++ and Python cannot be mixed, but got {cpp} and {python}",
            "list only Python languages (a .py entry point) or only C++ ones (a .cu/.cpp entry "
            "point that exports the function)",
        )
    entry = spec.get("entry_point")
    if not isinstance(entry, str) or entry.count("::") != 1:
        raise _fail(
            file, "spec.entry_point", f"{entry!r} is not file::function", 'write "main.py::run"'
        )
    entry_file, _, function = entry.rpartition("::")
    if cpp and not entry_file.endswith(_CPP_ENTRY_SUFFIXES):
        raise _fail(
            file,
            "spec.entry_point",
            f"C++ languages require a C++/CUDA entry point file, but got {entry_file!r}",
            "name a .cu or .cpp source",
        )
    if python and not entry_file.endswith(".py"):
        raise _fail(
            file,
            "spec.entry_point",
            f"Python languages require a .py entry point file, but got {entry_file!r}",
            "name a .py source",
        )
    if not function.isidentifier():
        raise _fail(file, "spec.entry_point", f"{function!r} is not a function name", "fix it")
    sources = _sources(file, data.get("sources"))
    if entry_file not in sources:
        raise _fail(
            file,
            "spec.entry_point",
            f"names {entry_file!r}, which is not among the sources ({', '.join(sources)})",
            "name one of the sources",
        )
    folder = cache_folder("solutions", str(file), file.read_bytes())
    for name, content in sources.items():
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        write_if_changed(target, content)
    if entry_file.endswith(_CPP_ENTRY_SUFFIXES):
        built = [n for n in sources if n.endswith(_CPP_SUFFIXES)]
        flags = compile_options(file, spec.get("compile_options"))
        entry_path = write_if_changed(folder / "kernelaudit_extension.py", _extension(built, flags))
    elif entry_file.endswith(".py"):
        entry_path = folder / entry_file
    else:
        raise _fail(
            file,
            "spec.entry_point",
            f"{entry_file!r} is neither Python nor C++/CUDA",
            "name a .py file, or a .cu/.cpp file whose PYBIND11_MODULE exports the function",
        )
    destination = spec.get("destination_passing_style", True)
    if not isinstance(destination, bool):
        raise _fail(file, "spec.destination_passing_style", "not true or false", "write a bool")
    name = str(data.get("name") or file.stem)
    named = definition if isinstance(definition, str) else ""
    return Unpacked(file, entry_path, function, destination, name, named, tuple(languages))


def _sources(file: Path, sources: object) -> dict[str, str]:
    if not isinstance(sources, list) or not sources:
        raise _fail(file, "sources", "missing or empty", 'list {"path": ..., "content": ...}')
    found: dict[str, str] = {}
    for i, source in enumerate(sources):
        where = f"sources[{i}]"
        if not isinstance(source, dict):
            raise _fail(file, where, "not an object", 'write {"path": ..., "content": ...}')
        path, content = source.get("path"), source.get("content")
        if not isinstance(path, str) or not isinstance(content, str):
            raise _fail(file, where, "needs string `path` and `content`", "give both")
        pure = PurePosixPath(path)
        if pure.is_absolute() or ".." in pure.parts or not pure.parts:
            raise _fail(
                file, f"{where}.path", f"{path!r} leaves the solution's folder", "use a plain path"
            )
        found[str(pure)] = content
    return found


def compile_options(file: Path, options: object) -> dict[str, tuple[str, ...]]:
    """The build flags of a C++ solution: `spec.compile_options`' cflags, cuda_cflags and
    ld_flags, each field the solution leaves out at the harness's default."""
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise _fail(
            file,
            "spec.compile_options",
            "not an object",
            'write {"cflags": [...], "cuda_cflags": [...], "ld_flags": [...]}',
        )
    unknown = sorted(set(options) - set(COMPILE_DEFAULTS))
    if unknown:
        raise _fail(
            file,
            f"spec.compile_options.{unknown[0]}",
            "not a field the harness reads",
            f"use {', '.join(COMPILE_DEFAULTS)}",
        )
    flags = {}
    for field, default in COMPILE_DEFAULTS.items():
        given = options.get(field, list(default))
        if not isinstance(given, list) or not all(isinstance(f, str) for f in given):
            raise _fail(
                file,
                f"spec.compile_options.{field}",
                "not a list of strings",
                f'write the flags as a list, e.g. ["{(default or ("-O3",))[0]}"]',
            )
        flags[field] = tuple(given)
    return flags


def _extension(sources: list[str], flags: dict[str, tuple[str, ...]]) -> str:
    """A module that builds the solution's C++/CUDA sources as a torch extension, with the
    solution's flags, and exposes its functions, imported by the worker like any Python
    candidate."""
    listed = ", ".join(repr(s) for s in sources)
    return f'''"""Builds this solution's C++/CUDA sources with torch's extension builder."""

from pathlib import Path

from torch.utils.cpp_extension import load

_here = Path(__file__).parent
_build = _here / "build"
_build.mkdir(exist_ok=True)
_module = load(
    name={EXTENSION_NAME!r},
    sources=[str(_here / name) for name in ({listed},)],
    build_directory=str(_build),
    extra_include_paths=[str(_here)],
    extra_cflags={list(flags["cflags"])!r},
    extra_cuda_cflags={list(flags["cuda_cflags"])!r},
    extra_ldflags={list(flags["ld_flags"])!r},
    verbose=False,
)


def __getattr__(name):
    return getattr(_module, name)
'''
