"""kernelaudit: audit GPU kernels against fp64 truth before they ship."""

from kernelaudit.problem.domain import Domain
from kernelaudit.problem.spec import (
    Axis,
    Contract,
    Forward,
    GeneratedInput,
    IndexInput,
    MaskInput,
    Output,
    Problem,
    Sampler,
    ScalarInput,
    TensorInput,
    Workload,
)

__all__ = [
    "Axis",
    "Contract",
    "Domain",
    "Forward",
    "GeneratedInput",
    "IndexInput",
    "MaskInput",
    "Output",
    "Problem",
    "Sampler",
    "ScalarInput",
    "TensorInput",
    "Workload",
]
__version__ = "0.1.0"
