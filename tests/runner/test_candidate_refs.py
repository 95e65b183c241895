"""Naming candidates, and what a user sees when the name or the file is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelaudit.errors import UsageError
from kernelaudit.runner.auditor.process import Worker
from kernelaudit.runner.boundary.messages import Call, Invocation, TensorArg
from kernelaudit.runner.candidate import CandidateRef, from_callable, parse_candidate

FIXTURES = Path(__file__).parent / "fixtures"


def module_level_kernel(x: torch.Tensor) -> torch.Tensor:
    return x


def test_spec_names_file_and_function() -> None:
    ref = parse_candidate(f"{FIXTURES}/behaviours.py::candidate")
    assert ref == CandidateRef(str((FIXTURES / "behaviours.py").resolve()), "candidate")
    assert ref.label == "behaviours.py::candidate"


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("kernel.py", 'write it as "path/to/file.py::function_name"'),
        ("kernel.py::", "is not a Python function name"),
        (f"{FIXTURES}/missing.py::kernel", "there is no file"),
        (f"{FIXTURES}/kernel.cu::kernel", "is not a Python file"),
    ],
)
def test_bad_spec_is_a_usage_error_naming_the_spec(spec: str, says: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_candidate(spec)
    assert spec in str(caught.value)
    assert says in str(caught.value)


def test_module_level_function_becomes_a_ref() -> None:
    ref = from_callable(module_level_kernel)
    assert ref == CandidateRef(str(Path(__file__).resolve()), "module_level_kernel")


def test_functions_a_worker_cannot_import_are_refused() -> None:
    def nested(x: torch.Tensor) -> torch.Tensor:
        return x

    for fn in (nested, lambda x: x, len):
        with pytest.raises(UsageError, match="module-level function"):
            from_callable(fn)


def test_missing_function_is_a_usage_error_listing_the_functions_there() -> None:
    worker = Worker(parse_candidate(f"{FIXTURES}/triton_kernels.py::absent"), "cpu", 5.0)
    with pytest.raises(UsageError) as caught:
        worker.start()
    message = str(caught.value)
    assert "triton_kernels.py defines no function 'absent'" in message
    assert "copy, masked_copy, unmasked_copy" in message


def test_exception_at_import_fails_every_run() -> None:
    ref = parse_candidate(f"{FIXTURES}/raises_at_import.py::kernel")
    with Worker(ref, "cpu", 5.0) as worker:
        for _ in range(2):
            result = worker.run(Invocation(calls=(Call(args=(TensorArg(torch.ones(2)),)),)))
            assert result.error_kind == "exception"
            assert "RuntimeError: this kernel needs a GPU with compute" in result.error
            assert "raises_at_import.py" in result.error


def test_syntax_error_fails_every_run(tmp_path: Path) -> None:
    source = tmp_path / "broken.py"
    source.write_text("def kernel(x):\n    return x +\n")
    with Worker(parse_candidate(f"{source}::kernel"), "cpu", 5.0) as worker:
        result = worker.run(Invocation(calls=(Call(args=(TensorArg(torch.ones(2)),)),)))
    assert result.error_kind == "exception"
    assert "SyntaxError" in result.error
    assert "broken.py" in result.error


def test_candidate_imports_its_sibling_modules(tmp_path: Path) -> None:
    (tmp_path / "kernel_helpers.py").write_text("def scale(x):\n    return 3 * x\n")
    (tmp_path / "kernel.py").write_text(
        "from kernel_helpers import scale\n\n\ndef kernel(x):\n    return scale(x)\n"
    )
    x = torch.randn(3)
    with Worker(parse_candidate(f"{tmp_path}/kernel.py::kernel"), "cpu", 5.0) as worker:
        result = worker.run(Invocation(calls=(Call(args=(TensorArg(x),)),)))
    assert result.error == ""
    assert torch.equal(result.calls[0].outputs[0], 3 * x)


@pytest.mark.parametrize(
    ("source", "load_timeout_s", "kind", "says"),
    [
        ("import os\n\nos._exit(3)\n", 60.0, "crash", "exited with code 3"),
        # The load limit covers the worker's own start (importing torch) too.
        ("while True:\n    pass\n", 4.0, "timeout", "took longer than 4 s"),
    ],
)
def test_import_that_dies_or_hangs_fails_every_run(
    tmp_path: Path, source: str, load_timeout_s: float, kind: str, says: str
) -> None:
    (tmp_path / "kernel.py").write_text(source + "\n\ndef kernel(x):\n    return x\n")
    ref = parse_candidate(f"{tmp_path}/kernel.py::kernel")
    with Worker(ref, "cpu", timeout_s=5.0, load_timeout_s=load_timeout_s) as worker:
        for _ in range(2):
            result = worker.run(Invocation(calls=(Call(args=(TensorArg(torch.ones(2)),)),)))
            assert result.error_kind == kind
            assert says in result.error
