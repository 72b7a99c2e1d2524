"""The protocol's transition relation, written once for two algebras: Python values and Z3 terms.

Theory of operation
-------------------
This file is the *symbolic encoding* of spec/PROTOCOL.md: the one copy of the rules that can drift
from ``reserve_occupy/``. It is written against a tiny algebra (``If``, ``And``, ``Or``, ``Not``,
``Implies``, ``Count``) so that the same functions

* build Z3 terms (``proofs.z3_model`` passes a Z3 algebra): Z3 proves the invariants inductive
  over *this* relation;
* run on plain ints (``CONCRETE``): the model checker and Hypothesis compare every real
  (pre, post) pair of the controller with it, and ``test_refinement`` does the same through the
  Z3 solver itself. That is what keeps the encoding honest.

State (``SpecState``): the phase, ``version``, and ``eta + 1`` buffers of ``capacity`` explicit
slots at offsets ``k = 0 .. eta`` from ``version`` (buffer ``version + k``; offset 0 is closed
while training, because ``head = version + 1`` then). A slot holds a kind (``E``/``R``/``O``), the
unit's ``v_traj`` (absolute) and an integer unit id; EMPTY slots' ``w``/``uid`` are don't-care
(normalised to 0 / -1). Unit records are summarised by counters (in flight, finished, admitted,
consumed, aborted, filtered); ``uid`` is the unit's admission number, so a fresh unit gets
``uid = admitted``. ``batch_size`` and ``max_concurrency`` may be symbolic; ``eta`` and
``capacity`` fix the shape.

Loops of the code (``fill_holes``, ``close_ready``, ``release_stuck``) are unrolled to a bound
that cannot be too small (each iteration strictly advances a position in a finite order, see
each function); every unrolled loop also returns an *obligation* "the loop had finished", which
the Z3 proofs discharge, so the bound is checked, not assumed. Code assertions (``place`` always
finds a slot) become obligations too.

Nothing here imports z3; it depends on the algebra it is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

E, R, O = 0, 1, 2
KIND_CHAR = {E: "E", R: "R", O: "O"}


class ConcreteAlgebra:
    """Plain Python values: evaluates the encoding on one concrete state."""

    symbolic = False

    @staticmethod
    def If(c: Any, a: Any, b: Any) -> Any:
        return a if c else b

    @staticmethod
    def And(*xs: Any) -> bool:
        return all(xs)

    @staticmethod
    def Or(*xs: Any) -> bool:
        return any(xs)

    @staticmethod
    def Not(x: Any) -> bool:
        return not x

    @staticmethod
    def Implies(a: Any, b: Any) -> bool:
        return (not a) or bool(b)

    @staticmethod
    def Count(conds: list) -> int:
        return sum(1 for c in conds if c)


CONCRETE = ConcreteAlgebra()


@dataclass(frozen=True)
class Shape:
    """The static part of a configuration: number of buffer offsets and slots per buffer."""

    eta: int
    capacity: int

    @property
    def slots(self) -> int:
        return (self.eta + 1) * self.capacity

    def positions(self) -> list[tuple[int, int]]:
        """Every slot in scan order: by buffer, then slot."""
        return [(k, i) for k in range(self.eta + 1) for i in range(self.capacity)]


@dataclass
class Params:
    """Configuration values that may be symbolic: batch size and the concurrency limit."""

    batch_size: Any
    limited: Any  # True when max_concurrency is set
    max_concurrency: Any  # meaningful only when limited


@dataclass
class SpecState:
    training: Any
    version: Any
    st: list[list[Any]]
    w: list[list[Any]]
    uid: list[list[Any]]
    in_flight: Any
    finished: Any
    admitted: Any
    consumed: Any
    aborted: Any
    filtered: Any

    # Ghost: one condition per reservation an operation aborts. The counters are settled once,
    # at the end of the operation (``Operations._settle``), so that in a Z3 term in_flight and
    # aborted move by the same ``Count`` and the conservation total cancels syntactically.
    aborts: list[Any] = field(default_factory=list)

    COUNTERS = ("in_flight", "finished", "admitted", "consumed", "aborted", "filtered")

    def copy(self) -> SpecState:
        return SpecState(self.training, self.version, [r[:] for r in self.st],
                         [r[:] for r in self.w], [r[:] for r in self.uid], self.in_flight,
                         self.finished, self.admitted, self.consumed, self.aborted, self.filtered,
                         list(self.aborts))

    def normalised(self) -> tuple:
        """Concrete states only: a comparable value with don't-care fields of EMPTY slots
        erased."""
        slots = tuple(
            tuple((s, w, u) if s != E else (E, 0, -1) for s, w, u in zip(rs, rw, ru))
            for rs, rw, ru in zip(self.st, self.w, self.uid)
        )
        return (bool(self.training), self.version, slots) + tuple(
            getattr(self, c) for c in self.COUNTERS)

    def render(self, eval_: Any = lambda x: x) -> str:
        """Readable form; ``eval_`` turns symbolic values into concrete ones (a Z3 model)."""
        training = bool(eval_(self.training))
        version = eval_(self.version)
        lines = [f"version={version} phase={'TRAINING' if training else 'IDLE'} "
                 + " ".join(f"{c}={eval_(getattr(self, c))}" for c in self.COUNTERS)]
        for k, (rs, rw, ru) in enumerate(zip(self.st, self.w, self.uid)):
            if k == 0 and training:
                lines.append(f"  b{version} (consumed)")
                continue
            cells = []
            for s, w, u in zip(rs, rw, ru):
                s = eval_(s)
                cells.append("_" if s == E else f"{KIND_CHAR.get(s, '?')}(u{eval_(u)}@v{eval_(w)})")
            lines.append(f"  b{version + k} " + " ".join(cells))
        return "\n".join(lines)


@dataclass
class Step:
    """Result of one operation: post-state, whether the guard held, proof obligations and
    operation-level facts (named booleans that must hold whenever the guard did)."""

    post: SpecState
    guard: Any
    obligations: dict[str, Any] = field(default_factory=dict)


class Model:
    """The transition relation for one ``Shape`` under one algebra."""

    def __init__(self, shape: Shape, params: Params, algebra: Any = CONCRETE) -> None:
        self.shape = shape
        self.eta = shape.eta
        self.cap = shape.capacity
        self.p = params
        self.A = algebra
        self.positions = shape.positions()

    # ------------------------------------------------------------ reading and writing ------

    def read(self, grid: list[list[Any]], k: Any, i: Any) -> Any:
        if isinstance(k, int) and isinstance(i, int):
            return grid[k][i]
        A, acc = self.A, grid[0][0]
        for kk, ii in self.positions:
            acc = A.If(A.And(k == kk, i == ii), grid[kk][ii], acc)
        return acc

    def write(self, s: SpecState, k: Any, i: Any, kind: Any, w: Any, uid: Any,
              when: Any = True) -> None:
        A = self.A
        if not A.symbolic:
            if when:
                s.st[k][i], s.w[k][i], s.uid[k][i] = kind, w, uid
            return
        for kk, ii in self.positions:
            if isinstance(k, int) and isinstance(i, int) and (kk, ii) != (k, i):
                continue
            c = A.And(when, k == kk, i == ii)
            s.st[kk][ii] = A.If(c, kind, s.st[kk][ii])
            s.w[kk][ii] = A.If(c, w, s.w[kk][ii])
            s.uid[kk][ii] = A.If(c, uid, s.uid[kk][ii])

    def clear(self, s: SpecState, k: Any, i: Any, when: Any = True) -> None:
        self.write(s, k, i, E, 0, -1, when)

    def move(self, s: SpecState, src: tuple, dst: tuple, when: Any = True) -> None:
        kind = self.read(s.st, *src)
        w = self.read(s.w, *src)
        uid = self.read(s.uid, *src)
        self.clear(s, *src, when=when)
        self.write(s, *dst, kind, w, uid, when=when)

    def first(self, candidates: list[tuple[Any, tuple]]) -> tuple[Any, tuple]:
        """The first (cond, value) whose cond holds, in list order: (found, value)."""
        A = self.A
        if not A.symbolic:
            for c, v in candidates:
                if c:
                    return True, v
            return False, tuple(0 for _ in candidates[0][1]) if candidates else (0, 0)
        acc: tuple = tuple(0 for _ in candidates[0][1])
        for c, v in reversed(candidates):
            acc = tuple(A.If(c, x, y) for x, y in zip(v, acc))
        return A.Or(*[c for c, _ in candidates]), acc

    def last(self, candidates: list[tuple[Any, tuple]]) -> tuple[Any, tuple]:
        return self.first(list(reversed(candidates)))

    # ------------------------------------------------------------ derived predicates --------

    def is_open(self, s: SpecState, k: int) -> Any:
        """Buffer ``version + k`` is open: every offset except 0 while training."""
        return True if k > 0 else self.A.Not(s.training)

    def n_occ(self, s: SpecState, k: int) -> Any:
        return self.A.Count([x == O for x in s.st[k]])

    def ready(self, s: SpecState, k: int) -> Any:
        return self.n_occ(s, k) >= self.p.batch_size

    def has(self, s: SpecState, k: int, kind: int) -> Any:
        return self.A.Or(*[x == kind for x in s.st[k]])

    def legal(self, s: SpecState, k: int, w: Any) -> Any:
        """Staleness rule for buffer ``version + k`` (the window's head is ``is_open``)."""
        return s.version + k <= w + self.eta

    def ready_at(self, s: SpecState, k: Any) -> Any:
        """``ready`` of a buffer given by a possibly symbolic offset."""
        if isinstance(k, int):
            return self.ready(s, k)
        A, acc = self.A, False
        for kk in range(self.eta + 1):
            acc = A.If(k == kk, self.ready(s, kk), acc)
        return acc

    # ------------------------------------------------------------ rules (SlotTable) --------

    def plan_reserve(self, s: SpecState, w: Any) -> tuple[Any, tuple]:
        """Latest open, legal, not-READY buffer with an EMPTY slot, and its last EMPTY slot."""
        A, cands = self.A, []
        for k in range(self.eta + 1):
            ok = A.And(self.is_open(s, k), self.legal(s, k, w), A.Not(self.ready(s, k)))
            for i in range(self.cap):
                cands.append((A.And(ok, s.st[k][i] == E), (k, i)))
        return self.last(cands)

    def shift_into(self, s: SpecState, gk: Any, gi: Any) -> None:
        """Step (b): the first reservation strictly before the gap, outside READY buffers,
        legal in the gap's buffer, moves into the gap; then relabel its old buffer."""
        A, cands = self.A, []
        for k, i in self.positions:
            before = A.Or(k < gk, A.And(k == gk, i < gi))
            cands.append((A.And(self.is_open(s, k), before, A.Not(self.ready(s, k)),
                                s.st[k][i] == R, s.version + gk <= s.w[k][i] + self.eta),
                          (k, i)))
        found, (sk, si) = self.first(cands)
        self.move(s, (sk, si), (gk, gi), when=found)
        # Relabel: the first reservation before the hole in the same buffer takes the hole.
        row = [self.read(s.st, sk, j) for j in range(self.cap)]
        f2, (j,) = self.first([(A.And(j < si, row[j] == R), (j,)) for j in range(self.cap)])
        self.move(s, (sk, j), (sk, si), when=A.And(found, f2))

    def place(self, s: SpecState, w: Any, uid: Any) -> tuple[Any, tuple]:
        """Step (c): earliest EMPTY slot of an open, legal, not-READY buffer."""
        A, cands = self.A, []
        for k, i in self.positions:
            cands.append((A.And(self.is_open(s, k), self.legal(s, k, w),
                                A.Not(self.ready(s, k)), s.st[k][i] == E), (k, i)))
        found, (pk, pi) = self.first(cands)
        self.write(s, pk, pi, O, w, uid, when=found)
        return found, (pk, pi)

    def close_ready(self, s: SpecState, bk: Any, when: Any) -> None:
        """Correction 2: each reservation of READY buffer ``bk`` moves to the latest legal EMPTY
        slot of a later buffer, or is aborted. One pass over the slots (the code's loop)."""
        A = self.A
        for i in range(self.cap):
            here = A.And(when, self.read(s.st, bk, i) == R)
            if not A.symbolic and not here:
                continue
            w = self.read(s.w, bk, i)
            # relocation_target: the Reserve rule, kept only if it lands after ``bk``.
            found, dst = self.plan_reserve(s, w)
            found = A.And(found, dst[0] > bk)
            self.move(s, (bk, i), dst, when=A.And(here, found))
            drop = A.And(here, A.Not(found))
            self.clear(s, bk, i, when=drop)
            s.aborts.append(drop)

    def earliest_hole(self, s: SpecState) -> tuple[Any, tuple]:
        A = self.A
        return self.first([(A.And(self.is_open(s, k), A.Not(self.ready(s, k)),
                                  s.st[k][i] == E), (k, i)) for k, i in self.positions])

    def donor(self, s: SpecState, hk: Any, hi: Any) -> tuple[Any, tuple]:
        """Last OCCUPIED slot of the earliest buffer at or after the hole's that has one after
        the hole."""
        A, cands = self.A, []
        for k in range(self.eta + 1):
            for i in reversed(range(self.cap)):
                later = [s.st[k][j] != O for j in range(i + 1, self.cap)]
                cands.append((A.And(self.is_open(s, k), s.st[k][i] == O, *later,
                                    A.Or(k > hk, A.And(k == hk, i > hi))), (k, i)))
        return self.first(cands)

    def fill_holes(self, s: SpecState, rounds: int) -> Any:
        """Move OCCUPIED units forward while an earlier hole has a donor, closing buffers that
        become READY. Each round fills the earliest hole, so the earliest hole strictly advances
        in (buffer, slot) order: ``shape.slots`` rounds always suffice. Returns the obligation
        "the loop had finished after ``rounds`` rounds"."""
        A = self.A
        active: Any = True
        for _ in range(rounds):
            hf, (hk, hi) = self.earliest_hole(s)
            df, (dk, di) = self.donor(s, hk, hi)
            active = A.And(active, hf, df)
            if not A.symbolic and not active:
                return True
            self.move(s, (dk, di), (hk, hi), when=active)
            self.close_ready(s, hk, when=A.And(active, self.ready_at(s, hk)))
        hf, (hk, hi) = self.earliest_hole(s)
        df, _ = self.donor(s, hk, hi)
        return A.Not(A.And(active, hf, df))


class Operations:
    """Each protocol operation as guard + effect over ``SpecState`` (spec/PROTOCOL.md)."""

    NAMES = ("reserve", "occupy", "abort", "filter", "consume", "publish", "release_stuck")

    def __init__(self, model: Model, fill_rounds: int | None = None,
                 stuck_rounds: int | None = None, stuck_action: str = "release",
                 stuck_threshold: int | None = None) -> None:
        self.m = model
        self.fill_rounds = model.shape.slots if fill_rounds is None else fill_rounds
        self.stuck_rounds = model.cap if stuck_rounds is None else stuck_rounds
        # Config.stuck_action / stuck_threshold (spec §6.2, "Options of the release"): "retry"
        # releases as "release" does; "truncate" is encoded for the concrete algebra (the
        # model checker's conformance), and proved with Z3 as a loop of occupy rounds
        # (``z3_model.Prover.truncate_stuck``).
        self.stuck_action = stuck_action
        self.stuck_threshold = stuck_threshold

    def reserve(self, s: SpecState) -> Step:
        m, A, p = self.m, self.m.A, self.m.p
        found, (k, i) = m.plan_reserve(s, s.version)
        guard = A.And(A.Or(A.Not(p.limited), s.in_flight < p.max_concurrency), found)
        t = s.copy()
        m.write(t, k, i, R, s.version, s.admitted, when=guard)
        t.in_flight = A.If(guard, s.in_flight + 1, s.in_flight)
        t.admitted = A.If(guard, s.admitted + 1, s.admitted)
        return self._settle(Step(t, guard))

    def _settle(self, step: Step) -> Step:
        t, A = step.post, self.m.A
        if t.aborts:
            n = A.Count(t.aborts)
            t.in_flight, t.aborted = t.in_flight - n, t.aborted + n
            t.aborts = []
        return step

    def _unit_guard(self, s: SpecState, k: Any, i: Any, kind: int) -> Any:
        m, A = self.m, self.m.A
        opened = A.Or(*[A.And(k == kk, m.is_open(s, kk)) for kk in range(m.eta + 1)])
        return A.And(0 <= k, k <= m.eta, 0 <= i, i < m.cap, opened, m.read(s.st, k, i) == kind)

    def occupy(self, s: SpecState, k: Any, i: Any) -> Step:
        """The unit in RESERVED slot (k, i) finished."""
        m, A = self.m, self.m.A
        guard = self._unit_guard(s, k, i, R)
        t = s.copy()
        w, uid = m.read(s.w, k, i), m.read(s.uid, k, i)
        m.clear(t, k, i)
        m.shift_into(t, k, i)
        placed, (pk, _) = m.place(t, w, uid)
        t.in_flight, t.finished = t.in_flight - 1, t.finished + 1
        m.close_ready(t, pk, when=A.And(placed, m.ready_at(t, pk)))
        return self._settle(Step(t, guard, {"place finds a slot": placed}))

    def _abort_one(self, t: SpecState, k: Any, i: Any, when: Any = True) -> Any:
        m, A = self.m, self.m.A
        if not A.symbolic and not when:
            return True
        m.clear(t, k, i, when=when)
        if A.symbolic and when is not True:
            # shift_into and fill_holes change nothing when ``when`` is false only if they are
            # gated; run them on a copy and merge, which keeps the encoding literal.
            u = t.copy()
            m.shift_into(u, k, i)
            done = m.fill_holes(u, self.fill_rounds)
            u.aborts.append(True)
            merge(A, t, u, when)
            return A.Implies(when, done)
        m.shift_into(t, k, i)
        done = m.fill_holes(t, self.fill_rounds)
        t.aborts.append(True)
        return done

    def abort(self, s: SpecState, k: Any, i: Any) -> Step:
        """The in-flight unit in RESERVED slot (k, i) is dropped."""
        guard = self._unit_guard(s, k, i, R)
        t = s.copy()
        done = self._abort_one(t, k, i)
        return self._settle(Step(t, guard, {"fill_holes terminates": done}))

    def filter(self, s: SpecState, k: Any, i: Any) -> Step:
        """The finished unit in OCCUPIED slot (k, i) is dropped."""
        m = self.m
        guard = self._unit_guard(s, k, i, O)
        t = s.copy()
        m.clear(t, k, i)
        done = m.fill_holes(t, self.fill_rounds)
        t.finished, t.filtered = t.finished - 1, t.filtered + 1
        return self._settle(Step(t, guard, {"fill_holes terminates": done}))

    def consume(self, s: SpecState) -> Step:
        """Trainer idle and head READY: the head buffer's OCCUPIED units are the batch."""
        m, A = self.m, self.m.A
        guard = A.And(A.Not(s.training), m.ready(s, 0))
        t = s.copy()
        n = m.n_occ(s, 0)
        for i in range(m.cap):
            m.clear(t, 0, i)
        t.training = True
        t.finished, t.consumed = s.finished - n, s.consumed + n
        facts = {"batch has batch_size units": n == m.p.batch_size}
        facts["batch staleness in [0, eta]"] = A.And(*[
            A.Implies(s.st[0][i] == O, A.And(0 <= s.version - s.w[0][i],
                                              s.version - s.w[0][i] <= m.eta))
            for i in range(m.cap)])
        facts["batch holds no reservation"] = A.Not(m.has(s, 0, R))
        return Step(t, guard, facts)

    def publish(self, s: SpecState) -> Step:
        """Training finished: version + 1; offsets shift down, a fresh buffer opens at eta."""
        m, A = self.m, self.m.A
        guard = s.training
        t = s.copy()
        t.version = s.version + 1
        t.training = False
        for grid, fill in ((t.st, E), (t.w, 0), (t.uid, -1)):
            grid[:] = grid[1:] + [[fill] * m.cap]
        return Step(t, guard, {"publish drops no unit": A.Not(A.Or(m.has(s, 0, R),
                                                                   m.has(s, 0, O)))})

    def release_stuck(self, s: SpecState) -> Step:
        """Head STUCK (trainer idle): abort its reservations front to back until none is left or
        the head became READY. Each round removes one reservation from the head and nothing puts
        one back (shift sources lie before the gap; closing moves to later buffers), so
        ``capacity`` rounds suffice; the obligation checks it."""
        m, A = self.m, self.m.A
        guard = A.And(A.Not(s.training), A.Not(m.ready(s, 0)), A.Not(m.has(s, 0, E)))
        if self.stuck_action == "truncate" and not A.symbolic and guard and (
                self.stuck_threshold is None
                or m.p.batch_size - m.n_occ(s, 0) <= self.stuck_threshold):
            return self.truncate_stuck(s, guard)
        t = s.copy()
        ok: Any = True
        for _ in range(self.stuck_rounds):
            go = A.And(guard, m.has(t, 0, R), A.Not(m.ready(t, 0)))
            if not A.symbolic and not go:
                break
            _, (_, i) = m.first([(t.st[0][j] == R, (0, j)) for j in range(m.cap)])
            ok = A.And(ok, self._abort_one(t, 0, i, when=go))
        left = A.And(guard, m.has(t, 0, R), A.Not(m.ready(t, 0)))
        return self._settle(Step(t, guard, {"release_stuck terminates": A.And(ok, A.Not(left)),
                                            "fill_holes terminates": ok}))


    def truncate_stuck(self, s: SpecState, guard: Any) -> Step:
        """``release_stuck`` with ``truncate`` (concrete algebra): occupy the head's first
        reservation, front to back, until none is left or the head is READY -- each round is
        ``occupy`` of that slot (spec §6.2). Each round removes one reservation from the head
        and nothing puts one back, so ``capacity`` rounds suffice."""
        m = self.m
        t, ok = s, True
        for _ in range(self.stuck_rounds):
            if not (m.has(t, 0, R) and not m.ready(t, 0)):
                break
            _, (_, i) = m.first([(t.st[0][j] == R, (0, j)) for j in range(m.cap)])
            step = self.occupy(t, 0, i)
            t, ok = step.post, ok and all(step.obligations.values())
        left = m.has(t, 0, R) and not m.ready(t, 0)
        return Step(t, guard, {"release_stuck terminates": ok and not left,
                               "place finds a slot": ok})


def merge(A: Any, t: SpecState, u: SpecState, when: Any) -> None:
    """t := If(when, u, t), field by field; ``u`` was copied from ``t``, so its ghost aborts
    extend ``t``'s."""
    t.aborts.extend(A.And(when, a) for a in u.aborts[len(t.aborts):])
    for name in ("training", "version") + SpecState.COUNTERS:
        setattr(t, name, A.If(when, getattr(u, name), getattr(t, name)))
    for g_t, g_u in ((t.st, u.st), (t.w, u.w), (t.uid, u.uid)):
        for k, row in enumerate(g_u):
            for i, x in enumerate(row):
                g_t[k][i] = A.If(when, x, g_t[k][i])


# ---------------------------------------------------------------- invariants ---------------

def is_hole(m: Model, s: SpecState, k: int, i: int) -> Any:
    """An EMPTY slot of an open, not-READY buffer (what ``prefix`` forbids before an O)."""
    A = m.A
    return A.And(m.is_open(s, k), A.Not(m.ready(s, k)), s.st[k][i] == E)


def conservation_counts(m: Model, s: SpecState) -> Any:
    """The counting half of ``conservation``: slots agree with the unit counters, ids are
    admission numbers."""
    A, pos = m.A, m.positions
    n_r = A.Count([s.st[k][i] == R for k, i in pos])
    n_o = A.Count([s.st[k][i] == O for k, i in pos])
    return A.And(
        n_r == s.in_flight, n_o == s.finished,
        *[A.Implies(s.st[k][i] != E, A.And(0 <= s.uid[k][i], s.uid[k][i] < s.admitted))
          for k, i in pos],
        *[getattr(s, c) >= 0 for c in SpecState.COUNTERS],
        s.admitted == s.in_flight + s.finished + s.consumed + s.aborted + s.filtered)


def distinct_ids(m: Model, s: SpecState) -> Any:
    """The identity half of ``conservation``: no unit holds two slots (pairwise form)."""
    A, pos, out = m.A, m.positions, []
    for a, (ka, ia) in enumerate(pos):
        for kb, ib in pos[a + 1:]:
            out.append(A.Implies(A.And(s.st[ka][ia] != E, s.st[kb][ib] != E),
                                 s.uid[ka][ia] != s.uid[kb][ib]))
    return A.And(*out)


def prefix_pairs(m: Model, s: SpecState) -> Any:
    """``prefix`` in pairwise form: no hole precedes an OCCUPIED slot."""
    A, pos, out = m.A, m.positions, []
    for a, (ka, ia) in enumerate(pos):
        later = [s.st[kb][ib] == O for kb, ib in pos[a + 1:]]
        if later:
            out.append(A.Implies(is_hole(m, s, ka, ia), A.Not(A.Or(*later))))
    return A.And(*out)


def invariants(m: Model, s: SpecState, quadratic: bool = True) -> dict[str, Any]:
    """The invariants of spec/PROTOCOL.md as named booleans over one ``SpecState``.
    ``quadratic=False`` leaves out the pairwise parts (``distinct_ids``, ``prefix_pairs``) for a
    caller that encodes them more compactly (``proofs.z3_model``)."""
    A, eta, cap = m.A, m.eta, m.cap
    pos = m.positions
    out: dict[str, Any] = {}
    out["window"] = A.And(s.version >= 0, A.Implies(s.training, A.Not(A.Or(
        m.has(s, 0, R), m.has(s, 0, O)))))
    out["capacity"] = A.And(*[m.n_occ(s, k) <= m.p.batch_size for k in range(eta + 1)])
    rank = {E: 1, R: 2, O: 0}

    def rk(x: Any) -> Any:
        return A.If(x == O, rank[O], A.If(x == E, rank[E], rank[R]))

    out["ordering"] = A.And(*[rk(s.st[k][i]) <= rk(s.st[k][i + 1])
                              for k in range(eta + 1) for i in range(cap - 1)])
    out["closure"] = A.And(*[A.Implies(m.ready(s, k), A.Not(m.has(s, k, R)))
                             for k in range(eta + 1)])
    out["staleness"] = A.And(*[A.Implies(s.st[k][i] != E, A.And(
        s.w[k][i] <= s.version + k, s.version + k <= s.w[k][i] + eta)) for k, i in pos])
    # Auxiliary (a strengthening the proofs need, true of the code: the model checker checks
    # it on every reachable state): no unit carries a version newer than the current one.
    out["aux_stamp"] = A.And(*[A.Implies(s.st[k][i] != E, s.w[k][i] <= s.version)
                               for k, i in pos])
    out["conservation"] = conservation_counts(m, s)
    if quadratic:
        out["conservation"] = A.And(out["conservation"], distinct_ids(m, s))
    out["concurrency"] = A.Implies(m.p.limited, s.in_flight <= m.p.max_concurrency)
    if quadratic:
        out["prefix"] = prefix_pairs(m, s)
    out["no_deadlock"] = A.Implies(A.And(A.Not(s.training), s.in_flight == 0), A.Or(
        m.ready(s, 0), *[A.And(m.is_open(s, k), A.Not(m.ready(s, k)), m.has(s, k, E))
                         for k in range(eta + 1)]))
    return out


def domain(m: Model, s: SpecState) -> Any:
    """Type constraints of a symbolic state: slot kinds in {E, R, O}, EMPTY slots normalised."""
    A = m.A
    return A.And(*[A.And(A.Or(x == E, x == R, x == O),
                         A.Implies(x == E, A.And(s.w[k][i] == 0, s.uid[k][i] == -1)))
                   for k, row in enumerate(s.st) for i, x in enumerate(row)])


def initial(shape: Shape) -> SpecState:
    n = shape.eta + 1
    return SpecState(False, 0, [[E] * shape.capacity for _ in range(n)],
                     [[0] * shape.capacity for _ in range(n)],
                     [[-1] * shape.capacity for _ in range(n)], 0, 0, 0, 0, 0, 0)
