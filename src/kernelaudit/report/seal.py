"""Reports sealed by the auditor: an HMAC of a report file's content under a key that only the
auditor's user can read, and that no candidate's sandbox contains. A report changed after it
was written is refused when read back with the same key; one written with another key (another
machine, another user) cannot be checked and is read as it is."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import tempfile
from pathlib import Path
from typing import Any, Literal

KEY_BYTES = 32


def key_path() -> Path:
    """$XDG_DATA_HOME/kernelaudit/report.key (or ~/.local/share/kernelaudit/report.key)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path("~/.local/share").expanduser())
    return Path(base) / "kernelaudit" / "report.key"


def _key() -> bytes:
    path = key_path()
    with contextlib.suppress(FileNotFoundError):
        return path.read_bytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # made meanwhile by another audit
        return path.read_bytes()
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(secrets.token_bytes(KEY_BYTES))
    return path.read_bytes()


def _canonical(content: Any) -> bytes:
    return json.dumps(content, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def seal(content: Any) -> dict[str, str]:
    """The seal of `content` (plain JSON values): which key made it, and the HMAC."""
    key = _key()
    return {
        "key": hashlib.sha256(key).hexdigest()[:16],
        "hmac": hmac.new(key, _canonical(content), hashlib.sha256).hexdigest(),
    }


def check(content: Any, sealed: Any) -> Literal["intact", "changed", "foreign", "unsealed"]:
    """Whether `content` is what was sealed: "intact"; "changed" after it was sealed with this
    machine's key; "foreign" (sealed with another key, so not checkable here); "unsealed"."""
    if not isinstance(sealed, dict) or not {"key", "hmac"} <= set(sealed):
        return "unsealed"
    key = _key()
    if sealed["key"] != hashlib.sha256(key).hexdigest()[:16]:
        return "foreign"
    expected = hmac.new(key, _canonical(content), hashlib.sha256).hexdigest()
    return "intact" if hmac.compare_digest(expected, str(sealed["hmac"])) else "changed"


def _created_mode() -> int:
    """The mode a file made by `open` gets here: 0o666 less the process's umask (read from
    `/proc` where it says, else set and put back)."""
    with contextlib.suppress(OSError, ValueError, StopIteration):
        with open("/proc/self/status") as status:
            line = next(line for line in status if line.startswith("Umask:"))
        return 0o666 & ~int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def write_atomically(path: Path, text: str | bytes) -> None:
    """Write `text` (or bytes) to `path` through a temporary file in the same folder, renamed
    over it: a reader sees the old file or the new one, never half of one. The file gets the
    mode a file written in place would (`mkstemp` alone makes it its owner's only)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(descriptor, _created_mode())
        with os.fdopen(descriptor, "wb" if isinstance(text, bytes) else "w") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
