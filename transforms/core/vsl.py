"""VSL (variable sequence length) rows: documents packed whole into rows, each keeping its own positions.

A row holds several document *segments* back to back. Each segment is
shifted on its own, so no position predicts across a document boundary, and
carries its own attention span and position ids (Cerebras 2.1.1's
per-document script, MODES.md §A1.5). A segment of tokens t (n = len(t) - 1
positions) contributes:

    input_ids       t[:-1]
    attention_mask  1 ... 1            (Summarization_VSL: 0 on the prompt, 1 from the position
                                        whose label is the first completion token)
    labels          t[1:]
    attention_span  n-1, n-2, ..., 0   (how many later positions of the same document may attend to it)
    position_ids    0, 1, ..., n-1

and padding fills the row: pad in ids and labels, 0 in span and positions,
mask 0 (`inverted_mask` flips the whole mask row, padding included). For
example, msl = 8 and the documents [1 2 3 E] and [4 5 E] (E = eos, P = pad):

    input_ids       1 2 3 4 5 P P P
    attention_mask  1 1 1 1 1 0 0 0
    labels          2 3 E 5 E P P P
    attention_span  2 1 0 1 0 0 0 0
    position_ids    0 1 2 0 1 0 0 0

What goes into the segments is exactly the reference's (the 2.1.1 script):
LMData_VSL drops documents shorter than `min_sequence_len`, draws one
`short_seq_prob` number per remaining document, and folds a document longer
than msl + 1 tokens into windows of msl + 1 tokens with stride msl (window k
ends with the token window k + 1 starts with, so every prediction is kept);
Summarization_VSL keeps a record whose positions |P| (+1 sep) + |C| fit msl,
and with `truncate` (Cerebras 2.10's `truncate_to_msl`) cuts a longer one to
fit by Summarization's rule (`summarization.cut_pair`).

Where segments go is ours (`pack_bins`): best-fit decreasing within a
packing group, a rule of the group's content alone.
"""

from __future__ import annotations

import bisect
import dataclasses
import random
from collections import Counter
from typing import Optional, Sequence

import numpy as np

from transforms.core.features import (ATTENTION_MASK, ATTENTION_SPAN, INPUT_IDS, KEY_PADDING_MASK, LABELS,
                                      POSITION_IDS, VSL_FEATURES)
from transforms.core.reasons import (LONGER_THAN_MAX_SEQ_LENGTH, NO_TOKEN_TO_PREDICT, SHORTER_THAN_MIN_SEQUENCE_LEN,
                                     TOO_LONG)
from transforms.core.summarization import cut_pair

__all__ = ["VslConfig", "Segments", "PackedRows", "lm_segments", "summarization_segments", "pack_bins",
           "pack_segments", "index_dtype", "vsl_lm_batch", "vsl_summarization_batch", "DROP_MIN_LEN", "DROP_NOT_FOLDED",
           "DROP_SINGLE_TOKEN", "DROP_TOO_LONG", "DROP_TOO_SHORT"]

# Why a document (record) produced no segment (transforms.core.reasons).
DROP_MIN_LEN = SHORTER_THAN_MIN_SEQUENCE_LEN  # LMData_VSL: fewer tokens (EOS included) than min_sequence_len
DROP_NOT_FOLDED = LONGER_THAN_MAX_SEQ_LENGTH  # LMData_VSL with fold_long_doc False: over msl + 1 tokens
DROP_SINGLE_TOKEN = NO_TOKEN_TO_PREDICT  # one token: no position to train
DROP_TOO_LONG = TOO_LONG  # Summarization_VSL: more positions than msl
DROP_TOO_SHORT = SHORTER_THAN_MIN_SEQUENCE_LEN  # Summarization_VSL: fewer positions than min_sequence_len


@dataclasses.dataclass(frozen=True)
class VslConfig:
    max_seq_length: int
    pad_id: int
    min_sequence_len: int = 10
    short_seq_prob: float = 0.0  # LMData_VSL only
    fold_long_doc: bool = True  # LMData_VSL only
    pack_sequences: bool = True  # False: every segment is a row of its own
    inverted_mask: bool = False
    eos_id: Optional[int] = None  # Summarization_VSL: the label after the completion
    sep_id: Optional[int] = None  # Summarization_VSL: between prompt and completion
    truncate: Optional[str] = None  # Summarization_VSL: None drops a pair too long; keep_start | keep_end cut it


@dataclasses.dataclass
class Segments:
    """The segments of one packing group, in input order.

    Segment i is tokens[starts[i] : starts[i] + positions[i] + 1]: `positions[i]`
    inputs, each labelled by the token after it. Its first trained position is
    `mask_from[i]` (0 for LMData_VSL; for Summarization_VSL the position whose
    label is the first completion token), unless `trained` says per token
    which ones are trained labels (Chat_VSL: the assistant turns).
    """

    tokens: np.ndarray  # int32
    starts: np.ndarray  # int64
    positions: np.ndarray  # int64, each in [1, msl]
    mask_from: np.ndarray  # int64
    trained: Optional[np.ndarray] = None  # bool, one per token: a position is trained when its label's token is
    attend: Optional[np.ndarray] = None  # bool, one per token (Chat rows of 4 features: key_padding_mask)

    def __len__(self) -> int:
        return len(self.starts)


def _segments(tokens: np.ndarray, starts: list, positions: list, mask_from: Optional[list] = None) -> Segments:
    return Segments(tokens=tokens, starts=np.array(starts, dtype=np.int64),
                    positions=np.array(positions, dtype=np.int64),
                    mask_from=np.array(mask_from if mask_from is not None else [0] * len(starts), dtype=np.int64))


def lm_segments(docs: Sequence[np.ndarray], cfg: VslConfig, rng: Optional[random.Random] = None,
                flat: Optional[np.ndarray] = None) -> tuple[Segments, int, Counter]:
    """LMData_VSL: (segments, documents used, documents dropped by reason) of one packing group.

    `docs` are token arrays that already end in EOS; `flat`, if given, is them
    back to back (int32), used as the segments' token array without a copy.
    `rng` feeds short_seq_prob and must be seeded from the group's identity.

    Per document of L tokens, in order (the reference's order of checks):
    L < min_sequence_len: dropped. Otherwise one draw of rng.random(); under
    short_seq_prob the document is cut to its first randint(2, msl) tokens and
    never folded. Then L > msl + 1: dropped unless fold_long_doc, else windows
    [k*msl, k*msl + msl + 1) while they are full, and the rest from the first
    start that leaves at most msl + 1 tokens, when it holds two or more.
    """
    msl = cfg.max_seq_length
    lengths = [len(d) for d in docs]
    if flat is None:
        flat = np.concatenate(docs).astype(np.int32, copy=False) if docs else np.zeros(0, np.int32)
    elif flat.dtype != np.int32 or len(flat) != sum(lengths):
        raise ValueError("flat must be the documents' int32 tokens back to back")
    draws = rng is not None and cfg.short_seq_prob > 0.0
    starts: list = []
    positions: list = []
    dropped: Counter = Counter()
    used = 0
    offset = 0
    for length in lengths:
        start, offset = offset, offset + length
        if length < cfg.min_sequence_len:
            dropped[DROP_MIN_LEN] += 1
            continue
        if draws and rng.random() < cfg.short_seq_prob:
            length = min(length, rng.randint(2, msl))
        elif length > msl + 1:
            if not cfg.fold_long_doc:
                dropped[DROP_NOT_FOLDED] += 1
                continue
            # Full windows from every start k*msl that leaves more than msl tokens, then the rest: 1 to msl
            # tokens, of which a single one was the last window's final label already (no segment of its own).
            full = (length - 1) // msl
            starts.extend(range(start, start + full * msl, msl))
            positions.extend([msl] * full)
            used += 1
            start, length = start + full * msl, length - full * msl
            if length >= 2:
                starts.append(start)
                positions.append(length - 1)
            continue
        if length < 2:
            dropped[DROP_SINGLE_TOKEN] += 1
            continue
        starts.append(start)
        positions.append(length - 1)
        used += 1
    return _segments(flat, starts, positions), used, dropped


def summarization_segments(pairs: Sequence[tuple[np.ndarray, np.ndarray]], cfg: VslConfig
                           ) -> tuple[Segments, int, Counter]:
    """Summarization_VSL: (segments, records used, records dropped by reason) of one packing group.

    A record (P, C) becomes the tokens P (+ [sep]) + C + [eos]: |P| (+1) + |C|
    positions, kept when that is at most msl and at least min_sequence_len
    (the reference's limits: the EOS is only a label, so it takes no position).
    A longer record is dropped, or with `truncate` cut to msl positions as
    Summarization cuts (`cut_pair`: the prompt first, down to one token, then
    the completion's tail, down to one token); one that still does not fit is
    dropped. For example |P| = 5, |C| = 3, no sep, msl = 6 (8 positions, 2
    too many) keeps P[:3] (keep_start) or P[2:] (keep_end) and all of C.
    Its loss starts at the position whose label is C's first token, or at 0
    when there is no prompt and no sep (where the reference crashes).
    """
    msl = cfg.max_seq_length
    sep = [] if cfg.sep_id is None else [cfg.sep_id]
    if cfg.eos_id is None:
        raise ValueError("Summarization_VSL needs eos_id")
    kept, dropped = [], Counter()
    for prompt, completion in pairs:
        total = len(prompt) + len(sep) + len(completion)
        if total > msl and cfg.truncate is not None:
            prompt, completion = cut_pair(prompt, completion, total - msl, cfg.truncate)
            total = len(prompt) + len(sep) + len(completion)
        if total > msl:
            dropped[DROP_TOO_LONG] += 1
        elif total < cfg.min_sequence_len:
            dropped[DROP_TOO_SHORT] += 1
        elif total < 1:
            dropped[DROP_SINGLE_TOKEN] += 1
        else:
            kept.append((prompt, completion))
    lengths = [len(p) + len(sep) + len(c) + 1 for p, c in kept]
    tokens = np.empty(sum(lengths), dtype=np.int32)
    starts, positions, mask_from = [], [], []
    pos = 0
    for (prompt, completion), length in zip(kept, lengths):
        starts.append(pos)
        positions.append(length - 1)
        mask_from.append(max(len(prompt) + len(sep) - 1, 0))
        for part in (prompt, sep, completion):
            tokens[pos:pos + len(part)] = part
            pos += len(part)
        tokens[pos] = cfg.eos_id
        pos += 1
    return _segments(tokens, starts, positions, mask_from), len(kept), dropped


def pack_bins(costs: Sequence[int], capacity: int) -> tuple[np.ndarray, int]:
    """Best-fit decreasing: (the bin of every item, number of bins).

    Items are taken by decreasing cost (ties in input order) and each goes
    into the open bin with the least room that still fits it, or a new bin;
    among bins with equal room, the one that reached it last. Bins are
    numbered in the order they are opened. The result depends only on the
    costs in input order.

    The room of the open bins is kept as a sorted list of the distinct
    amounts (at most `capacity` of them) with the bins that have each, so an
    item costs one binary search, never a scan of the open bins:
    O(n log n) for the sort plus O(n log capacity).

    >>> pack_bins([5, 5, 2], 8)   # 5 -> bin 0, 5 -> bin 1, 2 -> the fuller of two bins with room 3
    (array([0, 1, 1]), 2)
    """
    costs = np.asarray(costs, dtype=np.int64)
    if len(costs) and (costs.min() < 1 or costs.max() > capacity):
        raise ValueError(f"every cost must be within [1, {capacity}]")
    order = np.argsort(-costs, kind="stable")
    bin_of = np.empty(len(costs), dtype=np.int64)
    rooms: list[int] = []  # sorted distinct room amounts of the open bins that are not full
    bins_with: dict[int, list[int]] = {}  # room -> bins with exactly that much, the last to reach it last
    opened = 0
    for i, cost in zip(order.tolist(), costs[order].tolist()):
        k = bisect.bisect_left(rooms, cost)
        if k < len(rooms):
            room = rooms[k]
            holders = bins_with[room]
            b = holders.pop()
            if not holders:
                del bins_with[room]
                del rooms[k]
        else:
            b, room = opened, capacity
            opened += 1
        bin_of[i] = b
        room -= cost
        if room:
            holders = bins_with.get(room)
            if holders is None:
                bins_with[room] = [b]
                bisect.insort(rooms, room)
            else:
                holders.append(b)
    return bin_of, opened


# A batch of rows whose segments average at least this many positions is built by block copies (`_copied_rows`:
# LMData_VSL's rows hold one or two segments of ~1,500), one of shorter segments by one gather per feature: a
# segment's copies cost about what gathering 500 positions does. On the bench corpus as Summarization_VSL pairs
# (~800 positions), building rows took 0.26 s by copies, 0.38 s by gathers.
_COPY_MIN_POSITIONS = 512


class PackedRows:
    """The rows of one packing group, described by where each segment goes, and built a batch at a time.

    Row r holds the segments of bin r in input order, back to back from
    position 0; rows are in the order their bins were opened. With
    `features=3` the rows stop after the labels: one segment per row makes
    them the rows of Chat (a conversation per row), built a batch at a time.
    """

    def __init__(self, segments: Segments, row_of: np.ndarray, n_rows: int, config: VslConfig,
                 features: int = len(VSL_FEATURES)):
        if features not in (LABELS + 1, len(VSL_FEATURES)) and not (features == KEY_PADDING_MASK + 1
                                                                     and segments.attend is not None):
            raise ValueError(f"rows of {LABELS + 1} or {len(VSL_FEATURES)} features (or {KEY_PADDING_MASK + 1}, "
                             f"with attend flags), not {features}")
        self.segments = segments
        self.config = config
        self.n_rows = n_rows
        self.features = features
        # Segments by (row, input order): the segments of rows [lo, hi) are one run of this order.
        self._order = np.argsort(row_of, kind="stable")
        self._bounds = np.searchsorted(row_of[self._order], np.arange(n_rows + 1))
        self._positions = segments.positions[self._order]
        self._used = np.bincount(row_of, weights=segments.positions, minlength=n_rows).astype(np.int64)
        if np.any(self._used > config.max_seq_length) or np.any(np.diff(self._bounds) == 0):
            raise AssertionError("every row holds one or more segments and at most max_seq_length positions")
        self._padding = np.zeros((features, config.max_seq_length), dtype=np.int32)
        self._padding[[INPUT_IDS, LABELS]] = config.pad_id
        if features == KEY_PADDING_MASK + 1:
            self._padding[KEY_PADDING_MASK] = 1  # padding is never attended

    def __len__(self) -> int:
        return self.n_rows

    @property
    def rows(self) -> np.ndarray:
        return self.rows_between(0, self.n_rows)

    @property
    def vsl_segments(self):
        """`segment_lengths` for 5-feature rows, whose spans and positions the sink takes precompressed."""
        return self.segment_lengths if self.features == len(VSL_FEATURES) else None

    def segment_lengths(self, lo: int, hi: int) -> list[np.ndarray]:
        """Per row lo..hi, the positions of its segments, in row order."""
        return [self._positions[self._bounds[r]:self._bounds[r + 1]] for r in range(lo, hi)]

    def rows_between(self, lo: int, hi: int) -> np.ndarray:
        """Rows lo..hi as int32 [hi - lo, features, msl]: copied block by block when their segments are long
        and carry no per-token flags (Chat's trained and attended tokens), else gathered position by position.
        The same rows either way."""
        seg, segments = self.segments, self._bounds[hi] - self._bounds[lo]
        if seg.trained is None and seg.attend is None and \
                segments * _COPY_MIN_POSITIONS <= (hi - lo) * self.config.max_seq_length:
            return self._copied_rows(lo, hi)
        return self._gathered_rows(lo, hi)

    def _gathered_rows(self, lo: int, hi: int) -> np.ndarray:
        """`rows_between` by one gather (or one subtraction) per feature over all positions of the batch."""
        cfg, seg = self.config, self.segments
        msl, n_rows = cfg.max_seq_length, hi - lo
        a, b = self._bounds[lo], self._bounds[hi]
        index = self._order[a:b]
        # The rows as pieces back to back: each row's segments, then its padding. Every position of the
        # batch is one step over the pieces, so each feature is one gather or one subtraction, in place.
        used = self._used[lo:hi]
        row_of = np.repeat(np.arange(n_rows), np.diff(self._bounds[lo:hi + 1]))
        order = np.argsort(np.concatenate([2 * row_of, 2 * np.arange(n_rows) + 1]), kind="stable")
        pieces = np.concatenate([self._positions[a:b], msl - used])[order]
        first = np.cumsum(pieces) - pieces
        starts = np.concatenate([seg.starts[index], np.zeros(n_rows, np.int64)])[order]
        mask_from = np.concatenate([seg.mask_from[index], np.zeros(n_rows, np.int64)])[order]
        wide = index_dtype(len(seg.tokens), n_rows * msl)
        step = np.arange(n_rows * msl, dtype=wide)
        source = np.repeat((starts - first).astype(wide), pieces)
        source += step
        k = step.astype(np.int32, copy=False)  # step itself when it is int32: not needed any more
        k -= np.repeat(first.astype(np.int32), pieces)  # position within its piece

        out = np.empty((n_rows, self.features, msl), dtype=np.int32)
        shape = (n_rows, msl)
        out[:, INPUT_IDS, :] = np.take(seg.tokens, source, mode="clip").reshape(shape)
        source += 1
        out[:, LABELS, :] = np.take(seg.tokens, source, mode="clip").reshape(shape)
        if self.features > POSITION_IDS:
            out[:, POSITION_IDS, :] = k.reshape(shape)
            span = np.repeat((pieces - 1).astype(np.int32), pieces)
            span -= k
            out[:, ATTENTION_SPAN, :] = span.reshape(shape)
        if seg.trained is not None:
            out[:, ATTENTION_MASK, :] = np.take(seg.trained, source, mode="clip").reshape(shape)
        elif mask_from.any():
            out[:, ATTENTION_MASK, :] = (k >= np.repeat(mask_from.astype(np.int32), pieces)).reshape(shape)
        else:
            out[:, ATTENTION_MASK, :] = 1
        if self.features == KEY_PADDING_MASK + 1:  # of the input token (source - 1 now): 1 where not attended
            out[:, KEY_PADDING_MASK, :] = ~np.take(seg.attend, source - 1, mode="clip").reshape(shape)
        # Padding, where there is any: pad ids and labels, no loss, zero span and position.
        for r in np.flatnonzero(used < msl).tolist():
            out[r, :, used[r]:] = self._padding[:, used[r]:]
        if cfg.inverted_mask:
            out[:, ATTENTION_MASK, :] ^= 1
        return out

    def _copied_rows(self, lo: int, hi: int) -> np.ndarray:
        """`rows_between` by block copies: per segment its tokens, labels and ramps, then each row's padding.

        The same rows as the gathers, at about half their cost when segments
        are long (LMData_VSL's): a gather costs every position an index, a
        copy costs a segment a few slicings.
        """
        cfg, seg = self.config, self.segments
        msl = cfg.max_seq_length
        a, b = int(self._bounds[lo]), int(self._bounds[hi])
        index = self._order[a:b]
        starts, lengths = seg.starts[index].tolist(), self._positions[a:b].tolist()
        mask_from = seg.mask_from[index].tolist()
        bounds = (self._bounds[lo:hi + 1] - a).tolist()  # row r's segments: [bounds[r], bounds[r + 1])
        rising = np.arange(msl, dtype=np.int32)  # position ids 0 .. n-1: its first n
        falling = rising[::-1].copy()  # attention spans n-1 .. 0: its last n
        tokens, ramps = seg.tokens, self.features > POSITION_IDS
        out = np.empty((hi - lo, self.features, msl), dtype=np.int32)
        out[:, ATTENTION_MASK, :] = 1
        for row, first, end in zip(out, bounds, bounds[1:]):
            ids, mask, labels = row[INPUT_IDS], row[ATTENTION_MASK], row[LABELS]
            if ramps:
                span, position = row[ATTENTION_SPAN], row[POSITION_IDS]
            at = 0
            for start, n, untrained in zip(starts[first:end], lengths[first:end], mask_from[first:end]):
                ids[at:at + n] = tokens[start:start + n]
                labels[at:at + n] = tokens[start + 1:start + n + 1]
                if untrained:  # Summarization_VSL: the prompt's positions (fewer than the segment's)
                    mask[at:at + untrained] = 0
                if ramps:
                    span[at:at + n] = falling[msl - n:]
                    position[at:at + n] = rising[:n]
                at += n
            if at < msl:
                row[:, at:] = self._padding[:, at:]
        if cfg.inverted_mask:
            out[:, ATTENTION_MASK, :] ^= 1
        return out


def index_dtype(tokens: int, positions: int) -> type:
    """The integer type of a batch's steps and token indices: int32 while the batch's positions and the
    group's tokens (the largest index is the last token's, a label) are fewer than 2**31, else int64."""
    return np.int32 if max(tokens, positions) < 2**31 else np.int64


def pack_segments(segments: Segments, cfg: VslConfig, features: int = len(VSL_FEATURES)) -> PackedRows:
    """Segments -> rows: best-fit decreasing (`pack_bins`), or one row per segment without pack_sequences."""
    if cfg.pack_sequences:
        row_of, n_rows = pack_bins(segments.positions, cfg.max_seq_length)
    else:
        row_of, n_rows = np.arange(len(segments), dtype=np.int64), len(segments)
    return PackedRows(segments, row_of, n_rows, cfg, features)


def _window_block(batch, segments: Segments, used: int, dropped: Counter, cfg: VslConfig):
    from transforms.core.records import WindowBlock

    source = batch.group.source
    batch.stats.add("docs_used", used, source)
    for reason, n in dropped.items():
        batch.stats.add(f"dropped.{reason}", n, source)
    return WindowBlock(batch.group, pack_segments(segments, cfg), batch.stats)


def vsl_lm_batch(batch, cfg: VslConfig, seed: int):
    """TokenBatch of documents (ending in EOS) -> WindowBlock of PackedRows."""
    from transforms.core.seeds import derive_seed

    # Seeded by the group's identity, as LMData's short_seq_prob: no draw depends on another group.
    rng = random.Random(derive_seed(seed, "short_seq_prob", batch.group.name))
    segments, used, dropped = lm_segments([t[0] for t in batch.tokens], cfg, rng, flat=batch.flat)
    return _window_block(batch, segments, used, dropped, cfg)


def vsl_summarization_batch(batch, cfg: VslConfig):
    """TokenBatch of (prompt ids, completion ids) -> WindowBlock of PackedRows."""
    segments, used, dropped = summarization_segments(batch.tokens, cfg)
    return _window_block(batch, segments, used, dropped, cfg)
