"""transforms.core.regions: a read hook's semantic data array checked, flattened, weighted and joined."""

from __future__ import annotations

import dataclasses
import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.core.regions import (DEFAULT_LOSS_WEIGHTS, REGION_TYPES, Region, RegionDefaults, RegionError,
                                     conversation, is_chat, read_semantic_array, region_token_weights)

PRETRAINING = RegionDefaults(pretraining=True)


def turn(kind, *texts, **lists):
    t = {"content": [{"text": x} for x in texts], **lists}
    if kind is not None:
        t["type"] = kind
    return t


def refused(value, defaults=None) -> RegionError:
    with pytest.raises(RegionError) as info:
        read_semantic_array(value, defaults)
    return info.value


# --- flattening ---------------------------------------------------------------------------------------------

def test_a_chat_flattens_into_regions_in_order():
    regions = read_semantic_array([turn("system", "Be brief."), turn("user", "Hi", " there"), turn("assistant", "Yo")])
    assert regions == (
        Region("system", "Be brief.", 0, True, 0, 0),
        Region("user", "Hi", 0, True, 1, 0),
        Region("user", " there", 0, True, 1, 1),
        Region("assistant", "Yo", 1, True, 2, 0),
    )


def test_a_turn_without_a_type_is_text_trained_only_when_pretraining():
    array = [turn(None, "plain text")]
    assert read_semantic_array(array) == (Region("text", "plain text", 0, True, 0, 0),)
    assert read_semantic_array(array, PRETRAINING) == (Region("text", "plain text", 1, True, 0, 0),)
    assert read_semantic_array([turn("text", "typed")], PRETRAINING)[0].loss_weight == 1


@pytest.mark.parametrize("kind, weight", [("system", 0), ("user", 0), ("prompt", 0), ("context", 0),
                                          ("assistant", 1), ("completion", 1), ("chosen", 1), ("rejected", 1)])
def test_default_loss_weights_by_turn_type(kind, weight):
    assert read_semantic_array([turn(kind, "x")])[0].loss_weight == weight
    assert read_semantic_array([turn(kind, "x")], PRETRAINING)[0].loss_weight == weight


def test_every_known_type_has_a_default_weight():
    assert set(DEFAULT_LOSS_WEIGHTS) == set(REGION_TYPES)


def test_the_input_is_not_changed_and_tuples_are_read_like_lists():
    array = [{"type": "user", "content": [{"text": "a", "include_tags": True}], "semantic_drop_mask": [False]}]
    before = repr(array)
    regions = read_semantic_array(array)
    assert repr(array) == before
    assert read_semantic_array(({"type": "user", "content": ({"text": "a", "include_tags": True},)},)) == regions


def test_any_part_key_but_image_is_a_text_region_named_by_its_key():
    regions = read_semantic_array([turn("user", "Q"), {"type": "assistant", "content": [{"answer": "A"}]}],
                                  RegionDefaults(semantic_loss_weight={"answer": 3}))
    assert regions[1] == Region("assistant", "A", 3, True, 1, 0, key="answer")


def test_include_tags_wraps_the_text_as_2_10_does_per_mode():
    array = [{"type": "user", "content": [{"text": "hi", "include_tags": True}]}]
    assert read_semantic_array(array)[0].text == "<text>hi</text>"
    assert read_semantic_array(array, PRETRAINING)[0].text == "<|text|>hi<|text|>"
    assert read_semantic_array([{"type": "user", "content": [{"include_tags": False, "text": "hi"}]}])[0].text == "hi"


# --- weights: the turn's list, then the config map, then the default -----------------------------------------

def test_the_turns_lists_win_over_the_config_maps():
    cfg = RegionDefaults(semantic_loss_weight={"text": 5}, semantic_attention_mask={"text": False},
                         semantic_drop_mask={"text": True})
    array = [turn("user", "a", "b", semantic_loss_weight=[2, 0], semantic_attention_mask=[True, 0],
                  semantic_drop_mask=[False, 0])]
    assert read_semantic_array(array, cfg) == (Region("user", "a", 2, True, 0, 0), Region("user", "b", 0, False, 0, 1))


def test_the_config_maps_win_over_the_defaults():
    cfg = RegionDefaults(semantic_loss_weight={"text": 2}, semantic_attention_mask={"text": False})
    assert read_semantic_array([turn("user", "a")], cfg) == (Region("user", "a", 2, False, 0, 0),)


def test_a_configured_zero_weight_is_honoured():
    # 2.10 tests the configured weight for truth and gives an assistant turn 1 anyway; we give it 0.
    cfg = RegionDefaults(semantic_loss_weight={"text": 0})
    assert read_semantic_array([turn("user", "q"), turn("assistant", "a")], cfg)[1].loss_weight == 0


def test_config_maps_are_keyed_by_part_key_not_role():
    cfg = RegionDefaults(semantic_loss_weight={"assistant": 7, "image": 3})
    assert read_semantic_array([turn("assistant", "a")], cfg)[0].loss_weight == 1


@pytest.mark.parametrize("value, expected", [(2, 2), (0, 0), (1.0, 1), (np.int64(3), 3), (np.float32(2.0), 2),
                                             (2**31 - 1, 2**31 - 1)])
def test_whole_number_loss_weights_are_accepted(value, expected):
    region = read_semantic_array([turn("user", "a", semantic_loss_weight=[value])])[0]
    assert region.loss_weight == expected and type(region.loss_weight) is int


@pytest.mark.parametrize("value", [0.5, -1, math.nan, math.inf, "1", True, None, 2**31, [1]])
def test_other_loss_weights_are_refused(value):
    # 2.10 casts 0.5 to int32 0 without a word; masks are int32, so a weight must be a whole number.
    error = refused([turn("user", "a"), turn("assistant", "b", "c", semantic_loss_weight=[1, value])])
    assert error.reason == "bad_loss_weight"
    assert "turn 1 (assistant), part 1" in error.detail and "semantic_loss_weight" in error.detail


@pytest.mark.parametrize("value, expected", [(True, True), (False, False), (1, True), (0, False),
                                             (np.bool_(True), True)])
def test_mask_values_are_booleans_or_zero_and_one(value, expected):
    region = read_semantic_array([turn("user", "a", semantic_attention_mask=[value])])[0]
    assert region.attend is expected and type(region.attend) is bool


@pytest.mark.parametrize("name", ["semantic_drop_mask", "semantic_attention_mask"])
@pytest.mark.parametrize("value", [2, "yes", None, 0.5, -1])
def test_other_mask_values_are_refused(name, value):
    error = refused([turn("user", "a", **{name: [value]})])
    assert error.reason == "bad_mask_value" and name in error.detail and "turn 0 (user), part 0" in error.detail


# --- drops ----------------------------------------------------------------------------------------------------

def test_dropped_parts_leave_a_gap_and_a_turn_may_lose_all_its_parts():
    array = [turn("system", "sys", semantic_drop_mask=[True]), turn("user", "a", "b", semantic_drop_mask=[1, 0]),
             turn("assistant", "c")]
    assert read_semantic_array(array) == (Region("user", "b", 0, True, 1, 1), Region("assistant", "c", 1, True, 2, 0))


def test_the_config_drop_mask_drops_by_part_key():
    cfg = RegionDefaults(semantic_drop_mask={"note": True})
    array = [{"type": "user", "content": [{"note": "x"}, {"text": "q"}]}, turn("assistant", "a")]
    assert [r.text for r in read_semantic_array(array, cfg)] == ["q", "a"]


def test_a_dropped_part_is_still_checked():
    assert refused([turn("user", "a", "b", semantic_drop_mask=[True, False],
                         semantic_loss_weight=[0.5, 1])]).reason == "bad_loss_weight"
    assert refused([{"type": "user", "content": [{"image": "x.png"}], "semantic_drop_mask": [True]}]).reason \
        == "image_region"


def test_every_region_dropped_is_an_empty_array():
    error = refused([turn("user", "a", semantic_drop_mask=[True]), turn("assistant", "b", semantic_drop_mask=[1])])
    assert error.reason == "empty_array" and "dropped" in error.detail


# --- empty parts: finetuning refuses the record, pretraining skips the part ------------------------------------

@pytest.mark.parametrize("value", ["", None])
def test_an_empty_or_null_part_refuses_a_finetuning_record(value):
    error = refused([turn("prompt", "q"), turn("completion", value)])
    assert error.reason == "empty_region" and "turn 1 (completion), part 0" in error.detail


def test_an_empty_part_refuses_the_record_even_when_dropped():
    # As 2.10: it looks at the value before the drop mask and skips the record (raw_docs_skipped).
    assert refused([turn("user", "q", "", semantic_drop_mask=[False, True]), turn("assistant", "a")]).reason \
        == "empty_region"


def test_pretraining_skips_empty_parts_and_refuses_only_a_record_left_empty():
    regions = read_semantic_array([turn(None, "", "kept", None)], PRETRAINING)
    assert regions == (Region("text", "kept", 1, True, 0, 1),)
    assert refused([turn(None, "")], PRETRAINING).reason == "empty_region"
    assert refused([turn(None, None), turn(None, "x", semantic_drop_mask=[True])], PRETRAINING).reason \
        == "empty_region"


def test_whitespace_is_not_empty():
    assert read_semantic_array([turn("prompt", " "), turn("completion", "\n")])[0].text == " "


# --- refusals ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, reason, words", [
    ("text", "not_a_semantic_array", "a str, not a list of turns"),
    ({"content": [{"text": "a"}]}, "not_a_semantic_array", "a dict, not a list"),
    (None, "not_a_semantic_array", "null"),
    ([], "empty_array", "no turns"),
    (["a"], "not_a_semantic_array", "turn 0 is a str"),
    ([{"type": "user"}], "not_a_semantic_array", "turn 0 (user): content is null"),
    ([{"type": "user", "content": "hi"}], "not_a_semantic_array", "content is a str"),
    ([{"type": "user", "content": ["hi"]}], "not_a_semantic_array", "turn 0 (user), part 0 is a str"),
    ([{"type": "user", "content": [{}]}], "not_a_semantic_array", "not one region key"),
    ([{"type": "user", "content": [{"text": "a", "image": "b"}]}], "not_a_semantic_array", "not one region key"),
    ([{"type": "user", "content": [{1: "a"}]}], "not_a_semantic_array", "not one region key"),
    ([{"type": "user", "content": [{"text": "a", "include_tags": "yes"}]}], "not_a_semantic_array", "include_tags"),
    ([turn("user", "a", semantic_loss_weight=1)], "not_a_semantic_array", "semantic_loss_weight is an int"),
    ([turn("human", "a")], "unknown_region_type", "type 'human' is not one of system, user, assistant"),
    ([turn("user", "a"), {"type": 3, "content": []}], "unknown_region_type", "turn 1: type 3"),
    ([{"type": "user", "content": [{"text": "look"}, {"image": "cat.png"}]}], "image_region",
     "turn 0 (user), part 1 is an image: multimodal data is not supported"),
    ([turn("user", 5)], "region_not_text", "turn 0 (user), part 0: the 'text' part is an int, not text"),
    ([turn("user", ["a"])], "region_not_text", "a list, not text"),
    ([turn("user", "a", "b", semantic_loss_weight=[1])], "mask_length",
     "turn 0 (user): semantic_loss_weight has 1 entries for 2 parts"),
    ([turn("user", "a", semantic_drop_mask=[])], "mask_length", "semantic_drop_mask has 0 entries for 1 parts"),
    ([turn("user", "a", semantic_attention_mask=[1, 1])], "mask_length", "semantic_attention_mask has 2 entries"),
])
def test_defects_are_refused_with_a_reason_and_where(value, reason, words):
    error = refused(value)
    assert error.reason == reason
    assert words in error.detail
    assert str(error) == f"{reason}: {error.detail}"


def test_the_unknown_type_detail_lists_every_known_type():
    detail = refused([turn("tool", "a")]).detail
    assert all(kind in detail for kind in REGION_TYPES)


def test_a_turn_without_parts_gives_no_region():
    assert read_semantic_array([{"type": "system", "content": []}, turn("user", "a")]) == \
        (Region("user", "a", 0, True, 1, 0),)
    assert refused([{"type": "user", "content": []}]).reason == "empty_array"


def test_unknown_turn_keys_are_ignored():
    assert read_semantic_array([{"type": "user", "content": [{"text": "a"}], "note": 1}])[0].text == "a"


def test_region_error_is_a_value_error_that_pickles():
    error = RegionError("mask_length", "turn 0: 1 entries for 2 parts")
    assert isinstance(error, ValueError)
    back = pickle.loads(pickle.dumps(error))
    assert (back.reason, back.detail, str(back)) == (error.reason, error.detail, str(error))
    assert str(RegionError("empty_array")) == "empty_array"


# --- config ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("field, value, words", [
    ("semantic_loss_weight", {"text": 0.5}, "processing.semantic_loss_weight['text']: 0.5"),
    ("semantic_loss_weight", {"text": -2}, "whole number >= 0"),
    ("semantic_loss_weight", {"text": True}, "semantic_loss_weight['text']"),
    ("semantic_drop_mask", {"text": "no"}, "processing.semantic_drop_mask['text']: 'no' is not true or false"),
    ("semantic_attention_mask", {"text": 3}, "semantic_attention_mask['text']"),
    ("semantic_loss_weight", [1], "must be a map"),
    ("semantic_drop_mask", {1: True}, "key 1 is not a region key"),
])
def test_config_maps_are_checked_when_made(field, value, words):
    with pytest.raises(ValueError, match=None) as info:
        RegionDefaults(**{field: value})
    assert words in str(info.value)


def test_config_from_a_2_10_processing_section():
    cfg = RegionDefaults.from_processing({"semantic_loss_weight": {"text": 2.0}, "semantic_drop_mask": None,
                                          "max_seq_length": 512}, pretraining=True)
    assert cfg == RegionDefaults(semantic_loss_weight={"text": 2}, pretraining=True)
    assert type(cfg.semantic_loss_weight["text"]) is int
    assert RegionDefaults.from_processing({}, pretraining=False) == RegionDefaults()


def test_config_and_regions_are_frozen_and_pickle():
    cfg = RegionDefaults(semantic_loss_weight={"text": 2}, semantic_attention_mask={"text": 0})
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    assert cfg.semantic_attention_mask == {"text": False}
    region = Region("user", "a", 0, True, 0, 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        region.text = "b"
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.pretraining = True


# --- chat or text, and the conversation ------------------------------------------------------------------

@pytest.mark.parametrize("first, chat", [("system", True), ("user", True), ("assistant", True), ("prompt", False),
                                         ("completion", False), ("context", False), ("text", False),
                                         (None, False)])
def test_is_chat_follows_the_first_turn(first, chat):
    assert is_chat(read_semantic_array([turn(first, "a"), turn("assistant", "b")])) is chat


def test_is_chat_uses_the_first_region_left():
    assert is_chat(read_semantic_array([turn("prompt", "p", semantic_drop_mask=[True]), turn("user", "u")]))
    assert not is_chat(())


def test_conversation_joins_parts_and_gives_their_spans():
    regions = read_semantic_array([turn("system", "S"), turn("user", "ab", "", "cde", semantic_drop_mask=[0, 1, 0]),
                                   turn("assistant", "xy")], PRETRAINING)
    messages, spans = conversation(regions)
    assert messages == [{"role": "system", "content": "S"}, {"role": "user", "content": "abcde"},
                        {"role": "assistant", "content": "xy"}]
    assert spans == [[(0, 1)], [(0, 2), (2, 5)], [(0, 2)]]
    for message, message_spans, region_texts in zip(messages, spans, (["S"], ["ab", "cde"], ["xy"])):
        assert [message["content"][a:b] for a, b in message_spans] == region_texts


def test_conversation_leaves_out_turns_with_no_region_left():
    regions = read_semantic_array([turn("system", "S", semantic_drop_mask=[True]), turn("user", "u"),
                                   turn("assistant", "a")])
    messages, spans = conversation(regions)
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert spans == [[(0, 1)], [(0, 1)]]


def test_consecutive_turns_of_one_role_stay_separate_messages():
    messages, _ = conversation(read_semantic_array([turn("user", "a"), turn("user", "b")]))
    assert messages == [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]


def test_conversation_of_nothing():
    assert conversation(()) == ([], [])


# --- token weights ---------------------------------------------------------------------------------------

def test_token_weights_from_spans():
    # text "Hi there!" tokens: "Hi" " there" "!"
    offsets = [[0, 2], [2, 8], [8, 9]]
    assert region_token_weights(offsets, [(3, 9, 1)], 3).tolist() == [0, 1, 1]  # " there" straddles the start
    assert region_token_weights(offsets, [(0, 2, 2)], 3).tolist() == [2, 0, 0]
    assert region_token_weights(offsets, [], 3).tolist() == [0, 0, 0]
    assert region_token_weights(np.array(offsets), [(0, 9, 1)], 3).dtype == np.int32


def test_later_spans_win_a_shared_token():
    offsets = [[0, 4], [4, 8]]
    assert region_token_weights(offsets, [(0, 5, 1), (5, 8, 3)], 2).tolist() == [1, 3]
    assert region_token_weights(offsets, [(5, 8, 3), (0, 5, 1)], 2).tolist() == [1, 1]


def test_a_weight_zero_span_clears_what_an_earlier_span_set():
    assert region_token_weights([[0, 4], [4, 8]], [(0, 8, 1), (4, 6, 0)], 2).tolist() == [1, 0]


def test_zero_width_tokens_count_only_strictly_inside_a_span():
    # A BOS at (0, 0) and an EOS the post-processor adds at (0, 0) after the text: offsets out of order.
    offsets = [[0, 0], [0, 3], [3, 6], [0, 0]]
    assert region_token_weights(offsets, [(0, 6, 1)], 4).tolist() == [0, 1, 1, 0]
    assert region_token_weights([[0, 3], [3, 3], [3, 6]], [(0, 6, 1)], 3).tolist() == [1, 1, 1]
    assert region_token_weights([[0, 3], [3, 3], [3, 6]], [(3, 6, 1)], 3).tolist() == [0, 0, 1]


def test_an_empty_span_covers_nothing():
    assert region_token_weights([[0, 4]], [(2, 2, 1)], 1).tolist() == [0]


def test_no_tokens_and_mismatched_offsets():
    assert region_token_weights(np.zeros((0, 2)), [(0, 1, 1)], 0).tolist() == []
    assert region_token_weights([], [(0, 1, 1)], 0).tolist() == []
    with pytest.raises(ValueError, match="2 token offsets for 3 tokens"):
        region_token_weights([[0, 1], [1, 2]], [], 3)


def _brute_force(offsets, spans, n):
    out = [0] * n
    for a, b, w in spans:
        if b <= a:
            continue
        for i, (s, e) in enumerate(offsets):
            if s < b and e > a:
                out[i] = w
    return out


@st.composite
def _tokenized(draw, ordered: bool):
    cuts = sorted(draw(st.lists(st.integers(0, 40), min_size=1, max_size=30)))
    offsets = [[a, b] for a, b in zip([0] + cuts, cuts)]
    if not ordered:
        for _ in range(draw(st.integers(1, 3))):
            offsets.insert(draw(st.integers(0, len(offsets))), [0, 0])
    spans = draw(st.lists(st.tuples(st.integers(0, 42), st.integers(0, 42), st.integers(0, 5)), max_size=6))
    return offsets, spans


@settings(max_examples=300, deadline=None)
@given(_tokenized(ordered=True))
def test_token_weights_match_the_rule_with_ordered_offsets(case):
    offsets, spans = case
    assert region_token_weights(offsets, spans, len(offsets)).tolist() == _brute_force(offsets, spans, len(offsets))


@settings(max_examples=300, deadline=None)
@given(_tokenized(ordered=False))
def test_token_weights_match_the_rule_with_offsets_out_of_order(case):
    offsets, spans = case
    assert region_token_weights(offsets, spans, len(offsets)).tolist() == _brute_force(offsets, spans, len(offsets))


def test_regions_to_token_weights_with_a_real_tokenizer():
    """The whole way: regions -> messages -> a ChatML text -> tokens with offsets -> weights on the answer."""
    import tokenizers

    from tests.helpers import SHARED, require_shared

    tokenizer = tokenizers.Tokenizer.from_file(str(require_shared(SHARED / "tokenizers" / "qwen2.5-instruct")
                                                   / "tokenizer.json"))
    regions = read_semantic_array([turn("user", "What is 2+2?"), turn("assistant", "It is ", "4.",
                                                                      semantic_loss_weight=[1, 2])])
    messages, part_spans = conversation(regions)
    text, spans = "", []
    for message, message_spans, (first, count) in zip(messages, part_spans, ((0, 1), (1, 2))):
        text += f"<|im_start|>{message['role']}\n"
        for (a, b), region in zip(message_spans, regions[first:first + count]):
            spans.append((len(text) + a, len(text) + b, region.loss_weight))
        text += message["content"] + "<|im_end|>\n"
    encoding = tokenizer.encode(text, add_special_tokens=False)
    weights = region_token_weights(encoding.offsets, spans, len(encoding.ids))
    by_weight = {w: "".join(text[s:e] for (s, e), x in zip(encoding.offsets, weights) if x == w) for w in (1, 2)}
    assert by_weight == {1: "It is ", 2: "4."} or by_weight == {1: "It is", 2: " 4."}
    trained_text = "".join(text[s:e] for (s, e), x in zip(encoding.offsets, weights) if x)
    assert trained_text == "It is 4."


# --- exact details and edge values (mutation testing: scripts/mutation.py) ---------------------------------

def test_null_config_maps_read_as_empty_and_pretraining_as_a_bool():
    cfg = RegionDefaults(semantic_loss_weight=None, semantic_drop_mask=None, semantic_attention_mask=None,
                         pretraining=1)
    assert (cfg.semantic_loss_weight, cfg.semantic_drop_mask, cfg.semantic_attention_mask) == ({}, {}, {})
    assert cfg.pretraining is True
    assert RegionDefaults(pretraining="").pretraining is False


def test_config_map_messages_name_the_value_exactly():
    with pytest.raises(ValueError) as info:
        RegionDefaults(semantic_drop_mask=[1])
    assert str(info.value) == "processing.semantic_drop_mask must be a map of region key -> value, not a list"
    with pytest.raises(ValueError) as info:
        RegionDefaults(semantic_loss_weight={"text": 0.5})
    assert str(info.value) == "processing.semantic_loss_weight['text']: 0.5 is not a whole number >= 0 (masks are int32)"


def test_refusal_details_are_exact():
    assert refused([]).detail == "the read hook returned no turns"
    # Finetuning: a null part and an empty part are told apart in the detail.
    assert refused([turn("user", None)]).detail == "turn 0 (user), part 0: the 'text' part is null"
    assert refused([turn("user", "a", "")]).detail == "turn 0 (user), part 1: the 'text' part is empty"
    # Pretraining: empty parts are skipped; a record left with nothing says which way it came to nothing.
    left_empty = refused([turn(None, "", None)], PRETRAINING)
    assert (left_empty.reason, left_empty.detail) == ("empty_region", "every part of the record is empty or null")
    dropped = refused([turn("user", "a", semantic_drop_mask=[True])])
    assert (dropped.reason, dropped.detail) == ("empty_array",
                                                "every part of the record is dropped (semantic_drop_mask)")


def test_a_loss_weight_too_large_for_a_float_is_refused_not_a_crash():
    # JSON integers have no size limit: 10**400 is whole and > int32, so refused as a bad weight (float(10**400)
    # would raise OverflowError instead of giving the record its dead-letter reason).
    error = refused([turn("assistant", "a", semantic_loss_weight=[10**400])])
    assert (error.reason, error.detail) == (
        "bad_loss_weight", f"turn 0 (assistant), part 0: semantic_loss_weight {10**400!r} is not a whole number >= 0 "
                           "(masks are int32)")


def test_conversation_spans_of_three_parts_run_on():
    # "a" + "bc" + "d": each part starts where the one before ends, 0-1, 1-3, 3-4.
    messages, spans = conversation(read_semantic_array([turn("user", "a", "bc", "d")]))
    assert messages == [{"role": "user", "content": "abcd"}]
    assert spans == [[(0, 1), (1, 3), (3, 4)]]


def test_token_weights_with_starts_out_of_order_and_ends_in_order():
    # Token 2 (2-4) begins before token 1 (3-4) though the ends are in order: the span 2-3 overlaps token 2 only
    # (token 1 starts at its end), which a binary search over the unsorted starts would miss.
    offsets = [[0, 1], [3, 4], [2, 4]]
    assert region_token_weights(offsets, [(2, 3, 1)], 3).tolist() == [0, 0, 1]
