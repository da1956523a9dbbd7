"""Random access to a finished output directory, by sample: the map-style reader for training code.

    from transforms.io.map_dataset import H5MapDataset, ResumableSampler, to_hf_causal_lm
    ds = H5MapDataset("gs://bucket/out")
    sampler = ResumableSampler(len(ds), seed=0, rank=rank, world_size=world)
    for i in sampler:
        row = ds[i]                      # {"input_ids": int32 [msl], "attention_mask": ..., "labels": ...}
        example = ds.to_hf(row)          # Hugging Face's causal-LM convention (labels -100 where untrained)

`len(ds)` is every row of every `.h5` file, in file order (the order
`H5Dataset` reads them), counted from the files' `n_examples` attributes
without reading any data. `ds[i]` reads sample i's chunk only: each row is
one compressed HDF5 chunk, so a row costs one read of its bytes and one
inflate. Where a file is laid out as this tool writes it (chunks of one row,
deflate alone), the chunk's place in the file is taken from the file's chunk
index once per file and process, and the bytes are read and inflated
directly (local files by `os.pread`, remote ones by a ranged read through
fsspec); any other layout is read through h5py, row by row.

Files are opened lazily, per process: a dataset built in one process and
used in another (a fork, a DataLoader or Grain worker, an unpickled copy)
opens its own handles on first use. The class is Grain's
`RandomAccessDataSource` (`__len__`, `__getitem__`) and a PyTorch map-style
dataset as it is.

Mixtures: several output directories, mixed by weight at training time
-----------------------------------------------------------------------

    from transforms.io.map_dataset import H5MixtureDataset, MixtureSampler
    ds = H5MixtureDataset({"web": ("gs://bucket/web", 0.7), "code": ("/data/code", 0.3)}, by="tokens")
    sampler = ds.sampler(seed=0, rank=rank, world_size=world)   # a MixtureSampler
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for i in sampler:
            row = ds[i]                  # the same dict of int32 arrays as H5MapDataset's
            name = ds.names[ds.locate(i)[0]]   # which component it came from, if the loop wants to know

`H5MixtureDataset` lays its components end to end (component k's row j is
index `starts[k] + j`) and reads each row through the component's own
`H5MapDataset`. `MixtureSampler` (transforms/core/mixture_sampler.py) picks
the indices: each component's share of the samples (`by="samples"`, Cerebras
Model Zoo's `mixture`) or of the loss-valid tokens (`by="tokens"`) is its
weight, every prefix of the order is balanced (not i.i.d. draws), and it
resumes exactly from `state_dict()` like ResumableSampler. The component of
a row is told by `locate(i)`, not by a field in the row: a training loop
stacks or feeds every key of the row to the model (`model(**batch)`), and a
"source" key would be one it does not expect.

Every component must hold rows of the same shape and features, and mark the
loss the same way (the mask's polarity, as `verify` reads it): a batch mixes
them, and a training loop reads one convention. Otherwise the mixture is
refused, naming the components that differ.
"""

from __future__ import annotations

import bisect
import math
import os
import threading
import zlib
from typing import Mapping, Optional, Sequence, Union

import h5py
import numpy as np

from transforms.core.hf import to_hf_causal_lm
from transforms.core.mixture_sampler import MixtureSampler
from transforms.core.sampler import ResumableSampler
from transforms.core.verify import dataset_spec
from transforms.io import fs
from transforms.io.dataset import feature_names, iter_row_blocks, list_h5_files, open_dataset_params, open_h5

__all__ = ["H5MapDataset", "H5MixtureDataset", "MixtureSampler", "ResumableSampler", "to_hf_causal_lm", "inflate",
           "loss_tokens_per_row"]

_INT32 = np.dtype("<i4")

try:  # libdeflate inflates a row's chunk about twice as fast as zlib (`make bench-read`)
    import deflate as _libdeflate
except ImportError:  # pragma: no cover - a dependency; zlib gives the same bytes
    _libdeflate = None


def inflate(data: bytes, size: int) -> bytes:
    """A zlib-format chunk inflated to exactly `size` bytes (its adler32 checked, by either library)."""
    if _libdeflate is None:
        out = zlib.decompress(data)
    else:
        out = _libdeflate.zlib_decompress(data, size)
    if len(out) != size:
        raise ValueError(f"a chunk inflated to {len(out)} bytes, expected {size}")
    return out


def _locate(starts: list, index, what: str) -> tuple[int, int]:
    """(part k, row within it) of row `index` of parts whose first rows are `starts` (its last: the length)."""
    i, n = int(index), starts[-1]
    if i < 0:
        i += n
    if not 0 <= i < n:
        raise IndexError(f"row {index} of {what} of {n} rows")
    k = bisect.bisect_right(starts, i) - 1
    return k, i - starts[k]


class _FileRows:
    """One .h5 file of a dataset, opened in this process: row j by its chunk, or through h5py."""

    def __init__(self, path: str):
        self._path = path
        self._local = fs.is_local(path)
        if self._local:
            local = path[len("file://"):] if path.startswith("file://") else path
            self._h5 = h5py.File(local, "r")
            self._fd = os.open(local, os.O_RDONLY)
            self._remote = None
        else:
            self._h5 = h5py.File(fs.open_remote_for_seeks(path), "r")
            self._fd = None
            # A second handle for the chunks, with no read-ahead: each read is one row's bytes.
            self._remote = fs.open_remote_for_seeks(path, cache_type="none")
            self._lock = threading.Lock()
        data = self._h5["data"]
        self._data = data
        self.shape = data.shape
        self._row_bytes = int(np.prod(data.shape[1:])) * _INT32.itemsize
        self._offsets = self._sizes = self._raw = None
        if self._direct(data):
            n = data.shape[0]
            self._offsets = np.zeros(n, np.int64)
            self._sizes = np.zeros(n, np.int64)
            self._raw = np.zeros(n, bool)  # a chunk stored without its filter (HDF5 may skip a filter)
            seen = np.zeros(n, bool)

            def note(info):
                row = info.chunk_offset[0]
                self._offsets[row], self._sizes[row] = info.byte_offset, info.size
                self._raw[row] = bool(info.filter_mask & 1)
                seen[row] = True

            data.id.chunk_iter(note)
            if not seen.all():  # a chunk never written reads as the fill value: leave it to h5py
                self._offsets = None

    @staticmethod
    def _direct(data: h5py.Dataset) -> bool:
        n, features, msl = data.shape if data.ndim == 3 else (0, 0, 0)
        return (n > 0 and data.chunks == (1, features, msl) and data.compression == "gzip"
                and not data.shuffle and not data.fletcher32 and data.scaleoffset is None
                and data.dtype == _INT32 and hasattr(data.id, "chunk_iter"))

    def row(self, j: int) -> np.ndarray:
        """int32 [features, msl]."""
        if self._offsets is None:
            return np.asarray(self._data[j], dtype=np.int32)
        offset, size = int(self._offsets[j]), int(self._sizes[j])
        if self._fd is not None:
            data = os.pread(self._fd, size, offset)
        else:
            with self._lock:
                self._remote.seek(offset)
                data = self._remote.read(size)
        size = self._row_bytes
        if not self._raw[j]:
            data = inflate(data, size)
        elif len(data) != size:
            raise ValueError(f"{self._path}: row {j} holds {len(data)} bytes, expected {size}")
        return np.frombuffer(data, dtype=_INT32).reshape(self.shape[1:])

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        if self._remote is not None:
            self._remote.close()
        self._h5.close()


class H5MapDataset:
    """Rows of an output directory by index: `ds[i]` is a dict of int32 arrays named by the dataset's features.

    `features`: the names of a row's features (default: data_params.json's
    `features`, else the default three, VSL's five or DPO's six as
    `transforms.io.dataset.feature_names` says).
    """

    def __init__(self, out_dir: str, *, features: Optional[tuple] = None):
        self.out_dir = out_dir
        self.files = list_h5_files(out_dir)
        try:
            self.params: Optional[dict] = open_dataset_params(out_dir)
        except FileNotFoundError:
            self.params = None
        counts, shapes = [], set()
        for path in self.files:
            with open_h5(path) as f:  # attributes and shape only: no row is read
                counts.append(int(f.attrs["n_examples"]))
                shapes.add(tuple(f["data"].shape[1:]))
        if len(shapes) > 1:
            raise ValueError(f"{out_dir}: files hold rows of different shapes: {sorted(shapes)}")
        self.row_shape = shapes.pop() if shapes else None
        # starts[k] is the index of file k's first row; starts[-1] the length.
        self._starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).tolist()
        self.features = tuple(features) if features else feature_names(
            self.params, self.row_shape[0] if self.row_shape else None)
        if self.row_shape and len(self.features) != self.row_shape[0]:
            raise ValueError(f"{out_dir}: {len(self.features)} feature names for rows of {self.row_shape[0]} "
                             "features")
        self._spec, _ = dataset_spec(self.params)  # what the rows mean (mode, mask polarity), as verify reads it
        self._pid: Optional[int] = None
        self._open: dict = {}

    def __len__(self) -> int:
        return self._starts[-1]

    def __getitem__(self, index) -> dict:
        k, j = self.locate(index)
        row = self._file(k).row(j)
        return {name: row[f] for f, name in enumerate(self.features)}

    def locate(self, index) -> tuple[int, int]:
        """(file number in `files`, row within that file) of row `index` (negative counts from the end)."""
        return _locate(self._starts, index, "a dataset")

    def to_hf(self, row: dict, *, keep_last_target: bool = False) -> dict:
        """A row of this dataset in Hugging Face's causal-LM convention (see `to_hf_causal_lm`), read as `verify`
        reads the dataset: the mask's polarity as written (the reference's LMData and FIM masks are never
        inverted, whatever its data_params.json says), a trailing EOS input where the mode writes one."""
        return to_hf_causal_lm(row, inverted_mask=self._spec.inverted_mask,
                               trailing_eos_input=self._spec.trailing_eos_input, keep_last_target=keep_last_target,
                               untrained_tail_pad=self._spec.pad_id if self._spec.untrained_tail else None)

    def _file(self, k: int) -> _FileRows:
        if self._pid != os.getpid():
            # Another process (a fork, a worker): the parent's handles are not ours to use.
            self._open, self._pid = {}, os.getpid()
        rows = self._open.get(k)
        if rows is None:
            rows = self._open[k] = _FileRows(self.files[k])
        return rows

    def close(self) -> None:
        if self._pid == os.getpid():
            for rows in self._open.values():
                rows.close()
        self._open = {}

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_open"], state["_pid"] = {}, None  # handles stay with their process
        return state

    def __repr__(self) -> str:
        return f"H5MapDataset({self.out_dir!r}: {len(self)} rows of {self.features}, {len(self.files)} files)"


# ---------------------------------------------------------------- mixtures


def loss_tokens_per_row(ds: H5MapDataset) -> float:
    """A dataset's mean loss-valid tokens per row: data_params.json's post-process `loss_valid_tokens /
    n_examples`, or, where that is absent or counts other files (its n_examples is not the files'), counted from
    the rows: every position an attention mask trains (both sides of a DPO row), read in the mask's polarity
    as `verify` reads it. Counting reads every row once."""
    n = len(ds)
    if n == 0:
        return 0.0
    post = (ds.params or {}).get("post-process") or {}
    loss, examples = post.get("loss_valid_tokens"), post.get("n_examples")
    if _is_count(loss) and _is_count(examples) and examples == n:
        return loss / n
    masks = [f for f, name in enumerate(ds.features) if name == "attention_mask" or name.endswith("_attention_mask")]
    if not masks:
        raise ValueError(f"{ds.out_dir}: no attention_mask among the features {ds.features}: the loss-valid tokens "
                         "cannot be counted")
    trained = ds._spec.loss_value
    total = 0
    for path in ds.files:
        with open_h5(path) as f:
            for _, rows in iter_row_blocks(f["data"]):
                total += int(np.count_nonzero(rows[:, masks, :] == trained))
    return total / n


def _is_count(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 0


Components = Union[Mapping[str, tuple], Sequence]


def _parse_components(components: Components) -> list[tuple[str, str, float]]:
    """(name, out_dir, weight) of each component, in order; ValueError naming a malformed one."""
    items = []
    if isinstance(components, Mapping):
        for name, value in components.items():
            if not (isinstance(value, (tuple, list)) and len(value) == 2):
                raise ValueError(f"mixture component {name!r}: expected (out_dir, weight), got {value!r}")
            items.append((str(name), value[0], value[1]))
    elif isinstance(components, (list, tuple)):
        for value in components:
            if isinstance(value, Mapping):  # Cerebras' `train_input.mixture` entries
                unknown = sorted(set(value) - {"data_dir", "weight"})
                if unknown or "data_dir" not in value or "weight" not in value:
                    raise ValueError(f"mixture component {dict(value)!r}: expected the keys data_dir and weight"
                                     + (f" only, not {unknown}" if unknown else ""))
                path, weight = value["data_dir"], value["weight"]
            elif isinstance(value, (tuple, list)) and len(value) == 2:
                path, weight = value
            else:
                raise ValueError(f"mixture component {value!r}: expected (out_dir, weight)")
            items.append((os.fspath(path) if isinstance(path, (str, os.PathLike)) else repr(path), path, weight))
    else:
        raise ValueError(f"a mixture is {{name: (out_dir, weight)}} or [(out_dir, weight), ...], got {components!r}")
    if not items:
        raise ValueError("a mixture needs at least one component")
    out, seen = [], set()
    for name, path, weight in items:
        if name in seen:
            raise ValueError(f"mixture component {name!r} is given twice: name the components with a dict")
        seen.add(name)
        if isinstance(weight, bool) or not isinstance(weight, (int, float, np.integer, np.floating)) \
                or not math.isfinite(weight) or weight < 0:
            raise ValueError(f"mixture component {name!r}: weight must be a finite number >= 0, got {weight!r}")
        if not isinstance(path, (str, os.PathLike)):
            raise ValueError(f"mixture component {name!r}: out_dir must be a path, got {path!r}")
        out.append((name, os.fspath(path), float(weight)))
    if not any(w > 0 for _, _, w in out):
        raise ValueError(f"at least one mixture weight must be > 0, got {[w for _, _, w in out]}")
    return out


def _polarity(ds: H5MapDataset) -> str:
    return "an inverted mask (1: no loss)" if ds._spec.inverted_mask else "a mask of 1 where trained"


class H5MixtureDataset:
    """Rows of several output directories by one index, with the weights a `MixtureSampler` mixes them by.

    `components`: `{name: (out_dir, weight)}`, or `[(out_dir, weight), ...]`
    (named by their directories), or Cerebras' mixture list
    `[{"data_dir": ..., "weight": ...}, ...]`. A weight is >= 0 and need not
    add up to 1 with the others (they are normalized); weight 0 keeps the
    component's rows readable but never sampled (Cerebras drops it).
    `by`: what the weights share out, "samples" or "tokens" (then each
    component's loss-valid tokens per row is read from its data_params.json,
    or counted from its files: `loss_tokens_per_row`). `features`: as for
    H5MapDataset, for every component.
    """

    def __init__(self, components: Components, *, by: str = "samples", features: Optional[tuple] = None):
        if by not in ("samples", "tokens"):
            raise ValueError(f"by must be 'samples' or 'tokens', got {by!r}")
        parsed = _parse_components(components)
        self.by = by
        self.names = tuple(name for name, _, _ in parsed)
        self.paths = tuple(path for _, path, _ in parsed)
        self.weights = tuple(weight for _, _, weight in parsed)
        self.components = tuple(H5MapDataset(path, features=features) for path in self.paths)
        self.sizes = tuple(len(ds) for ds in self.components)
        for name, ds, weight in zip(self.names, self.components, self.weights):
            if weight > 0 and not len(ds):
                raise ValueError(f"mixture component {name!r} ({ds.out_dir}) has weight {weight} but no rows")
        self._check_rows_alike()
        held = [ds for ds in self.components if len(ds)]
        self.features = held[0].features
        self.row_shape = held[0].row_shape
        self._starts = np.concatenate([[0], np.cumsum(self.sizes, dtype=np.int64)]).tolist()
        self._tokens: Optional[tuple] = None
        if by == "tokens":  # read (or counted) now, so that a component without them fails here, not mid-run
            self._tokens = tuple(loss_tokens_per_row(ds) for ds in self.components)

    def _check_rows_alike(self) -> None:
        held = [(name, ds) for name, ds in zip(self.names, self.components) if len(ds)]
        first_name, first = held[0]
        for name, ds in held[1:]:
            if (ds.row_shape, ds.features) != (first.row_shape, first.features):
                raise ValueError(
                    f"mixture components must hold rows of one shape and features: {first_name!r} has rows of "
                    f"{list(first.row_shape)} ({', '.join(first.features)}), {name!r} has {list(ds.row_shape)} "
                    f"({', '.join(ds.features)}); a batch cannot hold both")
            if ds._spec.inverted_mask != first._spec.inverted_mask:
                raise ValueError(
                    f"mixture components must mark the loss the same way: {first_name!r} has {_polarity(first)}, "
                    f"{name!r} has {_polarity(ds)}; a training loop reads one convention (write both with the same "
                    "dataset.inverted_mask)")

    @property
    def tokens_per_row(self) -> tuple[float, ...]:
        """Each component's mean loss-valid tokens per row (`loss_tokens_per_row`; 0.0 for one without rows)."""
        if self._tokens is None:
            self._tokens = tuple(loss_tokens_per_row(ds) for ds in self.components)
        return self._tokens

    def sampler(self, *, seed: int = 0, rank: int = 0, world_size: int = 1, drop_last: bool = True,
                num_samples: Optional[int] = None) -> MixtureSampler:
        """The MixtureSampler of this mixture's sizes, weights and `by` (its docstring has the rest)."""
        return MixtureSampler(self.sizes, self.weights, by=self.by,
                              tokens_per_row=self.tokens_per_row if self.by == "tokens" else None,
                              num_samples=num_samples, seed=seed, rank=rank, world_size=world_size,
                              drop_last=drop_last)

    def __len__(self) -> int:
        return self._starts[-1]

    def __getitem__(self, index) -> dict:
        k, j = self.locate(index)
        return self.components[k][j]

    def locate(self, index) -> tuple[int, int]:
        """(component number in `names`, row within that component) of row `index` (negative counts from the end)."""
        return _locate(self._starts, index, "a mixture")

    def to_hf(self, row: dict, *, component: Optional[int] = None, keep_last_target: bool = False) -> dict:
        """A row in Hugging Face's causal-LM convention, read as its component's `H5MapDataset.to_hf` reads it.

        `component` (its number, as `locate` gives it) may be left out when every component reads alike;
        otherwise (e.g. LMData with Summarization, whose rows end their input with an untrained EOS) it is
        needed, and its absence is an error rather than a guess.
        """
        if component is None:
            specs = {(ds._spec.inverted_mask, ds._spec.trailing_eos_input) for ds in self.components if len(ds)}
            if len(specs) > 1:
                raise ValueError("the components' rows end differently (some with an untrained EOS input): give "
                                 "to_hf the row's component, ds.locate(i)[0]")
            component = next(k for k, ds in enumerate(self.components) if len(ds))
        return self.components[component].to_hf(row, keep_last_target=keep_last_target)

    def close(self) -> None:
        for ds in self.components:
            ds.close()

    def __repr__(self) -> str:
        parts = ", ".join(f"{name}: {size} rows x {weight:g}" for name, size, weight in
                          zip(self.names, self.sizes, self.weights))
        return f"H5MixtureDataset(by={self.by!r}; {parts}; rows of {self.features})"
