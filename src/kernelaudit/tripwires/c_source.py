"""Reading C, C++ and CUDA source for tripwires, from the files a candidate compiles and from
the strings it hands a compiler.

The CUDA grammar of tree-sitter tells code from comments and literals (raw strings, prefixed
character literals, line splices and the bodies of macros included), finds the variables kept
between calls (mutable `__device__` and `__managed__` variables, function-local statics) and
the local headers a file includes. The patterns below then find calls and names in the code
with comments and literals blanked, and what inline assembly and paths say inside literals.
Macros are read as written, never expanded.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from kernelaudit.errors import UsageError
from kernelaudit.tripwires.rules import Tripwire, physical_lines, tripwire


def _compiled(patterns: tuple[tuple[str, str], ...]) -> tuple[tuple[str, re.Pattern[bytes]], ...]:
    return tuple((rule, re.compile(pattern.encode())) for rule, pattern in patterns)


# Calls and names, matched in the code with comments and literals blanked.
CODE_PATTERNS = _compiled(
    (
        ("timer-patching", r"\bclock(?:64)?\s*\("),
        ("streams", r"\bcu(?:da)?StreamCreate\w*\s*\("),
        ("streams", r"\bgetStreamFromPool\s*\("),
        ("streams", r"\bcudaLaunchHostFunc\s*\("),
        ("streams", r"\bcudaStreamAddCallback\s*\("),
        (
            "atomics",
            r"\batomic(?:Add|Sub|Exch|Min|Max|Inc|Dec|CAS|And|Or|Xor)(?:_block|_system)?\s*\(",
        ),
        ("threads", r"\bstd\s*::\s*(?:thread|jthread|async)\b"),
        ("threads", r"\bpthread_create\s*\("),
        ("environment", r"\b(?:secure_)?getenv\s*\("),
        (
            "process-control",
            r"(?<![\w.>:])(?:std\s*::\s*)?(?:exit|_exit|_Exit|quick_exit|abort|atexit)\s*\(",
        ),
        ("process-control", r"\bstd\s*::\s*terminate\s*\("),
        ("process-control", r"\bcudaDeviceReset\s*\("),
        ("ctypes", r"\bcudaGetSymbolAddress\s*\("),
        ("ctypes", r"\bcudaIpc(?:Open|Get)MemHandle\s*\("),
        ("ctypes", r"\bcuMemGetAddressRange\w*\s*\("),
        ("ctypes", r"\bdl(?:open|sym)\s*\("),
        ("cuda-graphs", r"\bcu(?:da)?GraphLaunch\s*\("),
        ("cuda-graphs", r"\bcu(?:da)?StreamBeginCapture\w*\s*\("),
        ("clock-trigger", r"\b(?:system|steady|high_resolution)_clock\s*::\s*now\b"),
        ("clock-trigger", r"\b(?:gettimeofday|clock_gettime|timespec_get)\s*\("),
        ("clock-trigger", r"(?<![\w.>:])(?:std\s*::\s*)?time\s*\(\s*(?:NULL|nullptr|0)?\s*\)"),
        ("process-trigger", r"\bget(?:pid|ppid|tid)\s*\("),
        ("process-trigger", r"\bpthread_self\s*\("),
        ("process-trigger", r"\bthis_thread\s*::\s*get_id\b"),
        ("file-trigger", r"\bfopen\s*\("),
        ("file-trigger", r"\bstd\s*::\s*(?:i|o)?fstream\b"),
        ("file-trigger", r"\bfilesystem\s*::\s*(?:exists|file_size|last_write_time)\b"),
    )
)
# What inline assembly and paths say, matched in the code with only comments blanked.
LITERAL_PATTERNS = _compiled(
    (
        ("timer-patching", r"%(?:globaltimer|clock)"),
        ("ctypes", r"/proc/self/mem|/dev/mem"),
    )
)

_QUERY = """
(comment) @comment
[(string_literal) (raw_string_literal) (char_literal) (system_lib_string)] @literal
(preproc_arg) @macro
(declaration) @declaration
(preproc_include path: (string_literal) @include)
"""
_KEEPING = frozenset({"__device__", "__managed__"})
_IMMUTABLE = frozenset({"const", "constexpr", "__constant__", "__shared__"})
_SPECIFIERS = frozenset({"type_qualifier", "storage_class_specifier"})
_FUNCTIONS = frozenset({"function_definition", "lambda_expression"})
# Macro bodies are parsed again as code; a body holding a `#define` goes one level deeper.
_MACRO_DEPTH = 4


@dataclass(frozen=True)
class CSource:
    """What one C, C++ or CUDA text holds for the rules: (rule, character offset) of each
    sighting, and the headers it includes by quoted name."""

    sightings: tuple[tuple[str, int], ...]
    includes: tuple[str, ...]


def read_c(text: str) -> CSource:
    """Raises UsageError when tree-sitter or its CUDA grammar is missing."""
    data = text.encode("utf-8", errors="surrogatepass")
    reading = _Reading(data)
    reading.read(data, 0, 0)
    at = _character_offsets(text, data)
    sightings = [
        (rule, at(match.start()))
        for patterns, blanked in ((CODE_PATTERNS, reading.bare), (LITERAL_PATTERNS, reading.code))
        for rule, pattern in patterns
        for match in pattern.finditer(blanked)
    ]
    sightings.extend(("module-state", at(offset)) for offset in reading.kept)
    return CSource(tuple(sightings), tuple(reading.includes))


class _Reading:
    """The blanked copies of one text and what its declarations and includes say."""

    def __init__(self, data: bytes):
        self.parser, self.query, self.cursor = _grammar()
        self.code = bytearray(data)  # comments blanked
        self.bare = bytearray(data)  # comments and literals blanked
        self.kept: list[int] = []
        self.includes: list[str] = []

    def read(self, data: bytes, base: int, depth: int) -> None:
        tree = self.parser.parse(data)
        captures: dict[str, list[Any]] = self.cursor(self.query).captures(tree.root_node)
        for node in captures.get("comment", []):
            _blank(node, base, self.code, self.bare)
        for node in captures.get("literal", []):
            _blank(node, base, self.bare)
        for node in captures.get("declaration", []):
            if _keeps_state(node):
                self.kept.append(base + node.start_byte)
        for node in captures.get("include", []):
            name = node.text.decode(errors="replace")[1:-1]
            if name:
                self.includes.append(name)
        if depth < _MACRO_DEPTH:
            for node in captures.get("macro", []):
                self.read(data[node.start_byte : node.end_byte], base + node.start_byte, depth + 1)


@cache
def _grammar() -> tuple[Any, Any, Any]:
    """The parser, the query and the query cursor's class."""
    try:
        import tree_sitter
        import tree_sitter_cuda

        language = tree_sitter.Language(tree_sitter_cuda.language())
        query = tree_sitter.Query(language, _QUERY)
        return tree_sitter.Parser(language), query, tree_sitter.QueryCursor
    except (ImportError, ValueError) as error:
        raise UsageError(
            "reading the candidate's CUDA and C++ sources needs tree-sitter and its CUDA "
            f"grammar ({error}); pip install 'tree-sitter>=0.25' 'tree-sitter-cuda>=0.21.2', "
            "or reinstall kernelaudit, which depends on both"
        ) from None


_NOT_NEWLINE = re.compile(rb"[^\n]")


def _blank(node: Any, base: int, *copies: bytearray) -> None:
    start, end = base + node.start_byte, base + node.end_byte
    spaces = _NOT_NEWLINE.sub(b" ", bytes(copies[0][start:end]))
    for copy in copies:
        copy[start:end] = spaces


def _keeps_state(declaration: Any) -> bool:
    """A variable that outlives a call: a mutable `__device__` or `__managed__` variable, or
    a mutable static inside a function or lambda (not a prototype, not a constant)."""
    words: set[str] = set()
    for child in declaration.children:
        words.add(child.type)
        if child.type in _SPECIFIERS:
            words.update(grand.type for grand in child.children)
    if words & _IMMUTABLE:
        return False
    declarators = declaration.children_by_field_name("declarator")
    if all(d.type == "function_declarator" for d in declarators):
        return False
    if words & _KEEPING:
        return True
    if "static" not in words:
        return False
    parent = declaration.parent
    while parent is not None and parent.type not in _FUNCTIONS:
        parent = parent.parent
    return parent is not None


def _character_offsets(text: str, data: bytes) -> Callable[[int], int]:
    if len(data) == len(text):
        return lambda offset: offset
    starts = [index for index, byte in enumerate(data) if byte & 0xC0 != 0x80]
    return lambda offset: bisect.bisect_right(starts, offset) - 1


class SourceFiles:
    """C, C++ and CUDA files under the candidate's folder, each read once."""

    def __init__(self, root: Path):
        self.root = root
        self.scanned: dict[Path, tuple[Tripwire, ...]] = {}
        self.unread: dict[Path, str] = {}
        """Files the scan could not read, and why."""

    def locate(self, path: Path) -> Path | None:
        """The file at `path` when it lies under the candidate's folder."""
        try:
            resolved = path.resolve()
        except (OSError, RuntimeError):
            return None
        if resolved.is_relative_to(self.root) and resolved.is_file():
            return resolved
        return None

    def scan_file(self, path: Path) -> tuple[Tripwire, ...]:
        """The tripwires of a source file and of the local headers it includes."""
        if path in self.scanned:
            return self.scanned[path]
        self.scanned[path] = ()
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as error:
            self.unread[path] = f"{type(error).__name__}: {error.strerror or error}"
            return ()
        lines = physical_lines(text)
        flat = "\n".join(lines)
        source = read_c(flat)
        found = [
            tripwire(rule, path, flat.count("\n", 0, offset) + 1, lines)
            for rule, offset in source.sightings
        ]
        found.extend(self.included(path.parent, source.includes))
        self.scanned[path] = tuple(found)
        return self.scanned[path]

    def included(self, folder: Path, includes: tuple[str, ...]) -> list[Tripwire]:
        """The tripwires of the headers, found beside `folder`, that a text includes."""
        found: list[Tripwire] = []
        for include in includes:
            file = self.locate(folder / include)
            if file is not None:
                found.extend(self.scan_file(file))
        return found
