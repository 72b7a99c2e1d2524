"""AReaL's staleness manager and ``prepare_batch``: a count bound behind an input-queue gate.

Source: inclusionAI/AReaL @ 4aef98d8d818af55b43621aaadba047ae10f4e77 (released as areal 1.0.4),
``areal/infra/staleness_manager.py`` (``StalenessManager.get_capacity``, ``get_pending_limit``)
and ``areal/infra/workflow_executor.py`` (``BatchTaskDispatcher``: ``_commit_loop``,
``active_submit_and_wait``, ``wait_results``). tests/integrations/test_upstream_areal.py drives
the real classes and this policy with the same events and compares their decisions.

* L1, two gates, as the code has them. (a) The *input gate*: only the trainer feeds inputs,
  inside ``prepare_batch`` (``active_submit_and_wait``). Each round enqueues
  ``min(B, (eta + 1) * B - pending)`` inputs and then waits up to ``wait_timeout_s`` (1 s)
  for ``B - accepted so far`` results; a round that times out, or whose oldest results
  included rejected ones, starts another round. While the trainer trains, nothing new is
  enqueued. (b) The *count bound*: the dispatcher's producer submits a pending input while
  ``min(C - running, (eta + v + 1) * B - (accepted + running)) > 0``, where ``v`` is the
  rollout's weight version, ``accepted`` counts every accepted (finished) rollout ever and
  ``running`` the ones in flight; ``C = max_concurrent_rollouts`` (default: the batch size, as
  AReaL falls back to ``consumer_batch_size``). Nothing is submitted while paused for a weight
  update. ``input_gating=False`` drops gate (a): a loop that keeps the input queue full through
  ``submit()`` (the simulator's model before the cross-check).
* L2: on a weight update in-flight generations are interrupted and resubmitted with their tokens
  on the new weights (as the simulator does for every policy); nothing is aborted.
* L3: ``wait_results`` returns the ``count`` finished results created earliest (creation =
  submission to the runner, ``time.monotonic_ns()``, so groups admitted in the same instant
  keep their submission order; the model before the cross-check broke such ties by completion
  order); rejected results among them are discarded. Nothing is dropped.
* Reward filtering: the workflow's ``should_accept_fn`` rejects a trajectory (DAPO-style dynamic
  filtering is written as one); ``on_rollout_rejected`` decrements ``running`` and counts it
  rejected, not accepted, so the capacity it held returns.

The bound is on counts, not on each trajectory's age: a group admitted at ``v`` that straggles
can train after ``v + eta`` (measured with AReaL's own dispatcher in
tests/integrations/test_areal.py). It is therefore *not* a bounded policy here; its staleness is
reported, not asserted.
"""

from __future__ import annotations

from .api import INF, Group, Policy
from .base import members


class Areal(Policy):
    name = "areal"
    label = "AReaL"
    source = "inclusionAI/AReaL@4aef98d8 areal/infra/staleness_manager.py, workflow_executor.py"
    bounded = False

    def __init__(self, eta: int, max_concurrent_rollouts: int | None = None,
                 input_gating: bool = True, wait_timeout_s: float = 1.0) -> None:
        super().__init__(eta)
        if not wait_timeout_s > 0:
            raise ValueError(f"areal: wait_timeout_s must be > 0, got {wait_timeout_s!r}")
        self.max_concurrent = max_concurrent_rollouts
        self.input_gating = input_gating
        self.wait_timeout = wait_timeout_s

    def attach(self, sim) -> None:
        super().attach(sim)
        if self.max_concurrent is None:
            self.max_concurrent = self.batch_size
        self.running = 0
        self.accepted = 0
        self.rejected = 0
        self.pending = 0  # inputs enqueued, not yet submitted (the dispatcher's input queue)
        self.rounds = 0  # enqueue rounds of active_submit_and_wait
        self._results: list[Group] = []  # finished, not yet returned by wait_results
        self._collected: list[Group] = []  # accepted results of the batch being prepared
        self._waiting = False  # inside prepare_batch
        self._need = 0  # count of the current wait_results call

    def capacity(self) -> int:
        ahead = (self.eta + self.sim.version + 1) * self.batch_size
        return min(self.max_concurrent - self.running, ahead - (self.accepted + self.running))

    def admit(self) -> None:
        sim = self.sim
        while not sim.paused and self.capacity() > 0 and (self.pending or not self.input_gating):
            sim.admit()
            self.running += 1
            if self.input_gating:
                self.pending -= 1

    def on_group_done(self, group: Group) -> None:
        self.running -= 1
        if group.no_grad:  # should_accept_fn rejected it: on_rollout_rejected frees its quota
            self.rejected += 1
            self.sim.filter(group)
        else:
            self.accepted += 1
        self._results.append(group)  # wait_results sees rejected results too (as None)

    def _round(self) -> None:
        """One pass of active_submit_and_wait's loop: enqueue, then wait_results(count)."""
        self.rounds += 1
        room = (self.eta + 1) * self.batch_size - self.pending  # get_pending_limit() - pending
        if room > 0:
            self.pending += min(self.batch_size, room)
        self._need = self.batch_size - len(self._collected)
        self.sim.set_timer(self.sim.now + self.wait_timeout)
        self.admit()

    def on_timer(self) -> None:
        if self._waiting:  # wait_results timed out: the loop goes round again
            self._round()

    def take_batch(self):
        if not self.input_gating:
            return self._take_oldest()
        if not self._waiting:  # prepare_batch called
            self._waiting = True
            self._collected = []
            self._round()
        while (arrived := self._wait_results(self._need)) is not None:
            self._collected += [g for g in arrived if not g.no_grad]
            if len(self._collected) >= self.batch_size:
                batch, self._collected = self._collected[: self.batch_size], []
                self._waiting = False
                self.sim.set_timer(INF)
                return members(batch)
            self._round()  # rejected results among them: the loop goes round again
        return None

    def _wait_results(self, count: int) -> list[Group] | None:
        """``wait_results(count)``: the ``count`` oldest finished results, or None (wait)."""
        if len(self._results) < count:
            return None
        self._results.sort(key=lambda g: g.gid)  # oldest create_time first: submission order
        arrived, self._results = self._results[:count], self._results[count:]
        return arrived

    def _take_oldest(self):
        accepted = [g for g in self._results if not g.no_grad]
        if len(accepted) < self.batch_size:
            return None
        accepted.sort(key=lambda g: g.gid)  # create_time: strictly increasing per submission
        batch = accepted[: self.batch_size]
        taken = {g.gid for g in batch}
        self._results = [g for g in self._results if g.gid not in taken and not g.no_grad]
        return members(batch)

    def settings(self) -> dict:
        return {"eta": self.eta, "max_head_offpolicyness": self.eta,
                "max_concurrent_rollouts": self.max_concurrent,
                "input_gating": self.input_gating, "wait_timeout_s": self.wait_timeout}

    def describe_state(self) -> str:
        return (f"running={self.running} accepted={self.accepted} pending={self.pending} "
                f"results={len(self._results)} collected={len(self._collected)} "
                f"waiting={self._waiting} capacity={self.capacity()}")
