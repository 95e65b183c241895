"""What a one-shot child left in its scratch folder is read only as a regular file within its
bound, and loaded only as tensors that hold no more than the bytes read."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import pytest
import torch

from kernelaudit.runner.auditor.results import Refused, load_plain, read_bounded


def _saved(value: object) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def test_a_regular_file_within_its_bound_is_read_whole(tmp_path: Path) -> None:
    (tmp_path / "result.pt").write_bytes(b"x" * 100)
    assert read_bounded(tmp_path / "result.pt", 100) == b"x" * 100


def test_a_file_past_its_bound_is_refused_unread(tmp_path: Path) -> None:
    (tmp_path / "result.pt").write_bytes(b"x" * 101)
    with pytest.raises(Refused) as refused:
        read_bounded(tmp_path / "result.pt", 100, "the outputs")
    assert refused.value.kind == "too-large"
    assert "held 101 bytes, more than the 100 the outputs can fill" in refused.value.why


def test_a_link_is_never_followed(tmp_path: Path) -> None:
    # a candidate's link to a file of the auditor's (its /proc/self/pagemap reads as a regular
    # file of size 0 and goes on for hundreds of GiB) is refused before anything is read
    target = tmp_path / "elsewhere"
    target.write_bytes(b"the auditor's")
    (tmp_path / "result.pt").symlink_to(target)
    with pytest.raises(Refused) as refused:
        read_bounded(tmp_path / "result.pt", 1 << 20)
    assert refused.value.kind == "bad-result"
    assert "could not be opened as a file" in refused.value.why


def test_a_pipe_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "result.pt")
    with pytest.raises(Refused) as refused:
        read_bounded(tmp_path / "result.pt", 1 << 20)
    assert (refused.value.kind, refused.value.why) == (
        "bad-result",
        "its result is not a regular file",
    )


def test_nothing_there_is_told_as_such(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_bounded(tmp_path / "result.pt", 1 << 20)


def test_plain_tensors_load_as_saved_whatever_their_dimension_order() -> None:
    rows = torch.arange(12.0).reshape(3, 4)
    loaded = load_plain(_saved({"outputs": [rows, rows.t().contiguous().t()], "n": 3}))
    assert isinstance(loaded, dict) and loaded["n"] == 3
    assert all(torch.equal(t, rows) for t in loaded["outputs"])


@pytest.mark.parametrize(
    "tensor",
    [
        torch.zeros(1).expand(1 << 20),  # a million elements over one
        torch.arange(10.0)[2:6],  # a view into more than it shows
        torch.arange(10.0)[::2],  # every other element of its storage
    ],
    ids=["repeated", "offset", "gaps"],
)
def test_a_tensor_that_does_not_own_exactly_its_bytes_is_refused(tensor: torch.Tensor) -> None:
    with pytest.raises(Refused) as refused:
        load_plain(_saved({"outputs": [tensor]}))
    assert refused.value.kind == "bad-result"
    assert "does not own exactly its bytes" in refused.value.why


def test_compressed_entries_are_refused_before_anything_is_inflated() -> None:
    saved = io.BytesIO(_saved({"outputs": [torch.zeros(1000)]}))
    packed = io.BytesIO()
    with zipfile.ZipFile(saved) as source, zipfile.ZipFile(packed, "w") as archive:
        for info in source.infolist():
            archive.writestr(info.filename, source.read(info), zipfile.ZIP_DEFLATED)
    with pytest.raises(Refused) as refused:
        load_plain(packed.getvalue())
    assert "compressed entries" in refused.value.why


def test_what_is_not_a_checkpoint_as_torch_writes_them_is_refused() -> None:
    with pytest.raises(Refused) as refused:
        load_plain(b"not a checkpoint")
    assert refused.value.kind == "bad-result"
    assert "not a checkpoint as torch writes them" in refused.value.why


class _Allocates:
    """Unpickled by the weights-only loader (`bytearray` is on its list), it would take
    `size` bytes of the reader's memory, whatever the file's size."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __reduce__(self) -> tuple:
        return (bytearray, (self.size,))


@pytest.mark.parametrize(
    "value",
    [
        {"outputs": [_Allocates(8 << 30)]},  # 8 GiB asked for by a file of a kilobyte
        {"outputs": {torch.zeros(1)}},  # a container no answer has, where no check looks
    ],
    ids=["bytearray", "set"],
)
def test_a_pickle_naming_more_than_tensors_and_containers_is_refused_unloaded(
    value: object,
) -> None:
    with pytest.raises(Refused) as refused:
        load_plain(_saved(value))
    assert refused.value.kind == "bad-result"
    assert "its result's pickle" in refused.value.why


def test_a_tensor_elsewhere_than_on_the_cpu_is_refused() -> None:
    # a meta tensor claims any size at no cost to its maker, and holds no values
    with pytest.raises(Refused) as refused:
        load_plain(_saved({"outputs": [torch.empty(1 << 30, device="meta")]}))
    assert refused.value.kind == "bad-result"


def test_honest_copies_of_odd_tensors_load() -> None:
    # what a child's `.to("cpu", copy=True)` makes of every kind of output a kernel returns
    made = [
        torch.zeros(0, 5),
        torch.tensor(3.0),
        torch.zeros(4, 1, 3).transpose(0, 2),
        torch.zeros(1).expand(6),
        torch.zeros(2, 3, 4, 5).to(memory_format=torch.channels_last),
        torch.arange(10.0)[::3],
        torch.ones(3, dtype=torch.complex64).conj(),
        torch.ones(3, dtype=torch.bool),
        torch.ones(3, dtype=torch.bfloat16),
        torch.ones(3).to(torch.float8_e4m3fn),
    ]
    copies = [t.detach().to("cpu", copy=True) for t in made]
    # the first and last calls' results may be the same objects: their storage is saved once
    loaded = load_plain(_saved({"first": copies, "last": copies}))
    assert isinstance(loaded, dict)
    for kept, copy in zip(loaded["last"], copies, strict=True):
        assert (kept.dtype, kept.shape) == (copy.dtype, copy.shape)
        a, b = (t.resolve_conj().contiguous().untyped_storage() for t in (kept, copy))
        assert bytes(a) == bytes(b)
