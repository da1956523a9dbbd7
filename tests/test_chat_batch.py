"""transforms/core/chat/batch.py without a pipeline: a packing group's Chat, Chat_VSL and DPO records -> rows and
statistics, and the reader's RecordCheck.

A one-token-per-character tokenizer whose turn markers and </s> are special tokens makes every expected row
writable by hand from the rendered text (`ids`): the template writes `<u>` / `<a>` / `<y>` / `<t>`, the content
and `</s>` per message, and `<a>` as the generation prompt. The rows' contract (transforms/core/chat/rows.py,
dpo.py, README "Chat, Chat_VSL and DPO"): a conversation's tokens T end with its last trained one; Chat rows
are T[:-1], the mask W[1:], T[1:], padded; DPO sides are S = P + R with labels R on positions |P|-1 .. |S|-2.
"""

from __future__ import annotations

import functools
import json
import pickle
import re
from collections import Counter

import numpy as np
import pytest

from transforms.core.chat import batch as B
from transforms.core.chat.encode import ChatEncoder, EncodedChat, Turn
from transforms.core.chat.template import ChatRenderer
from transforms.core.normalize import NormalizeConfig
from transforms.core.records import DocBatch, Document, GroupId
from transforms.core.stats import Stats

_SPECIAL = ["<u>", "<a>", "<y>", "<t>", "</s>"]
TEMPLATE = ("{% for m in messages %}{{ {'user': '<u>', 'assistant': '<a>', 'system': '<y>', 'tool': '<t>'}[m.role] }}"
            "{{ m.content }}{{ eos_token }}{% endfor %}{% if add_generation_prompt %}<a>{% endif %}")
TOKENS = (("eos_token", "</s>"),)
PAD = 0
SOURCE = "in/a.jsonl"
GROUP = GroupId(0, 0, SOURCE, "a.jsonl")


def char_tokenizer(specials=(), **options):
    """One token per printable ASCII character or newline (anything else is [UNK]), then `specials` as special
    added tokens (AddedToken `options` apply to each)."""
    import tokenizers
    from tokenizers import AddedToken, Regex, models, pre_tokenizers

    chars = ["[UNK]"] + [chr(c) for c in range(32, 127)] + ["\n"]
    tok = tokenizers.Tokenizer(models.WordLevel({c: i for i, c in enumerate(chars)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), "isolated")
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False, **options) for s in specials])
    return tok


@functools.lru_cache(maxsize=None)
def backend():
    return char_tokenizer(_SPECIAL)


def encoder(template: str = TEMPLATE) -> ChatEncoder:
    return ChatEncoder(ChatRenderer(template, dict(TOKENS)), backend())


def ids(text: str) -> list[int]:
    """The ids of rendered text: each marker one token, every other character one token."""
    return [backend().token_to_id(p) for p in re.findall("|".join(map(re.escape, _SPECIAL)) + r"|[\s\S]", text)]


def cfg(mode: str = "Chat", **overrides) -> B.ChatConfig:
    fields = dict(mode=mode, max_seq_length=16, pad_id=PAD, template=TEMPLATE, template_tokens=TOKENS,
                  min_sequence_len=1)
    fields.update(overrides)
    return B.ChatConfig(**fields)


def conversation(*turns, role_key="role", content_key="content") -> str:
    return json.dumps([{role_key: r, content_key: c} for r, c in turns])


def docs_batch(*records) -> DocBatch:
    return DocBatch(GROUP, [Document(i, r if isinstance(r, tuple) else (r,)) for i, r in enumerate(records)], Stats())


def chat_rows(expected_tokens: list[int], trained: list[int], msl: int = 16) -> np.ndarray:
    """The contract's Chat row of a conversation of tokens T with trained flags W."""
    n = len(expected_tokens) - 1
    row = np.zeros((3, msl), np.int32)
    row[0] = row[2] = PAD
    row[0, :n], row[1, :n], row[2, :n] = expected_tokens[:-1], trained[1:], expected_tokens[1:]
    return row


def built(block) -> np.ndarray:
    return block.windows.rows_between(0, len(block.windows))


# ------------------------------------------------------------------------------------------------ Chat


def test_conversations_become_one_row_each_with_loss_on_the_assistant():
    block = B.conversation_batch(docs_batch(conversation(("user", "hi"), ("assistant", "yo")),
                                            conversation(("system", "s"), ("user", "q"), ("assistant", "ab"),
                                                         ("user", "r"), ("assistant", "c"))),
                                 encoder(), cfg())
    assert block.group == GROUP and len(block) == 2
    rows = built(block)
    assert rows.dtype == np.int32 and rows.shape == (2, 3, 16)
    first = ids("<u>hi</s><a>yo</s>")
    assert (rows[0] == chat_rows(first, [0, 0, 0, 0, 0, 1, 1, 1])).all()
    second = ids("<y>s</s><u>q</s><a>ab</s><u>r</s><a>c</s>")
    assert (rows[1] == chat_rows(second, [0] * 7 + [1, 1, 1] + [0] * 4 + [1, 1])).all()
    totals = block.stats.totals
    assert totals["docs_used"] == 2 and totals["tokens"] == len(first) + len(second)
    # every token is counted under its turn's role; trained labels too (the first token is never a label)
    assert {k: v for k, v in totals.items() if k.startswith("chat_")} == {
        "chat_tokens.user": 4 + 3 + 3, "chat_tokens.assistant": 4 + 4 + 3, "chat_tokens.system": 3,
        "chat_loss_valid.assistant": 3 + 3 + 2}
    assert block.stats.sources[SOURCE] == totals


def test_a_conversation_ends_with_its_last_trained_token():
    """A user turn after the last assistant turn teaches nothing: it is not in the row, nor counted."""
    block = B.conversation_batch(docs_batch(conversation(("user", "hi"), ("assistant", "yo"), ("user", "more"))),
                                 encoder(), cfg())
    expected = ids("<u>hi</s><a>yo</s>")
    assert (built(block)[0] == chat_rows(expected, [0, 0, 0, 0, 0, 1, 1, 1])).all()
    totals = block.stats.totals
    assert totals["tokens"] == 8
    assert (totals["chat_tokens.user"], totals["chat_tokens.assistant"]) == (4, 4)
    # the characters of the whole record are read (and normalized) all the same
    assert (totals["raw_chars"], totals["normalized_chars"]) == (8, 8)


def test_the_last_assistant_turn_only():
    block = B.conversation_batch(docs_batch(conversation(("user", "q"), ("assistant", "ab"), ("user", "r"),
                                                         ("assistant", "c"))),
                                 encoder(), cfg(train_on_all_assistant_turns=False))
    expected = ids("<u>q</s><a>ab</s><u>r</s><a>c</s>")
    assert (built(block)[0] == chat_rows(expected, [0] * 11 + [1, 1])).all()
    assert block.stats.totals["chat_loss_valid.assistant"] == 2


def test_inverted_mask_and_pad_id():
    block = B.conversation_batch(docs_batch(conversation(("user", "hi"), ("assistant", "yo"))), encoder(),
                                 cfg(inverted_mask=True, pad_id=7, max_seq_length=9))
    row = built(block)[0]
    expected = ids("<u>hi</s><a>yo</s>")
    assert row[0].tolist() == expected[:-1] + [7, 7] and row[2].tolist() == expected[1:] + [7, 7]
    assert row[1].tolist() == [1, 1, 1, 1, 0, 0, 0, 1, 1]


def test_a_group_whose_every_conversation_is_dropped_counts_no_token():
    """What a mixture reads of an encoded group (its tokens per record) holds for an empty one too."""
    long = conversation(("user", "abcdefgh"), ("assistant", "yo"))  # 14 tokens
    encoded = B.encode_conversations(docs_batch(long, long), encoder(), cfg(max_seq_length=12))
    assert encoded.tokens == [] and encoded.token_counts().tolist() == []
    assert encoded.stats.totals["dropped.too_long"] == 2


def test_too_long_conversations_are_dropped_or_cut():
    long = conversation(("user", "abcdefgh"), ("assistant", "yo"))  # 14 tokens
    fits = conversation(("user", "a"), ("assistant", "b"))  # 6 tokens
    block = B.conversation_batch(docs_batch(long, fits), encoder(), cfg(max_seq_length=12))
    assert len(block) == 1 and built(block)[0, 0, :5].tolist() == ids("<u>a</s><a>b</s>")[:5]
    assert block.stats.totals["dropped.too_long"] == 1 and block.stats.totals["docs_used"] == 1
    block = B.conversation_batch(docs_batch(long, fits, long), encoder(), cfg(max_seq_length=12))
    assert block.stats.totals["dropped.too_long"] == 2
    # max_seq_length + 1 tokens fit a row exactly
    assert len(B.conversation_batch(docs_batch(long), encoder(), cfg(max_seq_length=13))) == 1
    # keep_start: the user's content loses its tail until the conversation is msl + 1 tokens
    block = B.conversation_batch(docs_batch(long), encoder(), cfg(max_seq_length=10, truncate="keep_start"))
    assert built(block)[0, 0].tolist() == ids("<u>abcde</s><a>yo</s>")[:-1]
    block = B.conversation_batch(docs_batch(long), encoder(), cfg(max_seq_length=10, truncate="keep_end"))
    assert built(block)[0, 2].tolist() == ids("<u>defgh</s><a>yo</s>")[1:]
    # a conversation cut after its last trained token may then fit without truncation
    tail = conversation(("user", "a"), ("assistant", "b"), ("user", "cdefghij"))
    assert len(B.conversation_batch(docs_batch(tail), encoder(), cfg(max_seq_length=5))) == 1


def test_too_short_conversations_are_dropped():
    block = B.conversation_batch(docs_batch(conversation(("user", "hi"), ("assistant", "yo")),
                                            conversation(("user", "a"), ("assistant", "b"))),
                                 encoder(), cfg(min_sequence_len=7))
    assert len(block) == 1 and block.stats.totals["dropped.shorter_than_min_sequence_len"] == 1
    assert B.DROP_TOO_SHORT == "shorter_than_min_sequence_len"
    assert len(B.conversation_batch(docs_batch(conversation(("user", "a"), ("assistant", "b"))), encoder(),
                                    cfg(min_sequence_len=6))) == 1
    # whatever min_sequence_len says, a row needs 2 tokens (one position): here only "x" is trained
    plain = "{% for m in messages %}{{ m.content }}|{% endfor %}"
    block = B.conversation_batch(docs_batch(conversation(("assistant", "x"))), encoder(plain),
                                 cfg(template=plain, min_sequence_len=0))
    assert len(block) == 0 and block.stats.totals["dropped.shorter_than_min_sequence_len"] == 1
    block = B.conversation_batch(docs_batch(conversation(("assistant", "xy"))), encoder(plain),
                                 cfg(template=plain, min_sequence_len=0))
    assert built(block)[0, :, :2].tolist() == [ids("x") + [PAD], [1, 0], ids("y") + [PAD]]


def test_conversations_the_encoder_refuses_are_dropped_by_reason():
    upper = "{% for m in messages %}<{{ m.role }}>{{ m.content | upper }}{% endfor %}"
    block = B.conversation_batch(docs_batch(conversation(("user", "q"), ("assistant", "a")),
                                            conversation(("user", "Q"), ("assistant", "A"))),
                                 encoder(upper), cfg(template=upper, max_seq_length=32))
    assert len(block) == 1
    assert block.stats.totals["dropped.content_rewritten"] == 1 and block.stats.totals["docs_used"] == 1


def test_contents_are_normalized_and_their_sizes_counted():
    text = "a ( b ) é"
    block = B.conversation_batch(docs_batch(conversation(("user", text), ("assistant", "ok"))), encoder(),
                                 cfg(normalize=NormalizeConfig(wikitext_detokenize=True)))
    totals = block.stats.totals
    assert (totals["raw_chars"], totals["raw_bytes"]) == (len(text) + 2, len(text.encode()) + 2)
    assert (totals["normalized_chars"], totals["normalized_bytes"]) == (7 + 2, 8 + 2)  # "a (b) é"
    assert built(block)[0, 0, :7].tolist() == ids("<u>a (b) ") and built(block)[0, 0, 7] == 0  # é: [UNK]
    same = B.conversation_batch(docs_batch(conversation(("user", text), ("assistant", "ok"))), encoder(), cfg())
    assert same.stats.totals["normalized_chars"] == same.stats.totals["raw_chars"] == len(text) + 2


def test_role_and_content_keys():
    record = conversation(("human", "hi"), ("gpt", "yo"), role_key="from", content_key="value")
    block = B.conversation_batch(docs_batch(record), encoder(), cfg(role_key="from", content_key="value"))
    assert (built(block)[0] == chat_rows(ids("<u>hi</s><a>yo</s>"), [0, 0, 0, 0, 0, 1, 1, 1])).all()


def test_chat_vsl_packs_conversations():
    records = [conversation(("user", "hi"), ("assistant", "yo")), conversation(("user", "a"), ("assistant", "b"))]
    block = B.conversation_batch(docs_batch(*records), encoder(), cfg("Chat_VSL"))
    rows = built(block)
    assert rows.shape == (1, 5, 16)
    first, second = ids("<u>hi</s><a>yo</s>"), ids("<u>a</s><a>b</s>")
    assert rows[0, 0, :12].tolist() == first[:-1] + second[:-1] and rows[0, 0, 12:].tolist() == [PAD] * 4
    assert rows[0, 2, :12].tolist() == first[1:] + second[1:]
    assert rows[0, 1, :12].tolist() == [0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1]
    assert rows[0, 4, :12].tolist() == list(range(7)) + list(range(5))
    assert rows[0, 3, :12].tolist() == list(range(6, -1, -1)) + list(range(4, -1, -1))
    # without pack_sequences: one conversation a row, still 5 features
    block = B.conversation_batch(docs_batch(*records), encoder(), cfg("Chat_VSL", pack_sequences=False))
    assert built(block).shape == (2, 5, 16)
    # Chat never packs, whatever pack_sequences says
    assert built(B.conversation_batch(docs_batch(*records), encoder(), cfg("Chat"))).shape == (2, 3, 16)


def test_a_group_with_nothing_to_write():
    block = B.conversation_batch(docs_batch(), encoder(), cfg())
    assert len(block) == 0 and built(block).shape[0] == 0
    assert block.stats.sources == {SOURCE: Counter()}  # the source is listed, with nothing counted
    block = B.conversation_batch(docs_batch(conversation(("user", "abcdefghijklmnopq"), ("assistant", "y"))),
                                 encoder(), cfg())
    assert len(block) == 0 and block.stats.totals["dropped.too_long"] == 1 and "docs_used" not in block.stats.totals


def test_encoding_in_slices_gives_the_same_rows(monkeypatch):
    """Conversations are encoded in slices of about ENCODE_SLICE_CHARS content characters (memory bound): each
    slice ends with the conversation that reaches the limit; the rows and counts do not depend on it."""
    records = [conversation(("user", "qq"), ("assistant", "aaa"))]  # 5 characters: under the limit of 6
    records += [conversation(("user", "q" * (1 + i % 4)), ("assistant", "a" * (1 + i % 3))) for i in range(9)]
    whole = B.conversation_batch(docs_batch(*records), encoder(), cfg())
    calls = []

    class Spy(ChatEncoder):
        def encode_many(self, conversations, **kwargs):
            calls.append([sum(len(m["content"]) for m in c.messages) for c in conversations])
            return super().encode_many(conversations, **kwargs)

    monkeypatch.setattr(B, "ENCODE_SLICE_CHARS", 6)
    spy = Spy(ChatRenderer(TEMPLATE, dict(TOKENS)), backend())
    sliced = B.conversation_batch(docs_batch(*records), spy, cfg())
    assert (built(sliced) == built(whole)).all() and sliced.stats.totals == whole.stats.totals
    assert sum(calls, []) == [5] + [2 + i % 4 + i % 3 for i in range(9)]
    assert all(sum(c) >= 6 and sum(c[:-1]) < 6 for c in calls[:-1]) and sum(calls[-1][:-1]) < 6
    assert len(calls) > 2
    calls.clear()
    monkeypatch.setattr(B, "ENCODE_SLICE_CHARS", 1 << 20)
    B.conversation_batch(docs_batch(*records), spy, cfg())
    assert len(calls) == 1
    assert B.ENCODE_SLICE_CHARS == 1 << 20


def test_tokens_outside_every_turn_count_as_template():
    """_count_roles: a token no turn covers (a template's own text) is counted as "template", and so is its
    trained label; token 0 is never a label."""
    trained = np.array([1, 0, 1, 1, 1, 0, 1], bool)
    encoded = EncodedChat("", np.arange(7, dtype=np.int32), trained, np.zeros((7, 2), np.int64),
                          (Turn("user", (0, 0), (1, 2), (1, 3)), Turn("assistant", (0, 0), (3, 4), (3, 5))))
    counts = Counter()
    B._count_roles(encoded, counts)
    assert counts == Counter({"chat_tokens.user": 2, "chat_tokens.assistant": 2, "chat_tokens.template": 3,
                              "chat_loss_valid.user": 1, "chat_loss_valid.assistant": 2,
                              "chat_loss_valid.template": 1})
    B._count_roles(encoded, counts)  # a second conversation adds to the counts
    assert (counts["chat_tokens.template"], counts["chat_loss_valid.template"]) == (6, 2)
    first = EncodedChat("", np.arange(3, dtype=np.int32), np.array([1, 1, 0], bool), np.zeros((3, 2), np.int64),
                        (Turn("assistant", (0, 0), (0, 2), (0, 3)),))
    counts = Counter()
    B._count_roles(first, counts)
    assert counts == Counter({"chat_tokens.assistant": 3, "chat_loss_valid.assistant": 1})


def test_to_last_trained_clips_the_turns():
    full = encoder().encode([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},
                             {"role": "user", "content": "abc"}])
    assert len(full) == 13
    cut = B._to_last_trained(full)
    assert len(cut) == 8 and cut.trained.tolist() == full.trained[:8].tolist()
    assert cut.offsets.tolist() == full.offsets[:8].tolist() and cut.text == full.text
    assert [(t.content, t.turn) for t in cut.turns] == [((1, 3), (0, 4)), ((5, 7), (4, 8)), ((8, 8), (8, 8))]
    assert [t.chars for t in cut.turns] == [t.chars for t in full.turns]
    done = encoder().encode([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}])
    assert B._to_last_trained(done) is done


# ------------------------------------------------------------------------------------------------- DPO


def dpo_record(prompt, chosen, rejected):
    return tuple(json.dumps(v) for v in (chosen, rejected, prompt))


def test_dpo_rows():
    block = B.dpo_batch(docs_batch(dpo_record("Q", "A", "BC"), dpo_record("R", "xy", "z")), encoder(),
                        cfg("DPO", max_seq_length=8))
    rows = block.windows
    assert isinstance(rows, B.DpoRows) and len(rows) == 2 and len(block) == 2 and block.group == GROUP
    got = rows.rows_between(0, 2)
    assert got.shape == (2, 6, 8) and got.dtype == np.int32
    p, c, r = ids("<u>Q</s><a>"), ids("A</s>"), ids("BC</s>")
    assert got[0].tolist() == [
        p + c + [PAD, PAD], [0, 0, 0, 1, 1, 0, 0, 0], [PAD] * 3 + c + [PAD] * 3,
        p + r + [PAD], [0, 0, 0, 1, 1, 1, 0, 0], [PAD] * 3 + r + [PAD] * 2]
    assert (rows.rows_between(1, 2)[0] == got[1]).all()
    assert rows.rows_between(2, 2).shape == (0, 6, 8) and rows.rows_between(2, 2).dtype == np.int32
    totals = block.stats.totals
    assert totals["docs_used"] == 2
    assert totals["tokens"] == (2 * 4 + 2 + 3) + (2 * 4 + 3 + 2)  # the prompt once per side
    assert (totals["raw_chars"], totals["normalized_chars"]) == (1 + 1 + 2 + 1 + 2 + 1,) * 2


def test_dpo_settings_reach_the_rows():
    block = B.dpo_batch(docs_batch(dpo_record("Q", "A", "B")), encoder(),
                        cfg("DPO", max_seq_length=7, pad_id=9, inverted_mask=True))
    row = block.windows.rows_between(0, 1)[0]
    assert row[0].tolist() == ids("<u>Q</s><a>A</s>") + [9] and row[2].tolist() == [9] * 3 + ids("A</s>") + [9] * 2
    assert row[1].tolist() == [1, 1, 1, 0, 0, 1, 1]
    # too long: the prompt keeps its last max_prompt_length tokens
    block = B.dpo_batch(docs_batch(dpo_record("abcdef", "A", "B")), encoder(),
                        cfg("DPO", max_seq_length=7, max_prompt_length=3))
    assert block.windows.rows_between(0, 1)[0, 0].tolist() == ids("f</s><a>A</s>") + [PAD, PAD]


def test_dpo_drops_by_reason_and_normalizes():
    block = B.dpo_batch(docs_batch(dpo_record("abcdefgh", "A", "B"), dpo_record("Q", "A", "B")), encoder(),
                        cfg("DPO", max_seq_length=8))
    assert len(block) == 1 and block.stats.totals["dropped.too_long"] == 1 and block.stats.totals["docs_used"] == 1
    block = B.dpo_batch(docs_batch(dpo_record("abcdefgh", "A", "B"), dpo_record("Q", "A", "B"),
                                   dpo_record("abcdefghi", "A", "B")), encoder(), cfg("DPO", max_seq_length=8))
    assert block.stats.totals["dropped.too_long"] == 2
    block = B.dpo_batch(docs_batch(dpo_record("( Q )", "( A )", "B ( C )")), encoder(),
                        cfg("DPO", max_seq_length=16, normalize=NormalizeConfig(wikitext_detokenize=True)))
    p, c, r = ids("<u>(Q)</s><a>"), ids("(A)</s>"), ids("B (C)</s>")
    row = block.windows.rows_between(0, 1)[0]
    assert row[0, :len(p) + len(c)].tolist() == p + c and row[3, :len(p) + len(r)].tolist() == p + r
    totals = block.stats.totals
    assert (totals["raw_chars"], totals["normalized_chars"]) == (5 + 5 + 7, 3 + 3 + 5)
    assert (totals["raw_bytes"], totals["normalized_bytes"]) == (5 + 5 + 7, 3 + 3 + 5)
    upper = "{% for m in messages %}<{{ m.role }}>{{ m.content | upper }}{% endfor %}"
    block = B.dpo_batch(docs_batch(dpo_record("q", "a", "b")), encoder(upper), cfg("DPO", template=upper))
    assert len(block) == 0 and block.stats.sources[SOURCE] == Counter({
        "dropped.content_rewritten": 1, "raw_chars": 3, "raw_bytes": 3, "normalized_chars": 3,
        "normalized_bytes": 3})


def test_dpo_records_with_other_keys():
    def sharegpt(*turns):
        return json.dumps([{"from": r, "value": c} for r, c in turns])

    record = (sharegpt(("human", "Q"), ("gpt", "A")), sharegpt(("human", "Q"), ("gpt", "B")))
    keys = cfg("DPO", max_seq_length=8, role_key="from", content_key="value")
    assert B.RecordCheck(keys)(record) is None
    # ShareGPT's keys are also read without being named; other keys are not.
    assert B.RecordCheck(cfg("DPO"))(record) is None
    other = tuple(r.replace('"from"', '"speaker"') for r in record)
    assert B.RecordCheck(cfg("DPO"))(other)[0] == "unknown_role"
    block = B.dpo_batch(docs_batch(record), encoder(), keys)
    assert block.windows.rows_between(0, 1)[0, 0].tolist() == ids("<u>Q</s><a>A</s>") + [PAD, PAD]


def test_dpo_without_a_prompt_field():
    record = (json.dumps([{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}]),
              json.dumps([{"role": "user", "content": "Q"}, {"role": "assistant", "content": "B"}]))
    block = B.dpo_batch(docs_batch(record), encoder(), cfg("DPO", max_seq_length=8))
    assert block.windows.rows_between(0, 1)[0, 3].tolist() == ids("<u>Q</s><a>B</s>") + [PAD, PAD]


# ------------------------------------------------------------------------------------------ RecordCheck


def test_record_check_of_conversations():
    check = B.RecordCheck(cfg())
    assert check((conversation(("user", "q"), ("assistant", "a")),)) is None
    assert check((conversation(("user", "q")),)) == (
        "no_assistant_turn", "the conversation has no assistant message to train on")
    assert check(("not json",))[0] == "not_a_conversation"
    assert check((conversation(("wizard", "q"), ("assistant", "a")),))[0] == "unknown_role"
    keys = B.RecordCheck(cfg(role_key="from", content_key="value"))
    assert keys((conversation(("human", "q"), ("gpt", "a"), role_key="from", content_key="value"),)) is None
    assert keys((conversation(("user", "q"), ("assistant", "a")),))[0] == "unknown_role"
    strict = "{% if messages[0].role != 'user' %}{{ raise_exception('user first') }}{% endif %}x"
    check = B.RecordCheck(cfg(template=strict))
    assert check((conversation(("assistant", "a")),)) == ("template_error", "TemplateError: user first")
    assert check((conversation(("user", "q"), ("assistant", "a")),)) is None


def test_record_check_of_dpo_pairs():
    check = B.RecordCheck(cfg("DPO"))
    assert cfg("DPO").dpo and not cfg("Chat").dpo and not cfg("Chat_VSL").dpo
    assert check(dpo_record("Q", "A", "B")) is None
    assert check(dpo_record("Q", "A", None))[0] == "no_messages"
    assert check((json.dumps("A"), json.dumps("B")))[0] == "no_messages"  # no prompt field and no prompt
    assert check(("A", json.dumps("B"), json.dumps("Q")))[0] == "not_a_conversation"
    # every response is rendered after the prompt: a template refusing one refuses the record
    picky = "{% for m in messages %}{% if m.content == 'B' %}{{ raise_exception('no B') }}{% endif %}{% endfor %}"
    check = B.RecordCheck(cfg("DPO", template=picky))
    assert check(dpo_record("Q", "A", "C")) is None
    assert check(dpo_record("Q", "A", "B")) == ("template_error", "TemplateError: no B")
    assert check(dpo_record("Q", "B", "A")) == ("template_error", "TemplateError: no B")
    roles = ("{% for m in messages %}{% if m.role not in ['system', 'user', 'assistant'] %}"
             "{{ raise_exception('role ' ~ m.role) }}{% endif %}{{ m.content }}{% endfor %}")
    assert B.RecordCheck(cfg("DPO", template=roles))(dpo_record("Q", "A", "B")) is None


def test_record_check_pickles_without_its_renderer():
    check = B.RecordCheck(cfg(template_tokens=(("eos_token", "</s>"), ("bos_token", "<s>"))))
    assert check((conversation(("user", "q"), ("assistant", "a")),)) is None
    renderer = check._renderer
    assert renderer is not None and renderer.tokens == {"eos_token": "</s>", "bos_token": "<s>"}
    assert check((conversation(("user", "r"), ("assistant", "b")),)) is None and check._renderer is renderer
    again = pickle.loads(pickle.dumps(check))
    assert again._renderer is None and again._config == check._config
    assert again((conversation(("user", "q")),))[0] == "no_assistant_turn"


@pytest.mark.parametrize("mode", ["Chat", "Chat_VSL", "DPO"])
def test_config_defaults(mode):
    c = B.ChatConfig(mode=mode, max_seq_length=8, pad_id=0, template="t", template_tokens=())
    assert (c.role_key, c.content_key, c.min_sequence_len, c.inverted_mask, c.train_on_all_assistant_turns,
            c.truncate, c.max_prompt_length, c.pack_sequences) == ("role", "content", 10, False, True, None, 512, True)
    assert c.normalize.is_identity
