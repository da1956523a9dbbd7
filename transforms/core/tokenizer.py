"""Tokenizers for the three reference tokenizer types, built on `tokenizers` alone.

Pure: this module receives file contents (see `transforms.io.tokenizer_files`)
and never touches the file system or the network. It reproduces what the
reference (Cerebras Model Zoo 2.1.x) gets from its BPETokenizer, from
`tokenizers.Tokenizer.from_file` and from transformers' `AutoTokenizer`, without
depending on transformers (SPEC 1a "Tokenization", COMPAT "Tokenizing").
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import threading
from collections import OrderedDict
from typing import Any, Iterable, Optional, Sequence

import numpy as np
import tokenizers
from tokenizers import AddedToken, decoders, models, pre_tokenizers, processors

__all__ = [
    "GPT2",
    "NEOX",
    "HF",
    "KINDS",
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
_PROBES = ("a", "0", "x y", ".", "\u4e00")

# Bounded tokenization cost (`encode_bounded`): a text of at most UNCUT_CHARS
# characters is encoded whole; a longer one in pieces of at most PIECE_CHARS
# characters (`piece_spans`). Read at call time (tests patch them).
# Large enough that real documents are encoded whole (exact by construction):
# a piece boundary inside a long run without spaces (say, a list of
# identifiers one per line) would split a word and change its ids.
UNCUT_CHARS = 1 << 20
PIECE_CHARS = 1 << 16
# Characters per encode_batch_fast call when encoding the pieces of one long
# text: keeps the tokenizer's intermediate state (a few hundred bytes per
# token) in the tens of megabytes, and both cores busy.
_PIECE_BATCH_CHARS = 4 << 20
# A space whose previous character is not whitespace: where the pre-tokenizers
# of byte-level BPE tokenizers (GPT-2, NeoX, Llama-3 style regexes) always
# start a new pre-token, so cutting there cannot change the ids.
_SAFE_CUT = re.compile(r"(?<=\S) ")
# Texts on which the cut convention of a tokenizer is checked (`_cut_plan`):
# cutting at every safe space must give the ids of the whole text.
_CUT_PROBES = (
    "Hello world, this is a test. It's 2024: 12345 items cost $3.50 -- ok? Yes!",
    "Spaces  double   triple\tand tabs\nnew line\n\n  indented line \u00a0nbsp x\r\ny",
    "\u00dcn\u00efc\u00f6d\u00e9 fa\u00e7ade \u4e2d\u6587 \u5b57\u7b26 \u65e5\u672c\u8a9e "
    "\ud55c\uad6d\uc5b4 \U0001f600 emoji \u0627\u0644\u0639\u0631\u0628\u064a\u0629 x",
    "def f(x):\n    return x ** 2  # comment\n\nclass A: pass",
    "<|endoftext|> special text <|padding|> and <s> </s> [CLS] end",
)


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
    name: str = ""  # for messages and provenance

    def load(self) -> "TokenizerFiles":
        """Itself: DoFns take these or a staged reference to them (transforms.io.tokenizer_files)."""
        return self


class Tokenizer:
    """The tokenizer the pipeline uses: a `tokenizers.Tokenizer` plus resolved ids.

    `bos_id` is the configured BOS token even when `adds_bos` is False (the
    reference's HF tokenizer names one without adding it); `adds_bos` says whether
    `encode` really prepends it.
    """

    def __init__(
        self,
        *,
        kind: str,
        backend: tokenizers.Tokenizer,
        eos_id: int,
        pad_id: int,
        bos_id: Optional[int],
        sep_id: Optional[int],
        adds_bos: bool,
        clean_up_spaces: bool,
        files: Optional[TokenizerFiles] = None,
        no_bos: bool = False,
    ) -> None:
        self.kind = kind
        self.eos_id = eos_id
        self.pad_id = pad_id
        self.bos_id = bos_id
        self.sep_id = sep_id
        self.adds_bos = adds_bos
        self.name = files.name if files is not None else ""
        self._backend = backend
        self._clean_up_spaces = clean_up_spaces
        self._files = files
        self._no_bos = no_bos
        self.vocab_size = _vocab_size(backend)
        self._fingerprint: Optional[str] = None
        self._cut: Optional[_CutPlan] = None

    def __repr__(self) -> str:
        return (
            f"Tokenizer({self.kind}, {self.name!r}, vocab_size={self.vocab_size}, eos={self.eos_id}, "
            f"pad={self.pad_id}, bos={self.bos_id}, adds_bos={self.adds_bos}, sep={self.sep_id})"
        )

    def __reduce__(self):
        # Rebuilding from the file contents is cheaper to ship than the backend.
        if self._files is None:
            raise TypeError("this Tokenizer was not built by build_tokenizer and cannot be pickled")
        return (_rebuild, (self._files, self._no_bos))

    @property
    def backend(self) -> tokenizers.Tokenizer:
        """The underlying `tokenizers.Tokenizer` (do not mutate)."""
        return self._backend

    def _encode_ids(self, texts: list[str], add_special_tokens: bool = True) -> list[list[int]]:
        # encode_batch_fast skips offsets; it releases the GIL and runs on all cores.
        encodings = self._backend.encode_batch_fast(list(texts), add_special_tokens=add_special_tokens)
        return [e.ids for e in encodings]

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        """Token ids of each text as int32 arrays, without EOS; long texts in pieces (`encode_bounded`)."""
        return encode_bounded(self, texts)

    def _cut_plan(self) -> "_CutPlan":
        if self._cut is None:
            self._cut = _find_cut_plan(self._backend)
        return self._cut

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self._backend.encode(text, add_special_tokens=True).ids, dtype=np.int32)

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = False) -> str:
        text = self._backend.decode(_as_id_list(ids), skip_special_tokens=skip_special_tokens)
        return _clean_up_tokenization(text) if self._clean_up_spaces else text

    def decode_batch(self, rows: Sequence[Iterable[int]], *, skip_special_tokens: bool = False) -> list[str]:
        texts = self._backend.decode_batch([_as_id_list(r) for r in rows], skip_special_tokens=skip_special_tokens)
        return [_clean_up_tokenization(t) for t in texts] if self._clean_up_spaces else texts

    def token_to_id(self, token: str) -> Optional[int]:
        """Exact vocabulary look-up (added tokens included), never a BPE piece."""
        return self._backend.token_to_id(token)

    def without_bos(self) -> "Tokenizer":
        """A copy whose encode does not prepend BOS (the reference's add_bos_token=False for FIM)."""
        if not self.adds_bos:
            return self
        state = json.loads(self._backend.to_str())
        original = state.get("post_processor")
        state["post_processor"] = _strip_bos_from_post_processor(original, self._backend.id_to_token(self.bos_id))
        backend = tokenizers.Tokenizer.from_str(json.dumps(state))
        if _prepended_ids(backend):
            raise ValueError(
                f"cannot stop tokenizer {self.name!r} from adding BOS: its post-processor "
                f"({(original or {}).get('type')}) is not a template"
            )
        return Tokenizer(
            kind=self.kind,
            backend=backend,
            eos_id=self.eos_id,
            pad_id=self.pad_id,
            bos_id=self.bos_id,
            sep_id=self.sep_id,
            adds_bos=False,
            clean_up_spaces=self._clean_up_spaces,
            files=self._files,
            no_bos=True,
        )

    def fingerprint(self) -> str:
        """sha256 of the tokenizer's JSON and every resolved id, for provenance."""
        if self._fingerprint is None:
            h = hashlib.sha256()
            meta = {
                "kind": self.kind,
                "eos_id": self.eos_id,
                "pad_id": self.pad_id,
                "bos_id": self.bos_id,
                "sep_id": self.sep_id,
                "adds_bos": self.adds_bos,
                "clean_up_tokenization_spaces": self._clean_up_spaces,
            }
            h.update(json.dumps(meta, sort_keys=True).encode())
            h.update(b"\0")
            h.update(self._backend.to_str().encode())
            self._fingerprint = h.hexdigest()
        return self._fingerprint


def _rebuild(files: TokenizerFiles, no_bos: bool) -> Tokenizer:
    tok = build_tokenizer(files)
    return tok.without_bos() if no_bos else tok


def _as_id_list(ids: Iterable[int]) -> list[int]:
    if isinstance(ids, np.ndarray):
        return ids.astype(np.int64, copy=False).tolist()
    return [int(i) for i in ids]


def _clean_up_tokenization(text: str) -> str:
    # transformers' PreTrainedTokenizerBase.clean_up_tokenization, verbatim semantics.
    return (
        text.replace(" .", ".")
        .replace(" ?", "?")
        .replace(" !", "!")
        .replace(" ,", ",")
        .replace(" ' ", "'")
        .replace(" n't", "n't")
        .replace(" 'm", "'m")
        .replace(" 's", "'s")
        .replace(" 've", "'ve")
        .replace(" 're", "'re")
    )


def _vocab_size(backend: tokenizers.Tokenizer) -> int:
    # max id + 1 as well, so that "every id < vocab_size" holds even with holes.
    vocab = backend.get_vocab(with_added_tokens=True)
    return max(len(vocab), max(vocab.values(), default=-1) + 1)


# ---------------------------------------------------------------- building


def build_tokenizer(files: TokenizerFiles) -> Tokenizer:
    """Build the pipeline tokenizer for `files.kind`; ValueError names the missing setting."""
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
    prepended = _prepended_ids(backend)
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
    )


def _prepended_ids(backend: tokenizers.Tokenizer) -> list[int]:
    """The ids the post-processor puts before the text, found empirically."""
    return _affixes(backend)[0]


def _affixes(backend: tokenizers.Tokenizer) -> tuple[list[int], list[int]]:
    """The ids the post-processor puts before and after the text, found empirically."""
    for probe in _PROBES:
        enc = backend.encode(probe, add_special_tokens=True)
        # special_tokens_mask marks post-processor tokens only, not special text.
        mask = enc.special_tokens_mask
        if 0 in mask:
            last = len(mask) - mask[::-1].index(0)
            return enc.ids[: mask.index(0)], enc.ids[last:]
    return [], []


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


def _strip_bos_from_post_processor(state: Optional[dict], bos_token: Optional[str]) -> Optional[dict]:
    """Drop every template BOS that directly precedes a sequence ($A/$B), recursively."""
    if state is None or bos_token is None:
        return state
    if state.get("type") == "Sequence":
        return {**state, "processors": [_strip_bos_from_post_processor(p, bos_token) for p in state["processors"]]}
    if state.get("type") != "TemplateProcessing":
        return state
    new = dict(state)
    for key in ("single", "pair"):
        items = state.get(key) or []
        new[key] = [
            item
            for i, item in enumerate(items)
            if not (
                item.get("SpecialToken", {}).get("id") == bos_token
                and i + 1 < len(items)
                and "Sequence" in items[i + 1]
            )
        ]
    return new


# ------------------------------------------------------------- documents


def split_text(text: str, split_len: int) -> list[str]:
    """The reference's split_text_and_tokenize cut: a piece ends at the first space at
    or after `split_len` characters from its start, and that space starts the next
    piece. An empty text has no pieces."""
    if split_len < 1:
        raise ValueError(f"--chunk_len_to_split must be at least 1, got {split_len}")
    pieces = []
    start, n = 0, len(text)
    while start < n:
        end = text.find(" ", start + split_len)
        if end < 0:
            end = n
        pieces.append(text[start:end])
        start = end
    return pieces


@dataclasses.dataclass(frozen=True)
class _CutPlan:
    """How a tokenizer's long texts are cut: the post-processor's ids around the
    text, and whether the space at a cut is dropped (see `piece_spans`)."""

    prefix: np.ndarray
    suffix: np.ndarray
    drop_space: bool
    exact: bool  # cutting at safe spaces reproduced the probes' ids
    safe_cut: "re.Pattern[str]" = _SAFE_CUT


def piece_spans(text: str, limit: Optional[int] = None, drop_space: bool = False,
                safe_cut: "re.Pattern[str]" = _SAFE_CUT) -> list[tuple[int, int]]:
    """Where a text is cut to bound the cost of tokenizing it: (start, end) of each piece.

    A text of at most `limit` (default PIECE_CHARS) characters is one piece. A
    longer one is cut before a *safe space* (a U+0020 whose previous character
    is not whitespace) at `limit // 2` to `limit` characters from the piece's
    start, the earliest such space; when there is none (a run without spaces),
    it is cut hard at exactly `limit` characters. Every piece has at most
    `limit` characters, so the cost is linear in the text's length whatever
    the tokenizer does on one giant "word". With `drop_space` the space at a
    safe cut belongs to no piece (tokenizers whose normalizer prepends the
    word marker to every encoded text put it back). `safe_cut` is the
    tokenizer's pattern of a safe space (`_safe_cut_pattern`: never next to one
    of its added tokens).
    """
    limit = PIECE_CHARS if limit is None else limit
    if limit < 2:
        raise ValueError(f"piece limit must be at least 2 characters, got {limit}")
    n = len(text)
    spans = []
    start = 0
    while n - start > limit:
        # endpos n - 1: a cut never leaves an empty piece behind it.
        m = safe_cut.search(text, start + limit // 2, min(start + limit + 1, n - 1))
        if m is None:
            spans.append((start, start + limit))
            start += limit
        else:
            cut = m.start()
            spans.append((start, cut))
            start = cut + 1 if drop_space else cut
    spans.append((start, n))
    return spans


def _all_safe_spans(text: str, drop_space: bool, safe_cut: "re.Pattern[str]") -> list[tuple[int, int]]:
    spans, start = [], 0
    for m in safe_cut.finditer(text, 0, len(text) - 1):
        spans.append((start, m.start()))
        start = m.start() + 1 if drop_space else m.start()
    spans.append((start, len(text)))
    return spans


def _encode_spans(backend: tokenizers.Tokenizer, text: str, spans: list[tuple[int, int]], plan: "_CutPlan"
                  ) -> np.ndarray:
    """prefix + the pieces encoded without special tokens + suffix."""
    arrays = [plan.prefix]
    batch: list[str] = []
    size = 0
    for s, e in spans:
        batch.append(text[s:e])
        size += e - s
        if size >= _PIECE_BATCH_CHARS:
            arrays.extend(np.asarray(enc.ids, dtype=np.int32)
                          for enc in backend.encode_batch_fast(batch, add_special_tokens=False))
            batch, size = [], 0
    if batch:
        arrays.extend(np.asarray(enc.ids, dtype=np.int32)
                      for enc in backend.encode_batch_fast(batch, add_special_tokens=False))
    arrays.append(plan.suffix)
    return np.concatenate(arrays).astype(np.int32, copy=False)


def _find_cut_plan(backend: tokenizers.Tokenizer) -> _CutPlan:
    """Measure which cut convention reproduces the ids of whole texts for this tokenizer.

    Byte-level BPE tokenizers (GPT-2, NeoX, most Hugging Face BPE tokenizers)
    start a pre-token at every safe space, so keeping the space at the start of
    the next piece is exact. SentencePiece-style tokenizers whose normalizer
    prepends "\u2581" to every encoded text (Llama 2, Mistral) are exact when the
    space is dropped instead. A tokenizer for which neither reproduces the
    probes is cut keeping the space (its ids may then differ around each cut).
    """
    prefix, suffix = (np.asarray(a, dtype=np.int32) for a in _affixes(backend))
    safe_cut = _safe_cut_pattern(backend)
    whole = [np.asarray(backend.encode(t, add_special_tokens=True).ids, dtype=np.int32) for t in _CUT_PROBES]
    for drop_space in (False, True):
        plan = _CutPlan(prefix, suffix, drop_space, True, safe_cut)
        if all(np.array_equal(_encode_spans(backend, t, _all_safe_spans(t, drop_space, safe_cut), plan), w)
               for t, w in zip(_CUT_PROBES, whole)):
            return plan
    return _CutPlan(prefix, suffix, False, False, safe_cut)


def _safe_cut_pattern(backend: tokenizers.Tokenizer) -> "re.Pattern[str]":
    """A safe space that is neither right before nor right after an added token's
    text: the tokenizer matches added tokens before normalizing, and they may
    strip the whitespace next to them, so a cut there could change the ids."""
    contents = sorted({t.content for t in backend.get_added_tokens_decoder().values() if t.content},
                      key=lambda c: (-len(c), c))
    if not contents:
        return _SAFE_CUT
    after = "".join(f"(?<!{re.escape(c)})" for c in contents)
    before = "|".join(re.escape(c) for c in contents)
    return re.compile(rf"(?<=\S){after} (?!{before})")


def encode_bounded(tok: Tokenizer, texts: Sequence[str], *, uncut: Optional[int] = None,
                   piece: Optional[int] = None) -> list[np.ndarray]:
    """Token ids of each text (with the tokenizer's BOS/affixes, without EOS), at bounded cost.

    The rule: a text of at most `uncut` (UNCUT_CHARS, 1 Mi characters) characters is
    encoded whole, so its ids are exactly the tokenizer's. A longer text is
    cut by `piece_spans` into pieces of at most `piece` (PIECE_CHARS, 64 Ki)
    characters, the pieces are encoded without special tokens, in batches, and
    the post-processor's ids (BOS...) are put once around their concatenation.

    The effect on ids: a cut at a safe space changes nothing (shown for the
    GPT-2 pre-tokenizer regex, and checked per tokenizer on probe texts by
    `_find_cut_plan`: GPT-2, NeoX, Llama-3 style and Mistral/Llama-2 style
    tokenizers all pass). A hard cut, only in a run of more than `piece // 2`
    characters without a safe space (base64, a long number, minified code),
    stops BPE merges from crossing it: around it the ids may differ (usually
    by one token) from encoding the whole text, which still decodes to the
    same text. A tokenizer whose probes fail (`exact` False) may see such
    differences at safe cuts too.
    """
    uncut = UNCUT_CHARS if uncut is None else uncut
    texts = list(texts)
    out: list[Optional[np.ndarray]] = [None] * len(texts)
    short = [i for i, t in enumerate(texts) if len(t) <= uncut]
    if short:
        for i, ids in zip(short, tok._encode_ids([texts[i] for i in short])):
            out[i] = np.asarray(ids, dtype=np.int32)
    if len(short) < len(texts):
        plan = tok._cut_plan()
        for i, text in enumerate(texts):
            if out[i] is None:
                spans = piece_spans(text, piece, plan.drop_space, plan.safe_cut)
                out[i] = _encode_spans(tok.backend, text, spans, plan)
    return out  # type: ignore[return-value]


def tokenize_documents(
    tok: Tokenizer,
    texts: list[str],
    *,
    split_len: Optional[int] = None,
    remove_bos_in_chunks: bool = False,
) -> list[np.ndarray]:
    """One int32 array per text: its ids followed by EOS.

    With `split_len` the texts are cut by `split_text`, all pieces are encoded in
    one batch and concatenated per text (an empty text is then just [eos]).
    `remove_bos_in_chunks` drops the leading id of every piece after the first only
    when it is a BOS the tokenizer added (COMPAT: never an ordinary token).
    Whatever `split_len`, a text or piece longer than UNCUT_CHARS is encoded
    in pieces by `encode_bounded`, so the cost stays linear in its length.
    """
    eos = tok.eos_id
    if split_len is None:
        if all(len(t) <= UNCUT_CHARS for t in texts):
            return [np.asarray(ids + [eos], dtype=np.int32) for ids in tok._encode_ids(texts)]
        return [np.append(ids, np.int32(eos)) for ids in encode_bounded(tok, texts)]
    counts, pieces = [], []
    for text in texts:
        parts = split_text(text, split_len)
        counts.append(len(parts))
        pieces.extend(parts)
    encoded = encode_bounded(tok, pieces)
    drop_bos = remove_bos_in_chunks and tok.adds_bos and tok.bos_id is not None
    eos_array = np.asarray([eos], dtype=np.int32)
    out, pos = [], 0
    for count in counts:
        arrays = []
        for k in range(count):
            piece = encoded[pos + k]
            if k and drop_bos and piece[:1].tolist() == [tok.bos_id]:
                piece = piece[1:]
            arrays.append(piece)
        pos += count
        arrays.append(eos_array)
        out.append(np.concatenate(arrays))
    return out
