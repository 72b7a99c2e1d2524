"""One rollout schedule played through verl's async replay buffers, on a real TransferQueue.

verl's V1 trainer and its agent loop need GPUs; what decides staleness, drops and stalls is the
replay buffer, which talks to the rest only through TransferQueue (prompt tags ``pending`` /
``finished`` / ``failure`` with their ``global_steps``, trajectory rows ``{uid}_{session}_0``)
and ``refill_fn``. ``Rollout`` plays the agent loop's side of that on a simulated clock: every
prompt submitted gets the next duration of a fixed, seeded list (the same list for every
buffer: the same schedule), and writes its rows and then its terminal status into TransferQueue
(the order verl's ``agent_loop_tq.py`` keeps) when its time comes. ``play`` is the trainer
loop of ``PPOTrainer.fit``/``step`` for an async mode (warm-up, ``prepare_step``,
``parameter_sync_step`` samples, the row cleanup, the weight update), with training taking
``train_s`` of simulated time. The buffer's polls (``_wait_for_next_poll``) advance the clock
instead of sleeping, so a stall is measured in simulated seconds.

Used by tests/integrations/test_verl.py and bench/verl_compare.py.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
import transfer_queue as tq

TRAIN = "train"
# TransferQueue's default is two storage actors (one per node of a cluster); on one machine one
# does, and starts faster.
ONE_STORAGE_UNIT = {"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}


def durations(n: int, seed: int, *, mean_s: float = 1.0, tail: float = 0.1,
              tail_x: float = 6.0) -> list[float]:
    """Generation times: mostly around ``mean_s``, a fraction ``tail`` of stragglers that take
    ``tail_x`` times as long (the long-tailed lengths of reasoning rollouts)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        d = rng.uniform(0.5, 1.5) * mean_s
        if rng.random() < tail:
            d *= tail_x
        out.append(d)
    return out


@dataclass
class Rollout:
    """The agent loop's side of TransferQueue on a simulated clock."""

    schedule: list[float]
    sessions: int = 2
    fail_every: int = 0  # every Nth prompt ends in 'failure' (0: none)
    no_signal_every: int = 0  # every Nth prompt's sessions all get the same reward (0: none)
    now: float = 0.0
    global_steps: int = 1  # the trainer's step, stamped on submitted prompts
    submitted: int = 0
    running: dict[str, tuple[float, int, int]] = field(default_factory=dict)  # uid -> (t, tag, i)
    stamps: dict[str, int] = field(default_factory=dict)  # uid -> global_steps at submission

    def submit(self, k: int) -> int:
        """verl's ``refill_fn``: k fresh prompts tagged ``pending`` with the current step."""
        if self.submitted + k > len(self.schedule):
            raise RuntimeError(f"schedule of {len(self.schedule)} prompts used up")
        uids = [uuid.uuid4().hex for _ in range(k)]
        tags = [{"is_prompt": True, "status": "pending", "global_steps": self.global_steps}
                for _ in uids]
        tq.kv_batch_put(keys=uids, partition_id=TRAIN, tags=tags)
        for uid in uids:
            self.running[uid] = (self.now + self.schedule[self.submitted], self.global_steps,
                                 self.submitted)
            self.stamps[uid] = self.global_steps
            self.submitted += 1
        return k

    def advance(self, dt: float) -> None:
        """Let ``dt`` simulated seconds pass; prompts due write rows, then their status."""
        self.now += dt
        due = sorted((t, uid) for uid, (t, _, _) in self.running.items() if t <= self.now)
        for _, uid in due:
            _, tag, index = self.running.pop(uid)
            failed = self.fail_every and (index + 1) % self.fail_every == 0
            if not failed:
                keys = [f"{uid}_{s}_0" for s in range(self.sessions)]
                flat = self.no_signal_every and (index + 1) % self.no_signal_every == 0
                tq.kv_batch_put(keys=keys, partition_id=TRAIN,
                                fields=_rows(len(keys), flat),
                                tags=[{"is_prompt": False, "global_steps": tag} for _ in keys])
            tq.kv_put(key=uid, partition_id=TRAIN,
                      tag={"is_prompt": True, "status": "failure" if failed else "finished",
                           "global_steps": tag})


def _rows(n: int, flat: bool = False):
    """A group's trajectory rows; ``rm_scores`` (verl's reward field, read by its DAPO filter)
    alternate 0/1 across sessions, or are all 0 for a group without signal."""
    from tensordict import TensorDict

    scores = torch.zeros(n, 3) if flat else torch.tensor([[0.0, 0.0, float(i % 2)]
                                                          for i in range(n)])
    return TensorDict({"input_ids": torch.ones(n, 3, dtype=torch.long), "rm_scores": scores},
                      batch_size=[n])


@dataclass
class Result:
    name: str
    steps: int
    trained: list[int]  # staleness (global_steps - tag) of every trained group
    dropped: int  # finished groups verl evicted as too stale (generated, never trained)
    failed: int  # groups that ended in 'failure' (aborted / evicted, refilled)
    wait_s: float  # simulated seconds the trainer polled for a batch
    polls: int
    submitted: int
    end_s: float  # simulated time at the end of the last step

    @property
    def max_staleness(self) -> int:
        return max(self.trained)

    @property
    def mean_staleness(self) -> float:
        return sum(self.trained) / len(self.trained)


def clear_partition() -> None:
    data = (tq.kv_list(partition_id=TRAIN) or {}).get(TRAIN, {})
    if data:
        tq.kv_clear(keys=list(data), partition_id=TRAIN)


def play(name: str, buffer: Any, rollout: Rollout, *, steps: int, batch_size: int,
         parameter_sync_step: int = 1, train_s: float = 1.0, poll_s: float = 0.05,
         warmup_batches: float = 1, protocol: bool = False) -> Result:
    """``PPOTrainer.fit`` for an async mode, with ``buffer`` as its replay buffer.

    ``protocol``: the Reserve–Occupy trainer (no warm-up or per-step batches, ``admit`` at the
    start, ``publish`` after the weight update); else verl's trainer as shipped.
    """
    waits = {"polls": 0}

    def poll(partition_id: str, last_debug_time: float) -> float:
        waits["polls"] += 1
        rollout.advance(poll_s)
        return last_debug_time

    buffer._wait_for_next_poll = poll
    dropped = 0
    failed_before = 0
    trained: list[int] = []
    global_steps = 1
    rollout.global_steps = global_steps
    if protocol:
        buffer.admit(global_steps)
    elif warmup_batches:
        rollout.submit(int(warmup_batches * batch_size))
    for _ in range(steps):
        rollout.global_steps = global_steps
        if protocol:
            buffer.admit(global_steps)  # prepare_step: the slots the last publish made legal
        else:
            rollout.submit(batch_size)  # prepare_step: one batch, unconditionally
        keys: list[str] = []
        for _ in range(parameter_sync_step):
            meta, metrics = buffer.sample(global_steps, TRAIN, batch_size // parameter_sync_step)
            dropped += int(metrics.get("training/off_policy/evicted_samples", 0))
            failed_before += int(metrics.get("training/rollout_failure/evicted_samples", 0))
            uids = {k.split("_")[0] for k in meta.keys}
            trained += [global_steps - rollout.stamps[u] for u in uids]
            keys += meta.keys
            rollout.advance(train_s / parameter_sync_step)  # the mini-batch trains
        tq.kv_clear(keys=keys, partition_id=TRAIN)  # fit's cleanup after the step
        if protocol:
            buffer.publish(global_steps)  # on_step_end, after update_weights
        global_steps += 1
    failed = failed_before
    if protocol:
        failed = sum(1 for e in buffer.controller.events if e.op == "abort")
    return Result(name, steps, trained, dropped, failed, waits["polls"] * poll_s,
                  waits["polls"], rollout.submitted, rollout.now)


def verl_buffer(strategy: Optional[str], threshold: Optional[int], refill) -> Any:
    from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync

    return ReplayBufferAsync(trainer_mode="separate_async", trainer_config={},
                             max_off_policy_threshold=threshold,
                             max_off_policy_strategy=strategy or "drop", sampler_kwargs={},
                             poll_interval=0.05, refill_fn=refill)


def protocol_buffer(eta: int, batch_size: int, refill, parameter_sync_step: int = 1,
                    clock: Optional[Rollout] = None, **sampler_kwargs: Any) -> Any:
    """The Reserve–Occupy replay buffer; with ``clock``, its fail-safe times that rollout's
    simulated seconds (else the wall clock, as under verl)."""
    from reserve_occupy.integrations.verl import ReserveOccupyReplayBuffer

    timing = {} if clock is None else {"clock": lambda: clock.now}
    return ReserveOccupyReplayBuffer(
        trainer_mode="separate_async", trainer_config={"parameter_sync_step": parameter_sync_step},
        max_off_policy_threshold=None, max_off_policy_strategy="drop",
        sampler_kwargs={"max_staleness": eta, "batch_size": batch_size, "poll_interval": 0.05,
                        **sampler_kwargs},
        refill_fn=refill, **timing)


def compare(eta: int, *, seed: int = 0, steps: int = 8, batch_size: int = 8,
            parameter_sync_step: int = 1, with_unbounded: bool = False,
            **schedule_kw: Any) -> list[Result]:
    """verl as shipped (``drop`` and ``wait`` at threshold eta + 1; with ``with_unbounded``
    first its ``null`` threshold, no bound at all) and verl with Reserve–Occupy at eta, each on
    the same schedule; TransferQueue must be initialised."""
    sched = durations(steps * batch_size * 6, seed, **schedule_kw)
    out = []
    runs = [("verl, no bound (null)", "off"), ("verl drop", "drop"), ("verl wait", "wait"),
            ("verl + Reserve–Occupy", None)]
    for name, strategy in runs[0 if with_unbounded else 1:]:
        clear_partition()
        rollout = Rollout(sched)
        if strategy is None:
            buf = protocol_buffer(eta, batch_size, rollout.submit, parameter_sync_step)
        elif strategy == "off":
            buf = verl_buffer("drop", None, rollout.submit)
        else:
            buf = verl_buffer(strategy, eta + 1, rollout.submit)
        out.append(play(name, buf, rollout, steps=steps, batch_size=batch_size,
                        parameter_sync_step=parameter_sync_step, protocol=strategy is None))
    clear_partition()
    return out
