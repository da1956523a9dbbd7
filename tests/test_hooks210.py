"""transforms.core.hooks210: Model Zoo 2.10's built-in read hooks, their kwargs, columns and refusals."""

from __future__ import annotations

import functools
import json

import pytest

from tests.helpers import REFERENCE, require_shared
from transforms.core import hooks210 as H
from transforms.core.hooks210 import (BUILTIN_HOOKS, MODELZOO_HOOKS_MODULE, REQUIRED_KWARGS, chat_read_hook,
                                      check_hook_kwargs, dpo_read_hook, hook_columns, nlg_read_hook,
                                      prompt_completion_chat_read_hook, prompt_completion_text_read_hook,
                                      text_read_hook)
from transforms.core.regions import Region, RegionDefaults, RegionError, is_chat, read_semantic_array

GOLDEN_210 = REFERENCE / "golden-2.10"
CHAT = dict(multi_turn_key="messages", multi_turn_role_key="role", multi_turn_content_key="content")


def texts(array):
    return [(t.get("type"), [p["text"] for p in t["content"]]) for t in array]


def reason(fn, example, **kwargs):
    """The reason the hook, or reading its result, refuses the record."""
    with pytest.raises(RegionError) as info:
        read_semantic_array(fn(example, **kwargs))
    return info.value.reason


def msgs(*pairs, role="role", content="content"):
    return [{role: r, content: c} for r, c in pairs]


# --- text ------------------------------------------------------------------------------------------------------

def test_text_read_hook_strips_and_gives_an_untyped_turn():
    assert text_read_hook({"text": "  Hello.\n"}, text_key="text") == [{"content": [{"text": "Hello."}]}]
    regions = read_semantic_array(text_read_hook({"t": " a "}, text_key="t"), RegionDefaults(pretraining=True))
    assert regions == (Region("text", "a", 1, True, 0, 0),)


@pytest.mark.parametrize("example, expected", [({}, "empty_region"), ({"text": None}, "empty_region"),
                                               ({"text": "   "}, "empty_region"), ({"text": 5}, "region_not_text")])
def test_text_read_hook_passes_bad_values_on_to_be_refused(example, expected):
    with pytest.raises(RegionError) as info:
        read_semantic_array(text_read_hook(example, text_key="text"), RegionDefaults(pretraining=True))
    assert info.value.reason == expected


# --- prompt / completion ---------------------------------------------------------------------------------------

def test_prompt_completion_text_read_hook_keeps_the_texts_as_they_are():
    array = prompt_completion_text_read_hook({"q": " Q ", "a": " A\n"}, prompt_key="q", completion_key="a")
    assert texts(array) == [("prompt", [" Q "]), ("completion", [" A\n"])]
    regions = read_semantic_array(array)
    assert [r.loss_weight for r in regions] == [0, 1] and not is_chat(regions)


def test_prompt_completion_chat_read_hook_strips_and_uses_chat_roles():
    array = prompt_completion_chat_read_hook({"q": " Q ", "a": " A\n"}, prompt_key="q", completion_key="a")
    assert texts(array) == [("user", ["Q"]), ("assistant", ["A"])]
    assert is_chat(read_semantic_array(array))


@pytest.mark.parametrize("hook", [prompt_completion_text_read_hook, prompt_completion_chat_read_hook])
@pytest.mark.parametrize("example, expected", [({"q": "Q"}, "empty_region"), ({"q": "Q", "a": None}, "empty_region"),
                                               ({"q": "", "a": "A"}, "empty_region"),
                                               ({"q": 7, "a": "A"}, "region_not_text")])
def test_prompt_completion_records_with_a_missing_side_are_refused(hook, example, expected):
    assert reason(hook, example, prompt_key="q", completion_key="a") == expected


# --- chat ------------------------------------------------------------------------------------------------------

def test_chat_read_hook_reads_a_conversation():
    example = {"messages": msgs(("system", " Be kind. "), ("user", " Hi "), ("assistant", "Hello\n"),
                                ("user", "Bye"), ("assistant", "Bye!"))}
    assert texts(chat_read_hook(example, **CHAT)) == [
        ("system", [" Be kind. "]),  # as 2.10: the system content is not stripped
        ("user", ["Hi"]), ("assistant", ["Hello"]), ("user", ["Bye"]), ("assistant", ["Bye!"])]


def test_chat_read_hook_drops_an_empty_system_message():
    example = {"messages": msgs(("system", ""), ("user", "Hi"), ("assistant", "Yo"))}
    assert texts(chat_read_hook(example, **CHAT)) == [("user", ["Hi"]), ("assistant", ["Yo"])]
    assert texts(chat_read_hook({"messages": msgs(("system", "S"))}, **CHAT)) == [("system", ["S"])]


def test_chat_read_hook_maps_sharegpt_roles():
    example = {"conversations": msgs(("human", "Hi"), ("gpt", "Yo"), role="from", content="value")}
    array = chat_read_hook(example, multi_turn_key="conversations", multi_turn_role_key="from",
                           multi_turn_content_key="value")
    assert texts(array) == [("user", ["Hi"]), ("assistant", ["Yo"])]
    assert [r.loss_weight for r in read_semantic_array(array)] == [0, 1]  # 2.10 would train nothing here


def test_chat_read_hook_refuses_an_odd_number_of_messages():
    example = {"messages": msgs(("system", "S"), ("user", "a"), ("assistant", "b"), ("user", "c"))}
    with pytest.raises(RegionError) as info:
        chat_read_hook(example, **CHAT)
    assert info.value.reason == "unpaired_turns" and "3 messages after the system message" in info.value.detail


def test_chat_read_hook_refuses_a_pair_of_one_role_and_names_its_messages():
    example = {"messages": msgs(("system", "S"), ("user", "a"), ("assistant", "b"), ("user", "c"), ("user", "d"))}
    with pytest.raises(RegionError) as info:
        chat_read_hook(example, **CHAT)
    assert info.value.reason == "unpaired_turns"
    assert "messages 3 and 4 are both 'user'" in info.value.detail
    mixed_names = {"messages": msgs(("human", "a"), ("user", "b"))}  # one role under two names
    assert reason(chat_read_hook, mixed_names, **CHAT) == "unpaired_turns"


def test_chat_read_hook_keeps_2_10s_pair_rule_only():
    # 2.10 checks that each pair has two roles, not their order, nor system messages after the first.
    example = {"messages": msgs(("assistant", "a"), ("user", "b"), ("system", "c"), ("user", "d"))}
    assert [t["type"] for t in chat_read_hook(example, **CHAT)] == ["assistant", "user", "system", "user"]


@pytest.mark.parametrize("example", [{}, {"messages": None}, {"messages": []}])
def test_chat_read_hook_gives_no_turns_for_no_conversation(example):
    assert chat_read_hook(example, **CHAT) == []
    assert reason(chat_read_hook, example, **CHAT) == "empty_array"


@pytest.mark.parametrize("value, words", [('[{"role": "user"}]', "holds str"), ({"role": "user"}, "holds dict"),
                                          (["hi", "there"], "message 0 is str")])
def test_chat_read_hook_refuses_what_is_no_list_of_messages(value, words):
    with pytest.raises(RegionError) as info:
        chat_read_hook({"messages": value}, **CHAT)
    assert info.value.reason == "not_a_conversation" and words in info.value.detail


def test_chat_read_hook_passes_bad_contents_and_roles_on_to_be_refused():
    assert reason(chat_read_hook, {"messages": msgs(("user", None), ("assistant", "b"))}, **CHAT) == "empty_region"
    assert reason(chat_read_hook, {"messages": msgs(("user", "  "), ("assistant", "b"))}, **CHAT) == "empty_region"
    assert reason(chat_read_hook, {"messages": msgs(("user", ["x"]), ("assistant", "b"))}, **CHAT) \
        == "region_not_text"
    assert reason(chat_read_hook, {"messages": msgs(("user", "a"), ("tool", "b"))}, **CHAT) == "unknown_region_type"
    assert reason(chat_read_hook, {"messages": msgs(("user", "a"), (None, "b"))}, **CHAT) == "unknown_region_type"


def test_chat_read_hook_ignores_has_system_prompt_as_2_10_does():
    example = {"messages": msgs(("user", "a"), ("assistant", "b"))}
    assert chat_read_hook(example, has_system_prompt=True, **CHAT) == chat_read_hook(example, **CHAT)


# --- DPO -------------------------------------------------------------------------------------------------------

DPO = dict(chosen_key="chosen", rejected_key="rejected")


def test_dpo_strings_with_a_prompt_key():
    array = dpo_read_hook({"p": " P", "chosen": "C ", "rejected": "R"}, prompt_key="p", **DPO)
    assert texts(array) == [("prompt", [" P"]), ("chosen", ["C "]), ("rejected", ["R"])]
    assert [r.loss_weight for r in read_semantic_array(array)] == [0, 1, 1]


def test_dpo_transcripts_split_at_the_last_assistant_marker():
    prompt = "\n\nHuman: Hi\n\nAssistant: Hello\n\nHuman: How are you?\n\nAssistant:"
    array = dpo_read_hook({"chosen": prompt + " Fine.", "rejected": prompt + " Go away."}, **DPO)
    assert texts(array) == [("prompt", [prompt]), ("chosen", [" Fine."]), ("rejected", [" Go away."])]


def test_dpo_marker_is_found_whatever_its_case():
    example = {"chosen": "USER: q ASSISTANT: yes", "rejected": "USER: q ASSISTANT: no"}
    assert texts(dpo_read_hook(example, **DPO))[1:] == [("chosen", [" yes"]), ("rejected", [" no"])]
    # 2.10 lowercases the text but not the marker: "Assistant:" would never be found there.
    example = {"chosen": "Human: q\n\nAssistant: yes", "rejected": "Human: q\n\nAssistant: no"}
    array = dpo_read_hook(example, assistant_role="\n\nAssistant:", **DPO)
    assert texts(array)[0] == ("prompt", ["Human: q\n\nAssistant:"])


def test_dpo_cut_stays_in_place_when_lowercasing_would_move_it():
    # "İ".lower() is two characters: an offset found in the lowercased text cuts one character late.
    assert len("İ".lower()) == 2
    prompt = "Human: İstanbul?\n\nAssistant:"
    array = dpo_read_hook({"chosen": prompt + " Yes.", "rejected": prompt + " No."}, **DPO)
    assert texts(array) == [("prompt", [prompt]), ("chosen", [" Yes."]), ("rejected", [" No."])]


def test_dpo_transcript_without_a_marker_is_refused():
    with pytest.raises(RegionError) as info:
        dpo_read_hook({"chosen": "Human: hi", "rejected": "Human: hi there"}, **DPO)
    assert info.value.reason == "no_assistant_marker" and "'assistant:'" in info.value.detail
    with pytest.raises(RegionError, match="no_assistant_marker"):
        dpo_read_hook({"chosen": "a", "rejected": "b"}, assistant_role="", **DPO)


def test_dpo_transcripts_must_share_their_prompt():
    # 2.10 cuts the rejected text at the chosen text's offset whatever it holds.
    example = {"chosen": "Human: a\n\nAssistant: b", "rejected": "Human: x\n\nAssistant: y"}
    with pytest.raises(RegionError) as info:
        dpo_read_hook(example, **DPO)
    assert info.value.reason == "prompts_differ"
    # A chosen answer that itself says "assistant:" moves the cut past the rejected text's prompt.
    example = {"chosen": "Human: a\n\nAssistant: I am your assistant: hi", "rejected": "Human: a\n\nAssistant: no"}
    assert reason(dpo_read_hook, example, **DPO) == "prompts_differ"


def test_dpo_lists_of_two_messages():
    chosen = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "good"}]
    rejected = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "bad"}]
    expected = [("prompt", ["Q"]), ("chosen", ["good"]), ("rejected", ["bad"])]
    assert texts(dpo_read_hook({"chosen": chosen, "rejected": rejected}, **DPO)) == expected
    # 2.10 takes this shape when every field is a list; a list prompt is not read (the chosen list's is).
    example = {"p": [{"role": "user", "content": "Q"}], "chosen": chosen, "rejected": rejected}
    assert texts(dpo_read_hook(example, prompt_key="p", **DPO)) == expected


def test_dpo_lists_must_be_single_turn_with_one_prompt():
    one = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "a"}]
    longer = one + [{"role": "user", "content": "more"}, {"role": "assistant", "content": "b"}]
    assert reason(dpo_read_hook, {"chosen": longer, "rejected": one}, **DPO) == "not_single_turn"
    assert reason(dpo_read_hook, {"chosen": one, "rejected": one[:1]}, **DPO) == "not_single_turn"
    other = [{"role": "user", "content": "Q2"}, {"role": "assistant", "content": "b"}]
    assert reason(dpo_read_hook, {"chosen": one, "rejected": other}, **DPO) == "prompts_differ"
    assert reason(dpo_read_hook, {"chosen": one, "rejected": ["Q", "b"]}, **DPO) == "not_a_conversation"


def test_dpo_mixed_shapes_and_missing_fields_are_refused():
    one = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "a"}]
    with pytest.raises(RegionError) as info:
        dpo_read_hook({"p": "Q", "chosen": one, "rejected": one}, prompt_key="p", **DPO)
    assert info.value.reason == "mixed_shapes" and "prompt str, chosen list, rejected list" in info.value.detail
    assert reason(dpo_read_hook, {"chosen": "a", "rejected": one}, **DPO) == "mixed_shapes"
    with pytest.raises(RegionError) as info:
        dpo_read_hook({"chosen": "a"}, **DPO)
    assert info.value.reason == "empty_region" and "'rejected'" in info.value.detail
    assert reason(dpo_read_hook, {"p": None, "chosen": "a", "rejected": "b"}, prompt_key="p", **DPO) == "empty_region"
    assert reason(dpo_read_hook, {"p": "", "chosen": "a", "rejected": "b"}, prompt_key="p", **DPO) == "empty_region"


# --- NLG -------------------------------------------------------------------------------------------------------

def test_nlg_read_hook_gives_context_and_completion():
    array = nlg_read_hook({"c": "table: x", "t": " x is 1"}, context_key="c", completion_key="t")
    assert texts(array) == [("context", ["table: x"]), ("completion", [" x is 1"])]
    regions = read_semantic_array(array)
    assert [r.loss_weight for r in regions] == [0, 1] and not is_chat(regions)
    assert reason(nlg_read_hook, {"c": "x"}, context_key="c", completion_key="t") == "empty_region"


# --- kwargs, the table and columns -----------------------------------------------------------------------------

@pytest.mark.parametrize("hook, needed", list(REQUIRED_KWARGS.items()), ids=lambda x: getattr(x, "__name__", ""))
def test_a_missing_kwarg_is_a_value_error_naming_hook_and_kwarg(hook, needed):
    full = {name: "x" for name in needed}
    for name in needed:
        kwargs = {k: v for k, v in full.items() if k != name}
        with pytest.raises(ValueError) as info:
            hook({"x": "a"}, **kwargs)
        assert not isinstance(info.value, RegionError)
        assert hook.__name__ in str(info.value) and f"read_hook_kwargs.{name}" in str(info.value)
        with pytest.raises(ValueError, match=f"{hook.__name__} needs read_hook_kwargs.{name}"):
            check_hook_kwargs(hook, {**kwargs, "other_key": "x"})
    check_hook_kwargs(hook, full)


def test_hooks_are_called_as_2_10_calls_them_and_ignore_other_kwargs():
    hook = functools.partial(BUILTIN_HOOKS[f"{MODELZOO_HOOKS_MODULE}:text_read_hook"], text_key="t", phase=1,
                             data_keys={"text_key": "t"})
    assert hook({"t": "a"}) == [{"content": [{"text": "a"}]}]


def test_the_table_holds_every_name_a_2_10_config_may_use():
    hooks = [text_read_hook, prompt_completion_text_read_hook, prompt_completion_chat_read_hook, chat_read_hook,
             dpo_read_hook, nlg_read_hook]
    for fn in hooks:
        assert BUILTIN_HOOKS[fn.__name__] is fn
        assert BUILTIN_HOOKS[f"cerebras.modelzoo.data_preparation.data_preprocessing.hooks:{fn.__name__}"] is fn
    # The name 2.10's shipped curation_corpus config gives, though 2.10 has no such function.
    assert BUILTIN_HOOKS["prompt_completion_key"] is prompt_completion_text_read_hook
    assert BUILTIN_HOOKS[f"{MODELZOO_HOOKS_MODULE}:prompt_completion_key"] is prompt_completion_text_read_hook
    assert len(BUILTIN_HOOKS) == 2 * (len(hooks) + 1)
    assert set(REQUIRED_KWARGS) == set(hooks)


def test_hook_columns_follow_2_10s_key_rule():
    assert hook_columns({"prompt_key": "q", "completion_key": "a"}) == ("q", "a")
    assert hook_columns({**CHAT, "has_system_prompt": True}) == ("messages", "role", "content")
    assert hook_columns({"chosen_key": "c", "prompt_key": None, "rejected_key": "r", "assistant_role": "x"}) \
        == ("c", "r")
    assert hook_columns({"a_key": "t", "b_key": "t", "keys": "no", "key": "no"}) == ("t",)
    assert hook_columns({}) == ()
    with pytest.raises(ValueError, match="read_hook_kwargs.text_key must name a column"):
        hook_columns({"text_key": ["a", "b"]})


def test_check_hook_kwargs_needs_a_column_for_any_hook():
    def custom(example, **kwargs):
        return []

    check_hook_kwargs(custom, {"body_key": "body"})
    for kwargs in (None, {}, {"body": "x"}, {"body_key": None}):
        with pytest.raises(ValueError, match="names no column"):
            check_hook_kwargs(custom, kwargs)


def test_hooks210_is_pure():
    source = open(H.__file__).read()
    assert "apache_beam" not in source and "open(" not in source


# --- 2.10's own inputs -----------------------------------------------------------------------------------------

def _records(case: str):
    folder = require_shared(GOLDEN_210 / case / "input")
    for path in sorted(folder.iterdir()):
        with open(path) as f:
            yield from (json.loads(line) for line in f)


def _cut_210_style(chosen: str, marker: str = "assistant:") -> int:
    """Where 2.10's rule ends the prompt (lower-cased text, marker as given)."""
    at = chosen.lower().rfind(marker)
    return -1 if at < 0 else at + len(marker)


def test_every_hh_rlhf_record_2_10_kept_is_read_and_split_where_2_10_splits():
    records = list(_records("dpo_qwen25_hh_rlhf_512"))
    assert len(records) == 1000  # 2.10 wrote 1000 rows: it skipped none
    for record in records:
        example = {"chosen": record["chosen"], "rejected": record["rejected"]}
        regions = read_semantic_array(dpo_read_hook(example, **DPO))
        cut = _cut_210_style(record["chosen"])
        assert [r.text for r in regions] == [record["chosen"][:cut], record["chosen"][cut:], record["rejected"][cut:]]


def test_every_chat_record_2_10_read_is_read():
    records = list(_records("chat_qwen25_kto_multiturn_512"))
    assert len(records) == 300  # 2.10: total_raw_docs 300, raw_docs_skipped 0 (144 more were over msl)
    for record in records:
        example = {"messages": record["messages"], "role": None, "content": None}  # 2.10's columns
        regions = read_semantic_array(chat_read_hook(example, **CHAT))
        assert is_chat(regions)
        assert [r.kind for r in regions] == [m["role"] for m in record["messages"]]
        assert [r.text for r in regions] == [m["content"].strip() for m in record["messages"]]


# --- exact details, missing columns, the table as built (mutation testing: scripts/mutation.py) ------------------

def refusal(fn, example, **kwargs):
    """(reason, detail) of the RegionError the hook itself raises."""
    with pytest.raises(RegionError) as info:
        fn(example, **kwargs)
    return info.value.reason, info.value.detail


def test_a_missing_text_column_reads_as_the_empty_string():
    # 2.10's text_read_hook reads `example.get(text_key, "")` (golden-2.10 .../out/hook.py): "", not None, so the
    # record is refused as an empty part, not a null one.
    assert text_read_hook({}, text_key="text") == [{"content": [{"text": ""}]}]
    with pytest.raises(RegionError) as info:
        read_semantic_array(text_read_hook({}, text_key="text"))
    assert info.value.detail == "turn 0 (text), part 0: the 'text' part is empty"


def test_missing_nlg_columns_read_as_the_empty_string():
    # The docstring's rule (as text_read_hook's): each missing column is "", the turns still both there.
    assert nlg_read_hook({}, context_key="c", completion_key="t") == [
        {"content": [{"text": ""}], "type": "context"}, {"content": [{"text": ""}], "type": "completion"}]
    assert nlg_read_hook({"t": "x"}, context_key="c", completion_key="t")[0] == {"content": [{"text": ""}],
                                                                              "type": "context"}


@pytest.mark.parametrize("hook, needed", list(REQUIRED_KWARGS.items()), ids=lambda x: getattr(x, "__name__", ""))
def test_a_missing_kwarg_message_is_exactly_hook_and_kwarg(hook, needed):
    # The message a config error shows the user: the hook's own name, not a substring of something else.
    name = needed[-1]
    with pytest.raises(ValueError) as info:
        hook({"x": "a"}, **{k: "x" for k in needed if k != name})
    assert str(info.value) == f"{hook.__name__} needs read_hook_kwargs.{name}"


def test_check_hook_kwargs_without_a_column_says_so_exactly():
    with pytest.raises(ValueError) as info:
        check_hook_kwargs(text_read_hook, {"text": "x"})
    assert str(info.value) == "read_hook_kwargs names no column: give at least one kwarg ending in _key"


def test_chat_read_hook_details_name_the_records_messages():
    assert refusal(chat_read_hook, {"messages": "hi"}, **CHAT) == (
        "not_a_conversation", "'messages' holds str, not a list of messages")
    three = msgs(("system", "S"), ("user", "a"), ("assistant", "b"), ("user", "c"))
    assert refusal(chat_read_hook, {"messages": three}, **CHAT) == (
        "unpaired_turns", "3 messages after the system message: not pairs of user and assistant")
    # Without a system message the indices are the messages' own (first = 0): messages 2 and 3.
    same = msgs(("user", "a"), ("assistant", "b"), ("user", "c"), ("user", "d"))
    assert refusal(chat_read_hook, {"messages": same}, **CHAT) == (
        "unpaired_turns", "messages 2 and 3 are both 'user': each pair needs two different roles")
    # A roleless message: its index in the record, past the system message when there is one.
    assert refusal(chat_read_hook, {"messages": msgs(("user", "a"), (None, "b"))}, **CHAT) == (
        "unknown_region_type", "message 1 has no 'role'")
    roleless = msgs(("system", "S"), ("user", "a"), (None, "b"))
    assert refusal(chat_read_hook, {"messages": roleless}, **CHAT) == ("unknown_region_type", "message 2 has no 'role'")


def test_chat_read_hook_passes_an_unhashable_role_on_to_be_refused():
    # Only a string role is looked up among ShareGPT's names: a list role reaches read_semantic_array, which
    # refuses it as a dead letter, rather than failing the hook with a TypeError.
    example = {"messages": msgs((["user"], "a"), ("assistant", "b"))}
    assert [t["type"] for t in chat_read_hook(example, **CHAT)] == [["user"], "assistant"]
    assert reason(chat_read_hook, example, **CHAT) == "unknown_region_type"


def test_dpo_transcript_details_say_where_the_prompt_ends():
    assert refusal(dpo_read_hook, {"chosen": "Human: hi", "rejected": "Human: hi"}, **DPO) == (
        "no_assistant_marker", "dpo_read_hook: the chosen text has no 'assistant:' to end its prompt")
    # "Human: a\n\nAssistant:" is 6 + 2 + 2 + 10 = 20 characters: the cut the rejected text must share.
    example = {"chosen": "Human: a\n\nAssistant: b", "rejected": "Human: x\n\nAssistant: y"}
    assert refusal(dpo_read_hook, example, **DPO) == (
        "prompts_differ", "dpo_read_hook: the rejected text does not begin with the chosen text's prompt (its first "
                          "20 characters, up to the last 'assistant:')")


def test_dpo_list_details_name_the_list_and_message():
    one = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "a"}]
    assert refusal(dpo_read_hook, {"chosen": one + one, "rejected": one}, **DPO) == (
        "not_single_turn", "dpo_read_hook: the chosen list has 4 messages, not two (prompt, response)")
    assert refusal(dpo_read_hook, {"chosen": one, "rejected": one[:1]}, **DPO) == (
        "not_single_turn", "dpo_read_hook: the rejected list has 1 messages, not two (prompt, response)")
    # An object without a content is no message either (not only a non-object).
    no_content = [{"role": "user", "text": "Q"}, {"role": "assistant", "content": "a"}]
    assert refusal(dpo_read_hook, {"chosen": no_content, "rejected": one}, **DPO) == (
        "not_a_conversation", "dpo_read_hook: chosen message 0 is not an object with a content")
    assert refusal(dpo_read_hook, {"chosen": one, "rejected": [one[0], "a"]}, **DPO) == (
        "not_a_conversation", "dpo_read_hook: rejected message 1 is not an object with a content")
    other = [{"role": "user", "content": "Q2"}, {"role": "assistant", "content": "a"}]
    assert refusal(dpo_read_hook, {"chosen": one, "rejected": other}, **DPO) == (
        "prompts_differ", "dpo_read_hook: the chosen and rejected lists begin with different prompts")


def test_the_table_is_built_with_both_names_of_every_hook():
    # BUILTIN_HOOKS is built once, at import: this builds it again, to hold exactly the six hooks and 2.10's
    # prompt_completion_key alias, each by its short name and by 2.10's import path.
    named = {"text_read_hook": text_read_hook, "prompt_completion_text_read_hook": prompt_completion_text_read_hook,
             "prompt_completion_chat_read_hook": prompt_completion_chat_read_hook, "chat_read_hook": chat_read_hook,
             "dpo_read_hook": dpo_read_hook, "nlg_read_hook": nlg_read_hook,
             "prompt_completion_key": prompt_completion_text_read_hook}
    expected = {**named, **{f"cerebras.modelzoo.data_preparation.data_preprocessing.hooks:{k}": fn
                            for k, fn in named.items()}}
    assert H._builtin_table() == expected
