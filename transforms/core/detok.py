"""Detokenized text sizes of rows (h5_dataset_stats.detokenized_chars/bytes), fast and exact.

`Tokenizer.decode_batch` costs about a quarter of a whole LMData run. For the
common byte-level BPE decoder the decoded text of a row is just the
concatenated bytes of its tokens, UTF-8-decoded with replacement: sizes
summed over a per-id table, with only the rare runs of tokens that split a
character decoded (`DetokCounter._fast` says why that is exact). Any other decoder (or post-decode clean-up) falls back to
`decode_batch`, and the fast path checks itself against it on a sample when
one is given.
"""

from __future__ import annotations

import json
import threading
import weakref
from typing import Optional

import numpy as np

from transforms.core.tokenizer.exact import byte_stand_ins

__all__ = ["DetokCounter"]


class _ByteTable:
    """Per-id facts of a plain ByteLevel decoder: each id's bytes, and their sizes when valid UTF-8."""

    def __init__(self, pieces: list[bytes]):
        self.pieces = pieces
        texts = [_utf8_or_none(p) for p in pieces]
        self.whole = np.array([t is not None for t in texts], dtype=bool)
        # Sizes of the pieces that are valid UTF-8 on their own, 0 for the others.
        self.nbytes = np.array([len(p) for p in pieces], dtype=np.int64) * self.whole
        self.nchars = np.array([len(t) if t is not None else 0 for t in texts], dtype=np.int64)
        self.split_ids = np.flatnonzero(~self.whole)


def _utf8_or_none(data: bytes) -> Optional[str]:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _byte_level_table(tok) -> Optional[_ByteTable]:
    """The per-id table, or None if the decoder is not plain ByteLevel."""
    spec = json.loads(tok.backend.to_str())
    decoder = spec.get("decoder") or {}
    if decoder.get("type") != "ByteLevel" or getattr(tok, "_clean_up_spaces", False):
        return None
    # Each byte's printable stand-in maps to the latin-1 character of that byte,
    # so a token is one translate + encode.
    unbyte = {ord(stand_in): b for stand_in, b in byte_stand_ins().items()}
    size = tok.backend.get_vocab_size(with_added_tokens=True)
    pieces: list[bytes] = [b""] * size
    added = {t["id"]: t["content"] for t in spec.get("added_tokens", [])}
    for token, i in tok.backend.get_vocab(with_added_tokens=True).items():
        if i >= size:
            return None
        if i in added:
            pieces[i] = added[i].encode("utf-8")
            continue
        try:
            pieces[i] = token.translate(unbyte).encode("latin-1")
        except UnicodeEncodeError:
            return None  # a character that is no byte's stand-in
    return _ByteTable(pieces)


_TABLES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_TABLES_LOCK = threading.Lock()


def _table_of(tok) -> Optional[_ByteTable]:
    # Built once per tokenizer object: each writer's setup() would otherwise rebuild it.
    with _TABLES_LOCK:
        if tok not in _TABLES:
            _TABLES[tok] = _byte_level_table(tok)
        return _TABLES[tok]


class DetokCounter:
    """Counts the characters and UTF-8 bytes of decoded rows, equal to `tok.decode` on each row."""

    def __init__(self, tok, sample: Optional[list] = None):
        self._tok = tok
        self._table = _table_of(tok)
        if self._table is not None and sample:
            # Never trust the shortcut blindly: it must agree with the real decoder.
            if self._fast(sample) != self._slow(sample):
                self._table = None

    def count(self, rows: list) -> tuple[int, int]:
        """rows: int arrays of token ids -> (chars, utf-8 bytes) of their decoded texts, summed."""
        return self._fast(rows) if self._table is not None else self._slow(rows)

    def count_rows(self, ids: np.ndarray, lengths: np.ndarray) -> tuple[int, int]:
        """`count([ids[i, :lengths[i]] for every row i])` of a [n, L] array, without a list of slices."""
        lengths = np.asarray(lengths, dtype=np.int64)
        if self._table is None:
            return self._slow([ids[i, :k] for i, k in enumerate(lengths.tolist())])
        if len(ids) and bool((lengths == ids.shape[1]).all()):
            flat = ids.reshape(-1)  # whole rows (nearly every row of a job): one copy at most
        else:
            flat = ids[np.arange(ids.shape[1])[None, :] < lengths[:, None]]  # row by row, in order
        return self._sizes(flat, lengths)

    def _slow(self, rows: list) -> tuple[int, int]:
        texts = self._tok.decode_batch([np.asarray(r).tolist() for r in rows])
        return sum(len(t) for t in texts), sum(len(t.encode("utf-8", errors="surrogatepass")) for t in texts)

    def _fast(self, rows: list) -> tuple[int, int]:
        rows = [np.asarray(r) for r in rows]
        if not rows:
            return 0, 0
        return self._sizes(np.concatenate(rows), np.array([len(r) for r in rows], dtype=np.int64))

    def _sizes(self, ids: np.ndarray, lengths: np.ndarray) -> tuple[int, int]:
        """The rows' tokens back to back, and each row's count of them -> (chars, bytes)."""
        # A piece that is valid UTF-8 on its own starts with a character start,
        # so it decodes to itself whatever precedes it, and ends any unfinished
        # sequence before it as the end of the text would. So a row's decoded
        # size is the table sizes of its whole pieces plus, decoded for real,
        # each run of other pieces (split characters, stray bytes), cut at row
        # ends. Such runs are rare and short.
        table = self._table
        # One pass over the ids (a count per id), then the sizes as dot products: cheaper than gathering sizes.
        per_id = np.bincount(ids, minlength=len(table.whole))
        chars, nbytes = int(per_id @ table.nchars), int(per_id @ table.nbytes)
        if per_id[table.split_ids].any():
            split = np.flatnonzero(~table.whole[ids])
            row_starts = np.concatenate([[0], np.cumsum(lengths)])
            row_of = np.searchsorted(row_starts, split, side="right")
            new_run = np.ones(len(split), dtype=bool)
            new_run[1:] = (np.diff(split) != 1) | (np.diff(row_of) != 0)
            bounds = np.append(np.flatnonzero(new_run), len(split)).tolist()
            split_ids = ids[split].tolist()
            pieces = table.pieces
            for lo, hi in zip(bounds[:-1], bounds[1:]):
                text = b"".join([pieces[t] for t in split_ids[lo:hi]]).decode("utf-8", errors="replace")
                chars += len(text)
                nbytes += len(text.encode("utf-8"))
        return chars, nbytes
