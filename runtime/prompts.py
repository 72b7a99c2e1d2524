"""The text a prompt becomes for the model: its chat template applied, or the string as is.

``render_prompts`` turns every loaded prompt into what the engine is sent (and the trainer's
log-probabilities are conditioned on, since both encode ``Prompt.text``):

* a conversation (``Prompt.messages``) is rendered with the tokenizer's chat template and the
  generation prompt (the opening of the assistant's turn); a tokenizer without a template, or
  ``data.chat_template: false``, is an error naming the prompt;
* a plain string becomes one user message when the tokenizer has a template and
  ``data.chat_template`` is true (an instruct model sees the format it was tuned on), and stays
  as is otherwise (a base model, or the embedded tiny model).

A template that writes the beginning-of-sequence token itself, for a tokenizer that also adds
it when encoding (Llama's), would give the model two: the rendered text drops its own, the way
``apply_chat_template(tokenize=True)`` avoids it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .tasks.base import Prompt


class TemplateError(ValueError):
    """A prompt cannot be rendered with this tokenizer and setting."""


def has_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def render_prompts(prompts: Sequence[Prompt], tokenizer: Any, chat_template: bool = True,
                   where: str = "the model") -> list[Prompt]:
    """Each prompt with ``text`` the model's input; prompts already rendered pass through.
    ``where`` names the tokenizer's model in errors."""
    templated = chat_template and has_template(tokenizer)
    bos = _doubled_bos(tokenizer) if templated else None
    out = []
    for p in prompts:
        if p.rendered:
            out.append(p)
            continue
        if p.messages is None and not templated:
            out.append(dataclasses.replace(p, rendered=True))
            continue
        if p.messages is not None and not templated:
            why = ("data.chat_template is false" if not chat_template
                   else f"the tokenizer of {where} has no chat template")
            raise TemplateError(f"prompt {p.index} is a conversation but {why}: set a chat "
                                f"template in its tokenizer_config.json, or give plain-string "
                                f"prompts")
        messages = list(p.messages or ({"role": "user", "content": p.text},))
        try:
            text = tokenizer.apply_chat_template(messages, tokenize=False,
                                                 add_generation_prompt=True)
        except Exception as exc:  # jinja raises its own types (a template's raise_exception)
            raise TemplateError(f"prompt {p.index}: the chat template of {where} cannot render "
                                f"it ({type(exc).__name__}: {exc})") from None
        if bos and text.startswith(bos):
            text = text[len(bos):]
        out.append(dataclasses.replace(p, text=text, messages=tuple(messages), rendered=True))
    return out


def _doubled_bos(tokenizer: Any) -> str | None:
    """The BOS token's text when encoding adds it (so a template's own would be a second)."""
    bos_id = getattr(tokenizer, "bos_token_id", None)
    if bos_id is None:
        return None
    ids = tokenizer.encode("a")
    return tokenizer.bos_token if ids and ids[0] == bos_id else None


def render_for_model(prompts: Sequence[Prompt], model_path: Path | None, chat_template: bool,
                     tokenizer: Any = None) -> list[Prompt]:
    """``render_prompts`` with ``model_path``'s tokenizer (or ``tokenizer``)."""
    if all(p.rendered for p in prompts):
        return list(prompts)
    if tokenizer is None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    return render_prompts(prompts, tokenizer, chat_template, where=str(model_path or "the "
                                                                       "tiny model"))
