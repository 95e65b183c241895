"""Each case's truth and baseline, copied to the host with the device's copy kept beside it.

A case's results are made on the GPU and copied to the host, where the case is kept for every
check that runs it again (`engine.executor`); the device tensor each host copy was made from is
held beside it (`device_copies.DEVICE_COPIES`), so a comparison on that device takes it
instead of copying the host's again.
"""

from __future__ import annotations

import torch

from kernelaudit.device_copies import DEVICE_COPIES
from kernelaudit.host_copies import host_copy


def copied_to_host(value: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A host copy of the device tensor `value` at `dtype`, the device's own copy at that
    dtype held beside it (`DEVICE_COPIES`); on the host, just a copy."""
    if value.device.type == "cpu":
        return value.detach().to(dtype=dtype, copy=True)
    try:
        # a copy of its own, whatever `value` is: the reference may write into what it
        # returned again (a buffer it keeps), and a view would hold all it is a view of;
        # contiguous, so that a large one comes to the host through the staging buffers
        # (`host_copies`) rather than page by page
        on_device = value.detach().to(dtype=dtype, copy=True, memory_format=torch.contiguous_format)
    except torch.cuda.OutOfMemoryError:
        DEVICE_COPIES.clear()
        torch.cuda.empty_cache()
        return value.detach().to("cpu", dtype, copy=True)
    host = host_copy(on_device)
    DEVICE_COPIES.hold(host, on_device)
    return host
