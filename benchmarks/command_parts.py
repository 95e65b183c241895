"""Where a `kernelaudit check` command's time goes outside its audit: torch's import,
kernelaudit's, the audits themselves (the reports' phases), the reports written, and the rest of
the command (reading the problem and candidates before, the terminal's tables after), for one
command run in-process with those parts timed. It starts as the `kernelaudit` command does
(`kernelaudit.__main__`): the host's idle threads told to sleep soon, and the first
candidate's worker started before torch is imported. Python's own start and end are outside
it: the record's `wall_s` runs from this script's first line to the command's end, and
`began_at` and `ended_at` are those two moments on the host's clock, for a caller that times
the process from outside (`gpu_run.sh command-end`). The process ends as the command's does
(`os._exit` once the record is written: nothing of torch or the device is torn down).

    python benchmarks/command_parts.py --out parts.json -- PROBLEM CANDIDATE --profile quick

The command's own arguments follow `--` as `kernelaudit check` takes them (`--json` is added
where they have none).
"""

from __future__ import annotations

import time

_BEGAN = time.perf_counter()
_BEGAN_AT = time.time()

import os  # noqa: E402
import sys  # noqa: E402

from kernelaudit.runner.auditor import prestart, threads  # noqa: E402

_COMMAND = sys.argv[sys.argv.index("--") + 1 :] if "--" in sys.argv else []
threads.settle_waits()
prestart.start_for(["check", *_COMMAND])

import argparse  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

_TORCH = time.perf_counter()

import kernelaudit.cli as cli  # noqa: E402

_KERNELAUDIT = time.perf_counter()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(
        sys.argv[1 : sys.argv.index("--")] if "--" in sys.argv else sys.argv[1:]
    )
    if not _COMMAND:
        parser.error("give the command's arguments after --: PROBLEM CANDIDATE [options]")
    command = list(_COMMAND)
    report = Path(tempfile.mkdtemp()) / "report.json"
    if "--json" not in command:
        command += ["--json", str(report)]
    else:
        report = Path(command[command.index("--json") + 1])
    parts: dict[str, float] = {}

    def timed(module: object, name: str) -> None:
        function = getattr(module, name)

        def wrapper(*a: object, **k: object) -> object:
            began = time.perf_counter()
            try:
                return function(*a, **k)
            finally:
                parts[name] = parts.get(name, 0.0) + time.perf_counter() - began

        setattr(module, name, wrapper)

    for name in ("_audit_all", "write_outputs"):
        timed(cli, name)
    began = time.perf_counter()
    try:
        code = cli.main(["check", *command])
    finally:
        prestart.discard()
    ended = time.perf_counter()
    if not report.is_file():
        print(f"the command wrote no report (exit {code}): see its output above", file=sys.stderr)
        return 1
    audited = json.loads(report.read_text())["reports"]
    record = {
        "command": command,
        "exit": code,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "wall_s": round(ended - _BEGAN, 3),
        # on the host's clock, for a caller that times the process from outside: what comes
        # before (the interpreter's start) and after (its end, the device's release)
        "began_at": _BEGAN_AT,
        "ended_at": _BEGAN_AT + (ended - _BEGAN),
        "import torch_s": round(_TORCH - _BEGAN, 3),
        "import kernelaudit_s": round(_KERNELAUDIT - _TORCH, 3),
        "rest of the command_s": round(ended - began - sum(parts.values()), 3),
        "audits_s": round(parts.get("_audit_all", 0.0), 3),
        "reports written_s": round(parts.get("write_outputs", 0.0), 3),
        "audit seconds": [r["seconds"] for r in audited],
        "phases": [r["phases"] for r in audited],
    }
    print(json.dumps(record, indent=1))
    if args.out:
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    code = main()
    # as the command ends (`cli.run`: a `check` leaves torch's modules and the device's
    # context to the system), so that a process timed from outside ends as the command does
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
