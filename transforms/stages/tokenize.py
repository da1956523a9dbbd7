"""TokenizeDocuments: DocBatch -> TokenBatch, in batches, with the tokenizer loaded once per worker."""

from __future__ import annotations

import apache_beam as beam

from transforms.core.records import DocBatch, TokenBatch
from transforms.core.tokenizer import TokenizerFiles, shared_tokenizer, tokenize_documents
from transforms.core.timing import timed

__all__ = ["TokenizeDocuments", "TOKENIZE_BATCH_CHARS"]

# Texts per encode_batch call are capped by size: large enough to keep every
# core busy (encode_batch releases the GIL), small enough to bound memory.
TOKENIZE_BATCH_CHARS = 1 << 20


def _batches(texts: list[str], limit: int):
    start, size = 0, 0
    for i, t in enumerate(texts):
        size += len(t)
        if size >= limit:
            yield start, i + 1
            start, size = i + 1, 0
    if start < len(texts):
        yield start, len(texts)


class _TokenizeFn(beam.DoFn):
    def __init__(self, files: TokenizerFiles, split_len, remove_bos_in_chunks: bool, append_eos: bool,
                 drop_bos: bool):
        self._files = files
        self._drop_bos = drop_bos
        self._split_len = split_len
        self._remove_bos = remove_bos_in_chunks
        self._append_eos = append_eos
        self._tokenizer = None
        self._tokens = beam.metrics.Metrics.counter("tokenize", "tokens")

    def setup(self):
        tok = shared_tokenizer(self._files)
        self._tokenizer = tok.without_bos() if self._drop_bos and tok.adds_bos else tok

    def _encode(self, texts: list[str]) -> list:
        out = []
        for lo, hi in _batches(texts, TOKENIZE_BATCH_CHARS):
            if self._append_eos:
                out.extend(tokenize_documents(self._tokenizer, texts[lo:hi], split_len=self._split_len,
                                              remove_bos_in_chunks=self._remove_bos))
            else:
                out.extend(self._tokenizer.encode_batch(texts[lo:hi]))
        return out

    def process(self, batch: DocBatch):
        yield timed("tokenize", self._tokenize)(batch)

    def _tokenize(self, batch: DocBatch) -> TokenBatch:
        n_keys = len(batch.docs[0].values) if batch.docs else 0
        per_key = [self._encode([d.values[k] for d in batch.docs]) for k in range(n_keys)]
        tokens = list(zip(*per_key)) if per_key else []
        n_tokens = sum(len(a) for key in per_key for a in key)
        batch.stats.add("tokens", n_tokens, batch.group.source)
        self._tokens.inc(n_tokens)
        return TokenBatch(batch.group, tokens, batch.stats)


class TokenizeDocuments(beam.PTransform):
    """PCollection[DocBatch] -> PCollection[TokenBatch].

    With `append_eos` (LMData, FIM) every document's ids end in EOS; without it
    (Summarization) each value is encoded as is. `drop_bos` (FIM) encodes
    without the tokenizer's BOS, which FIM puts before every segment instead.
    """

    def __init__(self, files: TokenizerFiles, *, split_len=None, remove_bos_in_chunks: bool = False,
                 append_eos: bool = True, drop_bos: bool = False):
        super().__init__()
        self._fn = _TokenizeFn(files, split_len, remove_bos_in_chunks, append_eos, drop_bos)

    def expand(self, batches):
        return batches | "Tokenize" >> beam.ParDo(self._fn)
