"""How many host threads each process of an audit may use.

Every library with a thread pool (torch's intra-op pool, OpenMP, MKL, OpenBLAS) sizes it to the
whole machine by default. Audits that share a host (one per GPU, as `kernelaudit corpus` runs
them) then run several times more threads than there are cores, and float64 work on the host
slows down by an order of magnitude. So each audit takes its share of the cores, and every
process it starts (the candidate's worker and each one-shot child) is held to the same share
through the variables those libraries read when they start.

And each process's idle OpenMP threads go to sleep soon (`WAIT_VARIABLES`): the auditor and its
worker hand work back and forth, and with libgomp's default wait the side that just finished
keeps every core busy spinning for milliseconds while the other side's threads need them.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

THREADS_VARIABLE = "KERNELAUDIT_THREADS"
"""Set by whoever runs several audits on one host (the corpus's slots), read by each audit."""

_POOL_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)

WAIT_VARIABLES = {"GOMP_SPINCOUNT": "10000"}
"""How long an idle OpenMP thread of torch's pool spins before it sleeps: 10,000 spins (tens of
microseconds) instead of libgomp's 300,000. On an H100 host of 16 cores, a probe's 1 MB round
trip to the worker took 11-24 ms with the default and 4.6 ms with this; default audits of
SOL-ExecBench problems took 4-24% less (docs/benchmarks.md). Back-to-back operations inside one
process keep their threads awake."""

_WAIT_SET_BY_USER = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")


def wait_environment() -> dict[str, str]:
    """`WAIT_VARIABLES`, unless whoever started this process chose a waiting policy."""
    if any(name in os.environ for name in _WAIT_SET_BY_USER):
        return {}
    return dict(WAIT_VARIABLES)


def settle_waits() -> None:
    """This process's own waiting policy (`wait_environment`); OpenMP reads it when it starts,
    so this only holds when called before torch is imported."""
    os.environ.update(wait_environment())


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _told() -> int | None:
    told = os.environ.get(THREADS_VARIABLE, "")
    return min(int(told), usable_cores()) if told.isdigit() and int(told) > 0 else None


def host_share() -> int:
    """The cores this command may use: KERNELAUDIT_THREADS where whoever started it set it (a
    test runner or a scheduler sharing the host out), else every core it may run on."""
    return _told() or usable_cores()


def thread_share(device: str, sharing: int | None = None, gpus: int | None = None) -> int:
    """This audit's share of the cores.

    `sharing`: how many audits run on this host at once. When not given, KERNELAUDIT_THREADS
    decides if it is set; otherwise an audit on one CUDA device of a host with several takes
    the cores divided by the devices (the others are there for other audits), and an audit on
    the CPU or the only GPU takes them all. `gpus`: the host's CUDA devices, when the caller
    counted them without torch (`visible_gpus`); torch counts them otherwise.
    """
    cores = usable_cores()
    if sharing is None:
        told = _told()
        if told is not None:
            return told
        sharing = 1
        if device.startswith("cuda"):
            sharing = max(1, _torch_gpus() if gpus is None else gpus)
    return max(1, cores // max(1, sharing))


def _torch_gpus() -> int:
    import torch  # this module is read before torch is (`visible_gpus`)

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def visible_gpus() -> int:
    """The CUDA devices this process would see, counted without importing torch: the NVIDIA
    device nodes, as many as `CUDA_VISIBLE_DEVICES` lets through. Used only to start a worker
    before torch is imported (`runner.auditor.prestart`); where it disagrees with torch's count, the
    early worker is not used."""
    nodes = [n for n in glob.glob("/dev/nvidia*") if re.fullmatch(r"/dev/nvidia\d+", n)]
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return len(nodes)
    entries = [e for e in listed.split(",") if e.strip()]
    # CUDA stops at the first entry that names no device ("-1" hides them all)
    usable = 0
    for entry in entries:
        if entry.strip().lstrip("-").isdigit() and int(entry) < 0:
            break
        usable += 1
    return min(usable, len(nodes))


def thread_environment(threads: int) -> dict[str, str]:
    """The variables that hold a new process's thread pools to `threads`, and let its idle
    threads sleep soon (`wait_environment`)."""
    return {
        THREADS_VARIABLE: str(threads),
        **dict.fromkeys(_POOL_VARIABLES, str(threads)),
        **wait_environment(),
    }


@contextmanager
def held_to(threads: int) -> Iterator[None]:
    """This process's torch pools held to `threads` for the duration, then as they were (the
    inter-op pool only where it has not started yet, and left so: torch refuses to resize it
    once it is in use)."""
    import torch  # see `_torch_gpus`

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
