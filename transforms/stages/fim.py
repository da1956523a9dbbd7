"""ApplyFim: packed LMData rows -> fill-in-the-middle rows (PSM / SPM / AR per segment)."""

from __future__ import annotations

import apache_beam as beam

from transforms.core.fim import FimConfig, fim_block
from transforms.core.records import PerPart, RowBlock, for_group
from transforms.core.tokenizer import TokenizerFiles, shared_tokenizer
from transforms.core.timing import timed
from transforms.io import progress
from transforms.stages.coders import BatchCoder  # noqa: F401 - registers the batches' coder

__all__ = ["ApplyFim"]


class _FimFn(beam.DoFn):
    def __init__(self, config: FimConfig | PerPart, tokenizer_files: TokenizerFiles, seed: int):
        self._config = config
        self._files = tokenizer_files
        self._seed = seed
        self._tokenizer = None

    def setup(self):
        tok = shared_tokenizer(self._files.load())
        # Segments are re-encoded without BOS: the config puts BOS before each segment itself.
        self._tokenizer = tok.without_bos() if tok.adds_bos else tok

    def process(self, block):
        tok = self._tokenizer
        with progress.working("fim", key=block.group.name):
            out = timed("fim", fim_block)(block, for_group(self._config, block.group), tok.encode,
                                          lambda ids: tok.decode(ids, skip_special_tokens=False), self._seed)
        yield out


class ApplyFim(beam.PTransform):
    """PCollection[RowBlock] (packed, mask not inverted) -> PCollection[RowBlock] of FIM rows."""

    def __init__(self, config: FimConfig | PerPart, *, tokenizer_files: TokenizerFiles, seed: int):
        super().__init__()
        self._fn = _FimFn(config, tokenizer_files, seed)

    def expand(self, blocks):
        return blocks | "Fim" >> beam.ParDo(self._fn).with_output_types(RowBlock)
