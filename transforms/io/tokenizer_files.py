"""Read the files a tokenizer needs (local, gs://, any fsspec URL, or the Hugging Face hub).

The contents go into a picklable `TokenizerFiles`, so workers build the
tokenizer in `DoFn.setup` without touching the file system again.
"""

from __future__ import annotations

import json
from typing import Optional

import fsspec

from transforms.core.tokenizer import GPT2, HF, KINDS, NEOX, TokenizerFiles

__all__ = ["read_tokenizer_files", "HF_FILES"]

# File names of a Hugging Face tokenizer directory, in the order they are looked for.
HF_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json")


def read_tokenizer_files(
    kind: str,
    *,
    vocab_file: Optional[str] = None,
    encoder_file: Optional[str] = None,
    huggingface_tokenizer: Optional[str] = None,
    eos_id: Optional[int] = None,
    pad_id: Optional[int] = None,
    sep_token: Optional[str] = None,
) -> TokenizerFiles:
    """Read what `kind` needs, named by the reference's flags.

    GPT2Tokenizer: --encoder_file (encoder.json) and --vocab_file (vocab.bpe);
    NeoXTokenizer: --encoder_file (tokenizer.json); HuggingFaceTokenizer:
    --huggingface_tokenizer, a directory (local or fsspec URL) or a hub name.
    """
    overrides = dict(eos_id=eos_id, pad_id=pad_id, sep_token=sep_token)
    if kind == GPT2:
        if not encoder_file:
            raise ValueError("--encoder_file is required for GPT2Tokenizer (encoder.json / vocab.json)")
        if not vocab_file:
            raise ValueError("--vocab_file is required for GPT2Tokenizer (vocab.bpe / merges.txt)")
        return TokenizerFiles(
            kind,
            encoder_json=_read_text(encoder_file, "--encoder_file"),
            merges=_read_text(vocab_file, "--vocab_file"),
            name=encoder_file,
            **overrides,
        )
    if kind == NEOX:
        if not encoder_file:
            raise ValueError("--encoder_file is required for NeoXTokenizer (its tokenizer.json)")
        tokenizer_json = _read_text(encoder_file, "--encoder_file")
        return TokenizerFiles(kind, tokenizer_json=tokenizer_json, name=encoder_file, **overrides)
    if kind == HF:
        if not huggingface_tokenizer:
            raise ValueError("--huggingface_tokenizer is required for HuggingFaceTokenizer")
        texts = _read_hf(huggingface_tokenizer)
        return TokenizerFiles(
            kind,
            tokenizer_json=texts.get("tokenizer.json"),
            encoder_json=texts.get("vocab.json"),
            merges=texts.get("merges.txt"),
            tokenizer_config=_json(texts, "tokenizer_config.json", huggingface_tokenizer),
            special_tokens_map=_json(texts, "special_tokens_map.json", huggingface_tokenizer),
            name=huggingface_tokenizer,
            **overrides,
        )
    raise ValueError(f"--tokenizer_type must be one of {', '.join(KINDS)}, got {kind!r}")


def _read_text(path: str, flag: str) -> str:
    try:
        with fsspec.open(path, "rt", encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"{flag}: no such file: {path}") from None
    except IsADirectoryError:
        raise FileNotFoundError(f"{flag}: expected a file, got a directory: {path}") from None


def _json(texts: dict[str, str], name: str, where: str) -> Optional[dict]:
    if name not in texts:
        return None
    try:
        value = json.loads(texts[name])
    except json.JSONDecodeError as e:
        raise ValueError(f"--huggingface_tokenizer {where}: {name} is not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise ValueError(f"--huggingface_tokenizer {where}: {name} is not a JSON object")
    return value


def _read_hf(name: str) -> dict[str, str]:
    """The texts of the HF tokenizer files that exist, by file name."""
    fs, root = fsspec.core.url_to_fs(name)
    if fs.isdir(root):
        texts = {}
        for fname in HF_FILES:
            path = root.rstrip("/") + "/" + fname
            if fs.isfile(path):
                with fs.open(path, "rt", encoding="utf-8") as f:
                    texts[fname] = f.read()
        _check_model_files(texts, name)
        return texts
    if "://" in name or fs.exists(root):
        raise FileNotFoundError(f"--huggingface_tokenizer: not a directory: {name}")
    try:
        texts = _download_hf(name)
    except Exception as e:
        raise ValueError(
            f"cannot load Hugging Face tokenizer {name!r}: not a local directory and the hub download failed: {e}"
        ) from e
    _check_model_files(texts, name)
    return texts


def _check_model_files(texts: dict[str, str], name: str) -> None:
    if "tokenizer.json" not in texts and not {"vocab.json", "merges.txt"} <= texts.keys():
        raise FileNotFoundError(
            f"--huggingface_tokenizer {name}: found neither tokenizer.json nor vocab.json + merges.txt"
        )


def _download_hf(repo_id: str) -> dict[str, str]:
    """Fetch the tokenizer files of a hub repository; files the repository lacks are skipped."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    texts = {}
    for fname in HF_FILES:
        if fname in ("vocab.json", "merges.txt") and "tokenizer.json" in texts:
            continue
        try:
            path = hf_hub_download(repo_id=repo_id, filename=fname)
        except EntryNotFoundError as e:
            # LocalEntryNotFoundError (no network, not cached) is a failure, not an absent file.
            if isinstance(e, LocalEntryNotFoundError):
                raise
            continue
        with open(path, encoding="utf-8") as f:
            texts[fname] = f.read()
    return texts
