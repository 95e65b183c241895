"""Where a `kernelaudit check` command's time goes outside its audit: torch's import,
kernelaudit's, the audit itself (the report's phases), the reports written, and the rest
(Python's start and end), for one command run in-process with those parts timed, its first
worker started before torch is imported as the `kernelaudit` command starts it.

    python benchmarks/command_parts.py --out parts.json -- PROBLEM CANDIDATE --profile quick

The command's own arguments follow `--` as `kernelaudit check` takes them (`--json` is added
where they have none).
"""

from __future__ import annotations

import time

_BEGAN = time.perf_counter()

import sys  # noqa: E402

from kernelaudit.runner import prestart  # noqa: E402

_COMMAND = sys.argv[sys.argv.index("--") + 1 :] if "--" in sys.argv else []
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
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
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
    code = cli.main(["check", *command])
    ended = time.perf_counter()
    audited = json.loads(report.read_text())["reports"]
    record = {
        "command": command,
        "exit": code,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "import torch_s": round(_TORCH - _BEGAN, 3),
        "import kernelaudit_s": round(_KERNELAUDIT - _TORCH, 3),
        "before the audit_s": round(ended - began - sum(parts.values()), 3),
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
    sys.exit(main())
