"""Streaming consume (spec/PROTOCOL.md §3.8): one test per guard, error and rule of ``stream``."""

from __future__ import annotations

import random

import pytest

from reserve_occupy import (
    Batch,
    BatchUnit,
    Config,
    ConfigError,
    IllegalOperation,
    IllegalUnitState,
    MoveReason,
    Phase,
    ReplayDivergence,
    StalenessController,
    UnitState,
    apply,
    replay,
)

from .conftest import random_step, render


def unchanged(c, before_snapshot, before_events):
    assert c.snapshot() == before_snapshot
    assert c.event_count == before_events


# ---- guards and errors ---------------------------------------------------------------------

def test_stream_without_the_option_is_a_typed_error_naming_it(make):
    c = make(eta=1, batch=2)
    c.reserve("a"), c.occupy("a")
    snap, n = c.snapshot(), c.event_count
    with pytest.raises(IllegalOperation, match="Config.streaming") as info:
        c.stream()
    assert info.value.operation == "stream" and info.value.requires
    unchanged(c, snap, n)


def test_stream_while_training_is_illegal(make):
    c = make(eta=1, batch=1, streaming=True)
    c.reserve("a"), c.reserve("b"), c.occupy("a"), c.consume()
    c.occupy("b")  # b is OCCUPIED in buffer 1 = head while training: its weights do not exist
    assert c.phase is Phase.TRAINING and c.head == 1
    snap, n = c.snapshot(), c.event_count
    with pytest.raises(IllegalOperation, match="TRAINING"):
        c.stream()
    unchanged(c, snap, n)
    c.publish()
    assert c.stream() == (BatchUnit("b", 0, 1),)


def test_stream_refused_when_nothing_new(make):
    c = make(eta=1, batch=2, streaming=True)
    snap, n = c.snapshot(), c.event_count
    assert c.stream() == ()  # nothing occupied at all
    unchanged(c, snap, n)
    c.reserve("a"), c.occupy("a")
    assert c.stream() == (BatchUnit("a", 0, 0),)
    snap, n = c.snapshot(), c.event_count
    assert c.stream() == ()  # everything in head already handed
    unchanged(c, snap, n)


def test_config_streaming_must_be_a_bool():
    with pytest.raises(ConfigError) as info:
        Config(1, 2, streaming=1)
    assert info.value.field == "streaming"
    assert Config(1, 2).streaming is False


@pytest.mark.parametrize("op", ["filter", "abort", "occupy"])
def test_a_streamed_unit_cannot_be_filtered_aborted_or_occupied(make, op):
    c = make(eta=1, batch=2, streaming=True)
    c.reserve("a"), c.occupy("a"), c.stream()
    snap, n = c.snapshot(), c.event_count
    with pytest.raises(IllegalUnitState, match="STREAMED") as info:
        getattr(c, op)("a")
    assert info.value.state == "STREAMED"
    unchanged(c, snap, n)


# ---- effect --------------------------------------------------------------------------------

def test_stream_hands_only_the_head_buffer_in_slot_order(make):
    c = make(eta=1, batch=2, streaming=True)
    for u in "abcd":
        c.reserve(u)
    for u in "abc":
        c.occupy(u)
    assert render(c) == {0: "O(a) O(b)", 1: "O(c) R(d)"}
    handed = c.stream()
    assert handed == (BatchUnit("a", 0, 0), BatchUnit("b", 0, 0))
    assert c.unit_state("a") is UnitState.STREAMED and c.unit_state("c") is UnitState.FINISHED
    e = c.last_event
    assert e.op == "stream" and e.head == 0 and e.batch == Batch(0, handed)


def test_consume_returns_the_whole_batch_and_names_the_streamed(make):
    c = make(eta=1, batch=3, streaming=True)
    for u in "abc":
        c.reserve(u)
    c.occupy("a")
    c.stream()
    c.occupy("b")
    c.stream()
    c.occupy("c")
    batch = c.consume()
    assert batch.unit_ids == ("a", "b", "c") and batch.streamed == ("a", "b")
    assert all(c.unit_state(u) is UnitState.CONSUMED for u in "abc")


def test_streaming_off_batches_name_nothing_streamed(make):
    c = make(eta=0, batch=1)
    c.reserve("a"), c.occupy("a")
    assert c.consume().streamed == ()


def test_filter_beside_a_streamed_unit_never_moves_it(make):
    c = make(eta=1, batch=3, streaming=True)
    for u in "abcdef":
        c.reserve(u)
    for u in "abcde":
        c.occupy(u)
    assert render(c) == {0: "O(a) O(b) O(c)", 1: "O(d) O(e) R(f)"}
    c.stream()  # a, b, c
    with pytest.raises(IllegalUnitState):
        c.filter("b")
    c.filter("d")
    assert render(c) == {0: "O(a) O(b) O(c)", 1: "O(e) _ R(f)"}


def test_a_refill_inside_the_head_takes_an_unstreamed_unit(make):
    # Streamed units are the head's first OCCUPIED slots; a hole in the head is after them, and
    # its refill comes from after the hole.
    c = make(eta=0, batch=5, streaming=True)
    for u in "abcde":
        c.reserve(u)
    c.occupy("a"), c.occupy("b")
    c.stream()
    c.occupy("c"), c.occupy("d")
    removal = c.filter("c")
    assert [(m.unit_id, m.reason) for m in removal.moves] == [("d", MoveReason.FILL)]
    assert render(c) == {0: "O(a) O(b) O(d) _ R(e)"}
    assert c.stream() == (BatchUnit("d", 0, 0),)


def test_release_stuck_leaves_streamed_units_alone(make):
    c = make(eta=0, batch=3, streaming=True)
    for u in "abc":
        c.reserve(u)
    c.occupy("a")
    c.stream()
    aborted = c.release_stuck()
    assert set(aborted) == {"b", "c"}
    assert render(c) == {0: "O(a) _ _"}
    assert c.unit_state("a") is UnitState.STREAMED


def test_oversampling_streamed_units_all_train(make):
    # C > B: the head holds at most B OCCUPIED, and closing moves or aborts reservations only.
    c = make(eta=1, batch=2, capacity=3, streaming=True)
    for u in "abcde":
        c.reserve(u)
    c.occupy("a")
    c.stream()
    p = c.occupy("b")
    assert "a" not in {m.unit_id for m in p.moves}
    assert render(c) == {0: "O(a) O(b) _", 1: "R(c) R(d) R(e)"}  # READY; spare slot closed
    batch = c.consume()
    assert set(batch.unit_ids) == {"a", "b"} and batch.streamed == ("a",)


def test_stream_at_eta_zero(make):
    c = make(eta=0, batch=2, streaming=True)
    c.reserve("a"), c.reserve("b"), c.occupy("b")
    assert c.stream() == (BatchUnit("b", 0, 0),)
    c.occupy("a")
    assert c.consume().unit_ids == ("b", "a")


# ---- events and replay ---------------------------------------------------------------------

def walk(config: Config, seed: int, steps: int = 300, stream_p: float = 0.5):
    """A random run in which the trainer streams at random idle moments."""
    rng, stream_rng = random.Random(seed), random.Random(1000 + seed)
    c = StalenessController(config)
    next_id = 0
    for _ in range(steps):
        next_id = random_step(c, rng, next_id)
        if c.phase is Phase.IDLE and stream_rng.random() < stream_p:
            c.stream()
        c.check()
    return c


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("capacity", [None, 5])
def test_streaming_changes_no_batch(seed, capacity):
    """A streaming run's operations without its streams, on a controller without streaming,
    give the same outcomes and the same batches: nothing dropped, nothing moved; and each batch
    names exactly the units streamed from its buffer."""
    c = walk(Config(1, 3, capacity, streaming=True), seed)
    plain = StalenessController(Config(1, 3, capacity))
    handed: list = []
    n_streamed = 0
    for e in c.events:
        if e.op == "stream":
            handed.extend(u.unit_id for u in e.batch.units)
            continue
        produced = apply(plain, e)
        want = e._replace(seq=produced.seq)
        if e.op == "consume":
            assert e.batch.streamed == tuple(handed)
            n_streamed += len(handed)
            handed = []
            want = want._replace(batch=Batch(e.batch.version, e.batch.units))
        assert produced == want
    assert n_streamed > 0
    replay(c.config, c.events).check()


def test_replay_insists_on_the_handed_units():
    c = StalenessController(Config(1, 2, streaming=True))
    c.reserve("a"), c.occupy("a"), c.stream()
    events = list(c.events)
    e = events[-1]
    events[-1] = e._replace(batch=Batch(0, (BatchUnit("z", 0, 0),)))
    with pytest.raises(ReplayDivergence):
        replay(c.config, events)
    assert replay(c.config, c.events).unit_state("a") is UnitState.STREAMED


def test_streamed_unit_keeps_its_slot_in_every_event():
    """No event's moves ever name a streamed unit (the spec's 'it never moves')."""
    for seed in range(4):
        c = walk(Config(2, 3, 4, streaming=True), seed, steps=400)
        handed: set = set()
        for e in c.events:
            if e.op == "stream":
                handed.update(u.unit_id for u in e.batch.units)
            elif e.op == "consume":
                assert handed <= set(e.batch.unit_ids)
                handed.clear()
            assert not handed & {m.unit_id for m in e.moves}, e
