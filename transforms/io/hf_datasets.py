"""A Hugging Face dataset as input: one of its splits resolved, at launch, to the files it is made of.

Cerebras 2.10 (`setup.data: {type: huggingface, source, split, ...}`) loads the split with 🤗 `datasets`
and writes a copy of it, then reads the copy. Here the split is only *resolved*: the library says which
files make it (the dataset card's `configs:` / `data_files:`, else the Hub's default layout such as
data/train-*.parquet), and the job reads those files with its own readers, as it reads an input_dir.
Streaming the records through `datasets` on the workers instead would lose what the readers give: a bad
record is a dead letter with its file and line (not an exception in a library), a large file is split
into work units, and the rows depend on the files alone. A Hub dataset's files come back as hf:// URLs
pinned to the commit resolved now (`hf://datasets/NAME@SHA/...`), which the workers open through
huggingface_hub's fsspec filesystem; a private dataset needs HF_TOKEN in their environment.

    resolve_split_files("user/ds", "train") -> SplitFiles(files=("hf://datasets/user/ds@3f2a.../data/train-0.parquet",
                                                                 ...), root="hf://datasets/user/ds@3f2a...", ...)

`datasets` is an optional extra (pip install 'create-hdf5-dataset[huggingface]'): only the launcher
imports it, and only here.

Refused before any data is read, saying why: files in a format the readers do not read (csv, arrow, a
.json document ...), a dataset made by a loading script, a split that does not exist, split slicing
(train[:10%]: records by position, not files), and the builder settings that change what a record is
(a text config's sample_by, a parquet config's filters, a json config's field).
"""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
from typing import Optional

from transforms.io.discover import VALID_EXTENSIONS, extension_of

__all__ = ["SplitFiles", "HfDatasetError", "resolve_split_files", "check_options", "OPTIONS", "INSTALL_HINT"]

INSTALL_HINT = "pip install 'create-hdf5-dataset[huggingface]' (or pip install datasets)"
# load_dataset's arguments that choose files, handed on to load_dataset_builder as they are.
OPTIONS = ("name", "data_dir", "data_files", "revision", "token")
# The builders whose records are what our readers read from the same files, and their settings that would make
# a record something else (a paragraph, a filtered row): anything but these values is refused.
_RECORD_SETTINGS = {
    "parquet": {"filters": None},
    "json": {"field": None, "encoding": "utf-8"},
    "text": {"sample_by": "line", "keep_linebreaks": False, "encoding": "utf-8"},
}
_PACKAGED = "datasets.packaged_modules."
_SPLIT_NAME = re.compile(r"[\w.-]+")


class HfDatasetError(ValueError):
    """The dataset's split cannot be read as files by this tool; the message says why and what to do."""


@dataclasses.dataclass(frozen=True)
class SplitFiles:
    """The files of one split (in the order `datasets` reads them), and what they were resolved from."""

    files: tuple  # local paths, or hf:// URLs pinned to a commit
    root: str  # the dataset's directory or hf://datasets/NAME@SHA: the files' relative paths count from it
    builder: str  # the `datasets` builder they are (parquet, json, text)
    split: str


def check_options(options: dict) -> None:
    """ValueError naming an option that is not one of OPTIONS, or a token given as text."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"{', '.join(unknown)}: not supported for a Hugging Face dataset (supported: "
                         f"{', '.join(OPTIONS)})")
    if "token" in options and not isinstance(options["token"], bool):
        raise ValueError("token: give the token in the environment (HF_TOKEN), where the workers need it too; a "
                         "token in the config would be written to data_params.json (token: true is accepted)")


def resolve_split_files(source: str, split: str, options: Optional[dict] = None) -> SplitFiles:
    """The files of `split` of the dataset `source` (a Hub name or a directory laid out as one).

    `options`: more of load_dataset's arguments (OPTIONS). Raises HfDatasetError for anything this tool cannot
    read so (module docstring), including a missing `datasets` library, with the command that installs it.
    """
    options = dict(options or {})
    try:
        check_options(options)
    except ValueError as e:
        raise HfDatasetError(str(e)) from None
    names = _split_names(split)
    datasets = _import_datasets()
    where = f"Hugging Face dataset {source!r}" + (f" (config {options['name']!r})" if options.get("name") else "")
    # The builder only resolves the files; its cache (lock files) is of no use after that.
    with tempfile.TemporaryDirectory(prefix="hf-resolve-") as cache:
        try:
            builder = datasets.load_dataset_builder(source, cache_dir=cache, **options)
        except Exception as e:  # noqa: BLE001 - datasets raises a dozen types for a dataset it cannot resolve
            if "script" in str(e):  # datasets >= 4 refuses them itself ("Dataset scripts are no longer supported")
                raise HfDatasetError(f"{where}: it is made by a loading script, not of data files this tool can "
                                     f"read ({', '.join(VALID_EXTENSIONS)}): {e}") from None
            # Among them: splits of different formats, which datasets (and so 2.10) refuses as well.
            raise HfDatasetError(f"{where}: its files cannot be resolved: {type(e).__name__}: {e}") from None
    module = type(builder).__module__
    if not module.startswith(_PACKAGED):
        raise HfDatasetError(f"{where}: it is made by a loading script ({module}), not of data files this tool "
                             f"can read ({', '.join(VALID_EXTENSIONS)})")
    kind = module[len(_PACKAGED):].split(".")[0]
    available = {str(k): list(v) for k, v in (builder.config.data_files or {}).items()}
    for name in names:
        if name not in available:
            raise HfDatasetError(f"{where}: no split {name!r}; its splits: {', '.join(available) or 'none'}")
    files = list(dict.fromkeys(f for name in names for f in available[name]))  # a+a: each file once
    if not files:
        raise HfDatasetError(f"{where}: split {split!r} has no data files")
    if kind not in _RECORD_SETTINGS:
        raise HfDatasetError(f"{where}: split {split!r} is {kind} data ({_name(files[0])}), a format this tool "
                             f"does not read (it reads {', '.join(VALID_EXTENSIONS)})")
    for setting, expected in _RECORD_SETTINGS[kind].items():
        value = getattr(builder.config, setting, expected)
        if setting == "encoding" and str(value).lower().replace("_", "-") in ("utf-8", "utf8"):
            continue
        if value != expected:
            raise HfDatasetError(f"{where}: its {kind} config sets {setting}={value!r}, which changes what a record "
                                 f"is; only {setting}={expected!r} is read as the files' own records")
    for f in files:
        if extension_of(f) is None:
            raise HfDatasetError(f"{where}: split {split!r} holds {_name(f)}, {kind} data in a file this tool "
                                 f"does not read (it reads {', '.join(VALID_EXTENSIONS)})")
    return SplitFiles(files=tuple(files), root=_root(str(builder.base_path or source)), builder=kind, split=split)


def _split_names(split: str) -> list[str]:
    """"train" -> ["train"]; "train+validation" -> both, in order (as datasets concatenates them)."""
    names = [s.strip() for s in str(split or "").split("+")]
    for name in names:
        if "[" in name:
            raise HfDatasetError(f"split {split!r}: slicing ({name}) selects records by position, not files; read "
                                 "the whole split (data_splits draws a share of it)")
        if not _SPLIT_NAME.fullmatch(name):
            raise HfDatasetError(f"split {split!r}: expected a split's name (train, validation, ...), or names "
                                 "joined by +")
    return names


def _import_datasets():
    try:
        import datasets
    except ImportError:
        raise HfDatasetError("reading a Hugging Face dataset (hf_dataset; 2.10's setup.data.type huggingface) needs "
                             f"the 🤗 datasets library: {INSTALL_HINT}") from None
    return datasets


def _root(base: str) -> str:
    return base.rstrip("/") if "://" in base else os.path.abspath(base)


def _name(path: str) -> str:
    return path.rsplit("/", 1)[-1]
