"""What one candidate's worker may use, and how the auditor reads what it uses: wall time per
call, host memory of its whole process group, device memory, and the shared regions its calls'
tensors cross in."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch


def region_most_bytes() -> int:
    """The most each of a worker's two regions grows to: 2 GiB, or a sixteenth of the host's
    memory where that is less. Tensors past it cross in the pipe. (What a region's pages
    once held stays resident until the worker ends: the region's most is what that costs.)"""
    return min(1 << 31, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 16)


@dataclass(frozen=True)
class Limits:
    """What one candidate's worker may use. The worker's whole process group is killed when it
    goes past one of them, and the call counts as failed.

    timeout_s: wall time one call may take; an invocation of n calls gets n times as much.
    host_memory_bytes: resident memory of the worker and every process it started.
    gpu_memory_bytes: device memory: torch's allocator in the worker is capped at it, and the
        device's use beyond what it was when the worker became ready is checked after every
        invocation (memory taken around torch's allocator counts too). 0: no limit.
    load_timeout_s: wall time the child may take to start and import the candidate (a
        candidate that compiles an extension at import time needs minutes).
    """

    timeout_s: float = 120.0
    host_memory_bytes: int = 0
    gpu_memory_bytes: int = 0
    load_timeout_s: float = 600.0


def default_limits(timeout_s: float, device: str) -> Limits:
    """Half of the host's memory, and three quarters of the device memory that is free now:
    enough for any reasonable kernel, and the auditor keeps room for its own work."""
    host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    gpu = 0
    if torch.device(device).type == "cuda":
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        gpu = free * 3 // 4
    return Limits(timeout_s=timeout_s, host_memory_bytes=host, gpu_memory_bytes=gpu)


def group_resident_bytes(group: int) -> int:
    """Resident memory of every process in process group `group`, from /proc (0 where /proc
    is not there)."""
    total = 0
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            if int(fields[2]) != group:
                continue
            with open(f"/proc/{entry.name}/statm", "rb") as statm:
                total += int(statm.read().split()[1]) * page
        except (OSError, ValueError, IndexError):
            continue  # the process ended while being read
    return total
