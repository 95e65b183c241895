"""What a write in the candidate's Python means: the timers and libraries that assigning,
setattr or mock.patch replaces, and the containers, tensors and compiled code a module keeps
between calls.

Dotted names follow `python_names`: a name ending in `.*` stands for every attribute under it.
"""

from __future__ import annotations

import ast

from kernelaudit.tripwires.python_names import matches
from kernelaudit.tripwires.python_source import (
    RUNTIME_MODULE,
    Names,
    argument,
    module_named,
    string,
    target_names,
)

# --- writes that replace a timer or a library ------------------------------------------------

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
        "math.*",
        "operator.*",
        "builtins.*",
    }
)

# Writing any of these is harness-tampering: the auditor's own code, which the worker runs in
# the candidate's process.
HARNESS_TARGETS = frozenset({"kernelaudit", "kernelaudit.*"})

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

# Writing these is gpu-flags: settings that change what a GPU computes, and nothing a CPU does.
GPU_FLAG_TARGETS = frozenset({"torch.backends.cuda.*", "torch.backends.cudnn.*"})

# Writing these hooks is process-control.
PROCESS_HOOKS = frozenset({"sys.excepthook", "sys.unraisablehook", "threading.excepthook"})

# Environment variables that change a GPU's numerics or allocator in the process that sets
# them (gpu-flags, as the flags they override are).
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


# --- state kept between calls ------------------------------------------------------------------

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


def write_rule(target: str) -> str | None:
    """The rule of replacing a dotted name: a timer, a library's function or flag, or a hook
    of the process; None for anything else. A write into a module named at run time may be a
    write into kernelaudit's own, which no kernel needs either."""
    if matches(HARNESS_TARGETS, target) or target.split(".", 1)[0] == RUNTIME_MODULE:
        return "harness-tampering"
    if matches(TIMER_TARGETS, target):
        return "timer-patching"
    if matches(GPU_FLAG_TARGETS, target):
        return "gpu-flags"
    if matches(LIBRARY_TARGETS, target) and not matches(LIBRARY_SETTINGS, target):
        return "torch-patching"
    if target in PROCESS_HOOKS:
        return "process-control"
    return None


def patched_target(names: Names, call: ast.Call, name: str | None) -> str | None:
    """The dotted name a setattr, delattr, mock.patch or monkeypatch call replaces."""
    if name in MOCK_PATCH_CALLS:
        return string(argument(call, 0, "target"))
    if name in MOCK_PATCH_OBJECT_CALLS:
        return _attribute_target(names, argument(call, 0), argument(call, 1))
    if name in SETATTR_CALLS or (
        isinstance(call.func, ast.Attribute) and call.func.attr in SETATTR_METHODS
    ):
        first = argument(call, 0)
        dotted = string(first)
        if dotted is not None:
            return dotted if "." in dotted else None
        return _attribute_target(names, first, argument(call, 1))
    return None


def subscript_target(names: Names, target: ast.Subscript) -> str | None:
    """The dotted name a write through `sys.modules[...]`, `x.__dict__[...]` or
    `vars(x)[...]` replaces."""
    container = target.value
    if names.qualname(container) == "sys.modules":
        return module_named(target.slice)
    key = string(target.slice)
    if key is None:
        return None
    owner = None
    if isinstance(container, ast.Attribute) and container.attr == "__dict__":
        owner = names.qualname(container.value)
    elif (
        isinstance(container, ast.Call)
        and names.qualname(container.func) == "vars"
        and container.args
    ):
        owner = names.qualname(container.args[0])
    return None if owner is None else f"{owner}.{key}"


def _attribute_target(
    names: Names, owner: ast.expr | None, attribute: ast.expr | None
) -> str | None:
    base = None if owner is None else names.qualname(owner)
    if base is None or attribute is None:
        return None
    return f"{base}.{string(attribute) or '<computed>'}"


def sets_precision(names: Names, call: ast.Call, name: str | None) -> bool:
    """Whether a call sets an environment variable that changes a GPU's numerics or
    allocator: os.putenv, or a method of os.environ."""
    if name == "os.putenv":
        return string(argument(call, 0)) in PRECISION_ENVIRONMENT
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    if names.qualname(func.value) not in ("os.environ", "os.environb"):
        return False
    keys = [string(argument(call, 0))] if func.attr in ("setdefault", "__setitem__") else []
    if func.attr == "update":
        keys = [kw.arg for kw in call.keywords]
        if call.args and isinstance(call.args[0], ast.Dict):
            keys.extend(string(key) for key in call.args[0].keys)
    return any(key in PRECISION_ENVIRONMENT for key in keys)


def kept_state(names: Names, module: list[ast.AST]) -> set[str]:
    """Module-level names bound to mutable containers or to tensors, given the nodes of the
    module's scope."""
    kept: set[str] = set()
    for node in module:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if _is_mutable(names, value):
            kept.update(n.id for t in targets for n in target_names(t))
    return kept


def _is_mutable(names: Names, value: ast.AST) -> bool:
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    if isinstance(value, ast.Call):
        name = names.qualname(value.func)
        return name in CONTAINER_FACTORIES or name in TENSOR_FACTORIES
    return False
