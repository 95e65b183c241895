"""`kernelaudit scan FILE[::function] ...`: the tripwires' static scan alone, for a pre-commit
hook or an editor: no problem, no run, no torch; a line per construct that games a benchmark,
as `file:line: rule: source` (what compilers print, so editors and hooks link to it).

Exit codes: 0 nothing found, 1 a tripwire found or a file the scan could not read, 2 a usage
error (a file that does not exist).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from kernelaudit.tripwires.rules import RULES
from kernelaudit.tripwires.scan import scan


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `scan` to the command line's subcommands."""
    command = subparsers.add_parser(
        "scan",
        help="scan candidate sources for benchmark-gaming constructs, without running them",
        description="Read each candidate file (and the local modules and CUDA sources it uses) "
        "for constructs that game a benchmark: patched timers, frame or gc walking, caches keyed "
        "on addresses, side streams, environment sniffing, dynamic code. Nothing is run. An "
        "audit (`kernelaudit check`) runs the same scan and confirms or clears each construct "
        "with the runtime checks; here every one is reported.",
    )
    command.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="a candidate file, or file.py::function to count only the code that function can "
        "reach",
    )
    command.set_defaults(run=run_scan)


def run_scan(args: argparse.Namespace, console: Console) -> int:
    found = 0
    for named in args.files:
        file, _, function = named.partition("::")
        scanned = scan(Path(file), function or None)
        for wire in scanned.tripwires:
            if RULES[wire.rule].quiet:
                continue  # honest in most kernels that have it: an audit confirms it or not
            found += 1
            where = f"{_shown(wire.path)}:{wire.line}"
            console.print(
                f"{escape(where)}: {wire.rule}: {escape(wire.text)}\n    {escape(wire.why)}",
                highlight=False,
                soft_wrap=True,
            )
        for path, why in scanned.unread:
            found += 1
            console.print(
                f"{escape(_shown(path))}: not read ({escape(why)}): nothing in it was checked",
                highlight=False,
                soft_wrap=True,
            )
    return 1 if found else 0


def _shown(path: str) -> str:
    """`path` relative to the working folder where it lies inside it."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path
