"""The tripwires check: a construct in the source is a warning on its own and a failure only
when a runtime check it names fails in the same audit."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console

from kernelaudit.findings import AuditReport
from kernelaudit.report.terminal import verdict_table

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
        '_harness = sys.modules.get("kernelaudit.runner.call")\n\n\n'
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
