"""Chat templates: ChatRenderer against transformers' apply_chat_template on the shipped templates, and the details.

The conversation strategies and tokenizer loading are tests/chat_helpers.py's.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.chat_helpers import TEMPLATES, conversations, hf_tokenizer, renderer, tokenizer_config
from transforms.core.chat.template import (CHATML, SPECIAL_TOKEN_KEYS, ChatError, ChatRenderer, template_from_config,
                                           template_tokens)

# ----------------------------------------------------------------------------- the oracle


def _same_as_transformers(name, messages, add_generation_prompt):
    hf = hf_tokenizer(name)
    try:
        expected = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    except Exception as e:  # the template raised: so must we
        with pytest.raises(ChatError) as info:
            renderer(name).render(messages, add_generation_prompt=add_generation_prompt)
        assert info.value.reason == "template_error"
        return type(e)
    got = renderer(name).render(messages, add_generation_prompt=add_generation_prompt)
    assert got.text == expected
    return None


@pytest.mark.parametrize("name", TEMPLATES)
@settings(max_examples=100, deadline=None)
@given(data=st.data(), add_generation_prompt=st.booleans())
def test_render_equals_transformers(name, data, add_generation_prompt):
    alternate = TEMPLATES[name]
    messages = data.draw(conversations(alternate=alternate, end_with_assistant=False, tool=not alternate))
    _same_as_transformers(name, messages, add_generation_prompt)


@pytest.mark.parametrize("name", TEMPLATES)
def test_render_errors_as_transformers(name):
    """Templates that raise (Mistral: roles must alternate) raise a ChatError("template_error") here."""
    bad = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    raised = _same_as_transformers(name, bad, False)
    assert (raised is not None) == TEMPLATES[name]


@settings(max_examples=40, deadline=None)
@given(messages=conversations(tool=True))
def test_generation_spans_equal_transformers(messages):
    """The {% generation %} spans are transformers' own (render_jinja_template with the assistant mask)."""
    pytest.importorskip("transformers")
    from transformers.utils.chat_template_utils import render_jinja_template

    name = "qwen2.5-instruct-genmask"
    hf = hf_tokenizer(name)
    rendered, indices = render_jinja_template([messages], chat_template=hf.chat_template,
                                              return_assistant_tokens_mask=True, **hf.special_tokens_map)
    got = renderer(name).render(messages)
    assert got.text == rendered[0]
    assert list(got.generation) == [tuple(x) for x in indices[0]]
    assert len(got.generation) == sum(m["role"] == "assistant" for m in messages)
    for (a, b), m in zip(got.generation, [m for m in messages if m["role"] == "assistant"]):
        assert got.text[a:b] == "\n" + m["content"] + "<|im_end|>\n"


def test_plain_qwen_template_is_genmask_without_markers():
    """The genmask template renders the same text as Qwen's own (the rule-vs-markers test relies on it)."""
    messages = [{"role": "system", "content": ""}, {"role": "user", "content": "a"},
                {"role": "assistant", "content": " b\n"}, {"role": "tool", "content": "c"}]
    for g in (False, True):
        assert renderer("qwen2.5-instruct").render(messages, add_generation_prompt=g).text == \
            renderer("qwen2.5-instruct-genmask").render(messages, add_generation_prompt=g).text


def test_template_tokens_equal_transformers():
    for name in TEMPLATES:
        named = {k: v for k, v in hf_tokenizer(name).special_tokens_map.items() if k in SPECIAL_TOKEN_KEYS}
        assert template_tokens(tokenizer_config(name)) == named


def test_chatml_equals_transformers():
    hf = hf_tokenizer("qwen2.5-instruct")
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": " u\n"},
                {"role": "assistant", "content": "a"}]
    for g in (False, True):
        expected = hf.apply_chat_template(messages, chat_template=CHATML, tokenize=False, add_generation_prompt=g)
        assert ChatRenderer(CHATML, {}).render(messages, add_generation_prompt=g).text == expected


# ----------------------------------------------------------------------------- without transformers


def test_chatml():
    r = ChatRenderer(CHATML, {})
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]
    assert r.render(messages).text == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n"
    assert r.render(messages[:1], add_generation_prompt=True).text == \
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert r.render(messages).generation == ()


def test_template_from_config():
    assert template_from_config({}) is None
    assert template_from_config({"chat_template": None}) is None
    assert template_from_config({"chat_template": "T"}) == "T"
    assert template_from_config({"chat_template": [{"name": "tool_use", "template": "U"},
                                                   {"name": "default", "template": "D"}]}) == "D"
    with pytest.raises(ValueError, match="tool_use"):
        template_from_config({"chat_template": [{"name": "tool_use", "template": "U"}]})
    with pytest.raises(ValueError):
        template_from_config({"chat_template": 3})


def test_template_tokens():
    added = {"__type": "AddedToken", "content": "<s>", "lstrip": False, "special": True}
    cfg = {"bos_token": added, "eos_token": "</s>", "unk_token": None, "pad_token": None, "model_max_length": 5,
           "additional_special_tokens": ["<x>"]}
    assert template_tokens(cfg) == {"bos_token": "<s>", "eos_token": "</s>"}
    # special_tokens_map.json is read only for configs without added_tokens_decoder, and then wins
    stm = {"eos_token": {"content": "<|e|>"}, "pad_token": "<pad>", "additional_special_tokens": ["<y>"]}
    assert template_tokens(cfg, stm) == {"bos_token": "<s>", "eos_token": "<|e|>", "pad_token": "<pad>"}
    assert template_tokens({**cfg, "added_tokens_decoder": {}}, stm) == {"bos_token": "<s>", "eos_token": "</s>"}
    with pytest.raises(ValueError):
        template_tokens({"eos_token": 3})


def test_variables_and_globals():
    """What a template sees: the tokens, add_generation_prompt, tools/documents None, transformers' helpers."""
    template = ("{{ bos_token }}|{{ add_generation_prompt }}|{{ tools is none }}|{{ documents is none }}|"
                "{{ messages[0] | tojson }}|{{ dict(a=1) | tojson }}|"
                "{% set ns = namespace(n=0) %}{% for m in messages %}{% if loop.index0 > 0 %}{% break %}{% endif %}"
                "{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}|{{ strftime_now('%Y') | length }}")
    r = ChatRenderer(template, {"bos_token": "<B>"})
    text = r.render([{"role": "user", "content": "<é>&", "name": None}, {"role": "assistant", "content": "x"}]).text
    assert text == '<B>|False|True|True|{"role": "user", "content": "<é>&"}|{"a": 1}|1|4'


def test_trim_and_lstrip_blocks():
    template = "{% for m in messages %}\n    {{ m.content }}\n{% endfor %}"
    assert ChatRenderer(template, {}).render([{"role": "user", "content": "a"}]).text == "    a\n"


@pytest.mark.parametrize("template, detail", [
    ("{{ raise_exception('nope') }}", "nope"),
    ("{{ messages[0].content + 1 }}", "TypeError"),
    ("{{ messages[5].content.upper() }}", "Undefined"),
    ("{% set ns = namespace() %}{% set ns._x = 1 %}", "underscore"),
    ("{{ ''.__class__.__mro__ }}", "SecurityError"),
])
def test_errors_are_template_errors(template, detail):
    with pytest.raises(ChatError) as info:
        ChatRenderer(template, {}).render([{"role": "user", "content": "a"}])
    assert info.value.reason == "template_error"
    assert detail in info.value.detail


def test_sandbox_refuses_unsafe_calls():
    r = ChatRenderer("{{ messages.append(1) }}", {})
    with pytest.raises(ChatError) as info:
        r.render([{"role": "user", "content": "a"}])
    assert info.value.reason == "template_error"


def test_pickle_and_threads():
    """A renderer pickles (compiled again), and renders in several threads at once, spans included."""
    import pickle
    from concurrent.futures import ThreadPoolExecutor

    template = "{% for m in messages %}{{ m.role }}:{% generation %}{{ m.content }};{% endgeneration %}{% endfor %}"
    r = pickle.loads(pickle.dumps(ChatRenderer(template, {"eos_token": "</s>"})))
    assert r.tokens == {"eos_token": "</s>"}
    conversations = [[{"role": "assistant", "content": "x" * (i % 7)}] * (1 + i % 3) for i in range(300)]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(r.render, conversations))
    assert got == [r.render(c) for c in conversations]
    assert got[10].generation == ((10, 14), (24, 28))


def test_syntax_error_at_construction():
    with pytest.raises(ChatError) as info:
        ChatRenderer("{% for m in messages %}", {})
    assert info.value.reason == "template_error"
    assert isinstance(info.value, ValueError)


def test_generation_spans():
    template = ("{% for m in messages %}[{{ m.role }}]{% if m.role == 'assistant' %}{% generation %}"
                "{{ m.content }}<end>{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}")
    r = ChatRenderer(template, {})
    got = r.render([{"role": "user", "content": "ab"}, {"role": "assistant", "content": "cd"},
                    {"role": "user", "content": "e"}, {"role": "assistant", "content": "f"}])
    assert got.text == "[user]ab[assistant]cd<end>[user]e[assistant]f<end>"
    assert [got.text[a:b] for a, b in got.generation] == ["cd<end>", "f<end>"]
    assert r.has_generation
    assert r.render([{"role": "user", "content": "x"}]).generation == ()  # spans do not leak between renders
