"""Tool calls in Chat data (issue #33): `tool_calls` on assistant messages, a record's `tools`, tool results and
LLaMA-Factory's function_call / observation turns, rendered exactly as transformers renders them.

The oracle is transformers' `apply_chat_template(messages, tools=tools)`: the same text and ids; with TRL's
Qwen2.5 training template (its `{% generation %}` blocks around the assistant's output, tool calls included)
transformers' `return_assistant_tokens_mask` is the mask, and the plain Qwen2.5 template (no markers, the same
text) must train exactly those tokens by our rule. The assistant's tool-call text is trained like its content;
tool results never are.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.chat_helpers import backend, hf_tokenizer, renderer, tokenizer_config
from tests.helpers import SHARED, read_rows, require_shared, run_job
from transforms.core.chat.encode import ChatEncoder, Conversation, parse_chat
from transforms.core.chat.template import ChatError, ChatRenderer, renders_tool_calls, template_tokens

QWEN = "qwen2.5-instruct"
GENMASK = "qwen2.5-instruct-genmask"

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "The local time.",
                                         "parameters": {"type": "object", "properties": {}}}}


def _call(name: str, arguments: dict, call_id: str = "call00001") -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


CONVERSATIONS = {
    "call_without_text": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [_call("get_weather", {"city": "Paris"})]},
        {"role": "tool", "content": '{"temp": 21}', "tool_call_id": "call00001", "name": "get_weather"},
        {"role": "assistant", "content": "It is 21 degrees in Paris."}],
    "call_with_text": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [_call("get_weather", {"city": "Paris"})]},
        {"role": "tool", "content": "sunny, 21C", "tool_call_id": "call00001"},
        {"role": "assistant", "content": "Sunny."}],
    "parallel_calls_empty_text": [
        {"role": "user", "content": "Weather and time in Oslo?"},
        {"role": "assistant", "content": "", "tool_calls": [_call("get_weather", {"city": "Oslo"}),
                                                             _call("get_time", {}, "call00002")]},
        {"role": "tool", "content": "forecast: rain", "tool_call_id": "call00001"},
        {"role": "tool", "content": "clock: 14:05", "tool_call_id": "call00002"},
        {"role": "assistant", "content": "Rain, and it is 14:05."}],
    "two_rounds": [
        {"role": "user", "content": "Paris then Rome."},
        {"role": "assistant", "tool_calls": [_call("get_weather", {"city": "Paris"})]},
        {"role": "tool", "content": "paris temp 21"},
        {"role": "assistant", "tool_calls": [_call("get_weather", {"city": "Rome"}, "call00002")]},
        {"role": "tool", "content": "rome temp 25"},
        {"role": "assistant", "content": "Paris 21, Rome 25."}],
}


def _hf_messages(messages):
    return [dict(m) for m in messages]


def _trained_text(hf, ids, mask) -> str:
    return "".join(hf.decode([int(i)]) if m else "_" for i, m in zip(ids, mask))


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
@pytest.mark.parametrize("tools", [[WEATHER, TIME], None], ids=["tools", "no_tools"])
def test_text_ids_and_mask_equal_transformers(name, tools):
    messages = CONVERSATIONS[name]
    hf = hf_tokenizer(QWEN)
    want = hf.apply_chat_template(_hf_messages(messages), tools=tools, tokenize=True, return_dict=True)["input_ids"]
    text = hf.apply_chat_template(_hf_messages(messages), tools=tools, tokenize=False)
    record = json.dumps({"messages": messages, "tools": tools} if tools else messages)
    conversation = parse_chat(record)
    got = ChatEncoder(renderer(QWEN), backend(QWEN)).encode(conversation)
    assert got.text == text and got.ids.tolist() == list(want)
    # The training template renders the same text; its generation blocks are transformers' mask.
    gen = hf_tokenizer(GENMASK).apply_chat_template(_hf_messages(messages), tools=tools, tokenize=True,
                                                    return_dict=True, return_assistant_tokens_mask=True)
    assert list(gen["input_ids"]) == list(want)
    expected = np.array(gen["assistant_masks"], dtype=bool)
    assert np.array_equal(got.trained, expected), (_trained_text(hf, want, got.trained),
                                                   _trained_text(hf, want, expected))
    marked = ChatEncoder(renderer(GENMASK), backend(GENMASK)).encode(conversation)
    assert np.array_equal(marked.trained, expected)
    # Every tool call's name and arguments are trained; no tool result is.
    trained_text = "".join(hf.decode([int(i)]) for i, m in zip(want, got.trained) if m)
    for m in messages:
        for call in m.get("tool_calls") or ():
            assert f'"name": "{call["function"]["name"]}"' in trained_text
            assert json.dumps(call["function"]["arguments"]) in trained_text
        if m["role"] == "tool":
            assert m["content"] not in trained_text
    roles = {t.role for t in got.turns}
    assert "tool" in roles


def test_llama_factory_function_call_and_observation_turns_are_tool_calls_and_results():
    sharegpt = [{"from": "human", "value": "Weather in Paris?"},
                {"from": "function_call", "value": json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}})},
                {"from": "observation", "value": '{"temp": 21}'},
                {"from": "gpt", "value": "It is 21 degrees."}]
    openai = [{"role": "user", "content": "Weather in Paris?"},
              {"role": "assistant", "content": None, "tool_calls": [
                  {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
              {"role": "tool", "content": '{"temp": 21}'},
              {"role": "assistant", "content": "It is 21 degrees."}]
    encoder = ChatEncoder(renderer(QWEN), backend(QWEN))
    a = encoder.encode(parse_chat(json.dumps({"messages": sharegpt, "tools": [WEATHER]}), role_key="from",
                                  content_key="value"))
    b = encoder.encode(parse_chat(json.dumps({"messages": openai, "tools": [WEATHER]})))
    assert a.text == b.text and np.array_equal(a.ids, b.ids) and np.array_equal(a.trained, b.trained)


@pytest.mark.parametrize("messages, reason", [
    ([{"role": "user", "content": "q"}, {"role": "assistant", "content": None, "tool_calls": "x"}],
     "not_a_tool_call"),
    ([{"role": "user", "content": "q"}, {"role": "assistant", "content": None, "tool_calls": [{"x": 1}]}],
     "not_a_tool_call"),
    ([{"role": "user", "content": "q", "tool_calls": [_call("f", {})]}, {"role": "assistant", "content": "a"}],
     "not_a_tool_call"),
    ([{"role": "user", "content": "q"}, {"role": "function_call", "value": "not json"}], "not_a_tool_call"),
    ([{"role": "user", "content": "q"}, {"role": "assistant", "content": None}], "not_a_string"),
    ([{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": []}], "empty_content"),
])
def test_malformed_tool_calls_are_refused_with_a_reason(messages, reason):
    with pytest.raises(ChatError) as info:
        ChatEncoder(renderer(QWEN), backend(QWEN)).encode(parse_chat(json.dumps(messages)))
    assert info.value.reason == reason


def test_a_tool_list_that_is_not_a_list_is_refused():
    with pytest.raises(ChatError) as info:
        parse_chat(json.dumps({"messages": [{"role": "user", "content": "q"}], "tools": {"name": "f"}}))
    assert info.value.reason == "not_a_tool_list"


def test_a_template_without_tools_refuses_a_record_with_tool_calls():
    """Llama 3's template (no tools) would drop the call silently; the record is refused, naming it."""
    llama3 = renderer("llama3-instruct")
    assert not renders_tool_calls(llama3) and renders_tool_calls(renderer(QWEN))
    with pytest.raises(ChatError) as info:
        ChatEncoder(llama3, backend("llama3-instruct")).encode(
            Conversation(CONVERSATIONS["call_with_text"], None))
    assert info.value.reason == "tools_not_rendered" and "get_weather" in info.value.detail
    with pytest.raises(ChatError) as info:
        ChatEncoder(llama3, backend("llama3-instruct")).encode(
            Conversation([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], [WEATHER]))
    assert info.value.reason == "tools_not_rendered"


def test_a_tool_call_the_template_writes_differently_when_last_is_refused():
    """The turn's end is found by rendering the conversation up to the call: a template that writes the call
    otherwise when it ends the conversation cannot be located, and says so."""
    moody = ("{% for m in messages %}{% set last = loop.last %}<{{ m.role }}>{{ m.content or '' }}"
             "{% for c in m.tool_calls or [] %}{{ 'CALL ' if last else 'call ' }}{{ c.function.name }}"
             "{% endfor %}|{% endfor %}")
    encoder = ChatEncoder(ChatRenderer(moody, {}), backend(QWEN))
    with pytest.raises(ChatError) as info:
        encoder.encode(Conversation(CONVERSATIONS["two_rounds"], None))
    assert info.value.reason == "tool_call_not_located"


QWEN3_TEMPLATE = Path(__file__).parent / "data" / "chat_templates" / "Qwen-Qwen3-0.6B.jinja"
QWEN3_CONVERSATIONS = {
    # A call followed by more turns, then one that ends the conversation, with text before it.
    "call_then_last_call": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [_call("get_weather", {"city": "Paris"})]},
        {"role": "tool", "content": "sunny 21", "tool_call_id": "call00001", "name": "get_weather"},
        {"role": "assistant", "content": "Sunny, 21 degrees in Paris."},
        {"role": "user", "content": "And Rome?"},
        {"role": "assistant", "content": "Checking Rome.", "tool_calls": [_call("get_weather", {"city": "Rome"},
                                                                               "call00002")]}],
    # Two calls in a row after one question (both after Qwen3's last query), the second ending the conversation.
    # (Qwen3's template reads every assistant content as text: a call's is "", not null.)
    "two_calls_in_a_row": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Paris, then the time there."},
        {"role": "assistant", "content": "", "tool_calls": [_call("get_weather", {"city": "Paris"})]},
        {"role": "tool", "content": "paris temp 21"},
        {"role": "assistant", "content": "", "tool_calls": [_call("get_time", {}, "call00002")]}],
}


@pytest.mark.parametrize("name", sorted(QWEN3_CONVERSATIONS))
def test_qwen3_tool_calls_are_located_where_the_template_writes_more_for_the_last_turn(name):
    """Qwen3's template writes an empty think block before an assistant turn after the last question only when
    that turn ends the conversation: rendered up to a call that more turns follow, the conversation does not
    begin the whole rendering. Less that block it does, and the call is located there. The text and ids are
    transformers'; the trained positions are exactly the assistant turns (from the newline after
    `<|im_start|>assistant` to the `<|im_end|>` and newline that end the turn, tool calls and the last turn's
    think block included); nothing else is, tool results included."""
    import re

    template = QWEN3_TEMPLATE.read_text()
    messages, tools = QWEN3_CONVERSATIONS[name], [WEATHER, TIME]
    hf = hf_tokenizer(QWEN)
    text = hf.apply_chat_template(_hf_messages(messages), tools=tools, tokenize=False, chat_template=template)
    want = hf.apply_chat_template(_hf_messages(messages), tools=tools, tokenize=True, return_dict=True,
                                  chat_template=template)["input_ids"]
    # What makes this template different: the call that more turns follow is written without the think block
    # its rendering as the last turn has.
    first_call = next(i for i, m in enumerate(messages) if m.get("tool_calls"))
    alone = hf.apply_chat_template(_hf_messages(messages[:first_call + 1]), tools=tools, tokenize=False,
                                   chat_template=template)
    assert "<think>\n\n</think>" in alone[alone.rindex("<|im_start|>assistant"):] and not text.startswith(alone)
    assert text.endswith("</tool_call><|im_end|>\n") and text.count("<think>") == 1  # the last call's only

    renderer = ChatRenderer(template, template_tokens(tokenizer_config(QWEN)))
    encoder = ChatEncoder(renderer, backend(QWEN))
    conversation = parse_chat(json.dumps({"messages": messages, "tools": tools}))
    got = encoder.encode(conversation)
    assert got.text == text and got.ids.tolist() == list(want)
    turns = [(m.start() + len("<|im_start|>assistant"), text.index("<|im_end|>\n", m.end()) + len("<|im_end|>\n"))
             for m in re.finditer(re.escape("<|im_start|>assistant"), text)]
    assert len(turns) == sum(m["role"] == "assistant" for m in messages)
    expected = np.zeros(len(got.ids), dtype=bool)
    for a, b in turns:
        expected |= (got.offsets[:, 0] < b) & (got.offsets[:, 1] > a)
    assert np.array_equal(got.trained, expected), (_trained_text(hf, want, got.trained),
                                                   _trained_text(hf, want, expected))
    # The batch path encodes it the same.
    [batched] = encoder.encode_many([conversation])
    assert np.array_equal(batched.ids, got.ids) and np.array_equal(batched.trained, got.trained)
    assert [t.role for t in got.turns] == [m["role"] for m in messages]


# ---------------------------------------------------------------- through the job

def _chat(input_dir, out, *extra) -> list[str]:
    return ["Chat", "--input_dir", str(input_dir), "--output_dir", str(out), "--tokenizer_type",
            "HuggingFaceTokenizer", "--huggingface_tokenizer", str(require_shared(SHARED / "tokenizers" / QWEN)),
            "--max_seq_length", "512", *extra]


def test_a_job_trains_tool_calls_from_jsonl_and_parquet_alike(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = [{"id": k, "messages": m, "tools": [WEATHER, TIME] if k % 2 else None}
               for k, m in enumerate(CONVERSATIONS.values())]
    # Parquet holds the messages and tools as lists of structs (as Hugging Face datasets do): Arrow gives every
    # struct every field of its column, absent ones null. The .jsonl file holds the records as Arrow reads them
    # back, so both jobs must give the same rows.
    table = pa.Table.from_pylist(records)
    records = table.to_pylist()
    (tmp_path / "jsonl").mkdir()
    (tmp_path / "jsonl" / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "parquet").mkdir()
    pq.write_table(table, tmp_path / "parquet" / "a.parquet")
    params = run_job(_chat(tmp_path / "jsonl", tmp_path / "out_jsonl"))
    assert params["input"]["used"] == len(records), params["input"]
    from_parquet = run_job(_chat(tmp_path / "parquet", tmp_path / "out_parquet"))
    assert from_parquet["input"]["used"] == len(records), from_parquet["input"]
    rows = read_rows(tmp_path / "out_jsonl")
    assert np.array_equal(read_rows(tmp_path / "out_parquet"), rows)
    hf = hf_tokenizer(QWEN)
    for row, record in zip(rows, records):
        messages = [{k: v for k, v in m.items() if v is not None} for m in record["messages"]]
        want = hf.apply_chat_template(messages, tools=record["tools"], tokenize=True, return_dict=True)["input_ids"]
        n = int(row[1].sum())  # trained positions: the conversation ends with its last trained token
        assert row[0][:len(want) - 1].tolist() == list(want)[:-1]
        assert n > 0
    assert params["chat"]["loss_valid_tokens_by_role"].get("tool", 0) == 0
    assert params["chat"]["tokens_by_role"]["tool"] > 0


def test_tools_key_asked_for_with_a_template_that_cannot_render_tools_fails_before_the_job(tmp_path):
    import subprocess
    import sys

    from tests.helpers import ROOT

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text(json.dumps({"messages": CONVERSATIONS["call_with_text"]}) + "\n")
    argv = _chat(tmp_path / "in", tmp_path / "out", "--tools_key", "tools")
    argv[argv.index(str(SHARED / "tokenizers" / QWEN))] = str(require_shared(SHARED / "tokenizers" /
                                                                              "llama3-instruct"))
    proc = subprocess.run([sys.executable, "-m", "pipelines.create_hdf5_dataset", *argv, "--runner", "FnApiRunner"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "does not write tools or tool calls" in proc.stderr and "llama3-instruct" in proc.stderr
    assert not (tmp_path / "out" / "data_params.json").exists()


def test_a_conversation_kept_as_a_json_string_is_read_as_the_conversation():
    """A .parquet column of conversations stored as JSON text reaches the parser as the JSON text of a string."""
    messages = CONVERSATIONS["call_with_text"]
    assert parse_chat(json.dumps(json.dumps(messages))) == parse_chat(json.dumps(messages))
    with pytest.raises(ChatError) as info:
        parse_chat(json.dumps("not a conversation"))
    assert info.value.reason == "not_a_conversation"


# ---------------------------------------------------------------- refusals and parsing, exactly (mutation testing)

def _refused_by(fn, *args, **kwargs) -> tuple:
    with pytest.raises(ChatError) as info:
        fn(*args, **kwargs)
    return info.value.reason, info.value.detail


def test_malformed_tool_calls_are_refused_naming_the_message():
    from transforms.core.chat.encode import check_messages

    q = {"role": "user", "content": "q"}
    assert _refused_by(check_messages, [{**q, "tool_calls": [_call("f", {})]}]) == (
        "not_a_tool_call", "message 0: a user message with tool_calls")
    assert _refused_by(check_messages, [q, {"role": "assistant", "content": None, "tool_calls": {"name": "f"}}]) == (
        "not_a_tool_call", "message 1: tool_calls is dict, not a list")
    for call in ("f", {"function": {"name": ""}}, {"function": {"arguments": {}}}):  # a string: no call object
        assert _refused_by(check_messages, [q, {"role": "assistant", "content": None, "tool_calls": [call]}]) == (
            "not_a_tool_call", "message 1: a tool call without a function name")


def test_a_bare_tool_call_names_its_function():
    """A call given as {name, arguments} without OpenAI's {function: ...} wrapper is a call of that function."""
    from transforms.core.chat.encode import check_messages, tool_call_names

    message = {"role": "assistant", "content": None, "tool_calls": [{"name": "f", "arguments": {}}]}
    assert check_messages([{"role": "user", "content": "q"}, message]) is None
    assert tool_call_names(message) == ["f"]


def test_tool_lists_and_values_that_are_not_records_are_refused():
    assert _refused_by(parse_chat, {"messages": [{"role": "user", "content": "q"}], "tools": [WEATHER, 1]}) == (
        "not_a_tool_list", "tools is list, not a list of objects")
    assert _refused_by(parse_chat, {"messages": [{"role": "user", "content": "q"}], "tools": "f"}) == (
        "not_a_tool_list", "tools is str, not a list of objects")
    # Only an object holding "messages" is a record with tools; anything else is read as the messages.
    assert _refused_by(parse_chat, '["messages"]') == ("not_a_conversation", "expected a list of objects, got list")
    assert _refused_by(parse_chat, {"role": "user", "content": "q"}) == (
        "not_a_conversation", "expected a list of objects, got dict")


def test_function_call_turns_exactly():
    from transforms.core.chat.encode import parse_conversation

    two = [{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}}]
    got = parse_conversation([{"from": "human", "value": "q"},
                              {"from": "function_call", "value": json.dumps(two), "id": 7}],
                             role_key="from", content_key="value")
    # One assistant message, no content, both calls in OpenAI's form; the message's other keys kept.
    assert got[1] == {"role": "assistant", "content": None, "id": 7, "tool_calls": [
        {"type": "function", "function": {"name": "a", "arguments": {}}},
        {"type": "function", "function": {"name": "b", "arguments": {"x": 1}}}]}
    q = {"role": "user", "content": "q"}
    assert _refused_by(parse_conversation, [q, {"role": "function_call", "content": "not json"}]) == (
        "not_a_tool_call", "message 1: a function_call that is not JSON: Expecting value: line 1 column 1 (char 0)")
    assert _refused_by(parse_conversation, [q, {"role": "function_call", "content": "[1]"}]) == (
        "not_a_tool_call", "message 1: a function_call that is not an object")


def test_tools_given_with_a_list_of_messages_reach_the_template():
    encoder = ChatEncoder(renderer(QWEN), backend(QWEN))
    messages = [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "Sunny."}]
    with_tools = encoder.encode(Conversation(messages, [WEATHER])).text
    assert "get_weather" in with_tools and "get_weather" not in encoder.encode(messages).text
    assert encoder.encode(messages, tools=[WEATHER]).text == with_tools
    assert encoder.tokenize(messages, tools=[WEATHER]).text == with_tools


def test_a_conversation_opening_with_a_tool_call_trains_the_call_only():
    """No message before the call: its output begins after the generation prompt the template writes first (after
    Qwen's default system prompt), exactly transformers' generation mask, never the system prompt itself."""
    messages = CONVERSATIONS["call_without_text"][1:]  # the call, its result, the answer
    hf = hf_tokenizer(GENMASK)
    expected = hf.apply_chat_template(_hf_messages(messages), return_dict=True, return_assistant_tokens_mask=True)
    got = ChatEncoder(renderer(QWEN), backend(QWEN)).encode(Conversation(messages, None))
    assert got.ids.tolist() == list(expected["input_ids"])
    assert got.trained.astype(int).tolist() == list(expected["assistant_masks"])
    assert "".join(got.text[a:b] for (a, b), t in zip(got.offsets, got.trained) if t) == (
        '\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n'
        "\nIt is 21 degrees in Paris.<|im_end|>\n")
    # The call's message has no text: its place is where its output begins, an empty span.
    at = got.text.index("<tool_call>")
    assert got.turns[0].chars == (at, at)


# A tagged template on Qwen's tokenizer (none of its tags is a special token): reasoning, content and calls.
_LOOP = "{% for m in messages %}"
_TURN = ("<{{ m.role }}>{% if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif %}"
         "{{ m.content or '' }}{% for c in m.tool_calls or [] %}<call>{{ c.function.name }}</call>{% endfor %}</s>"
         "{% endfor %}")
_PROMPT = "{% if add_generation_prompt %}<assistant>{% endif %}"
_THINK = {"role": "assistant", "content": "Hello.", "reasoning_content": "Greet."}
_CALL = {"role": "assistant", "content": None, "tool_calls": [_call("f", {})]}
_AFTER = [{"role": "user", "content": "Thanks"}, {"role": "assistant", "content": "Bye."}]


@pytest.mark.parametrize("template, messages, output, span", [
    # The generation prompt "<assistant>" opens the text: the output is what follows it, up to the turn's end.
    (_LOOP + _TURN + _PROMPT, [_THINK, *_AFTER], (11, 42), (32, 38)),
    (_LOOP + _TURN + _PROMPT, [_CALL, *_AFTER], (11, 29), (11, 11)),
    # The content writes the generation prompt's text again: the output still begins after the first one.
    (_LOOP + _TURN + _PROMPT, [{**_THINK, "content": "Say <assistant>."}, *_AFTER], (11, 52), (32, 48)),
    # A template that refuses roles it does not know reads the probe (a user message) as any other.
    (_LOOP + "{% if m.role not in ('system', 'user', 'assistant', 'tool') %}{{ raise_exception('role') }}{% endif %}"
     + _TURN + _PROMPT, [_THINK, *_AFTER], (11, 42), (32, 38)),
    # No generation prompt to find: the output runs from the start of the text, the turn's header included.
    (_LOOP + _TURN, [_THINK, *_AFTER], (0, 42), (32, 38)),
    (_LOOP + _TURN, [_CALL, *_AFTER], (0, 29), (0, 0)),
    # A template that refuses the probe (a one-character message; contents under 4 characters here): likewise.
    (_LOOP + "{% if (m.content or 'none')|length < 4 %}{{ raise_exception('short') }}{% endif %}" + _TURN + _PROMPT,
     [_THINK, *_AFTER], (0, 42), (32, 38)),
    (_LOOP + "{% if (m.content or 'none')|length < 4 %}{{ raise_exception('short') }}{% endif %}" + _TURN + _PROMPT,
     [_CALL, *_AFTER], (0, 29), (0, 0)),
    # Prompted, the template writes something else than the plain rendering and more (an end marker only when not
    # prompted): no generation prompt can be read off it, whatever the turn holds.
    (_LOOP + _TURN + "{% if add_generation_prompt %}<assistant>{% else %}<eos>{% endif %}",
     [{**_THINK, "content": "Card XXXX-1234."}], (0, 56), (32, 47)),
])
def test_the_output_of_a_turn_opening_the_conversation_begins_after_the_generation_prompt(template, messages, output,
                                                                                          span):
    """With no message before it, an assistant turn's output begins where the template's generation prompt after
    a user message ends, found in the turn as written; without one, at the start of the text."""
    got = ChatEncoder(ChatRenderer(template, {}), backend(QWEN)).tokenize(Conversation(messages, None))
    assert got.outputs == (output,) + (None,) * (len(messages) - 1)
    assert got.spans[0] == span
    assert got.text.startswith("<assistant>")


def test_a_tool_call_messages_text_is_located_as_its_content():
    got = ChatEncoder(renderer(QWEN), backend(QWEN)).encode(Conversation(CONVERSATIONS["call_with_text"], None))
    assert [got.text[a:b] for a, b in (t.chars for t in got.turns)] == [
        "Be brief.", "Weather in Paris?", "Let me look.", "sunny, 21C", "Sunny."]


def test_a_content_that_is_also_in_the_tool_list_is_located_in_its_message():
    got = ChatEncoder(renderer(QWEN), backend(QWEN)).tokenize(
        Conversation([{"role": "user", "content": "get_weather"}, {"role": "assistant", "content": "Sure."}], [WEATHER]))
    user = got.text.rindex("<|im_start|>user\n") + len("<|im_start|>user\n")
    assert got.text.index("get_weather") < user  # the tool list comes first
    assert got.spans[0] == (user, user + len("get_weather"))


def test_every_message_after_a_call_without_text_is_checked():
    from transforms.core.chat.encode import check_messages

    with pytest.raises(ChatError) as info:
        check_messages([{"role": "user", "content": "q"}, {"role": "assistant", "content": None,
                                                           "tool_calls": [_call("f", {})]},
                        {"role": "user", "content": " "}])
    assert (info.value.reason, info.value.detail) == ("empty_content", "message 2 (user) is empty")


def test_render_conversation_checks_the_tools_by_name():
    from transforms.core.chat.encode import render_conversation

    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    qwen = renderer(QWEN)
    # No generation prompt unless asked for: the conversation as trained.
    assert render_conversation(qwen, Conversation(messages, None)).text.endswith("<|im_start|>assistant\na<|im_end|>\n")
    bare = WEATHER["function"]  # a tool given without OpenAI's {"type", "function"} wrapper: its own name
    assert "get_weather" in render_conversation(qwen, Conversation(messages, [bare])).text
    llama3 = renderer("llama3-instruct")
    with pytest.raises(ChatError) as info:
        render_conversation(llama3, Conversation(messages, [bare]))
    assert (info.value.reason, info.value.detail) == ("tools_not_rendered",
                                                      "the chat template does not write the tool 'get_weather'")
    # A tool without a readable name has nothing to look for.
    assert render_conversation(llama3, Conversation(messages, [{"type": "function", "function": "get_weather"}]))


# Writes a content the template trims, and the calls of an assistant message.
_TRIM_CALLS = ("{% for m in messages %}<{{ m.role }}>{{ (m.content or '') | trim }}"
               "{% for c in m.tool_calls or [] %}<call>{{ c.function.name }}</call>{% endfor %}</s>{% endfor %}")


@pytest.mark.parametrize("template", [
    _TRIM_CALLS,  # the contents rewritten: searched after the sentinels' template text
    # refuses a content of 3 characters or fewer, as the sentinels are: searched without them
    "{% for m in messages %}{% if (m.content or 'none')|length < 4 %}{{ raise_exception('short') }}{% endif %}"
    + _TRIM_CALLS[len("{% for m in messages %}"):]])
def test_a_call_without_text_is_placed_where_its_output_begins_when_contents_are_searched(template):
    messages = [{"role": "user", "content": " Weather? "},
                {"role": "assistant", "content": None, "tool_calls": [_call("get_weather", {})]},
                {"role": "tool", "content": "sunny"}, {"role": "assistant", "content": "Sunny there."}]
    got = ChatEncoder(ChatRenderer(template, {}), backend(QWEN)).tokenize(Conversation(messages, None))
    assert got.text == ("<user>Weather?</s><assistant><call>get_weather</call></s><tool>sunny</s>"
                        "<assistant>Sunny there.</s>")
    # The template writes no generation prompt: the call's output (its header and call) begins right after the
    # user's turn, at 18, and ends with its turn at 57; "sunny" and "Sunny there." are where the text has them.
    assert got.outputs[1] == (18, 57) and got.text[18:57] == "<assistant><call>get_weather</call></s>"
    assert got.spans == ((6, 14), (18, 18), (63, 68), (83, 95))


def test_a_tool_call_behind_another_generation_prompt_is_refused_naming_the_message():
    """The conversation up to the call, less the generation prompt before it: here the template writes a last
    assistant turn's header as its generation prompt (as long as the other header), which no earlier turn has."""
    template = ("{% for m in messages %}{% if m.role == 'assistant' and loop.last %}<generate!>{% else %}"
                "<{{ m.role }}>{% endif %}{{ m.content or '' }}{% for c in m.tool_calls or [] %}call "
                "{{ c.function.name }}{% endfor %}|{% endfor %}{% if add_generation_prompt %}<generate!>{% endif %}")
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": None,
                                                    "tool_calls": [_call("f", {})]},
                {"role": "tool", "content": "r"}, {"role": "assistant", "content": "done"}]
    with pytest.raises(ChatError) as info:
        ChatEncoder(ChatRenderer(template, {}), backend(QWEN)).tokenize(Conversation(messages, None))
    assert (info.value.reason, info.value.detail) == (
        "tool_call_not_located", "message 1 (assistant): the conversation rendered up to its tool calls does not "
                                 "begin the whole rendering, not even without one piece the template writes only "
                                 "when the turn is the last")


def test_reasoning_is_trained_like_the_content():
    qwen3 = ChatRenderer(QWEN3_TEMPLATE.read_text(), template_tokens(tokenizer_config(QWEN)))
    got = ChatEncoder(qwen3, backend(QWEN)).encode(
        [{"role": "user", "content": "Why?"}, {"role": "assistant", "content": "Because.", "reasoning_content": "So."}])
    assert got.text == ("<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n<think>\nSo.\n</think>\n\n"
                        "Because.<|im_end|>\n")
    assert "".join(got.text[s:e] for (s, e), t in zip(got.offsets, got.trained) if t) == (
        "\n<think>\nSo.\n</think>\n\nBecause.<|im_end|>\n")
