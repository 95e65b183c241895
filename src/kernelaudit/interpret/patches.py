"""Triton's interpreter's patching of the language, made once where it was made again and again:
the same patches.

Triton's interpreter runs a kernel's Python on NumPy by replacing the language's builtins
(`tl.load`, `tl.arange`, the tensor's methods, ...) and a few of its functions (`tl.range`,
`tl.reduce`, ...) with versions that run on the interpreter, for the length of a launch. It
does so at every launch and again at every call of a `@triton.jit` function from inside a
kernel (`tl.sum`, `tl.max`, `tl.cdiv` and the kernel's own helpers are such functions), in
every program: each time it lists every member of the language's modules and of its tensor
class (`inspect.getmembers`, about 500 members, each fetched and sorted) to find the builtins
among them, and wraps them again. A device call's patches are never undone (the interpreter
drops their scope), so after the first one in a launch the later ones change nothing but which
of two equal wrappers is in place. In `quick` audits of the bundled examples on the 2-core CPU,
that was 12% of the workers' busy time (`docs/benchmarks.md`, "The interpreter's patching
made once").

Here the names of each package's builtins are listed once, and every patching after that
fetches those names alone and wraps each one that is a builtin at that moment, as the
interpreter would (one already wrapped is skipped, one a launch's end restored is wrapped
again); and a device call whose function sees modules of the language a device call of this
launch patched already is given an empty scope instead of the same patches again. A launch
patches and restores as before, and nothing else of the interpreter changes, so a kernel
computes the same bits and the language is left as the interpreter leaves it
(`tests/interpret/test_patches.py`). As the interpreter's own patching, this holds for kernels
launched from one thread at a time (the interpreter swaps the language's attributes for a
launch's length, which launches from two threads at once already trip over).

Installed beside the float casts (`interpret.casts`), in every process that runs a candidate's
kernels through the interpreter; the unwatched run's plain process runs the interpreter as it
comes.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any

from kernelaudit.interpret.casts import interpreted_triton

_MARK = "_kernelaudit_patched_once"


def install() -> bool:
    """Make this process's interpreter list each package's builtins once and patch the
    language once per launch for each device call's modules; whether it did (Triton
    imported, interpreting, laid out as expected, and not done already)."""
    found = interpreted_triton()
    if found is None:
        return False
    module, language = found
    original = getattr(module, "_patch_builtin", None)
    if original is None or getattr(original, _MARK, False) or not _as_known(module, language):
        return False
    is_builtin = language.core.is_builtin
    listed: dict[tuple[int, int], tuple[object, tuple[str, ...]]] = {}

    def names_of(package: object) -> tuple[str, ...]:
        # by the package and how many attributes it has of its own: listed again where it
        # gained or lost one (a launch's patches add some and take them away again)
        key = (id(package), len(vars(package)))
        known = listed.get(key)
        if known is None:
            names = tuple(
                name
                for name, member in inspect.getmembers(package)
                if is_builtin(member) or is_builtin(wrapped(member))
            )
            # held with its names, so that its id is never another object's
            known = listed[key] = (package, names)
        return known[1]

    def patch_builtin(package: Any, builder: Any, scope: Any) -> None:
        for name in names_of(package):
            member = getattr(package, name)
            if is_builtin(member):
                module._patch_attr(package, name, member, builder, scope)

    setattr(patch_builtin, _MARK, True)
    module._patch_builtin = patch_builtin
    module._patch_lang = _once_per_launch(module, language, module._patch_lang)
    return True


def _once_per_launch(
    module: Any, language: Any, patch_lang: Callable[[Any], Any]
) -> Callable[[Any], Any]:
    """`patch_lang` (the interpreter's `_patch_lang`), made once per launch for each set of
    the language's modules a device call's function sees: a device call whose modules were
    patched already in this launch gets an empty scope (the interpreter drops a device call's
    scope unrestored anyway), and a launch patches and restores as it did."""
    device_call = module.InterpretedFunction.__call__.__code__
    patched: set[frozenset[int]] = set()
    languages = (language, language.core)

    def modules_of(fn: Any) -> frozenset[int]:
        # as the interpreter finds them, at every call (a module may rebind its names)
        return frozenset(
            id(value)
            for value in fn.__globals__.values()
            if inspect.ismodule(value) and value in languages
        )

    def once(fn: Any) -> Any:
        if sys._getframe(1).f_code is not device_call:  # a launch, or a caller unknown
            patched.clear()
            scope = patch_lang(fn)
            restore = scope.restore

            def restored() -> None:
                patched.clear()
                restore()

            scope.restore = restored
            return scope
        key = modules_of(fn)
        if key and key in patched:
            return module._LangPatchScope()
        scope = patch_lang(fn)  # (one that sees no module of the language raises, as before)
        patched.add(key)
        return scope

    return once


def wrapped(member: object) -> object:
    """The builtin an interpreter's wrapper (`_patch_attr`'s) calls, or None: the wrapper
    keeps it as its keyword-only default `member`."""
    defaults = getattr(member, "__kwdefaults__", None)
    return defaults.get("member") if isinstance(defaults, dict) else None


def _as_known(module: Any, language: Any) -> bool:
    """Whether the interpreter patches as this module was written against, as Triton 3.6 and
    3.9 do: `_patch_builtin(pkg, builder, scope)` listing a package's members to wrap its
    builtins through `_patch_attr(obj, name, member, builder, scope)`, whose wrappers hold the
    builtin as their keyword-only default `member`; a device call patching through the
    module's `_patch_lang` and dropping the scope, a launch restoring its own. Another layout
    keeps its own patching."""
    try:
        builtin = inspect.signature(module._patch_builtin).parameters
        attr = inspect.signature(module._patch_attr).parameters
    except (AttributeError, TypeError, ValueError):
        return False
    if list(builtin) != ["pkg", "builder", "scope"]:
        return False
    if list(attr) != ["obj", "name", "member", "builder", "scope"]:
        return False
    # the interpreter lists a package's members and wraps the builtins among them
    if not {"getmembers", "is_builtin"} <= _names_used(module._patch_builtin):
        return False
    # a device call patches through the module's `_patch_lang` and drops the scope unrestored;
    # a launch patches through it and restores its scope
    device_call = vars(getattr(module, "InterpretedFunction", object)).get("__call__")
    used = _names_used(device_call)
    if "_patch_lang" not in used or "restore" in used:
        return False
    launch = vars(getattr(module, "GridExecutor", object)).get("__call__")
    if not {"_patch_lang", "restore"} <= _names_used(inspect.unwrap(launch) if launch else None):
        return False
    if not hasattr(module, "_LangPatchScope") or not callable(getattr(module, "_patch_lang", 0)):
        return False
    if not callable(getattr(getattr(language, "core", None), "is_builtin", None)):
        return False
    # a wrapper made on an object of no consequence holds what it wraps where `wrapped` looks
    holder, marker = _Holder(), _Holder()
    try:
        module._patch_attr(holder, "member", marker, None, _Scope())
    except Exception:
        return False
    return wrapped(getattr(holder, "member", None)) is marker


def _names_used(function: object) -> set[str]:
    """The global and attribute names `function`'s own code uses (empty for anything else)."""
    return set(getattr(getattr(function, "__code__", None), "co_names", ()))


class _Holder:
    """An object to patch an attribute of, to see how the interpreter wraps it."""


class _Scope:
    """The one method of the interpreter's patch scope `_patch_attr` calls."""

    def set_attr(self, obj: object, name: str, value: object) -> None:
        setattr(obj, name, value)
