"""The names, calls and imports the Python reader matches, by rule.

Dotted names are what a Python expression resolves to after imports and aliases
(`import torch as T; T.allclose` is `torch.allclose`). A name ending in `.*` stands for every
attribute under it; any other name matches itself only.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping
from types import MappingProxyType

from kernelaudit.tripwires.python_source import argument, string

# --- names whose use is suspicious wherever they appear --------------------------------------

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

# Triton's atomic read-modify-writes, as `triton.language` and its `core` module name them.
_ATOMICS = tuple(
    f"triton.language.{module}atomic_{op}"
    for module in ("", "core.")
    for op in ("add", "and", "cas", "max", "min", "or", "xchg", "xor")
)

# Harmless to mention (`torch.cuda.Stream.null`, `isinstance(s, torch.cuda.Stream)`); what
# matters is making one.
CALLS: Mapping[str, str] = MappingProxyType(
    {
        **_names("atomics", *_ATOMICS),
        **_names(
            "gpu-flags",
            "torch.backends.cuda.preferred_blas_library",
            "torch.backends.cuda.preferred_linalg_library",
            "torch._C._set_cublas_allow_tf32",
            "torch._C._set_cudnn_allow_tf32",
            "torch._C._set_cublas_allow_fp16_reduced_precision_reduction",
            "torch._C._set_cublas_allow_bf16_reduced_precision_reduction",
        ),
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

# --- dynamic code, shells --------------------------------------------------------------------

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

# --- C, C++ and CUDA source held in Python ----------------------------------------------------

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

# Paths in Python strings.
RAW_MEMORY_PATHS = re.compile(r"/proc/[^\s'\"]*/mem\b|/dev/mem\b")
PROCESS_PATHS = re.compile(r"/proc/")


def matches(patterns: frozenset[str], name: str) -> bool:
    """Whether a dotted name is in a set of names, or under one of its `.*` entries."""
    if name in patterns:
        return True
    parts = name.split(".")
    return any(".".join(parts[:size]) + ".*" in patterns for size in range(1, len(parts)))


def lookup(table: Mapping[str, str], name: str) -> str | None:
    """The rule of a dotted name in a table, itself or through its nearest `.*` entry."""
    found = table.get(name)
    parts = name.split(".")
    for size in range(len(parts) - 1, 0, -1):
        if found is not None:
            break
        found = table.get(".".join(parts[:size]) + ".*")
    return found


def module_rule(module: str) -> str | None:
    """The rule of importing a module, or any package above it."""
    parts = module.split(".")
    for size in range(len(parts), 0, -1):
        rule = IMPORTS.get(".".join(parts[:size]))
        if rule is not None:
            return rule
    return None


def call_rules(call: ast.Call, name: str) -> Iterator[str]:
    """The rules a call to the dotted name `name` breaks, whatever it is called on."""
    rule = lookup(CALLS, name)
    if rule is not None:
        yield rule
    if name in DYNAMIC_CODE_CALLS:
        first = argument(call, 0, "source") or argument(call, 0, "name")
        if first is not None and string(first) is None:
            yield "dynamic-code"
    if name in SHELL_CALLS:
        words = " ".join(filter(None, map(string, ast.walk(call))))
        yield "package-install" if INSTALLER_WORDS.search(words) else SHELL_CALLS[name]
    if name in TORCH_LIBRARY_CALLS:
        target = string(argument(call, 0))
        if target is not None and re.split(r"::|\.", target)[0] in TORCH_NAMESPACES:
            yield "torch-patching"


def reads_nothing(name: str, node: ast.AST, parents: Mapping[ast.AST, ast.AST]) -> bool:
    """Uses of names in REFERENCES that read nothing: writes to the environment, and a
    module looking itself up in sys.modules."""
    parent = parents.get(node)
    if name in ("os.environ", "os.environb"):
        if isinstance(parent, ast.Subscript) and not isinstance(parent.ctx, ast.Load):
            return True
        return isinstance(parent, ast.Attribute) and parent.attr in (
            "setdefault",
            "update",
            "pop",
            "clear",
            "__setitem__",
            "__delitem__",
        )
    if name == "sys.modules":
        if isinstance(parent, ast.Subscript):
            key: ast.AST | None = parent.slice
            if not isinstance(parent.ctx, ast.Load):
                return True
        elif isinstance(parent, ast.Attribute) and parent.attr in ("get", "pop"):
            call = parents.get(parent)
            key = call.args[0] if isinstance(call, ast.Call) and call.args else None
        else:
            return False
        return isinstance(key, ast.Name) and key.id == "__name__"
    return False
