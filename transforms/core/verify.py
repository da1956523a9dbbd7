"""Checks of a written dataset: pure functions over arrays and dicts that return problem strings.

Nothing here opens a file: `pipelines.tools` reads the shards (via
`transforms.io.dataset`) and hands layouts, row blocks and data_params.json
to these functions. The recount is deliberately written again here rather
than taken from `transforms.core.stats`, so that verify is a second opinion
on the numbers the pipeline wrote, not the same code run twice.

Row semantics (both our output and the reference's), with `loss` the
positions whose mask marks a trained label and `end` the index after the
last of them:

- LMData: the real inputs are exactly the loss positions, a prefix of the
  row; labels[i] == input_ids[i + 1] for every real position but the last
  (whose label is the next token of the stream, not in the row).
- Summarization and FIM: a row is x[:-1], x[1:] of msl + 1 tokens, so
  labels[i] == input_ids[i + 1] at every position (padding included), the
  real inputs end one after `end` (the final EOS is an untrained input) and
  the last trained label is EOS. Summarization's loss positions are one run
  (completion + EOS); FIM's are a prefix.

Everywhere: ids in [0, vocab_size), mask values 0/1, pad_id on input and
label positions after the real part.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from transforms.core.stats import check_accounting

__all__ = [
    "LMDATA", "SUMMARIZATION", "FIM", "OURS", "REFERENCE", "DatasetSpec", "dataset_spec", "FileLayout",
    "check_layout", "RowChecker", "real_lengths", "loss_positions", "count_rows", "text_counts",
    "expected_post_process", "check_stats", "check_config", "documents_per_row",
]

LMDATA, SUMMARIZATION, FIM = "LMData", "Summarization", "FIM"
OURS, REFERENCE = "create_hdf5_dataset", "reference"
_PROCESSORS = {"LMDataPreprocessor": LMDATA, "SummarizationPreprocessor": SUMMARIZATION,
               "FIMDataPreprocessor": FIM}
# Examples shown per kind of row problem; the count is always exact.
_EXAMPLES = 1


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """What the rows of a dataset should look like, from its data_params.json."""

    mode: Optional[str]  # None when unknown: mode-specific checks are skipped
    producer: str  # OURS | REFERENCE: whose statistics conventions apply
    inverted_mask: bool  # the polarity of the mask as written
    max_seq_length: Optional[int] = None
    vocab_size: Optional[int] = None
    eos_id: Optional[int] = None
    pad_id: Optional[int] = None

    @property
    def loss_value(self) -> int:
        return 0 if self.inverted_mask else 1

    @property
    def trailing_eos_input(self) -> bool:
        return self.mode in (SUMMARIZATION, FIM)


def _int_or_none(value: Any) -> Optional[int]:
    return int(value) if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else None


def dataset_spec(params: Optional[Mapping]) -> tuple[DatasetSpec, list[str]]:
    """The spec of a dataset from its data_params.json (None: unknown), plus notes on what was assumed.

    A data_params.json without `setup.mode` was written by the reference,
    which ignores `inverted_mask` in LMData and FIM (SPEC §1h-3): its masks
    are then read as not inverted whatever the file says.
    """
    notes: list[str] = []
    if not params:
        return DatasetSpec(None, OURS, False), ["no data_params.json: mode-specific row checks are skipped"]
    setup = params.get("setup") or {}
    processing = params.get("processing") or {}
    dataset = params.get("dataset") or {}
    post = params.get("post-process") or {}
    producer = OURS if "mode" in setup else REFERENCE
    mode = setup.get("mode") or _PROCESSORS.get(setup.get("dataset_processor"))
    if mode not in (LMDATA, SUMMARIZATION, FIM):
        notes.append(f"data_params.json names no known mode ({setup.get('mode') or setup.get('dataset_processor')!r}): "
                     "mode-specific row checks are skipped")
        mode = None
    inverted = bool(dataset.get("inverted_mask", False))
    if producer == REFERENCE and inverted and mode in (LMDATA, FIM):
        notes.append("reference output: its LMData/FIM writer ignores inverted_mask (SPEC §1h-3), "
                     "so the masks are checked as not inverted")
        inverted = False
    spec = DatasetSpec(
        mode=mode, producer=producer, inverted_mask=inverted,
        max_seq_length=_int_or_none(processing.get("max_seq_length")),
        vocab_size=_int_or_none(post.get("vocab_size")),
        eos_id=_int_or_none(post.get("eos_id")),
        pad_id=_int_or_none(post.get("pad_id")),
    )
    return spec, notes


# ------------------------------------------------------------------ file layout


@dataclasses.dataclass(frozen=True)
class FileLayout:
    """What an HDF5 shard holds, apart from the rows (read by transforms.io.dataset.file_layout)."""

    name: str
    datasets: tuple = ()
    dtype: Optional[str] = None  # numpy dtype string of `data`, e.g. "int32"
    shape: Optional[tuple] = None
    chunks: Optional[tuple] = None
    compression: Optional[str] = None
    has_n_examples: bool = False
    n_examples: Any = None


def check_layout(layout: FileLayout, max_seq_length: Optional[int] = None) -> tuple[list[str], list[str]]:
    """(problems, notes) of one shard against the Cerebras HDF5 dataloader's rules.

    `max_seq_length`: what the model (or data_params.json) expects; None skips that comparison.
    """
    problems: list[str] = []
    notes: list[str] = []
    if not layout.name.endswith(".h5"):
        problems.append("name does not end in .h5: the Cerebras dataloader only reads *.h5")
    if "data" not in layout.datasets:
        problems.append(f"no dataset 'data' (datasets: {list(layout.datasets)})")
        return problems, notes
    extra = [d for d in layout.datasets if d != "data"]
    if extra:
        notes.append(f"extra datasets {extra} are ignored by the dataloader")
    if layout.dtype != "int32":
        problems.append(f"dataset 'data' has dtype {layout.dtype}, expected int32")
    shape = tuple(layout.shape or ())
    if len(shape) != 3 or shape[1] != 3:
        problems.append(f"dataset 'data' has shape {shape}, expected [n, 3, max_seq_length]")
        return problems, notes
    n, _, msl = shape
    if max_seq_length is not None and msl != max_seq_length:
        problems.append(f"rows hold {msl} tokens but max_seq_length is {max_seq_length}")
    if n == 0:
        notes.append("holds no rows (an empty dataset cannot be chunked, chunks/compression not checked)")
    else:
        if tuple(layout.chunks or ()) != (1, 3, msl):
            problems.append(f"chunks {layout.chunks}, expected (1, 3, {msl}) (one sample per chunk)")
        if layout.compression != "gzip":
            problems.append(f"compression {layout.compression!r}, expected 'gzip'")
    if not layout.has_n_examples:
        problems.append("attribute n_examples is missing")
    else:
        value = layout.n_examples
        if isinstance(value, np.ndarray) and value.size == 1:
            value = value.reshape(()).item()
        if _int_or_none(value) is None:
            problems.append(f"attribute n_examples is {value!r}, not an integer")
        elif int(value) != n:
            problems.append(f"attribute n_examples {int(value)} != {n} rows in 'data'")
    return problems, notes


# ------------------------------------------------------------------------- rows


def loss_positions(rows: np.ndarray, spec: DatasetSpec) -> np.ndarray:
    """[n, msl] bool: positions whose label is trained."""
    return rows[:, 1, :] == spec.loss_value


def _loss_end(loss: np.ndarray) -> np.ndarray:
    """Per row, the index after the last loss position (0 without one)."""
    msl = loss.shape[1]
    end = msl - np.argmax(loss[:, ::-1], axis=1)
    return np.where(loss.any(axis=1), end, 0)


def real_lengths(rows: np.ndarray, spec: DatasetSpec) -> np.ndarray:
    """Per row, the number of real (non-pad) input positions; see the module docstring."""
    end = _loss_end(loss_positions(rows, spec))
    if spec.trailing_eos_input:
        end = np.where(end > 0, np.minimum(end + 1, rows.shape[2]), 0)
    return end


def documents_per_row(rows: np.ndarray, spec: DatasetSpec) -> np.ndarray:
    """Per row, the EOS ids among the real inputs (documents that end in the row)."""
    if spec.eos_id is None:
        return np.zeros(len(rows), dtype=np.int64)
    real = np.arange(rows.shape[2])[None, :] < real_lengths(rows, spec)[:, None]
    return ((rows[:, 0, :] == spec.eos_id) & real).sum(axis=1)


class RowChecker:
    """Row-level checks of one file, fed block by block; problems aggregated per kind."""

    def __init__(self, spec: DatasetSpec, vocab_size: Optional[int]):
        self._spec = spec
        self._vocab = vocab_size
        self._found: dict[str, list] = {}  # kind -> [count, first example, extra]
        self._no_loss_rows = 0

    def _add(self, kind: str, count: int, example: str, extra: Any = None, merge=None) -> None:
        if not count:
            return
        entry = self._found.setdefault(kind, [0, example, extra])
        entry[0] += int(count)
        if merge is not None and extra is not None:
            entry[2] = merge(entry[2], extra)

    def add(self, rows: np.ndarray, start: int = 0) -> None:
        """Check rows [n, 3, msl]; `start` is the index of rows[0] in the file."""
        spec = self._spec
        if rows.ndim != 3 or rows.shape[1] != 3 or not len(rows):
            return
        n, _, msl = rows.shape
        inp, mask, lab = rows[:, 0, :], rows[:, 1, :], rows[:, 2, :]

        if self._vocab is not None:
            for name, ids in (("input_ids", inp), ("labels", lab)):
                high = ids >= self._vocab
                if high.any():
                    r, p = _first(high)
                    self._add(f"{name}>=vocab", int(high.sum()),
                              f"row {start + r}, position {p}: {int(ids[r, p])}",
                              int(ids.max()), max)
        for name, ids in (("input_ids", inp), ("labels", lab)):
            neg = ids < 0
            if neg.any():
                r, p = _first(neg)
                self._add(f"{name}<0", int(neg.sum()), f"row {start + r}, position {p}: {int(ids[r, p])}")
        bad_mask = (mask != 0) & (mask != 1)
        if bad_mask.any():
            r, p = _first(bad_mask)
            self._add("mask", int(bad_mask.sum()), f"row {start + r}, position {p}: {int(mask[r, p])}")

        loss = mask == spec.loss_value
        end = _loss_end(loss)
        has_loss = end > 0
        self._no_loss_rows += int((~has_loss).sum())
        if spec.mode is None:
            return
        pos = np.arange(msl)[None, :]
        count = loss.sum(axis=1)

        # The loss positions' layout: a prefix (LMData, FIM) or one run (Summarization).
        if spec.mode == SUMMARIZATION:
            first = np.argmax(loss, axis=1)
            bad_rows = has_loss & (count != end - first)
            layout = "one run of trained positions (completion + EOS)"
        else:
            bad_rows = has_loss & (count != end)
            layout = "trained positions first, then untrained ones"
        if bad_rows.any():
            r = int(np.flatnonzero(bad_rows)[0])
            self._add("mask_layout", int(bad_rows.sum()), f"row {start + r}", layout)

        real = real_lengths(rows, spec)
        # Labels shifted by one.
        if spec.mode == LMDATA:
            where = pos[:, :-1] < (real - 1)[:, None]
        else:
            where = np.ones((n, msl - 1), dtype=bool)
        wrong = where & (lab[:, :-1] != inp[:, 1:])
        if wrong.any():
            r, p = _first(wrong)
            rows_hit = int(wrong.any(axis=1).sum())
            self._add("shift", rows_hit, f"row {start + r}, position {p}: label {int(lab[r, p])}, "
                                         f"next input_id {int(inp[r, p + 1])}")

        # Padding after the real part.
        if spec.pad_id is not None:
            after = pos >= real[:, None]
            for name, ids in (("input_ids", inp), ("labels", lab)):
                bad = after & (ids != spec.pad_id)
                if bad.any():
                    r, p = _first(bad)
                    self._add(f"pad_{name}", int(bad.sum()),
                              f"row {start + r}, position {p}: {int(ids[r, p])}", spec.pad_id)

        # The last trained label is EOS.
        if spec.trailing_eos_input and spec.eos_id is not None and has_loss.any():
            idx = np.flatnonzero(has_loss)
            last = lab[idx, end[idx] - 1]
            bad = last != spec.eos_id
            if bad.any():
                k = int(np.flatnonzero(bad)[0])
                r = int(idx[k])
                self._add("last_label", int(bad.sum()), f"row {start + r}, position {int(end[r]) - 1}: "
                                                        f"{int(last[k])}", spec.eos_id)

    def problems(self) -> list[str]:
        out = []
        for kind, (count, example, extra) in self._found.items():
            out.append(_describe(kind, count, example, extra, self._vocab, self._spec))
        return out

    def notes(self) -> list[str]:
        if self._no_loss_rows:
            return [f"{self._no_loss_rows} rows have no trained position (they teach nothing)"]
        return []


def _first(mask: np.ndarray) -> tuple[int, int]:
    r, p = np.argwhere(mask)[0]
    return int(r), int(p)


def _describe(kind: str, count: int, example: str, extra: Any, vocab: Optional[int], spec: DatasetSpec) -> str:
    rows = f"{count} row{'' if count == 1 else 's'}"
    mask_name = "inverted mask" if spec.inverted_mask else "mask"
    if kind.endswith(">=vocab"):
        name = kind.split(">=")[0]
        return f"{count} {name} >= vocab_size {vocab} (max {extra}; first: {example})"
    if kind.endswith("<0"):
        return f"{count} negative {kind[:-2]} (first: {example})"
    if kind == "mask":
        return f"{count} attention_mask values are neither 0 nor 1 (first: {example})"
    if kind == "mask_layout":
        return f"{rows} whose {mask_name} is not {extra} as {spec.mode} writes it (first: {example})"
    if kind == "shift":
        scope = "in the real part" if spec.mode == LMDATA else "(x[:-1], x[1:] construction)"
        return f"{rows} whose labels are not input_ids shifted by one {scope} (first: {example})"
    if kind.startswith("pad_"):
        return f"{count} {kind[4:]} after the real part are not pad_id {extra} (first: {example})"
    if kind == "last_label":
        return f"{rows} whose last trained label is not EOS {extra} (first: {example})"
    return f"{count} {kind} (first: {example})"


# ----------------------------------------------------------------------- counts


def count_rows(rows: np.ndarray, spec: DatasetSpec) -> Counter:
    """The statistics of rows as written, recounted independently of transforms.core.stats."""
    n, _, msl = rows.shape if rows.ndim == 3 else (0, 3, 0)
    if not n:
        return Counter()
    loss = int(loss_positions(rows, spec).sum())
    real = int(real_lengths(rows, spec).sum())
    out = Counter({
        "num_sequences": n,
        "num_tokens": n * msl,
        "loss_valid_tokens": loss,
        "num_masked_tokens": n * msl - loss,
        "non_pad_tokens": real,
        "num_pad_tokens": n * msl - real,
    })
    if spec.pad_id is not None:
        out["input_ids_equal_pad_id"] = int((rows[:, 0, :] == spec.pad_id).sum())
    return out


def real_inputs(rows: np.ndarray, spec: DatasetSpec) -> list[list[int]]:
    """Each row's real input ids, for detokenizing."""
    return [rows[i, 0, :k].tolist() for i, k in enumerate(real_lengths(rows, spec).tolist())]


def text_counts(texts: Iterable[str]) -> Counter:
    """detokenized_chars / detokenized_bytes of decoded rows, as the pipeline counts them."""
    chars = nbytes = 0
    for t in texts:
        chars += len(t)
        nbytes += len(t.encode("utf-8", errors="surrogatepass"))
    return Counter({"detokenized_chars": chars, "detokenized_bytes": nbytes})


# ------------------------------------------------------------------- statistics


def expected_post_process(counts: Mapping[str, int], spec: DatasetSpec) -> dict[str, int]:
    """The recountable post-process numbers, in the conventions of whoever wrote the dataset.

    Ours are exact. The reference's (SPEC §1e, §1h-16) are reproduced where
    they are a deterministic function of the rows: Summarization counts one
    pad and one masked token too many per row; FIM's num_pad_tokens counts
    input ids equal to pad_id (EOS too when pad == eos).
    """
    n = int(counts.get("num_sequences", 0))
    out = {
        "n_examples": n,
        "num_tokens": int(counts.get("num_tokens", 0)),
        "loss_valid_tokens": int(counts.get("loss_valid_tokens", 0)),
        "num_masked_tokens": int(counts.get("num_masked_tokens", 0)),
        "num_pad_tokens": int(counts.get("num_pad_tokens", 0)),
    }
    if spec.producer == REFERENCE:
        if spec.mode == SUMMARIZATION:
            out["num_pad_tokens"] += n
            out["num_masked_tokens"] += n
        elif spec.mode == FIM:
            if "input_ids_equal_pad_id" in counts:
                out["num_pad_tokens"] = int(counts["input_ids_equal_pad_id"])
            else:
                del out["num_pad_tokens"]
    return out


def _mismatch(where: str, key: str, claimed: Any, recount: Any) -> str:
    return f"{where}.{key} is {claimed}, the files recount to {recount}"


def check_stats(params: Mapping, counts: Mapping[str, int], spec: DatasetSpec, *,
                file_rows: Mapping[str, int], detokenized: Optional[Mapping[str, int]] = None,
                detokenized_note: str = "") -> tuple[list[str], list[str]]:
    """(problems, notes): data_params.json's statistics against a recount of the files.

    `file_rows`: rows per .h5 file name, as found on disk. `detokenized`:
    detokenized_chars/bytes recounted with the dataset's tokenizer, or None
    (then those two are skipped, with `detokenized_note` as the reason).
    """
    problems: list[str] = []
    notes: list[str] = []
    post = params.get("post-process")
    if not isinstance(post, Mapping):
        return ["post-process section is missing"], notes
    for key, value in expected_post_process(counts, spec).items():
        if key not in post:
            problems.append(f"post-process.{key} is missing")
        elif post[key] != value:
            problems.append(_mismatch("post-process", key, post[key], value))
    if spec.producer == REFERENCE and spec.mode == SUMMARIZATION:
        notes.append("reference Summarization: num_pad_tokens and num_masked_tokens checked with the reference's "
                     "one-per-row over-count (SPEC §1e)")
    if spec.producer == REFERENCE and spec.mode == FIM:
        notes.append("reference FIM: num_pad_tokens checked as the count of input ids equal to pad_id "
                     "(SPEC §1h-16)")

    # Formulas that hold between the post-process keys themselves.
    n_claimed = post.get("n_examples")
    for kind in ("bytes", "chars"):
        raw, avg = post.get(f"raw_{kind}_count"), post.get(f"average_{kind}_per_sequence")
        if isinstance(raw, int) and isinstance(n_claimed, int) and isinstance(avg, int):
            want = math.ceil(raw / n_claimed) if n_claimed else 0
            if avg != want:
                problems.append(f"post-process.average_{kind}_per_sequence is {avg}, "
                                f"ceil(raw_{kind}_count / n_examples) is {want}")
    p, d, s = (post.get(k) for k in ("processed_files", "discarded_files", "successful_files"))
    if all(isinstance(v, int) for v in (p, d, s)) and s != p - d:
        problems.append(f"post-process.successful_files is {s}, processed_files - discarded_files is {p - d}")

    h5s = params.get("h5_dataset_stats")
    if isinstance(h5s, Mapping):
        for key in ("num_sequences", "num_tokens", "loss_valid_tokens", "non_pad_tokens"):
            want = int(counts.get(key, 0))
            if key not in h5s:
                problems.append(f"h5_dataset_stats.{key} is missing")
            elif h5s[key] != want:
                problems.append(_mismatch("h5_dataset_stats", key, h5s[key], want))
        if detokenized is None:
            notes.append(f"h5_dataset_stats.detokenized_chars/bytes not checked: {detokenized_note or 'no tokenizer'}")
        else:
            for key in ("detokenized_chars", "detokenized_bytes"):
                want = int(detokenized.get(key, 0))
                if key not in h5s:
                    problems.append(f"h5_dataset_stats.{key} is missing")
                elif h5s[key] != want:
                    problems.append(_mismatch("h5_dataset_stats", key, h5s[key], want))
    elif spec.producer == OURS:
        problems.append("h5_dataset_stats section is missing")

    files = params.get("files")
    if isinstance(files, Mapping):
        for name in sorted(set(files) - set(file_rows)):
            problems.append(f"files lists {name}, which is not in the directory")
        for name in sorted(set(file_rows) - set(files)):
            problems.append(f"{name} is in the directory but not listed under files")
        for name in sorted(set(files) & set(file_rows)):
            if files[name] != file_rows[name]:
                problems.append(f"files.{name} is {files[name]}, the file holds {file_rows[name]} rows")
    elif spec.producer == OURS:
        problems.append("files section is missing")

    inp = params.get("input")
    if isinstance(inp, Mapping):
        try:
            problems += [f"input: {p}" for p in check_accounting(inp)]
            for post_key, in_key in (("processed_files", "good"), ("discarded_files", "dropped"),
                                     ("successful_files", "used")):
                if post_key in post and post[post_key] != inp[in_key]:
                    problems.append(f"post-process.{post_key} is {post[post_key]}, input.{in_key} is {inp[in_key]}")
        except (KeyError, TypeError) as e:
            problems.append(f"input section is malformed ({e!r})")
    elif spec.producer == OURS:
        problems.append("input section is missing")
    if spec.producer == REFERENCE:
        notes.append("reference output: no h5_dataset_stats/input/files sections; document counters "
                     "(processed/discarded/successful) and raw/normalized counts are not recountable from the files")
    return problems, notes


def check_config(params: Optional[Mapping], spec: DatasetSpec, *, file_msls: Sequence[int],
                 vocab_flag: Optional[int], msl_flag: Optional[int],
                 tokenizer_vocab: Optional[int]) -> tuple[list[str], list[str]]:
    """(problems, notes): the configured max_seq_length / vocab size against what the files hold.

    The mismatch check the Cerebras docs promise: data_params.json's
    max_seq_length against the rows, the model's (flags) against both, and
    the vocabulary the files were tokenized with against the model's.
    """
    problems: list[str] = []
    notes: list[str] = []
    msls = sorted(set(file_msls))
    if len(msls) > 1:
        problems.append(f"files hold rows of different lengths: {msls}")
    if params is not None and spec.max_seq_length is not None:
        for m in msls:
            if m != spec.max_seq_length:
                problems.append(f"processing.max_seq_length is {spec.max_seq_length}, but files hold rows of {m}")
    if msl_flag is not None and spec.max_seq_length is not None and msl_flag != spec.max_seq_length:
        problems.append(f"the model's max_seq_length {msl_flag} != processing.max_seq_length {spec.max_seq_length}")
    if vocab_flag is not None and spec.vocab_size is not None and spec.vocab_size > vocab_flag:
        problems.append(f"post-process.vocab_size {spec.vocab_size} > the model's vocab_size {vocab_flag}: "
                        "the tokenizer can emit ids the model cannot embed")
    if tokenizer_vocab is not None and spec.vocab_size is not None and tokenizer_vocab != spec.vocab_size:
        message = (f"post-process.vocab_size is {spec.vocab_size}, the tokenizer rebuilt from data_params.json "
                   f"has {tokenizer_vocab}")
        if spec.producer == REFERENCE:
            notes.append(message + " (the reference's HF vocab_size excludes added tokens, SPEC §1h-15)")
        else:
            problems.append(message)
    return problems, notes
