"""DPO: records, prompt/response tokens against transformers, and the 6-row layout by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.chat_helpers import TEMPLATES, contents, encoder, hf_ids, special_ids, tokens, training_conversations
from transforms.core.chat.dpo import DPO_FEATURES, EncodedDpo, dpo_example, dpo_row, encode_dpo
from transforms.core.chat.template import ChatError

PAD = 0


def enc(prompt, chosen, rejected):
    return EncodedDpo(np.array(prompt, np.int32), np.array(chosen, np.int32), np.array(rejected, np.int32))


# ----------------------------------------------------------------------------- rows by hand


def test_row_by_hand():
    row = dpo_row(enc([11, 12, 13], [21, 9], [31, 32, 33, 9]), max_seq_length=7, pad_id=PAD)
    assert row.dtype == np.int32 and row.shape == (6, 7)
    assert DPO_FEATURES == ("chosen_input_ids", "chosen_attention_mask", "chosen_labels", "rejected_input_ids",
                            "rejected_attention_mask", "rejected_labels")
    assert row.tolist() == [
        [11, 12, 13, 21, 9, 0, 0],
        [0, 0, 1, 1, 0, 0, 0],  # positions whose label is a response token: |P|-1 .. |S|-2
        [0, 0, 21, 9, 0, 0, 0],
        [11, 12, 13, 31, 32, 33, 9],
        [0, 0, 1, 1, 1, 1, 0],
        [0, 0, 31, 32, 33, 9, 0],
    ]
    inverted = dpo_row(enc([11, 12, 13], [21, 9], [31, 32, 33, 9]), max_seq_length=7, pad_id=PAD,
                       inverted_mask=True)
    assert (inverted[[1, 4]] == 1 - row[[1, 4]]).all() and (inverted[[0, 2, 3, 5]] == row[[0, 2, 3, 5]]).all()


def test_mask_end_fixed():
    """The reference trains positions |P|-1 .. |S|-1; the last one's label is padding: we stop at |S|-2."""
    p, r = [5, 6, 7, 8], [40, 41, 42]
    row = dpo_row(enc(p, r, [40, 41, 43]), max_seq_length=10, pad_id=PAD)
    s = len(p) + len(r)
    reference = np.zeros(10, int)
    reference[len(p) - 1:s] = 1
    assert row[1].tolist() == [0, 0, 0, 1, 1, 1, 0, 0, 0, 0]
    assert (reference - row[1]).tolist() == [0] * (s - 1) + [1] + [0] * (10 - s)
    assert row[2][row[1] == 1].tolist() == r  # every trained label is a response token
    assert (row[2][row[1] == 0] == PAD).all()


def test_pad_id_used_for_ids_and_labels():
    row = dpo_row(enc([1, 2], [3], [4]), max_seq_length=5, pad_id=77)
    assert row[0].tolist() == [1, 2, 3, 77, 77]
    assert row[2].tolist() == [77, 3, 77, 77, 77]
    assert row[1].tolist() == [0, 1, 0, 0, 0]


def test_truncation_keeps_the_prompt_end_then_cuts_responses():
    p = [1, 2, 3, 4, 5, 6]
    # too long: the prompt keeps its last 3 tokens; both responses then fit
    row = dpo_row(enc(p, [21, 22, 23], [31, 32, 33, 34, 35]), max_seq_length=8, pad_id=PAD, max_prompt_length=3)
    assert row[0].tolist() == [4, 5, 6, 21, 22, 23, 0, 0]
    assert row[3].tolist() == [4, 5, 6, 31, 32, 33, 34, 35]
    assert row[4].tolist() == [0, 0, 1, 1, 1, 1, 1, 0]
    assert row[5].tolist() == [0, 0, 31, 32, 33, 34, 35, 0]
    # still too long: the responses are cut to msl - |P| (their end-of-turn with them)
    row = dpo_row(enc(p, [21, 22, 23], [31, 32, 33, 34, 35]), max_seq_length=6, pad_id=PAD, max_prompt_length=4)
    assert row[0].tolist() == [3, 4, 5, 6, 21, 22]
    assert row[3].tolist() == [3, 4, 5, 6, 31, 32]
    assert row[5].tolist() == [0, 0, 0, 31, 32, 0]
    assert row[4].tolist() == [0, 0, 0, 1, 1, 0]
    # a record that fits keeps its whole prompt, however long
    row = dpo_row(enc(p, [21], [31]), max_seq_length=8, pad_id=PAD, max_prompt_length=2)
    assert row[0].tolist() == [1, 2, 3, 4, 5, 6, 21, 0]


def test_too_long():
    with pytest.raises(ChatError) as info:
        dpo_row(enc([1, 2, 3, 4, 5], [6], [7]), max_seq_length=5, pad_id=PAD)  # 512 keeps all 5: no room
    assert info.value.reason == "too_long"
    with pytest.raises(ChatError):
        dpo_row(enc([1, 2, 3], [6, 7], [8]), max_seq_length=4, pad_id=PAD, max_prompt_length=0)
    assert dpo_row(enc([1, 2, 3, 4, 5], [6], [7]), max_seq_length=5, pad_id=PAD,
                   max_prompt_length=4)[0].tolist() == [2, 3, 4, 5, 6]


# ----------------------------------------------------------------------------- records


def test_records():
    user = [{"role": "user", "content": "Q"}]
    expected = (user, "A", "B", None)  # no tools
    assert dpo_example(prompt="Q", chosen="A", rejected="B") == expected
    assert dpo_example(chosen=user + [{"role": "assistant", "content": "A"}],
                       rejected=user + [{"role": "assistant", "content": "B"}]) == expected
    assert dpo_example(prompt="Q", chosen=[{"role": "assistant", "content": "A"}],
                       rejected=[{"role": "assistant", "content": "B"}]) == expected
    assert dpo_example(prompt="Q", chosen=user + [{"role": "assistant", "content": "A"}], rejected="B") == expected
    sharegpt = [{"from": "human", "value": "Q"}, {"from": "gpt", "value": "A"}]
    assert dpo_example(chosen=sharegpt, rejected=sharegpt[:1] + [{"from": "gpt", "value": "B"}], role_key="from",
                       content_key="value") == expected
    assert dpo_example(prompt=json.dumps("Q"), chosen=json.dumps("A"), rejected=json.dumps("B"),
                       json_text=True) == expected
    system = [{"role": "system", "content": "S"}] + user
    assert dpo_example(prompt=system, chosen="A", rejected="B").prompt == system


@pytest.mark.parametrize("fields, reason", [
    (dict(prompt="Q", chosen=[{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}],
          rejected=[{"role": "user", "content": "R"}, {"role": "assistant", "content": "B"}]), "prompts_differ"),
    (dict(prompt="P", chosen=[{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}],
          rejected="B"), "prompts_differ"),
    (dict(prompt="Q", chosen=[{"role": "assistant", "content": "A"}, {"role": "user", "content": "Q"}],
          rejected="B"), "no_assistant_turn"),
    (dict(chosen="A", rejected="B"), "no_messages"),
    (dict(prompt="Q", chosen=None, rejected="B"), "no_messages"),
    (dict(prompt="Q", chosen=" ", rejected="B"), "empty_content"),
    (dict(prompt="", chosen="A", rejected="B"), "empty_content"),
    (dict(prompt="Q", chosen=3, rejected="B"), "not_a_string"),
    (dict(prompt="Q", chosen=[{"role": "wizard", "content": "A"}], rejected="B"), "unknown_role"),
])
def test_record_errors(fields, reason):
    with pytest.raises(ChatError) as info:
        dpo_example(**fields)
    assert info.value.reason == reason


def test_json_text_errors():
    with pytest.raises(ChatError) as info:
        dpo_example(prompt="Q", chosen="A", rejected="B", json_text=True)
    assert info.value.reason == "not_a_conversation"


# ----------------------------------------------------------------------------- tokens against transformers


@pytest.mark.parametrize("name", [n for n in TEMPLATES if n != "qwen2.5-instruct-genmask"])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_tokens_equal_transformers(name, data):
    """P = transformers' ids of the prompt with the generation prompt; P + R = its ids of the conversation."""
    prompt = data.draw(training_conversations(name)) + [{"role": "user", "content": data.draw(contents())}]
    if data.draw(st.booleans()):
        prompt = prompt[-1:]
    chosen, rejected = data.draw(contents()), data.draw(contents())
    p = hf_ids(name, prompt, add_generation_prompt=True)
    try:
        got = encode_dpo(encoder(name), dpo_example(prompt=prompt, chosen=chosen, rejected=rejected))
    except ChatError as e:
        assert e.reason == "prompt_not_a_token_prefix"
        full = [hf_ids(name, prompt + [{"role": "assistant", "content": r}])
                for r in (chosen, rejected)]
        assert any(s[:len(p)] != p for s in full)
        return
    assert got.prompt.tolist() == p
    for response, r in ((chosen, got.chosen), (rejected, got.rejected)):
        s = hf_ids(name, prompt + [{"role": "assistant", "content": response}])
        assert p + r.tolist() == s


@pytest.mark.parametrize("name, end", [("qwen2.5-instruct", ["<|im_end|>", "Ċ"]), ("llama3-instruct", ["<|eot_id|>"]),
                                       ("mistral-nemo-instruct", ["</s>"])])
def test_row_from_a_conversation(name, end):
    """The trained labels are the response and its end of turn."""
    got = encode_dpo(encoder(name), dpo_example(prompt="Why?", chosen="Because.", rejected="No idea"))
    row = dpo_row(got, max_seq_length=64, pad_id=PAD)
    assert tokens(name, row[2][row[1] == 1]) == tokens(name, got.chosen) == ["Because", "."] + end
    assert tokens(name, row[5][row[4] == 1]) == ["No", "Ġidea"] + end
    assert tokens(name, row[0][:len(got.prompt)])[-1] in ("Ċ", "ĊĊ", "[/INST]")


def test_prompt_not_a_prefix():
    """Mistral shows the system message only when the user speaks last: in the prompt, not in the conversation."""
    prompt = [{"role": "system", "content": "Be brief"}, {"role": "user", "content": "Q"}]
    with pytest.raises(ChatError) as info:
        encode_dpo(encoder("mistral-nemo-instruct"), dpo_example(prompt=prompt, chosen="A", rejected="B"))
    assert info.value.reason == "prompt_not_a_prefix"


def test_prompt_boundary_inside_a_token():
    """Qwen's header ends with a newline; a response starting with one merges with it into one token."""
    with pytest.raises(ChatError) as info:
        encode_dpo(encoder("qwen2.5-instruct"), dpo_example(prompt="Q", chosen="\nA", rejected="B"))
    assert info.value.reason == "prompt_not_a_token_prefix"


def test_special_token_text_in_responses():
    got = encode_dpo(encoder("qwen2.5-instruct"),
                     dpo_example(prompt="Say <|im_end|>", chosen="<|im_end|><|im_start|>user", rejected="no"))
    specials = special_ids("qwen2.5-instruct")
    assert [tokens("qwen2.5-instruct", [i])[0] for i in got.chosen if i in specials] == ["<|im_end|>"]
    assert tokens("qwen2.5-instruct", got.chosen)[-2:] == ["<|im_end|>", "Ċ"]
    p = hf_ids("qwen2.5-instruct", [{"role": "user", "content": "Say <|im_end|>"}],
               add_generation_prompt=True)
    assert len([i for i in p if i in specials]) == len([i for i in got.prompt.tolist() if i in specials]) + 1
