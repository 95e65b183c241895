"""Reading the result a one-shot child left in its scratch folder.

The unwatched run, the large-tensor run and the interpreted bounds run answer in a file of a
folder the candidate's process can write. Whatever is at that path may be the candidate's:
a file larger than any honest answer, a link to a file of the auditor's (its own
`/proc/self/pagemap` reads as a regular file of size 0 and goes on for hundreds of GiB), a
pipe that never ends, a checkpoint whose compressed entries inflate past its size, a pickle
asking the weights-only loader for a `bytearray` of any size, or tensors rebuilt with strides
that make a few bytes look like billions of elements. `read_bounded` reads the bytes of a
regular file only, through no link, at most a bound the auditor set from what it asked for;
`load_plain` screens the checkpoint before loading it (a zip as torch writes it, a pickle of
containers, numbers, strings and tensors), and keeps what it loaded only where every tensor
owns exactly the bytes the file holds for it. Anything else is refused (`Refused`), and costs
the auditor no more than the bound.
"""

from __future__ import annotations

import io
import os
import pickletools
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
    path: str | os.PathLike[str],
    most_bytes: int,
    filling: str = "an answer",
    what: str = "its result",
) -> bytes:
    """The bytes of the regular file at `path`, opened through no link and never waited on,
    at most `most_bytes` of them, the most `filling` can fill (`Refused` past that, or for
    anything but a regular file; `FileNotFoundError` where there is nothing). `what` names the
    file in the reasons ("its result", "its log")."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as error:
        if isinstance(error, FileNotFoundError):
            raise
        raise Refused("bad-result", f"{what} could not be opened as a file ({error})") from None
    with os.fdopen(fd, "rb") as file:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise Refused("bad-result", f"{what} is not a regular file")
        if status.st_size > most_bytes:
            raise Refused(
                "too-large",
                f"{what} file held {status.st_size:,} bytes, more than the {most_bytes:,} "
                f"{filling} can fill; it was not read",
            )
        data = file.read(most_bytes + 1)  # a file still growing is read no further
    if len(data) > most_bytes:
        raise Refused(
            "too-large",
            f"{what} file grew past the {most_bytes:,} bytes {filling} can fill while it "
            "was read; it was not read further",
        )
    return data


def load_plain(data: bytes) -> object:
    """`torch.load(weights_only=True)` of `data`, refused (`Refused`, "bad-result") unless it
    is a zip checkpoint as `torch.save` writes it: every entry stored uncompressed where its
    central directory says, a pickle of containers, numbers, strings and tensors alone (no
    other callable: the weights-only loader also builds `bytearray`s of any size a few bytes
    ask for), and every tensor a plain tensor on the CPU that covers exactly its own storage
    from its start. The tensors together then hold no more than the bytes read."""
    _screen_archive(data)
    try:
        loaded = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as error:
        raise Refused(
            "bad-result", f"its result could not be read ({type(error).__name__}: {error})"
        ) from None
    tensors = _tensors(loaded)
    try:
        owned = all(_owns_its_bytes(tensor) for tensor in tensors)
    except Exception as error:  # a tensor of a kind whose storage cannot even be asked for
        why = f"its result holds a tensor torch never saves plain ({error})"
        raise Refused("bad-result", why) from None
    if not owned:
        raise Refused(
            "bad-result",
            "its result holds a tensor that does not own exactly its bytes (a view, a tensor "
            "elsewhere than on the CPU, or strides that repeat them)",
        )
    return loaded


_GLOBALS = {
    "collections OrderedDict",
    "torch._utils _rebuild_tensor_v2",
    "torch._utils _rebuild_tensor_v3",
    "torch.storage UntypedStorage",
}
"""What a checkpoint of plain tensors names besides torch's storage classes and dtypes."""

_OPCODES = frozenset(
    [
        "PROTO",
        "STOP",
        "MARK",
        "POP",
        "POP_MARK",
        "DUP",
        "EMPTY_DICT",
        "EMPTY_LIST",
        "EMPTY_TUPLE",
        "TUPLE",
        "TUPLE1",
        "TUPLE2",
        "TUPLE3",
        "DICT",
        "LIST",
        "APPEND",
        "APPENDS",
        "SETITEM",
        "SETITEMS",
        "BINPUT",
        "LONG_BINPUT",
        "BINGET",
        "LONG_BINGET",
        "GLOBAL",
        "REDUCE",
        "BINPERSID",
        "NONE",
        "NEWTRUE",
        "NEWFALSE",
        "BININT",
        "BININT1",
        "BININT2",
        "LONG1",
        "BINFLOAT",
        "BINUNICODE",
        "SHORT_BINUNICODE",
    ]
)
"""The pickle operations a protocol-2 pickle of containers, numbers, strings and tensors uses
(`torch.save`'s protocol); `GLOBAL` only for `_GLOBALS`, storages and dtypes."""


def _screen_archive(data: bytes) -> None:
    """`Refused` unless `data` is a zip archive as `torch.save` writes it, its pickle screened
    (`_screen`)."""
    buffer = io.BytesIO(data)
    if not zipfile.is_zipfile(buffer):
        raise Refused("bad-result", "its result is not a checkpoint as torch writes them")
    try:
        with zipfile.ZipFile(buffer) as archive:
            entries = archive.infolist()
            stated = _stated_directory(data)
            if stated is not None and stated != archive.start_dir:
                raise Refused("bad-result", "its result's zip directory lies elsewhere than stated")
            if any(
                i.compress_type != zipfile.ZIP_STORED or i.file_size != i.compress_size
                for i in entries
            ):
                raise Refused(
                    "bad-result", "its result holds compressed entries (torch writes none)"
                )
            pickles = [i for i in entries if i.filename.endswith("/data.pkl")]
            if len(pickles) != 1:
                raise Refused("bad-result", "its result holds no single pickle as torch writes")
            _screen(archive.read(pickles[0]))
    except (zipfile.BadZipFile, ValueError, EOFError, KeyError) as error:
        raise Refused("bad-result", f"its result could not be read ({error})") from None


def _stated_directory(data: bytes) -> int | None:
    """Where the end-of-archive record says the central directory starts (None where it
    defers to a zip64 record)."""
    end = data.rfind(b"PK\x05\x06")
    if end < 0 or end + 20 > len(data):
        raise Refused("bad-result", "its result has no end-of-archive record")
    offset = int.from_bytes(data[end + 16 : end + 20], "little")
    return None if offset == 0xFFFFFFFF else offset


def _screen(pickled: bytes) -> None:
    """`Refused` unless the pickle uses only `_OPCODES` and names only `_GLOBALS`, torch's
    storage classes and its dtypes."""
    for opcode, argument, _ in pickletools.genops(pickled):
        if opcode.name not in _OPCODES:
            raise Refused("bad-result", f"its result's pickle uses {opcode.name}")
        if opcode.name == "GLOBAL" and not _allowed(str(argument)):
            raise Refused("bad-result", f"its result's pickle names {argument}")


def _allowed(name: str) -> bool:
    if name in _GLOBALS:
        return True
    module, _, attribute = name.partition(" ")
    if module != "torch":
        return False
    found = getattr(torch, attribute, None)
    return isinstance(found, torch.dtype) or (
        attribute.endswith("Storage") and isinstance(found, type)
    )


def _owns_its_bytes(tensor: torch.Tensor) -> bool:
    return (
        type(tensor) is torch.Tensor
        and tensor.device.type == "cpu"
        and tensor.layout == torch.strided
        and tensor.storage_offset() == 0
        and tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size()
        and (tensor.numel() <= 1 or _dense(tensor))
    )


def _tensors(value: object, depth: int = 0) -> list[torch.Tensor]:
    """Every tensor in `value`'s dicts, lists and tuples (`Refused` past eight levels)."""
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
