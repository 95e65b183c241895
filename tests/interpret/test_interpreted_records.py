"""What the interpreted run sends back is plain JSON from a process the candidate controls: it
is read field by field, and anything else is refused."""

from __future__ import annotations

import json

import pytest

from kernelaudit.interpret.records import Interpretation, OutOfBounds, UnreadableResult

STORE = OutOfBounds(
    call=0,
    kernel="_scale",
    argument="y_ptr",
    kind="store",
    tensor="output y",
    lanes=3,
    outside=3,
    accesses=1,
    offsets=(-1, 5, 6),
    lowest=-1,
    highest=6,
    elements=5,
    dtype="float32",
    lines=("kernels.py:12",),
    program=(0, 0, 0),
    grid=(1, 1, 1),
)


def test_a_result_survives_the_trip_through_json() -> None:
    seen = Interpretation(
        launches=(("_scale", 2),), out_of_bounds=(STORE,), calls_done=2, seconds=0.5
    )
    assert Interpretation.from_json(json.loads(json.dumps(seen.to_json()))) == seen
    assert (STORE.past_end, STORE.before_start) == (2, 1)


@pytest.mark.parametrize(
    "tamper",
    [
        lambda d: d.update(launches="many"),
        lambda d: d["out_of_bounds"][0].update(kind="exec"),
        lambda d: d["out_of_bounds"][0].update(lanes=True),
        lambda d: d["out_of_bounds"][0].update(offsets=[1, "2"]),
        lambda d: d["out_of_bounds"][0].pop("kernel"),
        lambda d: d.update(seconds=None),
    ],
)
def test_a_result_with_a_field_of_the_wrong_kind_is_refused(tamper) -> None:  # type: ignore[no-untyped-def]
    data = Interpretation(launches=(("_scale", 1),), out_of_bounds=(STORE,)).to_json()
    tamper(data)
    with pytest.raises(UnreadableResult):
        Interpretation.from_json(data)
