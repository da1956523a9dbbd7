"""A read hook's regions -> tokens and trained flags (an EncodedChat), for the Chat rows.

A Cerebras 2.10 read hook of the user's own (or one of 2.10's that has no
mode of ours) turns each record into regions (transforms.core.regions): text
parts with a loss weight each. The reader runs the hook and hands on the
regions (`regions_value` / `regions_from_value`); this module encodes them
into the same EncodedChat the Chat modes build from a messages list, so the
rows (one per record, or packed with Chat_VSL), truncation, statistics and
`verify` are the Chat modes' own.

**Chat regions** (2.10's rule, `regions.is_chat`: the first region is a
system, user or assistant turn): each turn becomes one message whose content
is its regions joined; the conversation is rendered with the chat template
and tokenized as a chat (`ChatEncoder.tokenize`: template text never comes
from the content). A token is trained when it overlaps a region of weight 1.
A turn's first and last regions reach as far as the encoder's loss span
reaches for an assistant turn (`ChatEncoder.assistant_chars`): with
"content" (a 2.10 config), the last one over the end-of-turn token right
after the turn (2.10 gives that token the last region's weight); with
"turn", both over the whitespace around the turn too. So a hook that weights
exactly the assistant turns trains exactly what the Chat mode trains.

**Text regions** (prompt / completion / context / text): the ids are
[BOS] + each region's text encoded on its own + [EOS], as the Summarization
rows join a prompt and a completion; a token is trained when its region's
weight is 1, and EOS when the last region's is (a completion teaches where
to stop).

Loss weights are 0 or 1 (the rows' mask is a 0/1 loss mask). A region whose
attention is masked (`semantic_attention_mask` false) is written in a fourth
row, `key_padding_mask` (1: not attended), when the job has one
(`key_padding_mask: true`); without it such a record is refused (ChatError
"attention_mask_not_written"), never written as if it were attended.
"""

from __future__ import annotations

import json
from typing import Optional, Sequence

import numpy as np

from transforms.core.chat.encode import ChatEncoder, EncodedChat, TokenizedChat, Turn
from transforms.core.chat.template import ChatError
from transforms.core.regions import Region, conversation, is_chat, region_token_weights

__all__ = ["encode_regions", "encode_regions_many", "regions_from_value", "regions_value"]

# Where text regions go when a turn's role matters (truncation cuts user turns before assistant turns).
_TEXT_ROLES = {"completion": "assistant", "prompt": "user", "context": "user", "text": "user"}


def regions_value(regions: Sequence[Region]) -> str:
    """The regions as one JSON text: what a record's value is between the reader and the encoder."""
    return json.dumps([[r.kind, r.text, r.loss_weight, r.attend, r.turn, r.part, r.key] for r in regions],
                      ensure_ascii=False)


def regions_from_value(value: str) -> tuple[Region, ...]:
    return tuple(Region(*item) for item in json.loads(value))


def encode_regions(encoder: ChatEncoder, regions: Sequence[Region], *, bos_id: Optional[int],
                   eos_id: int, attention: bool = False) -> EncodedChat:
    """The regions' tokens and trained flags (see the module docstring); ChatError for a record to drop.

    `attention`: the rows have a key_padding_mask feature, so masked regions are written (EncodedChat.attend:
    a token is not attended when it overlaps a region whose attention is masked); else they are refused."""
    [encoded] = encode_regions_many(encoder, [regions], bos_id=bos_id, eos_id=eos_id, attention=attention)
    if isinstance(encoded, ChatError):
        raise encoded
    return encoded


def encode_regions_many(encoder: ChatEncoder, records: Sequence[Sequence[Region]], *, bos_id: Optional[int],
                        eos_id: int, attention: bool = False) -> list:
    """`encode_regions` of each record, or the ChatError it raises, in order: the same tokens, encoded in batches
    as the Chat modes encode messages (the chat records' renderings in one `encode_batch`, `tokenize_many`; the
    text records' regions in another), so every core the tokenizer may use works on them."""
    out: list = [None] * len(records)
    chats: list[int] = []
    texts: list[int] = []
    for k, regions in enumerate(records):
        try:
            _check(regions, attention)
        except ChatError as e:
            out[k] = e
            continue
        (chats if is_chat(regions) else texts).append(k)
    conversations = [conversation(records[k]) for k in chats]
    for k, (messages, part_spans), tok in zip(chats, conversations,
                                              encoder.tokenize_many([m for m, _ in conversations])):
        out[k] = tok if isinstance(tok, ChatError) else _chat(encoder, records[k], messages, part_spans, tok)
    encodings = iter(encoder.backend.encode_batch([r.text for k in texts for r in records[k]],
                                                  add_special_tokens=False))
    for k in texts:
        out[k] = _text([next(encodings) for _ in records[k]], records[k], bos_id, eos_id)
    return out


def _check(regions: Sequence[Region], attention: bool) -> None:
    for r in regions:
        if not r.attend and not attention:
            raise ChatError("attention_mask_not_written",
                            f"turn {r.turn} part {r.part}: its attention is masked (semantic_attention_mask), "
                            "and these rows have no attention feature to say so")
        if r.loss_weight not in (0, 1):
            raise ChatError("bad_loss_weight", f"turn {r.turn} part {r.part}: loss weight {r.loss_weight}; the "
                            "rows' loss mask holds 0 or 1")
    if not any(r.loss_weight for r in regions):
        raise ChatError("no_assistant_turn", "no region has a loss weight: nothing to train")


def _chat(encoder: ChatEncoder, regions: Sequence[Region], messages: list, part_spans: list,
          tok: TokenizedChat) -> EncodedChat:
    """Chat regions, their messages (`regions.conversation`) rendered and tokenized -> EncodedChat."""
    text, size = tok.text, len(tok.text)
    order = sorted(range(len(messages)), key=lambda i: tok.spans[i])
    spans: list[tuple[int, int, int]] = []
    by_turn: list[list[Region]] = []
    for r in regions:
        if not by_turn or by_turn[-1][0].turn != r.turn:
            by_turn.append([])
        by_turn[-1].append(r)
    for k, i in enumerate(order):
        a, b = tok.spans[i]
        limits = (tok.spans[order[k - 1]][1] if k else 0, tok.spans[order[k + 1]][0] if k + 1 < len(order) else size)
        reach = encoder.assistant_chars(text, (a, b), limits)  # where a trained turn's loss reaches
        parts = by_turn[i]
        for p, (r, (s, e)) in enumerate(zip(parts, part_spans[i])):
            s, e = a + s, a + e
            if p == 0:  # the turn's edges reach as the loss span says; the edges between its parts stay
                s = min(s, reach[0])
            if p == len(parts) - 1:
                e = max(e, reach[1])
            spans.append((s, e, r.loss_weight))
    weights = region_token_weights(tok.offsets, _in_order(spans), len(tok.ids))
    return EncodedChat(text, tok.ids, weights > 0, tok.offsets, encoder.turns(messages, tok),
                       _attend(tok.offsets, regions, part_spans, tok.spans))


def _attend(offsets: np.ndarray, regions: Sequence[Region], part_spans: list, contents: tuple):
    """Per token: False where it overlaps a region whose attention is masked; None when no region is."""
    if all(r.attend for r in regions):
        return None
    masked, k = [], 0
    for m, spans in enumerate(part_spans):
        a = contents[m][0]
        for s, e in spans:
            if not regions[k].attend:
                masked.append((a + s, a + e, 1))
            k += 1
    return region_token_weights(offsets, masked, len(offsets)) == 0


def _in_order(spans: list) -> list:
    # region_token_weights lets a later span win a shared token: an untrained region must not take back a token
    # that a trained neighbour's reach gave (their edge token), so the trained spans go last.
    return [s for s in spans if not s[2]] + [s for s in spans if s[2]]


def _text(encodings: list, regions: Sequence[Region], bos_id: Optional[int], eos_id: int) -> EncodedChat:
    """Text regions, each encoded on its own (`encodings`, one per region) -> EncodedChat."""
    ids: list[np.ndarray] = [np.array([bos_id], np.int32)] if bos_id is not None else []
    trained: list[np.ndarray] = [np.zeros(1, bool)] if bos_id is not None else []
    offsets: list[np.ndarray] = [np.zeros((1, 2), np.int64)] if bos_id is not None else []
    turns, at, count = [], 0, len(ids)
    attend = [np.ones(len(ids), bool)]
    for r, enc in zip(regions, encodings):
        n = len(enc.ids)
        ids.append(np.asarray(enc.ids, np.int32))
        trained.append(np.full(n, bool(r.loss_weight)))
        attend.append(np.full(n, r.attend))
        offsets.append(np.asarray(enc.offsets, np.int64).reshape(-1, 2) + at)
        turns.append(Turn(_TEXT_ROLES.get(r.kind, r.kind), (at, at + len(r.text)), (count, count + n),
                          (count, count + n)))
        at, count = at + len(r.text), count + n
    ids.append(np.array([eos_id], np.int32))
    trained.append(np.array([bool(regions[-1].loss_weight)]))
    offsets.append(np.array([[at, at]], np.int64))
    text = "".join(r.text for r in regions)
    attend.append(np.ones(1, bool))
    attended = np.concatenate(attend)
    return EncodedChat(text, np.concatenate(ids), np.concatenate(trained), np.concatenate(offsets), tuple(turns),
                       None if attended.all() else attended)
