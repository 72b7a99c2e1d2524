"""``forget_events``: a controller can drop the part of its event log a runtime has written to a
file and counted, and then holds a bounded log; numbering, the protocol's state and every later
event are as if it had kept them; a part of the log is never handed out as the log.
"""

from __future__ import annotations

import gc
import random
import tracemalloc

import pytest

from reserve_occupy import Config, EventsForgotten, StalenessController, apply, replay


def _steady(c: StalenessController, units: int, seed: int = 0, each_batch=None) -> None:
    """Admit as much as allowed, finish a random unit in flight, consume/publish whenever a
    batch is READY, until ``units`` units finished; ``each_batch(c)`` after every publish."""
    rng = random.Random(seed)
    in_flight: list[int] = []
    next_id = done = 0
    while done < units:
        while c.reserve(next_id) is not None:
            in_flight.append(next_id)
            next_id += 1
        if c.phase.value == "IDLE" and c.consume() is not None:
            c.publish()
            if each_batch is not None:
                each_batch(c)
            continue
        i = rng.randrange(len(in_flight))
        in_flight[i], in_flight[-1] = in_flight[-1], in_flight[i]
        c.occupy(in_flight.pop())
        done += 1


CFG = Config(batch_size=4, max_staleness=1, max_concurrency=10)


def test_forgetting_keeps_numbering_state_and_every_later_event():
    kept, forgetful = StalenessController(CFG), StalenessController(CFG)
    _steady(kept, 40)
    _steady(forgetful, 40, each_batch=lambda c: c.forget_events(c.event_count - 3))
    assert forgetful.snapshot() == kept.snapshot()
    assert forgetful.event_count == kept.event_count
    first = forgetful.first_event
    assert 0 < first < kept.event_count - 3
    assert forgetful.events_since(first) == kept.events[first:]
    assert forgetful.last_event == kept.events[-1]
    # the full log (the runtime's file) still replays to the same state
    assert replay(CFG, kept.events).snapshot() == forgetful.snapshot()
    # apply on a controller that forgets as it goes: every event re-made, numbered on
    again = StalenessController(CFG)
    for event in kept.events:
        assert apply(again, event) == event
        again.forget_events(again.event_count - 1)
    assert again.snapshot() == kept.snapshot() and again.first_event == kept.event_count - 1
    assert forgetful.clone().first_event == first


def test_a_part_of_the_log_is_never_handed_out_as_the_log():
    c = StalenessController(CFG)
    _steady(c, 12)
    count = c.event_count
    c.forget_events(5)
    with pytest.raises(EventsForgotten, match="events 0..4 were forgotten") as info:
        c.events  # noqa: B018
    assert info.value.first == 5 and isinstance(info.value, LookupError)
    with pytest.raises(EventsForgotten):
        c.events_since(4)
    assert [e.seq for e in c.events_since(5)] == list(range(5, count))
    c.forget_events(count)  # everything: nothing held, numbering goes on
    assert c.events_since(count) == () and c.event_count == count


@pytest.mark.parametrize("bad", [-1, 4, 10_000, True, 3.0, "5", None])
def test_a_bad_argument_is_a_value_error_and_drops_nothing(bad):
    c = StalenessController(CFG)
    _steady(c, 12)
    c.forget_events(5)
    before = (c.first_event, c.event_count, c.events_since(5), c.snapshot())
    with pytest.raises(ValueError, match="forget_events takes an event number from 5"):
        c.forget_events(bad)
    assert (c.first_event, c.event_count, c.events_since(5), c.snapshot()) == before


def _held_bytes_per_unit(forget: bool, units: int = 4096) -> float:
    c = StalenessController(Config(batch_size=64, max_staleness=1, max_concurrency=160))
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        _steady(c, units, each_batch=(lambda x: x.forget_events(x.event_count)) if forget
                else None)
        gc.collect()
        return (tracemalloc.get_traced_memory()[0] - base) / units
    finally:
        tracemalloc.stop()


def test_forgetting_bounds_what_the_controller_holds():
    """The log is most of what a controller holds per unit it ever saw (each unit's reserve and
    occupy events, its share of a consume event and of the batch with its consumed buffer: at
    least two Event tuples of 10 fields, 2 x 136 bytes, per unit); forgetting every batch's
    events leaves the unit records (a dict entry per unit, under 110 bytes with its key) and
    one batch's worth of events. A unit record: its int key (28 bytes) and its dictionary slot
    (a 24-byte entry and its index bytes, the entries array up to twice the live ones after a
    resize), under 110 bytes."""
    kept, forgotten = _held_bytes_per_unit(False), _held_bytes_per_unit(True)
    assert kept > 2 * 136, kept
    assert forgotten < 110 + 2 * 136 * 64 * 2 / 4096, (kept, forgotten)
