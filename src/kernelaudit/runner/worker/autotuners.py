"""Triton autotuners reachable from a candidate: found, described, and made to run one
configuration of choice.

An autotuner times its configurations on the first call of each key and keeps the fastest;
the others never run again on that machine, so a wrong one hides until another GPU, shape or
Triton version picks it. The worker finds every autotuner the candidate's modules hold and
reports their configurations; a call can then force one of them.

Forcing works through what every Triton 3 autotuner has: its `configs` list (with one entry it
runs that one without timing anything), its `cache` of choices per key, and its `run` method,
looked up on the instance at each launch.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import site
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import kernelaudit

_UNWRAP_DEPTH = 8
"""How many `.fn` links are followed from a global to the kernel under its decorators."""
_UNRUNNABLE = (
    ("triton.runtime.errors", "OutOfResources"),
    ("triton.runtime.errors", "PTXASError"),
    ("triton.compiler.errors", "CompileTimeAssertionFailure"),
)
"""Errors with which the autotuner itself drops a configuration while timing (too much shared
memory or too many registers for this device, a static assertion on its parameters)."""


class NotOffered(Exception):
    """The forced configuration is one the autotuner does not offer for this call: its
    `early_config_prune` drops it, or it cannot be compiled for this device."""


def find_autotuners(folder: str, candidate: object) -> dict[str, Any]:
    """Every autotuner held by the candidate's module or by a module of the candidate's own
    code (its folder, or any file outside the Python installation and kernelaudit), by name
    ("kernels.py::_matmul"), in name order. Empty when Triton was never imported."""
    module = sys.modules.get("triton.runtime.autotuner")
    jit = sys.modules.get("triton.runtime.jit")
    if module is None or jit is None:
        return {}
    autotuner_type = getattr(module, "Autotuner", None)
    interface = getattr(jit, "KernelInterface", None)
    if not isinstance(autotuner_type, type) or not isinstance(interface, type):
        return {}
    found: dict[int, Any] = {}
    for namespace in _namespaces(folder, candidate):
        for value in list(namespace.values()):
            for wrapped in _unwrapped(value, interface):
                if isinstance(wrapped, autotuner_type):
                    found.setdefault(id(wrapped), wrapped)
    named: dict[str, Any] = {}
    for autotuner in found.values():
        name = autotuner_name(autotuner)
        unique, count = name, 1
        while unique in named:
            count += 1
            unique = f"{name} #{count}"
        named[unique] = autotuner
    return dict(sorted(named.items()))


def autotuner_name(autotuner: object) -> str:
    """The file and name of the function under the autotuner ("kernels.py::_matmul")."""
    function = _base_function(autotuner)
    if function is None:
        return type(autotuner).__name__
    code = getattr(function, "__code__", None)
    file = os.path.basename(code.co_filename) if code is not None else "?"
    return f"{file}::{getattr(function, '__name__', '?')}"


def describe_config(config: object) -> str:
    """A configuration as its parameters and launch settings ("BLOCK=64, num_warps=4,
    num_stages=3")."""
    kwargs = getattr(config, "kwargs", None) or {}
    parts = [f"{key}={value}" for key, value in kwargs.items()]
    parts.append(f"num_warps={getattr(config, 'num_warps', '?')}")
    parts.append(f"num_stages={getattr(config, 'num_stages', '?')}")
    if getattr(config, "num_ctas", 1) not in (1, None):
        parts.append(f"num_ctas={config.num_ctas}")  # type: ignore[attr-defined]
    if getattr(config, "maxnreg", None) is not None:
        parts.append(f"maxnreg={config.maxnreg}")  # type: ignore[attr-defined]
    if getattr(config, "pre_hook", None) is not None:
        parts.append("with a pre_hook")
    return ", ".join(parts)


def describe(autotuners: Mapping[str, Any]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(name, configurations described) for every autotuner, as the worker reports them."""
    return tuple(
        (name, tuple(describe_config(c) for c in _configs(autotuner)))
        for name, autotuner in autotuners.items()
    )


def pick_untimed(autotuners: Iterable[Any]) -> None:
    """Have each autotuner take its first configuration (after pruning) without timing any.

    Triton's interpreter, which runs kernels on a CPU, has no device driver to time
    configurations with: an autotuner with several fails on its first call there. One with a
    timing function of its own keeps it."""
    for autotuner in autotuners:
        state = vars(autotuner)
        if state.get("_do_bench") is None and "do_bench" not in state:
            state["do_bench"] = _equal_times


def _equal_times(kernel_call: object, quantiles: object = None, **_: object) -> list[float]:
    return [0.0, 0.0, 0.0]


@contextlib.contextmanager
def forced(autotuner: Any, index: int) -> Iterator[list[int]]:
    """While active, `autotuner` runs only its configuration `index`; yields a one-element
    list counting the launches made with it. A launch whose arguments the autotuner's early
    pruning would not offer that configuration for raises `NotOffered`."""
    configs = _configs(autotuner)
    if not 0 <= index < len(configs):
        raise NotOffered(
            f"autotuner {autotuner_name(autotuner)} has {len(configs)} configurations, "
            f"no configuration {index}"
        )
    chosen = configs[index]
    state = vars(autotuner)
    saved = {name: state[name] for name in ("configs", "cache", "run") if name in state}
    original_run = autotuner.run
    prune = state.get("early_config_prune")
    arg_names = tuple(state.get("arg_names") or ())
    launches = [0]

    def run(*args: Any, **kwargs: Any) -> Any:
        if prune is not None:
            offered = prune(configs, dict(zip(arg_names, args, strict=False)), **kwargs)
            if not any(config is chosen or config == chosen for config in offered):
                raise NotOffered(
                    f"autotuner {autotuner_name(autotuner)} prunes configuration {index} "
                    f"({describe_config(chosen)}) for these arguments"
                )
        launches[0] += 1
        return original_run(*args, **kwargs)

    state["configs"] = [chosen]
    state["cache"] = {}
    state["run"] = run
    try:
        yield launches
    finally:
        for name in ("configs", "cache", "run"):
            if name in saved:
                state[name] = saved[name]
            else:
                state.pop(name, None)


@contextlib.contextmanager
def forcing(autotune: tuple[str, int] | None, autotuners: Mapping[str, Any]) -> Iterator[list[int]]:
    """`forced` for a call's (autotuner, configuration index), found among `autotuners`; a
    one-element list of zero launches when the call names none. Raises `NotOffered` for an
    autotuner that is not there."""
    if autotune is None:
        yield [0]
        return
    name, index = autotune
    autotuner = autotuners.get(name)
    if autotuner is None:
        raise NotOffered(f"no autotuner named {name} is defined in the candidate's modules now")
    with forced(autotuner, index) as launches:
        yield launches


def unrunnable(error: BaseException) -> str | None:
    """Why a forced configuration could not run, when `error` (or what caused it) is one with
    which the autotuner itself drops a configuration; else None."""
    kinds = tuple(
        kind
        for module, name in _UNRUNNABLE
        if isinstance(kind := getattr(sys.modules.get(module), name, None), type)
    )
    seen: BaseException | None = error
    for _ in range(_UNWRAP_DEPTH):
        if seen is None:
            break
        if isinstance(seen, NotOffered):
            return str(seen)
        if kinds and isinstance(seen, kinds):
            return f"{type(seen).__name__}: {seen}".strip()
        seen = seen.__cause__ or seen.__context__
    return None


def _configs(autotuner: Any) -> list[Any]:
    return list(vars(autotuner).get("configs") or ())


def _base_function(autotuner: object) -> object | None:
    current: object | None = autotuner
    for _ in range(_UNWRAP_DEPTH):
        if current is None or inspect.isfunction(current):
            return current
        current = getattr(current, "__dict__", {}).get("fn")
    return None


def _unwrapped(value: object, interface: type) -> Iterator[object]:
    """`value` and the kernels under it, through the `.fn` of each Triton decorator."""
    current: object | None = value
    for _ in range(_UNWRAP_DEPTH):
        if current is None or not isinstance(current, interface):
            return
        yield current
        current = getattr(current, "__dict__", {}).get("fn")


def _namespaces(folder: str, candidate: object) -> Iterator[Mapping[str, object]]:
    function = getattr(candidate, "function", candidate)  # an autograd wrapper's forward
    namespace = getattr(function, "__globals__", None)
    if isinstance(namespace, dict):
        yield namespace
    yield from _own_modules(folder, len(sys.modules))


@functools.lru_cache(maxsize=4)
def _own_modules(folder: str, loaded: int) -> tuple[dict[str, object], ...]:
    """The namespaces of the modules of the candidate's own code; `loaded` (how many modules
    are loaded) keys the cache, so a module imported since is found on the next look."""
    outside = _installation_folders()
    inside = folder.rstrip(os.sep) + os.sep if folder else None
    found = []
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if not isinstance(file, str):
            continue
        path = os.path.abspath(file)
        mine = inside is not None and path.startswith(inside)
        state = getattr(module, "__dict__", None)
        if (mine or not path.startswith(outside)) and isinstance(state, dict):
            found.append(state)
    return tuple(found)


def _installation_folders() -> tuple[str, ...]:
    """Where installed code lives: Python's prefixes and site folders, and kernelaudit."""
    folders = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    folders.update(site.getsitepackages())
    folders.add(site.getusersitepackages())
    folders.add(os.path.dirname(os.path.abspath(kernelaudit.__file__)))
    return tuple(os.path.abspath(f).rstrip(os.sep) + os.sep for f in folders if f)
