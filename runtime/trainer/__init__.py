"""Trainers behind the driver's ``Trainer`` protocol: the torch GRPO trainer (``grpo``)."""

from .base import GroupSample, Sample, StreamingTrainer, TrainBatch, Trainer

__all__ = ["GroupSample", "Sample", "StreamingTrainer", "TrainBatch", "Trainer"]
