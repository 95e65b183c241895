"""`kernelaudit repro RECORD.json`: a guard's failing call run again on its kept inputs."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import torch

import kernelaudit
from kernelaudit.cli import main

from .fixtures import kernels

FIXTURE = Path(__file__).parent / "fixtures" / "kernels.py"


def _record(tmp_path: Path) -> tuple[Path, Path]:
    """A failing call's record, for a copy of the kernels' file (which a test may fix)."""
    source = tmp_path / "kernels_copy.py"
    shutil.copy(FIXTURE, source)
    spec = importlib.util.spec_from_file_location("kernels_copy", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fast = kernelaudit.guard(
        module.scale_wrong_past_4096, module.scale, records=tmp_path / "records"
    )
    fast(torch.randn(8192))
    (failure,) = fast.flush().failures
    return Path(failure.record), source


def test_a_recorded_failure_replays_as_a_failure_and_a_fixed_kernel_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record, source = _record(tmp_path)
    written = json.loads(record.read_text())
    assert written["kind"] == "kernelaudit-guard-failure"
    (argument,) = written["arguments"]
    assert argument == {"tensor": "argument 0", "shape": [8192], "dtype": "torch.float32"}
    assert main(["repro", str(record), "--device", "cpu"]) == 1
    said = " ".join(capsys.readouterr().out.split())
    assert "call 1" in said and "still fails" in said
    source.write_text(source.read_text().replace("y.view(-1)[4096:] = 0", "pass"))
    assert main(["repro", str(record), "--device", "cpu"]) == 0
    assert "no longer fails" in " ".join(capsys.readouterr().out.split())


def test_a_record_whose_inputs_were_not_kept_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fast = kernelaudit.guard(
        kernels.scale_wrong_past_4096, kernels.scale, records=tmp_path, keep_bytes=1024
    )
    fast(torch.randn(8192))
    (failure,) = fast.flush().failures
    assert main(["repro", failure.record, "--device", "cpu"]) == 2
    assert "inputs were not kept" in " ".join(capsys.readouterr().err.split())


def test_a_report_replayed_without_a_finding_asks_for_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"reports": []}))
    assert main(["repro", str(report)]) == 2
    assert "name the finding of" in " ".join(capsys.readouterr().err.split())
