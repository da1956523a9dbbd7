"""EncodeConversations: DocBatch of Chat / Chat_VSL / DPO records -> rows, with the template loaded once per worker."""

from __future__ import annotations

import time
from typing import Optional

import apache_beam as beam

from transforms.core.chat.batch import ChatConfig, conversation_batch, dpo_batch
from transforms.core.chat.encode import ChatEncoder
from transforms.core.chat.template import ChatRenderer
from transforms.core.memory import release_free_memory
from transforms.core.records import PerPart, WindowBlock, for_group
from transforms.core.threads import limit_native_threads
from transforms.core.timing import TIME_PREFIX
from transforms.core.tokenizer import TokenizerFiles, shared_tokenizer
from transforms.io import progress
from transforms.io.coders import BatchCoder  # noqa: F401 - registers the batches' coder

__all__ = ["EncodeConversations"]


class _EncodeConversationsFn(beam.DoFn):
    def __init__(self, config: ChatConfig | PerPart, files: TokenizerFiles, process_cpus: Optional[int]):
        self._config = config
        self._files = files
        self._process_cpus = process_cpus
        self._encoder: Optional[ChatEncoder] = None

    def setup(self):
        limit_native_threads(self._process_cpus)
        tokenizer = shared_tokenizer(self._files.load())
        # Every part's config has the same template: only the lengths differ.
        first = self._config.values[0] if isinstance(self._config, PerPart) else self._config
        renderer = ChatRenderer(first.template, dict(first.template_tokens))
        self._encoder = ChatEncoder(renderer, tokenizer.backend)

    def process(self, batch):
        started = time.perf_counter()
        # Half of the group's share of the input is done when it is encoded, the rest when its rows are.
        tokenizing = int(batch.progress_bytes * progress.TOKENIZE_SHARE) if batch.docs else 0
        progress.expect(batch.group.name, batch.progress_bytes - tokenizing)
        documents = len(batch.docs)
        config = for_group(self._config, batch.group)
        build = dpo_batch if config.dpo else conversation_batch
        out = build(batch, self._encoder, config)
        progress.advance(tokenizing)
        progress.count("documents", documents)
        progress.count("tokens", out.stats["tokens"])  # the group's stats: nothing counted tokens before
        out.stats.totals[TIME_PREFIX + "tokenize"] += int((time.perf_counter() - started) * 1000)
        release_free_memory()
        yield out


class EncodeConversations(beam.PTransform):
    """PCollection[DocBatch] -> PCollection[WindowBlock] of rows built a batch at a time when they are encoded
    (Chat: [n, 3, msl]; Chat_VSL: [n, 5, msl]; DPO: [n, 6, msl]).

    Normalizes the contents, renders each record with the chat template,
    tokenizes it (special-token text inside a message is plain text) and
    builds its rows; drops are counted by reason in the batch's stats.
    """

    def __init__(self, config: ChatConfig | PerPart, tokenizer_files: TokenizerFiles, *,
                 process_cpus: Optional[int] = None):
        super().__init__()
        self._fn = _EncodeConversationsFn(config, tokenizer_files, process_cpus)

    def expand(self, batches):
        return batches | "Encode" >> beam.ParDo(self._fn).with_output_types(WindowBlock)
