"""Real models' chat templates (issue #33): each renders as transformers renders it, and trains what it should,
or refuses a conversation with a reason the chat guide (docs/guides/chat.md) lists; never a silent all-zero or misplaced mask.

Templates: tests/data/chat_templates (PROVENANCE.md: where each comes from, its license) and today's from
../shared/tokenizers. Each is applied with a tokenizer we have, the model's own where we have it (Llama's for
Llama 3.1 and Hermes 3, Mistral-Nemo's Tekken for Mistral-Small), Qwen2.5's otherwise, as
`--chat_template FILE.jinja` would apply it. For every case:

- **ok**: the text and ids equal transformers' `apply_chat_template(..., chat_template=T)`; the mask equals
  transformers' `return_assistant_tokens_mask` when the template has `{% generation %}` blocks; otherwise
  every token inside an assistant's content is trained, no token inside another message's content is, every
  tool call's name is trained, and reasoning the template writes for a turn is trained with it;
- **a reason**: the conversation is refused with it (when transformers itself raises, the reason is
  template_error).

`EXPECTED` is the table in docs/guides/chat.md ("Real templates").
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from tests.chat_helpers import backend, hf_tokenizer, tokenizer_config
from transforms.core.chat.encode import ChatEncoder, parse_chat
from transforms.core.chat.template import ChatError, ChatRenderer, template_from_config, template_tokens

HERE = Path(__file__).parent / "data" / "chat_templates"

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}

CASES = {
    "plain": {"messages": [
        {"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell a joke."}, {"role": "assistant", "content": "Why did the chicken cross?"}]},
    "system": {"messages": [
        {"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello."}]},
    "tools": {"messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "abcdefghi", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "sunny 21", "tool_call_id": "abcdefghi", "name": "get_weather"},
        {"role": "assistant", "content": "Sunny, 21 degrees."}], "tools": [WEATHER]},
    "reasoning": {"messages": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4.", "reasoning_content": "Two plus two is four."},
        {"role": "user", "content": "3+3?"},
        {"role": "assistant", "content": "6.", "reasoning_content": "Three plus three is six."}]},
    "think_in_content": {"messages": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>\nTwo plus two.\n</think>\n\n4."}]},
}

# template -> (tokenizer, {case: "ok" or the reason it is refused})
OK = {case: "ok" for case in CASES}
EXPECTED = {
    # today's, from ../shared/tokenizers
    "qwen2.5-instruct": ("qwen2.5-instruct", OK),
    "qwen2.5-instruct-genmask": ("qwen2.5-instruct-genmask", OK),
    "llama3-instruct": ("llama3-instruct", {**OK, "tools": "tools_not_rendered"}),
    "mistral-nemo-instruct": ("mistral-nemo-instruct", {**OK, "system": "system_not_rendered"}),
    # from tests/data/chat_templates
    "google-gemma-2-2b-it": ("qwen2.5-instruct", {**OK, "system": "template_error", "tools": "template_error"}),
    "microsoft-Phi-3.5-mini-instruct": ("qwen2.5-instruct", {**OK, "tools": "tools_not_rendered"}),
    "meta-llama-Llama-3.1-8B-Instruct": ("llama3-instruct", OK),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": ("qwen2.5-instruct", {**OK, "tools": "tools_not_rendered",
                                                                      "think_in_content": "content_rewritten"}),
    "Qwen-Qwen3-0.6B": ("qwen2.5-instruct", OK),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": ("llama3-instruct", {
        case: "template_error" for case in CASES if case != "tools"} | {"tools": "ok"}),
    "Mistral-Small-3.2-24B-Instruct-2506": ("mistral-nemo-instruct", OK),
}


def _template(name: str) -> str:
    path = HERE / f"{name}.jinja"
    return path.read_text() if path.exists() else template_from_config(tokenizer_config(name))


def _hf(tokenizer: str, template: str, record: dict, **kwargs):
    return hf_tokenizer(tokenizer).apply_chat_template([dict(m) for m in record["messages"]], tools=record.get("tools"),
                                                       chat_template=template, **kwargs)


def _inside(offsets: np.ndarray, a: int, b: int) -> np.ndarray:
    """Tokens whose characters lie within [a, b)."""
    return (offsets[:, 0] >= a) & (offsets[:, 1] <= b) & (offsets[:, 1] > offsets[:, 0])


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_real_template_renders_as_transformers_and_trains_the_assistant(name, case):
    tokenizer, outcomes = EXPECTED[name]
    template, record = _template(name), CASES[case]
    renderer = ChatRenderer(template, template_tokens(tokenizer_config(tokenizer)))
    encoder = ChatEncoder(renderer, backend(tokenizer))
    conversation = parse_chat(json.dumps(record))
    expected = outcomes[case]
    if expected != "ok":
        with pytest.raises(ChatError) as info:
            encoder.encode(conversation)
        assert info.value.reason == expected, info.value
        if expected == "template_error":  # transformers refuses it too
            with pytest.raises(Exception):
                _hf(tokenizer, template, record, tokenize=False)
        return
    got = encoder.encode(conversation)
    assert got.text == _hf(tokenizer, template, record, tokenize=False)
    assert got.ids.tolist() == list(_hf(tokenizer, template, record, tokenize=True, return_dict=True)["input_ids"])
    trained, offsets = got.trained, got.offsets
    assert trained.any()
    if renderer.has_generation:
        want = _hf(tokenizer, template, record, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
        assert np.array_equal(trained, np.array(want["assistant_masks"], bool))
        return
    for m, turn in zip(conversation.messages, got.turns):
        inside = _inside(offsets, *turn.chars)
        if m["role"] == "assistant":
            assert trained[inside].all(), (m, got.text[slice(*turn.chars)])
        else:
            assert not trained[inside].any(), (m, got.text[slice(*turn.chars)])
    trained_text = "".join(got.text[a:b] for (a, b), t in zip(offsets.tolist(), trained) if t)
    for m in conversation.messages:
        for call in m.get("tool_calls") or ():
            assert call["function"]["name"] in trained_text
        reasoning = m.get("reasoning_content")
        if reasoning and reasoning in got.text:  # written for this turn (Qwen3: the last turn's only)
            assert reasoning in trained_text


def test_the_readme_table_is_the_expected_one():
    """The chat guide's table of real templates says what EXPECTED says."""
    readme = (Path(__file__).parents[1] / "docs" / "guides" / "chat.md").read_text()
    table = "\n".join(line.strip() for line in
                      readme[readme.index("<!-- real-templates -->"):readme.index("<!-- /real-templates -->")]
                      .splitlines())
    for name, (tokenizer, outcomes) in EXPECTED.items():
        row = next(line for line in table.splitlines() if line.startswith(f"| {name} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] == tokenizer and cells[2:] == [outcomes[c] for c in CASES], row
    header = next(line for line in table.splitlines() if line.startswith("| template |"))
    assert re.findall(r"\| (\w+) ", header)[2:] == list(CASES)
