"""Chat rows: one padded row per conversation, the loss on the labels that are trained tokens; and truncation.

A conversation of tokens T (at most msl + 1) with trained flags W gives

    input_ids       T[:-1]           then pad
    labels          T[1:]            then pad
    attention_mask  W[1:]            then 0     (`inverted_mask` flips the whole row)

so a position carries loss when its label is a trained token (MODES.md §B2.3).
For example, msl = 6 and T = [u1 u2 a1 a2 E] with W = [0 0 1 1 1] (P = pad):

    input_ids       u1 u2 a1 a2 P P
    attention_mask   0  1  1  1 0 0
    labels          u2 a1 a2  E P P

**Truncation** (`truncate`, to `limit` tokens; a chat row takes limit = msl + 1).
With mode None a longer conversation is ChatError("too_long"). With
"keep_start" or "keep_end", `excess` = len(T) - limit tokens are removed from
message contents only, never from the template's text around them (headers,
end-of-turn tokens):

1. From the contents of system, user and tool turns, longest first: with L
   the largest length such that cutting every longer content down to L
   removes at least the excess, the contents are cut to L + 1 tokens, then
   the longest of those (the earlier on ties) lose one more token each until
   exactly the excess is removed. For example lengths 8, 3, 2 and an excess
   of 8 leave 1, 2, 2. keep_start keeps each content's head (cuts its tail),
   keep_end keeps its tail. A content may be cut to nothing; its turn stays.
2. If that is not enough, from the contents of assistant turns, from the
   last turn backwards, always cutting a content's tail and keeping at least
   its first token, so an assistant turn keeps its first token and its
   end-of-turn token.
3. If the excess is still not removed: ChatError("too_long").

Cuts fall between characters: a character split over several tokens (byte
fallback) is removed whole, so a cut may remove a token or three more than
asked. Tokens straddling a content's edge belong to the template and stay.
The reference (MODES.md §B2.4) also cuts user turns before assistant turns,
but keeps max_turn_length tokens per turn and crashes on other roles.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from transforms.core.chat.encode import EncodedChat, Turn
from transforms.core.chat.template import ChatError

__all__ = ["KEEP_START", "KEEP_END", "TRUNCATION_MODES", "chat_row", "truncate"]

KEEP_START, KEEP_END = "keep_start", "keep_end"
TRUNCATION_MODES = (None, KEEP_START, KEEP_END)


def chat_row(encoded: EncodedChat, *, max_seq_length: int, pad_id: int, inverted_mask: bool = False) -> np.ndarray:
    """int32 [3, msl]: input_ids, attention_mask, labels (see the module docstring)."""
    ids, trained = encoded.ids, encoded.trained
    n = len(ids) - 1
    if n > max_seq_length:
        raise ValueError(f"{len(ids)} tokens do not fit a row of {max_seq_length} positions (truncate first)")
    if n < 1:
        raise ValueError("a conversation of fewer than 2 tokens has no position")
    row = np.zeros((3, max_seq_length), dtype=np.int32)
    row[0] = row[2] = pad_id
    row[0, :n] = ids[:-1]
    row[2, :n] = ids[1:]
    row[1, :n] = trained[1:]
    if inverted_mask:
        row[1] = 1 - row[1]
    return row


def truncate(encoded: EncodedChat, *, limit: int, mode: Optional[str]) -> EncodedChat:
    """`encoded` cut to at most `limit` tokens by the rule of the module docstring, or ChatError("too_long")."""
    if mode not in TRUNCATION_MODES:
        raise ValueError(f"truncation mode {mode!r}: expected one of {TRUNCATION_MODES}")
    excess = len(encoded.ids) - limit
    if excess <= 0:
        return encoded
    if mode is None:
        raise ChatError("too_long", f"{len(encoded.ids)} tokens, at most {limit}")
    cutter = _Cutter(encoded.offsets)
    cuts: list[tuple[int, int]] = []
    others = [t for t in encoded.turns if t.role != "assistant"]
    ranges = [cutter.cuttable(t) for t in others]
    want = _level_cuts([hi - lo for lo, hi in ranges], excess)
    for (lo, hi), c in zip(ranges, want):
        if c:
            cut = (cutter.down(hi - c, lo), hi) if mode == KEEP_START else (lo, cutter.up(lo + c, hi))
            cuts.append(cut)
            excess -= cut[1] - cut[0]
    for turn in reversed([t for t in encoded.turns if t.role == "assistant"]):
        if excess <= 0:
            break
        lo, hi = cutter.cuttable(turn)
        first = cutter.up(lo + 1, hi) if hi > lo else hi  # the content keeps at least its first token
        if first >= hi:
            continue
        start = max(first, cutter.down(hi - excess, lo))
        cuts.append((start, hi))
        excess -= hi - start
    if excess > 0:
        raise ChatError("too_long", f"{len(encoded.ids)} tokens, at most {limit}: cutting contents is not enough")
    return _remove(encoded, cuts)


class _Cutter:
    """Where token ranges may be cut: between tokens that do not share a character."""

    def __init__(self, offsets: np.ndarray) -> None:
        n = len(offsets)
        valid = np.ones(n + 1, dtype=bool)
        valid[1:n] = offsets[:-1, 1] <= offsets[1:, 0]
        self._points = np.flatnonzero(valid)

    def up(self, p: int, limit: int) -> int:
        """The first cut point >= p (at most `limit`)."""
        i = np.searchsorted(self._points, p, "left")
        return min(int(self._points[i]), limit) if i < len(self._points) else limit

    def down(self, p: int, limit: int) -> int:
        """The last cut point <= p (at least `limit`)."""
        i = np.searchsorted(self._points, p, "right") - 1
        return max(int(self._points[i]), limit) if i >= 0 else limit

    def cuttable(self, turn: Turn) -> tuple[int, int]:
        lo, hi = turn.content
        lo, hi = self.up(lo, hi), self.down(hi, lo)
        return (lo, hi) if lo < hi else (lo, lo)


def _level_cuts(lengths: list[int], excess: int) -> list[int]:
    """How much to cut from each length, longest first, to remove `excess` (or everything if that is less).

    Cut all down to the highest common level that removes enough; then give
    back a token to some of those at that level (the originally shorter and
    later ones first), so the cuts add up to exactly `excess`.

    >>> _level_cuts([8, 3, 2], 8)
    [7, 1, 0]
    """
    total = sum(lengths)
    if total <= excess:
        return list(lengths)

    def removed(level: int) -> int:
        return sum(max(0, n - level) for n in lengths)

    lo, hi = 0, max(lengths)  # removed(lo) >= excess > removed(hi) = 0 (excess > 0)
    while hi - lo > 1:  # the highest level removing at least `excess`
        mid = (lo + hi) // 2
        if removed(mid) >= excess:
            lo = mid
        else:
            hi = mid
    level = lo
    cuts = [max(0, n - level) for n in lengths]
    spare = sum(cuts) - excess
    at_level = sorted((i for i, n in enumerate(lengths) if n > level), key=lambda i: (lengths[i], -i))
    for i in at_level[:spare]:
        cuts[i] -= 1
    return cuts


def _remove(encoded: EncodedChat, cuts: list[tuple[int, int]]) -> EncodedChat:
    keep = np.ones(len(encoded.ids), dtype=bool)
    for a, b in cuts:
        keep[a:b] = False
    new = np.concatenate([[0], np.cumsum(keep)])  # old token boundary -> new token boundary

    def remap(r: tuple[int, int]) -> tuple[int, int]:
        return int(new[r[0]]), int(new[r[1]])

    turns = tuple(dataclasses.replace(t, content=remap(t.content), turn=remap(t.turn)) for t in encoded.turns)
    attend = None if encoded.attend is None else encoded.attend[keep]
    return EncodedChat(encoded.text, encoded.ids[keep], encoded.trained[keep], encoded.offsets[keep], turns, attend)
