"""What a person reading the HTML report sees: failing candidates first, what the verdict
covers, each finding with readable evidence, and figures where the evidence holds the data."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kernelaudit.checks.base import Probe, RunPlan
from kernelaudit.findings import AuditReport, CaseRecord, Finding
from kernelaudit.inputs.case import Case
from kernelaudit.report import html
from kernelaudit.report.case_grid import finding_grid, report_grid
from kernelaudit.report.html import page, write_html
from kernelaudit.training.envelope import DRIFT_SLACK, LOSS_SLACK

WORKLOAD = {"tokens": 4096, "vocab": 512, "hidden": 64}
NUMERICS_TITLE = (
    "grad_weight: componentwise error 0.976 is 22.5x the truth's own sensitivity 0.0434 (limit 4x)"
)


def case(values: dict[str, str] | None = None, label: str = "workload 0", **sizes: int) -> Case:
    return Case(
        sizes=tuple({**WORKLOAD, **sizes}.items()),
        values=tuple(sorted((values or {}).items())),
        label=label,
    )


def finding(
    id: str,
    check: str,
    key: str,
    severity: str,
    title: str,
    evidence: dict[str, Any],
    probe_case: Case | None = None,
) -> Finding:
    return Finding(
        id=id,
        check=check,
        key=key,
        severity=severity,  # type: ignore[arg-type]
        title=title,
        evidence=tuple(evidence.items()),
        probe=None if probe_case is None else Probe(check, probe_case, RunPlan()),
        original=probe_case,
        occurrences=1,
        probes=4,
    )


def report(
    candidate: str,
    verdict: str,
    findings: tuple[Finding, ...] = (),
    records: tuple[CaseRecord, ...] = (),
    device: str = "cpu",
) -> AuditReport:
    return AuditReport(
        problem="embedding_backward",
        problem_path="/problems/embedding_backward/problem.py",
        candidate=f"candidates.py::{candidate}",
        candidate_path="/problems/embedding_backward/candidates.py",
        candidate_function=candidate,
        profile="quick",
        device=device,
        verdict=verdict,
        findings=findings,
        records=records,
        seconds=3.5,
        isolation="bubblewrap: private file system, process ids, user and network",
        coverage=(("numerics", "ran"), ("races", "could not run here: needs a CUDA device")),
        unverified=(("races", "needs a CUDA device"),),
    )


def numerics_records() -> tuple[CaseRecord, ...]:
    """ids~zipf fails at the workload; uniform ids and a small boundary size pass."""
    return (
        CaseRecord("numerics", case({"ids": "zipf"}), ("error:grad_weight",), 0.1),
        CaseRecord("numerics", case({"ids": "uniform"}), (), 0.1),
        CaseRecord("numerics", case({"ids": "zipf"}, "boundary tokens=1", tokens=1), (), 0.1),
        CaseRecord("numerics", case(label="boundary tokens=1", tokens=1), (), 0.1),
        CaseRecord("timing", case(), ("times",), 0.1),
    )


def numerics_failure() -> Finding:
    return finding(
        "F1",
        "numerics",
        "error:grad_weight",
        "fail",
        NUMERICS_TITLE,
        {
            "result": "grad_weight",
            "worst rows": [
                {"row": 7, "error": 0.012, "id_count": 3100},
                {"row": 91, "error": 0.0006, "id_count": 4},
            ],
            "id counts": {"median count of used ids": 2.0, "max count": 3100},
            "metrics": {"componentwise": 0.976, "componentwise_error_ratio": 22.5},
        },
        case({"ids": "zipf"}),
    )


def timing_note(samples: list[float], **extra: Any) -> Finding:
    timing = {
        "median_s": sorted(samples)[len(samples) // 2],
        "p10_s": min(samples),
        "p90_s": max(samples),
        "repetitions": len(samples),
        "samples_s": samples,
    }
    return finding(
        "F2",
        "timing",
        "times",
        "note",
        "candidate 1.2 ms per call, reference 1 ms, 0.83x speed-up",
        {
            "candidate": timing,
            "reference": {**timing, "samples_s": [s * 0.8 for s in samples]},
            "roofline": {"floor_s": 0.0004, "bound": "memory"},
            **extra,
        },
        case(),
    )


def training_failure(steps: int = 40) -> Finding:
    reference = [5.0 - 0.02 * s for s in range(steps)]
    candidate = [v + 0.001 * s for s, v in enumerate(reference)]
    curve = {
        "steps": [float(s) for s in range(steps)],
        "reference": reference,
        "candidate": candidate,
        "gap": [abs(a - b) for a, b in zip(candidate, reference, strict=True)],
        "envelope": [1e-5] * steps,
    }
    return finding(
        "F3",
        "training",
        "departs:sgd:float16",
        "fail",
        "training departs from the reference under SGD in slot embedding_backward (float16)",
        {
            "conclusion": "Under SGD the candidate's training departs from the reference's.",
            "per optimizer": {
                "sgd": {"loss gap in envelopes": 4.2, "largest parameter drift in envelopes": 2.0},
                "adamw": {
                    "loss gap in envelopes": 0.1,
                    "largest parameter drift in envelopes": 1.1,
                },
            },
            "parameter drift": {
                "sgd": [{"parameter": "embedding[hot rows]", "in envelopes": 2.0}],
                "adamw": [{"parameter": "embedding[hot rows]", "in envelopes": 1.1}],
            },
            "loss curves": {"sgd": curve, "adamw": curve},
        },
    )


def section(document: str, candidate: str) -> str:
    """The part of the page about one candidate."""
    start = document.index(f"candidates.py::{candidate} on ")
    end = document.find("<h2 id=", start)
    return document[start : end if end >= 0 else len(document)]


def test_failing_candidates_come_first_whatever_the_order_given() -> None:
    passing = report("wide_accumulator", "PASS")
    failing = report("low_precision", "FAIL", (numerics_failure(),), numerics_records())
    document = page([passing, failing])
    assert document.index("candidates.py::low_precision on") < document.index(
        "candidates.py::wide_accumulator on"
    )
    summary = document[: document.index("<h2")]
    assert summary.index("low_precision") < summary.index("wide_accumulator")


def test_sections_drawn_apart_make_the_page_drawn_whole(tmp_path: Path) -> None:
    # lanes draw each report's section (its figures) as the report is made: the page they make
    # must be the page drawn at the end, links and figure ids included
    passing = report("wide_accumulator", "PASS")
    failing = report("low_precision", "FAIL", (numerics_failure(),), numerics_records())
    reports = [passing, failing]
    whole = page(reports)
    assert "href='#candidate-2'" in whole  # the failing one, listed first, keeps its position
    assert 'id="candidate-2-F1-cases-case-grid"' in whole
    apart = [html.section(r, k) for k, r in enumerate(reports)]
    assert page(reports, apart) == whole
    # a section not drawn apart is drawn with the page
    assert page(reports, [apart[0], None]) == whole
    path = tmp_path / "report.html"
    write_html(reports, path, apart)
    assert path.read_text() == whole


def test_the_verdict_says_what_it_does_not_cover() -> None:
    document = page([report("wide_accumulator", "PASS")])
    assert "What this verdict does not cover" in document
    assert re.search(r"<td>races</td><td>could not run here</td><td>needs a CUDA device", document)
    assert "Isolation: bubblewrap" in document


def test_a_risk_this_device_cannot_show_is_said_beside_the_verdict() -> None:
    atomics = finding(
        "F1",
        "tripwires",
        "atomics:/problems/embedding_backward/candidates.py:45",
        "note",
        "atomics at candidates.py:45: tl.atomic_add( (only a run on a GPU can confirm or rule "
        "out what it risks)",
        {"rule": "atomics"},
    )
    seen = replace(
        report("wide_accumulator", "PASS", (atomics,)),
        unverified=(
            ("races", "needs a CUDA device"),
            (
                "tripwires",
                "atomics at candidates.py:45: only a run on a GPU can confirm or rule out",
            ),
        ),
        unconfirmed=("tripwires",),
    )
    document = page([seen])
    said = "PASS</span> <span class='muted'>(unconfirmed on cpu: tripwires)</span>"
    assert document.count(said) == 2  # the summary's row and the candidate's heading
    # a check this device cannot run at all is what the verdict does not cover, not a risk seen
    assert "unconfirmed" not in page([report("wide_accumulator", "PASS")])


def test_records_give_a_heatmap_of_cases_by_distribution_and_size(tmp_path: Path) -> None:
    failing = report("low_precision", "FAIL", (numerics_failure(),), numerics_records())
    grid = report_grid(failing)
    assert grid is not None
    row, column = grid.distributions.index("ids~zipf"), grid.sizes.index("workload 0")
    assert grid.failed[row][column] == 1 and grid.ran[row][column] == 1
    assert grid.error_ratios[row][column] == 22.5  # the ratio the failure's title states
    uniform = grid.distributions.index("ids~uniform")
    assert grid.failed[uniform][column] == 0 and grid.ran[uniform][column] == 1
    # the timing note's "times" is not a failure: the workload's default-valued case passed
    assert grid.failed[grid.distributions.index("default values")][column] == 0
    assert grid.sizes == ("boundary tokens=1", "workload 0")  # fewest elements first

    path = tmp_path / "report.html"
    write_html([failing], path)
    document = path.read_text()
    assert "<svg" in document
    assert re.search(r'id="candidate-1-cases-case-grid"', document)
    assert re.search(r'id="candidate-1-F1-cases-case-grid"', document)
    assert "×22.5" in document


def test_no_heatmap_without_records() -> None:
    assert report_grid(report("wide_accumulator", "PASS")) is None
    assert "case-grid" not in page([report("wide_accumulator", "PASS")])


def test_a_finding_whose_cases_fill_one_cell_gets_no_heatmap_of_its_own() -> None:
    records = (CaseRecord("numerics", case({"ids": "zipf"}), ("error:grad_weight",), 0.1),)
    failing = report("low_precision", "FAIL", (numerics_failure(),), records)
    assert finding_grid(failing, failing.findings[0]) is None


def test_rows_are_plotted_against_their_ids_count() -> None:
    from kernelaudit.report.plots.rows import row_figure, row_plot

    plot = row_plot(numerics_failure())
    assert plot is not None
    (points,) = plot.series
    assert points.rows == (7, 91) and points.counts == (3100, 4)
    assert plot.median_count == 2.0
    axes = row_figure(plot).axes[0]
    assert axes.get_xscale() == "log"
    assert [line.get_xdata()[0] for line in axes.get_lines()] == [2.0]  # the median count
    failing = report("low_precision", "FAIL", (numerics_failure(),), numerics_records())
    assert "candidate-1-F1-rows-median-count" in page([failing])


def test_the_training_plot_shows_both_losses_and_each_limit() -> None:
    from kernelaudit.report.plots.training import departure_figure, loss_figure

    evidence = dict(training_failure().evidence)
    curve = evidence["loss curves"]["sgd"]
    loss, gap = loss_figure("sgd", curve).axes
    lines = {line.get_label(): line for line in loss.get_lines()}
    assert list(lines) == ["reference", "candidate"]
    assert list(lines["reference"].get_ydata()) == curve["reference"]
    assert list(lines["candidate"].get_ydata()) == curve["candidate"]
    # told apart where they coincide: another style, another marker, markers between the other's
    assert lines["reference"].get_linestyle() != lines["candidate"].get_linestyle()
    assert lines["reference"].get_marker() != lines["candidate"].get_marker()
    assert lines["reference"].get_markevery() != lines["candidate"].get_markevery()
    assert loss.get_xlabel() == "step" and loss.get_ylabel() == "loss"
    assert len(loss.get_yticks()) > 2
    assert gap.get_yscale() == "log"

    limits, drift = departure_figure(evidence["per optimizer"], evidence["parameter drift"]).axes
    assert [line.get_ydata()[0] for line in limits.get_lines()] == [LOSS_SLACK]
    assert [line.get_xdata()[0] for line in drift.get_lines()] == [DRIFT_SLACK]
    assert [bar.get_height() for bar in limits.patches] == [4.2, 0.1]
    assert sorted(bar.get_width() for bar in drift.patches) == [1.1, 2.0]

    document = page([report("low_precision", "FAIL", (training_failure(),))])
    for drawn in ("loss-reference", "loss-candidate", "loss-envelope", "loss-limit"):
        assert re.search(
            rf'id="candidate-1-F3-sgd-{drawn}"|id="candidate-1-F3-departure-{drawn}"', document
        ), drawn
    assert 'id="candidate-1-F3-departure-drift-limit"' in document
    assert 'id="candidate-1-F3-departure-drift-sgd-embedding-hot-rows-"' in document
    assert "Under SGD the candidate" in document


def test_a_loss_the_run_was_too_short_to_judge_is_drawn_as_not_judged() -> None:
    from matplotlib.colors import to_hex

    from kernelaudit.report.plots import LIMIT_COLOUR, NEUTRAL_COLOUR
    from kernelaudit.report.plots.training import departure_figure

    per_optimizer = {
        "sgd": {"loss gap in envelopes": 6.2, "loss judged": False},
        "adamw": {"loss gap in envelopes": 4.0, "loss judged": True},
    }
    limits, _ = departure_figure(per_optimizer, {}).axes
    colours = [to_hex(bar.get_facecolor()) for bar in limits.patches]
    assert colours == [to_hex(NEUTRAL_COLOUR), to_hex(LIMIT_COLOUR)]
    labels = [text.get_text() for text in limits.texts]
    assert labels == ["6.20 (not judged)", "4.00"]


def test_timing_samples_are_summarised_not_dumped() -> None:
    samples = [0.0012 + k * 1.37e-7 for k in range(200)]
    on_a_gpu = report("wide_accumulator", "PASS", (timing_note(samples),), device="cuda:0")
    document = page([on_a_gpu])
    assert "200 samples: median" in document
    assert "min 1.2 ms" in document
    for sample in samples[1::20]:
        assert repr(sample) not in document and f"{sample:.6g}" not in document
    assert 'id="candidate-1-F2-timing-roofline-floor"' in document
    assert 'id="candidate-1-F2-timing-candidate-median"' in document
    assert 'id="candidate-1-F2-timing-reference-median"' in document
    # a CPU's times (Triton through its interpreter) are listed, not plotted
    on_a_cpu = page([report("wide_accumulator", "PASS", (timing_note(samples),))])
    assert "200 samples: median" in on_a_cpu and "timing-roofline-floor" not in on_a_cpu


def test_a_passing_candidates_notes_are_never_called_failing_cases() -> None:
    others = [{"case": "default values @ boundary tokens=1 [float16]", "title": "timed"}]
    note = timing_note([0.001, 0.0011, 0.0012], **{"other failing cases": others})
    document = page(
        [
            report("wide_accumulator", "PASS", (note,)),
            report("low_precision", "FAIL", (numerics_failure(),), numerics_records()),
        ]
    )
    passing = section(document, "wide_accumulator")
    assert "failing case" not in passing.lower()
    assert "other cases flagged" in passing
    assert "case: <code>tokens=4096 vocab=512 hidden=64 | seed=0</code>" in passing
    assert "smallest failing case" in section(document, "low_precision")


def test_an_unwritten_region_is_drawn_inside_the_output() -> None:
    from kernelaudit.report.plots.region import region_of

    unwritten = finding(
        "F1",
        "unwritten",
        "unwritten:c",
        "fail",
        "'c': 256 of 65792 elements are never written",
        {
            "elements": 256,
            "of": 65792,
            "first indices": [[256, 0], [256, 1]],
            "dim 0 indices": "256..256 (1 of 257)",
            "dim 1 indices": "0..255 (256 of 256)",
        },
        case(label="boundary m=257"),
    )
    region = region_of(dict(unwritten.evidence))
    assert region is not None
    assert region.extent == (257, 256) and region.spans == ((256, 256, 1), (0, 255, 256))
    document = page([report("drops_partial_tiles", "FAIL", (unwritten,))])
    assert 'id="candidate-1-F1-region-failing-region"' in document


def test_the_page_fetches_nothing_and_needs_no_script() -> None:
    document = page(
        [
            report("low_precision", "FAIL", (numerics_failure(), training_failure())),
            report("wide_accumulator", "PASS", (timing_note([0.001, 0.002, 0.003]),)),
        ]
    )
    assert "http://" not in document and "https://" not in document
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*//""", document)
    assert "<script" not in document and "<link" not in document and "@import" not in document
    ids = re.findall(r"""\bid=["']([^"']+)""", document)
    assert len(ids) == len(set(ids))  # figures never point at one another's markers or clips


@pytest.mark.slow
def test_a_real_audit_reads_as_a_user_expects(tmp_path: Path) -> None:
    from kernelaudit.engine.audit import audit

    tests = Path(__file__).parents[1]
    problem = tests / "problem" / "fixtures" / "good.py"
    candidates = tests / "cli" / "fixtures" / "candidates.py"
    reports = [
        audit(problem, f"{candidates}::{name}", "quick", "cpu", ["execution", "numerics", "timing"])
        for name in ("scale", "scale_in_half")
    ]
    assert [r.verdict for r in reports] == ["PASS", "FAIL"]
    path = tmp_path / "report.html"
    write_html(reports, path)
    document = path.read_text()
    assert document.index("::scale_in_half on") < document.index("::scale on")
    assert 'id="candidate-1-cases-case-grid"' in document
    # the passing candidate's page: its own figures, and its CPU times listed, not plotted
    assert 'id="candidate-2-cases-case-grid"' in document
    assert "samples: median" in section(document, "scale")
    assert "timing-candidate-median" not in document
    assert "failing case" not in section(document, "scale").lower()


def test_every_row_binned_by_its_ids_count_is_drawn_behind_the_worst_rows() -> None:
    from kernelaudit.report.plots.rows import row_figure, row_plot

    binned = [
        {"ids occurring": "1", "rows": 900, "median error": 1e-5, "max error": 4e-5},
        {"ids occurring": "2-3", "rows": 300, "median error": 2e-5, "max error": 9e-5},
        {"ids occurring": "2048-4095", "rows": 1, "median error": 0.012, "max error": 0.012},
    ]
    base = numerics_failure()
    failure = replace(base, evidence=(*base.evidence, ("error by id count", binned)))
    plot = row_plot(failure)
    assert plot is not None and [b.largest for b in plot.bins] == [4e-5, 9e-5, 0.012]
    axes = row_figure(plot).axes[0]
    largest = next(line for line in axes.get_lines() if line.get_gid() == "bins-largest")
    assert list(largest.get_ydata()) == [4e-5, 9e-5, 0.012]
    assert axes.get_yscale() == "log"  # errors spanning three orders of magnitude


def test_the_plan_says_which_of_the_cases_left_untried_every_audit_runs() -> None:
    budget = (
        ("budget_s", 30.0),
        ("planned_s", 290.0),
        ("probes_planned", 13),
        ("probes_untried", 50),
        ("probes_required_untried", 41),
        ("probes_sharing_a_run", 2),
    )
    cut = replace(report("wide_accumulator", "PASS"), budget=budget)
    text = " ".join(page([cut]).split())
    assert "9 optional probes left untried, and 41 of the probes every audit runs;" in text
    within = replace(cut, budget=(*budget[:4], ("probes_sharing_a_run", 2)))
    text = " ".join(page([within]).split())
    assert "50 optional probes left untried; 2 judged on another probe's run" in text
