"""One test per protocol rule (spec/PROTOCOL.md §3), each on the smallest state that shows it."""

from __future__ import annotations

from reserve_occupy import BufferStatus, Move, MoveReason, Phase, SlotRef, UnitState

from .conftest import render

# ---- reserve --------------------------------------------------------------------------------

def test_reserve_takes_latest_legal_buffer_last_slot(make):
    c = make(eta=2, batch=2)
    assert c.reserve("a").slot == SlotRef(2, 1)
    assert c.reserve("b").slot == SlotRef(2, 0)
    assert c.reserve("c").slot == SlotRef(1, 1)
    assert c.reserve("d").v_traj == 0


def test_reserve_refused_when_window_full(make):
    c = make(eta=0, batch=2)
    assert c.reserve("a") and c.reserve("b")
    assert c.reserve("c") is None
    assert c.in_flight == 2


def test_reserve_refused_at_max_concurrency_even_with_empty_slots(make):
    c = make(eta=1, batch=4, concurrency=2)
    c.reserve("a"), c.reserve("b")
    assert c.reserve("c") is None
    c.occupy("a")
    assert c.reserve("c") is not None


def test_refused_reserve_does_not_burn_the_id(make):
    c = make(eta=0, batch=1)
    c.reserve("a")
    assert c.reserve("b") is None
    c.occupy("a"), c.consume(), c.publish()
    assert c.reserve("b").v_traj == 1


def test_reserve_stamps_current_version(make):
    c = make(eta=1, batch=1)
    c.reserve("a"), c.occupy("a"), c.consume(), c.publish()
    assert c.reserve("b").v_traj == 1


def test_reserve_never_uses_a_ready_buffers_spare_slots(make):
    c = make(eta=0, batch=1, capacity=2)
    c.reserve("a")
    c.occupy("a")
    assert c.snapshot().buffer(0).status is BufferStatus.READY
    assert c.reserve("b") is None


# ---- occupy ---------------------------------------------------------------------------------

def test_occupy_goes_to_earliest_empty_slot(make):
    c = make(eta=1, batch=2)
    c.reserve("a")  # (1, 1)
    p = c.occupy("a")
    assert p.slot == SlotRef(0, 0) and p.staleness == 0 and p.moves == ()


def test_occupy_shifts_first_eligible_reservation_into_gap(make):
    c = make(eta=1, batch=2)
    for u in "abc":
        c.reserve(u)  # a (1,1), b (1,0), c (0,1)
    p = c.occupy("a")
    assert p.moves == ((("c"), SlotRef(0, 1), SlotRef(1, 1), MoveReason.SHIFT),)
    assert render(c) == {0: "O(a) _", 1: "R(b) R(c)"}


def test_shift_skips_reservation_too_old_for_the_gap(make):
    c = make(eta=1, batch=1)
    c.reserve("old")  # v0 in buffer 1
    c.reserve("x")  # v0 in buffer 0
    c.occupy("x"), c.consume(), c.publish()  # version 1; buffer 2 opens
    c.reserve("new")  # v1 in buffer 2
    p = c.occupy("new")  # gap in buffer 2; "old" (v0) may not move there
    assert p.moves == () and p.slot == SlotRef(2, 0)
    assert render(c) == {1: "R(old)", 2: "O(new)"}


def test_shift_is_a_single_move_without_cascade(make):
    c = make(eta=2, batch=1)
    for u in "abc":
        c.reserve(u)  # a (2,0), b (1,0), c (0,0)
    p = c.occupy("a")
    assert [m.unit_id for m in p.moves] == ["c"]
    assert render(c) == {0: "O(a)", 1: "R(b)", 2: "R(c)"}


def test_occupy_in_place_when_nothing_earlier(make):
    c = make(eta=0, batch=2)
    c.reserve("a"), c.reserve("b")
    assert c.occupy("a").slot == SlotRef(0, 0)
    assert c.occupy("b").slot == SlotRef(0, 1)


def test_relabel_restores_ordering_after_mixed_version_shift(make):
    c = make(eta=1, batch=2)
    # buffer 1 gets the v0 reservation "old" in front of a v1 reservation, then a gap in
    # buffer 2 lets only the v1 one move.
    c.reserve("p"), c.reserve("old")          # (1,1) p, (1,0) old
    c.reserve("q"), c.reserve("r")            # (0,1) q, (0,0) r
    c.occupy("r")  # gap (0,0): nothing before it; r -> (0,0)
    c.occupy("q")  # gap (0,1): nothing before; q -> (0,1) -> READY
    c.consume()
    c.occupy("p")  # gap (1,1): old shifts from (1,0); p -> (1,0)
    assert render(c) == {1: "O(p) R(old)"}
    c.publish()
    c.reserve("n1"), c.reserve("n2")          # v1: (2,1), (2,0)
    assert render(c)[2] == "R(n2) R(n1)"


# ---- consume / publish ----------------------------------------------------------------------

def test_consume_only_when_head_ready(make):
    c = make(eta=1, batch=2)
    c.reserve("a"), c.reserve("b")
    assert c.consume() is None
    c.occupy("a"), c.occupy("b")
    batch = c.consume()
    assert batch.version == 0 and len(batch) == 2 and set(batch.unit_ids) == {"a", "b"}
    assert c.phase is Phase.TRAINING and c.head == 1 and c.version == 0
    assert c.unit_state("a") is UnitState.CONSUMED


def test_publish_advances_version_and_grows_window(make):
    c = make(eta=2, batch=1)
    c.reserve("a"), c.occupy("a"), c.consume()
    assert [b.v_buffer for b in c.snapshot().buffers] == [1, 2]
    assert c.publish() == 1
    assert [b.v_buffer for b in c.snapshot().buffers] == [1, 2, 3]
    assert c.phase is Phase.IDLE and c.head == 1


def test_eta_zero_is_synchronous(make):
    c = make(eta=0, batch=1)
    c.reserve("a"), c.occupy("a"), c.consume()
    assert c.reserve("b") is None  # no admission while training
    c.publish()
    assert c.reserve("b").v_traj == 1


def test_batch_staleness_is_buffer_minus_version(make):
    c = make(eta=2, batch=1)
    c.reserve("a"), c.reserve("b"), c.reserve("c")
    c.occupy("c"), c.consume(), c.publish()
    c.occupy("b"), c.consume(), c.publish()
    c.occupy("a")
    batch = c.consume()
    assert batch.units[0].staleness == batch.version - batch.units[0].v_traj


# ---- abort / filter / release_stuck ---------------------------------------------------------

def test_abort_frees_slot_and_shifts_like_occupy(make):
    c = make(eta=1, batch=2)
    for u in "abc":
        c.reserve(u)  # a (1,1), b (1,0), c (0,1)
    r = c.abort("a")
    assert r.slot == SlotRef(1, 1)
    assert render(c) == {0: "_ _", 1: "R(b) R(c)"}
    assert c.unit_state("a") is UnitState.ABORTED and c.in_flight == 2


def test_abort_pulls_finished_units_forward(make):
    c = make(eta=1, batch=2)
    c.reserve("a"), c.reserve("b"), c.reserve("x"), c.reserve("y")  # a(1,1) b(1,0) x(0,1) y(0,0)
    c.occupy("y")  # -> (0,0)
    c.occupy("a")  # x shifts to (1,1); a -> (0,1); buffer 0 READY
    c.consume(), c.publish()
    c.reserve("n")  # v1 -> (2,1)
    c.occupy("n")  # b, x (v0) may not move to buffer 2; buffer 1 is full: n -> (2,0)
    assert render(c) == {1: "R(b) R(x)", 2: "O(n) _"}
    r = c.abort("b")
    assert r.slot == SlotRef(1, 0)
    assert r.moves == (Move("n", SlotRef(2, 0), SlotRef(1, 0), MoveReason.FILL),)
    assert render(c) == {1: "O(n) R(x)", 2: "_ _"}


def test_filter_compacts_its_buffer_then_refills_from_later_ones(make):
    c = make(eta=1, batch=2)
    c.reserve("a"), c.reserve("b"), c.reserve("c"), c.reserve("d")
    c.occupy("d"), c.occupy("c"), c.occupy("a")
    assert render(c) == {0: "O(d) O(c)", 1: "O(a) R(b)"}
    r = c.filter("d")
    assert r.slot == SlotRef(0, 0)
    assert r.moves == (
        Move("c", SlotRef(0, 1), SlotRef(0, 0), MoveReason.FILL),
        Move("a", SlotRef(1, 0), SlotRef(0, 1), MoveReason.FILL),
    )
    assert render(c) == {0: "O(c) O(a)", 1: "_ R(b)"}
    assert c.unit_state("d") is UnitState.FILTERED


def test_release_stuck_aborts_head_reservations(make):
    c = make(eta=0, batch=2)
    c.reserve("a"), c.reserve("b")
    c.occupy("a")
    assert c.snapshot().buffer(0).status is BufferStatus.STUCK
    assert c.release_stuck() == ["b"]
    assert render(c) == {0: "O(a) _"}
    assert c.reserve("c") is not None


def test_release_stuck_is_a_no_op_unless_head_stuck(make):
    c = make(eta=1, batch=2)
    c.reserve("a")
    n = len(c.events)
    assert c.release_stuck() == []
    assert len(c.events) == n


# ---- batch-level oversampling ---------------------------------------------------------------

def test_ready_buffer_closes_and_relocates_reservation(make):
    # Shortest relocation a random search found: a v0 reservation sits in buffer 2 while buffer
    # 3 has an EMPTY slot it may legally use; when buffer 2 becomes READY it moves there.
    c = make(eta=3, batch=1, capacity=2)
    for u in ("u0", "u1", "u2", "u3"):
        c.reserve(u)
    c.occupy("u0"), c.consume(), c.publish()
    for u in ("u4", "u5", "u6"):
        c.reserve(u)
    c.abort("u1")
    c.occupy("u5")
    assert render(c) == {1: "O(u5) _", 2: "_ R(u2)", 3: "_ R(u3)", 4: "R(u6) R(u4)"}
    p = c.occupy("u6")
    assert p.slot == SlotRef(2, 0) and p.aborted == ()
    assert p.moves == (Move("u2", SlotRef(2, 1), SlotRef(3, 0), MoveReason.CLOSE),)
    assert render(c) == {1: "O(u5) _", 2: "O(u6) _", 3: "R(u2) R(u3)", 4: "_ R(u4)"}
    assert c.snapshot().buffer(2).status is BufferStatus.READY


def test_closing_aborts_when_no_later_slot(make):
    c = make(eta=0, batch=1, capacity=2)
    c.reserve("a"), c.reserve("b")
    p = c.occupy("a")
    assert p.aborted == ("b",)
    assert c.unit_state("b") is UnitState.ABORTED and c.in_flight == 0


def test_head_status_follows_the_head_buffer(make):
    c = make(eta=0, batch=2)
    assert c.head_status is BufferStatus.PENDING
    c.reserve("a"), c.reserve("b")
    assert c.head_status is BufferStatus.STUCK
    c.occupy("a"), c.occupy("b")
    assert c.head_status is BufferStatus.READY
    c.consume()
    assert c.head_status is None  # eta = 0 while training: no open buffer
