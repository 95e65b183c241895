"""Every load, store and atomic of a Triton kernel checked against the tensors it was launched
with, lane by lane, inside Triton's interpreter.

`watch_accesses()` wraps two places of the interpreter (`triton.runtime.interpreter`): the grid
executor's call, where a launch begins and the kernel's arguments are known, and the builder's
memory operations, where every access of every program is executed on real addresses. Before an
access runs, the addresses of its active lanes (mask true) are compared with the byte extents
of the launch's tensor arguments. Lanes that leave the argument the access addresses are
recorded and switched off: a load gets its `other` (or 0) there, a store or atomic is dropped,
so the process never reads or writes memory it does not own and goes on to the end.

Which argument an access addresses is not carried by the interpreter's pointers (they are bare
integers), so it is inferred: the argument most of the access's active lanes fall in, or the
nearest one when none does. Lanes that fall in another argument are recorded too, apart.

Only processes whose Triton interprets kernels (TRITON_INTERPRET=1 before triton is first
imported) can be watched; the interpreter's code is feature-detected, not version-checked.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from kernelaudit.interpret.records import OutOfBounds
from kernelaudit.runner.boundary.guard import storage_span

MAX_GROUPS = 64
"""Groups (call, kernel, argument, access kind) recorded; further ones are only counted."""

MAX_OFFSETS = 8
"""Offending offsets kept per group, those nearest the argument first."""

MAX_LINES = 4
"""Source lines kept per group."""


class UnsupportedInterpreter(RuntimeError):
    """This process's Triton has no interpreter that can be watched."""


class TritonMissing(UnsupportedInterpreter):
    """Triton cannot be imported here, so no candidate can launch a Triton kernel."""


@dataclass(frozen=True)
class Extent:
    """The bytes of one tensor argument of a launch: from the first byte of its lowest element
    to just past the last byte of its highest one."""

    argument: str
    start: int
    end: int
    itemsize: int
    dtype: str

    @property
    def elements(self) -> int:
        return (self.end - self.start) // self.itemsize

    def holds(self, lowest: int, past_highest: int) -> bool:
        return self.start <= lowest and past_highest <= self.end

    def distance(self, lowest: int, past_highest: int) -> int:
        """Bytes between the range [lowest, past_highest) and this extent (0 when they meet)."""
        return max(0, self.start - past_highest, lowest - self.end)


def extents_of(arguments: dict[str, object]) -> tuple[Extent, ...]:
    """The extent of every tensor among a launch's arguments (in tuples too, and the base of a
    tensor descriptor), named after the kernel parameter that holds it."""
    found: list[Extent] = []
    for name, value in arguments.items():
        _collect(name, value, found)
    return tuple(found)


def _collect(name: str, value: object, found: list[Extent]) -> None:
    if isinstance(value, torch.Tensor):
        itemsize = value.element_size()
        span = storage_span(tuple(value.shape), tuple(value.stride()))
        start = value.data_ptr()
        dtype = str(value.dtype).removeprefix("torch.")
        found.append(Extent(name, start, start + span * itemsize, itemsize, dtype))
    elif isinstance(value, tuple):
        for index, item in enumerate(value):
            _collect(f"{name}[{index}]", item, found)
    elif hasattr(value, "base") and hasattr(value, "data_ptr"):
        # a reinterpreting wrapper (`tensor.view(tl.float8...)` passed to a kernel)
        _collect(name, value.base, found)
    elif hasattr(value, "base") and hasattr(value, "block_shape"):
        # a host-side tensor descriptor: its accesses are addresses in its base tensor
        _collect(name, value.base, found)


@dataclass
class _Launch:
    kernel: str
    extents: tuple[Extent, ...] = ()


@dataclass
class _Group:
    """Out-of-bounds lanes of one (call, kernel, argument, access kind), as they accumulate."""

    call: int
    kernel: str
    kind: str
    extent: Extent
    program: tuple[int, ...]
    grid: tuple[int, ...]
    lanes: int = 0
    outside: int = 0
    accesses: int = 0
    lowest: int = 0
    highest: int = 0
    offsets: list[int] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    others: set[str] = field(default_factory=set)

    def add(self, offsets: np.ndarray, outside: int, others: set[str], line: str) -> None:
        lowest, highest = int(offsets.min()), int(offsets.max())
        self.lowest = lowest if not self.accesses else min(self.lowest, lowest)
        self.highest = highest if not self.accesses else max(self.highest, highest)
        self.accesses += 1
        self.lanes += int(offsets.size)
        self.outside += outside
        self.others |= others
        kept = np.unique(np.concatenate([np.array(self.offsets, dtype=np.int64), offsets]))
        self.offsets = _nearest(kept, self.extent.elements)
        if line and line not in self.lines and len(self.lines) < MAX_LINES:
            self.lines.append(line)

    def record(self, tensor: str) -> OutOfBounds:
        return OutOfBounds(
            call=self.call,
            kernel=self.kernel,
            argument=self.extent.argument,
            kind=self.kind,
            tensor=tensor,
            lanes=self.lanes,
            outside=self.outside,
            accesses=self.accesses,
            offsets=tuple(self.offsets),
            lowest=self.lowest,
            highest=self.highest,
            elements=self.extent.elements,
            dtype=self.extent.dtype,
            lines=tuple(self.lines),
            program=self.program,
            grid=self.grid,
            others=tuple(sorted(self.others)),
        )


def _nearest(offsets: np.ndarray, elements: int) -> list[int]:
    """The MAX_OFFSETS of distinct `offsets` closest to the argument's elements, sorted."""
    distance = np.where(offsets < 0, -offsets, offsets - (elements - 1))
    order = np.argsort(distance, kind="stable")[:MAX_OFFSETS]
    return sorted(int(o) for o in offsets[order])


class BoundsWatch:
    """What the wrapped interpreter saw: launches per kernel and out-of-bounds lanes.

    `call` is set by the caller before each call of the candidate, so the lanes of each call
    are kept apart; `drain` hands them over and forgets them.
    """

    def __init__(self, builder: Any, triton_root: str) -> None:
        self.call = 0
        self.launches: dict[str, int] = {}
        self.dropped = 0
        self.kind = ""
        """An access kind that overrides the operation's own (atomic loads and stores are
        executed as plain ones)."""
        self._builder = builder
        self._triton_root = triton_root
        self._stack: list[_Launch] = []
        self._groups: dict[tuple[int, str, str, str], _Group] = {}

    # --- launches ---

    def begin(self, kernel: str) -> None:
        self.launches[kernel] = self.launches.get(kernel, 0) + 1
        self._stack.append(_Launch(kernel))

    def bind(
        self, function: Callable[..., object], args: tuple[object, ...], kwargs: dict[str, object]
    ) -> None:
        """Take the current launch's tensor extents from its arguments."""
        if not self._stack:
            return
        names = list(inspect.signature(function).parameters)
        arguments: dict[str, object] = dict(zip(names, args, strict=False))
        arguments.update((k, v) for k, v in kwargs.items() if k in names)
        self._stack[-1].extents = extents_of(arguments)

    def end(self) -> None:
        if self._stack:
            self._stack.pop()

    # --- accesses ---

    def screen(
        self, kind: str, addresses: np.ndarray, mask: np.ndarray | None, size: int
    ) -> np.ndarray | None:
        """The mask to execute an access with: `mask` less the lanes that leave the argument
        the access addresses (recorded), or None when every active lane is inside it."""
        if not self._stack or not self._stack[-1].extents:
            return None
        launch = self._stack[-1]
        active = (
            np.ones(addresses.shape, dtype=bool)
            if mask is None
            else np.broadcast_to(mask.astype(bool, copy=False), addresses.shape)
        )
        live = addresses[active]
        if live.size == 0:
            return None
        lowest, past = int(live.min()), int(live.max()) + size
        if any(extent.holds(lowest, past) for extent in launch.extents):
            return None
        inside = np.stack([_holds(extent, addresses, size) for extent in launch.extents])
        counts = (inside & active).sum(axis=1)
        if counts.max() > 0:
            base = int(counts.argmax())
        else:
            base = min(
                range(len(launch.extents)),
                key=lambda k: launch.extents[k].distance(lowest, past),
            )
        stray = active & ~inside[base]
        elsewhere = inside[:, stray]
        others = {
            launch.extents[k].argument for k in np.flatnonzero(elsewhere.any(axis=1)) if k != base
        }
        outside = int((~elsewhere.any(axis=0)).sum())
        self._record(kind, launch, launch.extents[base], addresses[stray], outside, others)
        return active & ~stray

    def _record(
        self,
        kind: str,
        launch: _Launch,
        extent: Extent,
        addresses: np.ndarray,
        outside: int,
        others: set[str],
    ) -> None:
        key = (self.call, launch.kernel, extent.argument, kind)
        group = self._groups.get(key)
        if group is None:
            if len(self._groups) >= MAX_GROUPS:
                self.dropped += 1
                return
            group = _Group(
                call=self.call,
                kernel=launch.kernel,
                kind=kind,
                extent=extent,
                program=tuple(int(i) for i in getattr(self._builder, "grid_idx", ()) or ()),
                grid=tuple(int(n) for n in getattr(self._builder, "grid_dim", ()) or ()),
            )
            self._groups[key] = group
        # unsigned differences wrap, so reading them as signed gives offsets before the start
        relative = (addresses - np.uint64(extent.start)).view(np.int64)
        group.add(relative // extent.itemsize, outside, others, self._source_line())

    def _source_line(self) -> str:
        """The file and line of the kernel's code that made the access: the innermost frame
        outside Triton and this module."""
        frame = sys._getframe(1)
        while frame is not None:
            file = frame.f_code.co_filename
            if not file.startswith(self._triton_root) and file != __file__:
                return f"{Path(file).name}:{frame.f_lineno}"
            frame = frame.f_back
        return ""

    def drain(self, tensor_at: Callable[[int, int], str]) -> tuple[OutOfBounds, ...]:
        """The recorded groups, with `tensor_at(start, end)` naming each argument's memory for
        the problem, and forget them."""
        found = tuple(
            group.record(tensor_at(group.extent.start, group.extent.end))
            for group in self._groups.values()
        )
        self._groups.clear()
        return found


def _holds(extent: Extent, addresses: np.ndarray, size: int) -> np.ndarray:
    """Which lanes' `size` bytes lie wholly inside the extent."""
    if extent.end - extent.start < size:
        return np.zeros(addresses.shape, dtype=bool)
    return (addresses >= np.uint64(extent.start)) & (addresses <= np.uint64(extent.end - size))


_SCRATCH = np.zeros(64, dtype=np.uint8)
"""Where the switched-off lanes of a compare-and-swap (which has no mask) are sent instead."""


def watch_accesses() -> BoundsWatch:
    """Wrap this process's Triton interpreter and return what it will record."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise UnsupportedInterpreter(
            "TRITON_INTERPRET=1 was not set when this process started, so Triton compiles "
            "kernels instead of interpreting them"
        )
    try:
        import triton
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError as error:
        raise TritonMissing(f"Triton's interpreter cannot be imported: {error}") from None
    builder = getattr(interpreter, "interpreter_builder", None)
    executor = getattr(interpreter, "GridExecutor", None)
    handle = getattr(interpreter, "TensorHandle", None)
    needed = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas")
    missing = [name for name in needed if not hasattr(builder, name)]
    if executor is None or handle is None or missing:
        absent = missing or ["GridExecutor" if executor is None else "TensorHandle"]
        raise UnsupportedInterpreter(
            f"Triton {triton.__version__}'s interpreter has no {', '.join(absent)}, where loads, "
            "stores and launches are watched"
        )
    watch = BoundsWatch(builder, str(Path(triton.__file__).parent) + os.sep)
    _wrap_launches(executor, watch)
    _wrap_accesses(builder, watch, handle, tl.int1)
    return watch


def _wrap_launches(executor: type, watch: BoundsWatch) -> None:
    call = executor.__call__

    def launch(self: Any, *args: object, **kwargs: object) -> object:
        watch.begin(getattr(self.fn, "__name__", "kernel"))
        try:
            watch.bind(self.fn, args, kwargs)
            return call(self, *args, **kwargs)
        finally:
            watch.end()

    launch.__wrapped__ = call  # type: ignore[attr-defined]  # what it wraps, for `inspect.unwrap`
    executor.__call__ = launch  # type: ignore[method-assign]
    to_host = getattr(executor, "_init_args_hst", None)
    if to_host is None:
        return

    def host_arguments(self: Any, args: Any, kwargs: Any) -> Any:
        # The interpreter runs on host copies of arguments that live on a device: their
        # addresses, not the originals', are the ones the kernel's pointers hold.
        copies = to_host(self, args, kwargs)
        watch.bind(self.fn, tuple(copies[0]), dict(copies[1]))
        return copies

    executor._init_args_hst = host_arguments  # type: ignore[attr-defined]


def _wrap_accesses(builder: Any, watch: BoundsWatch, handle: type, int1: object) -> None:
    """Wrap the builder's memory operations on the instance itself: the interpreter's semantic
    layer and the builder's own plain loads and stores reach them through it."""

    def size_of(pointers: Any) -> int:
        return max(1, pointers.get_element_ty().primitive_bitwidth // 8)

    def screened(kind: str, pointers: Any, mask: Any) -> Any:
        keep = watch.screen(
            watch.kind or kind,
            np.asarray(pointers.data),
            None if mask is None else np.asarray(mask.data),
            size_of(pointers),
        )
        return mask if keep is None else handle(keep, int1)

    load = builder.create_masked_load
    store = builder.create_masked_store
    rmw = builder.create_atomic_rmw
    cas = builder.create_atomic_cas

    def masked_load(pointers: Any, mask: Any, other: Any, *rest: Any, **options: Any) -> Any:
        return load(pointers, screened("load", pointers, mask), other, *rest, **options)

    def masked_store(pointers: Any, value: Any, mask: Any, *rest: Any, **options: Any) -> Any:
        return store(pointers, value, screened("store", pointers, mask), *rest, **options)

    def atomic_rmw(op: Any, pointers: Any, value: Any, mask: Any, *rest: Any) -> Any:
        return rmw(op, pointers, value, screened("atomic", pointers, mask), *rest)

    def atomic_cas(pointers: Any, compare: Any, value: Any, *rest: Any) -> Any:
        addresses = np.asarray(pointers.data)
        keep = watch.screen("atomic", addresses, None, size_of(pointers))
        if keep is not None:
            redirected = np.where(keep, addresses, np.uint64(_SCRATCH.ctypes.data))
            pointers = handle(redirected.astype(np.uint64), pointers.dtype)
        return cas(pointers, compare, value, *rest)

    builder.create_masked_load = masked_load
    builder.create_masked_store = masked_store
    builder.create_atomic_rmw = atomic_rmw
    builder.create_atomic_cas = atomic_cas
    for name in ("create_atomic_load", "create_atomic_store", "create_atomic_poll"):
        method = getattr(builder, name, None)
        if method is not None:
            setattr(builder, name, _as_atomic(method, watch))


def _as_atomic(method: Callable[..., Any], watch: BoundsWatch) -> Callable[..., Any]:
    """`method`, its plain loads and stores counted as atomics."""

    def atomic(*args: Any, **kwargs: Any) -> Any:
        outer, watch.kind = watch.kind, "atomic"
        try:
            return method(*args, **kwargs)
        finally:
            watch.kind = outer

    return atomic
