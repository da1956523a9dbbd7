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

- LMData_VSL and Summarization_VSL (5 features, MODES.md §A1.5 / §A2.2):
  documents back to back from position 0, each starting where position_ids
  is 0; within a document of n positions position_ids count 0 .. n-1,
  attention_span counts n-1 .. 0 and labels[i] == input_ids[i + 1] but at
  its last position (whose label is its last token, never an input). Every
  document's last position is trained, so the real part ends at `end`.
  LMData_VSL trains every real position; Summarization_VSL trains, per
  document, one run ending at its last position, whose label is EOS. After
  the real part: pad_id in input_ids and labels, 0 in attention_span and
  position_ids.

- Chat (3 features, MODES.md §B2.3): one conversation per row, x[:-1],
  x[1:] of its tokens; the mask any 0/1 pattern (the assistant turns), but the
  tokens end with the last trained one, so the real part ends at `end`, as in
  LMData, and labels[i] == input_ids[i + 1] inside it. With Cerebras 2.10's
  loss span (`chat_loss_span: content`) the template's text after the last
  turn follows as untrained labels (Qwen's final newline): the real part then
  ends after the last label that is not padding (`untrained_tail`).
- Chat_VSL (5 features): conversations as VSL documents (the VSL rules
  above); the mask any pattern inside a conversation, but each
  conversation's last position trained (with 2.10's loss span, the
  conversation's untrained closing text instead, as in Chat).
- DPO (6 features, MODES.md §B3): two sequences per row, chosen (features
  0-2) and rejected (3-5), each over S = P + R (prompt, response): input_ids
  S unshifted, labels padding on the first |P| - 1 positions then R, the mask
  one run on positions |P| - 1 .. |S| - 2 (the labels that are R). So per
  side |P| = first trained position + 1 and |S| = `end` + 1 (like
  Summarization's trailing EOS input, the last input's label is padding),
  and both sides start with the same |P| input ids. The statistics count
  both sides of every row (`sequences`), n_examples the rows.

Everywhere: ids and labels in [0, vocab_size) (attention_span and
position_ids are not ids: the reference's comparison of them with vocab_size
is its bug, MODES.md §A5.9), mask values 0/1, pad_id on input and label
positions after the real part.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

import numpy as np

from transforms.core.features import (ATTENTION_MASK, ATTENTION_SPAN, DPO_FEATURES, INPUT_IDS, KEY_PADDING_FEATURES,
                                      KEY_PADDING_MASK, LABELS, LM_FEATURES, POSITION_IDS, VSL_FEATURES)
from transforms.core.decontam import check_decontam
from transforms.core.dedup import check_dedup
from transforms.core.langid import check_language
from transforms.core.quality import check_quality
from transforms.core.mixture import check_mixture
from transforms.core.modes import CONVERSATION, RESPONSE, RUN, TEXT, TURNS, Mode, mode_of_processor
from transforms.core.reasons import known as known_reason
from transforms.core.stats import check_accounting

__all__ = [
    "OURS", "REFERENCE", "DatasetSpec", "dataset_spec", "mode_features", "FileLayout", "check_layout",
    "RowChecker", "sequences", "real_lengths", "loss_positions", "document_starts", "trained_runs", "count_rows",
    "real_inputs", "detokenized_inputs", "text_counts", "expected_post_process", "expected_h5_dataset_stats",
    "check_stats", "check_config", "documents_per_row",
]

_MODES_210 = ("pretraining", "finetuning", "dpo", "nlg", "custom", "embedding_training", "embedding_generation")
OURS, REFERENCE = "create_hdf5_dataset", "reference"
_FACTOR_TOLERANCE = 0.5e-4  # vsl_packing_factor is rounded to 4 decimals
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
    features: Optional[tuple] = None  # data_params.json's `features`; None: the mode's (see feature_names)
    # Chat: "turn" (ours): a row's real part ends with its last trained position; "content" (Cerebras 2.10's
    # loss span): the template's text after the last turn follows, untrained.
    chat_loss_span: str = "turn"

    @property
    def loss_value(self) -> int:
        return 0 if self.inverted_mask else 1

    @property
    def traits(self) -> Optional[Mode]:
        """The mode's entry in the table of modes; None for an unknown mode."""
        return mode_of_processor(self.mode)

    @property
    def trailing_eos_input(self) -> bool:
        """Whether a sequence's real inputs end one after its last trained position (see the module docstring)."""
        return self.traits is not None and self.traits.trailing_eos_input

    @property
    def vsl(self) -> bool:
        return self.traits is not None and self.traits.vsl

    @property
    def loss(self) -> Optional[str]:
        """Where a sequence's trained positions lie (transforms.core.modes), None for an unknown mode."""
        return self.traits.loss if self.traits is not None else None

    @property
    def untrained_tail(self) -> bool:
        """Whether a conversation's real part may end with untrained labels (the template's text after its last
        turn, under Cerebras 2.10's loss span): it then ends with its last label that is not padding."""
        return (self.traits is not None and self.traits.record == CONVERSATION and self.chat_loss_span != "turn"
                and self.pad_id is not None)

    @property
    def feature_names(self) -> tuple:
        """What data[:, i, :] holds: the recorded list, else the mode's."""
        return self.features if self.features is not None else mode_features(self.mode)

    @property
    def num_features(self) -> int:
        return len(self.feature_names)

    @property
    def rows_known(self) -> bool:
        """Whether the mode-specific row checks apply: a known mode whose rows hold its features in order."""
        return self.mode is not None and _written_by(self.mode, self.feature_names)

    @property
    def sides(self) -> tuple:
        """The sequences one row holds: DPO's chosen and rejected (3 features each), else one ("")."""
        return self.traits.sides if self.traits is not None and self.feature_names == self.traits.features else ("",)


def mode_features(mode: Optional[str]) -> tuple:
    """The features a mode writes, in row order (3 for an unknown mode)."""
    traits = mode_of_processor(mode)
    return traits.features if traits is not None else LM_FEATURES


def _written_by(mode: Optional[str], features: tuple) -> bool:
    """Whether `mode` writes rows of these features: its own, or Chat's with key_padding_mask (a read hook's)."""
    traits = mode_of_processor(mode)
    return traits.writes(features) if traits is not None else features == LM_FEATURES


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
    # Ours name both; 2.1.1 names only the processor, 2.10 only its own mode (pretraining, ...). A job run from
    # a 2.10 config keeps 2.10's setup.mode, and its processor says which of our modes made it.
    written_by_210 = setup.get("mode") in _MODES_210 and "dataset_processor" not in setup
    producer = OURS if "mode" in setup and not written_by_210 else REFERENCE
    traits = mode_of_processor(setup.get("mode")) or mode_of_processor(setup.get("dataset_processor"))
    mode = traits.name if traits is not None else None
    if mode is None:
        notes.append(f"data_params.json names no known mode ({setup.get('mode') or setup.get('dataset_processor')!r}): "
                     "mode-specific row checks are skipped")
        mode = None
    features = params.get("features")
    if _is_feature_list(features):
        features = tuple(features)
        if mode is not None and not _written_by(mode, features):
            notes.append(f"features {list(features)} are not what {mode} writes: mode-specific row checks "
                         "are skipped")
    else:
        features = None  # absent, or malformed (check_config reports it): the mode's
        if producer == OURS and "features" not in params:
            notes.append(f"data_params.json has no features list: rows read as {', '.join(mode_features(mode))}")
    inverted = bool(dataset.get("inverted_mask", False))
    if producer == REFERENCE and inverted and traits is not None and traits.packed_windows:
        notes.append("reference output: its LMData/FIM writer ignores inverted_mask (SPEC §1h-3), "
                     "so the masks are checked as not inverted")
        inverted = False
    spec = DatasetSpec(
        mode=mode, producer=producer, inverted_mask=inverted,
        max_seq_length=_int_or_none(processing.get("max_seq_length")),
        vocab_size=_int_or_none(post.get("vocab_size")),
        eos_id=_int_or_none(post.get("eos_id")),
        pad_id=_int_or_none(post.get("pad_id")),
        features=features,
        chat_loss_span=str(dataset.get("chat_loss_span") or "turn"),
    )
    return spec, notes


def _is_feature_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) and v for v in value)


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


def check_layout(layout: FileLayout, max_seq_length: Optional[int] = None,
                 features: Sequence[str] = LM_FEATURES) -> tuple[list[str], list[str]]:
    """(problems, notes) of one shard against the Cerebras HDF5 dataloader's rules.

    `max_seq_length`: what the model (or data_params.json) expects; None skips that comparison.
    `features`: the names a row should hold, in order (`DatasetSpec.feature_names`).
    """
    width = len(features)
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
    if len(shape) != 3:
        problems.append(f"dataset 'data' has shape {shape}, expected [n, {width}, max_seq_length]")
        return problems, notes
    if shape[1] != width:
        problems.append(f"dataset 'data' holds {shape[1]} features per row (shape {shape}), but data_params.json "
                        f"expects {width} ({', '.join(features)})")
        return problems, notes
    n, _, msl = shape
    if max_seq_length is not None and msl != max_seq_length:
        problems.append(f"rows hold {msl} tokens but max_seq_length is {max_seq_length}")
    if n == 0:
        notes.append("holds no rows (an empty dataset cannot be chunked, chunks/compression not checked)")
    else:
        if tuple(layout.chunks or ()) != (1, width, msl):
            problems.append(f"chunks {layout.chunks}, expected (1, {width}, {msl}) (one sample per chunk)")
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


def sequences(rows: np.ndarray, spec: DatasetSpec) -> np.ndarray:
    """The sequences of rows [n, F, msl]: DPO's sides as [2n, 3, msl], row i's chosen side at 2i and its rejected
    side at 2i + 1; every other mode's rows as they are.

    `loss_positions`, `real_lengths` and `real_inputs` read sequences: give them these for DPO rows.
    """
    k = len(spec.sides)
    if k == 1 or rows.ndim != 3 or rows.shape[1] != 3 * k:
        return rows
    n, _, msl = rows.shape
    return rows.reshape(n * k, 3, msl)


def loss_positions(rows: np.ndarray, spec: DatasetSpec) -> np.ndarray:
    """[n, msl] bool: positions whose label is trained (of sequences: DPO rows through `sequences`)."""
    return rows[:, ATTENTION_MASK, :] == spec.loss_value


def _loss_end(loss: np.ndarray) -> np.ndarray:
    """Per row, the index after the last loss position (0 without one)."""
    msl = loss.shape[1]
    end = msl - np.argmax(loss[:, ::-1], axis=1)
    return np.where(loss.any(axis=1), end, 0)


def real_lengths(rows: np.ndarray, spec: DatasetSpec) -> np.ndarray:
    """Per row (sequence: DPO rows through `sequences`), the number of real (non-pad) input positions; see the
    module docstring."""
    end = _loss_end(loss_positions(rows, spec))
    if spec.trailing_eos_input:
        end = np.where(end > 0, np.minimum(end + 1, rows.shape[2]), 0)
    if spec.untrained_tail:
        end = np.maximum(end, _loss_end(rows[:, LABELS, :] != spec.pad_id))
    return end


def document_starts(rows: np.ndarray, spec: DatasetSpec) -> np.ndarray:
    """[n, msl] bool, VSL rows: the real positions where a document (segment) starts (position_ids 0)."""
    real = np.arange(rows.shape[2])[None, :] < real_lengths(rows, spec)[:, None]
    return real & (rows[:, POSITION_IDS, :] == 0)


def trained_runs(rows: np.ndarray, spec: DatasetSpec) -> np.ndarray:
    """Per row (sequence), its runs of trained positions: in Chat, the assistant turns it trains."""
    loss = loss_positions(rows, spec)
    begins = loss.copy()
    begins[:, 1:] &= ~loss[:, :-1]
    return begins.sum(axis=1)


def documents_per_row(rows: np.ndarray, spec: DatasetSpec) -> np.ndarray:
    """Per row, its documents: VSL, the segments it holds (position_ids 0 in the real part); Chat and DPO,
    one (a conversation, an example); otherwise the EOS ids among the real inputs (documents that end in
    the row)."""
    if spec.vsl and rows.shape[1] == len(VSL_FEATURES):
        return document_starts(rows, spec).sum(axis=1)
    if spec.traits is not None and spec.traits.one_row_per_record:
        return np.ones(len(rows), dtype=np.int64)
    if spec.eos_id is None:
        return np.zeros(len(rows), dtype=np.int64)
    real = np.arange(rows.shape[2])[None, :] < real_lengths(rows, spec)[:, None]
    return ((rows[:, INPUT_IDS, :] == spec.eos_id) & real).sum(axis=1)


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
        """Check rows [n, F, msl] (F = the spec's feature count); `start` is the index of rows[0] in the file."""
        spec = self._spec
        if rows.ndim != 3 or rows.shape[1] != spec.num_features or not len(rows):
            return
        seqs = sequences(rows, spec)  # DPO: the sides, sequence q is row q // 2's side q % 2
        where = _where(start, spec.sides)
        n, _, msl = rows.shape
        inp, mask, lab = seqs[:, INPUT_IDS, :], seqs[:, ATTENTION_MASK, :], seqs[:, LABELS, :]

        if self._vocab is not None:
            for name, ids in (("input_ids", inp), ("labels", lab)):
                high = ids >= self._vocab
                if high.any():
                    r, p = _first(high)
                    self._add(f"{name}>=vocab", int(high.sum()),
                              f"{where(r)}, position {p}: {int(ids[r, p])}",
                              int(ids.max()), max)
        for name, ids in (("input_ids", inp), ("labels", lab)):
            neg = ids < 0
            if neg.any():
                r, p = _first(neg)
                self._add(f"{name}<0", int(neg.sum()), f"{where(r)}, position {p}: {int(ids[r, p])}")
        bad_mask = (mask != 0) & (mask != 1)
        if bad_mask.any():
            r, p = _first(bad_mask)
            self._add("mask", int(bad_mask.sum()), f"{where(r)}, position {p}: {int(mask[r, p])}")

        loss = mask == spec.loss_value
        end = _loss_end(loss)
        has_loss = end > 0
        if len(spec.sides) == 1:  # a DPO side without one is a problem (_add_dpo)
            self._no_loss_rows += int((~has_loss).sum())
        if not spec.rows_known:
            return
        if spec.vsl:
            self._add_vsl(rows, where, loss, end)
            return
        if spec.loss == TURNS:
            self._add_chat(rows, where, loss)
            return
        if spec.loss == RESPONSE:
            self._add_dpo(seqs, start, where, loss)
            return
        pos = np.arange(msl)[None, :]
        count = loss.sum(axis=1)

        # The loss positions' layout: a prefix (LMData, FIM) or one run (Summarization).
        if spec.loss == RUN:
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
        # Labels shifted by one: a window's last label is the next window's first input (LMData); rows built as
        # x[:-1], x[1:] (a trailing EOS input) shift over the whole row.
        if not spec.trailing_eos_input:
            where = pos[:, :-1] < (real - 1)[:, None]
        else:
            where = np.ones((n, msl - 1), dtype=bool)
        wrong = where & (lab[:, :-1] != inp[:, 1:])
        if wrong.any():
            r, p = _first(wrong)
            rows_hit = int(wrong.any(axis=1).sum())
            self._add("shift", rows_hit, f"row {start + r}, position {p}: label {int(lab[r, p])}, "
                                         f"next input_id {int(inp[r, p + 1])}")

        # Padding after the real part; labels from the last trained position on (Summarization and FIM: the
        # trailing EOS input's label is padding too, x[end + 1], which no next input repeats when it is the
        # row's last position).
        if spec.pad_id is not None:
            after = pos >= real[:, None]
            after_loss = pos >= end[:, None]
            for name, ids, scope in (("input_ids", inp, after), ("labels", lab, after_loss)):
                bad = scope & (ids != spec.pad_id)
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

    def _add_rows(self, kind: str, bad: np.ndarray, where: Callable[[int], str], example: Callable[[int, int], str],
                  extra: Any = None) -> None:
        """A problem counted in rows (DPO: sides): `bad` [n, msl], `example(r, p)` describes its first position."""
        if bad.any():
            r, p = _first(bad)
            self._add(kind, int(bad.any(axis=1).sum()), f"{where(r)}, position {p}: {example(r, p)}", extra)

    def _add_pad(self, name: str, bad: np.ndarray, values: np.ndarray, where: Callable[[int], str], want: int) -> None:
        """Padding positions of `name` that do not hold `want`, counted in positions."""
        if bad.any():
            r, p = _first(bad)
            self._add(f"pad_{name}", int(bad.sum()), f"{where(r)}, position {p}: {int(values[r, p])}", want)

    def _add_chat(self, rows: np.ndarray, where: Callable[[int], str], loss: np.ndarray) -> None:
        """The Chat invariants (module docstring): any mask, labels shifted inside the real part, which ends
        with its last trained position, then padding. Padding is known by its look (pad_id as input and label),
        so that a trained padding position is named as such, not read as a longer real part."""
        spec = self._spec
        n, _, msl = rows.shape
        inp, lab = rows[:, INPUT_IDS, :], rows[:, LABELS, :]
        idx = np.broadcast_to(np.arange(msl)[None, :], (n, msl))
        pad = spec.pad_id
        if pad is not None:
            padlike = (inp == pad) & (lab == pad)
            self._add_pad("attention_mask", loss & padlike, rows[:, ATTENTION_MASK, :], where, 1 - spec.loss_value)
            loss = loss & ~padlike
        end = _loss_end(loss)
        if spec.untrained_tail:  # untrained template text may follow the last turn
            end = np.maximum(end, _loss_end(lab != pad))
        real = idx < end[:, None]
        # Labels are the next input inside the real part (the last real label is the conversation's last token).
        shifted = np.zeros((n, msl), dtype=bool)
        shifted[:, :-1] = real[:, 1:] & (lab[:, :-1] != inp[:, 1:])
        self._add_rows("shift", shifted, where,
                       lambda r, p: f"label {int(lab[r, p])}, next input_id {int(inp[r, p + 1])}")
        if pad is None:
            return
        # The real part ends with its last trained position: the input after it is padding.
        tail = (idx == end[:, None]) & (inp != pad)
        self._add_rows("chat_tail", tail, where, lambda r, p: f"input_id {int(inp[r, p])}")
        after = ~real & ~tail.any(axis=1)[:, None]
        for name, ids in (("input_ids", inp), ("labels", lab)):
            self._add_pad(name, after & (ids != pad), ids, where, pad)
        if rows.shape[1] == len(KEY_PADDING_FEATURES):  # 1: not attended; padding never is
            kpm = rows[:, KEY_PADDING_MASK, :]
            bad = (kpm != 0) & (kpm != 1)
            if bad.any():
                r, p = _first(bad)
                self._add("key_padding_mask", int(bad.sum()), f"{where(r)}, position {p}: {int(kpm[r, p])}")
            self._add_pad("key_padding_mask", after & (kpm != 1), kpm, where, 1)

    def _add_dpo(self, seqs: np.ndarray, start: int, where: Callable[[int], str], loss: np.ndarray) -> None:
        """The DPO invariants (module docstring), per side (`seqs` [2n, 3, msl] from `sequences`): one run of
        trained positions |P|-1 .. |S|-2, the prompt's labels padding, labels the next input inside the run,
        padding after it; then per row, the same prompt on both sides."""
        spec = self._spec
        m, _, msl = seqs.shape
        inp, lab = seqs[:, INPUT_IDS, :], seqs[:, LABELS, :]
        idx = np.broadcast_to(np.arange(msl)[None, :], (m, msl))
        pad = spec.pad_id
        has = loss.any(axis=1)
        end = _loss_end(loss)  # |S| - 1 on a good side
        first = np.argmax(loss, axis=1)  # |P| - 1 on a good side
        runs = trained_runs(seqs, spec)
        bad = ~has | (runs > 1)
        if bad.any():
            q = int(np.flatnonzero(bad)[0])
            what = f"{int(runs[q])} runs of trained positions" if has[q] else "no trained position"
            self._add("mask_layout", int(bad.sum()), f"{where(q)}: {what}",
                      "one run of trained positions (those whose labels are the response)")
        if not has.any():
            return
        after_first = has[:, None] & (idx >= first[:, None])
        if pad is not None:
            self._add_rows("dpo_prompt_labels", has[:, None] & (idx < first[:, None]) & (lab != pad), where,
                           lambda q, p: f"{int(lab[q, p])}", pad)
        # Inside the run, labels are the next input: the response, S[|P|:].
        shifted = np.zeros((m, msl), dtype=bool)
        shifted[:, :-1] = (after_first & (idx < end[:, None]))[:, :-1] & (lab[:, :-1] != inp[:, 1:])
        self._add_rows("shift", shifted, where,
                       lambda q, p: f"label {int(lab[q, p])}, next input_id {int(inp[q, p + 1])}")
        # The run ends at |S| - 2: its last label is the response's last token, itself the last real input.
        at_row_end = has & (end == msl)
        bad_end = at_row_end.copy()
        if pad is not None:
            bad_end |= has & (lab[np.arange(m), np.maximum(end - 1, 0)] == pad)
        if bad_end.any():
            q = int(np.flatnonzero(bad_end)[0])
            self._add("dpo_mask_end", int(bad_end.sum()), f"{where(q)}, position {int(end[q]) - 1}: " + (
                "the row's last position, whose label is no input" if at_row_end[q]
                else f"its label is pad_id {pad}"))
        # Padding: inputs after S (from `end` + 1), labels after the run (from `end`).
        if pad is not None:
            self._add_pad("input_ids", has[:, None] & (idx > end[:, None]) & (inp != pad), inp, where, pad)
            self._add_pad("labels", has[:, None] & (idx >= end[:, None]) & (lab != pad), lab, where, pad)
        # Both sides start with the same prompt: |P| = first trained position + 1 input ids.
        k = len(spec.sides)
        both = has[0::k] & has[1::k]
        plen = (first + 1)[0::k], (first + 1)[1::k]
        longer = both & (plen[0] != plen[1])
        differ = (both & ~longer)[:, None] & (idx[0::k] < plen[0][:, None]) & (inp[0::k] != inp[1::k])
        bad_rows = longer | differ.any(axis=1)
        if bad_rows.any():
            i = int(np.flatnonzero(bad_rows)[0])
            if longer[i]:
                example = (f"row {start + i}: {int(plen[0][i])} prompt tokens ({spec.sides[0]}), "
                           f"{int(plen[1][i])} ({spec.sides[1]})")
            else:
                p = int(np.flatnonzero(differ[i])[0])
                example = (f"row {start + i}, position {p}: {int(inp[k * i, p])} ({spec.sides[0]}), "
                           f"{int(inp[k * i + 1, p])} ({spec.sides[1]})")
            self._add("dpo_prompts", int(bad_rows.sum()), example)

    def _add_vsl(self, rows: np.ndarray, where: Callable[[int], str], loss: np.ndarray, end: np.ndarray) -> None:
        """The VSL invariants (module docstring): documents, their position_ids, attention_span, shift, padding
        and mask, all read from the row itself: a document starts at each position_ids 0 of the real part."""
        spec = self._spec
        n, _, msl = rows.shape
        inp, lab = rows[:, INPUT_IDS, :], rows[:, LABELS, :]
        span, pos = rows[:, ATTENTION_SPAN, :], rows[:, POSITION_IDS, :]
        idx = np.broadcast_to(np.arange(msl)[None, :], (n, msl))
        # Trained padding would make `end` msl and read as one-position documents, so padding is found by its
        # look instead: the trailing positions with pad ids and span and position 0. The real part ends at the
        # last trained position before it.
        trained_pad = np.zeros((n, msl), dtype=bool)
        if spec.pad_id is not None:
            padlike = (inp == spec.pad_id) & (lab == spec.pad_id) & (span == 0) & (pos == 0)
            trained_pad = (idx >= _loss_end(~padlike)[:, None]) & loss
            end = _loss_end(loss & ~trained_pad)
            if spec.untrained_tail:  # a conversation may end with untrained labels (the template's closing text)
                end = _loss_end(~padlike)
        real = idx < end[:, None]
        starts = real & ((pos == 0) | (idx == 0))
        # A document's last position: the last real one, or one followed by a document start.
        last = real & (idx == (end - 1)[:, None])
        last[:, :-1] |= real[:, :-1] & starts[:, 1:]
        inner = real & ~last  # followed by a position of the same document

        # The real part begins a document.
        self._add_rows("vsl_start", real & (idx == 0) & (pos != 0), where,
                       lambda r, p: f"position_ids {int(pos[r, p])}")
        # position_ids: 0, 1, 2, ... from each document's start.
        doc_start = np.maximum.accumulate(np.where(starts, idx, 0), axis=1)
        want_pos = idx - doc_start
        self._add_rows("vsl_position_ids", real & (idx > 0) & (pos != want_pos), where,
                       lambda r, p: f"{int(pos[r, p])}, expected {int(want_pos[r, p])}")
        # attention_span: n-1, ..., 0 over a document of n positions (positions left to its last one).
        doc_last = np.minimum.accumulate(np.where(last, idx, msl)[:, ::-1], axis=1)[:, ::-1]
        want_span = doc_last - idx
        self._add_rows("vsl_attention_span", real & (span != want_span), where,
                       lambda r, p: f"{int(span[r, p])}, expected {int(want_span[r, p])}")
        # Labels are the next input inside a document; a document's last label is not in the row.
        shifted = np.zeros((n, msl), dtype=bool)
        shifted[:, :-1] = inner[:, :-1] & (lab[:, :-1] != inp[:, 1:])
        self._add_rows("shift", shifted, where,
                       lambda r, p: f"label {int(lab[r, p])}, next input_id {int(inp[r, p + 1])}")
        # Padding after the real part.
        after = ~real
        for name, values, want in (("input_ids", inp, spec.pad_id), ("labels", lab, spec.pad_id),
                                   ("attention_span", span, 0), ("position_ids", pos, 0)):
            if want is None:
                continue
            bad = after & (values != want)
            if bad.any():
                r, p = _first(bad)
                self._add(f"pad_{name}", int(bad.sum()), f"{where(r)}, position {p}: {int(values[r, p])}",
                          want)
        # The mask on padding.
        self._add_pad("attention_mask", trained_pad, rows[:, ATTENTION_MASK, :], where, 1 - spec.loss_value)
        # The mask of the real part.
        if spec.traits.record == TEXT:
            self._add_rows("mask_layout", real & ~loss, where, lambda r, p: "not trained",
                           "trained on every real position")
        elif spec.traits.record == CONVERSATION:
            if not spec.untrained_tail:  # else the template's closing text may end a conversation, untrained
                self._add_rows("mask_layout", last & ~loss, where,
                               lambda r, p: "a conversation's last position, not trained",
                               "trained at each conversation's last position")
        else:
            loss_next = np.zeros((n, msl), dtype=bool)
            loss_next[:, :-1] = loss[:, 1:]
            self._add_rows("mask_layout", (inner & loss & ~loss_next) | (last & ~loss), where,
                           lambda r, p: "trained, the next position of its document not" if loss[r, p]
                           else "a document's last position, not trained",
                           "one run of trained positions per document, ending at its last position")
            if spec.eos_id is not None:
                bad = last & (lab != spec.eos_id)
                if bad.any():
                    r, p = _first(bad)
                    self._add("doc_last_label", int(bad.sum()), f"{where(r)}, position {p}: {int(lab[r, p])}",
                              spec.eos_id)

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


def _where(start: int, sides: tuple) -> Callable[[int], str]:
    """Names sequence q of a block whose first row is `start`: "row 7", or a DPO side, "row 7 (rejected)"."""
    if len(sides) == 1:
        return lambda q: f"row {start + q}"
    return lambda q: f"row {start + q // len(sides)} ({sides[q % len(sides)]})"


# What each kind of row problem says, as data. A template may use: count; rows (counted in rows, or DPO's
# sides: "3 rows", "1 side"); documents ("2 documents"); positions ("1 position is", "3 positions are"); mask (as
# written: "mask" or "inverted mask"); doc (what a VSL segment is); scope (where labels shift); mode; name (the
# feature a kind is about); extra (the value expected); vocab; kind; example (the first found).
PROBLEMS = {
    ">=vocab": "{count} {name} >= vocab_size {vocab} (max {extra}; first: {example})",
    "<0": "{count} negative {name} (first: {example})",
    "mask": "{count} attention_mask values are neither 0 nor 1 (first: {example})",
    "key_padding_mask": "{count} key_padding_mask values are neither 0 nor 1 (first: {example})",
    "pad_key_padding_mask": "{count} padding positions are attended: key_padding_mask not 1 (first: {example})",
    "mask_layout": "{rows} whose {mask} is not {extra} as {mode} writes it (first: {example})",
    "shift": "{rows} whose labels are not input_ids shifted by one {scope} (first: {example})",
    "pad_value": "{count} {name} after the real part are not {extra} (first: {example})",
    "pad_attention_mask": "{count} padding {positions} trained: {mask} not {extra} (first: {example})",
    "pad_after_loss": "{count} labels after the last trained position are not pad_id {extra} (first: {example})",
    "pad": "{count} {name} after the real part are not pad_id {extra} (first: {example})",
    "last_label": "{rows} whose last trained label is not EOS {extra} (first: {example})",
    "vsl_start": "{rows} whose real part does not start with a {doc} (position_ids[0] is not 0) (first: {example})",
    "vsl_position_ids": "{rows} whose position_ids do not count 0, 1, 2, ... from each {doc}'s start "
                        "(first: {example})",
    "vsl_attention_span": "{rows} whose attention_span does not count down to 0 at each {doc}'s last position "
                          "(first: {example})",
    "doc_last_label": "{documents} whose last label (a trained position) is not EOS {extra} (first: {example})",
    "chat_tail": "{rows} whose real part does not end with a trained position: a token follows the last trained "
                 "one where padding should (first: {example})",
    "dpo_prompt_labels": "{rows} whose prompt labels (the positions before the first trained one) are not pad_id "
                         "{extra} (first: {example})",
    "dpo_mask_end": "{rows} whose trained positions do not end at |S|-2, the position whose label is the "
                    "response's last token (first: {example})",
    "dpo_prompts": "{rows} whose chosen and rejected sides do not start with the same prompt (the input_ids up to "
                   "the first trained position) (first: {example})",
    "other": "{count} {kind} (first: {example})",
}


def _problem_template(kind: str, spec: DatasetSpec) -> tuple[str, str]:
    """(the PROBLEMS key of a kind of problem, the feature it names)."""
    if kind.endswith(">=vocab"):
        return ">=vocab", kind.split(">=")[0]
    if kind.endswith("<0"):
        return "<0", kind[:-2]
    if kind in ("pad_attention_span", "pad_position_ids"):
        return "pad_value", kind[4:]
    if kind == "pad_labels" and spec.trailing_eos_input:
        return "pad_after_loss", kind[4:]
    if kind.startswith("pad_") and kind not in PROBLEMS:
        return "pad", kind[4:]
    return (kind if kind in PROBLEMS else "other"), kind


def _describe(kind: str, count: int, example: str, extra: Any, vocab: Optional[int], spec: DatasetSpec) -> str:
    # DPO's checks count sides (a row holds two), but for the prompts both sides share.
    unit = "side" if len(spec.sides) > 1 and kind != "dpo_prompts" else "row"
    key, name = _problem_template(kind, spec)
    scope = ("(x[:-1], x[1:] construction)" if spec.traits is None
             else f"inside each {spec.traits.unit}" if spec.vsl
             else "over the trained positions (the response)" if spec.loss == RESPONSE
             else "(x[:-1], x[1:] construction)" if spec.trailing_eos_input
             else "in the real part")
    return PROBLEMS[key].format(
        count=count, rows=f"{count} {unit}{'' if count == 1 else 's'}",
        documents=f"{count} document{'' if count == 1 else 's'}",
        positions="position is" if count == 1 else "positions are",
        mask="inverted mask" if spec.inverted_mask else "mask",
        doc=spec.traits.unit if spec.traits is not None and spec.vsl else "document", scope=scope,
        mode=spec.mode, name=name, extra=extra, vocab=vocab, kind=kind, example=example)


# ----------------------------------------------------------------------- counts


def count_rows(rows: np.ndarray, spec: DatasetSpec) -> Counter:
    """The statistics of rows as written, recounted independently of transforms.core.stats.

    DPO: every token count covers both sides of each row (`sequences`); num_sequences counts rows.
    """
    n, _, msl = rows.shape if rows.ndim == 3 else (0, 3, 0)
    if not n:
        return Counter()
    seqs = sequences(rows, spec)
    tokens = len(seqs) * msl
    loss = int(loss_positions(seqs, spec).sum())
    real = int(real_lengths(seqs, spec).sum())
    out = Counter({
        "num_sequences": n,
        "num_tokens": tokens,
        "loss_valid_tokens": loss,
        "num_masked_tokens": tokens - loss,
        "non_pad_tokens": real,
        "num_pad_tokens": tokens - real,
    })
    inp = seqs[:, INPUT_IDS, :]
    if spec.pad_id is not None:
        out["input_ids_equal_pad_id"] = int((inp == spec.pad_id).sum())
    if spec.vsl and rows.shape[1] == len(VSL_FEATURES):
        out["num_sequences_before_packing"] = int(document_starts(rows, spec).sum())
    if spec.producer == REFERENCE:
        # The reference's h5_dataset_stats (MODES.md §A0): the mask row summed whatever its polarity, and
        # input ids that are neither EOS nor pad.
        out["mask_sum"] = int(rows[:, ATTENTION_MASK, :].sum())
        if spec.eos_id is not None and spec.pad_id is not None:
            out["input_ids_not_eos_or_pad"] = int(((inp != spec.eos_id) & (inp != spec.pad_id)).sum())
    return out


def real_inputs(rows: np.ndarray, spec: DatasetSpec) -> list[list[int]]:
    """Each row's real input ids, for detokenizing (DPO: each side's, chosen then rejected, row by row)."""
    seqs = sequences(rows, spec)
    return [seqs[i, INPUT_IDS, :k].tolist() for i, k in enumerate(real_lengths(seqs, spec).tolist())]


def detokenized_inputs(rows: np.ndarray, spec: DatasetSpec) -> list[list[int]]:
    """The ids whose decoded text h5_dataset_stats.detokenized_* measure: ours, the real inputs; the
    reference's, the whole input row, padding included (MODES.md §A0)."""
    if spec.producer == REFERENCE:
        return rows[:, INPUT_IDS, :].tolist()
    return real_inputs(rows, spec)


def text_counts(texts: Iterable[str]) -> Counter:
    """detokenized_chars / detokenized_bytes of decoded rows, as the pipeline counts them."""
    chars = nbytes = 0
    for t in texts:
        chars += len(t)
        nbytes += len(t.encode("utf-8", errors="surrogatepass"))
    return Counter({"detokenized_chars": chars, "detokenized_bytes": nbytes})


# ------------------------------------------------------------------- statistics


def expected_post_process(counts: Mapping[str, int], spec: DatasetSpec) -> dict[str, Any]:
    """The recountable post-process numbers, in the conventions of whoever wrote the dataset.

    Ours are exact; VSL adds num_sequences_before_packing (documents in the
    rows) and vsl_packing_factor (that / n_examples, 4 decimals, 0.0 for no
    rows). The reference's (SPEC §1e, §1h-16) are reproduced where they are a
    deterministic function of the rows: Summarization counts one pad and one
    masked token too many per row; FIM's num_pad_tokens counts input ids
    equal to pad_id (EOS too when pad == eos). The reference's VSL script
    (2.1.1, MODES.md §A4) records no token counts in post-process: only
    n_examples is recountable there.
    """
    n = int(counts.get("num_sequences", 0))
    if spec.producer == REFERENCE and spec.vsl:
        return {"n_examples": n}
    out = {
        "n_examples": n,
        "num_tokens": int(counts.get("num_tokens", 0)),
        "loss_valid_tokens": int(counts.get("loss_valid_tokens", 0)),
        "num_masked_tokens": int(counts.get("num_masked_tokens", 0)),
        "num_pad_tokens": int(counts.get("num_pad_tokens", 0)),
    }
    if spec.producer == REFERENCE:
        if spec.loss == RUN:  # the reference's Summarization writer
            out["num_pad_tokens"] += n
            out["num_masked_tokens"] += n
        elif spec.traits is not None and spec.traits.fim:
            if "input_ids_equal_pad_id" in counts:
                out["num_pad_tokens"] = int(counts["input_ids_equal_pad_id"])
            else:
                del out["num_pad_tokens"]
    elif spec.vsl:
        docs = int(counts.get("num_sequences_before_packing", 0))
        out["num_sequences_before_packing"] = docs
        out["vsl_packing_factor"] = round(docs / n, 4) if n else 0.0
    return out


def expected_h5_dataset_stats(counts: Mapping[str, int], spec: DatasetSpec) -> dict[str, int]:
    """The recountable h5_dataset_stats numbers (detokenized_* apart, they need the tokenizer).

    Ours: loss_valid_tokens = trained positions, non_pad_tokens = real
    positions. The reference's (its 2.1.1 per-document script, MODES.md §A0):
    the mask row summed (padding too when inverted) and input ids neither EOS
    nor pad; the latter is left out when eos_id/pad_id are unknown.
    """
    out = {key: int(counts.get(key, 0))
           for key in ("num_sequences", "num_tokens", "loss_valid_tokens", "non_pad_tokens")}
    if spec.producer == REFERENCE:
        out["loss_valid_tokens"] = int(counts.get("mask_sum", 0))
        if spec.eos_id is not None and spec.pad_id is not None:
            out["non_pad_tokens"] = int(counts.get("input_ids_not_eos_or_pad", 0))
        else:
            del out["non_pad_tokens"]
    return out


def _same(claimed: Any, recount: Any) -> bool:
    if isinstance(recount, float):
        return (isinstance(claimed, (int, float)) and not isinstance(claimed, bool)
                and abs(claimed - recount) <= _FACTOR_TOLERANCE)
    return claimed == recount


# What each stage that removes records removed, against the input's accounting and its listing.
STEP_CHECKS = {"dedup": check_dedup, "decontamination": check_decontam, "language": check_language,
               "quality": check_quality}


def check_steps(params: Mapping, inp: Mapping, listings: Mapping[str, Optional[Mapping[str, int]]]) -> list[str]:
    """The problems of every removing stage's section `params` holds (STEP_CHECKS), each against `inp` and its
    listing's counts (`listings`, by section name; None or absent: no listing)."""
    problems = []
    for name, check in STEP_CHECKS.items():
        if isinstance(params.get(name), Mapping):
            problems += check(params[name], inp, listings.get(name))
    return problems


def _mismatch(where: str, key: str, claimed: Any, recount: Any) -> str:
    return f"{where}.{key} is {claimed}, the files recount to {recount}"


def check_stats(params: Mapping, counts: Mapping[str, int], spec: DatasetSpec, *,
                file_rows: Mapping[str, int], detokenized: Optional[Mapping[str, int]] = None,
                detokenized_note: str = "", listings: Optional[Mapping[str, Optional[Mapping[str, int]]]] = None
                ) -> tuple[list[str], list[str]]:
    """(problems, notes): data_params.json's statistics against a recount of the files.

    `file_rows`: rows per .h5 file name, as found on disk. `detokenized`:
    detokenized_chars/bytes recounted with the dataset's tokenizer, or None
    (then those two are skipped, with `detokenized_note` as the reason). `listings`: per section of a stage
    that removed records (STEP_CHECKS), the records its listing holds, per kind or reason (None: no listing).
    """
    problems: list[str] = []
    notes: list[str] = []
    post = params.get("post-process")
    if not isinstance(post, Mapping):
        return ["post-process section is missing"], notes
    for key, value in expected_post_process(counts, spec).items():
        if key not in post:
            problems.append(f"post-process.{key} is missing")
        elif not _same(post[key], value):
            problems.append(_mismatch("post-process", key, post[key], value))
    if spec.producer == REFERENCE and spec.loss == RUN:
        notes.append("reference Summarization: num_pad_tokens and num_masked_tokens checked with the reference's "
                     "one-per-row over-count (SPEC §1e)")
    if spec.producer == REFERENCE and spec.traits is not None and spec.traits.fim:
        notes.append("reference FIM: num_pad_tokens checked as the count of input ids equal to pad_id "
                     "(SPEC §1h-16)")
    if spec.producer == REFERENCE and spec.vsl:
        notes.append("reference VSL: its post-process records no token counts, only n_examples is recounted there "
                     "(MODES.md §A4)")

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
        if spec.producer == REFERENCE:
            notes.append("reference h5_dataset_stats checked in its conventions (MODES.md §A0): loss_valid_tokens = "
                         "the mask row summed, non_pad_tokens = input ids neither EOS nor pad, detokenized_* = "
                         "whole input rows decoded, padding included")
        for key, want in expected_h5_dataset_stats(counts, spec).items():
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
            if spec.producer == OURS:  # every record left out is counted under a reason this tool defines
                problems += [f"input.{key} counts {name!r}, a reason this tool does not define "
                             "(transforms.core.reasons)" for key in ("bad_by_reason", "dropped_by_reason")
                             for name in sorted(inp.get(key) or {}) if not known_reason(name)]
            if isinstance(params.get("mixture"), Mapping):  # a mixture's accounting against the input's
                problems += check_mixture(params["mixture"], inp,
                                          encoded=spec.traits is not None and spec.traits.templated)
            problems += check_steps(params, inp, listings or {})
            # A mixture's repeats are used (or dropped) like documents, but are not documents of the input.
            repeats = inp.get("repeats", 0)
            for post_key, in_key, want in (("processed_files", "good", inp["good"]),
                                           ("discarded_files", "dropped", inp["dropped"]),
                                           ("successful_files", "used", inp["used"] - repeats)):
                if post_key in post and post[post_key] != want:
                    problems.append(f"post-process.{post_key} is {post[post_key]}, input.{in_key} "
                                    + (f"- repeats is {want}" if repeats and in_key == "used" else f"is {want}"))
        except (KeyError, TypeError) as e:
            problems.append(f"input section is malformed ({e!r})")
    elif spec.producer == OURS:
        problems.append("input section is missing")
    if spec.producer == REFERENCE:
        missing = "/".join(k for k in ("h5_dataset_stats", "input", "files") if not isinstance(params.get(k), Mapping))
        notes.append(f"reference output: {'no ' + missing + ' sections; ' if missing else ''}document counters "
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
    if params is not None and "features" in params:
        features = params["features"]
        if not _is_feature_list(features):
            problems.append(f"features is {features!r}, not a list of feature names")
        elif spec.mode is not None and not _written_by(spec.mode, tuple(features)):
            problems.append(f"features is {features}, but {spec.mode} rows hold {list(mode_features(spec.mode))}")
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
