"""Read the files a tokenizer needs (local, gs://, any fsspec URL, or the Hugging Face hub).

The contents go into a picklable `TokenizerFiles`. A job stages them once
(`stage_tokenizer_files`) and its DoFns carry only the small
`StagedTokenizerFiles` reference: Beam pickles and bz2-compresses every DoFn
into the job graph and unpickles it again for every stage on every worker,
which for a vocabulary of a megabyte or two costs most of a second per job.

Every way in here (read for the launcher, loaded from the stage by a worker)
also installs the machine's store for the encoders' load checks
(`machine_cache.install`), so that the tokenizer built from these files next
finds the checks another process made.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pickle
import threading
from typing import Optional

import fsspec

from transforms.core.tokenizer import GPT2, HF, KINDS, NEOX, TokenizerFiles
from transforms.core.tokenizer.fast import DEFAULT_CHECK_SHARE
from transforms.io import fs, machine_cache

__all__ = ["read_tokenizer_files", "read_chat_template", "autotokenizer_files", "custom_tokenizer_files",
           "stage_tokenizer_files", "write_staged",
           "StagedTokenizerFiles", "HF_FILES"]

# File names of a Hugging Face tokenizer directory, in the order they are looked for.
HF_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json",
            "chat_template.jinja")


def read_tokenizer_files(
    kind: str,
    *,
    vocab_file: Optional[str] = None,
    encoder_file: Optional[str] = None,
    huggingface_tokenizer: Optional[str] = None,
    eos_id: Optional[int] = None,
    pad_id: Optional[int] = None,
    sep_token: Optional[str] = None,
    backend: str = "auto",
    extra_special_tokens: tuple = (),
    check_share: float = DEFAULT_CHECK_SHARE,
    check_seed: int = 0,
) -> TokenizerFiles:
    """Read what `kind` needs, named by the reference's flags.

    GPT2Tokenizer: --encoder_file (encoder.json) and --vocab_file (vocab.bpe);
    NeoXTokenizer: --encoder_file (tokenizer.json); HuggingFaceTokenizer:
    --huggingface_tokenizer, a directory (local or fsspec URL) or a hub name.
    `backend` (--tokenizer_backend) says which library encodes; `check_share`
    (--tokenizer_cross_check) and `check_seed` (--seed) which texts fastokens' ids are checked on.
    """
    machine_cache.install()
    overrides = dict(eos_id=eos_id, pad_id=pad_id, sep_token=sep_token, backend=backend,
                     extra_special_tokens=tuple(extra_special_tokens), check_share=float(check_share),
                     check_seed=int(check_seed))
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
            tokenizer_config=_with_template_file(_json(texts, "tokenizer_config.json", huggingface_tokenizer),
                                                 texts.get("chat_template.jinja")),
            special_tokens_map=_json(texts, "special_tokens_map.json", huggingface_tokenizer),
            name=huggingface_tokenizer,
            **overrides,
        )
    raise ValueError(f"--tokenizer_type must be one of {', '.join(KINDS)}, got {kind!r}")


def _with_template_file(config: Optional[dict], template: Optional[str]) -> Optional[dict]:
    """tokenizer_config.json with the directory's chat_template.jinja, which transformers prefers to the
    config's own `chat_template` when both exist."""
    if template is None:
        return config
    return {**(config or {}), "chat_template": template}


def read_chat_template(flag: Optional[str], files: TokenizerFiles) -> str:
    """The chat template's text: --chat_template chatml, or a template file (local or a URL), or the template
    itself, or the Hugging Face tokenizer's own; ValueError when there is none, before any data is read."""
    from transforms.core.chat.template import CHATML, template_from_config

    if flag == "chatml":
        return CHATML
    if flag and ("{{" in flag or "{%" in flag):
        return flag  # the template itself (Cerebras 2.10's dataset.chat_template holds the text, not a path)
    if flag:
        return _read_text(flag, "--chat_template")
    template = template_from_config(files.tokenizer_config or {})
    if template is None:
        raise ValueError(f"the tokenizer {files.name} has no chat template: pass --chat_template FILE.jinja, or "
                         "--chat_template chatml")
    return template


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


@dataclasses.dataclass(frozen=True)
class StagedTokenizerFiles:
    """Where a job staged its TokenizerFiles, and their digest; `load()` reads them once per process."""

    path: str
    sha256: str

    def load(self) -> TokenizerFiles:
        machine_cache.install()  # a worker's way in: it builds the tokenizer next
        with _LOADED_LOCK:
            files = _LOADED.get(self.sha256)
            if files is None:
                data = fs.read_bytes(self.path)
                if hashlib.sha256(data).hexdigest() != self.sha256:
                    raise RuntimeError(f"{self.path} is not the tokenizer this job staged (digest mismatch)")
                files = _LOADED[self.sha256] = pickle.loads(data)
            return files


_LOADED: dict = {}
_LOADED_LOCK = threading.Lock()


def write_staged(staged: StagedTokenizerFiles) -> None:
    """Write the files a reference staged in this process names (`stage_tokenizer_files(..., write=False)`) where
    it points: the plan names them before the output directory is claimed, the job writes them after."""
    with _LOADED_LOCK:
        files = _LOADED[staged.sha256]
    fs.write_bytes_atomic(staged.path, pickle.dumps(files, protocol=pickle.HIGHEST_PROTOCOL))


def stage_tokenizer_files(files: TokenizerFiles, directory: str, *, write: bool = True) -> StagedTokenizerFiles:
    """Write `files` under `directory` (a job's temporary directory, readable by its workers).

    `write=False` only names the reference (a dry run writes nothing). The
    launching process keeps the files in memory, so a local runner never reads them back.
    """
    data = pickle.dumps(files, protocol=pickle.HIGHEST_PROTOCOL)
    digest = hashlib.sha256(data).hexdigest()
    staged = StagedTokenizerFiles(fs.join(directory, f"tokenizer-{digest[:16]}.pkl"), digest)
    if write:
        fs.write_bytes_atomic(staged.path, data)
    with _LOADED_LOCK:
        _LOADED[digest] = files
    return staged


# What a custom tokenizer's object says of itself that tokenizer_config.json would say of a directory.
_CONFIG_ATTRIBUTES = ("bos_token", "eos_token", "pad_token", "sep_token", "unk_token", "chat_template")


def custom_tokenizer_files(spec: str, params: dict, **overrides) -> TokenizerFiles:
    """Cerebras 2.10's `custom_tokenizer: module:Class`, built with `params` (its `tokenizer_params`).

    2.10's example (custom_tokenizer_example/CustomLlama3Tokenizer.py) wraps a Hugging Face fast tokenizer and
    forwards every attribute to it; so does any class built on transformers' PreTrainedTokenizerFast. The job
    takes the wrapped tokenizer's own definition (`backend_tokenizer`, the tokenizer.json it encodes with), its
    special tokens and chat template, and the ids the object gives for EOS and pad: workers then need neither
    the class nor its module, and every encoder of this tool applies. What the class changes in Python around
    the tokenizer (2.10's example: the offsets it returns) is not used: this tool computes its own offsets.
    """
    import importlib

    module_name, _, class_name = spec.rpartition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"custom_tokenizer {spec}: cannot import {module_name}: {e}") from None
    cls = getattr(module, class_name, None)
    if cls is None:
        raise ValueError(f"custom_tokenizer {spec}: module {module_name} has no {class_name!r}")
    try:
        obj = cls(**params)
    except Exception as e:  # noqa: BLE001 - the user's class: say what it raised
        raise ValueError(f"custom_tokenizer {spec}({', '.join(params)}): {type(e).__name__}: {e}") from None
    return _from_object(obj, spec, f"custom_tokenizer {spec}", overrides)


def autotokenizer_files(name: str, params: dict, **overrides) -> TokenizerFiles:
    """`huggingface_tokenizer` with 2.10's `tokenizer_params`: transformers' AutoTokenizer.from_pretrained(name,
    **params), taken as custom_tokenizer_files takes a custom class (the arguments may change its tokens)."""
    from transformers import AutoTokenizer

    try:
        obj = AutoTokenizer.from_pretrained(name, **params)
    except Exception as e:  # noqa: BLE001 - a missing file, an unknown argument: say which
        raise ValueError(f"huggingface_tokenizer {name} with tokenizer_params {sorted(params)}: "
                         f"{type(e).__name__}: {e}") from None
    return _from_object(obj, name, f"huggingface_tokenizer {name}", overrides)


def _from_object(obj, name: str, what: str, overrides: dict) -> TokenizerFiles:
    machine_cache.install()
    backend = getattr(obj, "backend_tokenizer", None)
    if backend is None or not hasattr(backend, "to_str"):
        raise ValueError(f"{what}: it does not wrap a Hugging Face fast tokenizer (no backend_tokenizer), which "
                         "the job needs to encode with offsets")
    config = {}
    for name in _CONFIG_ATTRIBUTES:
        value = getattr(obj, name, None)
        if isinstance(value, str):
            config[name] = value
    for name, key in (("eos_token_id", "eos_id"), ("pad_token_id", "pad_id")):
        value = getattr(obj, name, None)
        if overrides.get(key) is None and isinstance(value, int):
            overrides[key] = value
    return TokenizerFiles(HF, tokenizer_json=backend.to_str(), tokenizer_config=config, name=name, **overrides)
