"""Chat templates rendered exactly as transformers' `apply_chat_template(..., tokenize=False)` renders them.

transformers (`utils/chat_template_utils.py`, 5.x) compiles a template in an
`ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)` with the
`loopcontrols` extension and its own `{% generation %}` extension, replaces
the `tojson` filter (no HTML escaping, `ensure_ascii=False`), and adds the
globals `raise_exception`, `strftime_now`, `dict` and `namespace`. It renders
with the variables `messages`, `tools=None`, `documents=None`,
`add_generation_prompt` and the tokenizer's named special tokens
(`bos_token`, `eos_token`, ... those that are set, as strings). Before
rendering it drops the message keys whose value is None and copies the
messages into plain JSON types. `ChatRenderer` does the same with jinja2
alone, so the pipeline does not depend on transformers (the tests use it as
the oracle):

    >>> r = ChatRenderer(CHATML, {})
    >>> r.render([{"role": "user", "content": "Hi"}], add_generation_prompt=True).text
    '<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n'

`Rendering.generation` holds the character spans of the `{% generation %}`
blocks, computed as transformers computes them for
`return_assistant_tokens_mask`: a block starts at the length of what the
template has emitted at top level so far (so a block inside a macro or a
`{% set %}` block is placed where transformers places it, wrongly alike).

transformers 4.x also passed `additional_special_tokens` to the template;
5.x passes only the named tokens, and so do we (`template_tokens`).
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from datetime import datetime
from typing import Any, Mapping, Optional, Sequence

import jinja2
import jinja2.exceptions
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["CHATML", "CHATML_TOKENS", "SPECIAL_TOKEN_KEYS", "ChatError", "ChatRenderer", "Rendering", "probe_template",
           "renders_tool_calls",
           "template_from_config", "template_tokens", "has_generation_blocks"]

# The ChatML template transformers used as its default (and Cerebras 2.10 falls back to).
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + "
    "'\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# The named special tokens transformers hands to a template (PreTrainedTokenizerBase.SPECIAL_TOKENS_ATTRIBUTES).
# ChatML's markers: a vocabulary without them gets them as special tokens (as TRL's setup_chat_format does),
# so that a turn ends in one token the model learns to emit.
CHATML_TOKENS = ("<|im_start|>", "<|im_end|>")
SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")

_GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")  # transformers' test for "has generation blocks"


class ChatError(ValueError):
    """Why a conversation (or DPO record) gives no row: `reason` is a short counter name, `detail` says more.

    Reasons: no_messages, not_a_conversation, unknown_role, not_a_string,
    empty_content, no_assistant_turn, template_error, content_not_found,
    special_token_in_content, too_long, and for DPO prompts_differ,
    prompt_not_a_prefix, prompt_not_a_token_prefix.
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclasses.dataclass(frozen=True)
class Rendering:
    text: str
    generation: tuple[tuple[int, int], ...] = ()  # (start, end) characters of each {% generation %} block


def template_from_config(tokenizer_config: Mapping[str, Any]) -> Optional[str]:
    """The `chat_template` of a tokenizer_config.json: a string, or the "default" of a list of named templates.

    None when the config has none. A list without a "default" entry is a
    ValueError (transformers, too, needs to be told which one to use).
    """
    value = tokenizer_config.get("chat_template")
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, Mapping)}
        if isinstance(named.get("default"), str):
            return named["default"]
        raise ValueError(f"chat_template: a list of templates without a 'default' one "
                         f"(names: {sorted(map(str, named))})")
    raise ValueError(f"chat_template: expected a string or a list of named templates, got {type(value).__name__}")


def _token_text(value: Any) -> Optional[str]:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):  # a serialized AddedToken
        return value["content"]
    raise ValueError(f"a special token must be a string or an AddedToken dict, got {value!r}")


def template_tokens(tokenizer_config: Mapping[str, Any],
                    special_tokens_map: Optional[Mapping[str, Any]] = None) -> dict[str, str]:
    """The special-token strings a template sees, as transformers 5 passes them (`tokenizer.special_tokens_map`).

    Values come from tokenizer_config.json; special_tokens_map.json overrides
    them only when the config has no `added_tokens_decoder` (transformers reads
    that file only for such legacy configs). Strings and AddedToken dicts
    (`{"content": ...}`) are accepted; unset tokens are left out, as
    transformers leaves them out. Defaults that a transformers tokenizer class
    supplies on its own (for a key missing from both files) are not known here.
    """
    values = {k: tokenizer_config.get(k) for k in SPECIAL_TOKEN_KEYS}
    if special_tokens_map and "added_tokens_decoder" not in tokenizer_config:
        for k in SPECIAL_TOKEN_KEYS:
            if k in special_tokens_map:
                values[k] = special_tokens_map[k]
    tokens = {k: _token_text(v) for k, v in values.items()}
    return {k: v for k, v in tokens.items() if v is not None}


def has_generation_blocks(template: str) -> bool:
    return _GENERATION_TAG.search(template) is not None


# ----------------------------------------------------------------------------- the environment


class _GenerationTracker(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}`: renders its body and records where it lands (per thread)."""

    tags = {"generation"}

    def __init__(self, environment: jinja2.Environment) -> None:
        super().__init__(environment)
        self.state = threading.local()

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.CallBlock:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context: jinja2.nodes.EvalContext, caller: jinja2.runtime.Macro) -> str:
        rv = caller()
        emitted = getattr(self.state, "emitted", None)
        if emitted is not None:
            start = emitted[0]
            self.state.spans.append((start, start + len(rv)))
        return rv


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format):
    return datetime.now().strftime(format)


class _TemplateDict:
    # `dict(...)` without exposing the dict type itself.
    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(jinja2.utils.Namespace):
    # Namespaces that refuse underscore attributes, as transformers' do.
    def __init__(*args, **kwargs):
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name):
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}.")


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_GenerationTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _TemplateNamespace
    return env


_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def _plain(value: Any) -> Any:
    """A copy in plain JSON types (transformers' `_plain_template_data`, for the types a record can hold)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return f"<{type(value).__name__}>"


def _template_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict]:
    """What transformers hands the template: None-valued keys dropped, plain copies, reasoning aliases."""
    out = []
    for message in messages:
        m = _plain({k: v for k, v in message.items() if v is not None})
        reasoning = next((m[k] for k in _REASONING_FIELDS if m.get(k) is not None), None)
        if reasoning is not None:
            m = {"thinking": reasoning, **m, "reasoning_content": reasoning}
        out.append(m)
    return out


class ChatRenderer:
    """A chat template compiled once; `render` gives transformers' text and its generation spans.

    `tokens` is `template_tokens(...)`. A template that does not compile is a
    ChatError("template_error") here; one that raises while rendering is a
    ChatError("template_error") from `render`.
    """

    def __init__(self, template: str, tokens: Mapping[str, str]) -> None:
        self.template = template
        self.tokens = dict(tokens)
        self.has_generation = has_generation_blocks(template)
        env = _environment()
        self._tracker = next(e for e in env.extensions.values() if isinstance(e, _GenerationTracker))
        try:
            self._compiled = env.from_string(template)
        except jinja2.exceptions.TemplateError as e:  # syntax errors: a configuration problem
            raise ChatError("template_error", f"the chat template does not compile: {e}") from e

    def __repr__(self) -> str:
        return f"ChatRenderer({len(self.template)} chars, generation={self.has_generation})"

    def __reduce__(self):  # compiled again where it is unpickled
        return (ChatRenderer, (self.template, self.tokens))

    def render(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = False,
               tools: Optional[Sequence[Mapping[str, Any]]] = None) -> Rendering:
        state = self._tracker.state
        emitted = [0]
        spans: list[tuple[int, int]] = []
        blocks: list[str] = []
        state.emitted, state.spans = emitted, spans
        try:
            for block in self._compiled.generate(messages=_template_messages(messages),
                                                 tools=_plain(list(tools)) if tools else None, documents=None,
                                                 add_generation_prompt=add_generation_prompt, **self.tokens):
                blocks.append(block)
                emitted[0] += len(block)
        except Exception as e:  # the template is code from the tokenizer's authors: any error is the record's
            raise ChatError("template_error", f"{type(e).__name__}: {e}") from e
        finally:
            state.emitted = state.spans = None
        return Rendering("".join(blocks), tuple(spans))


_PROBE = ({"role": "user", "content": "Probe question 7f3a?"}, {"role": "assistant", "content": "Probe answer 7f3a."})


def probe_template(renderer: ChatRenderer) -> Optional[str]:
    """Why the template cannot be a chat template (None if it can): it must render a user and an assistant
    message and write both contents. A data file or a note given as the template renders to itself, without
    the messages: every record would then be refused, one dead letter at a time, by a job that exits 0.
    """
    try:
        text = renderer.render(list(_PROBE)).text
    except ChatError as e:
        return f"it cannot render a user message and an assistant message: {e.detail or e.reason}"
    missing = [m["role"] for m in _PROBE if m["content"] not in text]
    if missing:
        return (f"rendering a user message and an assistant message does not write the {' and the '.join(missing)}"
                f" message's content (is it a Jinja chat template? it begins {renderer.template[:60]!r})")
    return None


_TOOL = {"type": "function", "function": {"name": "probe_tool_7f3a", "description": "A probe.",
                                          "parameters": {"type": "object", "properties": {}}}}
_TOOL_CALL = ({"role": "user", "content": "Probe question 7f3a?"},
              {"role": "assistant", "content": "", "tool_calls": [
                  {"id": "probe7f3a", "type": "function",
                   "function": {"name": "probe_call_7f3a", "arguments": {"x": 1}}}]},
              {"role": "tool", "content": "probe result 7f3a", "tool_call_id": "probe7f3a", "name": "probe_call_7f3a"},
              {"role": "assistant", "content": "Probe answer 7f3a."})


def renders_tool_calls(renderer: ChatRenderer) -> bool:
    """Whether the template writes a conversation's tools and tool calls (a probe conversation with both)."""
    try:
        text = renderer.render(list(_TOOL_CALL), tools=[_TOOL]).text
    except ChatError:
        return False
    return "probe_tool_7f3a" in text and "probe_call_7f3a" in text
