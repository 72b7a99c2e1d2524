"""What the driver needs from a generation engine: the ``Rollout`` protocol and its values.

One request generates one candidate (one sequence); the driver runs a group's candidates as
separate requests so that each can be aborted (oversampling surplus, timeouts) and resumed
(partial rollout) on its own. The driver brackets every weight load with ``pause`` and
``resume``, in one of two refit modes (``rollout.refit``):

* ``"abort"``: ``pause`` ends every running request (each ``generate`` call returns its partial
  segment with ``finish_reason == "abort"``), and no request runs between ``pause`` and
  ``resume``, so every token of a segment comes from one weight version.
* ``"keep"`` (in-flight refit): ``pause`` freezes the running requests without ending them;
  after ``load_weights`` and ``resume`` they continue, their KV cache kept (computed by the
  older weights). A segment then spans weight versions, and says where: ``Segment.refits``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable


REFIT_MODES = ("abort", "keep")  # rollout.refit; "abort" is the source protocol's


def check_refit_mode(mode: str) -> None:
    if mode not in REFIT_MODES:
        raise ValueError(f"refit mode must be one of {', '.join(REFIT_MODES)} (got {mode!r})")


@dataclass(frozen=True)
class GenerationRequest:
    request_id: str
    prompt_ids: list[int]  # the prompt, plus the tokens kept so far when resuming
    max_tokens: int  # new tokens allowed in this segment
    temperature: float = 1.0
    seed: int | None = None
    ignore_eos: bool = False


@dataclass
class Segment:
    """What one request produced. ``logprobs[i]`` is the sampling distribution's log-probability
    of ``token_ids[i]`` (after temperature) under the weights the segment ran with."""

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "abort"  # "stop" (end token), "length" (max_tokens) or "abort"
    # In-flight refits (pause mode "keep") inside this segment: (i, v) for each weight load
    # that took effect while it ran, in order: token_ids[i:] came from the weights ``load_weights``
    # was given with version v (until the next entry). Empty: one version made every token.
    refits: list[tuple[int, int]] = field(default_factory=list)


def token_versions(version: int, segment: Segment) -> list[int]:
    """The weight version of each of ``segment``'s tokens, for a segment that started under
    ``version``: ``version`` up to its first refit, then each refit's own."""
    versions = [version] * len(segment.token_ids)
    last = 0
    for start, v in segment.refits:
        if not last <= start <= len(versions):
            raise ValueError(f"refit at token {start} of a {len(versions)}-token segment "
                             f"(refits {segment.refits})")
        versions[start:] = [v] * (len(versions) - start)
        last = start
    return versions


class RolloutDead(RuntimeError):
    """The engine is gone; no later request can succeed, so the run must stop."""


@runtime_checkable
class Tokenizer(Protocol):
    eos_token_id: int | None

    def encode(self, text: str) -> list[int]: ...

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str: ...


@runtime_checkable
class Rollout(Protocol):
    tokenizer: Tokenizer

    async def generate(self, request: GenerationRequest) -> Segment:
        """Run one request to its end (stop, length or abort). Raises on engine errors;
        ``RolloutDead`` when the engine cannot serve any further request."""
        ...

    async def abort(self, request_ids: Sequence[str]) -> None:
        """End these requests early; unknown or finished ids are ignored."""
        ...

    async def pause(self, mode: str = "abort") -> None:
        """Stop generating. ``"abort"``: end every running request (they return partial
        segments). ``"keep"``: freeze them; they continue after ``resume``. Either way, until
        ``resume``, a new request returns at once, empty, with ``finish_reason == "abort"``."""
        ...

    async def load_weights(self, path: Path, version: int | None = None) -> None:
        """Load the weights saved in ``path`` (a directory with ``model.safetensors``); tokens
        generated with them are attributed to ``version`` in ``Segment.refits``."""
        ...

    async def resume(self) -> None:
        """Serve requests again after ``pause``."""
        ...

    async def close(self) -> None: ...
