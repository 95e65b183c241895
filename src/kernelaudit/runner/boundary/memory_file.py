"""The anonymous memory files the auditor and a candidate's process both map (the regions of
`runner.boundary.shared`), made without torch, so a worker started before the auditor imports
torch can have its own."""

from __future__ import annotations

import fcntl
import os


def memory_file(name: str) -> int:
    """A new anonymous memory file sealed against shrinking, closed on exec (only a child it
    is passed to gets it), as `runner.boundary.shared.Region` maps it; -1 where the platform or a
    filter refuses one. Made without torch, so a worker started early can have its own."""
    if not (hasattr(os, "memfd_create") and hasattr(fcntl, "F_ADD_SEALS")):
        return -1
    try:
        fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except OSError:
        return -1
    try:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
    except OSError:
        os.close(fd)
        return -1
    return fd
