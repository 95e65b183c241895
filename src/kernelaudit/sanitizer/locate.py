"""Finding the compute-sanitizer executable, which is often installed but not on PATH."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

EXECUTABLE = "compute-sanitizer"

TOOLKITS = ("/usr/local/cuda",)
"""Where a CUDA toolkit is installed when no variable says so."""


@dataclass(frozen=True)
class Located:
    """Where compute-sanitizer is ("" when nowhere) and every place that was looked in."""

    path: str
    searched: tuple[str, ...]

    @property
    def found(self) -> bool:
        return bool(self.path)


def locate(
    environ: Mapping[str, str] | None = None, toolkits: tuple[str, ...] = TOOLKITS
) -> Located:
    """compute-sanitizer on PATH, else under $CUDA_HOME (or $CUDA_PATH), a toolkit in
    `toolkits`, or the toolkit nvcc belongs to: in `bin/` or in its own `compute-sanitizer/`
    folder. `environ` stands for os.environ."""
    env = os.environ if environ is None else environ
    searched = ["PATH"]
    on_path = shutil.which(EXECUTABLE, path=env.get("PATH", ""))
    if on_path:
        return Located(on_path, tuple(searched))
    roots = [env[name] for name in ("CUDA_HOME", "CUDA_PATH") if env.get(name)]
    roots += toolkits
    nvcc = shutil.which("nvcc", path=env.get("PATH", ""))
    if nvcc:
        roots.append(str(Path(nvcc).resolve().parent.parent))
    for root in dict.fromkeys(roots):
        for candidate in (Path(root) / "bin" / EXECUTABLE, Path(root) / EXECUTABLE / EXECUTABLE):
            searched.append(str(candidate))
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return Located(str(candidate), tuple(searched))
    return Located("", tuple(searched))
