"""The least work of a problem, where a time sits against the roofline floor, and the measured
roofline with its caches."""

from __future__ import annotations

import json
import math
import pickle

import pytest
import torch

from kernelaudit.errors import UsageError
from kernelaudit.timing import peaks
from kernelaudit.timing.peaks import measure_roofline
from kernelaudit.timing.roofline import (
    FLOOR_SLACK,
    Roofline,
    derived_bytes,
    derived_flops,
    position,
)

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

MADE_UP = Roofline(
    device="a made-up device",
    bandwidth_bytes_per_s=1e12,
    flops_per_s={"float32": 1e13, "tf32": 1e14, "bfloat16": 1e15},
    method="made up for the test",
)


def test_bytes_count_each_distinct_element_once():
    a = torch.empty(10, 20)
    b = torch.empty(20, dtype=torch.float16)
    broadcast = torch.empty(1, 7, dtype=torch.float64).expand(1000, 7)
    assert derived_bytes([a, b]) == 10 * 20 * 4 + 20 * 2
    assert derived_bytes([a, a, 3, "not a tensor"]) == 10 * 20 * 4
    assert derived_bytes([broadcast]) == 7 * 8
    assert derived_bytes([a.t()]) == 10 * 20 * 4
    assert derived_bytes([torch.empty(0, 5)]) == 0


def test_a_matmul_counts_two_flops_per_multiply_add():
    a, b = torch.randn(64, 32), torch.randn(32, 16)
    assert derived_flops(torch.matmul, [a, b]) == 2 * 64 * 32 * 16


def test_elementwise_work_counts_no_flops():
    x = torch.randn(100)
    assert derived_flops(lambda t: torch.relu(t) + 1, [x]) is None


def test_a_memory_bound_time_at_half_the_roofline():
    place = position(2e-3, 10**9, 10**9, torch.bfloat16, MADE_UP)
    assert (place.memory_floor_s, place.compute_floor_s) == (pytest.approx(1e-3), 1e-6)
    assert place.floor_s == pytest.approx(1e-3)
    assert place.fraction == pytest.approx(0.5)
    assert (place.bound, place.beats_floor) == ("memory", False)
    assert "50% of the roofline" in place.text and "memory-bound" in place.text


def test_a_compute_bound_time_at_the_roofline():
    place = position(10e-3, 10**13, 10**6, torch.bfloat16, MADE_UP)
    assert place.floor_s == pytest.approx(10e-3)
    assert (place.fraction, place.bound) == (pytest.approx(1.0), "compute")
    assert "10 TFLOP at 1 PFLOP/s bfloat16" in place.text


def test_a_time_under_half_the_floor_beats_it():
    assert position(0.6e-3, None, 10**9, torch.float16, MADE_UP).beats_floor is False
    place = position(0.4e-3, None, 10**9, torch.float16, MADE_UP)
    assert place.beats_floor is True
    assert place.fraction == pytest.approx(2.5)
    assert "cached" in place.text
    assert position(0.8e-3, None, 10**9, torch.float16, MADE_UP, slack=0.9).beats_floor


def test_float32_is_judged_against_tf32_before_it_is_called_impossible():
    tf32_speed = position(0.2, 10**13, 0, torch.float32, MADE_UP)
    assert tf32_speed.floor_s == pytest.approx(1.0)
    assert tf32_speed.beats_floor is False
    assert "only the tf32 rate explains" in tf32_speed.text
    impossible = position(0.01, 10**13, 0, torch.float32, MADE_UP)
    assert impossible.beats_floor is True
    assert "tf32" in impossible.text


def test_a_dtype_without_a_measured_rate_is_judged_on_bytes_alone():
    place = position(1e-3, 10**12, 10**9, torch.int8, MADE_UP)
    assert place.compute_floor_s == 0.0
    assert place.floor_s == pytest.approx(1e-3)
    assert "no measured int8 rate" in place.text


def test_a_zero_time_beats_any_floor_and_stays_valid_json():
    place = position(0.0, None, 10**6, torch.float16, MADE_UP)
    assert place.beats_floor is True and math.isinf(place.fraction)
    assert json.loads(json.dumps(place.to_json(), allow_nan=False))["fraction"] is None


def test_work_a_warm_cache_can_hold_has_no_memory_floor():
    cpu_like = Roofline("a made-up CPU", 1e10, {"float32": 1e11}, "made up", warm_cache_bytes=2**20)
    in_cache = position(1e-9, None, 2**19, torch.float32, cpu_like)
    assert (in_cache.memory_floor_s, in_cache.beats_floor) == (0.0, False)
    beyond = position(1e-6, None, 2**20 + 10**7, torch.float32, cpu_like)
    assert beyond.memory_floor_s == pytest.approx(1e-3)
    assert beyond.beats_floor is True


def test_a_busy_host_does_not_lower_the_measured_peak(monkeypatch):
    """The peak is the fastest sample: samples slowed by other work on the host leave it
    unchanged, so a quiet candidate is never judged against a floor measured while busy."""
    quiet = [1e-3] * 5
    busy = [1e-3, 4e-3, 5e-3, 3e-3, 6e-3]
    measured = []
    for samples in (quiet, busy):
        timing = peaks.Timing(
            median_s=sorted(samples)[2],
            p10_s=min(samples),
            p90_s=max(samples),
            repetitions=len(samples),
            warmup=0,
            method="made up",
            overhead_s=0.0,
            samples_s=tuple(samples),
        )
        monkeypatch.setattr(peaks, "time_calls", lambda *a, _t=timing, **k: _t)
        measured.append(peaks._measure(torch.device("cpu"), "CPU"))
    quiet_peak, busy_peak = measured
    assert quiet_peak.bandwidth_bytes_per_s == busy_peak.bandwidth_bytes_per_s
    # but how steady each was is kept: the busy samples' median is four times their fastest,
    # so a time below that floor is not one to fail on
    assert quiet_peak.spread["bandwidth"] == 1.0 and busy_peak.spread["bandwidth"] == 4.0
    assert set(busy_peak.spread) == {"bandwidth", *busy_peak.flops_per_s}
    below = position(1e-9, None, 2**30, torch.float32, busy_peak)
    assert (below.beats_floor, below.below_unsteady) == (False, True)
    assert "median 4.00x its fastest sample" in below.text
    assert position(1e-9, None, 2**30, torch.float32, quiet_peak).beats_floor


def test_bad_arguments_are_refused():
    with pytest.raises(UsageError, match="negative"):
        position(-1.0, None, 10, torch.float16, MADE_UP)
    with pytest.raises(UsageError, match="slack"):
        position(1.0, None, 10, torch.float16, MADE_UP, slack=2.0)
    assert 0 < FLOOR_SLACK <= 1


def test_the_cpu_roofline_is_measured_labelled_and_kept_on_disk(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(peaks, "_MEASURED", {})
    measured = measure_roofline("cpu")
    assert measured.device.startswith("CPU")
    assert measured.bandwidth_bytes_per_s > 0
    assert set(measured.flops_per_s) == {"float32", "float64", "bfloat16", "float16"}
    assert all(rate > 0 for rate in measured.flops_per_s.values())
    assert "CPU measurement" in measured.method
    assert measured.warm_cache_bytes >= 2**15, "a CPU's caches stay warm between timed calls"
    assert measure_roofline("cpu") is measured
    (saved,) = (tmp_path / "kernelaudit").glob("roofline-*.json")
    assert json.loads(saved.read_text())["roofline"]["device"] == measured.device
    assert pickle.loads(pickle.dumps(measured)) == measured
    assert Roofline.from_json(json.loads(json.dumps(measured.to_json()))) == measured


def _fake_measurement(monkeypatch, rate: float) -> list[int]:
    runs = []

    def fake(device: torch.device, name: str) -> Roofline:
        runs.append(1)
        return Roofline(name, rate, {"float32": rate}, "fake measurement")

    monkeypatch.setattr(peaks, "_measure", fake)
    monkeypatch.setattr(peaks, "_MEASURED", {})
    return runs


def test_a_new_process_reads_the_roofline_from_disk(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    runs = _fake_measurement(monkeypatch, 5.0)
    first = measure_roofline("cpu")
    monkeypatch.setattr(peaks, "_MEASURED", {})
    again = measure_roofline("cpu")
    assert len(runs) == 1
    assert again.bandwidth_bytes_per_s == first.bandwidth_bytes_per_s == 5.0
    assert "read from" in again.method


def test_a_cached_roofline_changed_by_anyone_but_the_auditor_is_measured_over(
    monkeypatch, tmp_path
):
    """A candidate that lowered the cached peak would lower the floor its forged times are
    held to: a file whose seal does not hold is never read."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    runs = _fake_measurement(monkeypatch, 5.0)
    measure_roofline("cpu")
    (saved,) = (tmp_path / "kernelaudit").glob("roofline-*.json")
    document = json.loads(saved.read_text())
    document["roofline"]["bandwidth_bytes_per_s"] = 1.0
    saved.write_text(json.dumps(document))
    monkeypatch.setattr(peaks, "_MEASURED", {})
    assert measure_roofline("cpu").bandwidth_bytes_per_s == 5.0
    assert len(runs) == 2
    del document["seal"]
    saved.write_text(json.dumps(document))
    monkeypatch.setattr(peaks, "_MEASURED", {})
    assert measure_roofline("cpu").bandwidth_bytes_per_s == 5.0
    assert len(runs) == 3


def test_refresh_and_disk_cache_off_bypass_the_caches(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    runs = _fake_measurement(monkeypatch, 5.0)
    measure_roofline("cpu", disk_cache=False)
    assert not (tmp_path / "kernelaudit").exists()
    measure_roofline("cpu")
    assert len(runs) == 1
    measure_roofline("cpu", refresh=True)
    assert len(runs) == 2
    assert len(list((tmp_path / "kernelaudit").glob("roofline-*.json"))) == 1


def test_a_corrupt_cache_file_is_measured_over(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    runs = _fake_measurement(monkeypatch, 5.0)
    measure_roofline("cpu")
    (saved,) = (tmp_path / "kernelaudit").glob("roofline-*.json")
    saved.write_text('{"format": "kernelaudit-roofline/1", "roofline": ')
    monkeypatch.setattr(peaks, "_MEASURED", {})
    assert measure_roofline("cpu").bandwidth_bytes_per_s == 5.0
    assert len(runs) == 2


@pytest.mark.gpu
@needs_cuda
def test_the_cuda_roofline_is_plausible_and_leaves_tf32_as_it_was():
    before = torch.get_float32_matmul_precision()
    measured = measure_roofline("cuda", refresh=True, disk_cache=False)
    assert torch.get_float32_matmul_precision() == before
    assert 1e11 < measured.bandwidth_bytes_per_s < 2e13
    rates = measured.flops_per_s
    assert rates["bfloat16"] > rates["float32"] and rates["float16"] > rates["float32"]
    if torch.cuda.get_device_capability() >= (8, 0):
        assert rates["tf32"] > rates["float32"]


def test_a_peak_is_never_a_time_of_zero_when_the_protocols_cost_was_measured_too_high():
    """A protocol cost measured while other work shared the device can exceed every sample:
    the peak then keeps that cost in, rather than claiming an infinite rate."""
    from kernelaudit.timing.measure import Timing

    wiped = Timing(0.0, 0.0, 0.0, 3, 1, "made up", overhead_s=2e-3, samples_s=(0.0, 0.0, 0.0))
    assert peaks._fastest(wiped) == 2e-3
    kept = Timing(1e-3, 1e-3, 1e-3, 2, 1, "made up", overhead_s=1e-5, samples_s=(1e-3, 2e-3))
    assert peaks._fastest(kept) == 1e-3


def test_an_unsteady_gpu_roofline_is_measured_again_and_never_kept_on_disk(monkeypatch, tmp_path):
    """A device kept busy while its roofline is measured (by a candidate's own process, say)
    gives a floor that fails nothing; kept on disk, it would spare every later candidate on
    this machine the floor. It is measured again, the steadiest used, and none written."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(peaks, "as_device", torch.device)  # no GPU needed here
    monkeypatch.setattr(peaks, "device_name", lambda device: "a made-up GPU")
    monkeypatch.setattr(peaks, "_MEASURED", {})
    spreads = iter([3.0, 2.0, 2.5, 1.02])

    def busy(device: torch.device, name: str) -> Roofline:
        spread = next(spreads)
        return Roofline(name, 1e12, {"float32": 1e14}, "made up", spread={"bandwidth": spread})

    monkeypatch.setattr(peaks, "_measure", busy)
    measured = measure_roofline("cuda")
    assert measured.spread == {"bandwidth": 2.0}  # the steadiest of three
    assert not list((tmp_path / "kernelaudit").glob("roofline-*.json"))
    # the next process measures again; steady now, it is kept
    monkeypatch.setattr(peaks, "_MEASURED", {})
    assert measure_roofline("cuda").spread == {"bandwidth": 1.02}
    assert len(list((tmp_path / "kernelaudit").glob("roofline-*.json"))) == 1
