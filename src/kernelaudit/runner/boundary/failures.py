"""How a failed call is told: its kind (a CUDA error, memory, an exception) and its text, the
traceback without the harness's own frames. Used by every process that calls a candidate."""

from __future__ import annotations

import os
import traceback
from pathlib import Path

import torch

from kernelaudit.timing.measure import synchronize

_HARNESS_DIR = str(Path(__file__).resolve().parents[1]) + os.sep
"""The runner's folder: frames of the harness on either side of the boundary."""
_MESSAGE_CHARS = 6000

NOT_RUN = "not-run"
"""The kind of a `CandidateFailure` that is none: a forced autotuner configuration that the
autotuner does not offer for the call, or that this device cannot compile."""


class CandidateFailure(Exception):
    """The candidate failed to run a call; `kind` is an `InvocationResult.error_kind`."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def classify(error: BaseException, device: torch.device) -> CandidateFailure:
    """Kind "cuda" when the device context can no longer be trusted, "memory" when an
    allocation failed (the limit, or the machine), else "exception"."""
    if isinstance(error, (MemoryError, torch.OutOfMemoryError)):
        return CandidateFailure("memory", describe(error))
    if device.type != "cpu" and (names_device_error(error) or not device_usable(device)):
        return CandidateFailure("cuda", describe(error))
    return CandidateFailure("exception", describe(error))


def describe(error: BaseException) -> str:
    """The exception's type, message and traceback, without the harness's own frames."""
    frames = [
        f
        for f in traceback.extract_tb(error.__traceback__)
        if not f.filename.startswith(_HARNESS_DIR) and not f.filename.startswith("<frozen ")
    ]
    lines = ["Traceback (most recent call last):\n"] if frames else []
    lines += traceback.format_list(frames)
    lines += traceback.format_exception_only(type(error), error)
    cause = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    if cause is not None:
        lines.append("raised while handling: ")
        lines += traceback.format_exception_only(type(cause), cause)
    text = "".join(lines).rstrip()
    return text if len(text) <= _MESSAGE_CHARS else "...\n" + text[-_MESSAGE_CHARS:]


def names_device_error(error: BaseException) -> bool:
    accelerator_error = getattr(torch, "AcceleratorError", None)
    if accelerator_error is not None and isinstance(error, accelerator_error):
        return True
    text = str(error)
    return "CUDA error" in text or "Triton Error [CUDA]" in text


def device_usable(device: torch.device) -> bool:
    try:
        synchronize(device)
    except Exception:
        return False
    return True
