"""Static tripwires: what a user sees for a candidate's source, rule by rule, and what an honest
kernel file must not trigger."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kernelaudit.errors import UsageError
from kernelaudit.tripwires import RULES, c_source, python_names, scan, scan_candidate
from tripwires.scanning import expect, found, line, write

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]


# Each case: a candidate file and exactly the (rule, line) pairs it must produce, lines named by
# a piece of their text. Lines not named must produce nothing.
CASES = {
    "timer-patching": (
        """
        import time
        import unittest.mock

        import torch
        import torch.cuda as tc
        import triton.testing

        _real = time.perf_counter
        time.perf_counter = lambda: _real() / 10
        setattr(torch.cuda.Event, "elapsed_time", lambda self, end: 0.0)
        tc.synchronize = lambda *args: None
        triton.testing.do_bench = lambda fn, **kw: 0.001
        torch.cuda.Event.__dict__["record"]
        vars(time)["monotonic_ns"] = lambda: 0


        @unittest.mock.patch("time.time", lambda: 0.0)
        def candidate(x):
            torch.cuda.synchronize()
            return x * 2
        """,
        [
            ("timer-patching", "time.perf_counter = "),
            ("timer-patching", 'setattr(torch.cuda.Event, "elapsed_time"'),
            ("timer-patching", "tc.synchronize = "),
            ("timer-patching", "triton.testing.do_bench = "),
            ("timer-patching", 'vars(time)["monotonic_ns"]'),
            ("timer-patching", 'mock.patch("time.time"'),
        ],
    ),
    "harness-tampering": (
        """
        import importlib
        import sys

        import kernelaudit.timing.measure as measure

        _call = sys.modules["kernelaudit.runner.worker.call"]


        def candidate(x):
            worker = importlib.import_module("kernelaudit.runner.worker.main")
            _call._clock = lambda: 0.0
            measure._ELAPSED_MS = None
            setattr(worker, "run_invocation", None)
            sys.modules["kernelaudit.runner.auditor.observed"].observe = None
            return x * 2
        """,
        [
            ("harness-tampering", "_call._clock = "),
            ("harness-tampering", "measure._ELAPSED_MS = "),
            ("harness-tampering", 'setattr(worker, "run_invocation"'),
            ("harness-tampering", "].observe = "),
            ("environment", 'sys.modules["kernelaudit.runner.worker.call"]'),
            ("environment", "import kernelaudit.timing.measure"),
            ("environment", 'sys.modules["kernelaudit.runner.auditor.observed"]'),
        ],
    ),
    "harness-tampering through a module named at run time": (
        """
        import importlib
        import sys

        _name = "kernel" + "audit.runner.worker.call"
        _call = sys.modules[_name]
        this = sys.modules[__name__]
        this.cache = {}


        def candidate(x):
            worker = importlib.import_module(".".join(["kernelaudit", "runner", "worker", "main"]))
            _call._clock = lambda: 0.0
            setattr(worker, "run_invocation", None)
            for module in list(sys.modules.values()):
                module.observe = None
            for name, found in sys.modules.items():
                version = getattr(found, "__version__", name)
                setattr(found, "observe", None)
            sys.modules[_name] = None
            return x * 2
        """,
        [
            ("environment", "_call = sys.modules[_name]"),
            ("dynamic-code", "worker = importlib.import_module("),
            ("harness-tampering", "_call._clock = "),
            ("harness-tampering", 'setattr(worker, "run_invocation"'),
            ("environment", "for module in list(sys.modules.values())"),
            ("harness-tampering", "module.observe = "),
            ("environment", "for name, found in sys.modules.items()"),
            ("harness-tampering", 'setattr(found, "observe"'),
            ("harness-tampering", "sys.modules[_name] = None"),
        ],
    ),
    "torch-patching": (
        """
        import os

        import torch
        import torch.nn.functional as F

        torch.allclose = lambda *args, **kwargs: True
        torch.testing.assert_close = lambda *args, **kwargs: None
        setattr(torch.Tensor, "__eq__", lambda self, other: True)
        F.softmax = lambda x, dim: x
        torch.set_float32_matmul_precision("medium")
        torch.use_deterministic_algorithms(False)
        torch._inductor.config.max_autotune = True
        _aten = torch.library.Library("aten", "IMPL")


        def candidate(x):
            torch.manual_seed(0)
            out = x * 2
            out.allclose = lambda *args, **kwargs: True
            return out
        """,
        [
            ("torch-patching", "torch.allclose = "),
            ("torch-patching", "assert_close = "),
            ("torch-patching", '"__eq__"'),
            ("torch-patching", "F.softmax = "),
            ("torch-patching", "set_float32_matmul_precision"),
            ("torch-patching", "use_deterministic_algorithms"),
            ("torch-patching", 'Library("aten"'),
            ("torch-patching", "manual_seed"),
            ("torch-patching", "out.allclose = "),
        ],
    ),
    "gpu-flags": (
        """
        import os

        import torch
        from torch.backends import cudnn

        os.environ["NVIDIA_TF32_OVERRIDE"] = "1"
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

        torch.backends.cuda.matmul.allow_tf32 = True
        cudnn.allow_tf32 = True
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = True
        setattr(torch.backends.cudnn, "deterministic", False)
        torch.backends.cuda.preferred_blas_library("cublaslt")


        def candidate(x):
            torch.backends.cudnn.benchmark = True
            assert torch.backends.cudnn.is_available()
            return x * 2
        """,
        [
            ("gpu-flags", "NVIDIA_TF32_OVERRIDE"),
            ("gpu-flags", "CUBLAS_WORKSPACE_CONFIG"),
            ("gpu-flags", "matmul.allow_tf32"),
            ("gpu-flags", "cudnn.allow_tf32"),
            ("gpu-flags", "allow_fp16_reduced_precision_reduction"),
            ("gpu-flags", '"deterministic"'),
            ("gpu-flags", "preferred_blas_library"),
            ("gpu-flags", "cudnn.benchmark"),
        ],
    ),
    "frame-walking": (
        """
        import inspect
        import sys
        import traceback
        from inspect import currentframe as here


        def candidate(x):
            caller = sys._getframe(1)
            names = [f.function for f in inspect.stack()]
            outer = here().f_back
            stack = traceback.extract_stack()
            return x * len(caller.f_locals) + len(names) + len(stack) + (outer is None)
        """,
        [
            ("frame-walking", "sys._getframe(1)"),
            ("frame-walking", "inspect.stack()"),
            ("frame-walking", "here().f_back"),
            ("frame-walking", "traceback.extract_stack()"),
            ("frame-walking", "caller.f_locals"),
        ],
    ),
    "gc-walking": (
        """
        import gc

        import torch


        def candidate(x):
            for value in gc.get_objects():
                if isinstance(value, torch.Tensor) and value.shape == x.shape:
                    return value.clone()
            return x * len(gc.get_referrers(x))
        """,
        [("gc-walking", "gc.get_objects()"), ("gc-walking", "gc.get_referrers(x)")],
    ),
    "ctypes": (
        """
        import ctypes
        from ctypes import CDLL


        def candidate(x, out):
            ctypes.memmove(out.data_ptr(), x.data_ptr(), x.nbytes)
            with open("/proc/self/mem", "rb") as memory:
                memory.read(1)
            return CDLL(None)
        """,
        [
            ("ctypes", "import ctypes"),
            ("ctypes", "from ctypes import CDLL"),
            ("ctypes", "ctypes.memmove"),
            ("ctypes", "/proc/self/mem"),
            ("ctypes", "CDLL(None)"),
        ],
    ),
    "address-keyed-cache": (
        """
        import functools

        import torch

        _results = {}
        _last_pointer = 0


        @functools.lru_cache(maxsize=None)
        def _packed(w: torch.Tensor) -> torch.Tensor:
            return w.t().contiguous()


        @functools.cache
        def _by_pointer(pointer: int) -> int:
            return pointer


        def candidate(x, w):
            key = (x.data_ptr(), x.shape)
            if key in _results:
                return _results[key]
            if x.data_ptr() == _last_pointer:
                return None
            seen = _results.get(id(w))
            version = _by_pointer(w._version)
            return _packed(w), seen, version
        """,
        [
            ("address-keyed-cache", "def _packed"),
            ("address-keyed-cache", "if key in _results"),
            ("address-keyed-cache", "return _results[key]"),
            ("address-keyed-cache", "x.data_ptr() == _last_pointer"),
            ("address-keyed-cache", "_results.get(id(w))"),
            ("address-keyed-cache", "_by_pointer(w._version)"),
        ],
    ),
    "address-keyed-cache: pointers handed to a launch are not keys": (
        """
        import torch

        _BLOCKS = {}


        def candidate(x, y, kernel):
            out = torch.empty_like(x)
            args = (x.data_ptr(), y.data_ptr(), out.data_ptr(), x.numel())
            if x.data_ptr() % 16 != 0 or out.data_ptr() == x.data_ptr():
                raise ValueError("misaligned or aliased")
            pointers = torch.tensor([x.data_ptr(), y.data_ptr()])
            alignment = (x.dtype, x.data_ptr() % 16, y.data_ptr() & 15)
            kernel((1,), (256,), args, pointers[0], _BLOCKS.get(alignment, 128))
            return out
        """,
        [],
    ),
    "module-state": (
        """
        import collections
        import itertools

        import torch

        _outputs = {}
        _history = []
        _seen = collections.OrderedDict()
        _buffer = torch.empty(1024)
        _calls = itertools.count()
        _last = None
        _SCALES = {"fp16": 2.0, "fp32": 1.0}


        def candidate(x):
            global _last
            _outputs[x.shape] = x * 2
            _history.append(x)
            _seen.setdefault(x.dtype, []).append(x)
            _buffer[: x.numel()].copy_(x.flatten())
            torch.mul(x, _SCALES["fp16"], out=_buffer)
            if next(_calls) > 8:
                return _last
            _last = x * 2
            return _last
        """,
        [
            ("module-state", "_outputs[x.shape] ="),
            ("module-state", "_history.append"),
            ("module-state", "_seen.setdefault"),
            ("module-state", "_buffer[: x.numel()].copy_"),
            ("module-state", "out=_buffer"),
            ("module-state", "next(_calls)"),
            ("call-count-trigger", "next(_calls)"),
            ("module-state", "_last = x * 2"),
        ],
    ),
    "module-state: constants, locals and compiled kernels are not state": (
        """
        import torch
        from torch.utils.cpp_extension import load_inline

        _SCALES = {"fp16": 2.0, "fp32": 1.0}
        _kernels = {}
        _extension = None
        _launch = None
        _cache = {}


        def _compiled(name):
            if name not in _kernels:
                _kernels[name] = torch.compile(lambda x: x * 2)
            return _kernels[name]


        def _ext():
            global _extension
            if _extension is None:
                _extension = load_inline(name="e", cpp_sources="", functions=[])
            return _extension


        def _bind():
            global _launch
            module = load_inline(name="f", cpp_sources="", functions=["f"])
            _launch = module.f


        def candidate(x):
            _cache = {}
            _cache[x.shape] = x
            return _compiled("double")(x) * _SCALES["fp16"]
        """,
        [],
    ),
    "threads": (
        """
        import asyncio
        import multiprocessing
        import os
        import subprocess
        import threading
        from concurrent.futures import ThreadPoolExecutor


        def candidate(x):
            threading.Thread(target=print).start()
            with ThreadPoolExecutor() as pool:
                pool.submit(print)
            if os.fork() == 0:
                os._exit(0)
            asyncio.run(asyncio.sleep(0))
            subprocess.run(["nvidia-smi"], check=False)
            return x
        """,
        [
            ("threads", "import multiprocessing"),
            ("threads", "threading.Thread"),
            ("threads", "ThreadPoolExecutor()"),
            ("threads", "os.fork()"),
            ("process-control", "os._exit(0)"),
            ("threads", "asyncio.run"),
            ("threads", "nvidia-smi"),
        ],
    ),
    "atomics": (
        """
        import triton
        import triton.language as tl
        from triton.language import atomic_max


        @triton.jit
        def _totals(x_ptr, out_ptr, lock_ptr, n, BLOCK: tl.constexpr):
            offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + offsets, mask=offsets < n, other=0.0)
            tl.atomic_add(out_ptr, tl.sum(x))
            atomic_max(out_ptr + 1, tl.max(x))
            while tl.atomic_cas(lock_ptr, 0, 1) == 1:
                pass
            tl.atomic_xchg(lock_ptr, 0)
        """,
        [
            ("atomics", "tl.atomic_add(out_ptr"),
            ("atomics", "atomic_max(out_ptr + 1"),
            ("atomics", "while tl.atomic_cas"),
            ("atomics", "tl.atomic_xchg(lock_ptr"),
        ],
    ),
    "streams": (
        """
        import cupy
        import torch


        def candidate(x):
            side = torch.cuda.Stream()
            with torch.cuda.stream(side):
                y = x * 2
            cupy.cuda.Stream(non_blocking=True)
            current = torch.cuda.current_stream()
            with cupy.cuda.ExternalStream(current.cuda_stream):
                pass
            assert isinstance(side, torch.cuda.Stream) and cupy.cuda.Stream.null is not None
            return y
        """,
        [
            ("streams", "side = torch.cuda.Stream()"),
            ("streams", "with torch.cuda.stream(side)"),
            ("streams", "cupy.cuda.Stream(non_blocking=True)"),
        ],
    ),
    "environment": (
        """
        import os
        import platform
        import sys

        import psutil

        os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"
        os.environ.setdefault("MAX_JOBS", "4")
        _this = sys.modules[__name__]


        def candidate(x):
            if os.environ.get("BENCHMARK") or os.getenv("CI"):
                return x
            if "pytest" in sys.modules or len(sys.argv) > 1:
                return x
            return x * 2 if platform.node() else x
        """,
        [
            ("environment", "import psutil"),
            ("environment", 'os.environ.get("BENCHMARK")'),
            ("environment", '"pytest" in sys.modules'),
            ("environment", "platform.node()"),
        ],
    ),
    "dynamic-code": (
        """
        import importlib
        import marshal
        import pickle
        import re
        import types

        import torch

        exec("import math")
        _pattern = re.compile(r"[a-z]+")
        _math = importlib.import_module("math")


        def candidate(x, code, name, blob):
            exec(code)
            f = eval(name)
            c = compile(code, "<kernel>", "exec")
            module = importlib.import_module(name)
            g = types.FunctionType(c, {})
            state = pickle.loads(blob)
            more = marshal.loads(blob)
            candidate.__code__ = g.__code__
            return torch.compile(f)(x), module, state, more
        """,
        [
            ("dynamic-code", "exec(code)"),
            ("dynamic-code", "eval(name)"),
            ("dynamic-code", 'compile(code, "<kernel>"'),
            ("dynamic-code", "importlib.import_module(name)"),
            ("dynamic-code", "types.FunctionType"),
            ("dynamic-code", "pickle.loads"),
            ("dynamic-code", "marshal.loads"),
            ("dynamic-code", "candidate.__code__"),
        ],
    ),
    "package-install": (
        """
        import os
        import socket
        import subprocess
        import sys
        import urllib.request

        import requests
        import torch


        def candidate(x):
            subprocess.check_call([sys.executable, "-m", "pip", "install", "fast-kernels"])
            os.system("conda install -y magma")
            urllib.request.urlopen("https://example.com/answers")
            socket.socket().connect(("example.com", 80))
            torch.hub.load("someone/models", "net")
            return requests
        """,
        [
            ("package-install", "import urllib.request"),
            ("package-install", "import requests"),
            ("package-install", '"pip", "install"'),
            ("package-install", "conda install"),
            ("package-install", "urlopen("),
            ("package-install", "socket.socket()"),
            ("package-install", "torch.hub.load"),
        ],
    ),
    "process-control": (
        """
        import atexit
        import faulthandler
        import os
        import signal
        import sys

        atexit.register(print)
        faulthandler.enable()
        sys.excepthook = print


        def candidate(x):
            signal.signal(signal.SIGALRM, print)
            if x.numel() == 0:
                os.kill(os.getpid(), signal.SIGKILL)
            if x.numel() == 1:
                sys.exit(1)
            raise SystemExit(0)


        if __name__ == "__main__":
            sys.exit(0)
        """,
        [
            ("process-control", "atexit.register"),
            ("process-control", "faulthandler.enable"),
            ("process-control", "sys.excepthook"),
            ("process-control", "signal.signal"),
            ("process-control", "os.kill"),
            ("process-control", "sys.exit(1)"),
            ("process-control", "raise SystemExit"),
        ],
    ),
    "cuda-graphs": (
        """
        import torch

        _graph = torch.cuda.CUDAGraph()


        def candidate(x):
            with torch.cuda.graph(_graph):
                y = x * 2
            _graph.replay()
            return y
        """,
        [("cuda-graphs", "torch.cuda.CUDAGraph()"), ("cuda-graphs", "torch.cuda.graph(")],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_rule_flags_its_constructs_and_nothing_else(tmp_path: Path, case: str) -> None:
    source, expected = CASES[case]
    path = write(tmp_path, source)
    assert found(scan_candidate(path)) == expect(path, *expected)


@pytest.mark.parametrize(
    "path", sorted(REPO.glob("examples/*/candidates.py")), ids=lambda p: p.parent.name
)
def test_example_candidates_have_no_tripwires_but_quiet_ones(path: Path) -> None:
    # the embedding gradient's atomic additions are a risk only a GPU run shows, not a warning
    assert [w for w in scan_candidate(path) if not RULES[w.rule].quiet] == []


@pytest.mark.parametrize("name", ["honest_load_inline.py", "honest_cupy.py"])
def test_honest_cuda_extension_files_have_no_tripwires(name: str) -> None:
    assert scan_candidate(FIXTURES / name) == ()


def test_tripwire_carries_the_rule_table_and_the_stripped_line(tmp_path: Path) -> None:
    long_tail = " + 0" * 80
    path = write(
        tmp_path,
        f"""
        import sys


        def candidate(x):
            return x * (sys._getframe(0) is not None){long_tail}
        """,
    )
    (tripwire,) = scan_candidate(str(path))
    assert tripwire.path == str(path.resolve())
    assert tripwire.line == 5
    assert tripwire.text.startswith("return x * (sys._getframe(0)")
    assert len(tripwire.text) <= 160
    assert tripwire.why == RULES["frame-walking"].why
    assert tripwire.confirmed_by == ("timing", "replay")


def test_results_are_sorted_and_one_per_line_and_rule(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        import gc
        import sys


        def candidate(x):
            a, b = gc.get_objects(), gc.get_referrers(x)
            return sys._getframe(0).f_back, a, b
        """,
    )
    found = scan_candidate(path)
    assert [(t.rule, t.line) for t in found] == [("gc-walking", 6), ("frame-walking", 7)]


def test_the_confirming_checks_are_those_of_the_rule_table() -> None:
    assert RULES["timer-patching"].confirmed_by == ("global-state", "timing")
    assert RULES["torch-patching"].confirmed_by == ("global-state",)
    assert RULES["gc-walking"].confirmed_by == ("timing", "replay", "stale-memory")
    assert RULES["ctypes"].confirmed_by == ("stale-memory", "bounds", "global-state")
    assert RULES["address-keyed-cache"].confirmed_by == ("replay",)
    assert RULES["module-state"].confirmed_by == ("replay", "aliasing")
    assert RULES["threads"].confirmed_by == RULES["streams"].confirmed_by == ("deferred-work",)
    assert RULES["environment"].confirmed_by == ("timing", "specialisation")
    assert RULES["dynamic-code"].confirmed_by == ("global-state",)
    assert RULES["package-install"].confirmed_by == ()
    assert RULES["harness-tampering"].confirmed_by == ()
    assert [name for name, rule in RULES.items() if rule.fails_alone] == ["harness-tampering"]
    assert RULES["process-control"].confirmed_by == ("execution",)
    assert RULES["call-count-trigger"].confirmed_by == ("replay", "timing")
    assert RULES["clock-trigger"].confirmed_by == ("timing", "determinism")
    assert RULES["process-trigger"].confirmed_by == ("races", "determinism")
    assert RULES["file-trigger"].confirmed_by == ("replay", "determinism")
    assert RULES["atomics"].confirmed_by == ("determinism", "races")
    assert [name for name, rule in RULES.items() if rule.quiet] == ["atomics"]
    assert RULES["gpu-flags"].confirmed_by == ("global-state",)
    assert [name for name, rule in RULES.items() if rule.gpu_only] == [
        "gpu-flags",
        "streams",
        "atomics",
        "cuda-graphs",
    ]
    for name, rule in RULES.items():
        assert rule.name == name
        assert rule.why.endswith(".") and rule.why.count(". ") == 0, name
        assert rule.looks_for


def test_every_pattern_names_a_rule_in_the_table() -> None:
    named = {
        *python_names.REFERENCES.values(),
        *python_names.CALLS.values(),
        *python_names.IMPORTS.values(),
        *python_names.SHELL_CALLS.values(),
        *(rule for rule, _ in (*c_source.CODE_PATTERNS, *c_source.LITERAL_PATTERNS)),
    }
    assert named <= set(RULES)


# --- CUDA and C++ source -------------------------------------------------------------------------


def test_cuda_string_tripwires_carry_the_file_line(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '''
        import torch
        from torch.utils.cpp_extension import load_inline

        _CUDA = r"""
        #include <cstdlib>
        #include <thread>

        // clock64(), getenv() and exit() in comments are not calls
        __device__ int calls;
        __device__ const int kLimit = 4;
        __constant__ float kTable[2] = {0.0f, 1.0f};
        __device__ __forceinline__ float twice(float v) { return 2.0f * v; }
        static inline int ceil_div(int a, int b) { return (a + b - 1) / b; }
        struct Counter {
            static int instances;
            static int next() { static int serial = 0; return ++serial; }
        };

        __global__ void timed(float* y, long long* t) {
            long long start = clock64();
            unsigned long long now;
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
            atomicAdd(&calls, 1);
            y[0] = twice(y[0]);
            t[0] = clock64() - start;
        }

        void host(torch::Tensor y) {
            static int launches = 0;
            static const int kThreads = 256;
            cudaStream_t side;
            cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
            auto pooled = at::cuda::getStreamFromPool();
            std::thread worker([] {});
            if (std::getenv("BENCH") == nullptr) { std::exit(1); }
            void* address;
            cudaGetSymbolAddress(&address, calls);
            launches = launches + static_cast<int>(kThreads > 0);
        }
        """

        _module = load_inline(name="timed", cpp_sources="", cuda_sources=_CUDA)
        ''',
    )
    assert found(scan_candidate(path)) == expect(
        path,
        ("module-state", "__device__ int calls;"),
        ("timer-patching", "start = clock64()"),
        ("timer-patching", "%%globaltimer"),
        ("timer-patching", "t[0] = clock64()"),
        ("module-state", "static int launches"),
        ("module-state", "static int serial"),
        ("streams", "cudaStreamCreateWithFlags"),
        ("streams", "getStreamFromPool"),
        ("threads", "std::thread worker"),
        ("environment", 'std::getenv("BENCH")'),
        ("process-control", 'std::getenv("BENCH")'),
        ("ctypes", "cudaGetSymbolAddress"),
        ("atomics", "atomicAdd(&calls, 1)"),
    )


def test_cuda_lines_survive_concatenation_escapes_and_f_strings(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '''
        import cupy

        _HEADER = "#include <cuda_runtime.h>\\n"
        _BODY = (
            'extern "C" __global__ void k(float* y) {\\n'
            "    y[0] = 1.0f;\\n"
            "    long long t = clock64();\\n"  # a comment between the parts
            "}\\n"
        )
        _BLOCK = 128
        _FORMATTED = f"""
        extern "C" __global__ void g(float* y) {{
            __shared__ float tile[{_BLOCK}];
            y[0] = tile[0] + (float)clock();
        }}
        """


        def candidate(x):
            kernel = cupy.RawKernel(_HEADER + _BODY, "k")
            other = cupy.RawKernel(_FORMATTED, "g")
            return kernel, other
        ''',
    )
    assert found(scan_candidate(path)) == expect(
        path,
        ("timer-patching", "long long t = clock64()"),
        ("timer-patching", "(float)clock()"),
    )


def test_source_like_strings_are_scanned_even_when_not_seen_compiled(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '''
        """A docstring that mentions __global__ kernels calling exit(1) is not source."""

        SOURCES = {
            "k": """
        __global__ void k(int* flag) {
            if (flag[0]) { abort(); }
        }
        """,
        }


        def candidate(x):
            return x
        ''',
    )
    assert found(scan_candidate(path)) == expect(path, ("process-control", "abort();"))


def test_source_files_and_their_local_headers_are_scanned() -> None:
    folder = FIXTURES / "with_sources"
    found = scan_candidate(folder / "candidate.py", "candidate")
    by_file = {(Path(t.path).name, t.rule, t.line) for t in found}
    assert by_file == {
        ("kernel.cu", "timer-patching", line(folder / "kernel.cu", "start = clock64()")),
        ("kernel.cu", "timer-patching", line(folder / "kernel.cu", "(clock64() - start)")),
        ("kernel.cu", "atomics", line(folder / "kernel.cu", "atomicAdd(&calls, 1)")),
        ("state.cuh", "module-state", line(folder / "state.cuh", "__device__ int calls")),
        ("binding.cpp", "environment", line(folder / "binding.cpp", "getenv")),
    }
    assert all(Path(t.path).is_absolute() for t in found)


# --- local modules and reachability ------------------------------------------------------------


def test_local_modules_are_followed_once_and_only_what_the_function_reaches_counts() -> None:
    folder = FIXTURES / "with_helpers"
    everything = scan_candidate(folder / "candidate.py")
    reached = scan_candidate(folder / "candidate.py", "candidate")
    timing = folder / "kernels" / "timing.py"
    import_time = (str(timing.resolve()), line(timing, "time.perf_counter ="))
    called = (str(timing.resolve()), line(timing, "torch.cuda.synchronize ="))
    thread = (str((folder / "launch.py").resolve()), line(folder / "launch.py", "Thread"))
    spying = (str((folder / "helpers.py").resolve()), line(folder / "helpers.py", "_getframe"))
    assert {(t.path, t.line) for t in reached} == {import_time, called, thread}
    assert {(t.path, t.line) for t in everything} >= {import_time, called, thread, spying}
    assert len(everything) == len(set(everything))


def test_a_function_sees_module_level_code_and_what_it_calls(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        import gc
        import sys

        import torch

        torch.backends.cuda.matmul.allow_tf32 = True


        def _helper(x):
            return len(gc.get_objects()) + x


        def honest(x):
            return x * 2


        def cheating(x):
            return _helper(x)


        class Spy:
            def __call__(self, x):
                return sys._getframe(1)


        spy = Spy()
        """,
    )
    flag = ("gpu-flags", line(path, "allow_tf32"))
    gc_walk = ("gc-walking", line(path, "gc.get_objects"))
    frames = ("frame-walking", line(path, "_getframe"))
    assert found(scan_candidate(path, "honest")) == {flag, frames}
    assert found(scan_candidate(path, "cheating")) == {flag, gc_walk, frames}
    assert found(scan_candidate(path)) == {flag, gc_walk, frames}
    # A name the file does not define statically: everything counts.
    assert found(scan_candidate(path, "made_at_runtime")) == {flag, gc_walk, frames}


def test_a_function_imported_from_a_local_module_is_followed_there(tmp_path: Path) -> None:
    helper = write(
        tmp_path,
        """
        import os


        def kernel(x):
            return x if os.getenv("FAST") else x * 2


        def other(x):
            return os.getppid()
        """,
        name="impl/kernels.py",
    )
    write(tmp_path, "", name="impl/__init__.py")
    path = write(tmp_path, "from impl.kernels import kernel as candidate\n")
    found = scan_candidate(path, "candidate")
    assert {(t.path, t.rule, t.line) for t in found} == {
        (str(helper.resolve()), "environment", line(helper, "os.getenv")),
    }


def test_modules_outside_the_candidates_folder_are_not_read(tmp_path: Path) -> None:
    write(tmp_path, "import gc\n\ngc.get_objects()\n", name="outside.py")
    path = write(
        tmp_path / "candidate_dir",
        """
        import json

        import outside


        def candidate(x):
            return json.dumps(x), outside
        """,
    )
    assert scan_candidate(path) == ()


# --- files that cannot be read --------------------------------------------------------------------


def test_a_syntax_error_yields_no_tripwires_and_says_the_file_went_unread(tmp_path: Path) -> None:
    path = write(tmp_path, "import gc\ngc.get_objects()\ndef candidate(x:\n    return x\n")
    assert scan_candidate(path) == ()
    ((where, why),) = scan(path).unread
    assert where == str(path.resolve()) and why.startswith("SyntaxError at line 3")


def test_a_local_module_that_is_not_text_is_said_to_have_gone_unread(tmp_path: Path) -> None:
    # a module the candidate imports whose bytes are not UTF-8 and declare no encoding: its
    # code was not read, so nothing in it was checked
    path = write(tmp_path, "import helper\n\n\ndef candidate(x):\n    return helper.twice(x)\n")
    (tmp_path / "helper.py").write_bytes(b"# \xff\xfe\ndef twice(x):\n    return 2 * x\n")
    ((where, why),) = scan(path, "candidate").unread
    assert where == str((tmp_path / "helper.py").resolve())
    assert why == "SyntaxError: invalid or missing encoding declaration"


def test_an_expression_too_deep_for_the_scan_is_reported_not_skipped(tmp_path: Path) -> None:
    # Python compiles it; walking its tree one node per level runs out of stack
    body = " + ".join(["x"] * 1000)
    source = f"import gc\ndef candidate(x):\n    gc.get_objects()\n    return {body}\n"
    path = write(tmp_path, source)
    compile(path.read_text(), str(path), "exec")
    scanned = scan(path, "candidate")
    assert scanned.unread == ((str(path.resolve()), "an expression nested too deeply to walk"),)


def test_a_local_module_with_a_syntax_error_is_skipped(tmp_path: Path) -> None:
    folder = tmp_path / "copy"
    shutil.copytree(FIXTURES / "with_helpers", folder)
    write(folder, "def broken(:\n    pass\n", name="broken.py")
    with (folder / "candidate.py").open("a") as file:
        file.write("\nimport broken  # noqa: E402\n")
    scanned = scan(folder / "candidate.py", "candidate")
    assert {Path(t.path).name for t in scanned.tripwires} == {"timing.py", "launch.py"}
    assert [Path(path).name for path, _ in scanned.unread] == ["broken.py"]


@pytest.mark.parametrize("name", ["missing.py", "."])
def test_a_missing_file_is_a_usage_error(tmp_path: Path, name: str) -> None:
    with pytest.raises(UsageError, match="candidate file"):
        scan_candidate(tmp_path / name)
