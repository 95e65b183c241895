"""Where compute-sanitizer is looked for, which small cases it runs, and which tools run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kernelaudit.errors import UsageError
from kernelaudit.problem.load import load_problem
from kernelaudit.problem.spec import Axis
from kernelaudit.profiles import PROFILES
from kernelaudit.sanitizer.cases import arguments, small_cases, tail_size
from kernelaudit.sanitizer.child import ChildResult, Launched, kernels_in_trace
from kernelaudit.sanitizer.locate import locate
from kernelaudit.sanitizer.session import planned_tools

FIXTURES = Path(__file__).parent / "fixtures"
EXAMPLES = Path(__file__).parents[2] / "examples"


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_found_on_path(tmp_path: Path) -> None:
    tool = _executable(tmp_path / "bin" / "compute-sanitizer")
    located = locate({"PATH": str(tmp_path / "bin")}, toolkits=())
    assert located.found and located.path == str(tool)


def test_found_in_cuda_home_in_bin_or_in_its_own_folder(tmp_path: Path) -> None:
    tool = _executable(tmp_path / "cuda" / "compute-sanitizer" / "compute-sanitizer")
    located = locate({"PATH": "", "CUDA_HOME": str(tmp_path / "cuda")}, toolkits=())
    assert located.path == str(tool)
    preferred = _executable(tmp_path / "cuda" / "bin" / "compute-sanitizer")
    assert locate({"CUDA_HOME": str(tmp_path / "cuda")}, toolkits=()).path == str(preferred)


def test_found_in_the_toolkit_nvcc_belongs_to(tmp_path: Path) -> None:
    _executable(tmp_path / "toolkit" / "bin" / "nvcc")
    tool = _executable(tmp_path / "toolkit" / "compute-sanitizer" / "compute-sanitizer")
    located = locate({"PATH": str(tmp_path / "toolkit" / "bin")}, toolkits=())
    assert located.path == str(tool)


def test_absent_says_where_it_looked_and_skips_files_that_cannot_run(tmp_path: Path) -> None:
    not_runnable = tmp_path / "cuda" / "bin" / "compute-sanitizer"
    not_runnable.parent.mkdir(parents=True)
    not_runnable.write_text("not a program")
    located = locate({"PATH": "", "CUDA_HOME": str(tmp_path / "cuda")}, toolkits=("/nowhere",))
    assert not located.found and located.path == ""
    assert located.searched[0] == "PATH"
    assert str(not_runnable) in located.searched
    assert "/nowhere/bin/compute-sanitizer" in located.searched


@pytest.mark.parametrize(
    ("axis", "size", "tail"),
    [
        (Axis("n"), 1024, 513),
        (Axis("n"), 129, 129),
        (Axis("n"), 64, 33),
        (Axis("n"), 3, 3),
        (Axis("n"), 2, 2),
        (Axis("n"), 1, 1),
        (Axis("n", multiple_of=64), 256, 192),
        (Axis("n", multiple_of=64), 64, 64),
        (Axis("n", min=600), 1024, 1024),
    ],
)
def test_tail_sizes_leave_one_element_in_the_last_tile(axis: Axis, size: int, tail: int) -> None:
    assert tail_size(axis, size) == tail


def test_small_cases_are_the_tail_sizes_then_the_workload() -> None:
    problem = load_problem(FIXTURES / "copy_problem.py")
    cases = small_cases(problem, 2)
    assert [c.size_map() for c in cases] == [{"n": 513}, {"n": 1024}]
    assert cases[0].label == "tail sizes n=513" and cases[1].label == "workload 0"
    assert small_cases(problem, 1) == cases[:1]
    assert small_cases(problem, 0) == []


def test_arguments_are_the_inputs_in_order_and_empty_outputs_for_destination_passing() -> None:
    problem = load_problem(EXAMPLES / "matmul" / "problem.py")
    (case,) = small_cases(problem, 1)
    built = arguments(problem, case)
    assert [tuple(a.shape) for a in built.args] == [(129, 129), (129, 129)]
    assert built.slots == ()
    into = replace(problem, contract=replace(problem.contract, style="destination"))
    assert arguments(into, case).slots == (((129, 129), problem.dtype_configs()[0]["a"]),)


def _listed(*kernels: Launched) -> ChildResult:
    return ChildResult(error="", kernels=kernels)


def test_quick_runs_memcheck_alone_and_default_adds_initcheck_and_synccheck() -> None:
    triton_kernel = _listed(Launched("_softmax_rows", 1024))
    assert planned_tools(PROFILES["quick"], triton_kernel, ()) == [("memcheck", (), "")]
    assert [t for t, _, why in planned_tools(PROFILES["default"], triton_kernel, ())] == [
        "memcheck",
        "initcheck",
        "synccheck",
    ]


def test_racecheck_runs_only_on_own_kernels_that_use_shared_memory() -> None:
    shared = replace(PROFILES["default"], sanitizer_racecheck="shared")
    listed = _listed(
        Launched("_softmax_rows", 1024),
        Launched("_scale_rows", 0),
        Launched("nvjet_hsh_128x256_64x4_2x1_v_bz_coopB_NNT", 65536),
    )
    assert planned_tools(shared, listed, ())[-1] == ("racecheck", ("_softmax_rows",), "")
    none_shared = _listed(Launched("_scale_rows", 0))
    assert planned_tools(shared, none_shared, ())[-1] == (
        "racecheck",
        (),
        "no kernel of the candidate's uses shared memory",
    )
    unknown = _listed(Launched("_scale_rows", None))
    assert planned_tools(shared, unknown, ())[-1][2] == (
        "the candidate's use of shared memory is unknown"
    )
    # thorough checks the unknown ones too, and every kernel when none could be listed
    thorough = PROFILES["thorough"]
    assert planned_tools(thorough, unknown, ())[-1] == ("racecheck", ("_scale_rows",), "")
    assert planned_tools(thorough, None, ())[-1] == ("racecheck", (), "")
    assert planned_tools(shared, None, ())[-1][2] == "the candidate's kernels could not be listed"


def test_a_profile_naming_an_unknown_tool_is_refused() -> None:
    with pytest.raises(UsageError, match="racecheck is set by sanitizer_racecheck"):
        planned_tools(replace(PROFILES["default"], sanitizer_tools=("racecheck",)), None, ())
    with pytest.raises(UsageError, match="sanitizer_racecheck"):
        planned_tools(replace(PROFILES["default"], sanitizer_racecheck="always"), None, ())


def test_kernels_are_read_from_the_profilers_trace_with_their_shared_memory() -> None:
    def kernel(name: str, shared: object) -> dict[str, object]:
        args = {"grid": [4, 1, 1], "block": [128, 1, 1]}
        if shared is not None:
            args["shared memory"] = shared
        return {"ph": "X", "cat": "kernel", "name": name, "ts": 1.0, "dur": 2.0, "args": args}

    trace = {
        "traceEvents": [
            kernel("_softmax_rows", 0),
            kernel("_softmax_rows", 2048),
            kernel("_scale_rows", 0),
            kernel("void unlisted<float>(float *)", None),
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "args": {}},
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "args": {}},
        ]
    }
    assert kernels_in_trace(trace) == [
        {"name": "_softmax_rows", "shared_bytes": 2048},
        {"name": "_scale_rows", "shared_bytes": 0},
        {"name": "void unlisted<float>(float *)", "shared_bytes": None},
    ]
