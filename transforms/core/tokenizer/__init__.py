"""Tokenizers for the three reference tokenizer types, encoding with `tokenizers` or, where exact, `tiktoken`.

One idea per module:

- `load`: `TokenizerFiles` (file contents and overrides) -> `Tokenizer`, for
  GPT2Tokenizer, NeoXTokenizer and HuggingFaceTokenizer, on `tokenizers`;
  `shared_tokenizer` builds one per process.
- `tokenizer`: the `Tokenizer` the pipeline uses (resolved ids, encode,
  decode, provenance fingerprint).
- `backends`: who encodes, `tokenizers` or tiktoken, chosen per tokenizer
  (`--tokenizer_backend auto|tokenizers|tiktoken`); the ids are the same.
- `exact`: why tiktoken's BPE gives `tokenizers`' ids, and the check of it.
- `cutting`: documents to ids: the reference's split_text rule, EOS, and
  long texts cut at safe spaces at bounded cost.
- `check_cache`: the encoders' load checks, made once per process, and once
  per machine in the store the I/O layer hands in (`transforms.io.machine_cache`).

Imports among them run one way, load -> tokenizer -> cutting -> backends ->
exact (and check_cache): nothing imports a module above it, not even for type hints.
"""

from transforms.core.tokenizer.backends import BACKENDS
from transforms.core.tokenizer.cutting import (
    PIECE_CHARS,
    UNCUT_CHARS,
    encode_bounded,
    piece_spans,
    split_text,
    tokenize_documents,
)
from transforms.core.tokenizer.load import GPT2, HF, KINDS, NEOX, TokenizerFiles, build_tokenizer, shared_tokenizer
from transforms.core.tokenizer.tokenizer import Tokenizer

__all__ = [
    "GPT2",
    "NEOX",
    "HF",
    "KINDS",
    "BACKENDS",
    "TokenizerFiles",
    "Tokenizer",
    "build_tokenizer",
    "shared_tokenizer",
    "split_text",
    "tokenize_documents",
    "encode_bounded",
    "piece_spans",
    "UNCUT_CHARS",
    "PIECE_CHARS",
]
