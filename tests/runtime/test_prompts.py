"""Prompts as the model sees them: conversational records and plain strings load, the
tokenizer's chat template renders them (or is turned off), and a conversation that meets a
tokenizer without a template is refused with one line, at ``--check`` already."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.cli import main
from runtime.data import DataError, load_prompts
from runtime.models.tiny import CHAT_TEMPLATE, build_tokenizer
from runtime.prompts import TemplateError, render_prompts

ROOT = Path(__file__).resolve().parents[2]
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+3="}]


def _write(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_conversational_and_plain_records_load(tmp_path):
    data = _write(tmp_path / "d.jsonl", [{"prompt": CHAT, "answer": 5},
                                         {"prompt": "1+1=", "answer": "2"}])
    conv, plain = load_prompts(data)
    assert conv.messages == tuple(CHAT) and conv.text == "" and conv.answer == "5"
    assert plain.messages is None and plain.text == "1+1=" and not plain.rendered


@pytest.mark.parametrize("prompt, needle", [
    ([], "empty conversation"),
    ([{"role": "user"}], "prompt[0] must be an object with string 'role' and 'content'"),
    ([{"role": "robot", "content": "x"}], "role 'robot'"),
    ([{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
     "ends with an assistant message"),
    (7, "must be a non-empty string or a list"),
])
def test_a_bad_conversation_is_a_data_error_naming_the_line(tmp_path, prompt, needle):
    data = _write(tmp_path / "d.jsonl", [{"prompt": "1+1=", "answer": 2},
                                         {"prompt": prompt, "answer": 1}])
    with pytest.raises(DataError) as exc:
        load_prompts(data)
    assert "d.jsonl:2: " in str(exc.value) and needle in str(exc.value)


def test_the_template_renders_conversations_and_wraps_plain_strings(tmp_path):
    data = _write(tmp_path / "d.jsonl", [{"prompt": CHAT, "answer": 5},
                                         {"prompt": "1+1=", "answer": 2}])
    tok = build_tokenizer(chat=True)
    conv, plain = render_prompts(load_prompts(data), tok)
    assert conv.text == "<|system|>Be brief.<|end|><|user|>2+3=<|end|><|assistant|>"
    assert plain.text == "<|user|>1+1=<|end|><|assistant|>"
    assert conv.rendered and plain.messages == ({"role": "user", "content": "1+1="},)
    # whole role tokens, not characters
    assert tok.convert_ids_to_tokens(tok.encode(conv.text))[0] == "<|system|>"
    # rendering is done once: rendered prompts pass through unchanged
    assert render_prompts([conv, plain], tok) == [conv, plain]
    # turned off: plain strings stay as they are, conversations cannot be sent
    (raw,) = render_prompts(load_prompts(data)[1:], tok, chat_template=False)
    assert raw.text == "1+1=" and raw.rendered
    with pytest.raises(TemplateError, match="prompt 0 is a conversation but "
                                            "data.chat_template is false"):
        render_prompts(load_prompts(data), tok, chat_template=False)


def test_a_conversation_needs_a_tokenizer_with_a_template(tmp_path):
    data = _write(tmp_path / "d.jsonl", [{"prompt": "1+1=", "answer": 2},
                                         {"prompt": CHAT, "answer": 5}])
    plain_tok = build_tokenizer()
    assert plain_tok.chat_template is None
    (p,) = render_prompts(load_prompts(data)[:1], plain_tok)  # no template: text as is
    assert p.text == "1+1="
    with pytest.raises(TemplateError, match="prompt 1 is a conversation but the tokenizer of "
                                            "m has no chat template"):
        render_prompts(load_prompts(data), plain_tok, where="m")


def test_a_template_that_writes_bos_is_not_given_a_second_one(tmp_path):
    from tokenizers import processors

    tok = build_tokenizer(chat=True)
    tok._tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.bos_token_id)])
    tok.chat_template = "<s>" + CHAT_TEMPLATE
    data = _write(tmp_path / "d.jsonl", [{"prompt": CHAT}])
    (p,) = render_prompts(load_prompts(data, answer_field=None), tok)
    ids = tok.encode(p.text)
    assert ids.count(tok.bos_token_id) == 1 and ids[0] == tok.bos_token_id


def _check(tmp_path, *sets: str) -> int:
    args = ["train", "--check", "--output-dir", str(tmp_path / "out")]
    for s in sets:
        args += ["--set", s]
    return main(args)


def test_check_refuses_a_conversation_the_model_cannot_render(tmp_path, capsys):
    data = _write(tmp_path / "d.jsonl", [{"prompt": CHAT, "answer": 5}] * 3)
    assert _check(tmp_path, f"data.path={data}") == 2  # the tiny model has no template
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "prompt 0 is a conversation but the tokenizer of the tiny model has no chat " \
           "template" in err
    assert _check(tmp_path, f"data.path={data}", "model.tiny.chat=true",
                  "data.chat_template=false") == 2
    assert "data.chat_template is false" in capsys.readouterr().err
    assert _check(tmp_path, f"data.path={data}", "model.tiny.chat=true") == 0


def test_check_renders_with_the_model_directorys_template(tmp_path, tiny_chat_model, capsys):
    data = _write(tmp_path / "d.jsonl", [{"prompt": CHAT, "answer": 5}] * 3)
    assert _check(tmp_path, f"data.path={data}", f"model.path={tiny_chat_model}") == 0
    # the rendered prompt is what is measured against max_model_len
    n = len(build_tokenizer(chat=True).encode(render_prompts(load_prompts(data),
                                                             build_tokenizer(chat=True))[0].text))
    assert _check(tmp_path, f"data.path={data}", f"model.path={tiny_chat_model}",
                  "rollout.max_tokens=8", f"rollout.max_model_len={n + 7}") == 2
    assert f"prompt 0 is {n} tokens" in capsys.readouterr().err
