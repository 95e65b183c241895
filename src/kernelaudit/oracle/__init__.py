"""The oracle: fp64 truth, the native-precision baseline, error metrics and the comparison that
turns a candidate's result into a verdict (the rule: docs/oracle.md)."""

from kernelaudit.oracle.compare import Comparison, MetricResult, Mismatch, compare, is_exact
from kernelaudit.oracle.metrics import ErrorMetrics, error_metrics, row_errors
from kernelaudit.oracle.promote import promoted_to_fp64
from kernelaudit.oracle.rule import CONSTANTS, RATIO_LIMIT
from kernelaudit.oracle.truth import expected

__all__ = [
    "CONSTANTS",
    "RATIO_LIMIT",
    "Comparison",
    "ErrorMetrics",
    "MetricResult",
    "Mismatch",
    "compare",
    "error_metrics",
    "expected",
    "is_exact",
    "promoted_to_fp64",
    "row_errors",
]
