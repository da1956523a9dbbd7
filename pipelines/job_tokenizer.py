"""The job's tokenizer, from its settings: the files `plan_job` reads, and a head start on building it.

Building the tokenizer is a third of the command's start-up: `tokenizers`
parses the vocabulary (~0.1 s), fastokens loads its own copy (~0.2 s, without
the GIL), the detokenized-size table is made (~0.1 s). None of it needs Beam,
so `warm` can run on a thread while the command imports Beam (most of the
start-up, holding the GIL, leaving the other core idle); `plan_job` then
finds the same tokenizer built (`shared_tokenizer` is keyed by these files
and settings) or waits for it under its lock.
"""

import json

from pipelines.config import Config
from transforms.core.chat.template import CHATML_TOKENS, template_from_config
from transforms.core.detok import DetokCounter
from transforms.core.modes import PAIR
from transforms.core.tokenizer import TokenizerFiles, shared_tokenizer
from transforms.io.tokenizer_files import autotokenizer_files, custom_tokenizer_files, read_tokenizer_files

__all__ = ["chat_template_setting", "tokenizer_files", "warm"]


def tokenizer_files(config: Config) -> TokenizerFiles:
    """The tokenizer's files and settings; FileNotFoundError, ValueError or OSError name what is wrong."""
    files = _read(config, config.chat_template)
    if config.traits.templated and config.chat_template is None and config.cerebras_config:
        if template_from_config(files.tokenizer_config or {}) is None:
            files = _read(config, "chatml")  # see chat_template_setting
    return files


def chat_template_setting(config: Config, files: TokenizerFiles):
    """The chat template the job uses: --chat_template as given, except for a Cerebras 2.10 config whose
    tokenizer has no template of its own: 2.10 renders those with ChatML [B/utils.py:1690-1702], so "chatml"."""
    if config.chat_template is None and config.cerebras_config and \
            template_from_config(files.tokenizer_config or {}) is None:
        return "chatml"
    return config.chat_template


def _read(config: Config, chat_template) -> TokenizerFiles:
    settings = dict(
        eos_id=config.eos_id, pad_id=config.pad_id,
        sep_token=config.sep_token if config.traits.record == PAIR else None,
        backend=config.tokenizer_backend, check_share=config.tokenizer_cross_check, check_seed=config.seed,
        # ChatML's markers must be tokens for its turns to end in one: added where the vocabulary lacks them.
        extra_special_tokens=CHATML_TOKENS if chat_template == "chatml" else ())
    params = json.loads(config.tokenizer_params or "{}")  # a mapping setting is kept as JSON text
    if config.custom_tokenizer:
        return custom_tokenizer_files(config.custom_tokenizer, params, **settings)
    if params:  # huggingface_tokenizer with AutoTokenizer's arguments
        return autotokenizer_files(config.huggingface_tokenizer, params, **settings)
    return read_tokenizer_files(
        config.tokenizer_type, vocab_file=config.vocab_file, encoder_file=config.encoder_file,
        huggingface_tokenizer=config.huggingface_tokenizer, **settings)


def warm(config: Config) -> None:
    """Build what the job will ask of its tokenizer, into this process's caches."""
    tokenizer = shared_tokenizer(tokenizer_files(config))
    tokenizer.fingerprint()
    if not config.traits.templated:  # chat encodes with offsets, on tokenizers itself
        tokenizer.encoder
    DetokCounter(tokenizer)
