"""The tokenizer the pipeline uses: a `tokenizers.Tokenizer`, its resolved ids, and an encoder.

Encoding goes through an encoder backend (`backends`: `tokenizers` itself, or
tiktoken where it gives the same ids); decoding, look-ups and provenance
always use the `tokenizers.Tokenizer`.

Imports in this package run one way, load -> tokenizer -> cutting: `load`
builds a Tokenizer and hands it the function that rebuilds one after pickling
(`rebuild`), so this module never imports `load`.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Callable, Iterable, Optional, Protocol, Sequence

import numpy as np
import tokenizers

from transforms.core.tokenizer.backends import AUTO, affixes, select_encoder
from transforms.core.tokenizer.cutting import _CutPlan, _find_cut_plan, encode_bounded

__all__ = ["Tokenizer"]


class _Recipe(Protocol):
    """What a Tokenizer was built from (`load.TokenizerFiles`): picklable, named for messages, and saying
    which texts fastokens' ids are checked on."""

    name: str
    check_share: float
    check_seed: int


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
        files: Optional[_Recipe] = None,
        rebuild: Optional[Callable[[_Recipe, bool], "Tokenizer"]] = None,
        no_bos: bool = False,
        encoder_mode: str = "auto",
    ) -> None:
        """`files` and `rebuild` come together from `load`: pickling ships `files` and
        unpickling calls `rebuild(files, no_bos)`, a module-level function of `load`."""
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
        self._rebuild = rebuild
        self._no_bos = no_bos
        self.vocab_size = _vocab_size(backend)
        self._encoder_mode = encoder_mode
        self._checks = {} if files is None else {"check_share": files.check_share, "check_seed": files.check_seed}
        # auto's choice is made on first use: choosing checks the faster encoders (seconds for a large
        # vocabulary), and a tokenizer built for decoding or for chat rendering (which encodes with offsets
        # on tokenizers) never encodes through it. A backend asked for by name is checked at once, so that
        # one that is not exact is an error when the tokenizer is built.
        self._encoder = None
        self._encoder_lock = threading.Lock()
        if encoder_mode != AUTO:
            self.encoder  # noqa: B018 - built for its check
        self._fingerprint: Optional[str] = None
        self._cut: Optional[_CutPlan] = None

    def __repr__(self) -> str:
        return (
            f"Tokenizer({self.kind}, {self.name!r}, vocab_size={self.vocab_size}, eos={self.eos_id}, "
            f"pad={self.pad_id}, bos={self.bos_id}, adds_bos={self.adds_bos}, sep={self.sep_id}, "
            f"encoder={self.encoder_name})"
        )

    def __reduce__(self):
        # Rebuilding from the file contents is cheaper to ship than the backend.
        if self._files is None or self._rebuild is None:
            raise TypeError("this Tokenizer was not built by build_tokenizer and cannot be pickled")
        return (self._rebuild, (self._files, self._no_bos))

    @property
    def backend(self) -> tokenizers.Tokenizer:
        """The underlying `tokenizers.Tokenizer` (do not mutate)."""
        return self._backend

    @property
    def encoder(self):
        """The encoder backend (`backends.HfEncoder`, `backends.TiktokenEncoder` or `fast.FastokensEncoder`)."""
        if self._encoder is None:
            with self._encoder_lock:
                if self._encoder is None:
                    self._encoder = select_encoder(self._backend, self._encoder_mode, self.name, **self._checks)
        return self._encoder

    @property
    def clean_up_spaces(self) -> bool:
        """Whether decoding then cleans up spaces before punctuation, as transformers does (" ," -> ",")."""
        return self._clean_up_spaces

    @property
    def encoder_name(self) -> str:
        """Which library encodes: "fastokens", "tiktoken" or "tokenizers"."""
        return self.encoder.name

    @property
    def encoder_note(self) -> Optional[str]:
        """Why `auto` passed over a faster encoder, if it did."""
        return getattr(self.encoder, "reason", None)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        """Token ids of each text as int32 arrays, without EOS; long texts in pieces (`encode_bounded`)."""
        return encode_bounded(self, texts)

    def _cut_plan(self) -> "_CutPlan":
        if self._cut is None:
            self._cut = _find_cut_plan(self._backend, self.encoder)
        return self._cut

    def encode(self, text: str) -> np.ndarray:
        return self.encoder.encode_batch([text])[0]

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
        if affixes(backend)[0]:
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
            rebuild=self._rebuild,
            no_bos=True,
            encoder_mode=self._encoder_mode,
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
