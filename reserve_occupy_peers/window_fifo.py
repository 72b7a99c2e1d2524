"""torchtitan RL's windowed FIFO (MiniMax Forge's rule): slots charged at admission, the oldest
finished group inside a window of the oldest untaken ones.

Source: pytorch/torchtitan @ b5bcd76c66d0acb1a08b176d9639425bc55e0b2a (2026-08-21; windowed
FIFO landed in fd2776584fd0b85cf55ddc7e9ea1f804e6667d7d, PR #3927),
``torchtitan/experiments/rl/controller.py`` (``AsyncLoopConfig`` 155–258: defaults
``target_offpolicy_steps`` 3, ``num_prompts_per_train_step`` 8, ``window_fraction`` 0.3; the
window 176–183 and 224–245; ``max_offpolicy_steps`` 247–258),
``torchtitan/experiments/rl/components/work_buffer.py`` (``RolloutGroupWorkBuffer`` 54–260:
``wait_for_slot``/``add_work`` charge a slot at admission, ``claim_next`` hands the oldest
WAITING group to a worker, ``take_finalized`` 170–206, ``release_active_groups`` 215–238) and
``pytorch/torchtitan/docs/windowed_fifo.md`` (following the MiniMax paper, arXiv 2605.26494 section 6.2.4; the
Forge code itself is not public in the store).

**Issue 38's formula differs from the shipped code**: it gives ``window_size = min(buffer,
prompts_per_step x (max_off_policy - off_policy) + 1)``; torchtitan ships ``W = max(1,
floor(window_fraction x B))`` with ``B = (S + 1) x P`` (the batches-based window is PR #4826,
open, after the commit read). This peer implements the shipped formula.

* L1: at most ``B = max_active_rollout_groups = (S + 1) x P`` groups hold a slot (``S =
  target_offpolicy_steps``, ``P = num_prompts_per_train_step`` = the batch size). A slot is
  charged when the group is admitted (before it generates) and returns only when its step's
  weights are pulled (``release_active_groups(P, "trained")``: ``on_publish`` here) or, for a
  group with no trainable sample, at once, when the batcher takes it, and the freed slot admits
  the next group right away (the release's ``notify_all`` wakes ``wait_for_slot``; ``take_batch``
  calls ``admit`` itself, since its host need not ask again when no batch came back: without it
  the rule stalled at eta 1 with filtering, the B = P slots all held by the batch it could not
  finish). No version check.
* L3: ``take_finalized``: the window is the groups ``[head, head + W - 1]`` in admission order,
  ``head`` the oldest group not yet taken; the oldest *finished* group inside it is taken
  (groups beyond it wait even if finished; taking a non-head group does not move the window);
  the batcher packs ``P`` of them, a step trains once it has ``P``. Nothing is evicted for age.

eta is torchtitan's hard bound ``max_offpolicy_steps = (B + W - 2) // P = S + ceil((W - 1) /
P)`` (``S + 1`` while ``2 <= W <= P + 1``; ``S`` for W = 1): given eta, this peer runs ``S =
eta - 1`` with the shipped ``window_fraction`` 0.3 where that bound is exactly eta (P = 16: eta
1 to 3), else strict FIFO, ``S = eta`` and ``window_fraction = None`` (W = 1: eta 0, or a window
too small or too large to give eta, as at P = 4, eta 1, where W = floor(1.2) = 1);
``target_offpolicy_steps=S`` sets S directly and eta becomes the bound (the shipped defaults,
S = 3, P = 8, W = 9, give eta 4). The bound holds on the
*admission* version, not only on the generation version torchtitan measures: a group admitted
at version v has index n <= vP + B - 1 (its slot was free), and at most n + W - 1 groups are
taken before it (every older one, and the W - 1 after it its window lets through), so it
trains at step t with tP <= n + W - 1, t - v <= (B + W - 2) // P (a group filtered early frees
a slot and is also taken, so the count holds). **Never drops** for age (zero-variance groups are
filtered: ``filters = True``). **Strict.**
"""

from __future__ import annotations

from collections import OrderedDict

from .api import Group, Policy
from .base import members

DEFAULT_FRACTION = 0.3


def window_size(active: int, fraction: float | None) -> int:
    """``W = max(1, floor(fraction x B))``; ``None`` is strict FIFO (1)."""
    return 1 if fraction is None else max(1, int(fraction * active))


def max_offpolicy_steps(active: int, window: int, prompts: int) -> int:
    """torchtitan's ``max_offpolicy_steps``: ``(B + W - 2) // P``."""
    return (active + window - 2) // prompts


class WindowFifo(Policy):
    name = "window_fifo"
    label = "windowed FIFO"
    source = ("pytorch/torchtitan@b5bcd76c torchtitan/experiments/rl/components/work_buffer.py "
              "(RolloutGroupWorkBuffer), controller.py (AsyncLoopConfig)")
    bounded = True
    filters = True
    filters_at_sample = True  # skipped as the batch is assembled (take_batch)

    def __init__(self, eta: int, window_fraction: float | None = DEFAULT_FRACTION,
                 target_offpolicy_steps: int | None = None) -> None:
        super().__init__(eta)
        if window_fraction is not None and (
                isinstance(window_fraction, bool) or not isinstance(window_fraction, (int, float))
                or not 0 < window_fraction <= 1):
            raise ValueError(f"window_fifo: window_fraction must be in (0, 1] or None, got "
                             f"{window_fraction!r}")
        s = target_offpolicy_steps
        if s is not None and (isinstance(s, bool) or not isinstance(s, int) or s < 0):
            raise ValueError(f"window_fifo: target_offpolicy_steps must be an int >= 0, got "
                             f"{s!r}")
        self.fraction = window_fraction
        self.target = s

    def attach(self, sim) -> None:
        super().attach(sim)
        p = self.batch_size
        fraction = self.fraction
        if self.target is None:
            # S = eta - 1 with the window (bound S + 1 while W <= P + 1), else strict FIFO S = eta
            s = self.eta - 1
            if s < 0 or fraction is None or max_offpolicy_steps(
                    (s + 1) * p, window_size((s + 1) * p, fraction), p) != self.eta:
                s, fraction = self.eta, None
        else:
            s = self.target
        self.S, self.fraction = s, fraction
        self.active_max = (s + 1) * p  # B
        self.window = window_size(self.active_max, fraction)
        self.bound = max_offpolicy_steps(self.active_max, self.window, p)
        if self.target is not None:
            self.eta = self.bound  # what the rule enforces
        self.active = 0  # slots charged
        self.n = 0  # admission index
        self.order: OrderedDict[int, Group] = OrderedDict()  # not yet taken, admission order
        self.batch: list[Group] = []
        self._trained: list[int] = []  # per step handed to the trainer, slots to release

    def admit(self) -> None:
        sim = self.sim
        while self.active < self.active_max:  # wait_for_slot, add_work
            self.order[self.n] = sim.admit()
            self.n += 1
            self.active += 1

    def _take_finalized(self) -> Group | None:
        if not self.order:
            return None
        head = next(iter(self.order))
        for index, g in self.order.items():
            if index > head + self.window - 1:
                return None
            if g.done:
                del self.order[index]
                return g
        return None

    def take_batch(self):
        while len(self.batch) < self.batch_size:
            g = self._take_finalized()
            if g is None:
                return None
            if g.no_grad:  # no trainable sample: the slot returns at once
                self.sim.filter(g)
                self.active -= 1  # release_active_groups(1, reason="untrainable_group")
                self.admit()  # whose notify_all wakes the data-input loop's wait_for_slot
                continue
            self.batch.append(g)
        batch, self.batch = self.batch, []
        self._trained.append(len(batch))
        return members(batch)

    def on_publish(self, version: int) -> None:
        if self._trained:  # release_active_groups(P, "trained") after the weight pull
            self.active -= self._trained.pop(0)

    def settings(self) -> dict:
        return {"eta": self.eta, "target_offpolicy_steps": self.S,
                "num_prompts_per_train_step": self.batch_size,
                "max_active_rollout_groups": self.active_max,
                "window_fraction": self.fraction, "window_size": self.window,
                "max_offpolicy_steps": self.bound}

    def describe_state(self) -> str:
        head = next(iter(self.order), None)
        return (f"active={self.active}/{self.active_max} head={head} W={self.window} "
                f"untaken={len(self.order)} batch={len(self.batch)}")
