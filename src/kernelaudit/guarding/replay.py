"""`kernelaudit repro RECORD.json`: a guard's failing call run again, on its kept inputs.

The kernel runs where every candidate runs, in a sandboxed worker (`runner.auditor.process`); the
reference is imported from its file here, as a problem's is; the outputs are judged as the
guard judged them (`judged`). The exit status says whether the failure is still there.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.markup import escape

from kernelaudit.errors import UsageError
from kernelaudit.guarding.judged import judge
from kernelaudit.guarding.records import read_record
from kernelaudit.runner.auditor.process import Worker
from kernelaudit.runner.boundary.messages import Call, Invocation, TensorArg
from kernelaudit.runner.candidate import CandidateRef
from kernelaudit.sourcefile import import_source


def replay_record(path: Path, device: str, console: Console) -> int:
    """Run the record's call again; 1 when an output still fails, 0 when none does."""
    record, args = read_record(path)
    kernel, reference = (_located(record, side, path) for side in ("kernel", "reference"))
    call = Call(
        args=tuple(TensorArg(a, "contiguous") if isinstance(a, torch.Tensor) else a for a in args)
    )
    with Worker(CandidateRef(kernel["file"], kernel["function"]), device) as worker:
        result = worker.run(Invocation(calls=(call,)))
    console.print(
        f"{escape(record['guard'])}: call {record['call']} ({escape(record['why'])}), replayed "
        f"on {device}"
    )
    for said in record.get("outputs", ()):
        if not said.get("passed", True):
            console.print(f"recorded: {escape(said.get('reason', ''))}")
    if result.error:
        console.print(f"[red]the kernel failed to run: {escape(result.error)}[/]")
        return 1
    function = _function(Path(reference["file"]), reference["function"])
    names = [o.get("name", f"output {k}") for k, o in enumerate(record.get("outputs", ()))]
    on_device = [a.to(device) if isinstance(a, torch.Tensor) else a for a in args]
    outputs = [t.to(device) for t in result.calls[0].outputs]
    verdicts = judge(function, on_device, outputs, names, ())
    failing = [v for v in verdicts if not v.passed]
    for verdict in failing:
        console.print(f"[red]still fails: {escape(verdict.reason)}[/]")
    if not failing:
        console.print("[green]no longer fails: every output is within the oracle's bounds[/]")
    return 1 if failing else 0


def _located(record: dict[str, Any], side: str, path: Path) -> dict[str, str]:
    where = record.get(side)
    if not where:
        raise UsageError(
            f"{path}: the guard could not say where its {side} is defined (a lambda or a "
            f"nested function); guard a {side} defined at the top of a file to replay its "
            "records"
        )
    if not Path(where["file"]).is_file():
        raise UsageError(f"{path}: the {side}'s file {where['file']} is not there any more")
    return where


def _function(file: Path, name: str) -> Any:
    digest = hashlib.sha1(str(file).encode()).hexdigest()[:12]
    module = import_source(file, f"kernelaudit_reference_{digest}_{file.stem}")
    function = getattr(module, name, None)
    if not callable(function):
        raise UsageError(f"{file} defines no function {name!r} any more")
    return function
