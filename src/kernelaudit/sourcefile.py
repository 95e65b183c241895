"""Importing a problem's or a candidate's file as a module: always from the file's source text.

Python's own import reads `__pycache__/<name>.cpython-XY.pyc` when its header matches the
source's size and modification time, and writes one after compiling. Whoever can write next
to a file can so run code of their choice in its place while the `.py` stays byte-identical
(its hash, its review and the static scan see nothing). Files imported here are compiled from
their text every time, and no bytecode is written for them.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import CodeType, ModuleType


class SourceOnlyLoader(importlib.machinery.SourceFileLoader):
    """A loader that compiles the file's source every time: no bytecode read or written."""

    def get_code(self, fullname: str) -> CodeType:
        source = self.get_data(self.path)
        return compile(source, self.path, "exec", dont_inherit=True)


def import_source(
    file: Path, name: str, *, folder_on_path: bool = True, stay_on_path: bool = True
) -> ModuleType:
    """Execute `file` as module `name`, registered in `sys.modules` before it runs (Triton,
    dataclasses and pickling look modules up by name) and removed again if it raises. With
    `folder_on_path`, the file's folder goes first on `sys.path` while it runs, so its sibling
    modules win over same-named packages, and stays there with `stay_on_path` (for imports its
    functions make later). Exceptions the file raises propagate."""
    path = str(file)
    loader = SourceOnlyLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    folder = str(file.parent)
    inserted = folder_on_path and (not sys.path or sys.path[0] != folder)
    if inserted:
        sys.path.insert(0, folder)
    sys.modules[name] = module
    try:
        loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        if inserted and not stay_on_path and folder in sys.path:
            sys.path.remove(folder)
    return module
