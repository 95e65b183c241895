"""The `kernelaudit` command (and `python -m kernelaudit`).

A `check` starts its first candidate's worker before anything imports torch
(`runner.auditor.prestart`), then the command line runs as usual. The command's idle OpenMP threads
sleep soon, as its children's do (`runner.auditor.threads.settle_waits`)."""

from __future__ import annotations

import contextlib
import sys
from typing import NoReturn

from kernelaudit.runner.auditor import prestart, threads


def run() -> NoReturn:
    threads.settle_waits()  # before torch starts OpenMP
    # only a head start: whatever goes wrong here, the audit starts its worker itself
    with contextlib.suppress(Exception):
        prestart.start_for(sys.argv[1:])
    from kernelaudit.cli import run as command  # after the worker's start

    command()


if __name__ == "__main__":
    run()
