"""Building the three reference tokenizer types from their files, on `tokenizers`.

Pure: this module receives file contents (see `transforms.io.tokenizer_files`)
and never touches the file system or the network. It reproduces what the
reference (Cerebras Model Zoo 2.1.x) gets from its BPETokenizer, from
`tokenizers.Tokenizer.from_file` and from transformers' `AutoTokenizer`, without
depending on transformers (SPEC 1a "Tokenization", COMPAT "Tokenizing").
Which library then encodes (`TokenizerFiles.backend`) is `backends`' business.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections import OrderedDict
from typing import Any, Optional

import numpy as np
import tokenizers
from tokenizers import AddedToken, decoders, models, pre_tokenizers, processors

from transforms.core.tokenizer.backends import AUTO, BACKENDS, affixes
from transforms.core.tokenizer.fast import DEFAULT_CHECK_SHARE
from transforms.core.tokenizer.tokenizer import Tokenizer, _vocab_size

__all__ = ["GPT2", "NEOX", "HF", "KINDS", "BACKENDS", "TokenizerFiles", "build_tokenizer", "shared_tokenizer"]

GPT2, NEOX, HF = "GPT2Tokenizer", "NeoXTokenizer", "HuggingFaceTokenizer"
KINDS = (GPT2, NEOX, HF)

EOS_TEXT = "<|endoftext|>"
PAD_TEXT = "<|padding|>"

# transformers classes whose fast __init__ rebuilds the post-processor from
# add_bos_token/add_eos_token (LlamaTokenizerFast.update_post_processor).
_LLAMA_LIKE = frozenset(
    {
        "LlamaTokenizer",
        "LlamaTokenizerFast",
        "CodeLlamaTokenizer",
        "CodeLlamaTokenizerFast",
        "GemmaTokenizer",
        "GemmaTokenizerFast",
    }
)
_SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
# transformers < 4.45 (the reference's era) cleaned up decode spaces unless the
# config said otherwise; FIM decodes and re-encodes, so the default matters.
_CLEANUP_DEFAULT = True


@dataclasses.dataclass(frozen=True)
class TokenizerFiles:
    """Everything needed to build a tokenizer: file contents and overrides, picklable."""

    kind: str
    tokenizer_json: Optional[str] = None  # NeoX file, or HF tokenizer.json
    encoder_json: Optional[str] = None  # GPT-2 encoder.json / HF vocab.json
    merges: Optional[str] = None  # GPT-2 vocab.bpe / HF merges.txt
    # dicts are left out of the hash (they are unhashable), not out of ==.
    tokenizer_config: Optional[dict] = dataclasses.field(default=None, hash=False)  # HF tokenizer_config.json
    special_tokens_map: Optional[dict] = dataclasses.field(default=None, hash=False)  # HF special_tokens_map.json
    eos_id: Optional[int] = None  # --eos_id override
    pad_id: Optional[int] = None  # --pad_id override
    sep_token: Optional[str] = None  # Summarization; added to the vocabulary if missing
    extra_special_tokens: tuple = ()  # chat templates' control tokens (chatml), added if missing
    name: str = ""  # for messages and provenance
    backend: str = AUTO  # --tokenizer_backend: which library encodes (the ids are the same)
    check_share: float = DEFAULT_CHECK_SHARE  # --tokenizer_cross_check: texts fastokens' ids are checked on
    check_seed: int = 0  # --seed: which texts those are

    def load(self) -> "TokenizerFiles":
        """Itself: DoFns take these or a staged reference to them (transforms.io.tokenizer_files)."""
        return self


def build_tokenizer(files: TokenizerFiles) -> Tokenizer:
    """Build the pipeline tokenizer for `files.kind`; ValueError names the missing setting."""
    if files.backend not in BACKENDS:
        raise ValueError(f"--tokenizer_backend must be one of {', '.join(BACKENDS)}, got {files.backend!r}")
    if not 0 <= files.check_share <= 1:
        raise ValueError(f"--tokenizer_cross_check must be a share between 0 and 1, got {files.check_share!r}")
    if files.kind == GPT2:
        return _build_gpt2(files)
    if files.kind == NEOX:
        return _build_neox(files)
    if files.kind == HF:
        return _build_hf(files)
    raise ValueError(f"--tokenizer_type must be one of {', '.join(KINDS)}, got {files.kind!r}")


_SHARED: "OrderedDict[TokenizerFiles, Tokenizer]" = OrderedDict()
_SHARED_LOCK = threading.Lock()
_SHARED_MAX = 4


def shared_tokenizer(files: TokenizerFiles) -> Tokenizer:
    """`build_tokenizer(files)`, built once per process and shared; treat it as read-only.

    The launcher and every DoFn of a job build the same tokenizer; on a local
    runner they share a process, and each build costs a few tenths of a second.
    """
    with _SHARED_LOCK:
        tok = _SHARED.get(files)
        if tok is None:
            tok = _SHARED[files] = build_tokenizer(files)
            while len(_SHARED) > _SHARED_MAX:
                _SHARED.popitem(last=False)
        else:
            _SHARED.move_to_end(files)
        return tok


def _build_gpt2(files: TokenizerFiles) -> Tokenizer:
    if files.encoder_json is None:
        raise ValueError("--encoder_file is required for GPT2Tokenizer (encoder.json / vocab.json)")
    if files.merges is None:
        raise ValueError("--vocab_file is required for GPT2Tokenizer (vocab.bpe / merges.txt)")
    vocab = _parse_json(files.encoder_json, f"--encoder_file {files.name}")
    # "<|endoftext|>" stays an ordinary vocabulary entry: the reference's
    # BPETokenizer splits that literal text into ordinary pieces.
    backend = _byte_level_bpe(vocab, files.merges, add_prefix_space=False, name=files.name)
    sep_id = _ensure_sep(backend, files.sep_token)
    _ensure_special(backend, files.extra_special_tokens)
    eos = files.eos_id if files.eos_id is not None else vocab.get(EOS_TEXT)
    if eos is None:
        raise ValueError(f"GPT2Tokenizer vocabulary {files.name!r} has no {EOS_TEXT!r} token; pass --eos_id")
    # SPEC: --pad_id is forced back to eos for GPT2Tokenizer.
    return _finish(files, backend, eos_id=eos, pad_id=eos, bos_id=None, sep_id=sep_id, clean_up=False)


def _build_neox(files: TokenizerFiles) -> Tokenizer:
    if files.tokenizer_json is None:
        raise ValueError("--encoder_file is required for NeoXTokenizer (its tokenizer.json)")
    backend = _from_json(files.tokenizer_json, f"--encoder_file {files.name}")
    sep_id = _ensure_sep(backend, files.sep_token)
    _ensure_special(backend, files.extra_special_tokens)
    eos = backend.token_to_id(EOS_TEXT)
    if eos is None and files.eos_id is None:
        raise ValueError(f"NeoXTokenizer {files.name!r} has no {EOS_TEXT!r} token; pass --eos_id")
    pad = backend.token_to_id(PAD_TEXT)
    pad = eos if pad is None else pad
    eos, pad = _apply_overrides(eos, pad, files)
    return _finish(files, backend, eos_id=eos, pad_id=pad, bos_id=None, sep_id=sep_id, clean_up=False)


def _build_hf(files: TokenizerFiles) -> Tokenizer:
    config = dict(files.tokenizer_config or {})
    special = _special_tokens(config, files.special_tokens_map or {})
    if files.tokenizer_json is not None:
        backend = _from_json(files.tokenizer_json, f"--huggingface_tokenizer {files.name}")
        _apply_add_prefix_space(backend, config)
    elif files.encoder_json is not None and files.merges is not None:
        backend = _gpt2_conversion(files, config, special)
    else:
        raise ValueError(
            f"--huggingface_tokenizer {files.name!r} has neither tokenizer.json nor vocab.json + merges.txt"
        )
    _add_config_tokens(backend, config, special)
    if config.get("tokenizer_class") in _LLAMA_LIKE:
        _llama_post_processor(backend, config, special, files.name)
    sep_id = _ensure_sep(backend, files.sep_token)
    _ensure_special(backend, files.extra_special_tokens)

    def tid(key: str) -> Optional[int]:
        tok = special.get(key)
        return None if tok is None else backend.token_to_id(tok.content)

    eos, pad, bos = tid("eos_token"), tid("pad_token"), tid("bos_token")
    if eos is None and files.eos_id is None:
        raise ValueError(
            f"Hugging Face tokenizer {files.name!r} defines no eos_token "
            "(tokenizer_config.json / special_tokens_map.json); pass --eos_id"
        )
    eos, pad = _apply_overrides(eos, eos if pad is None else pad, files)
    clean_up = config.get("clean_up_tokenization_spaces")
    clean_up = _CLEANUP_DEFAULT if clean_up is None else bool(clean_up)
    return _finish(files, backend, eos_id=eos, pad_id=pad, bos_id=bos, sep_id=sep_id, clean_up=clean_up)


def _apply_overrides(eos: Optional[int], pad: Optional[int], files: TokenizerFiles) -> tuple[int, int]:
    # SPEC: --eos_id sets eos = pad; --pad_id then sets pad.
    if files.eos_id is not None:
        eos = pad = files.eos_id
    if files.pad_id is not None:
        pad = files.pad_id
    return eos, pad  # type: ignore[return-value]


def _rebuild(files: TokenizerFiles, no_bos: bool) -> Tokenizer:
    """How a pickled Tokenizer comes back (`Tokenizer.__reduce__`): built again from its files."""
    tok = build_tokenizer(files)
    return tok.without_bos() if no_bos else tok


def _finish(
    files: TokenizerFiles,
    backend: tokenizers.Tokenizer,
    *,
    eos_id: int,
    pad_id: int,
    bos_id: Optional[int],
    sep_id: Optional[int],
    clean_up: bool,
) -> Tokenizer:
    size = _vocab_size(backend)
    for flag, value in (("--eos_id", eos_id), ("--pad_id", pad_id)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or not 0 <= value < size:
            raise ValueError(f"{flag} {value!r} is outside the vocabulary of {files.name!r} (size {size})")
    prepended = affixes(backend)[0]
    if bos_id is None and len(prepended) == 1:
        # No configured BOS (always so for GPT2/NeoX): a post-processor that
        # prepends one token, e.g. a template tokenizer.json, defines it.
        bos_id = prepended[0]
    adds_bos = bos_id is not None and prepended[:1] == [bos_id]
    return Tokenizer(
        kind=files.kind,
        backend=backend,
        eos_id=int(eos_id),
        pad_id=int(pad_id),
        bos_id=bos_id,
        sep_id=sep_id,
        adds_bos=adds_bos,
        clean_up_spaces=clean_up,
        files=files,
        rebuild=_rebuild,
        encoder_mode=files.backend,
    )


def _ensure_special(backend: tokenizers.Tokenizer, tokens: tuple) -> None:
    """Each token a special token of the vocabulary, added at its end when missing (a template's markers)."""
    missing = [t for t in tokens if backend.token_to_id(t) is None]
    if missing:
        backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in missing])


def _ensure_sep(backend: tokenizers.Tokenizer, sep: Optional[str]) -> Optional[int]:
    if sep is None:
        return None
    if backend.token_to_id(sep) is None:
        # A new special token: its literal text in documents now maps to sep_id
        # (true for GPT2Tokenizer too, which otherwise recognises no special text).
        backend.add_special_tokens([AddedToken(sep, special=True, normalized=False)])
    return backend.token_to_id(sep)


def _parse_json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{what}: not valid JSON ({e})") from None


def _from_json(text: str, what: str) -> tokenizers.Tokenizer:
    try:
        return tokenizers.Tokenizer.from_str(text)
    except Exception as e:  # the Rust side raises plain Exception
        raise ValueError(f"{what}: not a tokenizers JSON file ({e})") from None


def _parse_merges(text: str, name: str) -> list[tuple[str, str]]:
    merges = []
    for n, line in enumerate(text.split("\n")):
        line = line.rstrip("\r")
        if not line or (n == 0 and line.startswith("#version")):
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise ValueError(f"--vocab_file {name}: merges line {n + 1} is not 'a b': {line!r}")
        merges.append((parts[0], parts[1]))
    return merges


def _byte_level_bpe(vocab: dict, merges_text: str, *, add_prefix_space: bool, name: str) -> tokenizers.Tokenizer:
    if not isinstance(vocab, dict):
        raise ValueError(f"--encoder_file {name}: expected a JSON object of token -> id")
    model = models.BPE(vocab, _parse_merges(merges_text, name), fuse_unk=False)
    backend = tokenizers.Tokenizer(model)
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    return backend


# ------------------------------------------------- transformers emulation


def _added_token(value: Any, *, special: bool = True) -> Optional[AddedToken]:
    """A config value (str, {"content": ...} dict, AddedToken or None) as an AddedToken."""
    if value is None:
        return None
    if isinstance(value, AddedToken):
        return value
    if isinstance(value, str):
        return AddedToken(value, special=special, normalized=False)
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return AddedToken(
            value["content"],
            single_word=bool(value.get("single_word", False)),
            lstrip=bool(value.get("lstrip", False)),
            rstrip=bool(value.get("rstrip", False)),
            normalized=bool(value.get("normalized", not special)),
            special=bool(value.get("special", special)),
        )
    raise ValueError(f"unrecognised special-token value in the tokenizer config: {value!r}")


def _special_tokens(config: dict, special_map: dict) -> dict[str, Any]:
    """Special tokens as transformers resolves them: special_tokens_map.json wins over
    tokenizer_config.json, additional_special_tokens are merged."""
    special: dict[str, Any] = {k: _added_token(config.get(k)) for k in _SPECIAL_KEYS}
    additional = [_added_token(t) for t in config.get("additional_special_tokens") or []]
    for key, value in special_map.items():
        if key in _SPECIAL_KEYS:
            special[key] = _added_token(value)
        elif key == "additional_special_tokens" and isinstance(value, list):
            known = {t.content for t in additional}
            additional += [t for t in map(_added_token, value) if t.content not in known]
    special["additional_special_tokens"] = additional
    return special


def _gpt2_conversion(files: TokenizerFiles, config: dict, special: dict) -> tokenizers.Tokenizer:
    """transformers' GPT2Converter: the vocab.json + merges.txt layout."""
    vocab = _parse_json(files.encoder_json or "", f"--huggingface_tokenizer {files.name} vocab.json")
    backend = _byte_level_bpe(
        vocab, files.merges or "", add_prefix_space=bool(config.get("add_prefix_space", False)), name=files.name
    )
    bos = special.get("bos_token")
    if config.get("add_bos_token") and bos is not None and bos.content in vocab:
        backend.post_processor = processors.TemplateProcessing(
            single=f"{bos.content}:0 $A:1",
            pair=f"{bos.content}:0 $A:0 $B:1",
            special_tokens=[(bos.content, vocab[bos.content])],
        )
    else:
        backend.post_processor = processors.ByteLevel(trim_offsets=False)
    return backend


def _apply_add_prefix_space(backend: tokenizers.Tokenizer, config: dict) -> None:
    # GPT2/GPTNeoX/Roberta fast tokenizers force the config's add_prefix_space
    # onto a ByteLevel pre-tokenizer; only honoured when the config sets it.
    if "add_prefix_space" not in config or backend.pre_tokenizer is None:
        return
    state = json.loads(backend.to_str()).get("pre_tokenizer") or {}
    want = bool(config["add_prefix_space"])
    if state.get("type") == "ByteLevel" and state.get("add_prefix_space") != want:
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(
            add_prefix_space=want, use_regex=state.get("use_regex", True)
        )


def _add_config_tokens(backend: tokenizers.Tokenizer, config: dict, special: dict) -> None:
    """Add what PreTrainedTokenizerFast.__init__ adds: the config's added_tokens_decoder,
    then every named special token not yet an added token. A token already in the
    model vocabulary keeps its id but its text becomes recognised."""
    present = {t.content for t in backend.get_added_tokens_decoder().values()}
    decoder = config.get("added_tokens_decoder") or {}
    for _, value in sorted(decoder.items(), key=lambda kv: int(kv[0])):
        tok = _added_token(value, special=False)
        if tok is not None and tok.content not in present:
            (backend.add_special_tokens if tok.special else backend.add_tokens)([tok])
            present.add(tok.content)
    named = [special[k] for k in _SPECIAL_KEYS if special.get(k) is not None]
    named += special.get("additional_special_tokens") or []
    missing = []
    for tok in named:
        if tok.content not in present:
            missing.append(tok)
            present.add(tok.content)
    if missing:
        backend.add_special_tokens(missing)


def _llama_post_processor(backend: tokenizers.Tokenizer, config: dict, special: dict, name: str) -> None:
    """LlamaTokenizerFast.update_post_processor (run by its __init__ with defaults True/False)."""
    add_bos = bool(config.get("add_bos_token", True))
    add_eos = bool(config.get("add_eos_token", False))
    bos, eos = special.get("bos_token"), special.get("eos_token")
    if add_bos and bos is None:
        raise ValueError(f"Hugging Face tokenizer {name!r}: add_bos_token is true but bos_token is not set")
    if add_eos and eos is None:
        raise ValueError(f"Hugging Face tokenizer {name!r}: add_eos_token is true but eos_token is not set")
    single = f"{bos.content + ':0 ' if add_bos else ''}$A:0{' ' + eos.content + ':0' if add_eos else ''}"
    pair = f"{single}{' ' + bos.content + ':1' if add_bos else ''} $B:1{' ' + eos.content + ':1' if add_eos else ''}"
    specials = []
    if add_bos:
        specials.append((bos.content, backend.token_to_id(bos.content)))
    if add_eos:
        specials.append((eos.content, backend.token_to_id(eos.content)))
    backend.post_processor = processors.TemplateProcessing(single=single, pair=pair, special_tokens=specials)
