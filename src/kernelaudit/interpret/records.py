"""What an interpreted run reports back: plain values only, read from JSON that a hostile
candidate's process wrote, so every field is checked on the way in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KINDS = ("load", "store", "atomic")


class UnreadableResult(ValueError):
    """The child's result is not what `Interpretation.to_json` writes."""


@dataclass(frozen=True)
class OutOfBounds:
    """The lanes of one kernel's accesses of one kind that left one tensor argument, in one call.

    offsets count elements of the argument's dtype from its first element: -1 is the element
    just before it, `elements` the one just past its last.
    """

    call: int
    """Which of the interpreted calls it happened in."""
    kernel: str
    """The name of the launched @triton.jit function."""
    argument: str
    """The kernel parameter holding the tensor the addresses belong to (the one most of the
    access's lanes fall in, or the nearest one when none does)."""
    kind: str
    """"load", "store" or "atomic"."""
    tensor: str
    """What the argument is to the problem ("output y", "input x"), "" when not known."""
    lanes: int
    """Element accesses out of the argument's bounds, over every access of the group."""
    outside: int
    """Those that fell outside every tensor argument of the launch (the rest hit another one)."""
    accesses: int
    """Accesses (loads, stores, atomics executed by one program) with at least one such lane."""
    offsets: tuple[int, ...]
    """A few of the offending offsets, smallest first."""
    lowest: int
    highest: int
    elements: int
    """Elements the argument spans (its storage span: all of them for a dense tensor)."""
    dtype: str
    lines: tuple[str, ...]
    """Source lines of the accesses ("kernels.py:42")."""
    program: tuple[int, ...]
    """The program id of the first such access."""
    grid: tuple[int, ...]
    others: tuple[str, ...] = ()
    """Other arguments some lanes landed in."""

    @property
    def past_end(self) -> int:
        """How many elements past the argument's last element the furthest lane reached."""
        return max(0, self.highest - (self.elements - 1))

    @property
    def before_start(self) -> int:
        """How many elements before the argument's first element the furthest lane reached."""
        return max(0, -self.lowest)

    def to_json(self) -> dict[str, Any]:
        return {
            "call": self.call,
            "kernel": self.kernel,
            "argument": self.argument,
            "kind": self.kind,
            "tensor": self.tensor,
            "lanes": self.lanes,
            "outside": self.outside,
            "accesses": self.accesses,
            "offsets": list(self.offsets),
            "lowest": self.lowest,
            "highest": self.highest,
            "elements": self.elements,
            "dtype": self.dtype,
            "lines": list(self.lines),
            "program": list(self.program),
            "grid": list(self.grid),
            "others": list(self.others),
        }

    @classmethod
    def from_json(cls, data: object) -> OutOfBounds:
        fields = _mapping(data)
        kind = _text(fields, "kind")
        if kind not in KINDS:
            raise UnreadableResult(f"unknown access kind {kind!r}")
        return cls(
            call=_number(fields, "call"),
            kernel=_text(fields, "kernel"),
            argument=_text(fields, "argument"),
            kind=kind,
            tensor=_text(fields, "tensor"),
            lanes=_number(fields, "lanes"),
            outside=_number(fields, "outside"),
            accesses=_number(fields, "accesses"),
            offsets=_numbers(fields, "offsets"),
            lowest=_number(fields, "lowest"),
            highest=_number(fields, "highest"),
            elements=_number(fields, "elements"),
            dtype=_text(fields, "dtype"),
            lines=_texts(fields, "lines"),
            program=_numbers(fields, "program"),
            grid=_numbers(fields, "grid"),
            others=_texts(fields, "others"),
        )


@dataclass(frozen=True)
class Interpretation:
    """Everything an interpreted run of a candidate saw.

    launches: (kernel, launches) for every kernel launched, in order of first launch.
    calls_done: calls that ran to their end (the candidate returned or raised).
    error: why the run stopped early or could not watch ("" when it did not): the candidate's
        exception, a timeout, a crash, an interpreter the watch does not know.
    cause: what `error` is: "", "candidate" (the candidate raised), "no-triton" (Triton cannot
        be imported), "unsupported" (its interpreter cannot be watched), "timeout", "crash",
        "host-memory" (its processes held more host memory than the audit allows), "disk"
        (they wrote more to the candidate's cache folder than it may hold), "too-large" or
        "bad-result" (its result file held more than any run's records can, or was not a
        regular file, or not the records the child writes).
    dropped: groups of out-of-bounds lanes not recorded once the cap was reached.
    """

    launches: tuple[tuple[str, int], ...] = ()
    out_of_bounds: tuple[OutOfBounds, ...] = ()
    calls_done: int = 0
    error: str = ""
    cause: str = ""
    dropped: int = 0
    seconds: float = 0.0

    @property
    def launched(self) -> int:
        return sum(count for _, count in self.launches)

    def to_json(self) -> dict[str, Any]:
        return {
            "launches": [[kernel, count] for kernel, count in self.launches],
            "out_of_bounds": [o.to_json() for o in self.out_of_bounds],
            "calls_done": self.calls_done,
            "error": self.error,
            "cause": self.cause,
            "dropped": self.dropped,
            "seconds": self.seconds,
        }

    @classmethod
    def from_json(cls, data: object) -> Interpretation:
        fields = _mapping(data)
        launches = fields.get("launches")
        if not isinstance(launches, list):
            raise UnreadableResult("launches is not a list")
        pairs = []
        for pair in launches:
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
                raise UnreadableResult("a launch is not a [kernel, count] pair")
            pairs.append((pair[0], _integer(pair[1], "launch count")))
        found = fields.get("out_of_bounds")
        if not isinstance(found, list):
            raise UnreadableResult("out_of_bounds is not a list")
        seconds = fields.get("seconds")
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
            raise UnreadableResult("seconds is not a number")
        return cls(
            launches=tuple(pairs),
            out_of_bounds=tuple(OutOfBounds.from_json(item) for item in found),
            calls_done=_number(fields, "calls_done"),
            error=_text(fields, "error"),
            cause=_text(fields, "cause"),
            dropped=_number(fields, "dropped"),
            seconds=float(seconds),
        )


def _mapping(data: object) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise UnreadableResult(f"expected an object, found {type(data).__name__}")
    return data


def _integer(value: object, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise UnreadableResult(f"{name} is not an integer")
    return value


def _number(fields: dict[str, Any], name: str) -> int:
    return _integer(fields.get(name), name)


def _numbers(fields: dict[str, Any], name: str) -> tuple[int, ...]:
    values = fields.get(name)
    if not isinstance(values, list):
        raise UnreadableResult(f"{name} is not a list")
    return tuple(_integer(v, name) for v in values)


def _text(fields: dict[str, Any], name: str) -> str:
    value = fields.get(name)
    if not isinstance(value, str):
        raise UnreadableResult(f"{name} is not a string")
    return value


def _texts(fields: dict[str, Any], name: str) -> tuple[str, ...]:
    values = fields.get(name)
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise UnreadableResult(f"{name} is not a list of strings")
    return tuple(values)
