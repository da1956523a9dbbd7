"""What the chat tests share: the shipped chat tokenizers, transformers as the oracle, conversation strategies."""

from __future__ import annotations

import functools
import json

import pytest
from hypothesis import strategies as st

from tests.helpers import SHARED, require_shared
from transforms.core.chat.encode import ChatEncoder
from transforms.core.chat.template import CHATML, ChatRenderer, template_from_config, template_tokens

TOKENIZERS = SHARED / "tokenizers"
# The shipped templates: name -> whether the template insists on user/assistant alternation (Mistral's raises).
TEMPLATES = {"qwen2.5-instruct": False, "llama3-instruct": False, "mistral-nemo-instruct": True,
             "qwen2.5-instruct-genmask": False}


@functools.lru_cache(maxsize=None)
def tokenizer_config(name: str) -> dict:
    require_shared(TOKENIZERS / name)
    return json.loads((TOKENIZERS / name / "tokenizer_config.json").read_text())


@functools.lru_cache(maxsize=None)
def renderer(name: str) -> ChatRenderer:
    cfg = tokenizer_config(name)
    return ChatRenderer(template_from_config(cfg), template_tokens(cfg))


@functools.lru_cache(maxsize=None)
def backend(name: str):
    import tokenizers

    require_shared(TOKENIZERS / name)
    return tokenizers.Tokenizer.from_file(str(TOKENIZERS / name / "tokenizer.json"))


@functools.lru_cache(maxsize=None)
def hf_tokenizer(name: str):
    """transformers' tokenizer: the oracle (the test skips without transformers or ../shared)."""
    transformers = pytest.importorskip("transformers")
    require_shared(TOKENIZERS / name)
    return transformers.AutoTokenizer.from_pretrained(str(TOKENIZERS / name))


def hf_ids(name: str, messages, **kwargs) -> list[int]:
    """transformers' ids (return_dict spelled out: 4.x returned a list by default, 5.x a dict)."""
    return list(hf_tokenizer(name).apply_chat_template(messages, tokenize=True, return_dict=True,
                                                       **kwargs)["input_ids"])


_PIECES = ["Hello", "world", " ", "  ", "\n", "\n\n", "\t", " \n ", "é", "e\u0301", "a\u0308\u0301", "😀",
           "👩\u200d💻", "𝔘𝔫𝔦", "\U0001f1eb\U0001f1f7", "中文字", "Ω", "'s", "don't", "123", "4.5", ".", "!?",
           "{\"k\": 1}", "<b>", "\u00a0", "\u3000", "\r\n", "x"]
_piece = st.one_of(st.sampled_from(_PIECES),
                   st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=4))


def contents(allow_blank: bool = False):
    """Message texts: words, whitespace at either end, several lines, combining and astral characters."""
    text = st.lists(_piece, min_size=0 if allow_blank else 1, max_size=10).map("".join)
    return text if allow_blank else text.map(lambda s: s if s.strip() else s + "ok")


@st.composite
def conversations(draw, *, alternate: bool = False, end_with_assistant: bool = True, system: bool = True,
                  tool: bool = False):
    """1-8 messages: an optional system message (maybe empty), then user (or tool) and assistant turns.

    With `alternate` or `end_with_assistant`, user/tool and assistant turns alternate (Mistral requires it),
    ending with the assistant's unless `end_with_assistant` is False (then maybe with the user's); otherwise
    the roles are drawn freely.
    """
    messages = []
    if system and draw(st.booleans()):
        messages.append({"role": "system", "content": draw(st.one_of(st.just(""), contents()))})
    room = 8 - len(messages)
    asker = st.sampled_from(["user", "tool"]) if tool and not alternate else st.just("user")
    if alternate or end_with_assistant:
        roles = []
        for _ in range(draw(st.integers(1, room // 2))):
            roles += [draw(asker), "assistant"]
        if not end_with_assistant and len(roles) < room and draw(st.booleans()):
            roles.append("user")
    else:
        roles = draw(st.lists(st.sampled_from(["user", "assistant"] + (["tool"] if tool else [])), min_size=1,
                              max_size=room))
    messages += [{"role": r, "content": draw(contents())} for r in roles]
    return messages


@functools.lru_cache(maxsize=None)
def encoder(name: str, markers: bool = True) -> ChatEncoder:
    return ChatEncoder(renderer(name), backend(name), generation_markers=markers)


@functools.lru_cache(maxsize=None)
def chatml() -> ChatEncoder:
    return ChatEncoder(ChatRenderer(CHATML, {}), backend("qwen2.5-instruct"))


def special_ids(name: str) -> set[int]:
    return {i for i, t in backend(name).get_added_tokens_decoder().items() if t.special}


def training_conversations(name: str):
    """Conversations each template can train on (Mistral: alternating, no system message: it drops it)."""
    mistral = TEMPLATES[name]
    return conversations(alternate=mistral, system=not mistral, tool=not mistral)


def tokens(name, ids):
    return [backend(name).id_to_token(int(i)) for i in ids]
