"""What the red-team tests share: a folder's files as they are now, and the processes an attack
left behind."""

from __future__ import annotations

import time
from pathlib import Path

ARMED = ".redteam-attack"
"""A file that, in a candidate's own folder, lets the attackers that write outside themselves
act: imported anywhere else (by hand, from the fixtures' folder), they only compute."""


def files_in(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, by its path relative to it, with its bytes."""
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def survivors(token: str) -> list[int]:
    """The processes whose command line holds `token`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if token.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def survivors_after(token: str, wait_s: float = 10.0) -> list[int]:
    """`survivors(token)`, once they are gone or `wait_s` has passed."""
    deadline = time.monotonic() + wait_s
    while survivors(token) and time.monotonic() < deadline:
        time.sleep(0.2)
    return survivors(token)
