"""A conversation as token ids and a loss mask: the rendered template, tokenized safely.

**Messages.** `parse_conversation` reads a record's messages (JSON text or a
list of dicts) into `[{"role", "content", ...}]` with roles normalised:
user/human -> user; assistant/gpt/chatgpt/bard/model -> assistant; system;
tool/function/observation/ipython -> tool; LLaMA-Factory's function_call (its
value the call's JSON) -> an assistant message with that tool call. A
message's other keys (`tool_calls`, `tool_call_id`, `name`, reasoning) are
kept and reach the template, as transformers hands them on. Content must be
a string; it may be empty (after stripping) only in a system message, or
empty or null in an assistant message with `tool_calls`. `parse_chat` also
reads the record's tool list (`{"messages": ..., "tools": [...]}`, as the
readers hand a ConversationKey on), which the template receives as `tools`.

**Tool calls.** An assistant message's tool calls are trained like its
content: its turn runs from its content (or, without content, from the end
of the generation prompt before it) to the end of the conversation rendered
up to and including it, which must begin the whole rendering. A template
may write more when the turn ends the conversation (Qwen3: an empty think
block before the call); then the turn as written last, less that one piece,
must begin the rest of the whole rendering, and the turn runs to its end
there (ChatError("tool_call_not_located") otherwise). Tool results (role
tool) are never trained. A template that does not write a record's tool
calls or tools is ChatError("tools_not_rendered"): the record is refused,
never trained without them.

**Ids.** The text is `ChatRenderer.render(messages)` (transformers' text) and
its ids are that text tokenized with `add_special_tokens=False`: no BOS unless
the template writes `bos_token`. Special-token text (added tokens flagged
special) is a control token where the template writes it and plain text where
a message's content holds it, so a user writing `<|im_end|>`, `</s>` or
`<|eot_id|>` cannot end a turn. How: the whole text is tokenized normally
(exactly transformers' ids); if a special token's text lies inside a message's
content characters, the piece between the surrounding template special tokens
is encoded again with special tokens off (`encode_special_tokens`) and spliced
in. Added tokens that are not special (Qwen's `<tool_call>`) stay what the
tokenizer makes of them everywhere, as in transformers.

Where each content sits in the text: the messages are rendered a second time
with a unique sentinel string in place of each content; if putting the real
contents back in place of the sentinels gives the real text, the positions
are exact. Otherwise (a template that transforms content, like Llama 3's
`| trim`) each content or its stripped text, whichever comes first, is
searched in rendering order, after the template text that precedes it. A
content not found (also one the template leaves out, like Mistral's system
message when the conversation ends with the assistant's) is
ChatError("content_not_found").

**Loss** (`trained[t]`: token t is a trained target). With `{% generation %}`
blocks in the template it is transformers' `return_assistant_tokens_mask`
(5.24 on): a token is trained when its characters overlap a block's. (Before
5.24 transformers took `char_to_token(start)` to `char_to_token(end - 1)`,
which trained everything to the end of the text when a block's last token was
the text's first, and dropped every later block after one whose start had no
token; we never copied that.) Otherwise it is this rule:

    An assistant turn's characters are its content's characters, extended
    to the left over the whitespace right before the content, and to the
    right over the whitespace right after it and then, if the next text is a
    special token (`<|im_end|>`, `<|eot_id|>`, `</s>`, ...), over that token
    and the whitespace right after it; never into another message's
    content. A token is trained when its characters overlap an assistant
    turn's characters.

So system, user and tool turns and the template's headers (but for their
trailing whitespace) are never trained, unless a token straddles the edge of
an assistant turn; an assistant turn trains its content and its end-of-turn
token. ChatML:
`<|im_start|>assistant` + [`\\n` content `<|im_end|>\\n`]; Llama 3:
`<|start_header_id|>assistant<|end_header_id|>` + [`\\n\\n` content
`<|eot_id|>`]; Mistral: `[/INST]` + [content `</s>`]. On TRL's Qwen2.5
training template these are exactly the characters of its generation blocks
(the tests check that the two masks agree). `train_on_all_assistant_turns=False`
trains only the last assistant turn (the last generation block).
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import re
import threading
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import tokenizers

from transforms.core.chat.template import ChatError, ChatRenderer, Rendering

__all__ = ["CONTENT", "LOSS_SPANS", "ROLES", "TURN", "ChatEncoder", "Conversation", "EncodedChat", "TokenizedChat",
           "Turn", "check_messages",
           "parse_chat", "parse_conversation", "normalize_role", "render_conversation"]

# What an assistant turn trains (the rule above): TURN, ours; CONTENT, Cerebras 2.10's (MODES.md §B2.2): the
# content and the end-of-turn special token right after it, not the whitespace around them (ChatML:
# `<|im_start|>assistant\n` + [content `<|im_end|>`] + `\n`), and never the template's generation blocks.
TURN, CONTENT = "turn", "content"
LOSS_SPANS = (TURN, CONTENT)

# Role names found in chat datasets -> the four roles templates know.
ROLES = {
    "user": "user", "human": "user",
    "assistant": "assistant", "gpt": "assistant", "chatgpt": "assistant", "bard": "assistant", "model": "assistant",
    "system": "system",
    "tool": "tool", "function": "tool", "observation": "tool", "ipython": "tool",
}
_CANONICAL = frozenset(ROLES.values())

# Stands for message i's content while locating contents (plane-15 private use: not in real text).
_SENTINEL = "\U000fff00{}\U000fff01"
_SENTINEL_RE = re.compile("\U000fff00(\\d+)\U000fff01")


def normalize_role(role: Any) -> str:
    name = role.strip().lower() if isinstance(role, str) else None
    if name not in ROLES:
        raise ChatError("unknown_role", f"role {role!r}")
    return ROLES[name]


def check_messages(messages: Sequence[Mapping[str, Any]]) -> None:
    """Raise a ChatError unless `messages` is a non-empty list of {role, content} with known roles and text
    (an assistant message with tool calls may have empty or null content)."""
    if not messages:
        raise ChatError("no_messages", "the conversation has no messages")
    for i, m in enumerate(messages):
        role = m.get("role")
        if role not in _CANONICAL:
            raise ChatError("unknown_role", f"message {i}: role {role!r}")
        content = m.get("content")
        calls = m.get("tool_calls")
        if calls is not None:
            _check_tool_calls(calls, i, role)
        if content is None and calls:
            continue
        if not isinstance(content, str):
            raise ChatError("not_a_string", f"message {i}: content is {type(content).__name__}")
        if role != "system" and not calls and not content.strip():
            raise ChatError("empty_content", f"message {i} ({role}) is empty")


def _check_tool_calls(calls: Any, i: int, role: str) -> None:
    if role != "assistant":
        raise ChatError("not_a_tool_call", f"message {i}: a {role} message with tool_calls")
    if not isinstance(calls, list):
        raise ChatError("not_a_tool_call", f"message {i}: tool_calls is {type(calls).__name__}, not a list")
    for call in calls:
        function = call.get("function", call) if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str) or not function["name"]:
            raise ChatError("not_a_tool_call", f"message {i}: a tool call without a function name")


def tool_call_names(message: Mapping[str, Any]) -> list[str]:
    """The function names of a message's tool calls (OpenAI's {function: {name}} or a bare {name})."""
    return [c.get("function", c)["name"] for c in message.get("tool_calls") or ()]


@dataclasses.dataclass(frozen=True)
class Conversation:
    messages: list  # [{"role", "content", ...}]
    tools: Optional[list] = None  # the record's tool list, for the template's `tools`


def parse_chat(value: Any, *, role_key: str = "role", content_key: str = "content") -> Conversation:
    """A record's conversation: its messages (see parse_conversation), and its tools when the value holds them
    (`{"messages": [...], "tools": [...]}`, a ConversationKey's value)."""
    value = _decoded(value)
    tools = None
    if isinstance(value, Mapping) and "messages" in value:
        tools = value.get("tools")
        if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, Mapping) for t in tools)):
            raise ChatError("not_a_tool_list", f"tools is {type(tools).__name__}, not a list of objects")
        value = value["messages"]
    return Conversation(parse_conversation(value, role_key=role_key, content_key=content_key), tools or None)


def render_conversation(renderer: ChatRenderer, conversation: Conversation, *,
                        add_generation_prompt: bool = False) -> Rendering:
    """The template's rendering of a conversation, refused (tools_not_rendered) when the template leaves out a
    tool call or a tool the record has: trained without them, the row would teach the model something else."""
    rendering = renderer.render(conversation.messages, tools=conversation.tools,
                                add_generation_prompt=add_generation_prompt)
    text = rendering.text
    for message in conversation.messages:
        for name in tool_call_names(message):
            if name not in text:
                raise ChatError("tools_not_rendered", f"the chat template does not write the tool call {name!r}")
    for tool in conversation.tools or ():
        name = tool.get("function", tool).get("name") if isinstance(tool.get("function", tool), Mapping) else None
        if isinstance(name, str) and name not in text:
            raise ChatError("tools_not_rendered", f"the chat template does not write the tool {name!r}")
    return rendering


def parse_conversation(value: Any, *, role_key: str = "role", content_key: str = "content") -> list[dict]:
    """A record's messages -> `[{"role": user|assistant|system|tool, "content": str, ...}]`, or a ChatError.

    `value` is JSON text or an already decoded list. ShareGPT records are
    `role_key="from", content_key="value"`. For example
    `'[{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"}]'`
    gives `[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]`.
    """
    value = _decoded(value)
    if not isinstance(value, (list, tuple)) or not all(isinstance(m, Mapping) for m in value):
        raise ChatError("not_a_conversation", f"expected a list of objects, got {type(value).__name__}")
    messages = [_message(m, role_key, content_key, i) for i, m in enumerate(value)]
    check_messages(messages)
    return messages


def _decoded(value: Any) -> Any:
    """JSON text decoded; a JSON string holding JSON text once more (a .parquet column of conversations kept as
    JSON strings reaches us as the JSON text of that string)."""
    for _ in range(2):
        if not isinstance(value, (str, bytes, bytearray)):
            break
        try:
            value = json.loads(value)
        except ValueError as e:
            raise ChatError("not_a_conversation", f"not JSON: {e}") from e
    return value


def _message(m: Mapping, role_key: str, content_key: str, i: int) -> dict:
    if role_key == "role" and content_key == "content" and "role" not in m and "from" in m:
        # ShareGPT's keys (LLaMA-Factory's and most ShareGPT-style sets) where the default ones are not set:
        # read, not refused as a message of no role.
        role_key, content_key = "from", "value"
    role, content = m.get(role_key), m.get(content_key)
    # The message's other keys reach the template, as transformers hands them on.
    rest = {k: v for k, v in m.items() if k not in (role_key, content_key, "role", "content")}
    if isinstance(role, str) and role.strip().lower() == "function_call":
        return {"role": "assistant", "content": None, **rest, "tool_calls": _function_call(content, i)}
    return {"role": normalize_role(role), "content": content, **rest}


def _function_call(value: Any, i: int) -> list[dict]:
    """LLaMA-Factory's function_call turn: its value the call's JSON ({name, arguments}, or a list of them)."""
    try:
        calls = json.loads(value) if isinstance(value, str) else value
    except ValueError as e:
        raise ChatError("not_a_tool_call", f"message {i}: a function_call that is not JSON: {e}") from e
    calls = calls if isinstance(calls, list) else [calls]
    if not all(isinstance(c, Mapping) for c in calls):
        raise ChatError("not_a_tool_call", f"message {i}: a function_call that is not an object")
    return [{"type": "function", "function": dict(c)} for c in calls]


@dataclasses.dataclass(frozen=True)
class Turn:
    """One message in the tokens: token ranges are [start, end)."""

    role: str
    chars: tuple[int, int]  # the content's characters in the rendered text
    content: tuple[int, int]  # the tokens lying entirely within those characters
    turn: tuple[int, int]  # the whole turn: from the end of the previous turn to the end of this one's end-of-turn


@dataclasses.dataclass(frozen=True, eq=False)
class TokenizedChat:
    """A rendered conversation and its (injection-safe) tokens, before any loss."""

    text: str
    ids: np.ndarray  # int32 [T]
    offsets: np.ndarray  # int64 [T, 2]: each token's characters in `text`
    spans: tuple[tuple[int, int], ...]  # each message's content characters, in message order
    generation: tuple[tuple[int, int], ...]  # the template's {% generation %} blocks (characters)
    # Per message: (start, end) characters of an assistant turn's output beyond its content (tool calls, reasoning
    # the template writes from the message's fields), located by rendering the conversation up to it; else None.
    outputs: tuple = ()


@dataclasses.dataclass(frozen=True, eq=False)
class EncodedChat:
    """Token ids, the trained targets, and where each message is.

    `offsets` and `Turn.chars` index `text`, the full rendering, also after
    `rows.truncate` has removed tokens.
    """

    text: str
    ids: np.ndarray  # int32 [T]
    trained: np.ndarray  # bool [T]
    offsets: np.ndarray  # int64 [T, 2]
    turns: tuple[Turn, ...]  # in message order
    # bool [T]: which tokens may be attended (a read hook's masked regions are not); None: all of them
    attend: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return len(self.ids)


class ChatEncoder:
    """Renders, tokenizes and masks conversations; build once (per worker) and reuse.

    `backend` is the `tokenizers.Tokenizer` (our Tokenizer's `.backend`);
    `generation_markers=False` ignores the template's generation blocks and
    applies the documented rule instead.
    """

    def __init__(self, renderer: ChatRenderer, backend: tokenizers.Tokenizer, *,
                 generation_markers: bool = True, loss_span: str = TURN) -> None:
        if loss_span not in LOSS_SPANS:
            raise ValueError(f"loss_span: expected one of {', '.join(LOSS_SPANS)}, got {loss_span!r}")
        self.renderer = renderer
        self.backend = backend
        self.generation_markers = generation_markers
        self.loss_span = loss_span
        # Cerebras 2.10 never reads generation blocks: its span is the content's, whatever the template marks.
        self.uses_markers = generation_markers and renderer.has_generation and loss_span == TURN
        special = {i: t.content for i, t in backend.get_added_tokens_decoder().items() if t.special}
        self._special = special
        self._special_ids = np.array(sorted(special), dtype=np.int64)
        texts = sorted(set(special.values()), key=len, reverse=True)
        self._special_re = re.compile("|".join(map(re.escape, texts))) if texts else None
        self._plain_backend: Optional[tokenizers.Tokenizer] = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ChatEncoder({self.renderer!r}, markers={self.uses_markers}, {len(self._special)} special tokens)"

    def __reduce__(self):
        return (_encoder, (self.renderer, self.backend, self.generation_markers, self.loss_span))

    # ------------------------------------------------------------------ public

    def tokenize(self, messages, *, add_generation_prompt: bool = False, tools=None) -> TokenizedChat:
        """`messages`: a list of messages (with `tools`, the record's tool list) or a Conversation."""
        conversation = _conversation(messages, tools)
        rendered = self._render(conversation, add_generation_prompt)
        return self._tokenized(*rendered, self.backend.encode(rendered[0].text, add_special_tokens=False))

    def encode(self, messages, *, train_on_all_assistant_turns: bool = True, tools=None) -> EncodedChat:
        conversation = _conversation(messages, tools)
        return self._encoded(conversation.messages, self.tokenize(conversation), train_on_all_assistant_turns)

    def encode_many(self, conversations: Sequence, *, train_on_all_assistant_turns: bool = True) -> list:
        """`encode` of each conversation (a Conversation or a list of messages), or the ChatError it raises, in
        order; the texts are tokenized in one `encode_batch` call (`tokenize_many`)."""
        conversations = [_conversation(c, None) for c in conversations]
        out: list = []
        for conversation, tok in zip(conversations, self.tokenize_many(conversations)):
            if isinstance(tok, ChatError):
                out.append(tok)
                continue
            try:
                out.append(self._encoded(conversation.messages, tok, train_on_all_assistant_turns))
            except ChatError as e:
                out.append(e)
        return out

    def tokenize_many(self, conversations: Sequence) -> list:
        """`tokenize` of each conversation (a Conversation or a list of messages), or the ChatError it raises, in
        order; the texts are tokenized in one `encode_batch` call, which runs on every core the process may use
        (the tokenizer's own threads), where a `tokenize` per conversation would use one."""
        rendered: list = []
        for conversation in conversations:
            try:
                rendered.append(self._render(_conversation(conversation, None), False))
            except ChatError as e:
                rendered.append(e)
        texts = [r[0].text for r in rendered if not isinstance(r, ChatError)]
        encodings = iter(self.backend.encode_batch(texts, add_special_tokens=False))
        out: list = []
        for r in rendered:
            if isinstance(r, ChatError):
                out.append(r)
                continue
            try:
                out.append(self._tokenized(*r, next(encodings)))
            except ChatError as e:
                out.append(e)
        return out

    def _render(self, conversation: "Conversation", add_generation_prompt: bool) -> tuple[Rendering, tuple, tuple]:
        messages = conversation.messages
        check_messages(messages)
        rendering = render_conversation(self.renderer, conversation, add_generation_prompt=add_generation_prompt)
        outputs = self._outputs(conversation, rendering.text)
        spans = self._content_spans(messages, rendering, add_generation_prompt, conversation.tools, outputs)
        return rendering, spans, outputs

    def _tokenized(self, rendering: Rendering, spans: tuple, outputs: tuple, encoding) -> TokenizedChat:
        ids, offsets = self._ids(rendering.text, spans, encoding)
        return TokenizedChat(rendering.text, ids, offsets, spans, rendering.generation, outputs)

    def _outputs(self, conversation: "Conversation", text: str) -> tuple:
        """Per message: where an assistant turn with tool calls or reasoning writes its output, else None.

        From the end of the conversation before it rendered with the generation prompt to the end of the
        conversation rendered up to and including it, when both begin the whole text. Tool calls must be located
        (ChatError otherwise), if need be by `_turn_end_in` (a template that writes more when the turn is the
        last); reasoning need not: a template that writes it only for the last turn (Qwen3) leaves earlier
        turns' reasoning out of the text, and there is nothing of it to train.
        """
        outputs: list = [None] * len(conversation.messages)
        messages, tools = conversation.messages, conversation.tools
        for i, m in enumerate(messages):
            calls = bool(m.get("tool_calls"))
            if m["role"] != "assistant" or not (calls or any(m.get(k) for k in _REASONING_KEYS)):
                continue
            upto = self.renderer.render(messages[:i + 1], tools=tools).text
            before = self.renderer.render(messages[:i], add_generation_prompt=True, tools=tools).text if i \
                else self._opening(upto)
            if text.startswith(upto) and upto.startswith(before):
                outputs[i] = (len(before), len(upto))
            elif calls:
                end = _turn_end_in(upto[len(before):], text, len(before)) \
                    if upto.startswith(before) and text.startswith(before) else None
                names = tool_call_names(m)
                if end is None or not all(name in text[len(before):end] for name in names):
                    raise ChatError("tool_call_not_located", f"message {i} (assistant): the conversation rendered "
                                                             "up to its tool calls does not begin the whole "
                                                             "rendering, not even without one piece the template "
                                                             "writes only when the turn is the last")
                outputs[i] = (len(before), end)
        return tuple(outputs)

    def _opening(self, upto: str) -> str:
        """What the template writes before the output of an assistant turn that opens the conversation (`upto`: the
        conversation rendered up to it): `upto` up to the end of its first generation prompt, after the default system
        prompt a template such as Qwen's writes (a conversation of no message may not render at all); "" without
        one."""
        probe = [{"role": "user", "content": "x"}]
        try:
            plain, prompted = (self.renderer.render(probe, add_generation_prompt=g).text for g in (False, True))
        except ChatError:
            return ""
        prompt = prompted[len(plain):] if prompted.startswith(plain) else ""
        at = upto.find(prompt) if prompt else -1
        return upto[:at + len(prompt)] if at >= 0 else ""

    def _encoded(self, messages, tok: TokenizedChat, train_on_all_assistant_turns: bool) -> EncodedChat:
        outputs = tok.outputs or (None,) * len(messages)
        text, offsets = tok.text, tok.offsets
        if self.uses_markers:
            blocks = tok.generation if train_on_all_assistant_turns else tok.generation[-1:]
            trained = _overlap_mask(blocks, offsets)
        else:
            assistants = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
            if not train_on_all_assistant_turns:
                assistants = assistants[-1:]
            limits = _neighbours(tok.spans, len(text))
            trained = _overlap_mask([self.assistant_chars(text, tok.spans[i], limits[i], outputs[i])
                                     for i in assistants], offsets)
        if not trained.any():
            raise ChatError("no_assistant_turn", "no assistant token to train")
        turns = self.turns(messages, tok)
        return EncodedChat(text, tok.ids, trained, offsets, turns)

    def assistant_chars(self, text: str, span: tuple[int, int], limits: tuple[int, int],
                        output: Optional[tuple[int, int]] = None) -> tuple[int, int]:
        """The characters the rule trains for an assistant content at `span`, within `limits` (the neighbours);
        `output`: the turn's whole output when it has tool calls or reasoning (trained like its content)."""
        a, b = span
        if output is not None:
            a = min(a, output[0])
        content = self.loss_span == CONTENT
        while not content and a > limits[0] and text[a - 1].isspace():
            a -= 1
        stop = self._turn_end(text, b, limits[1], trailing=not content)
        return a, stop if output is None else max(stop, output[1])

    # ------------------------------------------------------------------ where the contents are

    def _content_spans(self, messages, rendering: Rendering, add_generation_prompt: bool,
                       tools=None, outputs: tuple = ()) -> tuple[tuple[int, int], ...]:
        """`outputs`: `_outputs` of the same conversation, which every assistant message with tool calls has."""
        text = rendering.text
        n = len(messages)
        # A tool call's message without text has no content to find: its (empty) place is where its output
        # begins, the end of the generation prompt before it.
        bare = {i for i, m in enumerate(messages) if m.get("tool_calls") and not (m.get("content") or "").strip()}
        marked = [m if i in bare else {**m, "content": _SENTINEL.format(i)} for i, m in enumerate(messages)]
        try:
            pieces = _SENTINEL_RE.split(self.renderer.render(marked, add_generation_prompt=add_generation_prompt,
                                                             tools=tools).text)
        except ChatError:  # the template objects to the sentinels: search instead
            pieces = None
        order: list[int] = []
        if pieces is not None:
            order = [int(x) for x in pieces[1::2]]
        if pieces is not None and len(set(order)) == len(order) and all(0 <= i < n for i in order):
            spans: list[Optional[tuple[int, int]]] = [None] * n
            out, pos = [pieces[0]], len(pieces[0])
            for i, after in zip(order, pieces[2::2]):
                content = messages[i]["content"]
                spans[i] = (pos, pos + len(content))
                out += [content, after]
                pos += len(content) + len(after)
            if "".join(out) == text:
                missing = [i for i in range(n) if spans[i] is None and i not in bare]
                if missing:
                    raise ChatError(*_not_rendered(messages, missing[0]))
                return _with_bare(spans, bare, outputs)
            # The sentinels were written where the contents go, but the contents do not fill them: the template
            # changes what it writes of a content (a trim, Llama 3's; DeepSeek-R1's cut at </think>): search.
            return _with_bare(self._search_spans(messages, text, order, pieces[0::2], bare, rewritten=True), bare,
                              outputs)
        return _with_bare(self._search_spans(messages, text, [i for i in range(n) if i not in bare], None, bare),
                          bare, outputs)

    @staticmethod
    def _search_spans(messages, text: str, order: list[int], scaffold: Optional[list[str]],
                      bare: frozenset = frozenset(), rewritten: bool = False) -> list:
        spans: list[Optional[tuple[int, int]]] = [None] * len(messages)
        cursor = 0
        for k, i in enumerate(order):
            if scaffold is not None and scaffold[k]:
                j = text.find(scaffold[k], cursor)
                if j >= 0:
                    cursor = j + len(scaffold[k])
            content = messages[i]["content"]
            found = []
            for needle in (content, content.strip()):
                j = text.find(needle, cursor)
                if j >= 0:
                    found.append((j, -len(needle)))
            if found:  # the first place, the longer text there
                j, minus_size = min(found)
                spans[i] = (j, j - minus_size)
                cursor = j - minus_size
        for i, span in enumerate(spans):
            if span is None and i not in bare:
                if rewritten and i in order:
                    raise ChatError("content_rewritten", f"the template writes message {i} ({messages[i]['role']}) "
                                                         "otherwise than its content, and not as its stripped text")
                raise ChatError(*_not_rendered(messages, i))
        return spans

    # ------------------------------------------------------------------ ids

    def _ids(self, text: str, spans, enc) -> tuple[np.ndarray, np.ndarray]:
        """`enc`: the text encoded normally (`backend.encode(text, add_special_tokens=False)`)."""
        ids = np.asarray(enc.ids, dtype=np.int32)
        offsets = np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2)
        specials = np.flatnonzero(np.isin(ids, self._special_ids))
        if not len(specials):
            return ids, offsets
        chars = np.empty((len(specials), 2), dtype=np.int64)
        for n, k in enumerate(specials.tolist()):
            s, e = int(offsets[k, 0]), int(offsets[k, 1])
            literal = self._special[int(ids[k])]
            j = text.find(literal, s, e)
            if j >= 0:  # lstrip/rstrip tokens also cover the whitespace they absorb: use the token's own text
                s, e = j, j + len(literal)
            chars[n] = s, e
        contents = np.array([(a, b) for a, b in spans if a < b], dtype=np.int64).reshape(-1, 2)
        in_content = ((chars[:, :1] < contents[:, 1]) & (chars[:, 1:] > contents[:, 0])).any(axis=1)
        injected, scaffold = specials[in_content].tolist(), specials[~in_content].tolist()
        if not injected:
            return ids, offsets

        def gap(k: int) -> tuple[int, int]:  # the template's special tokens around token k (-1, T: none)
            p = bisect.bisect_left(scaffold, k)
            return scaffold[p - 1] if p else -1, scaffold[p] if p < len(scaffold) else len(ids)

        id_parts, off_parts, last = [], [], 0
        for a, b in sorted({gap(k) for k in injected}):
            start = int(offsets[a, 1]) if a >= 0 else 0
            stop = int(offsets[b, 0]) if b < len(ids) else len(text)
            piece_ids, piece_offsets = self._plain_piece(text[start:stop], ids[a + 1:b])
            id_parts += [ids[last:a + 1], piece_ids]
            off_parts += [offsets[last:a + 1], piece_offsets + start]
            last = b
        id_parts.append(ids[last:])
        off_parts.append(offsets[last:])
        return np.concatenate(id_parts).astype(np.int32), np.concatenate(off_parts).astype(np.int64)

    def _plain_piece(self, piece: str, expected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`piece` encoded with special tokens as text, checked to be encoded in place as the whole text encodes it.

        Encoding a piece alone gives the ids it has inside the whole text for
        the byte-level tokenizers; a SentencePiece-style tokenizer that adds a
        prefix space at the start of a string is encoded after a newline,
        which is then removed (transformers' trick for the same problem).
        """
        plain = self._plain()
        for prefix in ("", "\n"):
            head = self.backend.encode(prefix, add_special_tokens=False).ids if prefix else []
            skip = len(head)
            normal = self.backend.encode(prefix + piece, add_special_tokens=False).ids
            if normal[:skip] != head or normal[skip:] != expected.tolist():
                continue
            enc = plain.encode(prefix + piece, add_special_tokens=False)
            if enc.ids[:skip] != head:
                continue
            offsets = np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2)[skip:] - len(prefix)
            return np.asarray(enc.ids[skip:], dtype=np.int32), np.maximum(offsets, 0)
        raise ChatError("special_token_in_content",
                        "a content holds special-token text and this tokenizer cannot encode it apart")

    def _plain(self) -> tokenizers.Tokenizer:
        with self._lock:
            if self._plain_backend is None:
                plain = tokenizers.Tokenizer.from_str(self.backend.to_str())
                plain.encode_special_tokens = True
                self._plain_backend = plain
            return self._plain_backend

    # ------------------------------------------------------------------ turns

    def _turn_end(self, text: str, b: int, n: int, trailing: bool = True) -> int:
        """After a content ending at b: the whitespace, then a special token and (`trailing`) the whitespace
        after it (up to n). Without a special token there, the content's end (`trailing`: and its whitespace)."""
        end = b
        while b < n and text[b].isspace():
            b += 1
        m = self._special_re.match(text, b, n) if self._special_re is not None else None
        if m:
            b = m.end()
            while trailing and b < n and text[b].isspace():
                b += 1
            return b
        return b if trailing else end

    def turns(self, messages, tok: TokenizedChat) -> tuple[Turn, ...]:
        """Where each message is in the tokens (its content, and its whole turn)."""
        starts, ends = tok.offsets[:, 0], tok.offsets[:, 1]
        total, size = len(tok.ids), len(tok.text)
        limits = _neighbours(tok.spans, size)
        outputs = tok.outputs or (None,) * len(messages)
        by_position = sorted(range(len(messages)), key=lambda i: tok.spans[i])
        bounds, edge = {}, 0
        for k, i in enumerate(by_position):
            stop = self._turn_end(tok.text, tok.spans[i][1], limits[i][1]) if k + 1 < len(by_position) else size
            if outputs[i] is not None:  # a turn with tool calls or reasoning runs to their end
                stop = max(stop, outputs[i][1])
            bounds[i] = (edge, max(edge, stop))
            edge = bounds[i][1]
        turns = []
        for i, m in enumerate(messages):
            a, b = tok.spans[i]
            lo = int(np.searchsorted(starts, a, "left"))
            hi = max(lo, int(np.searchsorted(ends, b, "right")))
            ta, tb = bounds[i]
            t0 = int(np.searchsorted(starts, ta, "left"))
            t1 = total if tb >= size else int(np.searchsorted(starts, tb, "left"))
            turns.append(Turn(m["role"], (a, b), (lo, hi), (t0, max(t0, t1))))
        return tuple(turns)


def _turn_end_in(last: str, text: str, at: int) -> Optional[int]:
    """Where in `text` a turn that starts at `at` ends, given `last`, the turn as the template writes it when it
    ends the conversation, which holds one more piece than the same turn followed by more turns: `last` less
    that piece (and not less its end) must begin `text[at:]`. The shortest such piece; None when there is none.

    Qwen3 writes an empty think block before a tool call only when the call ends the conversation:

    >>> _turn_end_in("<think></think><call>f</call>E", "<call>f</call>E<user>", 0)  # the turn: text[:15]
    15
    """
    same = 0  # the common start: the piece begins after it
    while same < len(last) and at + same < len(text) and last[same] == text[at + same]:
        same += 1
    if same == len(last):
        return at + same  # nothing more (the caller has seen it begin the text already)
    for rest in range(same + 1, len(last)):  # the piece is last[same:rest], what follows it must follow `same`
        if last[rest] == text[at + same:at + same + 1] and text.startswith(last[rest:], at + same):
            return at + same + len(last) - rest
    return None


# A message's reasoning, as transformers' templates read it (template.py hands every alias on).
_REASONING_KEYS = ("reasoning_content", "thinking", "reasoning")


def _not_rendered(messages, i: int) -> tuple[str, str]:
    """The reason and detail for a message whose content the template does not write."""
    role = messages[i]["role"]
    if role == "system":
        # Mistral's templates write the system prompt only into the last user turn, and only when that turn ends
        # the conversation: a conversation that ends with the assistant's turn has none.
        return "system_not_rendered", f"the template does not write message {i} (the system prompt)"
    return "content_not_found", f"the template does not write message {i} ({role})"


def _with_bare(spans: list, bare: set, outputs: tuple) -> tuple[tuple[int, int], ...]:
    """`spans` with the empty place of each bare tool-call message: where its output begins."""
    spans = list(spans)
    for i in bare:
        spans[i] = (outputs[i][0], outputs[i][0])
    return tuple(spans)


def _conversation(messages, tools) -> "Conversation":
    return messages if isinstance(messages, Conversation) else Conversation(list(messages), tools)


def _neighbours(spans, size: int) -> list[tuple[int, int]]:
    """For each content: the end of the content before it and the start of the one after it (in the text)."""
    order = sorted(range(len(spans)), key=lambda i: spans[i])
    limits = [(0, size)] * len(spans)
    for k, i in enumerate(order):
        limits[i] = (spans[order[k - 1]][1] if k else 0, spans[order[k + 1]][0] if k + 1 < len(order) else size)
    return limits


def _encoder(renderer: ChatRenderer, backend: tokenizers.Tokenizer, generation_markers: bool,
             loss_span: str = "turn") -> ChatEncoder:
    return ChatEncoder(renderer, backend, generation_markers=generation_markers, loss_span=loss_span)


def _overlap_mask(char_spans, offsets: np.ndarray) -> np.ndarray:
    """Tokens whose characters overlap one of `char_spans`: an empty span (a, a) marks only a token with a
    character on each side of a, as transformers' mask does."""
    mask = np.zeros(len(offsets), dtype=bool)
    for a, b in char_spans:
        mask |= (offsets[:, 0] < b) & (offsets[:, 1] > a)
    return mask
