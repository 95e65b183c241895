"""The tripwire rules, as data: each rule's name, what it looks for, why it matters to a benchmark
and which runtime checks confirm it, then the names and patterns the scanner matches.

Dotted names are what a Python expression resolves to after imports and aliases
(`import torch as T; T.allclose` is `torch.allclose`). A name ending in `.*` stands for every
attribute under it; any other name matches itself only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True)
class Rule:
    """One kind of suspicious construct.

    confirmed_by: the runtime checks whose failure confirms a tripwire of this rule; with none,
    a tripwire of the rule always stays a warning.
    """

    name: str
    looks_for: str
    why: str
    confirmed_by: tuple[str, ...]


_TABLE = (
    Rule(
        "timer-patching",
        "replacing or patching clocks, CUDA events, synchronisation and benchmark timers; "
        "reading a device clock in CUDA source",
        "Patching a clock, an event or a synchronisation function, or reading a device clock, "
        "can make timed runs report less time than the kernel takes.",
        ("global-state", "timing"),
    ),
    Rule(
        "torch-patching",
        "replacing attributes of torch, torch.Tensor, torch.testing and other libraries a "
        "harness compares with, or comparison methods of a returned tensor; precision and "
        "determinism flags; reseeding the global RNG; overriding aten operators",
        "Replacing a torch or comparison function, flipping a precision flag or reseeding the "
        "global RNG changes what the reference and the correctness comparison compute in the "
        "same process.",
        ("global-state",),
    ),
    Rule(
        "frame-walking",
        "sys._getframe, inspect.stack and friends, trace hooks, f_back/f_locals/tb_frame",
        "Walking the call stack lets a kernel see the harness's frames: whether it is timed or "
        "checked, and the expected outputs held there.",
        ("timing", "replay"),
    ),
    Rule(
        "gc-walking",
        "gc.get_objects, gc.get_referrers, gc.get_referents, allocator snapshots",
        "Walking the live objects of the garbage collector or the allocator finds the "
        "harness's tensors, expected outputs and earlier inputs included.",
        ("timing", "replay", "stale-memory"),
    ),
    Rule(
        "ctypes",
        "ctypes and cffi, raw memory copies, /proc/self/mem, symbol addresses and IPC handles "
        "in CUDA source",
        "Raw pointer access can read or write memory the kernel was not given: stale outputs, "
        "other tensors, the interpreter itself.",
        ("stale-memory", "bounds", "global-state"),
    ),
    Rule(
        "address-keyed-cache",
        "data_ptr(), id() or _version used as a dictionary key, in a membership test, compared "
        "with kept state, or passed to an lru_cache'd function",
        "A cache keyed on a tensor's address, id or version can return a stored output when the "
        "harness reuses memory, without computing anything.",
        ("replay",),
    ),
    Rule(
        "module-state",
        "module-level containers or tensors that a function mutates, globals a function "
        "rebinds; __device__ globals and function-local statics in CUDA source",
        "State kept between calls can replay an earlier result or share memory between "
        "outputs instead of computing each call afresh.",
        ("replay", "aliasing"),
    ),
    Rule(
        "threads",
        "threads, thread and process pools, multiprocessing, fork, event loops, subprocesses; "
        "std::thread, std::async and pthread_create in CUDA source",
        "Work handed to another thread or process can finish after the call returns, outside "
        "the timed region, or race with the harness.",
        ("deferred-work",),
    ),
    Rule(
        "streams",
        "new CUDA streams and stream contexts in Python or CUDA source, host callbacks",
        "Work launched on a side stream is not ordered with the harness's stream, so a timer "
        "can stop before it finishes and a reader can see unfinished outputs.",
        ("deferred-work",),
    ),
    Rule(
        "environment",
        "environment variables, sys.argv, sys.modules lookups, host and parent-process "
        "queries, harness imports, /proc reads; getenv in CUDA source",
        "Reading the environment, the arguments or the loaded modules lets a kernel tell a "
        "benchmark or test run from real use and behave differently there.",
        ("timing", "specialisation"),
    ),
    Rule(
        "dynamic-code",
        "exec, eval or compile of non-literal code, imports by computed name, code objects, "
        "unpickling, rewriting __code__",
        "Code built or loaded at run time is invisible to this scan and can do anything the "
        "other rules look for.",
        ("global-state",),
    ),
    Rule(
        "package-install",
        "pip, conda or apt run from the candidate; network clients and sockets; torch.hub",
        "Installing packages or reaching the network changes the environment the audit runs "
        "in and can fetch code or answers from elsewhere.",
        (),
    ),
    Rule(
        "process-control",
        "exiting, killing or signalling the process, exit hooks, faulthandler; exit, abort and "
        "cudaDeviceReset in CUDA source",
        "Exiting, killing or signalling the process, or hooking its exit, can cut a check short "
        "or turn a failure into a crash that looks like something else.",
        ("execution",),
    ),
    Rule(
        "cuda-graphs",
        "capturing or replaying CUDA graphs, in Python or CUDA source",
        "A captured CUDA graph replays the work it recorded on the memory it recorded, so later "
        "calls can read the inputs of the capture rather than their own.",
        ("replay",),
    ),
)

RULES: Mapping[str, Rule] = MappingProxyType({rule.name: rule for rule in _TABLE})

# --- Python: names whose use is suspicious wherever they appear -------------------------------

_EXEC_FAMILY = ("execl", "execle", "execlp", "execlpe", "execv", "execve", "execvp", "execvpe")
_SPAWN_FAMILY = ("spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp")


def _names(rule: str, *names: str) -> dict[str, str]:
    return dict.fromkeys(names, rule)


REFERENCES: Mapping[str, str] = MappingProxyType(
    {
        **_names(
            "frame-walking",
            "sys._getframe",
            "sys._getframemodulename",
            "sys._current_frames",
            "sys.settrace",
            "sys.setprofile",
            "sys.monitoring",
            "sys.monitoring.*",
            "threading.settrace",
            "threading.setprofile",
            "threading.settrace_all_threads",
            "threading.setprofile_all_threads",
            "inspect.stack",
            "inspect.currentframe",
            "inspect.getouterframes",
            "inspect.getinnerframes",
            "inspect.trace",
            "traceback.extract_stack",
            "traceback.walk_stack",
            "traceback.format_stack",
            "traceback.print_stack",
        ),
        **_names(
            "gc-walking",
            "gc.get_objects",
            "gc.get_referrers",
            "gc.get_referents",
            "gc.callbacks",
            "gc.garbage",
            "torch.cuda.memory_snapshot",
            "torch.cuda.memory._snapshot",
        ),
        **_names(
            "ctypes",
            "ctypes.CDLL",
            "ctypes.cdll",
            "ctypes.PyDLL",
            "ctypes.pydll",
            "ctypes.pythonapi",
            "ctypes.memmove",
            "ctypes.memset",
            "ctypes.cast",
            "ctypes.string_at",
            "ctypes.wstring_at",
            "ctypes.addressof",
            "cffi.FFI",
        ),
        **_names(
            "threads",
            "threading.Thread",
            "threading.Timer",
            "_thread.start_new_thread",
            "_thread.start_new",
            "concurrent.futures.ThreadPoolExecutor",
            "concurrent.futures.ProcessPoolExecutor",
            "concurrent.futures.thread.*",
            "concurrent.futures.process.*",
            "multiprocessing.*",
            "torch.multiprocessing.*",
            "os.fork",
            "os.forkpty",
            "os.register_at_fork",
            "asyncio.run",
            "asyncio.new_event_loop",
            "asyncio.get_event_loop",
            "asyncio.create_task",
            "asyncio.ensure_future",
            "asyncio.to_thread",
            "asyncio.run_coroutine_threadsafe",
            "torch.jit.fork",
            "torch.jit._fork",
        ),
        **_names("streams", "torch.cuda.StreamContext", "torch.cuda.streams.StreamContext"),
        **_names(
            "environment",
            "os.environ",
            "os.environb",
            "os.getenv",
            "os.getenvb",
            "posix.environ",
            "sys.argv",
            "sys.orig_argv",
            "sys.modules",
            "sys.gettrace",
            "sys.getprofile",
            "platform.node",
            "platform.uname",
            "socket.gethostname",
            "socket.getfqdn",
            "os.uname",
            "os.getppid",
            "os.getlogin",
            "getpass.getuser",
            "psutil.*",
            "torch.autograd.profiler._is_profiler_enabled",
            "torch._C._autograd._profiler_enabled",
        ),
        **_names(
            "dynamic-code",
            "types.FunctionType",
            "types.LambdaType",
            "types.CodeType",
            "marshal.load",
            "marshal.loads",
            "pickle.load",
            "pickle.loads",
            "pickle.Unpickler",
            "_pickle.loads",
            "dill.load",
            "dill.loads",
            "cloudpickle.load",
            "cloudpickle.loads",
            "runpy.run_path",
            "runpy.run_module",
            "code.InteractiveInterpreter",
            "code.InteractiveConsole",
        ),
        **_names(
            "package-install",
            "pip.main",
            "pip._internal.*",
            "ensurepip.*",
            "urllib.request",
            "urllib.request.*",
            "http.client.*",
            "socket.socket",
            "socket.create_connection",
            "socket.create_server",
            "socket.getaddrinfo",
            "requests.*",
            "httpx.*",
            "urllib3.*",
            "aiohttp.*",
            "ftplib.*",
            "smtplib.*",
            "xmlrpc.client.*",
            "torch.hub.*",
            "huggingface_hub.*",
        ),
        **_names(
            "process-control",
            "os.kill",
            "os.killpg",
            "os.abort",
            "os._exit",
            "signal.signal",
            "signal.alarm",
            "signal.setitimer",
            "signal.pthread_kill",
            "signal.raise_signal",
            "signal.siginterrupt",
            "sys.exit",
            "sys.addaudithook",
            "atexit.*",
            "faulthandler.*",
            "resource.setrlimit",
        ),
        **_names(
            "cuda-graphs",
            "torch.cuda.CUDAGraph",
            "torch.cuda.graph",
            "torch.cuda.graphs.CUDAGraph",
            "torch.cuda.graphs.graph",
            "torch.cuda.make_graphed_callables",
            "torch.cuda.graphs.make_graphed_callables",
            "cupy.cuda.Graph",
        ),
        "triton.language.extra.cuda.globaltimer": "timer-patching",
    }
)

# Harmless to mention (`torch.cuda.Stream.null`, `isinstance(s, torch.cuda.Stream)`); what
# matters is making one.
CALLS: Mapping[str, str] = MappingProxyType(
    {
        **_names(
            "streams",
            "torch.cuda.Stream",
            "torch.cuda.streams.Stream",
            "torch.cuda.stream",
            "torch.cuda.set_stream",
            "torch.Stream",
            "cupy.cuda.Stream",
            "cupy.cuda.stream.Stream",
        ),
        **_names(
            "torch-patching",
            "torch.set_float32_matmul_precision",
            "torch.use_deterministic_algorithms",
            "torch.set_deterministic_debug_mode",
            "torch.set_default_dtype",
            "torch.set_default_device",
            "torch.set_default_tensor_type",
            "torch.set_flush_denormal",
            "torch.backends.cuda.preferred_blas_library",
            "torch._C._set_cublas_allow_tf32",
            "torch._C._set_cudnn_allow_tf32",
            "torch._C._set_cublas_allow_fp16_reduced_precision_reduction",
            "torch._C._set_cublas_allow_bf16_reduced_precision_reduction",
            "torch._C._set_float32_matmul_precision",
            "torch._C._set_deterministic_algorithms",
            "torch.manual_seed",
            "torch.seed",
            "torch.set_rng_state",
            "torch.random.manual_seed",
            "torch.random.set_rng_state",
            "torch.cuda.manual_seed",
            "torch.cuda.manual_seed_all",
            "torch.cuda.set_rng_state",
            "torch.cuda.set_rng_state_all",
            "random.seed",
            "random.setstate",
            "numpy.random.seed",
            "numpy.random.set_state",
        ),
        **_names("process-control", "exit", "quit"),
    }
)

# Imported at all: the import line is the tripwire. A module stands for its submodules too.
IMPORTS: Mapping[str, str] = MappingProxyType(
    {
        **_names("ctypes", "ctypes", "_ctypes", "cffi"),
        **_names("threads", "multiprocessing", "torch.multiprocessing"),
        **_names(
            "environment",
            "psutil",
            "__main__",
            "pytest",
            "_pytest",
            "kernelaudit.runner",
            "kernelaudit.engine",
            "kernelaudit.checks",
            "kernelaudit.oracle",
            "kernelaudit.timing",
        ),
        **_names(
            "package-install",
            "pip",
            "ensurepip",
            "requests",
            "httpx",
            "urllib3",
            "aiohttp",
            "urllib.request",
            "http.client",
            "ftplib",
            "smtplib",
            "paramiko",
            "huggingface_hub",
        ),
    }
)

# Attributes that only frames and tracebacks have.
FRAME_ATTRIBUTES = frozenset({"f_back", "f_locals", "f_globals", "f_builtins", "tb_frame"})

# Methods that reach raw memory whatever object they are called on.
RAW_MEMORY_METHODS = frozenset({"from_address", "from_buffer_copy"})

# --- Python: writes ---------------------------------------------------------------------------

# Writing (assigning, setattr, mock.patch, monkeypatch) any of these is timer-patching.
TIMER_TARGETS = frozenset(
    {
        "time",
        "time.*",
        "timeit",
        "timeit.*",
        "torch.cuda.Event",
        "torch.cuda.Event.*",
        "torch.cuda.Stream",
        "torch.cuda.Stream.*",
        "torch.cuda.streams.*",
        "torch.Event",
        "torch.Event.*",
        "torch.cuda.synchronize",
        "torch.cuda.current_stream",
        "torch.cuda.default_stream",
        "torch.cuda.cudart",
        "torch.accelerator.synchronize",
        "torch.utils.benchmark.*",
        "torch.profiler.*",
        "torch.autograd.profiler.*",
        "triton.testing.do_bench",
        "triton.testing.do_bench_cudagraph",
        "cupy.cuda.Event",
        "cupy.cuda.Event.*",
        "cupy.cuda.get_elapsed_time",
        "cupyx.profiler.*",
    }
)

# Writing any of these (that is not a timer) is torch-patching: the reference and the comparison
# run in the same process.
LIBRARY_TARGETS = frozenset(
    {
        "torch",
        "torch.*",
        "triton.testing",
        "triton.testing.*",
        "numpy",
        "numpy.*",
        "kernelaudit",
        "kernelaudit.*",
        "math.*",
        "operator.*",
        "builtins.*",
    }
)

# Compiler settings, not replaced functions: writing them is how torch.compile is tuned.
LIBRARY_SETTINGS = frozenset(
    {"torch._dynamo.config.*", "torch._inductor.config.*", "torch._functorch.config.*"}
)

# Methods a check may call on a returned tensor: planting one on an output (`out.allclose = f`)
# answers for the tensor.
TENSOR_VERDICT_METHODS = frozenset(
    {
        "allclose",
        "isclose",
        "equal",
        "eq",
        "ne",
        "__eq__",
        "__ne__",
        "__bool__",
        "all",
        "any",
        "item",
        "tolist",
        "numpy",
        "cpu",
    }
)

# Writing these hooks is process-control.
PROCESS_HOOKS = frozenset({"sys.excepthook", "sys.unraisablehook", "threading.excepthook"})

# Environment variables that change numerics or the allocator of the process that sets them.
PRECISION_ENVIRONMENT = frozenset(
    {
        "NVIDIA_TF32_OVERRIDE",
        "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
        "CUBLAS_WORKSPACE_CONFIG",
        "PYTORCH_NO_CUDA_MEMORY_CACHING",
        "CUDA_LAUNCH_BLOCKING",
    }
)

# Calls that set an attribute named by their arguments: (object, "name", value).
SETATTR_CALLS = frozenset({"setattr", "delattr", "object.__setattr__", "object.__delattr__"})
# Methods with the same arguments, or ("module.attribute", value) (pytest's monkeypatch).
SETATTR_METHODS = frozenset({"setattr", "delattr"})
MOCK_PATCH_CALLS = frozenset({"unittest.mock.patch", "mock.patch"})
MOCK_PATCH_OBJECT_CALLS = frozenset({"unittest.mock.patch.object", "mock.patch.object"})

# torch.library entry points whose first argument names an operator or namespace; registering
# into these namespaces replaces torch's own operators.
TORCH_LIBRARY_CALLS = frozenset(
    {
        "torch.library.Library",
        "torch.library.impl",
        "torch.library.register_kernel",
        "torch.library.register_autograd",
        "torch.library.register_fake",
    }
)
TORCH_NAMESPACES = frozenset({"aten", "prims", "prim"})

# --- Python: dynamic code, shells ------------------------------------------------------------

# Flagged when the first argument is not a string literal.
DYNAMIC_CODE_CALLS = frozenset(
    {"exec", "eval", "compile", "__import__", "importlib.import_module", "importlib.__import__"}
)

# Calls that run a command: package-install when the command mentions an installer or a
# download tool, otherwise the rule given here.
SHELL_CALLS: Mapping[str, str] = MappingProxyType(
    {
        **_names(
            "threads",
            "subprocess.run",
            "subprocess.call",
            "subprocess.check_call",
            "subprocess.check_output",
            "subprocess.Popen",
            "subprocess.getoutput",
            "subprocess.getstatusoutput",
            "os.system",
            "os.popen",
            "os.posix_spawn",
            "os.posix_spawnp",
            "asyncio.create_subprocess_exec",
            "asyncio.create_subprocess_shell",
            "pty.spawn",
            *(f"os.{name}" for name in _SPAWN_FAMILY),
        ),
        **_names("process-control", *(f"os.{name}" for name in _EXEC_FAMILY)),
    }
)
INSTALLER_WORDS = re.compile(
    r"(?<![\w-])(?:pip3?|conda|mamba|micromamba|apt|apt-get|yum|dnf|apk|uv|easy_install|pipx"
    r"|poetry|npm|curl|wget|git)(?![\w-])"
)

# --- Python: module state ---------------------------------------------------------------------

CONTAINER_FACTORIES = frozenset(
    {
        "dict",
        "list",
        "set",
        "bytearray",
        "collections.defaultdict",
        "collections.OrderedDict",
        "collections.deque",
        "collections.Counter",
        "collections.ChainMap",
        "weakref.WeakKeyDictionary",
        "weakref.WeakValueDictionary",
        "weakref.WeakSet",
        "queue.Queue",
        "queue.SimpleQueue",
        # Counters and cycles: `next(_calls)` tells the first calls (checked) from later ones
        # (timed).
        "itertools.count",
        "itertools.cycle",
    }
)
# A tensor allocated at import and written by a call is a buffer shared between calls.
TENSOR_FACTORIES = frozenset(
    {
        "torch.empty",
        "torch.empty_strided",
        "torch.zeros",
        "torch.ones",
        "torch.full",
        "torch.empty_like",
        "torch.zeros_like",
        "torch.ones_like",
        "torch.full_like",
        "torch.tensor",
    }
)
MUTATING_METHODS = frozenset(
    {
        "append",
        "extend",
        "insert",
        "update",
        "setdefault",
        "pop",
        "popitem",
        "popleft",
        "clear",
        "add",
        "discard",
        "remove",
        "appendleft",
        "extendleft",
        "rotate",
        "sort",
        "reverse",
        "put",
        "put_nowait",
        "__setitem__",
        "__delitem__",
    }
)

# Values that are compiled code, not data: keeping one at module level is how kernels are built
# once and launched many times.
CODE_FACTORIES = frozenset(
    {
        "torch.utils.cpp_extension.load_inline",
        "torch.utils.cpp_extension.load",
        "torch.compile",
        "torch.jit.script",
        "torch.jit.trace",
        "torch.cuda.jiterator._create_jit_fn",
        "torch.cuda.jiterator._create_multi_output_jit_fn",
        "triton.compile",
        "triton.jit",
        "cupy.RawKernel",
        "cupy.RawModule",
        "cupy.ElementwiseKernel",
        "cupy.ReductionKernel",
        "pycuda.compiler.SourceModule",
        "importlib.import_module",
    }
)
CODE_METHODS = frozenset({"get_function", "get_kernel"})

# --- Python: tensor identity --------------------------------------------------------------------

IDENTITY_METHODS = frozenset({"data_ptr"})
IDENTITY_ATTRIBUTES = frozenset(
    {"_version", "_cdata", "__cuda_array_interface__", "__array_interface__"}
)
# Key builders an identity may pass through on its way to a key.
KEY_BUILDERS = frozenset({"str", "int", "hash", "tuple", "repr", "hex", "frozenset", "format"})
KEY_METHODS = frozenset(
    {"get", "setdefault", "pop", "__contains__", "__getitem__", "__setitem__", "__delitem__"}
)
MEMO_DECORATORS = frozenset({"functools.lru_cache", "functools.cache"})

# --- CUDA and C++ sources -----------------------------------------------------------------------

# Calls that compile source text: (positional indices, keyword names) of the source arguments.
INLINE_SOURCE_CALLS: Mapping[str, tuple[tuple[int, ...], tuple[str, ...]]] = MappingProxyType(
    {
        "torch.utils.cpp_extension.load_inline": ((1, 2), ("cpp_sources", "cuda_sources")),
        "torch.cuda.jiterator._create_jit_fn": ((0,), ("code_string",)),
        "torch.cuda.jiterator._create_multi_output_jit_fn": ((0,), ("code_string",)),
        "cupy.RawKernel": ((0,), ("code",)),
        "cupy.RawModule": ((0,), ("code",)),
        "cupy.ElementwiseKernel": ((2,), ("operation", "preamble")),
        "cupy.ReductionKernel": ((2, 3, 4), ("map_expr", "reduce_expr", "post_map_expr")),
        "pycuda.compiler.SourceModule": ((0,), ("source",)),
        "cuda.core.experimental.Program": ((0,), ("code",)),
        "triton.language.inline_asm_elementwise": ((0,), ("asm",)),
    }
)
# Calls that compile source files: the arguments that name them.
SOURCE_FILE_CALLS: Mapping[str, tuple[tuple[int, ...], tuple[str, ...]]] = MappingProxyType(
    {"torch.utils.cpp_extension.load": ((1,), ("sources",))}
)
SOURCE_SUFFIXES = frozenset({".cu", ".cuh", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp"})

# A string that looks like CUDA or C++ source is scanned even when it is not seen being compiled.
SOURCE_MARKERS = re.compile(
    r"__global__|__device__|#include|extern\s+\"C\"|TORCH_LIBRARY|PYBIND11_MODULE"
)

CUDA_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (rule, re.compile(pattern))
    for rule, pattern in (
        ("timer-patching", r"\bclock(?:64)?\s*\("),
        ("timer-patching", r"%(?:globaltimer|clock)"),
        ("streams", r"\bcu(?:da)?StreamCreate\w*\s*\("),
        ("streams", r"\bgetStreamFromPool\s*\("),
        ("streams", r"\bcudaLaunchHostFunc\s*\("),
        ("streams", r"\bcudaStreamAddCallback\s*\("),
        ("threads", r"\bstd::(?:thread|jthread|async)\b"),
        ("threads", r"\bpthread_create\s*\("),
        ("environment", r"\b(?:secure_)?getenv\s*\("),
        (
            "process-control",
            r"(?<![\w.>:])(?:std::)?(?:exit|_exit|_Exit|quick_exit|abort|atexit)\s*\(",
        ),
        ("process-control", r"\bstd::terminate\s*\("),
        ("process-control", r"\bcudaDeviceReset\s*\("),
        ("ctypes", r"\bcudaGetSymbolAddress\s*\("),
        ("ctypes", r"\bcudaIpc(?:Open|Get)MemHandle\s*\("),
        ("ctypes", r"\bcuMemGetAddressRange\w*\s*\("),
        ("ctypes", r"\bdl(?:open|sym)\s*\("),
        ("ctypes", r"/proc/self/mem|/dev/mem"),
        ("cuda-graphs", r"\bcu(?:da)?GraphLaunch\s*\("),
        ("cuda-graphs", r"\bcu(?:da)?StreamBeginCapture\w*\s*\("),
    )
)

# Paths in Python strings.
RAW_MEMORY_PATHS = re.compile(r"/proc/[^\s'\"]*/mem\b|/dev/mem\b")
PROCESS_PATHS = re.compile(r"/proc/")
