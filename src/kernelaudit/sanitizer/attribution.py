"""Whose kernel a report is in: the candidate's own, or a library's.

A candidate built on cuBLAS, cuDNN or torch's own operators runs their kernels too, and
compute-sanitizer reports what it sees in them (cuBLAS reading its workspace before writing
it, say). Such a report is not the candidate's bug: it is blamed on the candidate only when its
kernel is neither a library kernel by name nor one the reference launches as well on the same
case. Everything else the sanitized process ran was launched by the candidate, so a kernel of
its own never escapes the blame by being missing from a profile.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from kernelaudit.sanitizer.report import Report

_LIBRARY_NAMES = re.compile(
    r"cublas|cutlass|cudnn|nccl|xmma|nvjet|cusparse|cufft|curand|cusolver|pytorch_flash|fmha"
    r"|(?<![\w])(?:at|c10|cub|thrust|at_cuda_detail|flashinfer)::"
    r"|^(?:void )?(?:sm\d+|ampere|hopper|volta|turing|blackwell)_\w*(?:gemm|conv|mma)"
    r"|(?<![\w])(?:gemv2[nt]_kernel|gemvnsp_kernel|gemmsn_\w+|gemmk1_kernel|splitkreduce_kernel"
    r"|regular_fft|vector_fft)",
    re.IGNORECASE,
)
"""Names that only library kernels have: cuBLAS and cuBLASLt (cutlass, xmma, nvjet, gemv2T,
splitKreduce), cuDNN, NCCL, cuFFT, cuRAND, cuSPARSE, cuSOLVER, torch's own (at::, c10::, CUB
and thrust as torch instantiates them, its flash and memory-efficient attention)."""

_GROUPS = re.compile(r"<[^<>()\[\]]*>|\([^<>()\[\]]*\)|\[[^<>()\[\]]*\]")
_IDENTIFIER = re.compile(r"[A-Za-z_$][\w$]*")


def kernel_base(name: str) -> str:
    """The kernel's own identifier, without return type, namespaces, template arguments or
    parameters: "void at::native::elementwise_kernel<128, 4, ...>(int, T3)" gives
    "elementwise_kernel". The profiler and the sanitizer print the same kernel with different
    spacing and qualification; both give the same base."""
    stripped = name
    while True:
        shorter = _GROUPS.sub("", stripped)
        if shorter == stripped:
            break
        stripped = shorter
    words = stripped.split()
    last = words[-1] if words else stripped
    identifiers = _IDENTIFIER.findall(last.split("::")[-1]) or _IDENTIFIER.findall(last)
    return identifiers[-1] if identifiers else name.strip()


def is_library_kernel(name: str) -> bool:
    return bool(_LIBRARY_NAMES.search(name))


@dataclass(frozen=True)
class Attribution:
    """Reports split by whose they are.

    candidate: in kernels of the candidate's own.
    library: in library kernels, or in kernels the reference launches too.
    outside: in no kernel (a CUDA API error, a leak, a warning of the tool's).
    """

    candidate: tuple[Report, ...]
    library: tuple[Report, ...]
    outside: tuple[Report, ...]


def attribute(reports: Iterable[Report], reference_kernels: Collection[str]) -> Attribution:
    """Split `reports` by whose kernel each is in; `reference_kernels` are the names of the
    kernels the reference launches on the same cases (as the profiler lists them)."""
    shared = {kernel_base(name) for name in reference_kernels}
    candidate: list[Report] = []
    library: list[Report] = []
    outside: list[Report] = []
    for report in reports:
        if not report.kernel:
            outside.append(report)
        elif is_library_kernel(report.kernel) or kernel_base(report.kernel) in shared:
            library.append(report)
        else:
            candidate.append(report)
    return Attribution(tuple(candidate), tuple(library), tuple(outside))
