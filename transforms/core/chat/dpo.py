"""DPO rows: a prompt and two responses (chosen, rejected), six rows of msl, loss on the response labels.

**Records** (`dpo_example`). A side (chosen, rejected) is a string (the
assistant's response), one message object (LLaMA-Factory), a list of
messages whose last is the assistant's (UltraFeedback, OpenAI's
`preferred_output`: the messages before it are the prompt), or a plain
transcript of `Human:` / `Assistant:` turns (HH-RLHF: split at its own last
`Assistant:` marker; the turns before it are the prompt). A prompt is a
string (one user message), a list of messages, or an object holding
`messages` (OpenAI's `input`). Every prompt a record gives (the prompt
field, the chosen prefix, the rejected prefix) must be the same
conversation, else ChatError("prompts_differ"). Two responses of the same
tokens teach nothing: ChatError("identical_responses") (also when they
become the same only when cut to fit the row).

**Tokens** (`encode_dpo`), per side: the prompt rendered with
`add_generation_prompt=True` must be a prefix of the full conversation
(prompt + the assistant's response) rendered without it, else
ChatError("prompt_not_a_prefix"); the full conversation is tokenized as a
chat (`ChatEncoder.tokenize`: injection-safe), and the prompt P is its tokens
up to the end of the prompt rendering, which must fall between two tokens
(else ChatError("prompt_not_a_token_prefix")). The response R is the rest of
the tokens: the response text, its end-of-turn token and whatever the
template writes after it.

**Rows** (`dpo_row`, MODES.md §B3 layout). If |P| + max(|R_chosen|, |R_rejected|)
> msl: P keeps its last `max_prompt_length` tokens and each R its first
msl - |P| (none left: ChatError("too_long")). Per side, with S = P + R:

    input_ids       S                       then pad    (not shifted)
    labels          pad * (|P|-1), R        then pad    (= S[1:] with the prompt's labels padded)
    attention_mask  1 on positions |P|-1 .. |S|-2, else 0

so exactly the positions whose label is a response token carry loss. The
reference's mask also covers position |S|-1 (its label is padding); we do
not copy that. For example P = [p1 p2 p3], R = [r1 E], msl = 7:

    input_ids       p1 p2 p3 r1 E  P  P
    labels          P  P  r1 E  P  P  P
    attention_mask  0  0  1  1  0  0  0

The six rows are chosen_input_ids, chosen_attention_mask, chosen_labels,
rejected_input_ids, rejected_attention_mask, rejected_labels (`DPO_FEATURES`);
`inverted_mask` flips both mask rows.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Mapping, NamedTuple, Optional

import numpy as np

from transforms.core.chat.encode import ChatEncoder, Conversation, parse_conversation, render_conversation
from transforms.core.chat.template import ChatError
from transforms.core.features import DPO_FEATURES

__all__ = ["DPO_FEATURES", "DpoExample", "EncodedDpo", "dpo_example", "encode_dpo", "dpo_row", "fit_pair",
           "transcript_messages"]



class DpoExample(NamedTuple):
    prompt: list[dict]  # messages
    chosen: str
    rejected: str
    tools: Optional[list] = None  # the prompt's tools (OpenAI's input.tools), for the template's `tools`


@dataclasses.dataclass(frozen=True, eq=False)
class EncodedDpo:
    prompt: np.ndarray  # int32 [|P|]
    chosen: np.ndarray  # int32 [|R_chosen|]
    rejected: np.ndarray  # int32 [|R_rejected|]


def dpo_example(*, prompt: Any = None, chosen: Any, rejected: Any, role_key: str = "role",
                content_key: str = "content", json_text: bool = False) -> DpoExample:
    """A record's fields -> (prompt messages, chosen text, rejected text), or a ChatError.

    Fields are strings (texts) or lists of messages; with `json_text` each
    given field is JSON text to decode first (a JSON string is a text).
    """
    if json_text:
        prompt, chosen, rejected = (_decode(v) for v in (prompt, chosen, rejected))
    # A side is read as a transcript only when the record has no prompt of its own (HH-RLHF has none): a
    # response that merely quotes "Human:" turns stays a response.
    transcripts = prompt is None
    prefix_c, text_c = _side(chosen, "chosen", role_key, content_key, transcripts)
    prefix_r, text_r = _side(rejected, "rejected", role_key, content_key, transcripts)
    given, tools = None, None
    if isinstance(prompt, Mapping) and "messages" in prompt:  # OpenAI's preference layout: input.messages
        tools = prompt.get("tools") or None
        if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, Mapping) for t in tools)):
            raise ChatError("not_a_tool_list", f"tools is {type(tools).__name__}, not a list of objects")
        prompt = prompt["messages"]
    if isinstance(prompt, str):
        given = parse_conversation([{"role": "user", "content": prompt}])
    elif prompt is not None:
        given = parse_conversation(prompt, role_key=role_key, content_key=content_key)
    prompts = [p for p in (given, prefix_c, prefix_r) if p]
    if not prompts:
        raise ChatError("no_messages", "the record has no prompt")
    if any(p != prompts[0] for p in prompts[1:]):
        raise ChatError("prompts_differ", "the prompt, the chosen and the rejected conversations disagree")
    return DpoExample(prompts[0], text_c, text_r, tools)


def _decode(value: Any) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except (TypeError, ValueError) as e:
        raise ChatError("not_a_conversation", f"not JSON: {e}") from e


# HH-RLHF's transcripts: "\n\nHuman: ...\n\nAssistant: ..." (a turn's text follows its marker's space).
_TRANSCRIPT_TURN = re.compile(r"(?:^|\n\n)(Human|Assistant): ?")
_TRANSCRIPT_ROLES = {"Human": "user", "Assistant": "assistant"}


def transcript_messages(text: str) -> Optional[list[dict]]:
    """A plain transcript's turns as messages, or None if `text` is not one (it must begin with a Human: turn and
    hold an Assistant: turn). Split at every marker that begins a paragraph."""
    body = text.lstrip("\n")
    if not body.startswith("Human:") or "\n\nAssistant:" not in body:
        return None
    parts = _TRANSCRIPT_TURN.split(body)
    # parts: ["", role, text, role, text, ...]
    return [{"role": _TRANSCRIPT_ROLES[role], "content": turn} for role, turn in zip(parts[1::2], parts[2::2])]


def _side(value: Any, name: str, role_key: str, content_key: str, transcripts: bool) -> tuple[list[dict], str]:
    if isinstance(value, str):
        transcript = transcript_messages(value) if transcripts else None
        messages = parse_conversation(transcript if transcript is not None else
                                      [{"role": "assistant", "content": value}])
    elif isinstance(value, Mapping):  # one message object (LLaMA-Factory's pairs)
        messages = parse_conversation([value], role_key=role_key, content_key=content_key)
    elif isinstance(value, (list, tuple)):
        messages = parse_conversation(value, role_key=role_key, content_key=content_key)
    elif value is None:
        raise ChatError("no_messages", f"no {name} response")
    else:
        raise ChatError("not_a_string", f"{name} is {type(value).__name__}")
    if messages[-1]["role"] != "assistant":
        raise ChatError("no_assistant_turn", f"the last {name} message is not the assistant's")
    return messages[:-1], messages[-1]["content"]


def encode_dpo(encoder: ChatEncoder, example: DpoExample) -> EncodedDpo:
    """The prompt tokens and the two response tokens (see the module docstring)."""
    tools = example.tools
    prompt_text = render_conversation(encoder.renderer, Conversation(list(example.prompt), tools),
                                      add_generation_prompt=True).text
    prompts, responses = [], []
    for response in (example.chosen, example.rejected):
        messages = list(example.prompt) + [{"role": "assistant", "content": response}]
        if not encoder.renderer.render(messages, tools=tools).text.startswith(prompt_text):
            raise ChatError("prompt_not_a_prefix",
                            "the prompt with the generation prompt does not begin the conversation")
        tok = encoder.tokenize(messages, tools=tools)
        k = int(np.searchsorted(tok.offsets[:, 0], len(prompt_text), "left"))
        if (k and tok.offsets[k - 1, 1] > len(prompt_text)) or k == len(tok.ids):
            raise ChatError("prompt_not_a_token_prefix", "a token spans the end of the prompt")
        prompts.append(tok.ids[:k])
        responses.append(tok.ids[k:])
    if not np.array_equal(prompts[0], prompts[1]):
        raise ChatError("prompts_differ", "the prompt has different tokens before the two responses")
    return EncodedDpo(prompts[0], responses[0], responses[1])


def fit_pair(encoded: EncodedDpo, *, max_seq_length: int, max_prompt_length: int = 512) -> EncodedDpo:
    """The pair as its row holds it: when prompt and response do not fit, the prompt's last max_prompt_length
    tokens and the responses cut to the room left; ChatError("too_long") or ("identical_responses") when no row
    can be made of it."""
    msl = max_seq_length
    prompt, sides = encoded.prompt, [encoded.chosen, encoded.rejected]
    if len(prompt) + max(map(len, sides)) > msl:
        prompt = prompt[-max_prompt_length:] if max_prompt_length > 0 else prompt[:0]
        room = msl - len(prompt)
        if room < 1:
            raise ChatError("too_long", f"the prompt alone has {len(prompt)} tokens, msl {msl}")
        sides = [r[:room] for r in sides]
    if len(prompt) < 1:
        raise ChatError("too_long", "no prompt token left")
    if np.array_equal(sides[0], sides[1]):
        cut = "" if len(sides[0]) == len(encoded.chosen) == len(encoded.rejected) else " once cut to fit the row"
        raise ChatError("identical_responses", f"the chosen and the rejected response have the same tokens{cut}")
    return EncodedDpo(prompt, sides[0], sides[1])


def dpo_row(encoded: EncodedDpo, *, max_seq_length: int, pad_id: int, max_prompt_length: int = 512,
            inverted_mask: bool = False) -> np.ndarray:
    """int32 [6, msl] (see the module docstring), or ChatError("too_long")."""
    msl = max_seq_length
    fitted = fit_pair(encoded, max_seq_length=msl, max_prompt_length=max_prompt_length)
    prompt, sides = fitted.prompt, [fitted.chosen, fitted.rejected]
    row = np.zeros((6, msl), dtype=np.int32)
    for k, response in enumerate(sides):
        s = np.concatenate([prompt, response])
        n, p = len(s), len(prompt)
        ids, mask, labels = row[3 * k], row[3 * k + 1], row[3 * k + 2]
        ids[:] = labels[:] = pad_id
        ids[:n] = s
        labels[p - 1:n - 1] = response
        mask[p - 1:n - 1] = 1
        if inverted_mask:
            mask[:] = 1 - mask
    return row
