"""Model Zoo 2.10's built-in read hooks, re-implemented: a record in, a semantic data array out.

A 2.10 config names its read hook as
`cerebras.modelzoo.data_preparation.data_preprocessing.hooks:chat_read_hook`
(or a hook of its own) and gives it `read_hook_kwargs`; 2.10 calls
`hook(example, **read_hook_kwargs)` on each record, where `example` holds the
record's columns named by the kwargs ending in `_key`, None for one the
record lacks (`hook_columns`). These
functions take the same names and kwargs, so a 2.10 config runs here
unchanged and without Model Zoo installed (`BUILTIN_HOOKS`). What they
return is checked and flattened by transforms.core.regions.

Where 2.10 skips a record silently (returns [] and logs a warning) these
raise `RegionError` with a reason, so the record becomes a counted dead
letter: unpaired_turns (chat), no_assistant_marker, prompts_differ,
not_single_turn, mixed_shapes (DPO), not_a_conversation. Empty or null
values are passed on as they are: read_semantic_array refuses them as
empty_region, as 2.10 skips them.

Other departures from 2.10, each for a reason given where it is made:
chat_read_hook maps ShareGPT roles (human, gpt); dpo_read_hook finds the
assistant marker without changing the text's length and checks that the
rejected text shares the prompt; nlg_read_hook works (2.10's nlg mode fails
on every record).

A hook without a kwarg it needs raises a plain ValueError: a config error,
found before the job by `check_hook_kwargs`.

Pure: no Beam, no files.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping, Optional

from transforms.core.regions import RegionError

__all__ = ["BUILTIN_HOOKS", "MODELZOO_HOOKS_MODULE", "REQUIRED_KWARGS", "chat_read_hook", "check_hook_kwargs",
           "dpo_read_hook", "hook_columns", "nlg_read_hook", "prompt_completion_chat_read_hook",
           "prompt_completion_text_read_hook", "text_read_hook"]

MODELZOO_HOOKS_MODULE = "cerebras.modelzoo.data_preparation.data_preprocessing.hooks"

Turns = list[dict[str, Any]]


def _require(hook: str, **kwargs: Any) -> None:
    for name, value in kwargs.items():
        if value is None:
            raise ValueError(f"{hook} needs read_hook_kwargs.{name}")


def _turn(kind: Optional[str], text: Any) -> dict[str, Any]:
    turn: dict[str, Any] = {"content": [{"text": text}]}
    if kind is not None:
        turn["type"] = kind
    return turn


def _strip(value: Any) -> Any:
    """A string stripped; anything else (None, a number) as it is, for read_semantic_array to refuse."""
    return value.strip() if isinstance(value, str) else value


def text_read_hook(example: Mapping[str, Any], *, text_key: Optional[str] = None, **_: Any) -> Turns:
    """One untyped turn: the text of `text_key`, stripped (a missing column reads as "").

    >>> text_read_hook({"text": " Hi "}, text_key="text")
    [{'content': [{'text': 'Hi'}]}]
    """
    _require("text_read_hook", text_key=text_key)
    return [_turn(None, _strip(example.get(text_key, "")))]


def prompt_completion_text_read_hook(example: Mapping[str, Any], *, prompt_key: Optional[str] = None,
                                     completion_key: Optional[str] = None, **_: Any) -> Turns:
    """A prompt turn and a completion turn, their texts as they are (not stripped): joined as text, not chat.

    >>> prompt_completion_text_read_hook({"q": "2+2=", "a": " 4"}, prompt_key="q", completion_key="a")
    [{'content': [{'text': '2+2='}], 'type': 'prompt'}, {'content': [{'text': ' 4'}], 'type': 'completion'}]
    """
    _require("prompt_completion_text_read_hook", prompt_key=prompt_key, completion_key=completion_key)
    return [_turn("prompt", example.get(prompt_key)), _turn("completion", example.get(completion_key))]


def prompt_completion_chat_read_hook(example: Mapping[str, Any], *, prompt_key: Optional[str] = None,
                                     completion_key: Optional[str] = None, **_: Any) -> Turns:
    """A user turn and an assistant turn, stripped: one exchange through the chat template."""
    _require("prompt_completion_chat_read_hook", prompt_key=prompt_key, completion_key=completion_key)
    return [_turn("user", _strip(example.get(prompt_key))), _turn("assistant", _strip(example.get(completion_key)))]


# ShareGPT's role names. 2.10 passes roles on verbatim, so a ShareGPT record's "human" and "gpt" turns reach
# the chat template under names it does not know and, not being "assistant", get loss weight 0: the record
# trains nothing, silently. Every chat template knows user and assistant.
_SHAREGPT_ROLES = {"human": "user", "gpt": "assistant"}


def chat_read_hook(example: Mapping[str, Any], *, multi_turn_key: Optional[str] = None,
                   multi_turn_role_key: Optional[str] = None, multi_turn_content_key: Optional[str] = None,
                   has_system_prompt: Any = None, **_: Any) -> Turns:
    """A conversation `[{role_key: ..., content_key: ...}, ...]` under `multi_turn_key`, as typed turns.

    2.10's rules: a first message of role "system" becomes a system turn
    when its content is not empty (its content kept as it is); the other
    messages come in pairs, each pair of two different roles (the order of
    the pairs is not checked, nor are later system messages), else
    RegionError("unpaired_turns") (2.10 skips the record); their contents
    are stripped. Roles become the turns' types, ShareGPT's human and gpt
    mapped to user and assistant; a message without a role is
    RegionError("unknown_region_type"). A missing or empty conversation gives []
    (refused as empty_array). `has_system_prompt` (2.3's kwarg) is accepted
    and ignored, as by 2.10, which finds the system message by its role.

    >>> chat_read_hook({"m": [{"from": "human", "value": " Hi "}, {"from": "gpt", "value": "Yo"}]},
    ...                multi_turn_key="m", multi_turn_role_key="from", multi_turn_content_key="value")
    [{'content': [{'text': 'Hi'}], 'type': 'user'}, {'content': [{'text': 'Yo'}], 'type': 'assistant'}]
    """
    _require("chat_read_hook", multi_turn_key=multi_turn_key, multi_turn_role_key=multi_turn_role_key,
             multi_turn_content_key=multi_turn_content_key)
    messages = example.get(multi_turn_key)
    if not messages:
        return []
    if not isinstance(messages, (list, tuple)):
        raise RegionError("not_a_conversation", f"{multi_turn_key!r} holds {type(messages).__name__}, not a list "
                          "of messages")
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise RegionError("not_a_conversation", f"message {i} is {type(message).__name__}, not an object")
    turns: Turns = []
    first = 0  # index of the first message after the system message
    if messages[0].get(multi_turn_role_key) == "system":
        system = messages[0].get(multi_turn_content_key)
        if system:
            turns.append(_turn("system", system))
        first = 1
        messages = messages[1:]
    if len(messages) % 2:
        raise RegionError("unpaired_turns", f"{len(messages)} messages after the system message: not pairs of "
                          "user and assistant")
    roles = [_role(m.get(multi_turn_role_key)) for m in messages]
    if None in roles:
        # A turn without a type is plain text (text_read_hook's): a message without a role must not become one.
        i = roles.index(None)
        raise RegionError("unknown_region_type", f"message {first + i} has no {multi_turn_role_key!r}")
    for i in range(0, len(messages), 2):
        if roles[i] == roles[i + 1]:
            raise RegionError("unpaired_turns", f"messages {first + i} and {first + i + 1} are both "
                              f"{roles[i]!r}: each pair needs two different roles")
    for role, message in zip(roles, messages):
        turns.append(_turn(role, _strip(message.get(multi_turn_content_key))))
    return turns


def _role(role: Any) -> Any:
    return _SHAREGPT_ROLES.get(role, role) if isinstance(role, str) else role


def dpo_read_hook(example: Mapping[str, Any], *, prompt_key: Optional[str] = None, chosen_key: Optional[str] = None,
                  rejected_key: Optional[str] = None, assistant_role: str = "assistant:", **_: Any) -> Turns:
    """A prompt, a chosen and a rejected turn, from one of three record shapes (MODES.md §B3):

    - strings, `prompt_key` given: the three texts as they are;
    - strings, no `prompt_key` (HH-RLHF transcripts): the prompt is the
      chosen text up to and including its last `assistant_role` marker,
      found ignoring case (none: RegionError("no_assistant_marker")); the
      responses are what follows it in each text. The rejected text must
      begin with the same prompt (RegionError("prompts_differ"); 2.10 cuts it
      at the chosen text's offset whatever it holds);
    - lists of two messages (`[prompt, response]`): the prompt is the
      chosen list's first content, the responses the second contents. Not
      two messages each: RegionError("not_single_turn") (2.10 takes the
      first two, whatever follows); first contents that differ:
      RegionError("prompts_differ").

    A missing or null field is RegionError("empty_region"); strings and
    lists mixed, RegionError("mixed_shapes") (2.10 gives [] for both).
    """
    _require("dpo_read_hook", chosen_key=chosen_key, rejected_key=rejected_key)
    fields = {"chosen": chosen_key, "rejected": rejected_key}
    if prompt_key is not None:
        fields = {"prompt": prompt_key, **fields}
    values = {}
    for name, key in fields.items():
        values[name] = example.get(key)
        if values[name] is None:
            raise RegionError("empty_region", f"dpo_read_hook: the {name} field {key!r} is missing or null")
    if all(isinstance(v, str) for v in values.values()):
        if prompt_key is not None:
            prompt, chosen, rejected = values["prompt"], values["chosen"], values["rejected"]
        else:
            prompt, chosen, rejected = _split_transcripts(values["chosen"], values["rejected"], assistant_role)
    elif isinstance(values["chosen"], list) and isinstance(values["rejected"], list) and (
            prompt_key is None or isinstance(values["prompt"], list)):
        prompt, chosen, rejected = _split_message_lists(values["chosen"], values["rejected"])
    else:
        shapes = ", ".join(f"{name} {type(v).__name__}" for name, v in values.items())
        raise RegionError("mixed_shapes", f"dpo_read_hook: the fields must be all strings or all lists ({shapes})")
    return [_turn("prompt", prompt), _turn("chosen", chosen), _turn("rejected", rejected)]


def _split_transcripts(chosen: str, rejected: str, marker: str) -> tuple[str, str, str]:
    # 2.10 searches chosen.lower() for the marker as given: a marker with a capital letter is never found, and
    # lower() can change a text's length ("İ" becomes two characters), moving the cut. A case-blind search of
    # the text itself finds "Assistant:" for "assistant:" and "ASSISTANT:" alike, at its true offset.
    matches = list(re.finditer(re.escape(marker), chosen, re.IGNORECASE)) if marker else []
    if not matches:
        raise RegionError("no_assistant_marker", f"dpo_read_hook: the chosen text has no {marker!r} to end its "
                          "prompt")
    cut = matches[-1].end()
    prompt = chosen[:cut]
    if rejected[:cut] != prompt:
        raise RegionError("prompts_differ", f"dpo_read_hook: the rejected text does not begin with the chosen "
                          f"text's prompt (its first {cut} characters, up to the last {marker!r})")
    return prompt, chosen[cut:], rejected[cut:]


def _split_message_lists(chosen: list, rejected: list) -> tuple[Any, Any, Any]:
    for name, messages in (("chosen", chosen), ("rejected", rejected)):
        if len(messages) != 2:
            raise RegionError("not_single_turn", f"dpo_read_hook: the {name} list has {len(messages)} messages, "
                              "not two (prompt, response)")
        for i, m in enumerate(messages):
            if not isinstance(m, Mapping) or "content" not in m:
                raise RegionError("not_a_conversation", f"dpo_read_hook: {name} message {i} is not an object "
                                  "with a content")
    if chosen[0]["content"] != rejected[0]["content"]:
        raise RegionError("prompts_differ", "dpo_read_hook: the chosen and rejected lists begin with different "
                          "prompts")
    return chosen[0]["content"], chosen[1]["content"], rejected[1]["content"]


def nlg_read_hook(example: Mapping[str, Any], *, context_key: Optional[str] = None,
                  completion_key: Optional[str] = None, **_: Any) -> Turns:
    """A context turn and a completion turn, their texts as they are (a missing column reads as "").

    2.10's nlg mode fails on every record (its token generator refers to an
    undefined name), so there is no 2.10 output to match; these turns are
    read as prompt/completion text is: context with weight 0, completion 1.
    """
    _require("nlg_read_hook", context_key=context_key, completion_key=completion_key)
    return [_turn("context", example.get(context_key, "")), _turn("completion", example.get(completion_key, ""))]


# The kwargs each built-in hook cannot do without (check_hook_kwargs).
REQUIRED_KWARGS: Mapping[Callable, tuple[str, ...]] = {
    text_read_hook: ("text_key",),
    prompt_completion_text_read_hook: ("prompt_key", "completion_key"),
    prompt_completion_chat_read_hook: ("prompt_key", "completion_key"),
    chat_read_hook: ("multi_turn_key", "multi_turn_role_key", "multi_turn_content_key"),
    dpo_read_hook: ("chosen_key", "rejected_key"),
    nlg_read_hook: ("context_key", "completion_key"),
}


def _builtin_table() -> dict[str, Callable]:
    table: dict[str, Callable] = {}
    named = {fn.__name__: fn for fn in REQUIRED_KWARGS}
    # 2.10's shipped curation_corpus_summarization_preprocessing.yaml names "hooks:prompt_completion_key", a
    # function 2.10 does not have (that config fails there); it means the prompt/completion text hook.
    named["prompt_completion_key"] = prompt_completion_text_read_hook
    for name, fn in named.items():
        table[name] = fn
        table[f"{MODELZOO_HOOKS_MODULE}:{name}"] = fn
    return table


# Every name a 2.10 config may give a built-in hook: the short name and 2.10's import path.
BUILTIN_HOOKS: Mapping[str, Callable] = _builtin_table()


def hook_columns(kwargs: Mapping[str, Any]) -> tuple[str, ...]:
    """The record columns a hook reads: the values of the kwargs whose names end in `_key` (2.10's rule,
    data_preprocessor.py's `data_keys`), in the kwargs' order, without None and repeats.

    As in 2.10 this includes kwargs that name keys inside the messages, not
    columns of the record: chat_read_hook's multi_turn_role_key and
    multi_turn_content_key (2.10's hooks.py reads them with `turn.get(...)`,
    only `multi_turn_key` with `example.get(...)`). 2.10's reader gives the
    hook `{k: x.get(k, None) for k in data_keys}` (data_reader.py), so what
    a record lacks reaches the hook as None. How the job reads these columns
    (pipelines.config.Config.keys_tuple):

    - a hook of the user's own (records.HookColumn): a column the record
      lacks, or holds null in, reads as None, as in 2.10, so kwargs naming
      keys inside the messages never refuse a record, and a column the
      record really lacks (its `multi_turn_key`, say) is the hook's to
      handle (a hook that raises on None makes a `hook_raised` dead letter).
      A record holding none of the columns at all (a parquet file: having
      none of them) is a `missing_key` dead letter: there is nothing for
      the hook to read (2.10 would call it with every value None);
    - a built-in hook run on its regions (prompt_completion_chat_read_hook,
      dpo_read_hook with another assistant_role): its columns are the
      record's, each needed (`missing_key` / `null_text` dead letters).
    """
    columns: list[str] = []
    for name, value in kwargs.items():
        if not name.endswith("_key") or value is None:
            continue
        if not isinstance(value, str):
            raise ValueError(f"read_hook_kwargs.{name} must name a column (a string), not {value!r}")
        if value not in columns:
            columns.append(value)
    return tuple(columns)


def check_hook_kwargs(hook: Callable, kwargs: Optional[Mapping[str, Any]]) -> None:
    """Raise a ValueError when a hook's kwargs cannot work: none names a column (2.10 refuses that too), or a
    built-in hook misses one it needs. Called when the config is loaded, before any record is read."""
    kwargs = kwargs or {}
    if not hook_columns(kwargs):
        raise ValueError("read_hook_kwargs names no column: give at least one kwarg ending in _key")
    for name in REQUIRED_KWARGS.get(hook, ()):
        if kwargs.get(name) is None:
            raise ValueError(f"{hook.__name__} needs read_hook_kwargs.{name}")
