"""Where readers keep the files they generate (a benchmark's reference written out as a module,
a solution's sources, a shim the worker imports): stable across runs, so a report's paths stay
valid for `kernelaudit repro`."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def cache_root() -> Path:
    """`$KERNELAUDIT_CACHE`, else ~/.cache/kernelaudit."""
    return Path(os.environ.get("KERNELAUDIT_CACHE", Path.home() / ".cache" / "kernelaudit"))


def cache_folder(kind: str, *keys: str | bytes) -> Path:
    """A folder under the cache (`cache_root`) named by a digest of `keys`, so the same inputs
    always land in the same place and changed ones never reuse stale files."""
    root = cache_root()
    digest = hashlib.sha256()
    for key in keys:
        digest.update(key if isinstance(key, bytes) else key.encode())
        digest.update(b"\0")
    folder = root / kind / digest.hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def write_if_changed(path: Path, text: str) -> Path:
    """Write `text` unless the file already holds it (a worker may be importing it)."""
    if not path.is_file() or path.read_text() != text:
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        temporary.write_text(text)
        temporary.replace(path)
    return path
