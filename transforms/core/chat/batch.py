"""Chat, Chat_VSL and DPO over a packing group: records -> rows, every record accounted for.

A record reaches these functions only if the reader's check (`RecordCheck`,
run in file order with the readers' own bad records) found it well formed:
a conversation of known roles and text contents with an assistant turn, or a
DPO pair, that the template renders. What can still keep a record out of the
rows is a property of its tokens, counted as a drop by reason: too long, too
short, a content the template does not write (`content_not_found`).

Per conversation (Chat, Chat_VSL): the contents are normalized (ftfy,
wikitext) like any text, the conversation is encoded (`ChatEncoder`), and
its tokens end with its last trained one: what follows it (later user turns,
closing template text) teaches nothing, and a row's real part then ends with
a trained position, as in every other mode (with `loss_span` "content",
Cerebras 2.10's, the closing text stays, untrained, as 2.10 writes it).
Records that are a read hook's regions are encoded by chat.hooked instead. Then it is cut or dropped to fit
max_seq_length + 1 tokens (`truncate`) and dropped below `min_sequence_len`.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Optional

import numpy as np

from transforms.core.chat.dpo import EncodedDpo, dpo_example, dpo_row, encode_dpo, fit_pair
from transforms.core.chat.encode import ChatEncoder, Conversation, EncodedChat, parse_chat, render_conversation
from transforms.core.chat.rows import truncate
from transforms.core.chat.template import ChatError, ChatRenderer
from transforms.core.modes import PREFERENCE, mode
from transforms.core.reasons import SHORTER_THAN_MIN_SEQUENCE_LEN
from transforms.core.normalize import NormalizeConfig, normalize_text
from transforms.core.stats import ROLE_TOKENS, ROLE_TRAINED

__all__ = ["ChatConfig", "RecordCheck", "DpoRows", "chat_encoder", "encode_conversations", "conversation_rows", "conversation_batch",
           "encode_pairs", "dpo_rows", "dpo_batch", "DROP_TOO_SHORT"]

DROP_TOO_SHORT = SHORTER_THAN_MIN_SEQUENCE_LEN  # transforms.core.reasons


@dataclasses.dataclass(frozen=True)
class ChatConfig:
    mode: str  # a templated mode's name (transforms.core.modes)
    max_seq_length: int
    pad_id: int
    template: str
    template_tokens: tuple  # (name, text) pairs the template sees: bos_token, eos_token, ...
    role_key: str = "role"
    content_key: str = "content"
    normalize: NormalizeConfig = NormalizeConfig()
    min_sequence_len: int = 10
    inverted_mask: bool = False
    train_on_all_assistant_turns: bool = True
    truncate: Optional[str] = None  # keep_start | keep_end; None: a conversation too long is dropped
    max_prompt_length: int = 512  # DPO
    pack_sequences: bool = True  # Chat_VSL
    loss_span: str = "turn"  # what an assistant turn trains (encode.LOSS_SPANS): ours, or "content" (2.10's)
    # Records are a read hook's regions (chat.hooked), not messages: then these end text regions' ids.
    regions: bool = False
    bos_id: Optional[int] = None
    eos_id: Optional[int] = None
    key_padding_mask: bool = False  # Chat rows get a fourth feature: the positions not attended (chat.hooked)

    @property
    def dpo(self) -> bool:
        """Records are preference pairs (two sequences a row), not conversations."""
        return mode(self.mode).record == PREFERENCE

    @property
    def vsl(self) -> bool:
        """Conversations are packed side by side, not one to a padded row."""
        return mode(self.mode).vsl


class RecordCheck:
    """The reader's check of a Chat or DPO record: None, or (reason, detail) for a bad one.

    Parses the record as a conversation (or a DPO pair) and renders it with
    the template, so that a record the template refuses (`raise_exception`)
    is a dead letter in file order, not a loss found later. Picklable: the
    template is compiled on first use in each process.
    """

    def __init__(self, config: ChatConfig):
        self._config = config
        self._renderer: Optional[ChatRenderer] = None

    def __getstate__(self):
        return {"_config": self._config, "_renderer": None}

    def __call__(self, values: tuple) -> Optional[tuple[str, str]]:
        cfg = self._config
        if self._renderer is None:
            self._renderer = ChatRenderer(cfg.template, dict(cfg.template_tokens))
        try:
            if cfg.dpo:
                example = _dpo_example(values, cfg)
                for response in (example.chosen, example.rejected):
                    render_conversation(self._renderer, Conversation(
                        list(example.prompt) + [{"role": "assistant", "content": response}], example.tools))
                return None
            conversation = parse_chat(values[0], role_key=cfg.role_key, content_key=cfg.content_key)
            if not any(m["role"] == "assistant" for m in conversation.messages):
                raise ChatError("no_assistant_turn", "the conversation has no assistant message to train on")
            render_conversation(self._renderer, conversation)
        except ChatError as e:
            return e.reason, e.detail
        return None


def chat_encoder(cfg: ChatConfig, backend) -> ChatEncoder:
    """The encoder `cfg` asks for (its template, its tokens and loss span) over a tokenizer's backend."""
    return ChatEncoder(ChatRenderer(cfg.template, dict(cfg.template_tokens)), backend, loss_span=cfg.loss_span)


def _dpo_example(values: tuple, cfg: ChatConfig):
    """A DPO record's (chosen, rejected[, prompt]) JSON texts -> DpoExample."""
    chosen, rejected = values[0], values[1]
    prompt = values[2] if len(values) > 2 else None
    return dpo_example(prompt=prompt, chosen=chosen, rejected=rejected, role_key=cfg.role_key,
                       content_key=cfg.content_key, json_text=True)


def _normalized(messages: list[dict], cfg: NormalizeConfig, counts: Counter) -> list[dict]:
    """Messages with normalized contents; their characters and UTF-8 bytes counted before and after."""
    out = []
    for m in messages:
        text = m["content"]
        if text is None:  # a tool call's message without text
            out.append(m)
            continue
        counts["raw_chars"] += len(text)
        counts["raw_bytes"] += len(text.encode("utf-8"))
        if not cfg.is_identity:
            text = normalize_text(text, cfg)
        counts["normalized_chars"] += len(text)
        counts["normalized_bytes"] += len(text.encode("utf-8"))
        out.append({**m, "content": text})
    return out


def _to_last_trained(encoded: EncodedChat) -> EncodedChat:
    """The conversation's tokens up to its last trained one (see the module docstring)."""
    end = int(np.flatnonzero(encoded.trained)[-1]) + 1
    if end == len(encoded.ids):
        return encoded
    turns = tuple(dataclasses.replace(t, content=(min(t.content[0], end), min(t.content[1], end)),
                                      turn=(min(t.turn[0], end), min(t.turn[1], end))) for t in encoded.turns)
    attend = None if encoded.attend is None else encoded.attend[:end]
    return EncodedChat(encoded.text, encoded.ids[:end], encoded.trained[:end], encoded.offsets[:end], turns, attend)


# Characters of contents encoded per encode_batch call: all cores busy, memory bounded (an Encoding keeps
# every token's text and offsets).
ENCODE_SLICE_CHARS = 1 << 20


def _conversations(docs, encoder, cfg: ChatConfig, counts: Counter):
    """(the conversation to write, None) or (None, why it was dropped), per document, in order."""
    if cfg.regions:
        yield from _hooked(docs, encoder, cfg, counts)
        return
    conversations = []
    for d in docs:
        c = parse_chat(d.values[0], role_key=cfg.role_key, content_key=cfg.content_key)
        conversations.append(Conversation(_normalized(c.messages, cfg.normalize, counts), c.tools))
    start, size = 0, 0
    for i, c in enumerate(conversations):
        size += sum(len(x["content"] or "") for x in c.messages)
        if size >= ENCODE_SLICE_CHARS or i == len(conversations) - 1:
            for encoded in encoder.encode_many(conversations[start:i + 1],
                                               train_on_all_assistant_turns=cfg.train_on_all_assistant_turns):
                yield _fit(encoded, cfg)
            start, size = i + 1, 0


def _hooked(docs, encoder, cfg: ChatConfig, counts: Counter):
    """As _conversations, for records that are a read hook's regions: each region's text normalized, as 2.10
    cleans each part, then encoded (chat.hooked) in the same slices as conversations, one `encode_batch` each."""
    from transforms.core.chat.hooked import encode_regions_many, regions_from_value

    records = []
    for d in docs:
        regions = regions_from_value(d.values[0])
        texts = _normalized([{"content": r.text} for r in regions], cfg.normalize, counts)
        records.append([dataclasses.replace(r, text=t["content"]) for r, t in zip(regions, texts)])
    start, size = 0, 0
    for i, regions in enumerate(records):
        size += sum(len(r.text) for r in regions)
        if size >= ENCODE_SLICE_CHARS or i == len(records) - 1:
            for encoded in encode_regions_many(encoder, records[start:i + 1], bos_id=cfg.bos_id, eos_id=cfg.eos_id,
                                               attention=cfg.key_padding_mask):
                yield _fit(encoded, cfg)
            start, size = i + 1, 0


def _fit(encoded, cfg: ChatConfig) -> tuple[Optional[EncodedChat], Optional[str]]:
    if isinstance(encoded, ChatError):
        return None, encoded.reason
    try:
        if cfg.loss_span == "turn":  # 2.10 keeps the template's text after the last turn (an untrained label)
            encoded = _to_last_trained(encoded)
        if len(encoded) > cfg.max_seq_length + 1:
            encoded = truncate(encoded, limit=cfg.max_seq_length + 1, mode=cfg.truncate)
    except ChatError as e:
        return None, e.reason
    if len(encoded) < max(cfg.min_sequence_len, 2):
        return None, DROP_TOO_SHORT
    return encoded, None


def _count_roles(encoded: EncodedChat, counts: Counter) -> None:
    """Tokens and trained labels of each role; tokens in no turn (a template's preamble) are "template"."""
    covered = 0
    for turn in encoded.turns:
        a, b = turn.turn
        counts[ROLE_TOKENS + turn.role] += b - a
        # Token 0 is never a label: it is only an input, so never a loss position.
        counts[ROLE_TRAINED + turn.role] += int(encoded.trained[max(a, 1):b].sum())
        covered += b - a
    if covered < len(encoded.ids):
        counts[ROLE_TOKENS + "template"] += len(encoded.ids) - covered
        in_turns = np.zeros(len(encoded.ids), bool)
        for turn in encoded.turns:
            in_turns[turn.turn[0]:turn.turn[1]] = True
        counts[ROLE_TRAINED + "template"] += int(encoded.trained[1:][~in_turns[1:]].sum())


def _account(batch, used: int, dropped: Counter, counts: Counter) -> None:
    source = batch.group.source
    stats = batch.stats
    stats.sources.setdefault(source, Counter())
    if used is not None:
        stats.add("docs_used", used, source)
    for reason, n in dropped.items():
        stats.add(f"dropped.{reason}", n, source)
    for name, n in counts.items():
        stats.add(name, n, source)


def _per_record(counters: list[Counter]) -> dict:
    """Per-record Counters -> name -> int64 per record ("tokens" always, an empty batch's too)."""
    names = sorted(set().union({"tokens"}, *counters))
    return {name: np.fromiter((c.get(name, 0) for c in counters), dtype=np.int64, count=len(counters))
            for name in names}


def encode_conversations(batch, encoder, cfg: ChatConfig):
    """DocBatch of conversations -> EncodedBatch: each kept conversation's (ids, trained[, attend]), the drops and
    the contents' characters counted; what a record adds once written (its tokens by role) kept per record."""
    from transforms.core.records import EncodedBatch, Origins

    counts: Counter = Counter()
    dropped: Counter = Counter()
    kept, per_record = [], []  # per kept conversation: only what its rows need, not its text and offsets
    origins = []
    for doc, (encoded, reason) in zip(batch.docs, _conversations(batch.docs, encoder, cfg, counts)):
        if encoded is None:
            dropped[reason] += 1
            continue
        origins.append(doc)
        roles: Counter = Counter()
        _count_roles(encoded, roles)
        roles["tokens"] = len(encoded.ids)
        per_record.append(roles)
        arrays = (encoded.ids, encoded.trained)
        if cfg.key_padding_mask:
            arrays += (np.ones(len(encoded.ids), bool) if encoded.attend is None else encoded.attend,)
        kept.append(arrays)
    _account(batch, None, dropped, counts)
    return EncodedBatch(batch.group, kept, batch.stats, _per_record(per_record), origins=Origins.of(origins))


def _written(encoded) -> None:
    """Count what the records of an EncodedBatch add once written: themselves and their per-record statistics."""
    _account(encoded, len(encoded.tokens), Counter(),
             Counter({name: int(v.sum()) for name, v in encoded.doc_stats.items()}))


def conversation_rows(encoded, cfg: ChatConfig):
    """EncodedBatch of conversations -> WindowBlock of [n, 3, msl] rows (Chat) or of VSL rows (Chat_VSL)."""
    from transforms.core.records import WindowBlock
    from transforms.core.vsl import Segments, VslConfig, pack_segments

    _written(encoded)
    ids = [x[0] for x in encoded.tokens]
    lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if len(ids) else np.zeros(0, np.int64)
    trained = [x[1] for x in encoded.tokens]
    attend = [x[2] for x in encoded.tokens] if cfg.key_padding_mask else None
    segments = Segments(
        tokens=np.concatenate(ids).astype(np.int32) if ids else np.zeros(0, np.int32),
        starts=starts.astype(np.int64), positions=lengths - 1, mask_from=np.zeros(len(ids), np.int64),
        trained=np.concatenate(trained) if trained else np.zeros(0, bool),
        attend=(np.concatenate(attend) if attend else np.zeros(0, bool)) if cfg.key_padding_mask else None)
    vsl = cfg.vsl
    # Chat: a conversation per row (as a segment alone in its row, the rows' first three features);
    # Chat_VSL: conversations packed. Either way the rows are built a batch at a time when they are encoded.
    layout = VslConfig(max_seq_length=cfg.max_seq_length, pad_id=cfg.pad_id,
                       pack_sequences=vsl and cfg.pack_sequences, inverted_mask=cfg.inverted_mask)
    features = 5 if vsl else 4 if cfg.key_padding_mask else 3
    return WindowBlock(encoded.group, pack_segments(segments, layout, features=features), encoded.stats)


def conversation_batch(batch, encoder, cfg: ChatConfig):
    """DocBatch of conversations -> WindowBlock of [n, 3, msl] rows (Chat) or of VSL rows (Chat_VSL)."""
    return conversation_rows(encode_conversations(batch, encoder, cfg), cfg)


class DpoRows:
    """The [n, 6, msl] rows of a group's DPO pairs, built a batch at a time (as EncodeRows asks for them)."""

    def __init__(self, pairs: list, cfg: ChatConfig):
        self._pairs = pairs  # EncodedDpo, each already cut to fit its row (fit_pair)
        self._cfg = cfg

    def __len__(self) -> int:
        return len(self._pairs)

    def rows_between(self, lo: int, hi: int) -> np.ndarray:
        cfg = self._cfg
        rows = [dpo_row(p, max_seq_length=cfg.max_seq_length, pad_id=cfg.pad_id,
                        max_prompt_length=cfg.max_prompt_length, inverted_mask=cfg.inverted_mask)
                for p in self._pairs[lo:hi]]
        return np.stack(rows) if rows else np.zeros((0, 6, cfg.max_seq_length), dtype=np.int32)


def encode_pairs(batch, encoder, cfg: ChatConfig):
    """DocBatch of DPO records -> EncodedBatch of (prompt, chosen, rejected) ids, each pair known to fit its row;
    a pair's tokens (as its row holds them: cut to fit) count its prompt twice, once per side."""
    from transforms.core.records import EncodedBatch, Origins

    counts: Counter = Counter()
    dropped: Counter = Counter()
    pairs, origins = [], []
    for doc in batch.docs:
        example = _dpo_example(doc.values, cfg)
        prompt = _normalized(list(example.prompt), cfg.normalize, counts)
        chosen, rejected = (_normalized([{"role": "assistant", "content": r}], cfg.normalize, counts)[0]["content"]
                            for r in (example.chosen, example.rejected))
        try:
            encoded = encode_dpo(encoder, example._replace(prompt=prompt, chosen=chosen, rejected=rejected))
            # As its row will hold it: what a mixture and the statistics count is what is written.
            encoded = fit_pair(encoded, max_seq_length=cfg.max_seq_length, max_prompt_length=cfg.max_prompt_length)
        except ChatError as e:
            dropped[e.reason] += 1
            continue
        pairs.append((encoded.prompt, encoded.chosen, encoded.rejected))
        origins.append(doc)
    _account(batch, None, dropped, counts)
    tokens = np.fromiter((len(p) * 2 + len(c) + len(r) for p, c, r in pairs), dtype=np.int64, count=len(pairs))
    return EncodedBatch(batch.group, pairs, batch.stats, {"tokens": tokens}, origins=Origins.of(origins))


def dpo_rows(encoded, cfg: ChatConfig):
    """EncodedBatch of DPO pairs -> WindowBlock of DpoRows ([n, 6, msl] rows, built when they are encoded)."""
    from transforms.core.records import WindowBlock

    _written(encoded)
    return WindowBlock(encoded.group, DpoRows([EncodedDpo(*p) for p in encoded.tokens], cfg), encoded.stats)


def dpo_batch(batch, encoder, cfg: ChatConfig):
    """DocBatch of DPO records -> WindowBlock of DpoRows ([n, 6, msl] rows, built when they are encoded)."""
    return dpo_rows(encode_pairs(batch, encoder, cfg), cfg)
