"""The auditor's own work beside an audit, over before anything is measured.

`kernelaudit check` on a GPU imports the report's drawing library in a thread while the audit
runs (`outputs.load_figures_ahead`). The import holds the interpreter's lock in turns for a
second or more, longer on a machine where matplotlib has never built its list of fonts; a
measurement made meanwhile (the reference's timing, the auditor's clock) would be late by
every turn it waited. So each measurement waits for such work to end first (`settle`), and
whatever the work raises is left to the code that needs its result to meet again.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

_LOCK = threading.Lock()
_STARTED: list[threading.Thread] = []


def start(work: Callable[[], object], name: str) -> threading.Thread:
    """Run `work` in a thread of its own named `name`, beside the audit; an error it raises is
    dropped (the code that needs what it prepares does it again, and says what went wrong)."""

    def quietly() -> None:
        with contextlib.suppress(Exception):
            work()

    thread = threading.Thread(target=quietly, name=name, daemon=True)
    with _LOCK:
        _STARTED[:] = [t for t in _STARTED if t.is_alive()]
        _STARTED.append(thread)
    thread.start()
    return thread


def settle() -> None:
    """Wait until every work started beside the audit has ended."""
    with _LOCK:
        started = list(_STARTED)
    for thread in started:
        if thread is not threading.current_thread():
            thread.join()
