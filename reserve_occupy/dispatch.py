"""A ``transitions`` machine whose triggers cost about as much as a method call.

Theory of operation
-------------------
``transitions`` stays the authority on the trainer's phases: ``machine.OPERATIONS`` is compiled
into a real ``transitions.Machine`` (its ``Event``/``Transition``/``Condition``/``State``
objects hold the sources, destinations, guards and effects), and every operation is fired through
``Event.trigger``. What this module changes is only *how* a trigger walks those objects.

The stock ``Event.trigger`` pays for features this table does not use, on every call: a
``functools.partial``, an ``EventData``, the machine's queue check, five empty callback lists
(prepare, before, before/after state change, finalize) walked through ``itertools.chain``, a
``getattr`` + ``callable`` per callback name, empty enter/exit callback lists on a phase change,
and five to nine ``logging`` calls that return at once when logging is off but still cost a call
and a cache lookup each. That is about 5.6 µs for a trigger with no guard and no effect, and
about 9 µs for one that changes phase -- more than the slot table's work for most operations.

``LeanEvent`` (installed through ``Machine.event_cls``, the library's extension point) reads the
same objects in the same order and does nothing else:

1. the model's phase (``model_attribute``) selects the event's transitions; none: ``MachineError``
   with the library's message (``ignore_invalid_triggers`` is refused below, so it always raises);
2. for each transition in order, every ``Condition`` is resolved by name on the model -- at call
   time, so a subclass overriding a guard (the proofs' mutants) is honoured -- and compared with
   its target;
3. the first transition whose conditions all hold changes the phase if it has a ``dest`` --
   writing the dest ``State``'s value to the model attribute, which is all ``Machine.set_state``
   does for one model and a registered state name; its type checks, ``get_state`` and
   ``listify`` calls cost about 1 µs on a warm cache and 4-5 µs for a consume at B = 256, whose
   trigger runs once per B occupies with that code evicted -- then runs its ``after`` callbacks
   by name, and the trigger returns True; no transition passing returns False.

One visible difference: turning on the ``transitions`` logger shows nothing for these triggers.
Nothing is lost by that: the controller's event log records every operation with its outcome.

This is exactly what the stock path does for a machine configured as ``LeanMachine`` allows;
``LeanMachine`` refuses at construction any feature the lean path would skip (queued processing,
``send_event``, prepare/before callbacks, machine-level callbacks, state enter/exit callbacks,
ignored invalid triggers), so the two cannot drift apart silently. tests/core/test_dispatch.py
drives the protocol through both paths and compares every outcome.
"""

from __future__ import annotations

from typing import Any

from transitions import Machine, MachineError
from transitions.core import Event


class LeanEvent(Event):
    """``transitions.Event`` whose ``trigger`` walks the transitions without the stock path's
    bookkeeping (see the module docstring for what is skipped and why that changes nothing)."""

    def trigger(self, model: Any, *args: Any, **kwargs: Any) -> bool:
        machine = self.machine
        phase = getattr(model, machine.model_attribute)
        # .get, not [...]: Event.transitions is a defaultdict and must not grow a source here.
        candidates = self.transitions.get(phase)
        if not candidates:
            raise MachineError(f"{machine.name}Can't trigger event {self.name} from state {phase}!")
        for transition in candidates:
            for condition in transition.conditions:
                if getattr(model, condition.func)(*args, **kwargs) != condition.target:
                    break
            else:
                if transition.dest is not None:  # Machine.set_state, inlined (see above)
                    setattr(model, machine.model_attribute, machine.states[transition.dest].value)
                for effect in transition.after:
                    getattr(model, effect)(*args, **kwargs)
                return True
        return False


class LeanMachine(Machine):
    """``transitions.Machine`` that fires through ``LeanEvent``; refuses what it does not run.

    Guards and effects must be given by name (strings): they are looked up on the model at each
    trigger, as the stock machine does for names.
    """

    event_cls = LeanEvent

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        unsupported = [
            name for name, used in (
                ("queued", self.has_queue),
                ("send_event", self.send_event),
                ("ignore_invalid_triggers", self.ignore_invalid_triggers),
                ("prepare_event", self.prepare_event),
                ("before_state_change", self.before_state_change),
                ("after_state_change", self.after_state_change),
                ("finalize_event", self.finalize_event),
                ("on_exception", self.on_exception),
                ("on_final", self.on_final),
                ("an overridden set_state", type(self).set_state is not Machine.set_state),
            ) if used
        ]
        unsupported += [f"state {s.name}: on_enter/on_exit/final/ignore_invalid_triggers"
                        for s in self.states.values()
                        if s.on_enter or s.on_exit or s.final or s.ignore_invalid_triggers]
        for event in self.events.values():
            for transition in (t for ts in event.transitions.values() for t in ts):
                if transition.prepare or transition.before:
                    unsupported.append(f"{event.name}: prepare/before callbacks")
                if transition.dest is not None and transition.dest not in self.states:
                    unsupported.append(f"{event.name}: unregistered dest {transition.dest!r}")
                names = [c.func for c in transition.conditions] + list(transition.after)
                if not all(isinstance(n, str) for n in names):
                    unsupported.append(f"{event.name}: guards and effects must be names")
        if unsupported:
            raise ValueError("LeanMachine does not run: " + "; ".join(unsupported))
