"""What an auditor's resident host memory is made of: a `kernelaudit` run whose threads'
Python stacks go to a file every few seconds (as `stacks.CHILD`), and beside them, each time,
the host tensors whose storage holds 256 MiB or more, with what refers to each (a dict's key and
the type of what holds the dict, a closure's function, a frame), and the totals of the C
allocator's heap and of torch's page-locked blocks, which no tensor shows.

    python benchmarks/host_tensors.py OUT EVERY check PROBLEM SOLUTION --device cuda ...

Only for measuring: the scan of every object pauses the audit for about a second each time.
"""

from __future__ import annotations

import ctypes
import faulthandler
import gc
import runpy
import sys
import threading
import time
import types
from typing import IO

import torch

LEAST_BYTES = 1 << 28


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _mallinfo() -> _Mallinfo2:
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _Mallinfo2
    return libc.mallinfo2()


def _holders(obj: object, own: set[int]) -> list[str]:
    """What refers to `obj`, in words, leaving out this module's own containers."""
    names = []
    for ref in gc.get_referrers(obj):
        if id(ref) in own:
            continue
        if isinstance(ref, types.CellType):
            cells = [c for c in gc.get_referrers(ref) if isinstance(c, tuple)]
            users = [
                f.__qualname__
                for c in cells
                for f in gc.get_referrers(c)
                if isinstance(f, types.FunctionType)
            ]
            names.append(f"closure of {users[:2]}")
        elif isinstance(ref, types.FrameType):
            code = ref.f_code
            names.append(f"frame {code.co_name} {code.co_filename}:{ref.f_lineno}")
        elif isinstance(ref, dict):
            keys = [k for k, v in ref.items() if v is obj][:2]
            outer = [type(o).__qualname__ for o in gc.get_referrers(ref) if id(o) not in own]
            names.append(f"dict key {keys!r:.80} in {outer[:3]}")
        else:
            names.append(type(ref).__qualname__)
    return names[:6]


def _report(out: IO[str], since: float) -> None:
    storages: dict[int, tuple[int, list[torch.Tensor]]] = {}
    every = gc.get_objects()
    for obj in every:
        try:
            if type(obj) is not torch.Tensor or obj.device.type != "cpu":
                continue
            storage = obj.untyped_storage()
            if storage.nbytes() >= LEAST_BYTES:
                storages.setdefault(storage.data_ptr(), (storage.nbytes(), []))[1].append(obj)
        except Exception:  # a tensor without storage, or one being torn down
            continue
    total = sum(nbytes for nbytes, _ in storages.values())
    info = _mallinfo()
    pinned = torch.cuda.host_memory_stats() if torch.cuda.is_initialized() else {}
    locked = {k: round(v / 2**30, 2) for k, v in pinned.items() if k.endswith("bytes.current")}
    print(
        f"== {time.monotonic() - since:.0f} s: {len(storages)} host storages of 256 MiB or "
        f"more, {total / 2**30:.1f} GiB",
        file=out,
    )
    print(
        f"  malloc: heap {info.arena / 2**30:.2f} GiB ({info.fordblks / 2**30:.2f} free), "
        f"mapped {info.hblkhd / 2**30:.2f} GiB; page-locked GiB: {locked}",
        file=out,
    )
    ordered = sorted(storages.values(), key=lambda entry: -entry[0])
    # this module's own containers refer to the tensors too: left out of what holds them
    own = {id(every), id(ordered), id(storages)}
    own |= {id(entry) for entry in ordered} | {id(tensors) for _, tensors in ordered}
    for nbytes, tensors in ordered:
        del tensors[3:]  # three views of a storage say enough (a slice would hold them too)
        for t in tensors:
            print(
                f"  {nbytes / 2**30:.2f} GiB {t.dtype} {tuple(t.shape)} "
                f"pinned={t.is_pinned()} held by {_holders(t, own)}",
                file=out,
            )
    out.flush()


def main() -> None:
    out, every = open(sys.argv[1], "w"), float(sys.argv[2])  # noqa: SIM115 (open for the run)
    faulthandler.dump_traceback_later(every, repeat=True, file=out)
    since = time.monotonic()

    def watch() -> None:
        while True:
            time.sleep(every)
            _report(out, since)

    threading.Thread(target=watch, daemon=True, name="host-tensors").start()
    sys.argv = ["kernelaudit", *sys.argv[3:]]
    runpy.run_module("kernelaudit", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
