"""Chat rows and truncation: by hand on a one-token-per-character tokenizer, then properties on real templates."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.chat_helpers import encoder, training_conversations
from transforms.core.chat.encode import ChatEncoder
from transforms.core.chat.rows import KEEP_END, KEEP_START, chat_row, truncate
from transforms.core.chat.template import ChatError, ChatRenderer

# One token per character; the turn markers and </s> are special tokens. Template: <u>hi</s><a>yo</s>
_SPECIAL = ["<u>", "<a>", "<y>", "<t>", "</s>"]
_MARK = {"user": "<u>", "assistant": "<a>", "system": "<y>", "tool": "<t>"}
TEMPLATE = "{% for m in messages %}{{ {'user': '<u>', 'assistant': '<a>', 'system': '<y>', 'tool': '<t>'}[m.role] }}" \
           "{{ m.content }}{{ eos_token }}{% endfor %}"
PAD = 0


@functools.lru_cache(maxsize=None)
def char_encoder() -> ChatEncoder:
    import tokenizers
    from tokenizers import AddedToken, Regex, models, pre_tokenizers

    chars = [chr(c) for c in range(32, 127)] + ["\n"]
    backend = tokenizers.Tokenizer(models.WordLevel({c: i for i, c in enumerate(["?"] + chars)}, unk_token="?"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), "isolated")
    backend.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in _SPECIAL])
    return ChatEncoder(ChatRenderer(TEMPLATE, {"eos_token": "</s>"}), backend)


def chat(*turns):
    """chat(("user", "hi"), ("assistant", "yo")) encoded with the character tokenizer."""
    return char_encoder().encode([{"role": r, "content": c} for r, c in turns])


def text_of(encoded, ids=None):
    backend = char_encoder().backend
    return "".join(backend.id_to_token(int(i)) for i in (encoded.ids if ids is None else ids))


def contents_of(encoded):
    return [text_of(encoded, encoded.ids[t.content[0]:t.content[1]]) for t in encoded.turns]


# ----------------------------------------------------------------------------- rows


def test_chat_row_by_hand():
    e = chat(("user", "hi"), ("assistant", "yo"))
    assert text_of(e) == "<u>hi</s><a>yo</s>"
    assert e.trained.astype(int).tolist() == [0, 0, 0, 0, 0, 1, 1, 1]  # y o </s>
    row = chat_row(e, max_seq_length=9, pad_id=PAD)
    ids = e.ids.tolist()
    assert row.dtype == np.int32 and row.shape == (3, 9)
    assert row[0].tolist() == ids[:-1] + [PAD] * 2
    assert row[1].tolist() == [0, 0, 0, 0, 1, 1, 1, 0, 0]  # the positions whose label is y, o, </s>
    assert row[2].tolist() == ids[1:] + [PAD] * 2
    inverted = chat_row(e, max_seq_length=9, pad_id=PAD, inverted_mask=True)
    assert inverted[1].tolist() == [1, 1, 1, 1, 0, 0, 0, 1, 1]
    assert (inverted[[0, 2]] == row[[0, 2]]).all()


def test_chat_row_fits_exactly_msl_plus_one():
    e = chat(("user", "hi"), ("assistant", "yo"))  # 8 tokens: 7 positions
    assert chat_row(e, max_seq_length=7, pad_id=PAD)[1].tolist() == [0, 0, 0, 0, 1, 1, 1]
    with pytest.raises(ValueError):
        chat_row(e, max_seq_length=6, pad_id=PAD)


def test_chat_row_multi_turn_trains_every_assistant_turn():
    e = chat(("system", "s"), ("user", "a"), ("assistant", "b"), ("user", "c"), ("assistant", "d"))
    assert text_of(e) == "<y>s</s><u>a</s><a>b</s><u>c</s><a>d</s>"
    row = chat_row(e, max_seq_length=16, pad_id=PAD)
    assert row[1].tolist() == [0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0]


# ----------------------------------------------------------------------------- truncation by hand


def test_no_truncation_needed_or_no_mode():
    e = chat(("user", "hello"), ("assistant", "yo"))
    assert truncate(e, limit=len(e), mode=None) is e
    assert truncate(e, limit=len(e) + 5, mode=KEEP_END) is e
    with pytest.raises(ChatError) as info:
        truncate(e, limit=len(e) - 1, mode=None)
    assert info.value.reason == "too_long"
    with pytest.raises(ValueError):
        truncate(e, limit=3, mode="keep_middle")


def _cut(turns, excess, mode):
    e = chat(*turns)
    out = truncate(e, limit=len(e) - excess, mode=mode)
    assert len(out) == len(e) - excess
    return contents_of(out), out


@pytest.mark.parametrize("excess, start, end", [
    (1, ["abcdefg", "xyz", "pq", "12345"], ["bcdefgh", "xyz", "pq", "12345"]),
    (5, ["abc", "xyz", "pq", "12345"], ["fgh", "xyz", "pq", "12345"]),
    # longest first: down to a common length (2), exactly the excess
    (7, ["ab", "xy", "pq", "12345"], ["gh", "yz", "pq", "12345"]),
    # one below that level: the longest loses one more
    (8, ["a", "xy", "pq", "12345"], ["h", "yz", "pq", "12345"]),
    (10, ["a", "x", "p", "12345"], ["h", "z", "q", "12345"]),
    (12, ["", "", "p", "12345"], ["", "", "q", "12345"]),
    # every non-assistant content emptied, then the assistant's tail
    (13, ["", "", "", "12345"], ["", "", "", "12345"]),
    (15, ["", "", "", "123"], ["", "", "", "123"]),
    (17, ["", "", "", "1"], ["", "", "", "1"]),
])
def test_truncation_rule(excess, start, end):
    turns = [("user", "abcdefgh"), ("system", "xyz"), ("user", "pq"), ("assistant", "12345")]
    got_start, out = _cut(turns, excess, KEEP_START)
    assert got_start == start
    assert _cut(turns, excess, KEEP_END)[0] == end
    # the template's text stays, and the assistant turn keeps its end of turn, trained
    assert text_of(out).count("</s>") == 4 and text_of(out).endswith("<a>" + start[3] + "</s>")
    assert out.trained.sum() == len(start[3]) + 1


def test_truncation_too_long():
    turns = [("user", "abcdefgh"), ("system", "xyz"), ("user", "pq"), ("assistant", "12345")]
    e = chat(*turns)
    with pytest.raises(ChatError) as info:
        truncate(e, limit=len(e) - 18, mode=KEEP_START)  # the assistant keeps at least one token
    assert info.value.reason == "too_long"


def test_assistants_cut_from_the_last_backwards():
    turns = [("user", "q"), ("assistant", "abcd"), ("user", "r"), ("assistant", "wxyz")]
    assert _cut(turns, 2, KEEP_START)[0] == ["", "abcd", "", "wxyz"]
    assert _cut(turns, 4, KEEP_START)[0] == ["", "abcd", "", "wx"]
    assert _cut(turns, 5, KEEP_END)[0] == ["", "abcd", "", "w"]
    assert _cut(turns, 7, KEEP_END)[0] == ["", "ab", "", "w"]
    got, out = _cut(turns, 8, KEEP_START)
    assert got == ["", "a", "", "w"]
    assert text_of(out) == "<u></s><a>a</s><u></s><a>w</s>"
    assert out.trained.astype(int).tolist() == [0, 0, 0, 1, 1, 0, 0, 0, 1, 1]


def test_truncation_remaps_turns():
    e = chat(("user", "abcdef"), ("assistant", "xy"), ("user", "gh"), ("assistant", "z"))
    out = truncate(e, limit=len(e) - 4, mode=KEEP_END)
    assert [t.turn for t in out.turns] == [(0, 4), (4, 8), (8, 12), (12, 15)]
    assert [t.content for t in out.turns] == [(1, 3), (5, 7), (9, 11), (13, 14)]
    assert contents_of(out) == ["ef", "xy", "gh", "z"]
    assert [t.chars for t in out.turns] == [t.chars for t in e.turns]  # characters of the untruncated text


# ----------------------------------------------------------------------------- real tokenizers


@pytest.mark.parametrize("name", ["qwen2.5-instruct", "llama3-instruct", "mistral-nemo-instruct"])
@settings(max_examples=50, deadline=None)
@given(data=st.data(), mode=st.sampled_from([KEEP_START, KEEP_END]))
def test_truncation_properties(name, data, mode):
    """On real templates and byte-level tokens: the length fits, the template's tokens all stay, contents
    keep whole characters (a head or a tail of their tokens), assistants keep a token and their ends."""
    enc = encoder(name)
    messages = data.draw(training_conversations(name))
    messages.append({"role": "user", "content": "😀é中" * data.draw(st.integers(1, 30))})
    messages.append({"role": "assistant", "content": "👩‍💻 ok " * data.draw(st.integers(1, 10))})
    e = enc.encode(messages)
    limit = data.draw(st.integers(1, len(e)))
    try:
        out = truncate(e, limit=limit, mode=mode)
    except ChatError as err:
        assert err.reason == "too_long"
        return
    assert limit - 3 * len(messages) <= len(out) <= limit  # at most a split character more per content

    def scaffold(x):
        inside = np.zeros(len(x.ids), bool)
        for t in x.turns:
            inside[t.content[0]:t.content[1]] = True
        return x.ids[~inside].tolist(), x.trained[~inside].tolist()

    assert scaffold(out) == scaffold(e)
    backend = enc.backend
    for before, after, m in zip(e.turns, out.turns, messages):
        old = e.ids[before.content[0]:before.content[1]].tolist()
        new = out.ids[after.content[0]:after.content[1]].tolist()
        assert "\ufffd" not in backend.decode(new) or "\ufffd" in backend.decode(old)
        if m["role"] == "assistant" or mode == KEEP_START:
            assert new == old[:len(new)]
        else:
            assert new == old[len(old) - len(new):]
        if m["role"] == "assistant" and old:
            assert new and out.trained[after.content[0]:after.content[1]].all()
    if len(out) >= 2:
        assert chat_row(out, max_seq_length=limit - 1, pad_id=0).shape == (3, limit - 1)
