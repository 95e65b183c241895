"""Candidates that are right only while the audit's harness runs them, or only for as many
calls as an audit makes: the unwatched run (a user's program calling them many times) fails
them, and a correct candidate passes it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kernelaudit.engine.audit import audit
from kernelaudit.problem.load import load_problem
from kernelaudit.profiles import PROFILES, Profile

FIXTURES = Path(__file__).parent / "fixtures"


def _audit(candidate: str, checks: list[str], device: str = "cpu", profile: Profile | None = None):
    problem = load_problem(FIXTURES / "problem" / "double.py")
    spec = f"{FIXTURES / 'candidates' / candidate}.py::double"
    return audit(problem, spec, profile or PROFILES["quick"], device, checks)


@pytest.mark.parametrize("candidate", ["knows_its_harness", "wrong_after_many_calls"])
def test_right_only_while_watched_fails_the_unwatched_run(candidate: str, device: str) -> None:
    report = _audit(candidate, ["numerics", "unwatched"], device)
    # inside the worker it is right: the numerics cases pass
    assert not [f for f in report.failures if f.check == "numerics"]
    (failure,) = [f for f in report.failures if f.check == "unwatched"]
    assert report.verdict == "FAIL"
    assert "as a user's program calls it" in failure.title
    assert "the last call" in failure.title or "the first call" in failure.title


def test_a_correct_candidate_matches_unwatched() -> None:
    report = _audit("plants_files", ["unwatched"])
    assert report.verdict == "PASS"
    notes = [f for f in report.findings if f.check == "unwatched"]
    assert notes and "match the truth" in notes[0].title


def test_a_result_file_the_candidate_rewrote_is_refused_unread() -> None:
    report = _audit("forges_its_plain_result", ["unwatched"])
    (failure,) = [f for f in report.failures if f.check == "unwatched"]
    assert failure.key == "unwatched-bad-result"
    assert "not a checkpoint as torch writes them" in failure.title


def test_a_result_the_candidate_replaced_with_a_link_is_refused_unfollowed() -> None:
    # followed, the link would be the auditor's own file (its memory map, say)
    report = _audit("links_its_plain_result", ["unwatched"])
    (failure,) = [f for f in report.failures if f.check == "unwatched"]
    assert failure.key == "unwatched-bad-result"
    assert "could not be opened as a file" in failure.title


def test_the_plain_runs_processes_are_held_to_the_host_memory_limit() -> None:
    # the worker's processes are held to the profile's limit; the plain run's are too
    profile = replace(PROFILES["quick"], host_memory_bytes=3 << 29)
    report = _audit("hoards_memory", ["unwatched"], profile=profile)
    (failure,) = [f for f in report.failures if f.check == "unwatched"]
    assert failure.key == "unwatched-host-memory"
    assert "GiB of host memory, more than the limit of 1.50 GiB" in failure.title


def test_a_flag_hidden_from_the_worker_is_read_in_the_plain_process(device: str) -> None:
    checks = ["numerics", "global-state", "unwatched"]
    report = _audit("hides_its_precision_flag", checks, device)
    # the worker's own look at the state is rebound: it sees nothing
    assert not [f for f in report.failures if f.check == "global-state"]
    plain = {f.key: f for f in report.failures if f.check == "unwatched"}
    failure = plain["unwatched-state:torch.get_float32_matmul_precision()"]
    assert "'highest' -> 'medium'" in failure.title


def test_a_replaced_function_hidden_from_the_worker_is_seen_in_the_plain_process(
    device: str,
) -> None:
    checks = ["numerics", "global-state", "unwatched"]
    report = _audit("hides_its_replaced_compare", checks, device)
    assert not [f for f in report.failures if f.check == "global-state"]
    plain = {f.key: f for f in report.failures if f.check == "unwatched"}
    failure = plain["unwatched-state:torch.allclose"]
    assert failure.title.endswith("allclose -> hides_its_replaced_compare._close")


def test_a_flag_the_worker_saw_too_is_one_finding(device: str) -> None:
    from kernelaudit.report.causes import follow_ons

    checks = ["numerics", "global-state", "unwatched"]
    report = _audit("changes_its_precision_flag", checks, device)
    plain = [f for f in report.failures if f.check == "unwatched"]
    assert plain
    for finding in plain:
        (cause, said) = follow_ons(report)[finding.id]
        assert cause.check == "global-state" and "same change" in said


def test_results_filled_late_and_hidden_from_the_worker_fail_in_the_plain_process(
    device: str,
) -> None:
    report = _audit("fills_late_and_hides_it", ["deferred-work", "unwatched"], device)
    # the worker's own comparison is rebound: no deferred work is reported
    assert not [f for f in report.failures if f.check == "deferred-work"]
    plain = [f for f in report.failures if f.check == "unwatched"]
    assert plain and "as a user's program calls it" in plain[0].title


def test_the_plain_runs_inputs_are_let_go_while_it_runs_and_made_again_to_judge_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import time
    import weakref

    import torch

    from kernelaudit.checks import unwatched
    from kernelaudit.plain import run as plain

    # no share of the host to keep them in: the inputs are written for the plain process,
    # let go while it runs (a mixture of experts' 21 GiB of weights once sat beside every
    # case of the audit), and made again for the judgement
    monkeypatch.setattr(unwatched, "cache_bytes", lambda: 0)
    made: list[list[weakref.ref[torch.Tensor]]] = []
    materialize = unwatched.materialize

    def materialize_watched(problem, case):  # type: ignore[no-untyped-def]
        inputs = materialize(problem, case)
        made.append([weakref.ref(v) for v in inputs.values() if isinstance(v, torch.Tensor)])
        return inputs

    monkeypatch.setattr(unwatched, "materialize", materialize_watched)
    alive_while_running = []
    run_python = plain.run_python

    def run_watched(*args, **kwargs):  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + 5  # the planning thread lets its own go meanwhile
        while any(ref() is not None for ref in made[0]) and time.monotonic() < deadline:
            time.sleep(0.01)
        alive_while_running.append(any(ref() is not None for ref in made[0]))
        return run_python(*args, **kwargs)

    monkeypatch.setattr(plain, "run_python", run_watched)
    report = _audit("plants_files", ["unwatched"])
    assert report.verdict == "PASS"
    notes = [f for f in report.findings if f.check == "unwatched"]
    assert notes and "match the truth" in notes[0].title
    assert alive_while_running == [False]
    assert len(made) == 2  # made again for the judgement
