"""The bundled examples audited end to end on this machine, as `kernelaudit demo` does."""

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from kernelaudit.cli import main
from kernelaudit.demo import find_examples, load_examples
from kernelaudit.engine.audit import audit
from kernelaudit.profiles import PROFILES

pytestmark = pytest.mark.slow
EXAMPLES = Path(__file__).parents[2] / "examples"


# The order the two test processes take them in, two at a time (see tests/conftest.py): measured
# on a 2-core CPU, the examples that train a model (rmsnorm_backward, cross_entropy_backward,
# embedding_backward) take 3-6 minutes each, the others under one, so each long one is paired
# with a short one and the two processes start on about half the work each.
_ORDER = (
    "rmsnorm_backward",
    "layernorm",
    "cross_entropy_backward",
    "softmax",
    "embedding_backward",
    "matmul",
)
FOLDERS = sorted(
    (p.parent.name for p in EXAMPLES.glob("*/expected.json")),
    key=lambda name: (_ORDER.index(name) if name in _ORDER else len(_ORDER), name),
)


@pytest.mark.long
@pytest.mark.parametrize("folder", FOLDERS)
def test_demo_passes_every_correct_example_and_fails_every_buggy_one(
    folder: str, tmp_path: Path
) -> None:
    # one example folder per test, so that the examples are audited in parallel
    shutil.copytree(EXAMPLES / folder, tmp_path / "examples" / folder)
    report = tmp_path / "demo.json"
    code = main(
        [
            "demo",
            "--profile",
            "quick",
            "--examples",
            str(tmp_path / "examples"),
            "--json",
            str(report),
        ]
    )
    examples = load_examples(find_examples(tmp_path / "examples"))
    reports = json.loads(report.read_text())["reports"]
    assert len(reports) == len(examples) >= 2
    for example, got in zip(examples, reports, strict=True):
        assert got["verdict"] == example.verdict, example.candidate
        if example.verdict == "FAIL":
            checks = {f["check"] for f in got["findings"] if f["severity"] == "fail"}
            assert set(example.checks) <= checks, (example.candidate, checks)
    assert code == 0


@pytest.mark.long
def test_low_precision_embedding_accumulation_fails_in_the_rows_zipf_makes_hot() -> None:
    problem = EXAMPLES / "embedding_backward" / "problem.py"
    candidate = f"{EXAMPLES / 'embedding_backward' / 'candidates.py'}::accumulate_in_low_precision"
    # the default profile's sweep, cut to what the comparison needs: normal values, uniform
    # and Zipf ids, the workload and a few boundary sizes, contiguous
    profile = replace(
        PROFILES["default"],
        float_distributions=("normal",),
        index_distributions=("uniform", "zipf"),
        boundary_sizes_per_axis=1,
        layouts=(),
    )
    report = audit(problem, candidate, profile=profile, checks=["numerics"])
    assert report.verdict == "FAIL"
    finding = next(f for f in report.failures if f.key.startswith("error:"))
    evidence = dict(finding.evidence)
    workload = f"@ {report.records[0].case.label} [float16]"
    by_case = evidence["cases"]
    assert by_case[f"ids~zipf {workload}"] == "failed 1 of 1"
    # with uniform ids (the defaults) at the workload's own sizes the same kernel passes
    assert by_case[f"default values {workload}"] == "failed 0 of 1"
    # the shrunk case's evidence, the worst case's (where shrinking moved away from it), others'
    worst = [evidence["worst case"]] if "worst case" in evidence else []
    shown = [evidence, *worst, *evidence["other failing cases"]]
    # on a GPU the bfloat16 cases fail too and may crowd the float16 one out of those shown
    label = report.records[0].case.label
    zipf = next(e for e in shown if str(e.get("case", "")).startswith(f"ids~zipf @ {label} "))
    median = zipf["id counts"]["median count of used ids"]
    # the error sits in the ids a Zipf draw repeats hundreds of times, not in typical ones
    assert min(row["id_count"] for row in zipf["worst rows"][:3]) > 20 * median
    assert zipf["share of squared error in the 5 worst rows"] > 0.5
