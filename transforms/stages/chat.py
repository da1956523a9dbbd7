"""The chat modes' two stages, with the template loaded once per worker:

    DocBatch ─EncodeConversations─► EncodedBatch ─(a mixture's selection)─► BuildChatRows ─► WindowBlock

Encoding and laying out rows are apart so that a mixture can choose among
encoded records: a chat record's tokens are only known once the template has
rendered it.
"""

from __future__ import annotations

import itertools
import time
from typing import Optional

import apache_beam as beam

from transforms.core.chat.batch import (ChatConfig, chat_encoder, conversation_rows, dpo_rows, encode_conversations,
                                        encode_pairs)
from transforms.core.chat.encode import ChatEncoder
from transforms.core.memory import release_free_memory
from transforms.core.records import EncodedBatch, PerPart, WindowBlock, for_group
from transforms.core.stats import PROGRESS_BYTES
from transforms.core.threads import limit_native_threads
from transforms.core.timing import TIME_PREFIX
from transforms.core.tokenizer import TokenizerFiles, shared_tokenizer
from transforms.io import progress
from transforms.stages.coders import BatchCoder  # noqa: F401 - registers the batches' coder

__all__ = ["EncodeConversations", "BuildChatRows"]


class _EncodeConversationsFn(beam.DoFn):
    def __init__(self, config: ChatConfig | PerPart, files: TokenizerFiles, process_cpus: Optional[int]):
        self._config = config
        self._files = files
        self._process_cpus = process_cpus
        self._encoder: Optional[ChatEncoder] = None

    def setup(self):
        limit_native_threads(self._process_cpus)
        tokenizer = shared_tokenizer(self._files.load())
        # Every part's config has the same template and loss span: only the lengths differ.
        first = self._config.values[0] if isinstance(self._config, PerPart) else self._config
        self._encoder = chat_encoder(first, tokenizer.backend)

    def process(self, batch):
        started = time.perf_counter()
        # Every stage does the group's whole share: this one as its records are encoded, EncodeRows settles it.
        progress.expect(batch.group.name, batch.progress_bytes)
        documents = len(batch.docs)
        config = for_group(self._config, batch.group)
        encode = encode_pairs if config.dpo else encode_conversations
        with progress.working("chat"):
            encoder = _Reporting(self._encoder, batch, config)
            out = encode(batch, encoder, config)
            encoder.flush()
            out.positions = encoder.positions
            progress.done("chat", batch.progress_bytes - encoder.reported)
        progress.count("documents", documents)
        out.stats.totals[TIME_PREFIX + "tokenize"] += int((time.perf_counter() - started) * 1000)
        out.stats.totals[PROGRESS_BYTES] += batch.progress_bytes  # the encoder counts it for a remote job's bar
        release_free_memory()
        yield out


def _build_rows(encoded: EncodedBatch, config: ChatConfig | PerPart):
    started = time.perf_counter()
    config = for_group(config, encoded.group)
    out = (dpo_rows if config.dpo else conversation_rows)(encoded, config)
    # The rows are laid out: what the encoder will compress is their positions, not the estimate.
    progress.count("positions", len(out) * config.max_seq_length - encoded.positions)
    out.stats.totals[TIME_PREFIX + "tokenize"] += int((time.perf_counter() - started) * 1000)
    return out


class _Reporting:
    """The chat encoder, telling the progress bar as it goes: the tokens it makes, the positions of the rows they
    will fill (a Chat or DPO row is padded; a Chat_VSL row is packed, its tokens until the rows are laid out),
    and the group's share of the input in proportion to the characters of the records encoded, in order (a DPO
    record is tokenized twice, once a response).

    What an encoder call made is reported when the next call begins (or the group ends, `flush`): by then its
    records have been fitted to their rows and counted, work that is part of their cost. Reported at once,
    that work would follow the last report of a group, unmeasured until the group ends.
    """

    def __init__(self, encoder: ChatEncoder, batch, config: ChatConfig):
        self._encoder = encoder
        self._row = 0 if config.vsl else config.max_seq_length  # a record's row, padded
        self._share = batch.progress_bytes
        # The records' characters up to the end of each one.
        self._ends = list(itertools.accumulate(sum(len(v) for v in d.values if isinstance(v, str))
                                               for d in batch.docs)) or [0]
        self._encoded = 0.0  # records
        self._pending: Optional[tuple] = None  # (records, tokens, positions) of the last call, not yet reported
        self.reported = 0  # bytes
        self.positions = 0  # reported

    def __getattr__(self, name):
        return getattr(self._encoder, name)

    def encode_many(self, conversations, **kwargs):
        self.flush()
        out = self._encoder.encode_many(conversations, **kwargs)
        encoded = [len(x.ids) for x in out if hasattr(x, "ids")]
        self._pending = (len(conversations), sum(encoded), self._row * len(encoded) or sum(encoded))
        return out

    def tokenize_many(self, conversations):
        self.flush()
        out = self._encoder.tokenize_many(conversations)
        encoded = [len(x.ids) for x in out if hasattr(x, "ids")]
        self._pending = (len(conversations), sum(encoded), self._row * len(encoded) or sum(encoded))
        return out

    def tokenize(self, messages, **kwargs):
        self.flush()
        out = self._encoder.tokenize(messages, **kwargs)
        self._pending = (0.5, len(out.ids), self._row // 2)
        return out

    def flush(self) -> None:
        """Report what the last call made (its records are done with)."""
        if self._pending is None:
            return
        records, tokens, positions = self._pending
        self._pending = None
        self._encoded += records
        done = int(self._encoded)
        chars = self._ends[min(done, len(self._ends)) - 1] if done else 0
        nbytes = self._share * chars // max(self._ends[-1], 1) - self.reported
        self.reported += nbytes
        self.positions += positions
        progress.count("tokens", tokens)
        progress.count("positions", positions)
        progress.done("chat", nbytes)


class EncodeConversations(beam.PTransform):
    """PCollection[DocBatch] -> PCollection[EncodedBatch]: per kept record, its token arrays (Chat, Chat_VSL: ids,
    trained[, attend]; DPO: prompt, chosen, rejected).

    Normalizes the contents, renders each record with the chat template,
    tokenizes it (special-token text inside a message is plain text) and
    fits it to its row; drops are counted by reason in the batch's stats.
    """

    def __init__(self, config: ChatConfig | PerPart, tokenizer_files: TokenizerFiles, *,
                 process_cpus: Optional[int] = None):
        super().__init__()
        self._fn = _EncodeConversationsFn(config, tokenizer_files, process_cpus)

    def expand(self, batches):
        return batches | "Encode" >> beam.ParDo(self._fn).with_output_types(EncodedBatch)


class BuildChatRows(beam.PTransform):
    """PCollection[EncodedBatch] -> PCollection[WindowBlock] of rows built a batch at a time when they are encoded
    (Chat: [n, 3, msl]; Chat_VSL: [n, 5, msl], conversations packed; DPO: [n, 6, msl]); the records written are
    counted here (documents used, tokens by role), so that a mixture's copies count as what they are."""

    def __init__(self, config: ChatConfig | PerPart):
        super().__init__()
        self._config = config

    def expand(self, encoded):
        return encoded | "LayOut" >> beam.Map(_build_rows, self._config).with_output_types(WindowBlock)
