"""`read_problem` and `read_candidate` pick the reader from the file itself, so every command
takes any of the formats without being told which one it is."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from kernelaudit.errors import UsageError
from kernelaudit.formats import kernelbench
from kernelaudit.formats.solexecbench import definition as solexecbench
from kernelaudit.formats.solexecbench.solution import is_solution, read_solution
from kernelaudit.problem.load import load_problem
from kernelaudit.problem.spec import Problem
from kernelaudit.runner.candidate import CandidateRef, parse_candidate

PROBLEM_FORMATS = (
    "a kernelaudit problem module (.py defining `problem`), a SOL-ExecBench problem folder "
    "(or its definition.json), or a KernelBench problem (.py defining Model, get_inputs and "
    "get_init_inputs)"
)


def read_problem(path: str | Path) -> Problem:
    """The problem a file (or a folder holding one) declares, whatever its format."""
    file = Path(path)
    if solexecbench.is_definition(file):
        return solexecbench.read_definition(file)
    if file.is_dir():
        raise UsageError(
            f"problem folder {str(file)!r} holds no definition.json; pass {PROBLEM_FORMATS}"
        )
    if file.suffix == ".py" and file.is_file() and kernelbench.is_kernelbench_problem(file):
        return kernelbench.read_kernelbench_problem(file)
    return load_problem(file)


def read_candidate(spec: str, problem: Problem) -> tuple[Problem, CandidateRef]:
    """The candidate a spec names, and the problem as that candidate is called (a solution
    may pass outputs in rather than return them).

    spec: "file.py::function"; a SOL-ExecBench solution.json; a KernelBench file defining
    ModelNew."""
    path = Path(spec)
    if "::" not in spec and path.suffix == ".json":
        if not is_solution(path):
            raise UsageError(
                f"candidate {spec!r} is not a SOL-ExecBench solution (a JSON object with "
                "`spec` and `sources`); pass a solution.json or a file.py::function"
            )
        return read_solution(path, problem)
    if "::" not in spec and path.suffix == ".py" and path.is_file():
        if kernelbench.is_kernelbench_candidate(path):
            ref = kernelbench.kernelbench_candidate(problem, path)
            return problem, replace(ref, source=str(path.resolve()), name=f"{path.name}::ModelNew")
        raise UsageError(
            f"candidate {spec!r} names a file but no function, and defines no ModelNew; "
            f'write it as "{spec}::function_name"'
        )
    return problem, parse_candidate(spec)


def unrunnable(problem: Problem) -> str | None:
    """Why `problem`'s reference cannot run on this machine (hardware it needs, data files
    that are absent), or None."""
    if problem.source.endswith(solexecbench.DEFINITION):
        return solexecbench.unrunnable(problem)
    return None
