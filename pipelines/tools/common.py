"""What the tools share: the output directory, its data_params.json, usage errors and the tokenizer flags."""

from __future__ import annotations

import argparse
import json
import os
from typing import Optional

import fsspec

from transforms.core import verify as V
from transforms.io import fs
from transforms.io.dataset import open_dataset_params

__all__ = ["UsageError", "basename", "require_dir", "load_params", "doc_word", "add_tokenizer_flags",
           "tokenizer_flags"]

_TOKENIZER_FLAGS = ("tokenizer_type", "vocab_file", "encoder_file", "huggingface_tokenizer")


class UsageError(Exception):
    """Bad arguments or a missing directory: exit status 2."""


def basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1].rsplit(os.sep, 1)[-1]


def require_dir(out_dir: str) -> None:
    if fs.is_local(out_dir):
        if not os.path.isdir(out_dir[len("file://"):] if out_dir.startswith("file://") else out_dir):
            raise UsageError(f"no such directory: {out_dir}")
        return
    fsys, path = fsspec.core.url_to_fs(out_dir)
    if not fsys.isdir(path):
        raise UsageError(f"no such directory: {out_dir}")


def load_params(out_dir: str) -> tuple[Optional[dict], Optional[str]]:
    """(params, None) or (None, the problem)."""
    try:
        return open_dataset_params(out_dir), None
    except FileNotFoundError:
        return None, "missing: it is written last, so the dataset is incomplete"
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        return None, f"is not valid JSON ({e})"


def doc_word(spec: V.DatasetSpec) -> str:
    """What a VSL segment is: a conversation in Chat_VSL, a document elsewhere."""
    return spec.traits.unit if spec.vsl else "document"


def add_tokenizer_flags(parser: argparse.ArgumentParser) -> None:
    """The flags that name a tokenizer other than the one data_params.json records."""
    g = parser.add_argument_group("tokenizer (default: the one recorded in data_params.json)")
    g.add_argument("--tokenizer_type", choices=("GPT2Tokenizer", "NeoXTokenizer", "HuggingFaceTokenizer"))
    g.add_argument("--vocab_file")
    g.add_argument("--encoder_file")
    g.add_argument("--huggingface_tokenizer")
    g.add_argument("--trust_custom_tokenizer", action="store_true",
                   help="build the recorded custom_tokenizer class (Cerebras 2.10's module:Class) as the job did: "
                        "its code runs here, so only for a dataset whose data_params.json you trust")


def tokenizer_flags(args: argparse.Namespace) -> dict:
    """Those flags' values (and --trust_custom_tokenizer), as keyword arguments of `verify_dataset` and `inspect_row`."""
    return {**{k: getattr(args, k, None) for k in _TOKENIZER_FLAGS},
            "trust_custom_tokenizer": bool(getattr(args, "trust_custom_tokenizer", False))}
