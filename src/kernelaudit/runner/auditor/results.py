"""Reading the result a one-shot child left in its scratch folder.

The unwatched run, the large-tensor run and the interpreted bounds run answer in a file of a
folder the candidate's process can write. Whatever is at that path may be the candidate's:
a file larger than any honest answer, a link to a file of the auditor's (its own
`/proc/self/pagemap` reads as a regular file of size 0 and goes on for hundreds of GiB), a
pipe that never ends, a checkpoint whose compressed entries inflate past its size, or tensors
rebuilt with strides that make a few bytes look like billions of elements. `read_bounded`
reads the bytes of a regular file only, through no link, at most a bound the auditor set from
what it asked for; `load_plain` loads tensors from them only where every one owns exactly the
bytes the file holds for it. Anything else is refused (`Refused`), and costs the auditor no
more than the bound.
"""

from __future__ import annotations

import io
import os
import stat
import zipfile

import torch


class Refused(Exception):
    """A result that is not read: `kind` is "too-large" (more bytes than it may hold) or
    "bad-result" (not a regular file, a link, or contents no honest child writes)."""

    def __init__(self, kind: str, why: str) -> None:
        super().__init__(why)
        self.kind = kind
        self.why = why


def read_bounded(
    path: str | os.PathLike[str], most_bytes: int, filling: str = "an answer"
) -> bytes:
    """The bytes of the regular file at `path`, opened through no link and never waited on,
    at most `most_bytes` of them, the most `filling` can fill (`Refused` past that, or for
    anything but a regular file; `FileNotFoundError` where there is nothing)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as error:
        if isinstance(error, FileNotFoundError):
            raise
        raise Refused("bad-result", f"its result could not be opened as a file ({error})") from None
    with os.fdopen(fd, "rb") as file:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise Refused("bad-result", "its result is not a regular file")
        if status.st_size > most_bytes:
            raise Refused(
                "too-large",
                f"its result file held {status.st_size:,} bytes, more than the {most_bytes:,} "
                f"{filling} can fill; it was not read",
            )
        data = file.read(most_bytes + 1)  # a file still growing is read no further
    if len(data) > most_bytes:
        raise Refused(
            "too-large",
            f"its result file grew past the {most_bytes:,} bytes {filling} can fill while it "
            "was read; it was not read further",
        )
    return data


def load_plain(data: bytes) -> object:
    """`torch.load(weights_only=True)` of `data`, refused (`Refused`, "bad-result") unless
    every entry of the checkpoint is stored uncompressed and every tensor in it is a plain
    tensor that covers exactly its own storage from its start: then the tensors together hold
    no more than the bytes read."""
    buffer = io.BytesIO(data)
    if zipfile.is_zipfile(buffer):
        try:
            with zipfile.ZipFile(buffer) as archive:
                packed = [i for i in archive.infolist() if i.compress_type != zipfile.ZIP_STORED]
        except (zipfile.BadZipFile, ValueError) as error:
            raise Refused("bad-result", f"its result could not be read ({error})") from None
        if packed:
            raise Refused("bad-result", "its result holds compressed entries; torch writes none")
        buffer.seek(0)
    try:
        loaded = torch.load(buffer, weights_only=True)
    except Exception as error:
        raise Refused(
            "bad-result", f"its result could not be read ({type(error).__name__}: {error})"
        ) from None
    for tensor in _tensors(loaded):
        covered = tensor.numel() * tensor.element_size()
        if (
            type(tensor) is not torch.Tensor
            or tensor.storage_offset() != 0
            or tensor.untyped_storage().nbytes() != covered
            or (tensor.numel() > 1 and not _dense(tensor))
        ):
            raise Refused(
                "bad-result",
                f"its result holds a tensor of shape {tuple(tensor.shape)} that does not own "
                "exactly its bytes (a view, or strides that repeat them)",
            )
    return loaded


def _tensors(value: object, depth: int = 0) -> list[torch.Tensor]:
    if depth > 8:
        raise Refused("bad-result", "its result nests deeper than any answer does")
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item, depth + 1)]
    return []


def _dense(tensor: torch.Tensor) -> bool:
    """Whether the tensor's elements lie at distinct places filling its storage without a gap
    (contiguous in some order of its dimensions)."""
    dims = sorted((s, n) for s, n in zip(tensor.stride(), tensor.shape, strict=True) if n != 1)
    expected = 1
    for step, size in dims:
        if step != expected:
            return False
        expected *= size
    return True
