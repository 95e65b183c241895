"""Defects of Triton's interpreter, in the versions installed here, that make correct kernels
fail on a CPU.

Triton's interpreter runs kernels on a CPU with NumPy. Up to Triton 3.6, a loop bounded by a
kernel argument (`for start in range(0, n, BLOCK)`) converts the argument, a one-element array,
to an int; NumPy 2.4 removed that conversion, and such a loop raises "only 0-dimensional arrays
can be converted to Python scalars" whatever the kernel computes. Triton 3.7 converts it
correctly. Torch 2.11's CUDA wheels pin Triton 3.6, so a machine that has them and no GPU
(where candidates run through the interpreter) meets this with any NumPy 2.4 or later.
"""

from __future__ import annotations

import re
from importlib import metadata

_FIXED_TRITON = (3, 7)
"""The first Triton whose interpreter converts a one-element array to an int itself."""
_STRICT_NUMPY = (2, 4)
"""The first NumPy that refuses to convert a one-element array to an int."""


def interpreter_defects() -> tuple[str, ...]:
    """What this machine's Triton interpreter gets wrong, in words a user can act on (empty:
    nothing known)."""
    triton, numpy = _version("triton"), _version("numpy")
    if triton is None or numpy is None:
        return ()
    if _release(triton) < _FIXED_TRITON and _release(numpy) >= _STRICT_NUMPY:
        return (
            f"Triton {triton}'s interpreter, which runs Triton kernels on a CPU, cannot run a "
            f"loop bounded by a kernel argument under NumPy {numpy}: such kernels raise 'only "
            "0-dimensional arrays can be converted to Python scalars' whatever they compute, and "
            "fail here. Install triton>=3.7 (or numpy<2.4) to audit Triton kernels on a CPU",
        )
    return ()


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _release(version: str) -> tuple[int, int]:
    """(major, minor) of a version string ("3.6.0" -> (3, 6); "2.4.0rc1" -> (2, 4))."""
    found = re.match(r"(\d+)\.(\d+)", version)
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)
