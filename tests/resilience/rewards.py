"""Rewards for the kill-and-resume runs on the fake engine, whose answers are random digits:
the exact-answer reward would be 0 almost always and filter nearly every group."""

from __future__ import annotations


def parity(prompt, completion: str) -> float:
    """1 when the completion has an even number of characters: variance inside most groups."""
    return float(len(completion) % 2 == 0)
