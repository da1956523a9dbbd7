"""DPO records as the common preference sets lay them out (issue #33): each gives the rows of the same pair in the
canonical layout (prompt messages, chosen and rejected strings), byte for byte, through the whole job.

Layouts (README's table has the flags): plain prompt / chosen / rejected strings; message lists ending with the
assistant's (UltraFeedback's); HH-RLHF transcripts ("\\n\\nHuman: ...
\\n\\nAssistant: ..."); LLaMA-Factory's `conversations` with one message object per side
(--prompt_key conversations); OpenAI's `input` / `preferred_output` / `non_preferred_output` (--prompt_key
input --chosen_key preferred_output --rejected_key non_preferred_output).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import SHARED, read_rows, require_shared, run_job
from transforms.core.chat.dpo import dpo_example, transcript_messages
from transforms.core.chat.template import ChatError

QWEN = SHARED / "tokenizers" / "qwen2.5-instruct"

PROMPT = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4."},
          {"role": "user", "content": "And 3+3?"}]
CHOSEN, REJECTED = "It is 6.", "Seven, I think."


def _sharegpt(messages):
    return [{"from": {"user": "human", "assistant": "gpt"}[m["role"]], "value": m["content"]} for m in messages]


def _hh(messages, response):
    turns = messages + [{"role": "assistant", "content": response}]
    return "".join(f"\n\n{'Human' if m['role'] == 'user' else 'Assistant'}: {m['content']}" for m in turns)


LAYOUTS = {
    "canonical": ({"prompt": PROMPT, "chosen": CHOSEN, "rejected": REJECTED}, ["--prompt_key", "prompt"]),
    "message_lists": ({"chosen": PROMPT + [{"role": "assistant", "content": CHOSEN}],
                       "rejected": PROMPT + [{"role": "assistant", "content": REJECTED}]}, []),
    "hh_rlhf": ({"chosen": _hh(PROMPT, CHOSEN), "rejected": _hh(PROMPT, REJECTED)}, []),
    "llama_factory": ({"conversations": _sharegpt(PROMPT), "chosen": {"from": "gpt", "value": CHOSEN},
                       "rejected": {"from": "gpt", "value": REJECTED}}, ["--prompt_key", "conversations"]),
    "openai": ({"input": {"messages": PROMPT, "tools": [], "parallel_tool_calls": True},
                "preferred_output": [{"role": "assistant", "content": CHOSEN}],
                "non_preferred_output": [{"role": "assistant", "content": REJECTED}]},
               ["--prompt_key", "input", "--chosen_key", "preferred_output", "--rejected_key",
                "non_preferred_output"]),
}


def _dpo(input_dir: Path, out: Path, flags: list) -> list[str]:
    return ["DPO", "--input_dir", str(input_dir), "--output_dir", str(out), "--tokenizer_type", "HuggingFaceTokenizer",
            "--huggingface_tokenizer", str(require_shared(QWEN)), "--max_seq_length", "96", *flags]


def _job(tmp: Path, name: str, records: list, flags: list) -> tuple[dict, np.ndarray]:
    inputs = tmp / f"in_{name}"
    inputs.mkdir()
    (inputs / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp / f"out_{name}"
    params = run_job(_dpo(inputs, out, flags))
    return params, read_rows(out)


@pytest.fixture(scope="module")
def canonical_rows(tmp_path_factory) -> np.ndarray:
    record, flags = LAYOUTS["canonical"]
    params, rows = _job(tmp_path_factory.mktemp("canonical"), "canonical", [record], flags)
    assert params["input"]["used"] == 1 and len(rows) == 1
    return rows


@pytest.mark.parametrize("layout", sorted(set(LAYOUTS) - {"canonical"}))
def test_each_layout_gives_the_canonical_pairs_rows(layout, canonical_rows, tmp_path):
    record, flags = LAYOUTS[layout]
    params, rows = _job(tmp_path, layout, [record], flags)
    assert params["input"]["used"] == 1, params["input"]
    assert np.array_equal(rows, canonical_rows)


def test_hh_transcripts_are_split_at_each_sides_own_last_assistant_turn():
    """Cerebras 2.10 splits the rejected side at the chosen side's index: wrong when the transcripts differ before
    it. Each side is split on its own, and a pair whose prompts then differ is refused with that reason."""
    longer = _hh(PROMPT, "It is 6, since 3+3 is 6.")
    example = dpo_example(chosen=longer, rejected=_hh(PROMPT, REJECTED))
    assert example == (PROMPT, "It is 6, since 3+3 is 6.", REJECTED, None)
    other_prompt = _hh([{"role": "user", "content": "What is 5+5?"}], REJECTED)
    with pytest.raises(ChatError) as info:
        dpo_example(chosen=_hh(PROMPT, CHOSEN), rejected=other_prompt)
    assert info.value.reason == "prompts_differ"
    assert transcript_messages("no markers here") is None
    assert transcript_messages("\n\nHuman: only a question") is None  # no assistant turn: not a transcript


def test_a_response_quoting_human_turns_is_a_response_when_the_record_has_a_prompt():
    quoted = "Human: hi\n\nAssistant: hello"
    assert dpo_example(prompt="Q", chosen=quoted, rejected="B").chosen == quoted


def test_identical_responses_and_prompts_that_differ_are_accounted_for(tmp_path):
    records = [
        LAYOUTS["canonical"][0],
        {"prompt": PROMPT, "chosen": CHOSEN, "rejected": CHOSEN},  # no signal: dropped
        {"chosen": _hh(PROMPT, CHOSEN), "rejected": _hh(PROMPT[:1], REJECTED)},  # no "prompt": a dead letter
    ]
    params, rows = _job(tmp_path, "mixed", records, ["--prompt_key", "prompt"])
    inp = params["input"]
    assert inp["used"] == 1 and len(rows) == 1
    assert inp["dropped_by_reason"] == {"identical_responses": 1}
    assert inp["bad_by_reason"] == {"missing_key": 1}  # --prompt_key names a key this record lacks


def test_responses_equal_once_cut_to_fit_are_dropped():
    from transforms.core.chat.dpo import EncodedDpo, dpo_row

    pair = EncodedDpo(np.array([1, 2, 3], np.int32), np.array([7, 8, 9, 10], np.int32),
                      np.array([7, 8, 9, 11], np.int32))
    assert dpo_row(pair, max_seq_length=8, pad_id=0).shape == (6, 8)
    with pytest.raises(ChatError) as info:
        dpo_row(pair, max_seq_length=6, pad_id=0, max_prompt_length=3)
    assert info.value.reason == "identical_responses" and "once cut to fit" in info.value.detail


def test_hh_pairs_whose_prompts_differ_are_dead_letters_with_their_line(tmp_path):
    records = [LAYOUTS["hh_rlhf"][0], {"chosen": _hh(PROMPT, CHOSEN), "rejected": _hh(PROMPT[:1], REJECTED)}]
    params, rows = _job(tmp_path, "hh", records, [])
    assert params["input"]["used"] == 1 and params["input"]["bad_by_reason"] == {"prompts_differ": 1}
    (letter,) = [json.loads(line) for p in (tmp_path / "out_hh" / "dead_letter").glob("*.jsonl")
                 for line in p.read_text().splitlines()]
    assert letter["line"] == 2 and json.loads(letter["raw"]) == records[1]


def test_openai_prompts_tools_reach_the_template(tmp_path):
    """OpenAI's input.tools are the template's tools, on both sides, never dropped."""
    tool = {"type": "function", "function": {"name": "get_sum", "description": "Adds.",
                                             "parameters": {"type": "object", "properties": {}}}}
    record, flags = LAYOUTS["openai"]
    with_tools = {**record, "input": {**record["input"], "tools": [tool]}}
    # Qwen's tool preamble is long: rows of 512 (the last --max_seq_length given is the one used).
    params, rows = _job(tmp_path, "openai_tools", [with_tools], flags + ["--max_seq_length", "512"])
    assert params["input"]["used"] == 1, params["input"]
    from tests.chat_helpers import hf_tokenizer

    hf = hf_tokenizer("qwen2.5-instruct")
    chosen = rows[0][0][rows[0][0] != rows[0][0][-1]].tolist()  # the chosen side's ids, padding off
    want = hf.apply_chat_template(PROMPT + [{"role": "assistant", "content": CHOSEN}], tools=[tool], tokenize=True,
                                  return_dict=True)["input_ids"]
    assert chosen == list(want)[:len(chosen)] and "get_sum" in hf.decode(chosen)
