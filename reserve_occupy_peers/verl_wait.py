"""verl's V1 async trainer with ``max_off_policy_strategy: wait`` (dropless, head-of-line
blocking).

Source: verl-project/verl @ 1dda039b9c6311889a9c9a26040677e1254814f9 (2026-08-22),
``verl/trainer/ppo/v1/replay_buffer.py`` (``ReplayBufferAsync.wait_for_sampleable`` 547–574,
``_has_enough_samples`` 524–539, ``_evict_terminal_groups`` 328–364, ``_select_prompt_uids``
366–375), ``verl/trainer/ppo/v1/trainer_base.py`` (``_submit_batch_to_rollout`` 1386–1395,
``step`` 509–535), ``verl-project/verl/docs/advance/v1_async_trainer.md`` (69–70, 93: "wait" is dropless) and
``verl/trainer/config/_generated_ppo_trainer.yaml`` 1000–1001 (``max_off_policy_threshold`` 8,
``max_off_policy_strategy`` ``drop``: ``wait`` is the non-default strategy).

verl V1's ``drop`` strategy (its default) is the existing ``verl_drop`` peer (same file, same
commit): issue 38's ``verl_v1_drop`` is that rule and is not duplicated. This rule differs from
it only in L3 (``_sample``), everything else (L1: warm-up and 1:1 refills, tags = submission
step; ``parameter_sync_step`` mini-batches; reward-filter eviction) is ``verl_drop``'s:

* no staleness eviction: a finished group is never dropped for its age;
* ``_has_enough_samples`` is False while **any pending or running** group has
  ``global_steps - tag + 1 >= max_off_policy_threshold``: the step waits for it (head-of-line
  blocking), then takes the smallest tags first.

eta: ``max_off_policy_threshold = eta + 1``, as for ``verl_drop`` (verl's default 8 is
staleness 7). **Never drops for staleness** (DAPO-filtered groups are still evicted and
refilled). **Not strict, and verl does not assert it** (``sample``'s span assertion is the
``drop`` branch's): the wait keeps an *in-flight* group from passing the deadline, but a
*finished* group that is already over-age is neither evicted nor refused: it trains at its
age whenever the backlog of over-age finished groups exceeds what a step takes. With
``num_warmup_batches = 1`` and ``eta = 0`` it happens at once (the warm-up batch trains at
staleness 1: tests/peers/test_peers_2026.py works it by hand). Hence ``bounded = False``:
``check-trace --peer verl_wait`` reports the trained staleness and the units over eta.
"""

from __future__ import annotations

from .api import Group
from .verl_drop import VerlDrop


class VerlWait(VerlDrop):
    name = "verl_wait"
    label = "verl wait"
    source = ("verl-project/verl@1dda039b verl/trainer/ppo/v1/replay_buffer.py "
              "(ReplayBufferAsync, max_off_policy_strategy=wait)")
    bounded = False  # bounded for in-flight groups by blocking; finished backlog is not

    def attach(self, sim) -> None:
        super().attach(sim)
        self._pending: dict[int, Group] = {}  # submitted (pending or running), not finished
        self.blocked = 0  # samples refused by the head-of-line block

    def admit(self) -> None:
        sim = self.sim
        while self._to_submit:
            group = sim.admit()
            group.tag = self.step
            self._pending[group.gid] = group
            self._to_submit -= 1

    def on_group_done(self, group: Group) -> None:
        self._pending.pop(group.gid, None)
        super().on_group_done(group)

    def _sample(self, size: int) -> list[Group] | None:
        """``ReplayBufferAsync.sample`` with ``wait``: evict and refill the DAPO-filtered
        groups only; no sample while a pending or running group reached the threshold."""
        dapo = [g for g in self._finished if g.no_grad]
        if dapo:
            gone = {g.gid for g in dapo}
            self._finished = [g for g in self._finished if g.gid not in gone]
            for g in dapo:
                self.sim.filter(g)
            self._to_submit += len(dapo)
            self.admit()
        if any(self.step - g.tag + 1 >= self.threshold for g in self._pending.values()):
            self.blocked += 1
            return None
        if len(self._finished) < size:
            return None
        self._finished.sort(key=lambda g: g.tag)  # stable: ties keep completion order
        chunk, self._finished = self._finished[:size], self._finished[size:]
        return chunk

    def settings(self) -> dict:
        return {**super().settings(), "strategy": "wait"}

    def describe_state(self) -> str:
        return f"{super().describe_state()} pending={len(self._pending)}"
