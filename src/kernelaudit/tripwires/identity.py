"""A tensor's identity used as a key: where, in one scope, a tensor's address, id or version
reaches a subscript, a dictionary method, a membership test, a comparison with kept state, or a
memoised call (the address-keyed-cache rule)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from kernelaudit.tripwires.python_source import Names, flow, parameters, root_name, string

IDENTITY_METHODS = frozenset({"data_ptr"})
IDENTITY_ATTRIBUTES = frozenset(
    {"_version", "_cdata", "__cuda_array_interface__", "__array_interface__"}
)
# Key builders an identity may pass through on its way to a key.
KEY_BUILDERS = frozenset({"str", "int", "hash", "tuple", "repr", "hex", "frozenset", "format"})
KEY_METHODS = frozenset(
    {"get", "setdefault", "pop", "__contains__", "__getitem__", "__setitem__", "__delitem__"}
)
MEMO_DECORATORS = frozenset({"functools.lru_cache", "functools.cache"})


class IdentityFlow:
    """Identity keys in one scope. Alignment tests (`x.data_ptr() % 16`) and kernel arguments
    are not keys.

    memoised: the module's top-level functions behind an lru_cache or cache decorator."""

    def __init__(self, names: Names, memoised: set[str], nodes: list[ast.AST]):
        self.names = names
        self.memoised = memoised
        self.nodes = nodes
        self.tainted: set[str] = set()
        flow(nodes, self.carries, self.tainted)

    def carries(self, expr: ast.AST) -> bool:
        if isinstance(expr, ast.Call):
            func = expr.func
            if isinstance(func, ast.Attribute) and func.attr in IDENTITY_METHODS:
                return True
            if isinstance(func, ast.Name) and self.names.origin(func.id) == "id":
                return True
            builds = (
                isinstance(func, ast.Name) and self.names.origin(func.id) in KEY_BUILDERS
            ) or (isinstance(func, ast.Attribute) and func.attr in ("format", "join"))
            return builds and any(
                self.carries(a) for a in (*expr.args, *(k.value for k in expr.keywords))
            )
        if isinstance(expr, ast.Attribute):
            return expr.attr in IDENTITY_ATTRIBUTES
        if isinstance(expr, ast.Name):
            return expr.id in self.tainted
        if isinstance(expr, ast.BinOp):
            if isinstance(expr.op, (ast.Mod, ast.BitAnd)):
                return False
            return self.carries(expr.left) or self.carries(expr.right)
        if isinstance(expr, ast.Subscript):
            return self.carries(expr.value)
        if isinstance(expr, ast.IfExp):
            return self.carries(expr.body) or self.carries(expr.orelse)
        if isinstance(expr, (ast.Tuple, ast.List, ast.Set, ast.JoinedStr)):
            return any(self.carries(e) for e in ast.iter_child_nodes(expr))
        if isinstance(expr, (ast.FormattedValue, ast.Starred)):
            return self.carries(expr.value)
        return False

    def key_uses(self) -> Iterator[ast.AST]:
        for node in self.nodes:
            if isinstance(node, ast.Subscript) and self.carries(node.slice):
                yield node
            elif isinstance(node, ast.Call):
                func = node.func
                arguments = [*node.args, *(k.value for k in node.keywords)]
                if isinstance(func, ast.Attribute) and func.attr in KEY_METHODS:
                    if node.args and self.carries(node.args[0]):
                        yield node
                elif (
                    isinstance(func, ast.Name)
                    and func.id in self.memoised
                    and not self.names.is_local(func.id)
                    and any(self.carries(a) for a in arguments)
                ):
                    yield node
            elif isinstance(node, ast.Compare):
                yield from self._compared(node)

    def _compared(self, node: ast.Compare) -> Iterator[ast.AST]:
        left = node.left
        for op, right in zip(node.ops, node.comparators, strict=True):
            if isinstance(op, (ast.In, ast.NotIn)) and self.carries(left):
                yield node
                return
            if isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)):
                for mine, other in ((left, right), (right, left)):
                    if self.carries(mine) and not self.carries(other) and self._kept(other):
                        yield node
                        return
            left = right

    def _kept(self, expr: ast.AST) -> bool:
        """Whether an expression reads state kept across calls: a module-level variable or an
        attribute of `self`."""
        root = root_name(expr)
        if root is None:
            return False
        if root.id == "self":
            return root is not expr
        return (
            root.id in self.names.module_names
            and root.id not in self.memoised
            and not self.names.is_local(root.id)
            and self.names.origin(root.id) is None
        )


def memoised(names: Names, tree: ast.Module) -> set[str]:
    """The module's top-level functions behind an lru_cache or cache decorator."""
    found = set()
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for decorator in node.decorator_list:
            func = decorator.func if isinstance(decorator, ast.Call) else decorator
            if names.qualname(func) in MEMO_DECORATORS:
                found.add(node.name)
    return found


def takes_tensors(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether a function declares a tensor parameter: a memoised one keys its cache on the
    tensor's identity."""
    for arg in parameters(node.args):
        annotation = arg.annotation
        if annotation is None:
            continue
        if re.search(r"\bTensor\b", string(annotation) or ast.unparse(annotation)):
            return True
    return False
