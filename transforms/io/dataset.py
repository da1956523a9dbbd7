"""Read a finished output directory: the reader for training code, and file access for the tools.

    from transforms.io.dataset import H5Dataset
    for batch in H5Dataset("gs://bucket/out", host_index=rank, num_hosts=world, batch_size=8,
                           drop_remainder=True):
        batch["input_ids"], batch["attention_mask"], batch["labels"]  # int32 [8, msl] each
        batch["attention_span"], batch["position_ids"]  # VSL datasets only (LMData_VSL, ..., Chat_VSL)
    # DPO: batch["chosen_input_ids"], batch["chosen_attention_mask"], batch["chosen_labels"] and the same
    # three of "rejected_"

Rows are dicts by feature name, the names data_params.json's `features`
lists in row order; without that list (older outputs, the reference's), the
three of LMData / Summarization / FIM / Chat, the five of VSL or the six of
DPO when `setup.mode` / `setup.dataset_processor` names such a mode, or when
there is no data_params.json, as many as the first file holds (5: VSL's,
6: DPO's, else the three).

Files are read in name order, digit runs compared as numbers (so
`examples_100000.h5` follows `examples_99999.h5`), rows in file order.

Sharding by host: host h of N gets the whole files i with i % N == h. When
the file count is not a multiple of N, the trailing `count % N` files are
left out (`remainder="drop"`, the default; each host then reads the same
number of files, and with `files_per_record` output the one partial file is
the last, so it goes first) or the reader raises (`remainder="error"`).
Equal file counts give equal row counts when every kept file holds the same
number of rows; `equal_rows=True` guarantees it anyway by stopping every
host after the smallest host's row count (read from the n_examples
attributes before any row).

`attention_mask` is returned as stored: with data_params.json's
`dataset.inverted_mask` true, 1 marks positions excluded from the loss.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from typing import Any, Iterator, Optional

import fsspec
import h5py
import numpy as np

from transforms.core.features import DPO_FEATURES, LM_FEATURES, VSL_FEATURES
from transforms.core.chat.template import CHATML_TOKENS
from transforms.core.modes import PAIR, Mode, mode_of_processor
from transforms.core.tokenizer import Tokenizer, build_tokenizer
from transforms.core.verify import FileLayout
from transforms.io import fs
from transforms.io.tokenizer_files import autotokenizer_files, custom_tokenizer_files, read_tokenizer_files

__all__ = ["H5Dataset", "iter_dataset", "list_h5_files", "host_files", "open_dataset_params", "open_h5",
           "file_layout", "iter_row_blocks", "open_dataset_tokenizer", "feature_names", "PARAMS_FILE", "KEYS"]

PARAMS_FILE = "data_params.json"
KEYS = LM_FEATURES  # the features of a 3-feature row (LMData, Summarization, FIM)
_BLOCK_BYTES = 16 << 20  # rows read per h5py call: about this many bytes


def _natural_key(name: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def list_h5_files(out_dir: str) -> list[str]:
    """Paths (or URLs) of the `.h5` files directly in out_dir, in file order."""
    names = [n for n in fs.listdir_names(out_dir) if n.endswith(".h5")]
    paths = [fs.join(out_dir, n) for n in sorted(names, key=_natural_key)]
    if fs.is_local(out_dir):
        paths = [p for p in paths if os.path.isfile(p)]
    return paths


def open_dataset_params(out_dir: str) -> dict:
    """data_params.json of an output directory; FileNotFoundError when absent (the dataset is incomplete)."""
    path = fs.join(out_dir, PARAMS_FILE)
    try:
        with fsspec.open(path, "r", encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} not found: it is written last, so the dataset is incomplete "
                                "or this is not an output directory") from None


@contextlib.contextmanager
def open_h5(path: str) -> Iterator[h5py.File]:
    """An HDF5 file opened for reading, local or through fsspec."""
    if fs.is_local(path):
        with h5py.File(path[len("file://"):] if path.startswith("file://") else path, "r") as f:
            yield f
    else:
        with fs.open_remote_for_seeks(path) as raw, h5py.File(raw, "r") as f:
            yield f


def file_layout(f: h5py.File, name: str) -> FileLayout:
    """What `transforms.core.verify.check_layout` checks, read from an open file."""
    datasets = tuple(k for k in f.keys() if isinstance(f[k], h5py.Dataset))
    has_n = "n_examples" in f.attrs
    n_examples = f.attrs["n_examples"] if has_n else None
    if "data" not in datasets:
        return FileLayout(name, datasets, has_n_examples=has_n, n_examples=n_examples)
    d = f["data"]
    return FileLayout(name, datasets, dtype=str(d.dtype), shape=tuple(d.shape),
                      chunks=tuple(d.chunks) if d.chunks else None, compression=d.compression,
                      has_n_examples=has_n, n_examples=n_examples)


def iter_row_blocks(dataset: h5py.Dataset, start: int = 0, stop: Optional[int] = None
                    ) -> Iterator[tuple[int, np.ndarray]]:
    """(index of the first row, rows) blocks of a [n, F, msl] dataset, bounded in memory."""
    n = dataset.shape[0] if stop is None else min(stop, dataset.shape[0])
    row_bytes = max(1, int(np.prod(dataset.shape[1:])) * dataset.dtype.itemsize)
    step = max(1, _BLOCK_BYTES // row_bytes)
    for i in range(start, n, step):
        yield i, dataset[i:min(i + step, n)]


def host_files(files: list[str], host_index: int = 0, num_hosts: int = 1, remainder: str = "drop") -> list[str]:
    """The files of one host: i % num_hosts == host_index, after the remainder rule (module docstring)."""
    if num_hosts < 1 or not 0 <= host_index < num_hosts:
        raise ValueError(f"host_index must be in [0, num_hosts), got {host_index} of {num_hosts}")
    if remainder not in ("drop", "error"):
        raise ValueError(f"remainder must be 'drop' or 'error', got {remainder!r}")
    extra = len(files) % num_hosts
    if extra and remainder == "error":
        raise ValueError(f"{len(files)} files cannot be split equally over {num_hosts} hosts")
    kept = files[:len(files) - extra]
    if num_hosts > 1 and not kept:
        raise ValueError(f"{len(files)} files are fewer than {num_hosts} hosts: every host would read nothing")
    return kept[host_index::num_hosts]


def feature_names(params: Optional[dict], file_features: Optional[int] = None) -> tuple[str, ...]:
    """The names of a row's features, in order (module docstring). `file_features`: what the first file
    holds, used only when there is no data_params.json."""
    if params is None:
        return {len(VSL_FEATURES): VSL_FEATURES, len(DPO_FEATURES): DPO_FEATURES}.get(file_features, LM_FEATURES)
    listed = params.get("features")
    if isinstance(listed, list) and listed and all(isinstance(name, str) for name in listed):
        return tuple(listed)
    traits = _named_mode(params)
    return traits.features if traits is not None else LM_FEATURES


def _named_mode(params: Optional[dict]) -> Optional[Mode]:
    """The mode data_params.json names: ours by `setup.mode`, 2.1.1's (and a 2.10 config's) by its processor."""
    setup = (params or {}).get("setup") or {}
    return mode_of_processor(setup.get("mode")) or mode_of_processor(setup.get("dataset_processor"))


def _rows_of(path: str) -> int:
    with open_h5(path) as f:
        return int(f["data"].shape[0])


class H5Dataset:
    """An output directory as an iterable of row dicts (or batches); iterate it once per epoch."""

    def __init__(self, out_dir: str, *, host_index: int = 0, num_hosts: int = 1, batch_size: Optional[int] = None,
                 drop_remainder: bool = False, remainder: str = "drop", equal_rows: bool = False):
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.out_dir = out_dir
        self.all_files = list_h5_files(out_dir)
        self.files = host_files(self.all_files, host_index, num_hosts, remainder)
        self.batch_size = batch_size
        self.drop_remainder = drop_remainder
        try:
            params: Optional[dict] = open_dataset_params(out_dir)
        except (FileNotFoundError, ValueError):  # absent or not JSON: names from the first file's shape
            params = None
        first = None
        if params is None and self.all_files:
            with open_h5(self.all_files[0]) as f:
                first = int(f["data"].shape[1])
        self.features = feature_names(params, first)  # the keys of every row
        self._limit: Optional[int] = None
        if equal_rows and num_hosts > 1:
            per_host = [sum(_rows_of(p) for p in host_files(self.all_files, h, num_hosts, remainder))
                        for h in range(num_hosts)]
            self._limit = min(per_host)

    @property
    def num_rows(self) -> int:
        """Rows this host yields (reads every file's shape)."""
        total = sum(_rows_of(p) for p in self.files)
        return total if self._limit is None else min(total, self._limit)

    def __len__(self) -> int:
        """Rows, or batches when batch_size is set."""
        n = self.num_rows
        if self.batch_size is None:
            return n
        return n // self.batch_size if self.drop_remainder else -(-n // self.batch_size)

    def rows(self) -> Iterator[dict[str, np.ndarray]]:
        left = self._limit
        for path in self.files:
            with open_h5(path) as f:
                data = f["data"]
                if data.ndim != 3 or data.shape[1] != len(self.features):
                    raise ValueError(f"{path}: rows of shape {data.shape[1:]}, but the dataset's features are "
                                     f"{len(self.features)} ({', '.join(self.features)})")
                for _, block in iter_row_blocks(data, stop=left):
                    for row in block:
                        yield {k: row[i] for i, k in enumerate(self.features)}
                    if left is not None:
                        left -= len(block)
            if left is not None and left <= 0:
                return

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        if self.batch_size is None:
            yield from self.rows()
            return
        pending: list[dict] = []
        for row in self.rows():
            pending.append(row)
            if len(pending) == self.batch_size:
                yield _stack(pending)
                pending = []
        if pending and not self.drop_remainder:
            yield _stack(pending)


def _stack(rows: list[dict]) -> dict[str, np.ndarray]:
    return {k: np.stack([r[k] for r in rows]) for k in rows[0]}


def iter_dataset(out_dir: str, **options: Any) -> Iterator[dict[str, np.ndarray]]:
    """Shorthand for iter(H5Dataset(out_dir, **options))."""
    return iter(H5Dataset(out_dir, **options))


# -------------------------------------------------------------------- tokenizer


def _candidates(path: str, out_dir: str) -> list[str]:
    """Where a relative path recorded in data_params.json may be: the working directory, then
    out_dir's ancestors (the job ran from one of them, e.g. reference/ for reference/golden/x/out)."""
    if not path or "://" in path or os.path.isabs(path):
        return [path]
    out = [path]
    if fs.is_local(out_dir):
        here = os.path.abspath(out_dir)
        while True:
            out.append(os.path.join(here, path))
            parent = os.path.dirname(here)
            if parent == here:
                break
            here = parent
    return out


def _locate(path: Optional[str], out_dir: str, hub: bool = False) -> Optional[str]:
    """A recorded path as found locally; for a Hugging Face name (`hub`), its snapshot in the local cache.

    Never downloads: verify and inspect must work offline and fast.
    """
    if not path:
        return path
    for cand in _candidates(path, out_dir):
        if "://" in cand or os.path.exists(cand):
            return cand
    if hub:
        try:
            from huggingface_hub import try_to_load_from_cache

            for fname in ("tokenizer.json", "vocab.json"):
                cached = try_to_load_from_cache(path, fname)
                if isinstance(cached, str):
                    return os.path.dirname(cached)
        except Exception:  # noqa: BLE001 - no cache, no hub library: not found
            pass
    raise FileNotFoundError(f"{path} not found (looked in the working directory, the output directory's "
                            f"ancestors{' and the Hugging Face cache' if hub else ''}); pass it explicitly")


def open_dataset_tokenizer(out_dir: str, params: Optional[dict], *, trust_custom_tokenizer: bool = False,
                           **overrides: Optional[str]) -> tuple[Optional[Tokenizer], str]:
    """(tokenizer, how it was found) rebuilt from data_params.json's processing settings, or (None, why not).

    `overrides` (tokenizer_type, vocab_file, encoder_file, huggingface_tokenizer) replace the recorded
    settings; relative recorded paths are looked up as `_candidates` says. A Cerebras 2.10
    `custom_tokenizer: module:Class` is imported and built with its recorded `tokenizer_params`, as the job
    built it, only with `trust_custom_tokenizer`: its code runs here, named by a file that may come from anyone
    (checking a dataset must not run what it names unless asked); a class that cannot be imported here gives
    (None, why not).
    """
    proc = dict((params or {}).get("processing") or {})
    dataset = (params or {}).get("dataset") or {}
    given = {k: v for k, v in overrides.items() if v}
    if given:
        for key in ("vocab_file", "encoder_file", "huggingface_tokenizer"):
            proc[key] = given.get(key)
        proc["tokenizer_type"] = given.get("tokenizer_type") or proc.get("tokenizer_type")
    kind = proc.get("tokenizer_type")
    if not kind:
        return None, "no tokenizer_type in data_params.json and none given"
    custom = None if given else proc.get("custom_tokenizer")
    if custom and not trust_custom_tokenizer:
        return None, (f"custom_tokenizer {custom} not imported: building it runs its code (--trust_custom_tokenizer "
                      "builds it as the job did)")
    try:
        files = {k: (given.get(k) if given else _locate(proc.get(k), out_dir, hub=k == "huggingface_tokenizer"))
                 for k in ("vocab_file", "encoder_file", "huggingface_tokenizer")}
    except FileNotFoundError as e:
        return None, f"cannot rebuild the tokenizer ({kind}): {e}"
    traits = _named_mode(params)
    summarization = traits is not None and traits.record == PAIR
    settings = dict(eos_id=proc.get("eos_id"), pad_id=proc.get("pad_id"),
                    sep_token=dataset.get("sep_token") if summarization else None,
                    # As the job did: ChatML's markers are added where the vocabulary lacks them.
                    extra_special_tokens=CHATML_TOKENS if proc.get("chat_template") == "chatml" else ())
    what = f"custom_tokenizer {custom}" if custom else kind
    try:
        # The job's own arguments (pipelines/job_tokenizer.py): the class, or AutoTokenizer for a Hugging Face
        # tokenizer, built with tokenizer_params, which may change its tokens (a pad token of its own).
        tokenizer_params = _tokenizer_params(proc.get("tokenizer_params")) if not given else {}
        if custom:
            tok_files = custom_tokenizer_files(custom, tokenizer_params, **settings)
        elif tokenizer_params and files["huggingface_tokenizer"]:
            tok_files = autotokenizer_files(files["huggingface_tokenizer"], tokenizer_params, **settings)
        else:
            tok_files = read_tokenizer_files(kind, **files, **settings)
        tok = build_tokenizer(tok_files)
    except Exception as e:  # noqa: BLE001 - any failure only means "no tokenizer"; the reason is reported
        return None, f"cannot rebuild the tokenizer ({what}): {e}"
    where = ", ".join(f"{k}={v}" for k, v in files.items() if v)
    if custom:
        return tok, f"{what} built with tokenizer_params {sorted(tokenizer_params)}"
    return tok, f"{kind} from {where}" + (f" with tokenizer_params {sorted(tokenizer_params)}" if tokenizer_params
                                          else "")


def _tokenizer_params(value: Any) -> dict:
    """processing.tokenizer_params as recorded: a mapping setting is kept as JSON text (a 2.10 tool may have
    written the mapping itself)."""
    if not value:
        return {}
    params = json.loads(value) if isinstance(value, str) else value
    if not isinstance(params, dict):
        raise ValueError(f"tokenizer_params is {value!r}, not a mapping")
    return params
