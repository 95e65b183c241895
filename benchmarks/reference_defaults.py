"""Which of torch's precision defaults makes a reference differ from its own truth.

For every failing finding with a case in the given reports (each a reference audited as its own
candidate, `benchmarks/solexecbench_scale.py`), the case's inputs are drawn again and the
problem's reference run at their native dtypes three times on the GPU: with torch's defaults
(what a candidate's process has), with reduced-precision GEMM reductions off, and with TF32 off
too. Each run is compared with the float64 truth by the oracle, and run twice to show whether it
is deterministic. A FAIL that disappears once a default is off is the reference relying on that
default, a real property of the reference (and of any candidate that computes as it does), not
the audit's error.

    python benchmarks/reference_defaults.py REPORT.json [REPORT.json ...] --out results.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from kernelaudit.checks.numerics import compare_expected
from kernelaudit.findings import AuditReport, Finding, read_reports
from kernelaudit.formats import read_problem
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.materialize import materialize
from kernelaudit.oracle.compare import judging_device
from kernelaudit.oracle.truth import expected, native_copy
from kernelaudit.problem.backward import backward_problem
from kernelaudit.problem.spec import Problem
from kernelaudit.runner.boundary.guard import same_bits

_SETTINGS = ("torch defaults", "no reduced-precision reductions", "and no TF32")


@contextlib.contextmanager
def _defaults(step: int) -> Iterator[None]:
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = (
        matmul.allow_fp16_reduced_precision_reduction,
        matmul.allow_bf16_reduced_precision_reduction,
        matmul.allow_tf32,
        cudnn.allow_tf32,
    )
    try:
        if step >= 1:
            matmul.allow_fp16_reduced_precision_reduction = False
            matmul.allow_bf16_reduced_precision_reduction = False
        if step >= 2:
            matmul.allow_tf32 = False
            cudnn.allow_tf32 = False
        yield
    finally:
        (
            matmul.allow_fp16_reduced_precision_reduction,
            matmul.allow_bf16_reduced_precision_reduction,
            matmul.allow_tf32,
            cudnn.allow_tf32,
        ) = saved


def _runs(problem, inputs, config, step: int, device: str) -> list[tuple[torch.Tensor, ...]]:
    results = []
    for _ in range(2):
        args = [native_copy(inputs[s.name], config.get(s.name), device) for s in problem.inputs]
        with torch.no_grad(), _defaults(step):
            out = problem.reference(*args)
        out = out if isinstance(out, (tuple, list)) else (out,)
        results.append(tuple(t.detach().cpu() for t in out))
    return results


def failing_cases(
    report_path: Path, wanted: Callable[[Finding], bool]
) -> Iterator[tuple[AuditReport, Finding, Problem, Case, dict[str, Any], dict[str, Any]]]:
    """Every failing finding with a case in the reports at `report_path` that `wanted`
    accepts, with its problem (the backward derived where the finding is the reference's
    backward's), its case, the case's inputs drawn again and its dtype configuration."""
    for report in read_reports(report_path):
        for finding in report.failures:
            if finding.probe is None or not wanted(finding):
                continue
            problem = read_problem(report.problem_path)
            if finding.check == "gradients" and problem.contract.gradients:
                problem = backward_problem(problem)  # found in the reference's backward
            case = finding.probe.case
            config = problem.dtype_configs()[case.dtype_config]
            yield report, finding, problem, case, materialize(problem, case), config


def run_over_reports(description: str, investigate: Callable[[Path, str], list[dict]]) -> None:
    """The command line both scripts share: reports in, `investigate`'s records out."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    records = []
    for path in args.reports:
        records += investigate(path, args.device)
    args.out.write_text(json.dumps(records, indent=1))


def investigate(report_path: Path, device: str) -> list[dict]:
    records = []
    cases = failing_cases(report_path, lambda f: f.check not in ("kernels", "timing"))
    for report, finding, problem, case, inputs, config in cases:
        truth = expected(problem, inputs, config, device)
        record = {
            "problem": report.problem,
            "finding": f"{finding.check}: {finding.title[:300]}",
            "case": case.to_json(),
            "runs": {},
        }
        for step, setting in enumerate(_SETTINGS):
            first, second = _runs(problem, inputs, config, step, device)
            verdicts = []
            for k, name in enumerate(truth.names[: len(first)]):
                # judged as an audit judges it: the nudged case asked for before a failure
                c = compare_expected(truth, k, first[k], judging_device(device))
                nan = int(first[k].isnan().sum()) if first[k].is_floating_point() else 0
                verdicts.append(
                    {
                        "result": name,
                        "passed": c.passed,
                        "reason": c.reason[:300],
                        "nan": nan,
                        "same in a second run": same_bits(first[k], second[k]),
                    }
                )
            record["runs"][setting] = verdicts
        records.append(record)
        print(json.dumps(record, indent=1), flush=True)
    return records


def main() -> None:
    run_over_reports(__doc__.splitlines()[0], investigate)


if __name__ == "__main__":
    main()
