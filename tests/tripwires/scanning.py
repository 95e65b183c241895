"""What the tripwire tests share: a candidate written from a snippet, and the (rule, line) pairs
a user sees, lines named by a piece of their text."""

from __future__ import annotations

import textwrap
from pathlib import Path

from kernelaudit.tripwires import Tripwire


def write(folder: Path, source: str, name: str = "candidate.py") -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source).lstrip("\n"))
    return path


def line(path: Path, needle: str) -> int:
    """The 1-based line of the only line of `path` containing `needle`."""
    found = [n for n, text in enumerate(path.read_text().splitlines(), 1) if needle in text]
    assert len(found) == 1, f"{needle!r} is on lines {found}"
    return found[0]


def found(tripwires: tuple[Tripwire, ...]) -> set[tuple[str, int]]:
    return {(t.rule, t.line) for t in tripwires}


def expect(path: Path, *pairs: tuple[str, str]) -> set[tuple[str, int]]:
    return {(rule, line(path, needle)) for rule, needle in pairs}
