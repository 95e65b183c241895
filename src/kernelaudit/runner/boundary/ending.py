"""A process's end once its answers are out, without Python's teardown.

A process that imported torch spends half a second to a second of a core tearing its modules
down as Python ends (more with Triton and a device's context). The auditor's own children that
run a candidate and then end (the interpreted bounds run, the training check's process, the
large-tensor run) paid it where the auditor waits for them, and on a 2-core CPU it competes with
the audit's other work; nothing any reader needs comes from it once the answers are written
and the output flushed (`end_now`). The unwatched run's script keeps Python's own end, as a
user's program has it (`plain.caller`).

A process that audits for a command (a demo's lane, a corpus's slot) also ends when that
command is gone, killed before it could let it go (`end_with_the_parent`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from typing import NoReturn

PARENT_POLL_S = 0.2
"""How often a process that must not outlive its parent looks whether it still has it."""


def end_now(code: int) -> NoReturn:
    """End this process with exit status `code` at once: its output flushed, no exit hooks,
    no teardown. Only once everything it owes a reader is written."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()  # a closed pipe, or no stream at all, ends it the same way
    os._exit(code)


def end_with_the_parent(parent: int) -> None:
    """End this process, and its process group when it leads one, as soon as `parent` (the
    process that started it, by pid) is no longer its parent: killed with -9, a parent leaves
    its children running with nothing to report to, and a pool's processes, or a corpus's
    slots, would audit on for minutes. Where the parent is gone already, at once. What the
    audit started (workers in their sandboxes) watches this process in turn and ends with it."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        if os.getpgid(0) == os.getpid():
            # the leader of a group of its own: what the audit started there goes with it
            os.killpg(0, signal.SIGKILL)
        os._exit(1)

    threading.Thread(target=watch, name="kernelaudit-parent-watch", daemon=True).start()
