"""The large-tensors check: a case whose largest tensor passes 2^31 elements, a batch axis grown
to reach it, run on a GPU in the thorough profile only; everywhere else it costs nothing or
says in a note why it did not run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from kernelaudit import (
    Axis,
    Contract,
    IndexInput,
    Output,
    Problem,
    Sampler,
    ScalarInput,
    TensorInput,
)
from kernelaudit.checks.base import PlanContext
from kernelaudit.checks.coverage import coverage
from kernelaudit.checks.large_tensors import HEADROOM_BYTES, LargeTensors, examine
from kernelaudit.checks.numerics import compare_expected
from kernelaudit.engine.audit import audit
from kernelaudit.errors import CaseUnavailable
from kernelaudit.findings import AuditReport, Finding
from kernelaudit.large.draws import drawn_all
from kernelaudit.large.run import Waiting
from kernelaudit.large.sizing import CannotGrow, plan_large_case
from kernelaudit.oracle.truth import expected
from kernelaudit.profiles import PROFILES
from kernelaudit.runner.candidate import CandidateRef

FIXTURES = Path(__file__).parent / "fixtures"
KERNELS = str(FIXTURES / "large_rows_kernels.py")


def _double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def _gather(weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return weight[ids]


def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


ROWS = Problem(
    name="double_rows",
    reference=_double,
    axes=("rows", "cols"),
    inputs=(TensorInput("x", ("rows", "cols"), dtypes=(torch.float32, torch.float16)),),
    outputs=(Output("y", ("rows", "cols"), dtype="x"),),
    workloads=({"rows": 8, "cols": 16},),
)

GATHER = Problem(
    name="gather",
    reference=_gather,
    axes=("tokens", "vocab", "hidden"),
    inputs=(
        TensorInput("weight", ("vocab", "hidden"), dtypes=(torch.bfloat16,), role="weight"),
        IndexInput("ids", ("tokens",), bound="vocab"),
    ),
    outputs=(Output("out", ("tokens", "hidden"), dtype="weight"),),
    workloads=({"tokens": 512, "vocab": 1000, "hidden": 256},),
)

MATMUL = Problem(
    name="matmul",
    reference=_matmul,
    axes=("m", "n", "k"),
    inputs=(
        TensorInput("a", ("m", "k"), dtypes=(torch.float16,)),
        TensorInput("b", ("k", "n"), dtypes=(torch.float16,), role="weight"),
    ),
    outputs=(Output("c", ("m", "n"), dtype="a"),),
    workloads=({"m": 256, "n": 128, "k": 1024},),
)


def test_the_rows_axis_grows_just_past_2_to_the_31_in_the_smallest_dtype() -> None:
    case = plan_large_case(ROWS, ("rows", "cols"))
    rows = (1 << 31) // 16 + 4
    assert case.axis == "rows"
    assert case.dtype_config == 1  # float16: half the bytes of float32
    assert case.size_map() == {"rows": rows, "cols": 16}
    assert case.largest_elements == rows * 16 > 1 << 31
    assert case.bytes_needed == 2 * rows * 16 * 2  # x and y in float16
    # the rows holding elements 2^31 - 1 and 2^31 of x, and the rows past them
    assert case.around_limit == ((1 << 27) - 1, 1 << 27, (1 << 27) + 1)
    assert case.last == tuple(range(rows - 4, rows))


def test_an_embedding_grows_its_tokens_and_never_the_vocabulary_ids_point_into() -> None:
    case = plan_large_case(GATHER, ("tokens", "hidden"))
    tokens = -(-(1 << 31) // 256) + 4
    assert case.axis == "tokens"
    assert case.largest == "out"
    assert case.size_map() == {"tokens": tokens, "vocab": 1000, "hidden": 256}
    assert case.bytes_needed == tokens * 8 + 1000 * 256 * 2 + tokens * 256 * 2


def test_a_matmul_grows_m_and_keeps_the_reduced_k() -> None:
    case = plan_large_case(MATMUL, ("m", "n"))
    assert case.axis == "m"
    assert case.size_map()["k"] == 1024
    assert case.largest == "a"
    assert case.size_map()["m"] == (1 << 31) // 1024 + 4


def test_growth_keeps_to_the_axis_multiple_and_reports_an_axis_too_small() -> None:
    multiple = replace(ROWS, axes=(Axis("rows", multiple_of=64), Axis("cols")))
    assert plan_large_case(multiple, ("rows",)).size_map()["rows"] == (1 << 27) + 64
    capped = replace(ROWS, axes=(Axis("rows", max=4096), Axis("cols")))
    with pytest.raises(CannotGrow, match=r"'rows' would need 134,217,732 .* at most 4,096"):
        plan_large_case(capped, ("rows",))
    with pytest.raises(CannotGrow, match="no batch axis"):
        plan_large_case(ROWS, ())


def test_an_argument_only_the_problems_generator_gives_is_a_reason_not_a_failure() -> None:
    # SOL-ExecBench's generators return scalars too (a routing scale, say); asking for one at
    # 2^31 elements would draw the whole case on the host
    scaled = replace(
        ROWS,
        inputs=(*ROWS.inputs, ScalarInput("scale", None)),
        sampler=Sampler(lambda sizes, seed: {"scale": 2.0}, default_for=("scale",)),
    )
    with pytest.raises(CannotGrow, match="argument 'scale' takes its value from the problem's"):
        plan_large_case(scaled, ("rows",))


def test_where_memory_does_not_allow_a_note_says_what_is_needed_and_what_is_free() -> None:
    free = 3 << 30
    (note,) = examine(ROWS, CandidateRef(KERNELS, "double"), "cuda", free, 10.0)
    evidence = dict(note.evidence)
    assert note.severity == "note"
    assert note.key == "not-run:memory"
    assert evidence["bytes needed"] == plan_large_case(ROWS, ("rows",)).bytes_needed + (
        HEADROOM_BYTES
    )
    assert evidence["bytes free"] == free
    assert "needs 9.0 GiB of device memory and 3.0 GiB is free" in note.title


def _check_after_plan(profile: str, device: str) -> LargeTensors:
    check = LargeTensors()
    candidate = CandidateRef(KERNELS, "double")
    check.plan(PlanContext(ROWS, PROFILES[profile], device, 132, candidate))
    return check


def test_a_case_the_problem_cannot_make_or_the_device_cannot_hold_shows_in_the_coverage() -> None:
    check = _check_after_plan("default", "cuda")
    ctx = PlanContext(ROWS, PROFILES["default"], "cuda", 132, None)
    unbatched = replace(ROWS, contract=Contract(batch_axes=()))
    no_case = examine(unbatched, CandidateRef(KERNELS, "double"), "cpu", 1 << 40, 20.0, 64)
    (note,) = check.noted(no_case)
    assert note.key == "not-run:no-case"
    assert coverage(check, ctx) == f"not applicable: {note.title.removeprefix('not run: ')}"
    check = _check_after_plan("default", "cuda")
    (note,) = check.noted(examine(ROWS, CandidateRef(KERNELS, "double"), "cpu", 1, 20.0, 64))
    assert note.key == "not-run:memory"
    assert coverage(check, ctx).startswith("could not run here: the case rows=")


def test_the_quick_profile_never_runs_it() -> None:
    assert _check_after_plan("quick", "cuda").conclude([]) == []


@pytest.mark.slow
@pytest.mark.parametrize("profile", ["default", "thorough"])
def test_an_audit_on_the_cpu_says_the_check_could_not_run_for_want_of_a_gpu(profile) -> None:
    problem = FIXTURES / "large_rows.py"
    report = audit(problem, f"{KERNELS}::double", PROFILES[profile], "cpu", ["large-tensors"])
    assert report.verdict == "PASS"
    assert [f for f in report.findings if f.check == "large-tensors"] == []
    (why,) = [why for check, why in report.unverified if check == "large-tensors"]
    assert "needs a CUDA device" in why and "GPU only" in why


def test_outside_the_profiles_that_run_it_the_check_is_not_asked_for_and_not_listed() -> None:
    problem = FIXTURES / "large_rows.py"
    report = audit(problem, f"{KERNELS}::double", PROFILES["quick"], "cpu", ["large-tensors"])
    assert "large-tensors" not in dict(report.unverified)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("candidate", "severity", "key"),
    [("double", "note", "matches"), ("wraps_past_4096", "fail", "large-error:y")],
)
def test_rows_past_the_limit_are_judged_against_the_truth(
    candidate: str, severity: str, key: str
) -> None:
    # the same path as on a GPU, at a limit of 2^12 elements the CPU can afford
    problem = replace(ROWS, inputs=(TensorInput("x", ("rows", "cols"), dtypes=(torch.float16,)),))
    failures = examine(problem, CandidateRef(KERNELS, candidate), "cpu", 1 << 40, 60.0, 1 << 12)
    (finding,) = failures
    assert (finding.severity, finding.key) == (severity, key)
    assert "rows=260" in finding.title
    if severity == "fail":
        assert "in the rows around element 2^12 of x ([255, 256, 257])" in finding.title
        assert dict(finding.evidence)["failing rows"] == {
            "rows around element 2^12 of x": [255, 256, 257],
            "last rows": [256, 257, 258, 259],
        }


@pytest.mark.parametrize(
    ("candidate", "key", "said"),
    [
        # (garbled bytes and repeated strides: `tests/runner/auditor/test_results.py`)
        ("floods_its_result", "large-too-large", "the checked rows can fill; it was not read"),
        ("links_its_result", "large-bad-result", "could not be opened as a file"),
        ("reshapes_its_result", "large-bad-result", "not the checked rows the request asked for"),
    ],
)
def test_a_result_no_honest_child_writes_fails_the_candidate_unread(
    candidate: str, key: str, said: str
) -> None:
    # the child's result lies in a folder the candidate's process can write
    problem = replace(ROWS, inputs=(TensorInput("x", ("rows", "cols"), dtypes=(torch.float16,)),))
    (finding,) = examine(problem, CandidateRef(KERNELS, candidate), "cpu", 1 << 40, 60.0, 1 << 12)
    assert (finding.severity, finding.key) == ("fail", key)
    assert "the candidate's process left a result that was refused" in finding.title
    assert said in finding.title


@pytest.mark.slow
def test_a_child_started_ahead_of_its_case_runs_it_as_a_fresh_one_does() -> None:
    # the check starts the case's process while the probes run; the case itself comes later
    problem = replace(ROWS, inputs=(TensorInput("x", ("rows", "cols"), dtypes=(torch.float16,)),))
    candidate = CandidateRef(KERNELS, "wraps_past_4096")
    fresh = examine(problem, candidate, "cpu", 1 << 40, 60.0, 1 << 12)
    waiting = Waiting(candidate, "cpu")
    assert waiting.fits(candidate, "cpu") and not waiting.fits(candidate, "cuda")
    ahead = examine(problem, candidate, "cpu", 1 << 40, 60.0, 1 << 12, waiting=waiting)
    assert [(f.key, f.title, f.evidence) for f in ahead] == [
        (f.key, f.title, f.evidence) for f in fresh
    ]
    assert ahead[0].key == "large-error:y"
    assert waiting.process.returncode == 0 and not waiting.folder.exists()


def test_a_child_no_case_came_for_is_stopped_and_leaves_nothing_behind() -> None:
    waiting = Waiting(CandidateRef(KERNELS, "double"), "cpu")
    folder = waiting.folder
    assert folder.is_dir() and waiting.process.poll() is None  # waiting for its request
    waiting.close()
    assert waiting.process.returncode is not None and not folder.exists()
    assert not waiting.fits(CandidateRef(KERNELS, "double"), "cpu")
    waiting.close()  # twice is harmless


def test_a_child_started_for_another_candidate_is_not_given_the_case() -> None:
    problem = replace(ROWS, inputs=(TensorInput("x", ("rows", "cols"), dtypes=(torch.float16,)),))
    other = Waiting(CandidateRef(KERNELS, "wraps_past_4096"), "cpu")
    (finding,) = examine(
        problem, CandidateRef(KERNELS, "double"), "cpu", 1 << 40, 60.0, 1 << 12, waiting=other
    )
    assert (finding.severity, finding.key) == ("note", "matches")  # the double's own verdict
    assert other.process.returncode is not None and not other.folder.exists()


def _refuses_past_4096(x: torch.Tensor) -> torch.Tensor:
    if x.numel() > 4096:
        raise RuntimeError(f"invalid size: {x.numel()} elements")
    return x * 2


@pytest.mark.slow
def test_a_candidate_that_raises_where_the_reference_raises_too_is_not_failed_for_it() -> None:
    # at a limit of 2^12 elements, as on a GPU at 2^31
    small = replace(ROWS, inputs=(TensorInput("x", ("rows", "cols"), dtypes=(torch.float16,)),))
    refusing = replace(small, reference=_refuses_past_4096)
    candidate = CandidateRef(KERNELS, "refuses_past_4096")
    check = _check_after_plan("default", "cuda")
    (note,) = check.noted(examine(refusing, candidate, "cpu", 1 << 40, 60.0, 1 << 12))
    assert (note.severity, note.key) == ("note", "not-run:reference")
    assert "the reference raises there too (RuntimeError: invalid size: 4160 elements)" in (
        note.title
    )
    ctx = PlanContext(refusing, PROFILES["default"], "cuda", 132, None)
    assert coverage(check, ctx).startswith("could not run here: not judged at rows=260")
    # where the reference runs the case, the candidate's error is its own failure
    (finding,) = examine(small, candidate, "cpu", 1 << 40, 60.0, 1 << 12)
    assert (finding.severity, finding.key) == ("fail", "large-exception")
    assert "invalid size: 4160 elements" in finding.title


@pytest.mark.slow
def test_a_destination_style_candidate_that_leaves_rows_unwritten_fails() -> None:
    problem = replace(
        ROWS,
        inputs=(TensorInput("x", ("rows", "cols"), dtypes=(torch.float16,)),),
        contract=Contract(style="destination"),
    )
    failures = examine(
        problem, CandidateRef(KERNELS, "double_into_first_4096"), "cpu", 1 << 40, 60.0, 1 << 12
    )
    (finding,) = failures
    assert finding.severity == "fail"
    assert finding.key == "large-nan-where-finite:y"


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("profile", ["default", "thorough"])
@pytest.mark.parametrize(
    ("candidate", "verdict"), [("double_int32_offsets", "FAIL"), ("double_int64_offsets", "PASS")]
)
def test_a_triton_kernel_with_int32_offsets_fails_past_2_to_the_31_and_its_int64_twin_passes(
    candidate: str, verdict: str, profile: str, finding_of: Callable[[AuditReport, str], Finding]
) -> None:
    problem = FIXTURES / "large_rows.py"
    report = audit(problem, f"{KERNELS}::{candidate}", PROFILES[profile], "cuda", ["large-tensors"])
    finding = finding_of(report, "large-tensors")
    assert report.verdict == verdict, finding.title
    assert "rows=524,292" in finding.title  # 2^31 / 4096 columns + 4 rows past the limit
    assert finding.severity == ("fail" if verdict == "FAIL" else "note")


def _waiting_children() -> list[int]:
    """The processes of this host waiting, as the check starts them, for a large case."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"kernelaudit.large.child" in command and b"--wait" in command:
            found.append(int(entry.name))
    return found


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_the_cases_process_starts_with_the_plan_and_ends_with_the_check() -> None:
    before = set(_waiting_children())
    check = _check_after_plan("default", "cuda")
    started = set(_waiting_children()) - before
    assert started, "no process started ahead of the large case"
    (finding,) = check.conclude([])
    assert (finding.severity, finding.key) == ("note", "matches"), finding.title
    assert not set(_waiting_children()) & started
    # a check whose case never comes (the audit ended another way) stops it too
    check = _check_after_plan("default", "cuda")
    assert set(_waiting_children()) - before
    check.plan(PlanContext(ROWS, PROFILES["quick"], "cuda", 132, CandidateRef(KERNELS, "double")))
    assert not set(_waiting_children()) - before


def _softmax_backward(g: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return y * (g - (g * y).sum(-1, keepdim=True))


def test_rows_of_a_case_that_cancels_to_rounding_residue_are_judged_by_its_sensitivity() -> None:
    # a softmax backward of an upstream gradient of ones: every true value is rounding residue,
    # which only the case's own sensitivity to its inputs' last bits can judge
    problem = Problem(
        name="softmax_backward",
        reference=_softmax_backward,
        axes=("rows", "cols"),
        inputs=(TensorInput("g", ("rows", "cols")), TensorInput("y", ("rows", "cols"))),
        outputs=(Output("dx", ("rows", "cols"), dtype="g"),),
        workloads=({"rows": 32, "cols": 1000},),
    )
    torch.manual_seed(0)
    y = torch.softmax(torch.randn(32, 1000), -1)
    inputs = {"g": torch.ones(32, 1000), "y": y}
    expect = expected(problem, inputs, {"g": torch.float32, "y": torch.float32}, "cpu")
    reordered = y - y * y.flip(-1).cumsum(-1)[..., -1:]  # correct: the dot product reordered
    rows = (0, torch.tensor([3, 17, 30]))  # as the check picks the rows around the limit
    cpu = torch.device("cpu")
    assert compare_expected(expect, 0, reordered, cpu, rows=rows).passed
    wrong = compare_expected(expect, 0, reordered + 1e-3 * y, cpu, rows=rows)
    assert not wrong.passed and wrong.failure == "error"


def test_the_large_cases_ids_keep_what_their_callers_guarantee() -> None:
    # drawn on the device from plain values, the large case's ids are sorted, distinct or
    # below another input's values where the problem says its callers pass them so
    def index(name: str, shape: list[int], bound: int, **said: object) -> dict[str, object]:
        spec = {"name": name, "kind": "index", "shape": shape, "dtype": "int64", "dim": 0}
        return {**spec, "bound": bound, **said}

    specs = [
        index("lengths", [64], 40),
        index("positions", [64, 16], 40, below="lengths"),
        index("segments", [300], 20, sorted=True),
        index("slots", [30], 50, unique=True),
    ]
    lengths, positions, segments, slots = drawn_all(specs, torch.device("cpu"), seed=3)
    assert int(lengths.min()) >= 1
    assert bool((positions < lengths[:, None]).all()) and bool((positions >= 0).all())
    assert bool((segments[1:] >= segments[:-1]).all())
    assert slots.unique().numel() == 30 and int(slots.max()) < 50
    with pytest.raises(CaseUnavailable, match="30 ids declared unique cannot index 20 rows"):
        drawn_all([index("slots", [30], 20, unique=True)], torch.device("cpu"), seed=3)
