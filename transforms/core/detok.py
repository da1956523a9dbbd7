"""Detokenized text sizes of rows (h5_dataset_stats.detokenized_chars/bytes), fast and exact.

`Tokenizer.decode_batch` costs about a quarter of a whole LMData run. For the
common byte-level BPE decoder the decoded text of a row is just the
concatenated bytes of its tokens, UTF-8-decoded with replacement: gather the
bytes with numpy, decode each row once. Any other decoder (or post-decode
clean-up) falls back to `decode_batch`, and the fast path checks itself
against it on a sample when it is built.
"""

from __future__ import annotations

import json
from typing import Optional

import numpy as np

__all__ = ["DetokCounter"]


def _byte_level_table(tok) -> Optional[tuple[np.ndarray, np.ndarray]]:
    """(flat uint8 bytes, offsets) of every id, or None if the decoder is not plain ByteLevel."""
    spec = json.loads(tok.backend.to_str())
    decoder = spec.get("decoder") or {}
    if decoder.get("type") != "ByteLevel" or getattr(tok, "_clean_up_spaces", False):
        return None
    # GPT-2's printable stand-ins for bytes, inverted.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    unbyte = {chr(c): b for b, c in zip(bs, cs)}
    size = tok.backend.get_vocab_size(with_added_tokens=True)
    pieces: list[bytes] = [b""] * size
    added = {t["id"]: t["content"] for t in spec.get("added_tokens", [])}
    for token, i in tok.backend.get_vocab(with_added_tokens=True).items():
        if i >= size:
            return None
        if i in added:
            pieces[i] = added[i].encode("utf-8")
        elif all(ch in unbyte for ch in token):
            pieces[i] = bytes(unbyte[ch] for ch in token)
        else:
            return None
    lengths = np.array([len(p) for p in pieces], dtype=np.int64)
    offsets = np.zeros(size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return np.frombuffer(b"".join(pieces), dtype=np.uint8), offsets


class DetokCounter:
    """Counts the characters and UTF-8 bytes of decoded rows, equal to `tok.decode` on each row."""

    def __init__(self, tok, sample: Optional[list] = None):
        self._tok = tok
        self._table = _byte_level_table(tok)
        if self._table is not None and sample:
            # Never trust the shortcut blindly: it must agree with the real decoder.
            if self._fast(sample) != self._slow(sample):
                self._table = None

    def count(self, rows: list) -> tuple[int, int]:
        """rows: int arrays of token ids -> (chars, utf-8 bytes) of their decoded texts, summed."""
        return self._fast(rows) if self._table is not None else self._slow(rows)

    def _slow(self, rows: list) -> tuple[int, int]:
        texts = self._tok.decode_batch([np.asarray(r).tolist() for r in rows])
        return sum(len(t) for t in texts), sum(len(t.encode("utf-8", errors="surrogatepass")) for t in texts)

    def _fast(self, rows: list) -> tuple[int, int]:
        # One gather for all rows, then one decode per row on a slice of the same buffer.
        data, offsets = self._table
        if not rows:
            return 0, 0
        ids = np.concatenate([np.asarray(r, dtype=np.int64) for r in rows])
        lengths = offsets[ids + 1] - offsets[ids]
        ends = np.cumsum(lengths)
        starts = np.repeat(offsets[ids] - (ends - lengths), lengths)
        buffer = data[starts + np.arange(int(ends[-1]) if len(ends) else 0)].tobytes()
        row_ends = np.cumsum([len(r) for r in rows])
        cuts = [0] + [int(ends[i - 1]) if i else 0 for i in row_ends.tolist()]
        chars = nbytes = 0
        for a, b in zip(cuts[:-1], cuts[1:]):
            text = buffer[a:b].decode("utf-8", errors="replace")
            chars += len(text)
            nbytes += len(text.encode("utf-8"))
        return chars, nbytes
