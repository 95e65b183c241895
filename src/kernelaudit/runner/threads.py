"""How many host threads each process of an audit may use.

Every library with a thread pool (torch's intra-op pool, OpenMP, MKL, OpenBLAS) sizes it to the
whole machine by default. Audits that share a host (one per GPU, as `kernelaudit corpus` runs
them) then run several times more threads than there are cores, and float64 work on the host
slows down by an order of magnitude. So each audit takes its share of the cores, and every
process it starts (the candidate's worker and each one-shot child) is held to the same share
through the variables those libraries read when they start.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch

THREADS_VARIABLE = "KERNELAUDIT_THREADS"
"""Set by whoever runs several audits on one host (the corpus's slots), read by each audit."""

_POOL_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def thread_share(device: str, sharing: int | None = None) -> int:
    """This audit's share of the cores.

    `sharing`: how many audits run on this host at once. When not given, KERNELAUDIT_THREADS
    decides if it is set; otherwise an audit on one CUDA device of a host with several takes
    the cores divided by the devices (the others are there for other audits), and an audit on
    the CPU or the only GPU takes them all.
    """
    cores = usable_cores()
    if sharing is None:
        told = os.environ.get(THREADS_VARIABLE, "")
        if told.isdigit() and int(told) > 0:
            return min(int(told), cores)
        sharing = 1
        if device.startswith("cuda") and torch.cuda.is_available():
            sharing = max(1, torch.cuda.device_count())
    return max(1, cores // max(1, sharing))


def thread_environment(threads: int) -> dict[str, str]:
    """The variables that hold a new process's thread pools to `threads`."""
    return {THREADS_VARIABLE: str(threads), **dict.fromkeys(_POOL_VARIABLES, str(threads))}


@contextmanager
def held_to(threads: int) -> Iterator[None]:
    """This process's torch pools held to `threads` for the duration, then as they were (the
    inter-op pool only where it has not started yet, and left so: torch refuses to resize it
    once it is in use)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    if torch.get_num_interop_threads() != threads:
        # it only serves torch's own asynchronous work
        with contextlib.suppress(RuntimeError):
            torch.set_num_interop_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
