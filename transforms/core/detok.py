"""Detokenized text sizes of rows (h5_dataset_stats.detokenized_chars/bytes), fast and exact.

`Tokenizer.decode_batch` costs about a quarter of a whole LMData run. For the
common byte-level BPE decoder the decoded text of a row is just the
concatenated bytes of its tokens, UTF-8-decoded with replacement: sizes
summed over a per-id table, with only the rare runs of tokens that split a
character decoded (`DetokCounter._sizes` says why that is exact). Any other
decoder (or post-decode clean-up) falls back to `decode_batch`; the tests
compare the two paths on random rows (tests/test_detok.py).
"""

from __future__ import annotations

import json
import threading
import weakref
from typing import Optional

import numpy as np

from transforms.core.tokenizer.exact import byte_stand_ins

__all__ = ["DetokCounter", "token_pieces"]

# Rows per gather of whole rows' codes: 64 rows of 2048 ids are 1 MiB of codes, which stays in cache.
_CODE_ROWS = 64


class _ByteTable:
    """Per-id facts of a plain ByteLevel decoder: each id's bytes, and their sizes when valid UTF-8."""

    def __init__(self, pieces: list[bytes]):
        self.pieces = pieces
        texts = [_utf8_or_none(p) for p in pieces]
        self.whole = np.array([t is not None for t in texts], dtype=bool)
        # Every piece's bytes back to back, for gathering runs of them without a Python loop.
        self.piece_sizes = np.array([len(p) for p in pieces], dtype=np.int32)
        # Sizes of the pieces that are valid UTF-8 on their own, 0 for the others.
        self.nbytes = self.piece_sizes.astype(np.int64) * self.whole
        self.nchars = np.array([len(t) if t is not None else 0 for t in texts], dtype=np.int64)
        self.split_ids = np.flatnonzero(~self.whole)
        self.piece_starts = np.concatenate([[0], np.cumsum(self.piece_sizes)[:-1]]).astype(np.int32)
        self.piece_bytes = np.frombuffer(b"".join(pieces), dtype=np.uint8)
        self._codes: dict = {}

    def codes(self, width: int) -> Optional[tuple[np.ndarray, int, int]]:
        """(per-id codes, chars' shift, split's shift) for rows of `width` ids, or None if they do not fit.

        A code packs a piece's bytes, its characters and whether it splits a
        character into one uint64, each field wide enough for a whole row's
        sum, so that one gather and one sum per row give all three.
        """
        if width not in self._codes:
            bits_b = int(self.nbytes.max(initial=0) * width).bit_length()
            bits_c = int(self.nchars.max(initial=0) * width).bit_length()
            if bits_b + bits_c + width.bit_length() > 64:
                self._codes[width] = None
            else:
                codes = (self.nbytes.astype(np.uint64) | (self.nchars.astype(np.uint64) << np.uint64(bits_b))
                         | ((~self.whole).astype(np.uint64) << np.uint64(bits_b + bits_c)))
                self._codes[width] = (codes, bits_b, bits_b + bits_c)
        return self._codes[width]


def _utf8_or_none(data: bytes) -> Optional[str]:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _byte_level_table(tok) -> Optional[_ByteTable]:
    """The per-id table, or None if the decoder is not plain ByteLevel.

    tokenizers' ByteLevel decoder turns a token whose every character stands
    for a byte into those bytes, and any other token into its own UTF-8 text;
    added tokens too ("ĀĀ" decodes to two NUL bytes, "a b" to itself).
    """
    # The decoder's own state: the whole tokenizer's JSON (megabytes) would cost a twentieth of a second.
    decoder = json.loads(tok.backend.decoder.__getstate__()) if tok.backend.decoder is not None else {}
    if decoder.get("type") != "ByteLevel" or tok.clean_up_spaces:
        return None
    size = tok.backend.get_vocab_size(with_added_tokens=True)
    pieces: list[bytes] = [b""] * size
    for token, i in tok.backend.get_vocab(with_added_tokens=True).items():
        if i >= size:
            return None  # ids with a gap: no table to index
        try:
            pieces[i] = token.translate(_BYTES_ONLY).encode("latin-1")
        except UnicodeEncodeError:
            pieces[i] = token.encode("utf-8")
    return _ByteTable(pieces)


# str.translate + latin-1 turns a token of stand-ins into its bytes; any other character becomes one that
# latin-1 cannot encode.
_BYTES_ONLY = {**{c: 0xFFFF for c in range(256)}, **{ord(stand_in): b for stand_in, b in byte_stand_ins().items()}}


def token_pieces(tok) -> list[bytes]:
    """Per token id, the bytes of its text: exact for a plain ByteLevel decoder (a piece of a character is its
    bytes), else each id decoded alone (special tokens, skipped by the decoder, are empty)."""
    table = _table_of(tok)
    if table is not None:
        return table.pieces
    size = tok.backend.get_vocab_size(with_added_tokens=True)
    return [tok.backend.decode([i]).encode("utf-8", "surrogatepass") for i in range(size)]


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

    def __init__(self, tok):
        self._tok = tok
        self._table = _table_of(tok)

    def count(self, rows: list) -> tuple[int, int]:
        """rows: int arrays of token ids -> (chars, utf-8 bytes) of their decoded texts, summed."""
        return self._fast(rows) if self._table is not None else self._slow(rows)

    def count_rows(self, ids: np.ndarray, lengths: np.ndarray) -> tuple[int, int]:
        """`count([ids[i, :lengths[i]] for every row i])` of a [n, L] array, without a list of slices."""
        lengths = np.asarray(lengths, dtype=np.int64)
        if self._table is None:
            return self._slow([ids[i, :k] for i, k in enumerate(lengths.tolist())])
        if len(ids) and bool((lengths == ids.shape[1]).all()):
            return self._whole_rows(ids)  # nearly every row of a job
        flat = ids[np.arange(ids.shape[1])[None, :] < lengths[:, None]]  # row by row, in order
        return self._sizes(flat, lengths)

    def _whole_rows(self, ids: np.ndarray) -> tuple[int, int]:
        """Rows [n, L] of L ids each: a sum of packed codes per row (`_ByteTable.codes`), read where the rows
        lie (a view into the rows' array is not copied); the runs that split a character are then decoded
        only in the rows that hold one."""
        n, width = ids.shape
        packed = self._table.codes(width)
        if packed is None:
            return self._sizes(ids.reshape(-1), np.full(n, width, dtype=np.int64))
        codes, chars_at, split_at = packed
        chars = nbytes = 0
        split_rows = []
        for lo in range(0, n, _CODE_ROWS):
            sums = codes[ids[lo:lo + _CODE_ROWS]].sum(axis=1, dtype=np.uint64)
            nbytes += int((sums & np.uint64((1 << chars_at) - 1)).sum())
            chars += int(((sums >> np.uint64(chars_at)) & np.uint64((1 << (split_at - chars_at)) - 1)).sum())
            split_rows.append(lo + np.flatnonzero(sums >> np.uint64(split_at)))
        rows = np.concatenate(split_rows)
        if len(rows):
            run_chars, run_bytes = self._split_runs(ids[rows].reshape(-1), np.full(len(rows), width, np.int64))
            chars, nbytes = chars + run_chars, nbytes + run_bytes
        return chars, nbytes

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
            run_chars, run_bytes = self._split_runs(ids, lengths)
            chars, nbytes = chars + run_chars, nbytes + run_bytes
        return chars, nbytes

    def _split_runs(self, ids: np.ndarray, lengths: np.ndarray) -> tuple[int, int]:
        """(chars, bytes) of the runs of pieces that are not UTF-8 alone, decoded, each cut at its row's end.

        All runs are decoded in one call, a NUL byte between each two: a NUL
        is a whole character that no sequence continues into, so it ends an
        unfinished sequence before it as the end of a run would (one U+FFFD
        per maximal invalid part either way), and the decoding after it
        starts afresh. Subtracting the NULs gives the sum of the runs decoded
        one by one. Text in a script of multi-byte characters has runs in
        nearly every row, too many for a Python loop over them.
        """
        table = self._table
        split = np.flatnonzero(~table.whole[ids])
        if not len(split):
            return 0, 0
        new_run = np.ones(len(split), dtype=bool)
        new_run[1:] = np.diff(split) != 1
        # A run also ends with its row: a split token whose row differs from the one before it starts a run.
        row_starts = np.cumsum(lengths)[:-1]
        at = np.searchsorted(split, row_starts)
        inside = at < len(split)
        at = at[inside]
        new_run[at[split[at] == row_starts[inside]]] = True
        tokens = ids[split]
        sizes = table.piece_sizes[tokens]
        # int32 where the runs' bytes fit (a batch of rows is far below 2**31): these arrays are the size of its
        # split characters (half of all tokens in some scripts), and int64 would double the memory they touch.
        index = np.int32 if int(sizes.sum(dtype=np.int64)) < 2**31 else np.int64
        ends = np.cumsum(sizes, dtype=index)
        begins = ends - sizes
        # Each output byte's place in the table's bytes: its piece's start, plus its place in the piece.
        source = np.arange(int(ends[-1]), dtype=index) - np.repeat(begins - table.piece_starts[tokens], sizes)
        data = np.insert(table.piece_bytes[source], begins[new_run][1:], 0)
        text = data.tobytes().decode("utf-8", errors="replace")
        separators = int(new_run.sum()) - 1
        return len(text) - separators, len(text.encode("utf-8")) - separators
