"""Bytecode planted beside a problem or a candidate, whose header claims the source's size and
modification time, so Python's own import would run it while the `.py` stays byte-identical:
kernelaudit compiles both from their source text, and writes no bytecode for them."""

from __future__ import annotations

import importlib.util
import os
import py_compile
from pathlib import Path

from kernelaudit.problem.load import load_problem
from kernelaudit.runner.candidate import CandidateRef, load_candidate

SOURCE = (Path(__file__).parent / "fixtures" / "problem" / "double.py").read_text()
CANDIDATE = "import torch\n\n\ndef double(x):\n    return x * 2\n"


def _plant(real: Path, impostor_text: str, folder: Path) -> None:
    """Compile `impostor_text` into the bytecode cache of `real`, with a header that matches
    `real`'s size and modification time."""
    assert len(impostor_text) == len(real.read_text())
    impostor = folder / "impostor.py"
    impostor.write_text(impostor_text)
    stat = real.stat()
    os.utime(impostor, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    cache = importlib.util.cache_from_source(str(real))
    py_compile.compile(str(impostor), cfile=cache, dfile=str(real), doraise=True)


def _plain_import(file: Path, name: str) -> object:
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bytecode_planted_beside_a_problem_is_never_run(tmp_path: Path) -> None:
    (tmp_path / "problem").mkdir()
    real = tmp_path / "problem" / "double.py"
    real.write_text(SOURCE)
    _plant(real, SOURCE.replace('name="double"', 'name="plants"'), tmp_path)
    # Python's own import runs the planted bytecode ...
    assert _plain_import(real, "plain_double").problem.name == "plants"  # type: ignore[attr-defined]
    # ... kernelaudit reads the source
    assert load_problem(real).name == "double"


def test_bytecode_planted_beside_a_candidate_is_never_run(tmp_path: Path) -> None:
    real = tmp_path / "candidate.py"
    real.write_text(CANDIDATE)
    _plant(real, CANDIDATE.replace("x * 2", "x * 3"), tmp_path)
    import torch

    assert _plain_import(real, "plain_candidate").double(torch.ones(1)).item() == 3.0  # type: ignore[attr-defined]
    loaded = load_candidate(CandidateRef(str(real), "double"))
    assert loaded(torch.ones(1)).item() == 2.0


def test_no_bytecode_is_written_for_a_problem_or_a_candidate(tmp_path: Path) -> None:
    real = tmp_path / "double.py"
    real.write_text(SOURCE)
    load_problem(real)
    candidate = tmp_path / "candidate.py"
    candidate.write_text(CANDIDATE)
    load_candidate(CandidateRef(str(candidate), "double"))
    assert not (tmp_path / "__pycache__").exists()
