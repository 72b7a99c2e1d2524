"""PSRL with fine-grain overlap: the Reserve–Occupy buffers, the trainer taking them in chunks.

Source: psrl-project/psrl @ dcf2716ef8ea1b13d5a7da221ec6ad9217050d7f,
``psrl/trainer/ppo/strategies/fine_grain_overlap.py`` (``FineGrainOverlapStrategy.run_step``),
``psrl/utils/config.py`` (``resolve_fine_grain_chunk_size``) and the agent loop manager's
``wait_for_training_chunk``. Admission and placement are the staleness controller's, as in
``reserve_occupy`` (PSRL is the protocol's own framework). The trainer asks for chunk 0, 1, ...
of the head buffer; each chunk is ``chunk_groups`` prompt groups emitted as they occupy the
buffer, the last one flagged when the buffer is READY, so here ``streaming`` and
``chunk_exact`` are on (chunks of exactly the trainer's ``chunk_groups``).

What a chunk runs depends on ``overlap_scope``. Its default, ``recompute``, runs only the
per-sample stages per chunk (old and reference log-probs, rewards); advantages and the actor
update run once on the concatenated batch after the last chunk. That is the cost model's
``chunk_share`` (``cost.TrainCost``): 0.2 for the old-log-prob forward of the preset's 10N FLOP
per token; the simulator's studies set it for this policy. ``pre_step`` (an optimizer step per
mini-batch chunk) changes the update itself and is not modelled. The granularity's default is
``none`` (the whole batch: this policy on a whole-batch trainer is ``reserve_occupy``).
"""

from __future__ import annotations

from .reserve_occupy import ReserveOccupy


class PsrlFineGrain(ReserveOccupy):
    name = "psrl_fine_grain"
    label = "PSRL fine-grain"
    source = "psrl-project/psrl@dcf2716e psrl/trainer/ppo/strategies/fine_grain_overlap.py"

    def __init__(self, eta: int, **options) -> None:
        options.setdefault("streaming", True)
        options.setdefault("chunk_exact", True)
        super().__init__(eta, **options)
