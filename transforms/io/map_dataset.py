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
"""

from __future__ import annotations

import bisect
import os
import threading
import zlib
from typing import Optional

import h5py
import numpy as np

from transforms.core.hf import to_hf_causal_lm
from transforms.core.sampler import ResumableSampler
from transforms.core.verify import dataset_spec
from transforms.io import fs
from transforms.io.dataset import feature_names, list_h5_files, open_dataset_params, open_h5

__all__ = ["H5MapDataset", "ResumableSampler", "to_hf_causal_lm", "inflate"]

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
        i = int(index)
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"row {index} of a dataset of {n} rows")
        k = bisect.bisect_right(self._starts, i) - 1
        return k, i - self._starts[k]

    def to_hf(self, row: dict, *, keep_last_target: bool = False) -> dict:
        """A row of this dataset in Hugging Face's causal-LM convention (see `to_hf_causal_lm`), read as `verify`
        reads the dataset: the mask's polarity as written (the reference's LMData and FIM masks are never
        inverted, whatever its data_params.json says), a trailing EOS input where the mode writes one."""
        return to_hf_causal_lm(row, inverted_mask=self._spec.inverted_mask,
                               trailing_eos_input=self._spec.trailing_eos_input, keep_last_target=keep_last_target)

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
