"""The bridge from the real controller to the symbolic encoding, and the concrete refinement check.

``spec_state(c)`` reads a live ``StalenessController`` (its slot table, unit records and
counters) into a ``SpecState`` of ``proofs.spec_model``. Unit ids become admission numbers (the
order of ``c._units``, which is admission order), so a unit admitted next gets id
``admitted`` in both worlds. ``conformance`` runs one operation of the encoding on the pre-state
and compares its guard, obligations and post-state with what the real code did. The model
checker calls it on every edge it explores (exhaustive refinement for small configurations);
``test_refinement`` does the same through the Z3 solver on Hypothesis-drawn states.
"""

from __future__ import annotations

from typing import Any

from reserve_occupy import Config, StalenessController, UnitState
from reserve_occupy.table import EMPTY, OCCUPIED

from .spec_model import CONCRETE, E, Model, O, Operations, Params, R, Shape, SpecState

_KIND = {EMPTY: E, OCCUPIED: O}


def shape_of(config: Config) -> Shape:
    return Shape(config.max_staleness, config.capacity)  # type: ignore[arg-type]


def params_of(config: Config) -> Params:
    limited = config.max_concurrency is not None
    return Params(config.batch_size, limited, config.max_concurrency if limited else 0)


def concrete_ops(config: Config) -> Operations:
    return Operations(Model(shape_of(config), params_of(config), CONCRETE),
                      stuck_action=config.stuck_action, stuck_threshold=config.stuck_threshold)


def unit_numbers(c: StalenessController) -> dict[Any, int]:
    return {u: n for n, u in enumerate(c._units)}


def spec_state(c: StalenessController) -> SpecState:
    """The encoding's view of ``c``. Buffers outside ``version .. version + eta`` are not part of
    it (the window invariant says there are none)."""
    t, eta, cap = c._table, c.config.max_staleness, c.config.capacity
    ids = unit_numbers(c)
    st, w, uid = [], [], []
    for k in range(eta + 1):
        buf = t.buffers.get(c._version + k)
        rs, rw, ru = [E] * cap, [0] * cap, [-1] * cap  # type: ignore[operator]
        if buf is not None:
            for i, (kind, u, v) in enumerate(zip(buf.state, buf.unit, buf.version)):
                if i >= cap or kind == EMPTY:  # type: ignore[operator]
                    continue
                rs[i] = _KIND.get(kind, R)
                rw[i] = v
                ru[i] = ids.get(u, -2)
        st.append(rs)
        w.append(rw)
        uid.append(ru)
    states = list(c._unit_states().values())
    return SpecState(
        training=c._phase == "TRAINING", version=c._version, st=st, w=w, uid=uid,
        in_flight=c._in_flight,
        finished=states.count(UnitState.FINISHED) + states.count(UnitState.STREAMED),
        admitted=len(c._units), consumed=c._consumed, aborted=c._aborted,
        filtered=c._filtered)


def locate(c: StalenessController, unit_id: Any) -> tuple[int, int]:
    """Offset and slot of a unit in ``c``'s table (the encoding's operation parameter)."""
    buf, i = c._table.locate(unit_id)
    return buf.v - c._version, i


def expected_step(ops: Operations, pre: SpecState, op: str, where: tuple[int, int] | None):
    fn = getattr(ops, op)
    return fn(pre, *where) if where is not None else fn(pre)


def conformance(ops: Operations, pre_c: StalenessController, op: str, unit_id: Any,
                post_c: StalenessController, refused: bool) -> str | None:
    """None if the code's step from ``pre_c`` to ``post_c`` is the encoding's step; otherwise
    a sentence saying how they differ. ``refused``: the code refused the operation (reserve
    returned None, consume None, release_stuck [], stream (), filter of a STREAMED unit
    IllegalUnitState).

    Streaming is not part of the encoding (spec/VERIFICATION.md says why): ``stream`` must
    leave the encoding's state as it was, and a filter the code refused because its unit was
    STREAMED has no encoding step to compare; the model checker's ``stream_checks`` judge both.
    """
    pre = spec_state(pre_c)
    if op == "stream" and refused:
        return None
    if op == "stream":
        if spec_state(post_c).normalised() != pre.normalised():
            return "stream: the slots changed:\n" + _diff(pre, spec_state(post_c))
        return None
    if op == "filter" and refused and unit_id in pre_c._streamed:
        return None
    where = locate(pre_c, unit_id) if op in ("occupy", "abort", "filter") else None
    step = expected_step(ops, pre, op, where)
    if bool(step.guard) == refused:
        return (f"{op}: the encoding's guard is {bool(step.guard)} but the code "
                f"{'refused' if refused else 'ran'} it")
    if refused:
        return None
    for name, ok in step.obligations.items():
        if not ok:
            return f"{op}: obligation '{name}' fails in the encoding on this state"
    want, got = step.post.normalised(), spec_state(post_c).normalised()
    if want != got:
        return f"{op}: the code's post-state differs from the encoding's:\n" + _diff(
            step.post, spec_state(post_c))
    return None


def _diff(want: SpecState, got: SpecState) -> str:
    return ("  encoding:\n    " + want.render().replace("\n", "\n    ")
            + "\n  code:\n    " + got.render().replace("\n", "\n    "))
