"""Reading a candidate's source for constructs that can game a benchmark, without running it.

The candidate file is parsed with `ast`, never imported. Local modules it imports (files under
its own folder) are read too, each once, and so are CUDA and C++ sources it compiles: string
literals handed to `load_inline`, CuPy and the like (or that look like CUDA source), and source
files named in `sources=[...]`, with the local headers they include. `python_tripwires` reads
each Python file, `c_source` each C, C++ or CUDA text; this module follows the candidate
function into the code it can reach.

Every tripwire is a warning: the scan engine turns one into a failure only when a runtime
check of `Tripwire.confirmed_by` fails too, or when its rule `fails_alone` (a write into
kernelaudit's own modules).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from pathlib import Path

from kernelaudit.errors import UsageError
from kernelaudit.tripwires.c_source import SourceFiles
from kernelaudit.tripwires.python_tripwires import read_python
from kernelaudit.tripwires.python_walk import Reading
from kernelaudit.tripwires.rules import Tripwire

# Stands for every top-level function and class of a module (a module object passed around).
_EVERY_SYMBOL = "*"


@dataclass(frozen=True)
class Scanned:
    """What a scan found, and the files it could not read (whose constructs went unchecked)."""

    tripwires: tuple[Tripwire, ...]
    unread: tuple[tuple[str, str], ...] = ()
    """(path, why) of every file the scan reached but could not read or parse."""


def scan_candidate(path: str | Path, function: str | None = None) -> tuple[Tripwire, ...]:
    """The tripwires of a candidate file, sorted by (path, line, rule).

    With `function`, only code that can run for that function counts: the module-level code of
    the file and of the local modules it imports, and the functions and classes reachable from
    `function` by name. Without it (or when the name is not defined statically in the file),
    everything in the file and its local modules counts. A file that does not parse yields no
    tripwires (`scan` says which and why).
    """
    return scan(path, function).tripwires


def scan(path: str | Path, function: str | None = None) -> Scanned:
    """`scan_candidate`'s tripwires, with the files it could not read."""
    file = Path(path).expanduser()
    if not file.is_file():
        what = "is a directory" if file.is_dir() else "does not exist"
        raise UsageError(
            f"candidate file {file.resolve()} {what}; name the .py file that defines the kernel."
        )
    file = file.resolve()
    reading = Scan(file)
    found = reading.run(function)
    unread = {**reading.unread, **reading.sources.unread}
    return Scanned(found, tuple(sorted((str(p), why) for p, why in unread.items())))


class Scan:
    """One candidate's scan: the Python modules read so far and the source files scanned."""

    def __init__(self, candidate: Path):
        self.candidate = candidate
        self.root = candidate.parent
        self.readings: dict[Path, Reading | None] = {}
        self.unread: dict[Path, str] = {}
        self.sources = SourceFiles(self.root)

    def run(self, function: str | None) -> tuple[Tripwire, ...]:
        reading = self.read(self.candidate)
        if reading is None:
            return ()
        everything = function is None or not (
            function in reading.symbols
            or function in reading.bindings
            or function in reading.module_names
        )
        queue: deque[tuple[Path, str | None]] = deque([(self.candidate, None)])
        if function is not None and not everything:
            queue.append((self.candidate, function))
        seen: set[tuple[Path, str | None]] = set()
        kept: set[Tripwire] = set()
        while queue:
            item = queue.popleft()
            if item in seen:
                continue
            seen.add(item)
            module = self.read(item[0])
            if module is None:
                continue
            owner = item[1]
            if owner == _EVERY_SYMBOL:
                queue.extend((module.path, symbol) for symbol in module.symbols)
                continue
            if owner is not None and owner not in module.symbols:
                if owner in module.bindings:
                    queue.extend(self._targets(module.bindings[owner], ()))
                continue
            kept.update(wire for wire, where in module.found if where == owner)
            for dotted in module.imports[owner]:
                target = self.find(dotted)
                if target is not None:
                    queue.append((target, None))
            for chain in module.references[owner]:
                queue.extend(self._resolve(module, chain))
            if owner is None and everything:
                queue.append((module.path, _EVERY_SYMBOL))
        return tuple(sorted(kept, key=lambda t: (t.path, t.line, t.rule)))

    def read(self, path: Path) -> Reading | None:
        if path not in self.readings:
            reading = read_python(path, self)
            if isinstance(reading, str):
                self.unread[path] = reading
                self.readings[path] = None
            else:
                self.readings[path] = reading
        return self.readings[path]

    def find(self, dotted: str) -> Path | None:
        """The local file of a module name, as the worker's import would find it (the
        candidate's folder comes first on its path)."""
        if not dotted or any(not part.isidentifier() for part in dotted.split(".")):
            return None
        base = self.root.joinpath(*dotted.split("."))
        for file in (base.with_suffix(".py"), base / "__init__.py"):
            found = self.sources.locate(file)
            if found is not None:
                return found
        return None

    def dotted_name(self, path: Path) -> str:
        parts = list(path.relative_to(self.root).with_suffix("").parts)
        if parts and parts[-1] == "__init__":
            parts.pop()
        return ".".join(parts)

    def _resolve(self, module: Reading, chain: tuple[str, ...]) -> list[tuple[Path, str | None]]:
        head = chain[0]
        if head in module.symbols:
            return [(module.path, head)]
        if head in module.bindings:
            return self._targets(module.bindings[head], chain[1:])
        return []

    def _targets(
        self, binding: tuple[str, str | None], rest: tuple[str, ...]
    ) -> list[tuple[Path, str | None]]:
        dotted, symbol = binding
        if symbol is not None:
            target = self.find(dotted)
            return [] if target is None else [(target, None), (target, symbol)]
        # `import pkg.sub` then `pkg.sub.fn`: the longest prefix that is a local module.
        for size in range(len(rest), -1, -1):
            target = self.find(".".join((dotted, *rest[:size])))
            if target is not None:
                symbol = rest[size] if size < len(rest) else _EVERY_SYMBOL
                return [(target, None), (target, symbol)]
        return []
