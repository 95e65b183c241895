"""The guard inside a training job, as `kernelaudit demo` shows it: the embedding gradient that
sums in fp16 is caught in its hottest rows within the first steps under AdamW; the one that
sums in fp32 behind the same guard is not."""

from __future__ import annotations

from pathlib import Path

from kernelaudit.guarding.demonstration import demonstrate

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_guard_catches_fp16_sums_in_training_and_passes_fp32_ones(device: str) -> None:
    caught, passed = demonstrate(EXAMPLES, device)
    assert caught.kernel == "accumulate_in_low_precision" and caught.met, caught.describe()
    assert caught.summary["failed"] == caught.summary["checked"] > 0
    # the failing rows are the most frequent tokens' rows
    (rows,) = caught.summary["failing_rows"].values()
    occurrences = [o for f in caught.summary["failures"] for o in f["occurrences"]]
    hottest = max(count for _, _, count in occurrences)
    assert hottest > 1000 and any(str(row) in rows for _, row, _ in occurrences)
    assert passed.kernel == "wide_accumulator" and passed.met, passed.describe()
    assert passed.summary["failed"] == 0 and passed.summary["checked"] > 0
