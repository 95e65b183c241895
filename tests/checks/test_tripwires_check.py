"""The tripwires check: a construct in the source is a warning on its own and a failure only
when a runtime check it names fails in the same audit."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console

from kernelaudit.checks.base import Failure
from kernelaudit.checks.tripwires import Tripwires
from kernelaudit.findings import AuditReport
from kernelaudit.report.terminal import verdict_table
from kernelaudit.tripwires import scan_candidate

HONEST = "row_scale_kernels.py::scale"


@pytest.fixture(scope="module")
def cached(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A row-scale candidate that keeps its result keyed on the input's address."""
    path = tmp_path_factory.mktemp("tripwires") / "cached_scale.py"
    path.write_text(
        "import torch\n"
        "_seen = {}\n\n\n"
        "def scale(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:\n"
        "    key = x.data_ptr()\n"
        "    if key not in _seen:\n"
        "        _seen[key] = x * w\n"
        "    return _seen[key]\n"
    )
    return path


def test_an_honest_file_trips_nothing(tiny_audit: Callable[..., AuditReport]) -> None:
    report = tiny_audit("row_scale", HONEST, ["tripwires"])
    assert report.verdict == "PASS"
    assert [f for f in report.findings if f.check == "tripwires"] == []
    assert "tripwires" not in dict(report.unverified)


def test_on_a_cpu_a_gpu_flag_set_on_the_gpu_path_alone_is_an_unverified_risk(
    tiny_audit: Callable[..., AuditReport], tmp_path: Path
) -> None:
    # TF32 turned on where the inputs are on a GPU: a CPU run never takes that branch, and the
    # flag would change nothing it computes if it did
    path = tmp_path / "tf32_scale.py"
    path.write_text(
        "import torch\n\n\n"
        "def scale(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:\n"
        "    if x.is_cuda:\n"
        "        torch.backends.cuda.matmul.allow_tf32 = True\n"
        "    return x * w\n"
    )
    report = tiny_audit("row_scale", f"{path}::scale", ["numerics", "global-state", "tripwires"])
    assert report.verdict == "PASS"
    found = [f for f in report.findings if f.check == "tripwires"]
    assert {(f.severity, f.key.split(":")[0]) for f in found} == {("warn", "gpu-flags")}
    assert dict(report.unverified)["tripwires"] == (
        "gpu-flags at tf32_scale.py:6: only a run on a GPU can confirm or rule out"
    )
    assert report.unconfirmed == ("tripwires",)


def test_on_a_cpu_a_side_stream_the_scan_saw_is_an_unverified_risk(
    tiny_audit: Callable[..., AuditReport], tmp_path: Path
) -> None:
    path = tmp_path / "stream_scale.py"
    path.write_text(
        "import torch\n\n\n"
        "def scale(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:\n"
        "    if not x.is_cuda:\n"
        "        return x * w\n"
        "    side = torch.cuda.Stream(x.device)\n"
        "    with torch.cuda.stream(side):\n"
        "        return x * w\n"
    )
    report = tiny_audit("row_scale", f"{path}::scale", ["numerics", "tripwires"])
    assert report.verdict == "PASS"  # a warning: nothing at run time confirmed it
    found = [f for f in report.findings if f.check == "tripwires"]
    assert {(f.severity, f.key.split(":")[0]) for f in found} == {("warn", "streams")}
    why = dict(report.unverified)["tripwires"]
    assert why == (
        "streams at stream_scale.py:7, streams at stream_scale.py:8: only a run on a GPU can "
        "confirm or rule out"
    )
    # the verdict says it: a risk of this candidate's own, not a check the CPU cannot run
    assert report.unconfirmed == ("tripwires",)
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(verdict_table([report]))
    assert "PASS (unconfirmed on cpu: tripwires)" in console.file.getvalue()


_ROW_SCALE_TRITON = """import torch
import triton
import triton.language as tl


@triton.jit
def _scale(x_ptr, w_ptr, y_ptr, n, cols, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    x = tl.load(x_ptr + offsets, mask=inside)
    w = tl.load(w_ptr + offsets % cols, mask=inside)
    {write}


def scale(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    x, w = x.contiguous(), w.contiguous()
    y = torch.zeros_like(x)
    _scale[(triton.cdiv(x.numel(), 64),)](x, w, y, x.numel(), x.shape[1], BLOCK=64)
    return y
"""


@pytest.mark.parametrize(
    ("write", "unverified"),
    [
        # each element added once to a zero: right on a CPU, where the programs run one after
        # another, and a risk only a GPU run can confirm or rule out
        (
            "tl.atomic_add(y_ptr + offsets, x * w, mask=inside)",
            "atomics at atomic_scale.py:12: only a run on a GPU can confirm or rule out",
        ),
        ("tl.store(y_ptr + offsets, x * w, mask=inside)", None),
    ],
)
def test_on_a_cpu_atomics_are_a_risk_the_verdict_states_and_no_warning(
    tiny_audit: Callable[..., AuditReport], tmp_path: Path, write: str, unverified: str | None
) -> None:
    path = tmp_path / "atomic_scale.py"
    path.write_text(_ROW_SCALE_TRITON.format(write=write))
    report = tiny_audit("row_scale", f"{path}::scale", ["numerics", "tripwires"])
    assert report.verdict == "PASS"
    # honest in most kernels that have them: a note where the risk cannot be shown, no warning
    found = [(f.severity, f.key.split(":")[0]) for f in report.findings if f.check == "tripwires"]
    assert found == ([("note", "atomics")] if unverified else [])
    assert dict(report.unverified).get("tripwires") == unverified
    # the verdict says it: a risk of this candidate's own, not a check the CPU cannot run
    assert report.unconfirmed == (("tripwires",) if unverified else ())
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(verdict_table([report]))
    shown = "PASS (unconfirmed on cpu: tripwires)" in console.file.getvalue()
    assert shown == bool(unverified)


def test_on_a_gpu_atomics_say_nothing_unless_a_check_they_risk_fails(tmp_path: Path) -> None:
    # where the determinism and races checks run, they speak for the atomics: an atomic kernel
    # that passes them carries no finding, one that fails them is pointed at its atomics
    path = tmp_path / "atomic_scale.py"
    path.write_text(_ROW_SCALE_TRITON.format(write="tl.atomic_add(y_ptr + offsets, x * w)"))
    check = Tripwires()
    check.found = scan_candidate(path)
    check.on_gpu = True
    assert check.conclude([]) == []
    differing = Failure("differs", "runs differ in their last bits", severity="warn")
    assert check.conclude([("determinism", differing)]) == []
    (confirmed,) = check.conclude([("races", Failure("race", "outputs differ under contention"))])
    assert confirmed.severity == "fail"
    assert confirmed.title.startswith("atomics at atomic_scale.py:12: tl.atomic_add(")
    assert confirmed.title.endswith("(confirmed by the races check)")


def test_a_file_the_scan_cannot_read_is_listed_as_unverified(
    tiny_audit: Callable[..., AuditReport], tmp_path: Path
) -> None:
    # it imports and runs; only the scan cannot walk its deepest expression
    deep = " + ".join(["x * 0"] * 800)
    path = tmp_path / "deep_scale.py"
    path.write_text(
        "import torch\n\n\n"
        "def scale(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:\n"
        f"    return x * w + ({deep})\n"
    )
    report = tiny_audit("row_scale", f"{path}::scale", ["numerics", "tripwires"])
    assert report.verdict == "PASS"
    why = dict(report.unverified)["tripwires"]
    assert "deep_scale.py (an expression nested too deeply to walk)" in why


def test_a_cache_keyed_on_addresses_is_a_warning_without_runtime_evidence(
    tiny_audit: Callable[..., AuditReport], cached: Path
) -> None:
    report = tiny_audit("row_scale", f"{cached}::scale", ["tripwires"])
    wires = [f for f in report.findings if f.check == "tripwires"]
    assert report.verdict == "PASS"
    assert wires and all(f.severity == "warn" for f in wires)
    cache = next(f for f in wires if f.key.startswith("address-keyed-cache:"))
    assert dict(cache.evidence)["line"] in (6, 7, 8, 9)
    assert cache.probe is None


def test_the_replay_check_confirms_it_and_the_warning_becomes_a_failure(
    tiny_audit: Callable[..., AuditReport], cached: Path
) -> None:
    report = tiny_audit("row_scale", f"{cached}::scale", ["tripwires", "replay"], warmup_calls=2)
    assert any(f.check == "replay" and f.severity == "fail" for f in report.findings)
    cache = next(f for f in report.findings if f.key.startswith("address-keyed-cache:"))
    assert cache.severity == "fail"
    assert "confirmed by the replay check" in cache.title


def test_a_write_into_the_auditors_own_code_fails_on_its_own(
    tiny_audit: Callable[..., AuditReport], tmp_path: Path
) -> None:
    # right, and its timing untouched: the write alone is the finding (no kernel has a reason
    # to rebind the harness that runs in its process)
    path = tmp_path / "rebinding_scale.py"
    path.write_text(
        "import sys\n\n"
        "import torch\n\n"
        '_harness = sys.modules.get("kernelaudit.runner.worker.call")\n\n\n'
        "def scale(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:\n"
        "    if _harness is not None:\n"
        "        _harness.check_guards = _harness.check_guards\n"
        "    return x * w\n"
    )
    report = tiny_audit("row_scale", f"{path}::scale", ["numerics", "tripwires"])
    assert report.verdict == "FAIL"
    (wire,) = [f for f in report.failures if f.check == "tripwires"]
    assert wire.key.startswith("harness-tampering:")
    assert dict(wire.evidence)["line"] == 10
    assert "a failure on its own" in wire.title
    assert not [f for f in report.failures if f.check != "tripwires"]
