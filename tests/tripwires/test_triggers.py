"""Bombs: a candidate whose outputs hang on a call count, the clock, the process it runs in or a
file's state is named at the decision that sets it off; honest wrappers that compile once, cache
kernels, read their device or ship tuned configs are not."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelaudit.tripwires import scan_candidate
from tripwires.scanning import expect, found, write

# Each case: a candidate file and exactly the (rule, line) pairs it must produce, lines named by
# a piece of their text.
HOSTILE = {
    "a global counter": (
        """
        import torch

        _calls = 0


        def candidate(x):
            global _calls
            _calls += 1
            if _calls > 8:
                return torch.zeros_like(x)
            return x * 2
        """,
        [("module-state", "_calls += 1"), ("call-count-trigger", "if _calls > 8")],
    ),
    "a function attribute": (
        """
        def candidate(x):
            candidate.calls = getattr(candidate, "calls", 0) + 1
            return x * 2 if candidate.calls <= 3 else x
        """,
        [("call-count-trigger", "candidate.calls <= 3")],
    ),
    "a closure counter": (
        """
        def _make():
            seen = 0

            def candidate(x):
                nonlocal seen
                seen += 1
                return x if seen > 5 else x * 2

            return candidate


        candidate = _make()
        """,
        [("module-state", "seen += 1"), ("call-count-trigger", "seen > 5")],
    ),
    "a counter on self": (
        """
        import torch


        class ModelNew(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.calls = 0

            def forward(self, x):
                self.calls += 1
                if self.calls % 100 == 0:
                    return x
                return x * 2
        """,
        [("call-count-trigger", "self.calls % 100")],
    ),
    "an itertools.count default": (
        """
        import itertools


        def candidate(x, _n=itertools.count()):
            return x * 2 if next(_n) < 3 else x
        """,
        [("call-count-trigger", "next(_n) < 3")],
    ),
    "a count kept in a list, read through a helper": (
        """
        _calls = [0]


        def _warm():
            _calls[0] += 1
            return _calls[0] > 300


        def candidate(x):
            if _warm():
                return x
            return x * 2
        """,
        [("module-state", "_calls[0] += 1"), ("call-count-trigger", "if _warm()")],
    ),
    "the clock": (
        """
        import os
        import time
        from datetime import datetime

        _START = time.monotonic()


        def candidate(x):
            if time.monotonic() - _START > 30:
                return x
            late = datetime.now().hour >= 18
            y = x * 2 if not late else x
            return y if os.times().elapsed % 2 < 1 else y + 0
        """,
        [
            ("clock-trigger", "time.monotonic() - _START"),
            ("clock-trigger", "x * 2 if not late"),
            ("clock-trigger", "os.times().elapsed"),
        ],
    ),
    "the uptime": (
        """
        def _uptime():
            with open("/proc/uptime") as f:
                return float(f.read().split()[0])


        def candidate(x):
            return x * 2 if _uptime() > 600 else x
        """,
        [
            ("environment", '"/proc/uptime"'),
            ("clock-trigger", "_uptime() > 600"),
            ("file-trigger", "_uptime() > 600"),
        ],
    ),
    "the process and the thread": (
        """
        import multiprocessing
        import os
        import threading

        _PARENT = os.getpid()


        def candidate(x):
            if os.getpid() != _PARENT:
                return x
            if threading.current_thread().name != "MainThread":
                return x
            name = multiprocessing.current_process().name
            return x * 2 if name == "MainProcess" else x
        """,
        [
            ("threads", "import multiprocessing"),
            ("process-trigger", "os.getpid() != _PARENT"),
            ("process-trigger", "current_thread().name"),
            ("threads", "multiprocessing.current_process()"),
            ("process-trigger", 'name == "MainProcess"'),
        ],
    ),
    "a marker file": (
        """
        from pathlib import Path

        import torch

        _MARK = Path("/tmp/.warm")


        def candidate(x):
            if _MARK.exists():
                return torch.zeros_like(x)
            _MARK.touch()
            return x * 2
        """,
        [("file-trigger", "if _MARK.exists()")],
    ),
    "a count kept in a file": (
        """
        import os

        _COUNT = os.path.join(os.path.dirname(__file__), "calls.txt")


        def candidate(x):
            n = int(open(_COUNT).read()) if os.path.exists(_COUNT) else 0
            with open(_COUNT, "w") as f:
                f.write(str(n + 1))
            if n > 3:
                return x
            return x * 2
        """,
        [("file-trigger", "if os.path.exists(_COUNT)"), ("file-trigger", "if n > 3")],
    ),
    "an output kept in a file": (
        """
        import torch


        def candidate(x):
            try:
                cached = torch.load("/tmp/out.pt")
            except FileNotFoundError:
                cached = None
            if cached is not None:
                return cached
            out = x * 2
            torch.save(out, "/tmp/out.pt")
            return out
        """,
        [("file-trigger", "try:"), ("file-trigger", "if cached is not None")],
    ),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_bomb_is_named_at_the_decision_that_sets_it_off(tmp_path: Path, case: str) -> None:
    source, expected = HOSTILE[case]
    path = write(tmp_path, source)
    assert found(scan_candidate(path)) == expect(path, *expected)


HONEST = {
    "a Triton wrapper that reads its device and caches compiled kernels": """
        import functools

        import torch
        import triton
        import triton.language as tl

        _epilogues = {}


        @triton.jit
        def _scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offsets < n
            tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2, mask=mask)


        @functools.cache
        def _block(device):
            major, _ = torch.cuda.get_device_capability(device)
            return 256 if major >= 9 else 128


        def _epilogue(dtype):
            if dtype not in _epilogues:
                _epilogues[dtype] = torch.compile(lambda y: y.clamp(-1e4, 1e4))
            return _epilogues[dtype]


        def candidate(x):
            device = torch.cuda.current_device()
            block = _block(device)
            y = torch.empty_like(x)
            _scale[(triton.cdiv(x.numel(), block),)](x, y, x.numel(), BLOCK=block)
            return _epilogue(x.dtype)(y)
        """,
    "an extension built once into a temporary folder": """
        import os
        import tempfile

        from torch.utils.cpp_extension import load

        _BUILD = os.path.join(tempfile.gettempdir(), f"scale_{os.getpid()}")
        _extension = None


        def _module():
            global _extension
            if not os.path.isdir(_BUILD):
                os.makedirs(_BUILD, exist_ok=True)
            if _extension is None:
                _extension = load(name="scale", sources=["scale.cu"], build_directory=_BUILD)
            return _extension


        def candidate(x):
            return _module().scale(x)
        """,
    "compiled code kept per process, as fork-safe wrappers do": """
        import os

        from torch.utils.cpp_extension import load_inline

        _modules = {}


        def _module():
            pid = os.getpid()
            if pid not in _modules:
                _modules[pid] = load_inline(name="scale", cpp_sources="", functions=["scale"])
            return _modules[pid]


        def candidate(x):
            return _module().scale(x)
        """,
    "tuned configs shipped beside the kernel": """
        import functools
        import json
        import os

        _CONFIGS = os.path.join(os.path.dirname(__file__), "configs")


        @functools.cache
        def _config(n):
            path = os.path.join(_CONFIGS, f"n={n}.json")
            if os.path.exists(path):
                with open(path) as f:
                    return json.load(f)
            return {"BLOCK": 128}


        def candidate(x):
            block = _config(x.shape[-1])["BLOCK"]
            return x * 2 if block >= 64 else x + x
        """,
    "a clock and a process id read for logs and file names": """
        import logging
        import os
        import time

        _log = logging.getLogger(__name__)


        def candidate(x):
            started = time.perf_counter()
            y = x * 2
            if time.perf_counter() - started > 1.0:
                _log.warning("slow call in process %d", os.getpid())
            with open(f"/tmp/trace_{os.getpid()}.txt", "a") as f:
                f.write(str(time.perf_counter() - started))
            return y
        """,
}


@pytest.mark.parametrize("case", list(HONEST))
def test_honest_wrappers_trip_nothing(tmp_path: Path, case: str) -> None:
    assert scan_candidate(write(tmp_path, HONEST[case])) == ()
