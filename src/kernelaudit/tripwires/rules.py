"""The tripwire rules: each rule's name, what it looks for, why it matters to a benchmark and
which runtime checks confirm it; and the tripwire a rule raises at one line of a file.

The names and patterns each reader matches live beside the reader: `python_names` for Python,
`triggers` for the decisions a bomb hangs on, `c_source` for C, C++ and CUDA.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType


@dataclass(frozen=True)
class Rule:
    """One kind of suspicious construct.

    confirmed_by: the runtime checks whose failure confirms a tripwire of this rule; with none,
    a tripwire of the rule always stays a warning, unless it `fails_alone`.
    gpu_only: whether the construct does anything only on a GPU (a side stream, a CUDA graph):
    an audit on a CPU can neither confirm nor rule it out, and says so.
    quiet: whether the construct has honest uses in most kernels that have it (atomics): a
    tripwire of the rule is no warning of its own, fails only where a runtime check confirms it,
    and is left out of `kernelaudit scan`'s list; an audit that cannot run those checks (on a
    CPU, for a `gpu_only` rule) still lists it as a risk it could not rule out.
    """

    name: str
    looks_for: str
    why: str
    confirmed_by: tuple[str, ...]
    gpu_only: bool = False
    quiet: bool = False
    fails_alone: bool = False
    """A construct no kernel has a reason for: a tripwire of the rule fails without a runtime
    check to confirm it."""


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
        "determinism settings (the GPU's own flags are gpu-flags); reseeding the global RNG; "
        "overriding aten operators",
        "Replacing a torch or comparison function, flipping a precision flag or reseeding the "
        "global RNG changes what the reference and the correctness comparison compute in the "
        "same process.",
        ("global-state",),
    ),
    Rule(
        "gpu-flags",
        "setting the GPU's precision and algorithm flags: torch.backends.cuda and "
        "torch.backends.cudnn (TF32, reduced-precision reductions, cuDNN's benchmark and "
        "determinism), the calls that set them, and the environment variables that override "
        "them (NVIDIA_TF32_OVERRIDE, CUBLAS_WORKSPACE_CONFIG and the like)",
        "These flags change what a GPU computes in the same process, the reference and the "
        "comparison included, and nothing a CPU computes: an audit on a CPU sees such a write "
        "only where it runs, and never what it does.",
        ("global-state",),
        gpu_only=True,
    ),
    Rule(
        "harness-tampering",
        "replacing or deleting anything in kernelaudit's own modules (by assignment, setattr, "
        "a patch, or through sys.modules), or in a module looked up by a name made at run time",
        "No kernel has a reason to change the auditor's code: one that does rewrites how its "
        "own calls are observed or timed, in the process it runs in.",
        (),
        fails_alone=True,
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
        gpu_only=True,
    ),
    Rule(
        "atomics",
        "atomic read-modify-writes: triton.language's atomic_add, atomic_max, atomic_cas and "
        "the rest in Triton kernels; atomicAdd and its family in CUDA source",
        "Atomics let a GPU's programs update one place in whatever order they run, so a float "
        "sum differs from run to run in its last bits and an update only partly atomic races; "
        "a CPU runs a Triton kernel's programs one after another and shows neither.",
        ("determinism", "races"),
        gpu_only=True,
        quiet=True,
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
        gpu_only=True,
    ),
    Rule(
        "call-count-trigger",
        "a decision on a count kept across calls: a global, nonlocal, function-attribute or "
        "self attribute stepped by a constant, or next() on an itertools.count",
        "A kernel that counts its calls can compute honestly for the first few, which are "
        "checked, and cut corners in the later ones, which are timed or used.",
        ("replay", "timing"),
    ),
    Rule(
        "clock-trigger",
        "a decision on the wall clock, a monotonic or CPU clock, the date or the uptime "
        "(time.time, perf_counter, datetime.now, os.times, /proc/uptime); host clocks in CUDA "
        "source",
        "A kernel that reads the clock can behave one way in the first seconds of a process, "
        "or on some dates, and another way later.",
        ("timing", "determinism"),
    ),
    Rule(
        "process-trigger",
        "a decision on the process or thread it runs in: os.getpid, threading.current_thread, "
        "multiprocessing.current_process and friends (the environment rule has os.getppid, "
        "os.environ and sys.argv); getpid and thread ids in CUDA source",
        "A kernel that tells one process or thread from another can compute honestly in the "
        "worker that checks it and differently in the one that times it.",
        ("races", "determinism"),
    ),
    Rule(
        "file-trigger",
        "a decision on a file's existence, contents or times (os.path.exists, open, "
        "Path.read_text, torch.load), unless it only builds code or makes folders; file "
        "streams in CUDA source",
        "A marker file lets a kernel keep state between calls and between processes: it can "
        "answer honestly until the file exists and replay or skip work after.",
        ("replay", "determinism"),
    ),
)

RULES: Mapping[str, Rule] = MappingProxyType({rule.name: rule for rule in _TABLE})


_TEXT_LIMIT = 160


@dataclass(frozen=True)
class Tripwire:
    """A suspicious construct at one line of the candidate's source (or a file it uses).

    path: absolute path of the file the line is in; line: 1-based; text: the line, stripped.
    confirmed_by: the runtime checks whose failure confirms it (see `RULES`).
    """

    rule: str
    path: str
    line: int
    text: str
    why: str
    confirmed_by: tuple[str, ...]


def physical_lines(source: str) -> list[str]:
    """A file's lines as the parser counts them: form feeds and other Unicode breaks do not
    end one."""
    return source.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def tripwire(rule: str, path: Path, line: int, lines: list[str]) -> Tripwire:
    """The tripwire of `rule` at `line` of a file, given the file's physical lines."""
    spec = RULES[rule]
    text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    if len(text) > _TEXT_LIMIT:
        text = text[: _TEXT_LIMIT - 1] + "…"
    return Tripwire(
        rule=rule,
        path=str(path),
        line=line,
        text=text,
        why=spec.why,
        confirmed_by=spec.confirmed_by,
    )
