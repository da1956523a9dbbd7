"""TokenizeDocuments: DocBatch -> TokenBatch, in batches, with the tokenizer loaded once per worker."""

from __future__ import annotations

import collections
import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

import apache_beam as beam
import numpy as np
from apache_beam.utils.windowed_value import WindowedValue

from transforms.core.memory import release_free_memory
from transforms.core.records import DocBatch, GroupId, Origins, TokenBatch
from transforms.core.stats import ENCODER_CHECK, PROGRESS_BYTES, Stats
from transforms.core.threads import limit_native_threads
from transforms.core.timing import TIME_PREFIX
from transforms.core.tokenizer import TokenizerFiles, shared_tokenizer, tokenize_documents
from transforms.core.tokenizer.fast import Tally
from transforms.core.tokenizer.fast import tally as encoder_tally
from transforms.io import progress
from transforms.stages.coders import BatchCoder  # noqa: F401 - registers the batches' coder

__all__ = ["TokenizeDocuments", "TOKENIZE_BATCH_CHARS", "ENCODE_THREADS"]

# Texts per encode_batch call are capped by size: large enough to keep every
# core busy (encode_batch releases the GIL), small enough to bound memory.
TOKENIZE_BATCH_CHARS = 1 << 20
# Two calls in flight: while one turns its ids into arrays (holding the GIL),
# the other keeps the cores busy in Rust.
ENCODE_THREADS = 2


def _batches(texts: list[str], limit: int):
    start, size = 0, 0
    for i, t in enumerate(texts):
        size += len(t)
        if size >= limit:
            yield start, i + 1
            start, size = i + 1, 0
    if start < len(texts):
        yield start, len(texts)


@dataclasses.dataclass
class _InFlight:
    # Not the DocBatch: each slice of texts is freed as soon as it is encoded.
    group: GroupId
    stats: Stats
    parts: list  # per key, the futures of its slices in order
    origins: Origins
    window: object
    timestamp: object


class _TokenizeFn(beam.DoFn):
    """Encodes on a thread pool and hands a group on once the next one is queued.

    So one group's encoding (in Rust, without the GIL) overlaps the Python
    work around it: reading the next group before, packing the previous one
    after. Results keep their input order; finish_bundle drains the rest.
    """

    def __init__(self, files: TokenizerFiles, split_len, remove_bos_in_chunks: bool, append_eos: bool,
                 drop_bos: bool, process_cpus: Optional[int] = None):
        self._files = files
        self._process_cpus = process_cpus
        self._drop_bos = drop_bos
        self._split_len = split_len
        self._remove_bos = remove_bos_in_chunks
        self._append_eos = append_eos
        self._tokenizer = None
        self._pool = None
        self._pending: collections.deque = collections.deque()
        self._tokens = beam.metrics.Metrics.counter("tokenize", "tokens")

    def setup(self):
        limit_native_threads(self._process_cpus)  # before the tokenizer's first encode starts its pool
        tok = shared_tokenizer(self._files.load())
        self._tokenizer = tok.without_bos() if self._drop_bos and tok.adds_bos else tok
        self._pool = ThreadPoolExecutor(ENCODE_THREADS, thread_name_prefix="tokenize")

    def teardown(self):
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def start_bundle(self):
        # Left over only if the previous bundle failed: its work is not wanted any more.
        for job in self._pending:
            for futures in job.parts:
                for future in futures:
                    future.cancel()
        self._pending = collections.deque()

    def _encode(self, texts: list[str], progress_share: int, documents: int) -> tuple[float, float, list, Tally]:
        started = time.perf_counter()
        progress.begin("tokenize")
        with encoder_tally() as checks:  # what fastokens' cross-check did for these texts (fast.py)
            if self._append_eos:
                out = tokenize_documents(self._tokenizer, texts, split_len=self._split_len,
                                         remove_bos_in_chunks=self._remove_bos)
            else:
                out = self._tokenizer.encode_batch(texts)
        # The work the progress bar follows: this slice's share of the input, done.
        progress.count("documents", documents)
        progress.count("tokens", sum(len(ids) for ids in out))
        progress.end("tokenize", progress_share)  # after its tokens: the later stages' costs follow them
        return started, time.perf_counter(), out, checks

    def process(self, batch: DocBatch, window=beam.DoFn.WindowParam, timestamp=beam.DoFn.TimestampParam):
        n_keys = len(batch.docs[0].values) if batch.docs else 0
        slices = []  # (key, texts)
        for k in range(n_keys):
            texts = [d.values[k] for d in batch.docs]
            slices.extend((k, texts[lo:hi]) for lo, hi in _batches(texts, TOKENIZE_BATCH_CHARS))
        # Every stage does the group's whole share: this one as its slices are encoded, the later ones settle it.
        progress.expect(batch.group.name, batch.progress_bytes)
        if not slices:
            progress.done("tokenize", batch.progress_bytes)
        weights = [sum(map(len, texts)) for _, texts in slices]
        parts: list = [[] for _ in range(n_keys)]
        for (k, texts), share in zip(slices, progress.shares(batch.progress_bytes, weights)):
            parts[k].append(self._pool.submit(self._encode, texts, share, len(texts) if k == 0 else 0))
        batch.stats.totals[PROGRESS_BYTES] += batch.progress_bytes  # the encoder counts it for a remote job's bar
        self._pending.append(_InFlight(batch.group, batch.stats, parts, Origins.of(batch.docs), window, timestamp))
        # The newest group is encoded while the older ones go on downstream. A split job's group arrives as
        # one share per output: all of them stay in flight until the next group starts, or the large share
        # would go downstream while only a small one is being encoded, and the two would no longer overlap.
        newest = batch.group.sort_key
        while len(self._pending) > 1 and self._pending[0].group.sort_key != newest:
            yield self._finish(self._pending.popleft())

    def finish_bundle(self):
        while self._pending:
            yield self._finish(self._pending.popleft())

    def _finish(self, job: _InFlight) -> WindowedValue:
        group, stats = job.group, job.stats
        spans, flats, per_key = [], [], []
        for futures in job.parts:
            # Each key's arrays are copied once, back to back, and handed on as
            # views: the packer then reads the first key's stream without another
            # copy. A slice's own arrays are dropped as soon as they are copied.
            slices = [future.result() for future in futures]
            futures.clear()
            lengths = [len(a) for _, _, out, _ in slices for a in out]
            flat = np.empty(sum(lengths), dtype=np.int32)
            pos = 0
            for i, (start, end, out, checks) in enumerate(slices):
                spans.append((start, end))
                for name, value in dataclasses.asdict(checks).items():
                    stats.add(ENCODER_CHECK + name, value)
                for a in out:
                    flat[pos:pos + len(a)] = a
                    pos += len(a)
                slices[i] = None
            ends = np.cumsum(lengths).tolist()
            per_key.append([flat[a:b] for a, b in zip([0] + ends[:-1], ends)])
            flats.append(flat)
        tokens = list(zip(*per_key)) if per_key else []
        n_tokens = sum(len(flat) for flat in flats)
        stats.add("tokens", n_tokens, group.source)
        if spans:
            # From the first slice started to the last one done: the wall time this group kept the encoders busy.
            seconds = max(end for _, end in spans) - min(start for start, _ in spans)
            stats.totals[TIME_PREFIX + "tokenize"] += int(seconds * 1000)
        self._tokens.inc(n_tokens)
        release_free_memory()  # the group's texts and per-slice arrays are gone
        out = TokenBatch(group, tokens, stats, flat=flats[0] if flats else None, origins=job.origins)
        return WindowedValue(out, job.timestamp, [job.window])


class TokenizeDocuments(beam.PTransform):
    """PCollection[DocBatch] -> PCollection[TokenBatch].

    With `append_eos` (LMData, FIM) every document's ids end in EOS; without it
    (Summarization) each value is encoded as is. `drop_bos` (FIM) encodes
    without the tokenizer's BOS, which FIM puts before every segment instead.
    """

    def __init__(self, files: TokenizerFiles, *, split_len=None, remove_bos_in_chunks: bool = False,
                 append_eos: bool = True, drop_bos: bool = False, process_cpus: Optional[int] = None):
        """process_cpus: cores one worker process gets (None: all of this machine's)."""
        super().__init__()
        self._fn = _TokenizeFn(files, split_len, remove_bos_in_chunks, append_eos, drop_bos, process_cpus)

    def expand(self, batches):
        # TokenBatch: sized for Beam's metrics without pickling (transforms.stages.coders).
        return batches | "Tokenize" >> beam.ParDo(self._fn).with_output_types(TokenBatch)
