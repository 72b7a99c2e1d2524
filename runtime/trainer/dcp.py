"""The sharded trainer's checkpoint format on disk (``runtime.trainer.rank``): model and AdamW
state as a ``torch.distributed.checkpoint`` directory, ``sharded/``, inside a checkpoint
directory that also holds the consolidated model. Read here by both trainers."""

from __future__ import annotations

from pathlib import Path

import torch

SHARDED_DIR = "sharded"  # the torch.distributed.checkpoint directory inside a checkpoint


def load_dcp(model: torch.nn.Module, opt: torch.optim.Optimizer, path: Path) -> None:
    """Model and optimizer state from a checkpoint's ``sharded/`` directory, resharded to this
    process group's world size, or into a plain model in one process without a process group
    (``GRPOTrainer._load``: a sharded run resumed by the single-process trainer)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_sd, optim_sd = get_state_dict(model, opt)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=path / SHARDED_DIR)
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
