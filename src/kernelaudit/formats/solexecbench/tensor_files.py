"""Inputs a workload reads from `.safetensors` files (`{"type": "safetensors", "path": ...,
"tensor_key": ...}`), as FlashInfer-Bench workloads give their recorded index arrays.

A relative path is looked up where the benchmark's harness looks: under the problem's folder
or any folder above it (the harness's staging folder holds the problem and its blobs), then
under `$FLASHINFER_TRACE_DIR`. The values exist only at the sizes of the workload that names
them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

TRACE_DIR = "FLASHINFER_TRACE_DIR"


def tensor_file(folder: Path, path: str) -> Path | None:
    """Where the file a workload names lies, or None when it is nowhere it is looked for."""
    given = Path(path)
    if given.is_absolute():
        return given if given.is_file() else None
    roots = [folder, *folder.parents]
    if os.environ.get(TRACE_DIR):
        roots.append(Path(os.environ[TRACE_DIR]))
    return next((root / given for root in roots if (root / given).is_file()), None)


def file_inputs(workload: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The inputs `workload` reads from safetensors files, with their descriptors."""
    return {
        name: described
        for name, described in workload.get("inputs", {}).items()
        if isinstance(described, dict) and described.get("type") == "safetensors"
    }


def unreadable(folder: Path, workloads: list[dict[str, Any]]) -> str | None:
    """Why the safetensors inputs of `workloads` cannot be read, or None."""
    for workload in workloads:
        for name, described in file_inputs(workload).items():
            path = str(described.get("path"))
            if tensor_file(folder, path) is None:
                return (
                    f"input {name!r} (workload.jsonl line {workload['_line']}) is read from "
                    f"safetensors file {path}, found neither under {folder} or a folder above "
                    f"it nor under ${TRACE_DIR}; download the FlashInfer trace blobs there"
                )
            try:
                import safetensors.torch  # noqa: F401
            except ImportError:
                return (
                    f"input {name!r} is read from a safetensors file, and the safetensors "
                    "package is not installed; pip install safetensors"
                )
    return None


def read_inputs(folder: Path, workload: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """The tensors `workload` reads from safetensors files, by input name."""
    values = {}
    for name, described in file_inputs(workload).items():
        path = tensor_file(folder, str(described.get("path")))
        if path is None:
            raise FileNotFoundError(f"input {name!r}: safetensors file {described.get('path')}")
        tensors = _load(path)
        key = str(described.get("tensor_key", name))
        if key not in tensors:
            raise KeyError(
                f"input {name!r}: {path} holds no tensor {key!r} (it holds {', '.join(tensors)})"
            )
        values[name] = tensors[key]
    return values


@lru_cache(maxsize=8)
def _load(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path))


def workload_at(workloads: list[dict[str, Any]], sizes: Mapping[str, int]) -> dict[str, Any] | None:
    """The workload whose axis bindings `sizes` repeats, if any."""
    for workload in workloads:
        if all(sizes.get(axis, size) == size for axis, size in workload["axes"].items()):
            return workload
    return None
