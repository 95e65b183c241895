"""The text of Python string literals, and of the expressions a compiler is handed, with the
file line of each character: what CUDA and C++ source inside a Python file says, and where.

Literals are decoded by the standard library: `tokenize` finds the literals an expression is
made of (implicit concatenation and comments between the parts included) and `ast` decodes
each one (prefixes, escapes, f-string fields).
"""

from __future__ import annotations

import ast
import io
import tokenize
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kernelaudit.tripwires.python_names import SOURCE_SUFFIXES
from kernelaudit.tripwires.python_source import (
    Names,
    PythonFile,
    scope_nodes,
    string,
    target_names,
)


@dataclass(frozen=True)
class Text:
    """Source text as the compiler sees it, with the file line of each character."""

    text: str
    lines: tuple[int, ...]

    def __add__(self, other: Text) -> Text:
        return Text(self.text + other.text, self.lines + other.lines)


def string_text(node: ast.Constant | ast.JoinedStr, lines: list[str]) -> Text | None:
    """The text of a string literal (implicitly concatenated parts and f-strings included,
    replacement fields as a placeholder) with each character's line in the file."""
    segment = source_segment(node, lines)
    if segment is None:
        return None
    chars: list[str] = []
    at: list[int] = []
    for piece, row in _literals(segment):
        text = _literal_text(piece, node.lineno + row - 1)
        if text is None:
            chars.clear()
            break
        chars.append(text.text)
        at.extend(text.lines)
    if chars:
        return Text("".join(chars), tuple(at))
    # Fall back on the value with every character on the literal's first line.
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return Text(node.value, (node.lineno,) * len(node.value))
    return None


def source_segment(node: ast.expr, lines: list[str]) -> str | None:
    """The source of a node (ast.get_source_segment, without splitting the file each time);
    columns are UTF-8 byte offsets."""
    first, last = node.lineno - 1, (node.end_lineno or 0) - 1
    if not 0 <= first <= last < len(lines) or node.end_col_offset is None:
        return None
    if first == last:
        return lines[first].encode()[node.col_offset : node.end_col_offset].decode(errors="replace")
    head = lines[first].encode()[node.col_offset :].decode(errors="replace")
    tail = lines[last].encode()[: node.end_col_offset].decode(errors="replace")
    return "\n".join([head, *lines[first + 1 : last], tail])


# Python 3.12 tokenizes an f-string into parts; earlier versions give one STRING token.
_FSTRING_START = getattr(tokenize, "FSTRING_START", None)
_FSTRING_END = getattr(tokenize, "FSTRING_END", None)


def _literals(segment: str) -> Iterator[tuple[str, int]]:
    """The source of each string literal in an expression's segment, with the row it starts
    on (1 for the segment's first line)."""
    # In parentheses, the parts of an implicit concatenation may sit on lines of any indent.
    wrapped = f"({segment}\n)"
    starts = [0]
    for line in wrapped.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(wrapped).readline))
    except (tokenize.TokenError, SyntaxError):
        return
    depth, opened = 0, (0, 0)
    for token in tokens:
        if token.type == tokenize.STRING and depth == 0:
            yield token.string, token.start[0]
        elif token.type == _FSTRING_START:
            depth += 1
            if depth == 1:
                opened = token.start
        elif token.type == _FSTRING_END:
            depth -= 1
            if depth == 0:
                begin = starts[opened[0] - 1] + opened[1]
                end = starts[token.end[0] - 1] + token.end[1]
                yield wrapped[begin:end], opened[0]


# Marks each physical line break inside a literal, so that one decoding tells which of the
# decoded characters sit on which line. A form feed is whitespace inside f-string fields too.
_MARKS = ("\f", *map(chr, range(0xE000, 0xE100)))


def _literal_text(source: str, first_line: int) -> Text | None:
    """The decoded text of one string literal, each character on its line in the file."""
    decoded = _decode(source)
    if decoded is None:
        return None
    formatted = isinstance(decoded, ast.JoinedStr)
    seen = "".join(_constant_parts(decoded))
    candidates = _MARKS[:1] if formatted else _MARKS
    mark = next((m for m in candidates if m not in source and m not in seen), None)
    if mark is not None and "\n" in source:
        source = source.replace("\n", "\n" + mark)
        decoded = _decode(source)
        if decoded is None:
            return None
    chars: list[str] = []
    lines: list[int] = []
    line = first_line
    for part in decoded.values if isinstance(decoded, ast.JoinedStr) else [decoded]:
        if isinstance(part, ast.FormattedValue):
            chars.append("_")
            lines.append(line)
            line = max(line, first_line + _closing_row(part, source) - 1)
            continue
        for ch in part.value:
            if ch == mark:
                line += 1
            else:
                chars.append(ch)
                lines.append(line)
    return Text("".join(chars), tuple(lines))


def _closing_row(field: ast.FormattedValue, source: str) -> int:
    """The row, within a literal's source, of the brace that closes a replacement field."""
    if (field.lineno, field.col_offset) != (1, 0):
        return field.end_lineno or 1  # Python 3.12 and later keep the field's own position
    # Earlier versions keep only its expressions': the brace is the first one after the last
    # expression, or the second when that expression sits in a field of the format spec.
    spec = field.format_spec.values if field.format_spec is not None else []
    nested = [part.value for part in spec if isinstance(part, ast.FormattedValue)]
    last = max([field.value, *nested], key=lambda e: (e.end_lineno or 0, e.end_col_offset or 0))
    braces = 1 if last is field.value else 2
    rows = source.split("\n")
    row = last.end_lineno or 1
    rest = rows[row - 1].encode()[last.end_col_offset or 0 :].decode(errors="replace")
    while braces > rest.count("}") and row < len(rows):
        braces -= rest.count("}")
        row += 1
        rest = rows[row - 1]
    return row


def _decode(source: str) -> ast.Constant | ast.JoinedStr | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes: the compiler keeps them too
            literal = ast.parse(source, mode="eval").body
    except (SyntaxError, ValueError, RecursionError):
        return None
    if isinstance(literal, ast.Constant) and isinstance(literal.value, str):
        return literal
    return literal if isinstance(literal, ast.JoinedStr) else None


def _constant_parts(literal: ast.Constant | ast.JoinedStr) -> Iterator[str]:
    if isinstance(literal, ast.Constant):
        yield literal.value
        return
    for part in literal.values:
        if isinstance(part, ast.Constant):
            yield part.value


class SourceResolver:
    """Follows the expression handed to a compiler back to the string literals (or the source
    files) it is built from: names assigned in the same function or at module level, `+`,
    lists, `.format()` and friends, `textwrap.dedent`."""

    _DEPTH = 8
    # Expressions followed per compiler argument: a file cannot make the scan blow up by
    # reassigning a name to combinations of itself.
    _BUDGET = 500

    def __init__(self, file: PythonFile, names: Names):
        self.file = file
        self.names = names
        self.budget = self._BUDGET

    def _spend(self, depth: int) -> bool:
        self.budget -= 1
        return depth <= self._DEPTH and self.budget > 0

    def texts(self, expr: ast.AST, depth: int = 0) -> list[Text]:
        if not self._spend(depth):
            return []
        if isinstance(expr, (ast.Constant, ast.JoinedStr)):
            if isinstance(expr, ast.Constant) and not isinstance(expr.value, str):
                return []
            text = string_text(expr, self.file.lines)
            return [] if text is None else [text]
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            left, right = self.texts(expr.left, depth + 1), self.texts(expr.right, depth + 1)
            if len(left) == 1 and len(right) == 1:
                return [left[0] + right[0]]
            return left + right
        if isinstance(expr, (ast.List, ast.Tuple)):
            return [text for e in expr.elts for text in self.texts(e, depth + 1)]
        if isinstance(expr, ast.Name):
            return [text for v in self._values(expr) for text in self.texts(v, depth + 1)]
        if isinstance(expr, ast.Call):
            func = expr.func
            parts: list[ast.AST] = []
            if isinstance(func, ast.Attribute) and func.attr == "join" and expr.args:
                parts.append(expr.args[0])
            elif isinstance(func, ast.Attribute) and func.attr in _TEXT_METHODS:
                parts.append(func.value)
            elif self.names.qualname(func) in _TEXT_FUNCTIONS and expr.args:
                parts.append(expr.args[0])
            return [text for part in parts for text in self.texts(part, depth + 1)]
        return []

    def files(
        self, expr: ast.AST, locate: Callable[[Path], Path | None], depth: int = 0
    ) -> list[Path]:
        """C and CUDA files named by string literals inside an expression, as `locate` finds
        them beside this file."""
        if not self._spend(depth):
            return []
        found: list[Path] = []
        for node in ast.walk(expr):
            value = string(node)
            if value is not None and Path(value).suffix in SOURCE_SUFFIXES:
                file = locate(self.file.path.parent / value)
                if file is not None:
                    found.append(file)
            elif isinstance(node, ast.Name):
                for assigned in self._values(node):
                    found.extend(self.files(assigned, locate, depth + 1))
        return found

    def _values(self, name: ast.Name) -> list[ast.AST]:
        """Values assigned to a name in its function (when local) or at module level."""
        scope = self._enclosing_function(name)
        body: list[ast.stmt] = self.file.tree.body
        if scope is not None and name.id in {
            node.id
            for node in scope_nodes(scope.body)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
        }:
            body = scope.body
        values: list[ast.AST] = []
        for node in scope_nodes(body):
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
                targets = [node.target]
            else:
                continue
            if any(n.id == name.id for t in targets for n in target_names(t)):
                values.append(node.value)
        return values

    def _enclosing_function(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        parent = self.file.parents.get(node)
        while parent is not None:
            if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return parent
            parent = self.file.parents.get(parent)
        return None


_TEXT_METHODS = frozenset(
    {"format", "format_map", "replace", "strip", "lstrip", "rstrip", "encode", "expandtabs"}
)
_TEXT_FUNCTIONS = frozenset({"textwrap.dedent", "textwrap.indent", "inspect.cleandoc", "str"})
