"""`kernelaudit scan`: the static scan alone, as a pre-commit hook runs it: one
`file:line: rule` line per construct, exit 1 when there is one, 0 for a clean file."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelaudit.cli import main

CLEAN = "import torch\n\n\ndef scale(x, factor):\n    return x * factor\n"
PATCHED = (
    "import time\n\n_real = time.perf_counter\ntime.perf_counter = lambda: _real() / 10\n\n\n"
    "def scale(x, factor):\n    return x * factor\n"
)


def test_a_construct_that_games_a_timer_is_reported_on_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "clean.py").write_text(CLEAN)
    (tmp_path / "patched.py").write_text(PATCHED)
    monkeypatch.chdir(tmp_path)
    assert main(["scan", "clean.py"]) == 0
    assert capsys.readouterr().out == ""
    assert main(["scan", "clean.py", "patched.py::scale"]) == 1
    said = capsys.readouterr().out
    assert said.startswith("patched.py:4: timer-patching: time.perf_counter = lambda")


def test_a_file_the_scan_cannot_read_fails_and_a_missing_one_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("def scale(x:\n")
    assert main(["scan", str(broken)]) == 1
    assert "not read" in capsys.readouterr().out
    assert main(["scan", str(tmp_path / "missing.py")]) == 2


def test_atomics_alone_are_not_reported_as_gaming_a_benchmark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # a hook that failed every kernel with an atomic addition would be switched off: an audit
    # confirms or clears them (the determinism and races checks, on a GPU)
    (tmp_path / "totals.py").write_text(
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
        "def _total(x_ptr, out_ptr):\n    tl.atomic_add(out_ptr, tl.load(x_ptr))\n"
    )
    monkeypatch.chdir(tmp_path)
    assert main(["scan", "totals.py"]) == 0
    assert capsys.readouterr().out == ""
