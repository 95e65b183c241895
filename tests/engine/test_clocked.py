"""The auditor's clock (`engine.clocked`): invocations timed in the auditor, alternated, a
disagreement measured again (and the call timed again by the worker) before it counts."""

from __future__ import annotations

import time

import torch

from kernelaudit.engine import clocked
from kernelaudit.engine.clocked import (
    CONFIRMING_PAIRS,
    REPEAT_BYTES,
    clock,
    copy_seconds,
    disagrees,
    repeats_for,
)
from kernelaudit.runner.boundary.messages import CallOutcome, InvocationResult, OutputSlot
from kernelaudit.timing.measure import Timing


def _cpu(reported_s: float, figure_s: float) -> bool:
    return disagrees(reported_s, figure_s, "cpu")


def _timing(median_s: float) -> Timing:
    return Timing(median_s, median_s, median_s, 3, 1, "perf_counter", 0.0, (median_s,) * 3)


class _Fake:
    """A worker on a fake clock: each invocation costs `fixed_s` plus `call_s` a call (the
    call and its repetitions), `spikes` added to the invocations of those numbers."""

    def __init__(self, fixed_s: float, call_s: float, spikes: dict[int, float] | None = None):
        self.fixed_s, self.call_s = fixed_s, call_s
        self.spikes = spikes or {}
        self.invocations = 0

    def run(self, count: int) -> tuple[float, InvocationResult]:
        seconds = self.fixed_s + (1 + count) * self.call_s + self.spikes.get(self.invocations, 0)
        self.invocations += 1
        outcome = CallOutcome(outputs=(), repeats_read=True)
        return seconds, InvocationResult(calls=(outcome,))

    def retime(self, reported_s: float | None = None) -> InvocationResult:
        """The call timed again by the worker: honestly, or at `reported_s` whatever it
        costs."""
        self.invocations += 1
        figure = self.call_s if reported_s is None else reported_s
        return InvocationResult(calls=(CallOutcome(outputs=(), timing=_timing(figure)),))


def test_fixed_costs_cancel_and_one_pair_suffices_when_the_clocks_agree() -> None:
    # the first invocation costs a second more (memory lent for the first time): not counted
    fake = _Fake(fixed_s=0.05, call_s=0.01, spikes={0: 1.0})
    found = clock(fake.run, 10, 0.01, _cpu)
    assert fake.invocations == 1 + 2
    assert abs(found.per_call_s - 0.01) < 1e-9
    assert found.read and found.unlike == ()


def test_a_busy_moment_is_measured_again_and_does_not_count() -> None:
    # the first invocation with repetitions hit a busy host: half a second more
    fake = _Fake(fixed_s=0.05, call_s=0.01, spikes={2: 0.5})
    found = clock(fake.run, 10, 0.01, _cpu)
    # one pair more settles it: the least of the two agrees
    assert fake.invocations == 1 + 4 and len(found.samples_s) == 2
    assert abs(found.per_call_s - 0.01) < 1e-9
    assert not found.disagrees("cpu")


def test_a_worker_that_reports_calls_faster_than_they_are_disagrees() -> None:
    fake = _Fake(fixed_s=0.05, call_s=0.02)
    found = clock(fake.run, 10, 1e-6, _cpu, retime=lambda: fake.retime(1e-6))
    # the call is timed again before each pair measured again, and says the same each time
    assert fake.invocations == 1 + 2 * (1 + CONFIRMING_PAIRS) + CONFIRMING_PAIRS
    assert found.reported_s == (1e-6,) * (1 + CONFIRMING_PAIRS)
    assert found.disagrees("cpu")


def test_a_host_busy_since_the_timing_probe_does_not_fail_an_honest_call() -> None:
    # the worker timed the call at 0.3 ms on a quiet host; since then the host got busy and a
    # call (one that starts threads, say) costs ten times as much, on both clocks alike
    fake = _Fake(fixed_s=0.05, call_s=3e-3)
    found = clock(fake.run, 10, 3e-4, _cpu, retime=fake.retime)
    assert len(found.samples_s) == 2 and found.reported_s == (3e-4, 3e-3)
    assert [t.median_s for t in found.retimed] == [3e-3]
    assert not found.disagrees("cpu")


def test_without_the_call_timed_again_the_first_figure_holds_every_pair() -> None:
    fake = _Fake(fixed_s=0.05, call_s=3e-3)
    found = clock(fake.run, 10, 3e-4, _cpu)
    assert found.reported_s == (3e-4,) * (1 + CONFIRMING_PAIRS) and found.disagrees("cpu")


def test_a_call_that_fails_when_timed_again_is_an_error() -> None:
    fake = _Fake(fixed_s=0.05, call_s=3e-3)
    found = clock(
        fake.run, 10, 3e-4, _cpu, retime=lambda: InvocationResult(calls=(), error="it raised")
    )
    assert found.error == "it raised"


def test_a_figure_too_fast_fails_only_as_every_pair_measured_it() -> None:
    # the base of the first pair hit a busy host: that pair's figure is far too fast
    fake = _Fake(fixed_s=0.05, call_s=0.01, spikes={1: 0.2})
    found = clock(fake.run, 10, 0.01, _cpu, too_fast=lambda most: most < 0.005)
    assert len(found.samples_s) == 2
    assert found.per_call_s < 0.005 < found.most_s


def test_a_failed_invocation_is_an_error_with_its_kind() -> None:
    def run(count: int) -> tuple[float, InvocationResult]:
        return 0.1, InvocationResult(calls=(), error="placed elsewhere", error_kind="tampered")

    found = clock(run, 4, 0.01, _cpu)
    assert found.error == "placed elsewhere" and found.kind == "tampered"


def test_repetitions_aim_at_a_tenth_of_a_second_within_their_bounds() -> None:
    slot = (OutputSlot((1024,), torch.float32),)
    assert repeats_for(1e-3, 2e-3, slot) == (100, "")
    # a worker claiming a nanosecond pays at most five seconds at the invocation's own pace
    assert repeats_for(1e-9, 0.1, slot) == (50, "")
    assert repeats_for(1.0, 2.0, slot) == (1, "")
    huge = (OutputSlot((REPEAT_BYTES // 4,), torch.float32),)
    repeats, why = repeats_for(1e-3, 2e-3, huge)
    assert repeats == 0 and "larger than the 256 MiB" in why


def test_the_auditors_own_copy_is_measured() -> None:
    assert copy_seconds((), "cpu") == 0.0
    assert 0.0 < copy_seconds((OutputSlot((1 << 20,), torch.float32),), "cpu") < 1.0


def test_without_a_warm_up_the_first_pair_is_measured_at_once() -> None:
    fake = _Fake(fixed_s=0.05, call_s=0.01)
    found = clock(fake.run, 10, 0.01, _cpu, warm_up=False)
    assert fake.invocations == 2
    assert abs(found.per_call_s - 0.01) < 1e-9


def test_a_cost_on_whichever_invocation_comes_first_fails_no_honest_call() -> None:
    # every pair's first invocation pays 30 ms more (the host busy with the auditor's own
    # reading of the last pair, say): were the base always first, every pair's figure
    # would be 0 and an honest call would look free
    fake = _Fake(fixed_s=0.05, call_s=1e-3, spikes={1: 0.03, 3: 0.03, 5: 0.03})
    found = clock(fake.run, 10, 1e-3, _cpu, too_fast=lambda most: most < 5e-4)
    # the second pair, repetitions first, settles it
    assert len(found.samples_s) == 2
    assert found.per_call_s == 0.0 and found.most_s >= 1e-3
    assert found.bases_s[1] - found.bases_s[0] < -0.02 and found.repeated_s[1] > 0.08


def test_a_call_that_is_free_when_repeated_fails_against_the_least_base() -> None:
    # repetitions that cost nothing (results kept from the call before): however the
    # bases vary, no repeated invocation comes back later than the least base plus a call
    fake = _Fake(fixed_s=0.05, call_s=0.0, spikes={1: 0.002, 4: 0.001, 5: 0.003})
    found = clock(fake.run, 100, 1e-3, _cpu, too_fast=lambda most: most < 5e-4)
    assert len(found.samples_s) == 1 + CONFIRMING_PAIRS
    assert found.most_s < 5e-4
    data = found.to_json()
    assert len(data["base_round_trips_s"]) == len(data["repeated_round_trips_s"]) == 3


def test_a_copy_is_charged_as_it_costs_between_calls_not_a_wait_for_the_device(
    monkeypatch,
) -> None:
    # a wait for the device that takes 20 ms (a busy host): the copies made back to back
    # share one wait, as the repetitions' copies do
    def slow_wait(device: torch.device) -> None:
        time.sleep(0.02)

    monkeypatch.setattr(clocked, "synchronize", slow_wait)
    seconds = copy_seconds((OutputSlot((1024,), torch.float32),), "cpu", times=2)
    assert seconds < 0.02 / clocked.COPIES + 1e-3


def test_round_trips_that_vary_more_than_the_calls_cost_leave_the_figure_unresolved() -> None:
    # an honest call of 1 ms, ten of them, on a host whose bases came back 20-30 ms late:
    # every figure is 0, and the round trips' own spread says it could be a millisecond off
    fake = _Fake(fixed_s=0.05, call_s=1e-3, spikes={1: 0.03, 4: 0.02, 5: 0.025})
    found = clock(fake.run, 10, 1e-3, _cpu, too_fast=lambda most: most < 5e-4)
    assert len(found.samples_s) == 1 + CONFIRMING_PAIRS
    assert found.most_s == 0.0
    assert abs(found.spread_s - 1e-3) < 1e-9 and found.most_s + found.spread_s >= 5e-4
    assert found.to_json()["spread_s"] == found.spread_s
    # on a quiet host a call kept from the one before is resolved far below any floor
    quiet = _Fake(fixed_s=0.05, call_s=0.0, spikes={1: 1e-4, 4: 2e-4})
    kept = clock(quiet.run, 100, 1e-3, _cpu, too_fast=lambda most: most < 5e-4)
    assert kept.most_s + kept.spread_s < 5e-4


def test_a_late_base_does_not_make_an_honest_pair_look_free() -> None:
    # calls that cost nothing measurable (kept results, say) against a floor of 0.5 ms: the
    # first repeated invocation came back 4 ms late, the bases of the next two pairs 10 ms
    # late: each pair alone says at most 0.4 ms a call, against the least base it is 0.9 ms
    fake = _Fake(fixed_s=0.05, call_s=0.0, spikes={2: 0.004, 4: 0.01, 5: 0.01, 6: 0.009})
    found = clock(fake.run, 10, 1e-3, _cpu, too_fast=lambda most: most < 5e-4)
    assert len(found.samples_s) == 1 + CONFIRMING_PAIRS
    assert max(found.net_s()) < 5e-4 <= found.most_s
    assert abs(found.most_s - 9e-4) < 1e-9


def test_a_repeated_invocation_no_later_than_a_base_settles_nothing() -> None:
    # the host made every base late by about as much: the spread is small, but a repeated
    # invocation, with ten calls more, came back before the least base
    fake = _Fake(fixed_s=0.05, call_s=1e-4, spikes={1: 0.0105, 4: 0.0102, 5: 0.0101})
    found = clock(fake.run, 10, 1e-4, _cpu, too_fast=lambda most: most < 5e-4)
    assert found.most_s == 0.0 and found.spread_s < 5e-4
    assert found.contradicted and found.settled_most_s == float("inf")
    # a steady host: the figure stands as measured, widened by its spread alone
    steady = clock(_Fake(0.05, 1e-3).run, 10, 1e-3, _cpu)
    assert not steady.contradicted and steady.settled_most_s == steady.most_s + steady.spread_s
