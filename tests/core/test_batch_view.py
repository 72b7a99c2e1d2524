"""``consume`` hands the batch out in place: ``Batch.units`` is a ``BatchUnits`` view.

The view reads the consumed buffer's prebuilt entries by reference (no per-unit copy at
consume) and keeps the buffer alive, so nothing is freed per unit at consume either
(types.BatchUnits, table.SlotTable.take_head). These tests pin (1) that the view answers every
question a tuple of the same entries answers, the same way (equality and hashing across the
two, so a ``Batch`` compares, hashes, replays and writes its trace as before); (2) that ids of
consumed units keep their typed errors; (3) by counting allocations with ``tracemalloc``, that
consume allocates and frees no memory per unit: a bound from object sizes, not a timing.
"""

from __future__ import annotations

import pickle
import random
import tracemalloc
from collections.abc import Sequence

import pytest

from reserve_occupy import (
    Batch,
    BatchUnit,
    BatchUnits,
    Config,
    DuplicateUnit,
    IllegalOperation,
    IllegalUnitState,
    StalenessController,
    UnitState,
    replay,
)
from reserve_occupy.trace import event_to_record as event_record


def entries(n: int) -> list[BatchUnit]:
    return [BatchUnit(f"u{i}", i % 3, 2 - i % 3) for i in range(n)]


# Views as consume makes them: over the whole list, and over a prefix of a longer list (the
# spare slots of an oversampled buffer), down to the empty batch (batch_size 0 is refused by
# Config, but the view must not care).
CASES = [(items, n) for items in (entries(0), entries(1), entries(5), entries(9))
         for n in sorted({0, len(items) // 2, len(items)})]


@pytest.mark.parametrize("items,n", CASES)
def test_the_view_answers_as_the_tuple_of_its_items(items, n):
    view, tup = BatchUnits(items, n), tuple(items[:n])
    assert isinstance(view, Sequence)
    assert len(view) == len(tup) and list(view) == list(tup)
    assert list(reversed(view)) == list(reversed(tup))
    assert view == tup and tup == view and not (view != tup) and not (tup != view)
    assert view == BatchUnits(list(tup)) and hash(view) == hash(tup)
    assert repr(view) == repr(tup) and str(view) == str(tup)
    for i in range(-len(tup) - 2, len(tup) + 2):
        if -len(tup) <= i < len(tup):
            assert view[i] is tup[i]
        else:
            with pytest.raises(IndexError):
                view[i]
    for s in (slice(None), slice(1, None), slice(None, -1), slice(None, None, -1),
              slice(0, 100, 2), slice(-3, None)):
        assert view[s] == tup[s] and type(view[s]) is tuple
    with pytest.raises(TypeError):
        view["0"]  # type: ignore[index]
    if len(tup) > 1:
        assert view[True] is tup[True]  # an __index__ type, as a tuple takes it
    for x in (*tup, BatchUnit("nope", 0, 0), None):
        assert (x in view) == (x in tup) and view.count(x) == tup.count(x)
        if x in tup:
            assert view.index(x) == tup.index(x)
        else:
            with pytest.raises(ValueError):
                view.index(x)
    assert view + () == tup and () + view == tup and view + view == tup + tup
    assert view * 2 == tup * 2 and 2 * view == 2 * tup
    other = tup + (BatchUnit("z", 0, 0),)
    assert (view < other) == (tup < other) and (view <= tup) and (view >= tup)
    assert view != list(tup)  # a tuple is not equal to a list; neither is the view
    back = pickle.loads(pickle.dumps(view))
    assert back == tup and type(back) is BatchUnits and len(back) == len(tup)


def test_a_short_view_does_not_read_past_its_length():
    items = entries(6)
    view = BatchUnits(items, 4)
    assert len(view) == 4 and list(view) == items[:4] and items[4] not in view
    with pytest.raises(IndexError):
        view[4]
    with pytest.raises(ValueError):
        BatchUnits(items, 7)
    with pytest.raises(TypeError):
        BatchUnits(tuple(items))  # type: ignore[arg-type]


def test_a_batch_of_a_view_equals_hashes_and_pickles_as_a_batch_of_a_tuple():
    items = entries(5)
    a, b = Batch(3, BatchUnits(items), ("u1",)), Batch(3, tuple(items), ("u1",))
    assert a == b and b == a and hash(a) == hash(b) and len(a) == len(b) == 5
    assert a.unit_ids == b.unit_ids and repr(a) == repr(b)
    assert pickle.loads(pickle.dumps(a)) == b
    assert a != Batch(3, tuple(items[:4]), ("u1",)) and a != Batch(4, tuple(items), ("u1",))


def run(config: Config, seed: int, batches: int) -> tuple[StalenessController, list[Batch]]:
    """A random steady-state run (admit while allowed, finish a random unit, consume and
    publish when READY, now and then abort or filter) until ``batches`` were consumed."""
    rng = random.Random(seed)
    c = StalenessController(config)
    out: list[Batch] = []
    flying: list[int] = []
    nxt = 0
    while len(out) < batches:
        while c.reserve(nxt) is not None:
            flying.append(nxt)
            nxt += 1
        b = c.consume()
        if b is not None:
            out.append(b)
            c.publish()
            continue
        u = flying.pop(rng.randrange(len(flying)))
        if rng.random() < 0.1:
            r = c.abort(u)
        else:
            r = c.occupy(u)
            if rng.random() < 0.1 and c.unit_state(u) is UnitState.FINISHED:
                r2 = c.filter(u)
                for a in r2.aborted:
                    flying.remove(a)
        for a in r.aborted:
            flying.remove(a)
    return c, out


@pytest.mark.parametrize("config", [Config(1, 4), Config(2, 8, 10, 20), Config(0, 3),
                                    Config(1, 5, 7, streaming=True)])
def test_consumed_batches_are_views_and_replay_write_and_check_as_before(config):
    c, batches = run(config, seed=7, batches=12)
    c.check()
    for b in batches:
        assert type(b.units) is BatchUnits and len(b.units) == config.batch_size
        assert all(u.staleness == b.version - u.v_traj for u in b.units)
    # the log replays (consume's batch compared against the replayed one's) ...
    again = replay(config, c.events)
    assert again.events == c.events and again.snapshot() == c.snapshot()
    # ... and a consume event's trace record lists the units as a tuple's would
    for e in c.events:
        if e.op == "consume":
            tup = Batch(e.batch.version, tuple(e.batch.units), e.batch.streamed)
            assert event_record(e._replace(batch=tup)) == event_record(e)


def test_consumed_ids_keep_their_typed_errors():
    config = Config(1, 3, streaming=True)
    c = StalenessController(config)
    for u in ("a", "b", "c"):
        c.reserve(u)
    for u in ("a", "b", "c"):
        c.occupy(u)
    c.stream()
    batch = c.consume()
    assert batch is not None and set(batch.unit_ids) == {"a", "b", "c"}
    for u in batch.unit_ids:
        assert c.unit_state(u) is UnitState.CONSUMED
        for op in ("occupy", "abort", "filter"):
            with pytest.raises(IllegalUnitState) as err:
                getattr(c, op)(u)
            assert err.value.state == "CONSUMED" and err.value.unit_id == u
        with pytest.raises(DuplicateUnit):
            c.reserve(u)
    with pytest.raises(IllegalOperation):
        c.stream()  # training: the consumed head is no one's to stream
    c.publish()
    c.check()
    assert c.unit_state("a") is UnitState.CONSUMED


def consume_memory(b: int) -> tuple[int, int]:
    """(peak bytes allocated during one consume above what was allocated before it, bytes
    still allocated after it minus before) for a READY head of ``b`` units. Traced from before
    the controller is built: tracemalloc sees only the frees of blocks it saw allocated."""
    tracemalloc.start()
    try:
        c = StalenessController(Config(1, b, b))
        for u in range(b):
            c.reserve(u)
        for u in range(b):
            c.occupy(u)
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        batch = c.consume()
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert batch is not None and len(batch) == b
    return peak - before, after - before


def test_consume_neither_copies_nor_frees_per_unit():
    # A copy of the batch costs at least one pointer (8 bytes) per unit; freeing the consumed
    # buffer's arrays gives back at least one pointer per slot (its unit list alone). Between
    # B = 16 and B = 4,096 a per-unit copy shows as >= 8 x 4,080 bytes more allocated, a
    # per-unit free as >= 8 x 4,080 bytes less still allocated; allowed: half a pointer a unit.
    small, large = consume_memory(16), consume_memory(4096)
    slack = 8 * (4096 - 16) // 2
    assert large[0] - small[0] < slack, f"consume allocated {large[0] - small[0]} more bytes"
    assert small[1] - large[1] < slack, f"consume freed {small[1] - large[1]} more bytes"
