"""Chat and DPO, rule by rule, with tokenizers small enough to write every expected id by hand: chat rows and
truncation (transforms/core/chat/rows.py), DPO records, tokens and rows (dpo.py), the encoder's parsing, batch
encoding and content search (encode.py).

Fast and deterministic: the oracle tests against transformers are tests/test_chat_encode.py's, test_dpo.py's and
test_chat_render.py's; these pin what those leave open (error details, boundaries, tie rules).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.test_chat_batch import backend, char_tokenizer, encoder, ids
from transforms.core.chat import rows as R
from transforms.core.chat.dpo import EncodedDpo, dpo_example, dpo_row, encode_dpo
from transforms.core.chat.encode import ChatEncoder, parse_conversation
from transforms.core.chat.template import ChatError, ChatRenderer

PAD = 0


def chat(*turns, template=None):
    """Messages (role, content) encoded with the character tokenizer (tests/test_chat_batch.py)."""
    enc = encoder(template) if template else encoder()
    return enc.encode([{"role": r, "content": c} for r, c in turns])


def text_of(tokens) -> str:
    return "".join(backend().id_to_token(int(i)) for i in tokens)


def contents(encoded) -> list[str]:
    return [text_of(encoded.ids[t.content[0]:t.content[1]]) for t in encoded.turns]


def cut(turns, excess, mode=R.KEEP_START):
    e = chat(*turns)
    return R.truncate(e, limit=len(e) - excess, mode=mode)


def chat_error(call, *args, **kwargs) -> ChatError:
    with pytest.raises(ChatError) as info:
        call(*args, **kwargs)
    return info.value


# ------------------------------------------------------------------------------------------------ chat rows


def test_a_row_needs_two_tokens_and_at_most_msl_plus_one():
    two = chat(("assistant", "x"), template="{% for m in messages %}{{ m.content }}{% endfor %}|")
    assert len(two) == 2  # "x" and "|"; only "x" trained
    row = R.chat_row(two, max_seq_length=3, pad_id=5)
    assert row.tolist() == [[ids("x")[0], 5, 5], [0, 0, 0], [ids("|")[0], 5, 5]]
    one = R.truncate(two, limit=2, mode=None)
    one = type(one)(one.text, one.ids[:1], one.trained[:1], one.offsets[:1], ())
    with pytest.raises(ValueError, match="^a conversation of fewer than 2 tokens has no position$"):
        R.chat_row(one, max_seq_length=3, pad_id=5)
    e = chat(("user", "hi"), ("assistant", "yo"))  # 8 tokens
    with pytest.raises(ValueError, match=r"^8 tokens do not fit a row of 6 positions \(truncate first\)$"):
        R.chat_row(e, max_seq_length=6, pad_id=5)


def test_padding_is_pad_id_in_ids_and_labels_and_untrained():
    e = chat(("user", "hi"), ("assistant", "yo"))
    row = R.chat_row(e, max_seq_length=10, pad_id=5)
    assert row[0, 7:].tolist() == row[2, 7:].tolist() == [5, 5, 5]
    assert row[1].tolist() == [0, 0, 0, 0, 1, 1, 1, 0, 0, 0]


# ------------------------------------------------------------------------------------------------ truncation


def test_truncation_errors_say_why():
    e = chat(("user", "hello"), ("assistant", "yo"))  # 11 tokens
    with pytest.raises(ValueError, match=r"^truncation mode 'keep_middle': expected one of \(None, 'keep_start', "
                                         r"'keep_end'\)$"):
        R.truncate(e, limit=3, mode="keep_middle")
    err = chat_error(R.truncate, e, limit=10, mode=None)
    assert (err.reason, err.detail) == ("too_long", "11 tokens, at most 10")
    err = chat_error(R.truncate, e, limit=4, mode=R.KEEP_END)
    assert (err.reason, err.detail) == ("too_long", "11 tokens, at most 4: cutting contents is not enough")


def test_the_last_token_of_excess_comes_from_an_assistant():
    """After the other contents are emptied, one token of excess is left: the assistant's tail loses it."""
    out = cut([("user", "ab"), ("assistant", "wxyz")], 3)
    assert contents(out) == ["", "wxy"]
    assert text_of(out.ids) == "<u></s><a>wxy</s>"


def test_an_assistant_that_cannot_be_cut_is_skipped_for_an_earlier_one():
    """The last assistant content is one token (it keeps it): the earlier assistant turn is cut instead."""
    turns = [("user", "q"), ("assistant", "abcd"), ("user", "r"), ("assistant", "w")]
    assert contents(cut(turns, 4)) == ["", "ab", "", "w"]
    assert contents(cut(turns, 5, R.KEEP_END)) == ["", "a", "", "w"]


def test_levelling_cuts_only_what_is_above_the_level():
    """Lengths 5, 2, 1 and an excess of 4: cut to 2 (removes 3), then the longest at 2 loses one more; the
    content of 1, below that level, is not touched."""
    turns = [("user", "abcde"), ("user", "xy"), ("user", "p"), ("assistant", "z")]
    assert contents(cut(turns, 4)) == ["a", "xy", "p", "z"]
    assert R._level_cuts([5, 2, 1], 4) == [4, 0, 0]


def test_levelling_ties_cut_the_earlier_content():
    turns = [("user", "abc"), ("user", "xyz"), ("assistant", "q")]
    assert contents(cut(turns, 3)) == ["a", "xy", "q"]
    assert contents(cut(turns, 3, R.KEEP_END)) == ["c", "yz", "q"]
    assert R._level_cuts([3, 3], 3) == [2, 1]
    assert R._level_cuts([2, 3, 3], 5) == [1, 2, 2]


def test_truncation_keeps_the_text_and_the_offsets_of_the_kept_tokens():
    e = chat(("user", "abcdef"), ("assistant", "xy"))
    out = R.truncate(e, limit=len(e) - 2, mode=R.KEEP_END)
    keep = np.ones(len(e), bool)
    keep[1:3] = False  # "ab"
    assert out.text == e.text
    assert out.offsets.tolist() == e.offsets[keep].tolist()
    assert out.ids.tolist() == e.ids[keep].tolist() and out.trained.tolist() == e.trained[keep].tolist()


def test_a_character_of_several_tokens_is_cut_whole():
    """Byte-level: 𠀀 is three tokens of one character; a content is only cut between characters."""
    from tests.chat_helpers import encoder as real_encoder

    enc = real_encoder("qwen2.5-instruct")
    e = enc.encode([{"role": "user", "content": "x𠀀y𠀀"}, {"role": "assistant", "content": "ok go"}])
    user = e.turns[0]
    assert user.content[1] - user.content[0] == 8  # x, the three of 𠀀, y, the three of 𠀀

    def user_text(excess, mode):
        out = R.truncate(e, limit=len(e) - excess, mode=mode)
        t = out.turns[0]
        return enc.backend.decode(out.ids[t.content[0]:t.content[1]].tolist()), len(e) - len(out)

    assert user_text(1, R.KEEP_START) == ("x𠀀y", 3)
    assert user_text(4, R.KEEP_START) == ("x𠀀", 4)
    assert user_text(5, R.KEEP_START) == ("x", 7)
    assert user_text(1, R.KEEP_END) == ("𠀀y𠀀", 1)
    assert user_text(2, R.KEEP_END) == ("y𠀀", 4)
    only = enc.encode([{"role": "user", "content": "𠀀"}, {"role": "assistant", "content": "ok go"}])
    out = R.truncate(only, limit=len(only) - 1, mode=R.KEEP_START)  # the whole character goes
    assert out.turns[0].content[0] == out.turns[0].content[1] and len(out) == len(only) - 3


def _byte_merging_tokenizer():
    """Byte-level BPE whose merges join "<" with the first byte of the euro sign (three UTF-8 bytes) and its last
    byte with ">": in "<€>" the sign's middle byte is the only token within the sign, and it shares the sign with
    the tokens on both sides."""
    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers

    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), 256)]
    others = [b for b in range(256) if b not in printable]
    byte_char = {**{b: chr(b) for b in printable}, **{b: chr(256 + k) for k, b in enumerate(others)}}  # GPT-2's
    vocab = {byte_char[b]: b for b in range(256)}
    first, _, last = (byte_char[b] for b in "€".encode())
    merges = [("<", first), (last, ">")]
    vocab.update({a + b: 256 + k for k, (a, b) in enumerate(merges)})
    tok = tokenizers.Tokenizer(models.BPE(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return tok


@pytest.mark.parametrize("mode", [R.KEEP_START, R.KEEP_END])
def test_a_content_without_a_cut_point_counts_for_nothing(mode):
    """A user content whose only token shares its character with the template's tokens on both sides cannot be cut
    (cuts fall between characters): it removes nothing, so the whole excess, and no more, comes from the
    assistant."""
    tok = _byte_merging_tokenizer()
    enc = ChatEncoder(ChatRenderer("{% for m in messages %}<{{ m.content }}>{% endfor %}", {}), tok)
    e = enc.encode([{"role": "user", "content": "€"}, {"role": "assistant", "content": "wxyz"}])
    assert e.text == "<€><wxyz>" and e.offsets[:3].tolist() == [[0, 2], [1, 2], [1, 3]]
    out = R.truncate(e, limit=len(e) - 1, mode=mode)
    assert len(out) == len(e) - 1
    assert out.ids[:3].tolist() == e.ids[:3].tolist()  # the euro sign's tokens all stay
    a, b = out.turns[1].content
    assert tok.decode(out.ids[a:b].tolist()) == "wxy"


# ------------------------------------------------------------------------------------------------ DPO records


def test_dpo_record_errors_name_the_side():
    def detail(**fields):
        return chat_error(dpo_example, **fields).detail

    assert detail(prompt="Q", chosen=None, rejected="B") == "no chosen response"
    assert detail(prompt="Q", chosen="A", rejected=None) == "no rejected response"
    assert detail(prompt="Q", chosen=3, rejected="B") == "chosen is int"
    assert detail(prompt="Q", chosen="A", rejected=2.5) == "rejected is float"
    assert detail(prompt="Q", chosen="A", rejected={"x": 1}) == "role None"  # one message object, of no role
    user_last = [{"role": "assistant", "content": "A"}, {"role": "user", "content": "Q"}]
    assert detail(prompt="Q", chosen=user_last, rejected="B") == "the last chosen message is not the assistant's"
    assert detail(prompt="Q", chosen="A", rejected=user_last) == "the last rejected message is not the assistant's"
    assert detail(chosen="A", rejected="B") == "the record has no prompt"
    assert detail(prompt="P", chosen="A", rejected=[{"role": "user", "content": "Q"},
                                                    {"role": "assistant", "content": "B"}]) == (
        "the prompt, the chosen and the rejected conversations disagree")
    assert detail(prompt="Q", chosen="A", rejected="B", json_text=True).startswith("not JSON: Expecting value")


def test_a_dpo_prompt_of_messages_with_other_keys():
    prompt = [{"from": "system", "value": "S"}, {"from": "human", "value": "Q"}]
    got = dpo_example(prompt=prompt, chosen="A", rejected="B", role_key="from", content_key="value")
    assert got.prompt == [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]
    # ShareGPT's keys are read without being named when a message lacks the default ones.
    assert dpo_example(prompt=prompt, chosen="A", rejected="B") == got
    err = chat_error(dpo_example, prompt=[{"speaker": "human", "text": "Q"}], chosen="A", rejected="B")
    assert err.reason == "unknown_role"


# ------------------------------------------------------------------------------------------------ DPO tokens


def _lookahead_encoder() -> ChatEncoder:
    """A tokenizer whose "ax" is one token only before "b" (a regex lookahead), and a template that writes the
    contents alone: the prompt "ax" ends at a token boundary before "b" and before "c", with other tokens."""
    import tokenizers
    from tokenizers import Regex, models, pre_tokenizers

    vocab = {"?": 0, "ax": 1, "a": 2, "x": 3, "b": 4, "c": 5}
    tok = tokenizers.Tokenizer(models.WordLevel(vocab, unk_token="?"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"ax(?=b)|[\s\S]"), "isolated")
    return ChatEncoder(ChatRenderer("{% for m in messages %}{{ m.content }}{% endfor %}", {}), tok)


def test_dpo_prompt_tokens_must_be_the_same_before_both_responses():
    enc = _lookahead_encoder()
    assert encode_dpo(enc, dpo_example(prompt="ax", chosen="c", rejected="cc")).prompt.tolist() == [2, 3]
    assert encode_dpo(enc, dpo_example(prompt="ax", chosen="b", rejected="bc")).prompt.tolist() == [1]
    err = chat_error(encode_dpo, enc, dpo_example(prompt="ax", chosen="b", rejected="c"))
    assert (err.reason, err.detail) == ("prompts_differ", "the prompt has different tokens before the two responses")
    err = chat_error(encode_dpo, enc, dpo_example(prompt="ax", chosen="c", rejected="b"))
    assert err.reason == "prompts_differ"


def test_dpo_prompt_errors_say_why():
    from tests.chat_helpers import encoder as real_encoder

    err = chat_error(encode_dpo, real_encoder("qwen2.5-instruct"), dpo_example(prompt="Q", chosen="\nA", rejected="B"))
    assert (err.reason, err.detail) == ("prompt_not_a_token_prefix", "a token spans the end of the prompt")
    prompt = [{"role": "system", "content": "Be brief"}, {"role": "user", "content": "Q"}]
    err = chat_error(encode_dpo, real_encoder("mistral-nemo-instruct"),
                     dpo_example(prompt=prompt, chosen="A", rejected="B"))
    assert (err.reason, err.detail) == ("prompt_not_a_prefix",
                                        "the prompt with the generation prompt does not begin the conversation")


def test_a_response_of_no_token_is_refused():
    """The prompt's end must be followed by a token of the response: here the generation prompt writes the
    response's text itself, so the conversation's tokens end where the prompt's do."""
    plain = ChatEncoder(ChatRenderer("{% for m in messages %}{{ m.content }}{% endfor %}", {}), backend())
    assert encode_dpo(plain, dpo_example(prompt="ab", chosen="c", rejected="d")).chosen.tolist() == ids("c")
    echo = ChatEncoder(ChatRenderer("{% for m in messages %}{{ m.content }}{% endfor %}"
                                    "{% if add_generation_prompt %}c{% endif %}", {}), backend())
    err = chat_error(encode_dpo, echo, dpo_example(prompt="ab", chosen="c", rejected="c"))
    assert (err.reason, err.detail) == ("prompt_not_a_token_prefix", "a token spans the end of the prompt")


# ------------------------------------------------------------------------------------------------ DPO rows


def enc(prompt, chosen, rejected):
    return EncodedDpo(np.array(prompt, np.int32), np.array(chosen, np.int32), np.array(rejected, np.int32))


def test_a_pair_that_fills_the_row_exactly_keeps_its_whole_prompt():
    row = dpo_row(enc([1, 2, 3, 4], [5, 6, 7, 8], [9]), max_seq_length=8, pad_id=PAD, max_prompt_length=2)
    assert row[0].tolist() == [1, 2, 3, 4, 5, 6, 7, 8]
    assert row[3].tolist() == [1, 2, 3, 4, 9, 0, 0, 0]
    row = dpo_row(enc([1, 2, 3, 4], [5, 6, 7, 8, 10], [9]), max_seq_length=8, pad_id=PAD, max_prompt_length=2)
    assert row[0].tolist() == [3, 4, 5, 6, 7, 8, 10, 0]


def test_the_shortest_prompts():
    row = dpo_row(enc([1, 2, 3], [4, 5, 6], [7]), max_seq_length=4, pad_id=PAD, max_prompt_length=1)
    assert row[0].tolist() == [3, 4, 5, 6] and row[1].tolist() == [1, 1, 1, 0] and row[2].tolist() == [4, 5, 6, 0]
    row = dpo_row(enc([1], [2], [3, 4]), max_seq_length=4, pad_id=PAD)
    assert row.tolist() == [[1, 2, 0, 0], [1, 0, 0, 0], [2, 0, 0, 0], [1, 3, 4, 0], [1, 1, 0, 0], [3, 4, 0, 0]]


def test_the_default_prompt_limit_is_512_tokens():
    prompt = list(range(1, 514))  # 513 tokens
    row = dpo_row(enc(prompt, [600], [601]), max_seq_length=513, pad_id=PAD)
    assert row[0].tolist() == prompt[1:] + [600] and row[1, 511] == 1


def test_dpo_rows_too_long_say_why():
    err = chat_error(dpo_row, enc([1, 2, 3, 4, 5], [6], [7]), max_seq_length=5, pad_id=PAD)
    assert (err.reason, err.detail) == ("too_long", "the prompt alone has 5 tokens, msl 5")
    err = chat_error(dpo_row, enc([1, 2, 3], [6, 7], [8]), max_seq_length=4, pad_id=PAD, max_prompt_length=0)
    assert (err.reason, err.detail) == ("too_long", "no prompt token left")
    err = chat_error(dpo_row, enc([], [6], [8]), max_seq_length=4, pad_id=PAD)
    assert (err.reason, err.detail) == ("too_long", "no prompt token left")


# ------------------------------------------------------------------------------------------------ the encoder


def test_parse_errors_say_why():
    assert chat_error(parse_conversation, '[{"role": "wizard", "content": "x"}]').detail == "role 'wizard'"
    assert chat_error(parse_conversation, '{"role": "user"}').detail == "expected a list of objects, got dict"
    assert chat_error(parse_conversation, "nope").detail.startswith("not JSON: Expecting value")
    assert chat_error(parse_conversation, 3).detail == "expected a list of objects, got int"


def test_encode_many_is_encode_of_each_with_the_errors_in_place():
    conversations = [
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
        [{"role": "user", "content": "only a question"}],
        [],
        [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"},
         {"role": "assistant", "content": "d"}],
    ]
    e = encoder()
    got = e.encode_many(conversations)
    assert [type(g).__name__ for g in got] == ["EncodedChat", "ChatError", "ChatError", "EncodedChat"]
    assert (got[1].reason, got[2].reason) == ("no_assistant_turn", "no_messages")
    for g, c in zip(got, conversations):
        if isinstance(g, ChatError):
            continue
        want = e.encode(c)
        assert g.ids.tolist() == want.ids.tolist() and g.trained.tolist() == want.trained.tolist()
        assert g.text == want.text and g.turns == want.turns
    assert got[3].trained.sum() == 4  # every assistant turn by default
    last = e.encode_many(conversations[3:], train_on_all_assistant_turns=False)[0]
    assert last.trained.sum() == 2
    # the messages are checked before the template renders them
    assert [g.reason for g in encoder("{{ raise_exception('no') }}").encode_many(conversations[:3])] == [
        "template_error", "template_error", "no_messages"]


def test_encode_many_renders_as_encode():
    """The template sees add_generation_prompt False, and the texts are tokenized without added special tokens
    (Llama 3's tokenizer would add a BOS: the template writes its own)."""
    from tests.chat_helpers import encoder as real_encoder

    flag = "{% for m in messages %}{{ m.content }}{% endfor %}[{{ add_generation_prompt }}]"
    assert encoder(flag).encode_many([[{"role": "assistant", "content": "a"}]])[0].text == "a[False]"
    llama = real_encoder("llama3-instruct")
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    got = llama.encode_many([messages])[0]
    assert got.ids.tolist() == llama.encode(messages).ids.tolist()
    assert got.ids.tolist().count(128000) == 1


def test_encode_many_without_generation_prompt():
    gen = "{% for m in messages %}{{ m.content }}{% endfor %}{% if add_generation_prompt %}<a>{% endif %}"
    got = encoder(gen).encode_many([[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]])[0]
    assert got.text == "qa" and got.ids.tolist() == ids("qa")


def test_contents_found_by_search_at_the_start_of_the_text():
    """A template that trims contents defeats the sentinels: contents are then searched for, after the template's
    own text before them, and may start at character 0."""
    trim = "{% for m in messages %}{{ m.content | trim }}|{% endfor %}"
    got = encoder(trim).tokenize([{"role": "user", "content": " ab "}, {"role": "assistant", "content": "ab"}])
    assert got.text == "ab|ab|" and got.spans == ((0, 2), (3, 5))
    headed = "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}{% endfor %}"
    got = encoder(headed).tokenize([{"role": "user", "content": " user "}, {"role": "assistant", "content": "ssis"}])
    assert got.text == "<user>user<assistant>ssis" and got.spans == ((6, 10), (21, 25))


def test_contents_searched_when_the_template_refuses_the_sentinels():
    picky = ("{% for m in messages %}{% if m.content.isascii() %}<{{ m.role }}>{{ m.content }}{% else %}"
             "{{ raise_exception('ascii only') }}{% endif %}{% endfor %}")
    got = encoder(picky).tokenize([{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A2"}])
    assert got.text == "<user>Q1<assistant>A2" and got.spans == ((6, 8), (19, 21))
    err = chat_error(encoder(picky).tokenize, [{"role": "user", "content": "é"}, {"role": "assistant", "content": "a"}])
    assert err.reason == "template_error"
    upper = "{% for m in messages %}<{{ m.role }}>{{ m.content | upper }}{% endfor %}"
    err = chat_error(encoder(upper).encode, [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "a"}])
    assert (err.reason, err.detail) == ("content_rewritten", "the template writes message 1 (assistant) otherwise "
                                                             "than its content, and not as its stripped text")


def test_errors_name_the_reason_and_the_message():
    e = encoder()

    def error(messages):
        err = chat_error(e.encode, messages)
        return err.reason, err.detail

    assert error([]) == ("no_messages", "the conversation has no messages")
    assert error([{"role": "user", "content": "q"}, {"role": "gpt", "content": "a"}]) == (
        "unknown_role", "message 1: role 'gpt'")
    assert error([{"role": "user", "content": ["q"]}]) == ("not_a_string", "message 0: content is list")
    assert error([{"role": "user", "content": "q"}, {"role": "assistant", "content": " \n"}]) == (
        "empty_content", "message 1 (assistant) is empty")
    assert error([{"role": "system", "content": ""}, {"role": "user", "content": "q"}]) == (
        "no_assistant_turn", "no assistant token to train")
    assert str(chat_error(e.encode, [])) == "no_messages: the conversation has no messages"


def test_the_generation_prompt_is_rendered_and_located():
    """tokenize(add_generation_prompt=True): the text ends with the generation prompt, and the contents are located
    in that text, even by a template that writes other text around them when asked for the prompt."""
    gen = ("{% for m in messages %}{% if add_generation_prompt %}a:{% endif %}{{ m.content }}{% endfor %}"
           "{% if add_generation_prompt %}<a>{% endif %}")
    messages = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    got = encoder(gen).tokenize(messages, add_generation_prompt=True)
    assert got.text == "a:aa:b<a>" and got.spans == ((2, 3), (5, 6))
    assert got.ids.tolist() == ids("a:aa:b<a>")
    plain = encoder(gen).tokenize(messages)
    assert plain.text == "ab" and plain.spans == ((0, 1), (1, 2))


def test_a_content_the_template_writes_twice_is_located_at_its_first_place():
    twice = "{% for m in messages %}<{{ m.role }}>{{ m.content }}|{{ m.content }}{% endfor %}"
    got = encoder(twice).tokenize([{"role": "user", "content": "q"}, {"role": "assistant", "content": "r"}])
    assert got.text == "<user>q|q<assistant>r|r" and got.spans == ((6, 7), (20, 21))


def test_the_encoder_uses_the_templates_generation_markers_by_default():
    marked = ("{% for m in messages %}{{ {'user': '<u>', 'assistant': '<a>'}[m.role] }}{% if m.role == 'assistant' %}"
              "{% generation %}{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}</s>"
              "{% endfor %}")
    renderer = ChatRenderer(marked, {})
    default = ChatEncoder(renderer, backend())
    assert default.generation_markers is True and default.uses_markers is True
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "ab"}]
    assert default.encode(messages).trained.astype(int).tolist() == [0, 0, 0, 0, 1, 1, 0]  # the block: "ab"
    rule = ChatEncoder(renderer, backend(), generation_markers=False)
    assert rule.uses_markers is False
    assert rule.encode(messages).trained.astype(int).tolist() == [0, 0, 0, 0, 1, 1, 1]  # "ab" and its </s>


def test_the_longest_special_token_ends_a_turn():
    """Special tokens "</s>" and "</s>!" both exist: the end of turn is the longer one, and the whitespace after it
    is trained with it."""
    tok = char_tokenizer(["</s>", "</s>!"])
    template = "{% for m in messages %}{{ m.role[0] }}:{{ m.content }}</s>!\n{% endfor %}"
    got = ChatEncoder(ChatRenderer(template, {}), tok).encode(
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": "ab"}])
    assert [tok.id_to_token(int(i)) for i in got.ids] == ["u", ":", "q", "</s>!", "\n", "a", ":", "a", "b", "</s>!",
                                                          "\n"]
    assert got.trained.astype(int).tolist() == [0] * 7 + [1, 1, 1, 1]


def test_whitespace_between_a_content_and_its_end_of_turn():
    template = ("{% for m in messages %}{{ {'user': '<u>', 'assistant': '<a>'}[m.role] }}{{ m.content }} </s>\n"
                "{% endfor %}")
    got = encoder(template).encode([{"role": "user", "content": "q"}, {"role": "assistant", "content": "ab"}])
    assert text_of(got.ids) == "<u>q </s>\n<a>ab </s>\n"
    assert got.trained.astype(int).tolist() == [0] * 6 + [1, 1, 1, 1, 1]  # a b, the space, </s>, the newline


def test_a_tokenizer_without_special_tokens():
    tok = char_tokenizer()
    got = ChatEncoder(ChatRenderer("{% for m in messages %}[{{ m.content }}] {% endfor %}", {}), tok).encode(
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": "ab"}])
    assert got.text == "[q] [ab] "
    assert got.trained.astype(int).tolist() == [0, 0, 0, 0, 0, 1, 1, 0, 0]  # no end-of-turn token to extend over


def test_whitespace_before_an_assistant_content_stops_at_the_content_before():
    """The assistant turn extends left over whitespace, but never into the previous content, and from the very
    start of the text when it is the first."""
    adjacent = "{% for m in messages %}{{ m.content }}{% endfor %}"
    got = encoder(adjacent).encode([{"role": "user", "content": "q  "}, {"role": "assistant", "content": "a"}])
    assert got.trained.astype(int).tolist() == [0, 0, 0, 1]
    spaced = "{% for m in messages %} {{ m.content }}|{% endfor %}"
    got = encoder(spaced).encode([{"role": "assistant", "content": "a"}, {"role": "user", "content": "q"},
                                  {"role": "assistant", "content": "b"}])
    assert got.text == " a| q| b|"
    assert got.trained.astype(int).tolist() == [1, 1, 0, 0, 0, 0, 1, 1, 0]


def test_contents_rendered_out_of_order():
    """A template that writes the system message last: turns follow the text, each from the end of the one
    before it in the text, and the last one runs to the end of the text."""
    late = ("{% for m in messages[1:] %}{{ {'user': '<u>', 'assistant': '<a>'}[m.role] }}{{ m.content }}</s>"
            "{% endfor %}<y>{{ messages[0].content }}</s>!")
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"},
                {"role": "assistant", "content": "  ab"}]
    got = encoder(late).encode(messages)
    assert text_of(got.ids) == "<u>q</s><a>  ab</s><y>s</s>!"
    assert [t.turn for t in got.turns] == [(9, 13), (0, 3), (3, 9)]
    assert [t.content for t in got.turns] == [(10, 11), (1, 2), (4, 8)]
    assert got.trained.astype(int).tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0]


def test_a_trailing_text_belongs_to_the_last_turn():
    template = "{% for m in messages %}{{ {'user': '<u>', 'assistant': '<a>'}[m.role] }}{{ m.content }}</s>{% endfor %}!!"
    got = encoder(template).encode([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])
    assert [t.turn for t in got.turns] == [(0, 3), (3, 8)]


def test_offsets_are_each_tokens_characters():
    """Offsets index the rendered text (int64), also for the tokens of a content re-encoded around special-token
    text."""
    got = encoder().encode([{"role": "user", "content": "a</s>b"}, {"role": "assistant", "content": "c"}])
    assert got.offsets.dtype == np.int64
    assert [got.text[s:e] for s, e in got.offsets] == ["<u>", "a", "<", "/", "s", ">", "b", "</s>", "<a>", "c",
                                                       "</s>"]
    assert got.ids.tolist() == ids("<u>a") + [backend().token_to_id(c) for c in "</s>"] + ids("b</s><a>c</s>")


def test_special_token_text_before_the_first_and_after_the_last_template_special():
    """The piece encoded again runs from the text's start, or to its end, when no template special token is
    there."""
    head = encoder("{% for m in messages %}{{ m.content }}</s>{% endfor %}")
    got = head.encode([{"role": "user", "content": "a<u>b"}, {"role": "assistant", "content": "c"}])
    assert [got.text[s:e] for s, e in got.offsets] == ["a", "<", "u", ">", "b", "</s>", "c", "</s>"]
    tail = encoder("<y>{% for m in messages %}{{ m.content }}{% endfor %}")
    got = tail.encode([{"role": "user", "content": "q"}, {"role": "assistant", "content": "c<u>d"}])
    assert [got.text[s:e] for s, e in got.offsets] == ["<y>", "q", "c", "<", "u", ">", "d"]
    assert got.trained.astype(int).tolist() == [0, 0, 1, 1, 1, 1, 1]


def test_a_template_special_token_that_absorbs_the_whitespace_of_a_content():
    """A special token with rstrip covers the whitespace after it: when that whitespace begins a content, the
    token is still the template's (a control token), not special-token text in the content."""
    tok = char_tokenizer(["<s>"], rstrip=True)
    tok.add_special_tokens(["</s>"])
    enc = ChatEncoder(ChatRenderer("<s>{% for m in messages %}{{ m.content }}</s>{% endfor %}", {}), tok)
    got = enc.encode([{"role": "user", "content": "  hi"}, {"role": "assistant", "content": "yo"}])
    assert got.ids.tolist() == tok.encode(got.text, add_special_tokens=False).ids
    assert tok.id_to_token(int(got.ids[0])) == "<s>"


def _oracle_mask(template, messages):
    from tests.chat_helpers import hf_tokenizer

    hf = hf_tokenizer("qwen2.5-instruct")
    return hf.apply_chat_template(messages, chat_template=template, return_dict=True,
                                  return_assistant_tokens_mask=True)["assistant_masks"]


def test_generation_blocks_at_the_edges_as_transformers():
    """A token is trained when its characters overlap a generation block, as transformers (5.24 on) marks it. The
    old quirks are not copied: a block whose last token is the text's first does not train to the end, and an empty
    block trains nothing and stops nothing."""
    from tests.chat_helpers import backend as real_backend

    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    body = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' %}{% generation %}"
            "{{ m.content }}<|im_end|>{% endgeneration %}{% else %}{{ m.content }}<|im_end|>{% endif %}\n{% endfor %}")
    cases = [(body + "{% generation %}{% endgeneration %}", ["yo", "<|im_end|>"]),
             ("{% generation %}{% endgeneration %}" + body, ["yo", "<|im_end|>"]),
             ("{% generation %}<|im_start|>{% endgeneration %}" + body, ["<|im_start|>", "yo", "<|im_end|>"]),
             # a block from the middle of a token: the whole token is trained
             ("{% for m in messages %}{{ m.role[:2] }}{% generation %}{{ m.role[2:] }}{% endgeneration %}:"
              "{{ m.content }}\n{% endfor %}", ["user", "assistant"])]
    for template, trained_pieces in cases:
        got = ChatEncoder(ChatRenderer(template, {}), real_backend("qwen2.5-instruct")).encode(messages)
        pieces = [got.text[a:b] for (a, b), t in zip(got.offsets.tolist(), got.trained) if t]
        assert pieces == trained_pieces, template
        assert got.trained.astype(int).tolist() == _oracle_mask(template, messages)


# ------------------------------------------------------------------------------------------------ the renderer


def _same_as_transformers(template, messages):
    """Our rendering of `template` is transformers' apply_chat_template(tokenize=False) (the oracle), with the Qwen
    tokenizer's special tokens."""
    from tests.chat_helpers import hf_tokenizer, tokenizer_config
    from transforms.core.chat.template import template_tokens

    ours = ChatRenderer(template, template_tokens(tokenizer_config("qwen2.5-instruct"))).render(messages).text
    assert ours == hf_tokenizer("qwen2.5-instruct").apply_chat_template(messages, chat_template=template,
                                                                         tokenize=False)
    return ours


def test_chat_error_text():
    assert str(ChatError("too_long", "9 tokens")) == "too_long: 9 tokens"
    assert str(ChatError("too_long")) == "too_long"
    err = ChatError("no_messages", "")
    assert (str(err), err.reason, err.detail) == ("no_messages", "no_messages", "")
    assert isinstance(err, ValueError)


def test_config_errors_say_why():
    from transforms.core.chat.template import template_from_config, template_tokens

    with pytest.raises(ValueError, match=r"^chat_template: expected a string or a list of named templates, got int$"):
        template_from_config({"chat_template": 3})
    with pytest.raises(ValueError, match=r"^chat_template: a list of templates without a 'default' one \(names: "
                                         r"\['None', 'tool_use'\]\)$"):
        template_from_config({"chat_template": [{"name": "tool_use", "template": "U"}, {"template": "V"}, "x"]})
    with pytest.raises(ValueError, match=r"^a special token must be a string or an AddedToken dict, got 3$"):
        template_tokens({"eos_token": 3})
    with pytest.raises(ValueError, match=r"^a special token must be a string or an AddedToken dict, got \{'c': 1\}$"):
        template_tokens({"eos_token": {"c": 1}})
    err = chat_error(ChatRenderer, "{% for m in messages %}", {})
    assert err.reason == "template_error"
    assert err.detail.startswith("the chat template does not compile: Unexpected end of template")


@pytest.mark.parametrize("call", ["tojson", "tojson(indent=2)", "tojson(separators=(',', ':'))",
                                  "tojson(sort_keys=true)", "tojson(ensure_ascii=true)",
                                  "tojson(indent=1, sort_keys=true, ensure_ascii=true)"])
def test_tojson_as_transformers(call):
    template = "{{ messages | " + call + " }}"
    messages = [{"role": "user", "content": "é <b>&", "zeta": [1, 2]}]
    got = _same_as_transformers(template, messages)
    if "indent" in call:
        assert "\n" in got
    if "ensure_ascii=true" in call:
        assert "\\u00e9" in got


def test_dict_and_namespace_helpers_as_transformers():
    template = ("{{ dict([('a', 1)], b=2) | tojson }}|{{ dict.fromkeys(['x', 'y'], 0) | tojson }}|"
                "{{ dict.fromkeys(['z']) | tojson }}|{{ dict.copy is defined }}|"
                "{% set ns = namespace({'n': 1}, m=2) %}{{ ns.n }}{{ ns.m }}")
    assert _same_as_transformers(template, [{"role": "user", "content": "q"}]) == (
        '{"a": 1, "b": 2}|{"x": 0, "y": 0}|{"z": null}|False|12')
    # dict.fromkeys takes no keyword arguments, in transformers' helper as in Python
    err = chat_error(ChatRenderer("{{ dict.fromkeys(['a'], value=1) }}", {}).render, [{"role": "user", "content": "q"}])
    assert err.reason == "template_error" and "keyword" in err.detail
    for refused in ("{% set ns = namespace(_x=1) %}", "{% set ns = namespace({'_x': 1}) %}"):
        err = chat_error(ChatRenderer(refused, {}).render, [{"role": "user", "content": "q"}])
        assert err.reason == "template_error" and "underscore" in err.detail


def test_blocks_are_trimmed_and_stripped_as_transformers():
    template = "  {% for m in messages %}\n  [{{ m.content }}]\n  {% endfor %}\n  {% if true %}x{% endif %}"
    assert _same_as_transformers(template, [{"role": "user", "content": "q"}]) == "  [q]\nx"


def test_messages_reach_the_template_as_plain_data():
    """What transformers hands a template: None-valued keys dropped, JSON types (subclasses rebuilt as the base
    type, booleans kept), anything else as a placeholder naming its type, reasoning under its aliases."""
    import enum
    from types import MappingProxyType

    class Role(str, enum.Enum):
        USER = "user"

    class Big(int):
        pass

    class Ratio(float):
        pass

    message = {"role": Role.USER, "content": "q", "name": None, "flag": True, "off": False, "n": Big(7),
               "r": Ratio(0.5), "meta": MappingProxyType({"k": None, "t": (1, "a")}), "tags": {"x"},
               "obj": object(), "reasoning": "because"}
    template = ("{% for m in messages %}{{ m.role }}|{{ m.name is defined }}|{{ m | tojson }}|{{ m.role is string }}"
                "{% endfor %}")
    got = _same_as_transformers(template, [message])
    assert got.startswith("user|False|")
    assert '"flag": true, "off": false, "n": 7, "r": 0.5, "meta": {"k": null, "t": [1, "a"]}' in got
    assert '"tags": "<set>", "obj": "<object>"' in got
    assert '"thinking": "because"' in got and '"reasoning_content": "because"' in got
    from transforms.core.chat.template import _plain
    plain = _plain({"n": Big(7), "r": Ratio(0.5), "s": Role.USER, "b": True, "t": (Big(1),)})
    assert [type(v) for v in plain.values()] == [int, float, str, bool, tuple] and type(plain["t"][0]) is int


def test_reasoning_aliases_as_transformers():
    for field in ("reasoning_content", "thinking", "reasoning"):
        message = {"role": "assistant", "content": "a", field: "why"}
        got = _same_as_transformers("{% for m in messages %}{{ m | tojson }}{% endfor %}", [message])
        assert '"reasoning_content": "why"' in got and '"thinking": "why"' in got
    message = {"role": "assistant", "content": "a", "thinking": "t", "reasoning": "r"}
    got = _same_as_transformers("{% for m in messages %}{{ m | tojson }}{% endfor %}", [message])
    assert '"reasoning_content": "t"' in got  # the first alias set wins
    got = _same_as_transformers("{% for m in messages %}{{ m | tojson }}{% endfor %}",
                                [{"role": "assistant", "content": "a", "reasoning": None}])
    assert "reasoning" not in got and "thinking" not in got


@pytest.mark.parametrize("template", [
    "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}{{ eos_token }}{% endfor %}",
    "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}",
])
def test_special_token_text_with_a_prefix_space_tokenizer_keeps_its_characters(template):
    """A SentencePiece-style tokenizer (Metaspace, prepend "first"): the piece around special-token text is encoded
    again after a newline, which is then removed, offsets included: every token's offsets are its own characters,
    and the content's tokens spell the content."""
    import json

    import tokenizers

    from tests.chat_helpers import TOKENIZERS
    from tests.helpers import require_shared

    spec = json.loads((require_shared(TOKENIZERS / "mistral-7b") / "tokenizer.json").read_text())
    spec["normalizer"] = None
    spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}
    sp = tokenizers.Tokenizer.from_str(json.dumps(spec))
    enc = ChatEncoder(ChatRenderer(template, {"bos_token": "<s>", "eos_token": "</s>"}), sp)
    specials = {i for i, t in sp.get_added_tokens_decoder().items() if t.special}
    for content in ("a </s> b<s>", "x</s>y", "</s>abc", "hello</s>", "Xa</s>X", "XX</s>", "\n</s>\n"):
        got = enc.encode([{"role": "user", "content": content}, {"role": "assistant", "content": "c"}])
        assert "".join(got.text[s:e] for s, e in got.offsets) == got.text, content  # the offsets tile the text
        a, b = got.turns[0].chars
        inside = [int(i) for i, (s, e) in zip(got.ids, got.offsets) if s < b and e > a]
        assert inside and not specials & set(inside), content


def test_a_piece_that_cannot_be_encoded_apart_is_refused():
    err = chat_error(encoder()._plain_piece, "a</s>b", np.array([1, 2, 3], np.int32))
    assert (err.reason, err.detail) == ("special_token_in_content",
                                        "a content holds special-token text and this tokenizer cannot encode it apart")


def test_an_assistant_turn_never_extends_into_the_next_content_in_the_text():
    """The system message written right after the assistant's, starting with whitespace: that whitespace is the
    system content's, not the assistant turn's."""
    late = ("{% for m in messages[1:] %}{{ {'user': '<u>', 'assistant': '<a>'}[m.role] }}{{ m.content }}{% endfor %}"
            "{{ messages[0].content }}</s>")
    got = encoder(late).encode([{"role": "system", "content": "  s"}, {"role": "user", "content": "q"},
                                {"role": "assistant", "content": "ab"}])
    assert text_of(got.ids) == "<u>q<a>ab  s</s>"
    assert got.trained.astype(int).tolist() == [0, 0, 0, 1, 1, 0, 0, 0, 0]
    assert [t.turn for t in got.turns] == [(5, 9), (0, 3), (3, 5)]  # "<a>" follows "q": the end of its turn


def test_a_message_the_template_leaves_out_is_refused_naming_it():
    """The contents are located by rendering sentinels: one whose sentinel the template never writes is not in the
    text, and the error names it (not a content searched for and missed)."""
    skip = ("{% for m in messages %}{% if m.role != 'system' %}{{ {'user': '<u>', 'assistant': '<a>'}[m.role] }}"
            "{{ m.content }}</s>{% endif %}{% endfor %}")
    for messages in ([{"role": "system", "content": "zz"}, {"role": "user", "content": "q"},
                      {"role": "assistant", "content": "a"}],
                     [{"role": "user", "content": "q"}, {"role": "system", "content": "zz"},
                      {"role": "assistant", "content": "a"}]):
        err = chat_error(encoder(skip).encode, messages)
        where = [m["role"] for m in messages].index("system")
        assert (err.reason, err.detail) == ("system_not_rendered",
                                            f"the template does not write message {where} (the system prompt)")
    user_left_out = skip.replace("m.role != 'system'", "m.role != 'user'")
    err = chat_error(encoder(user_left_out).encode, [{"role": "user", "content": "q"},
                                                     {"role": "assistant", "content": "a"}])
    assert (err.reason, err.detail) == ("content_not_found", "the template does not write message 0 (user)")


def test_an_assistant_turn_never_takes_the_next_contents_special_token_text():
    """The content after the assistant's starts with end-of-turn text: that text is the next content's (encoded
    as plain characters), so the assistant turn ends with its own content."""
    late = ("{% for m in messages[1:] %}{{ {'user': '<u>', 'assistant': '<a>'}[m.role] }}{{ m.content }}{% endfor %}"
            "{{ messages[0].content }}</s>")
    got = encoder(late).encode([{"role": "system", "content": "</s>s"}, {"role": "user", "content": "q"},
                                {"role": "assistant", "content": "ab"}])
    assert got.text == "<u>q<a>ab</s>s</s>"
    assert got.ids.tolist() == ids("<u>q<a>ab") + [backend().token_to_id(c) for c in "</s>s"] + ids("</s>")
    assert got.trained.astype(int).tolist() == [0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0]
    assert [t.turn for t in got.turns] == [(5, 11), (0, 3), (3, 5)]


def test_special_token_text_read_through_the_normalizer_is_content():
    """A special token matched after normalization (lowercased: "</S>" reads as "</s>") inside a content is the
    content's text, encoded as plain characters, although the template writes the token's own text after it."""
    from tokenizers import AddedToken, normalizers

    tok = char_tokenizer()
    tok.normalizer = normalizers.Lowercase()
    tok.add_special_tokens([AddedToken("</s>", special=True, normalized=True)])
    eos = tok.token_to_id("</s>")
    enc = ChatEncoder(ChatRenderer("{% for m in messages %}{{ m.content }}</s>{% endfor %}", {}), tok)
    assert tok.encode("a</S>b", add_special_tokens=False).ids[1] == eos  # the tokenizer's reading
    got = enc.encode([{"role": "user", "content": "a</S>b"}, {"role": "assistant", "content": "c"}])
    plain = [tok.token_to_id(c) for c in "a</s>b"]
    assert got.ids.tolist() == plain + [eos, tok.token_to_id("c"), eos]
    assert [got.text[s:e] for s, e in got.offsets][:6] == ["a", "<", "/", "S", ">", "b"]


def test_special_token_text_the_template_writes_around_an_empty_content_is_the_templates():
    """An empty content holds no character, so a special token whose text the template writes on both sides of
    it stays the template's token."""
    split = "{% for m in messages %}<{{ m.content }}u>{% endfor %}"
    got = encoder(split).encode([{"role": "system", "content": ""}, {"role": "user", "content": "q"},
                                 {"role": "assistant", "content": "a"}])
    assert got.text == "<u><qu><au>" and got.turns[0].chars == (1, 1)
    assert got.ids.tolist() == ids("<u><qu><au>")


def test_a_piece_is_encoded_alone_first():
    """A tokenizer without a pre-tokenizer reads the text between special tokens as one word, so any text put
    before a piece changes its tokens: the piece around special-token text is encoded alone, as it stands."""
    import tokenizers
    from tokenizers import AddedToken, models

    vocab = {"?": 0, "a": 1, "b": 2, "c": 3, "a</s>b": 4}
    tok = tokenizers.Tokenizer(models.WordLevel(vocab, unk_token="?"))
    tok.add_special_tokens([AddedToken("</s>", special=True, normalized=False)])
    eos = tok.token_to_id("</s>")
    enc = ChatEncoder(ChatRenderer("{% for m in messages %}{{ m.content }}</s>{% endfor %}", {}), tok)
    got = enc.encode([{"role": "user", "content": "a</s>b"}, {"role": "assistant", "content": "c"}])
    assert got.ids.tolist() == [4, eos, 3, eos]
    assert got.offsets.tolist() == [[0, 6], [6, 10], [10, 11], [11, 15]]


def test_a_template_whose_text_looks_like_a_sentinel():
    """Contents are located with private-use sentinels; a template writing such a character itself (here one
    naming a message that does not exist) cannot mislead the location: the contents are searched for."""
    odd = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}\U000fff002\U000fff01"
    got = encoder(odd).tokenize([{"role": "user", "content": "q"}, {"role": "assistant", "content": "r"}])
    assert got.spans == ((6, 7), (18, 19))


def test_an_error_inside_a_generation_block_is_the_templates_message():
    template = ("{% for m in messages %}{% generation %}{% if m.role == 'user' %}{{ raise_exception('no users') }}"
                "{% endif %}{{ m.content }}{% endgeneration %}{% endfor %}")
    err = chat_error(ChatRenderer(template, {}).render, [{"role": "user", "content": "q"}])
    assert (err.reason, err.detail) == ("template_error", "TemplateError: no users")
