"""Unit tests for hasten.routing.gate: an upstream's in-flight cap, without any I/O."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hasten.routing.gate import InFlightGate, Slot, UpstreamGates


def test_a_full_gate_refuses_and_counts_the_refusal() -> None:
    gate = InFlightGate(2)
    first, second = gate.try_acquire(), gate.try_acquire()
    assert first is not None and second is not None
    assert gate.is_full and gate.try_acquire() is None
    assert gate.snapshot() == {"in_flight": 2, "max_in_flight": 2, "busy_refusals": 1}
    first.release()
    third = gate.try_acquire()
    assert third is not None and gate.num_in_flight == 2 and gate.num_refused == 1


def test_a_slot_is_given_back_once_however_many_exits_release_it() -> None:
    gate = InFlightGate(1)
    slot = gate.try_acquire()
    assert slot is not None and slot.is_held
    slot.release()
    slot.release()  # a closed response closed again, say
    assert not slot.is_held and gate.num_in_flight == 0
    assert gate.try_acquire() is not None and gate.num_in_flight == 1


def test_no_cap_still_counts() -> None:
    gate = InFlightGate()
    slots = [gate.try_acquire() for _ in range(1000)]
    assert all(slot is not None for slot in slots) and not gate.is_full
    assert gate.num_in_flight == 1000 and gate.num_refused == 0
    with pytest.raises(ValueError, match="max_in_flight"):
        InFlightGate(-1)


def test_one_gate_per_upstream_name_whatever_asks_for_it() -> None:
    gates = UpstreamGates()
    local = gates.gate("local", 3)
    assert gates.gate("local", 3) is local  # every route that uses it shares one count
    assert gates.gate("cloud", 0) is not local
    assert [name for name, _ in gates.items()] == ["cloud", "local"]
    assert gates.snapshot()["local"] == {"in_flight": 0, "max_in_flight": 3, "busy_refusals": 0}


# Each step: acquire, or release the held slot at an index (a repeat release included).
_STEPS = st.lists(st.one_of(st.just("acquire"), st.integers(min_value=0, max_value=40)))


@given(max_in_flight=st.integers(min_value=0, max_value=5), steps=_STEPS)
def test_never_above_the_cap_and_always_back_to_zero(
    max_in_flight: int, steps: list[object]
) -> None:
    gate = InFlightGate(max_in_flight)
    taken: list[Slot] = []
    num_refused = 0
    for step in steps:
        if step == "acquire":
            slot = gate.try_acquire()
            if slot is None:
                num_refused += 1
                # Refused only at the cap, never below it.
                assert max_in_flight > 0 and gate.num_in_flight == max_in_flight
            else:
                taken.append(slot)
        elif taken:
            assert isinstance(step, int)
            taken[step % len(taken)].release()
        held = sum(slot.is_held for slot in taken)
        assert gate.num_in_flight == held
        assert max_in_flight == 0 or held <= max_in_flight
    assert gate.num_refused == num_refused
    for slot in taken:
        slot.release()
    assert gate.num_in_flight == 0
