"""Statistics: plain counters merged associatively, and the data_params.json sections.

Every stage adds integers to a `Stats` value; Beam merges them with a
CombineFn, tests with `merge`. Nothing here depends on Beam metrics, which are
best-effort on some runners.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from typing import Iterable, Mapping, Optional

import numpy as np

from transforms.core.features import POSITION_IDS, VSL_FEATURES

__all__ = ["Stats", "merge", "ROWS_DROPPED", "H5_ROWS", "ROLE_TOKENS", "ROLE_TRAINED", "ENCODER_CHECK", "row_stats", "post_process_section", "h5_stats_section",
           "input_section", "check_accounting"]


# Counters of rows (not documents) that were built and then dropped, by reason.
ROWS_DROPPED = "rows_dropped."
# Counters of the rows written (row_stats, detokenized sizes), counted as each row is encoded for its file.
H5_ROWS = "h5."
# Chat modes: a conversation's tokens by role (its turn, headers included), and its trained labels by role,
# which add up to loss_valid_tokens; counted as conversations are encoded (a file does not know roles).
ROLE_TOKENS = "chat_tokens."
ROLE_TRAINED = "chat_loss_valid."
# fastokens' in-job cross-check (transforms.core.tokenizer.fast.Tally's fields): texts encoded, checked
# against the exact encoder, and found different; counted where documents are tokenized.
ENCODER_CHECK = "encoder_check."
# The input bytes on storage a block of rows stands for (its group's share, or its part's in a split job), set
# where it is tokenized: EncodeRows counts it, when the block is compressed, in the Beam counter a launcher
# follows a remote job's progress by (pipelines/job_progress.py). Only in `totals`: never a section.
PROGRESS_BYTES = "progress_bytes"


@dataclasses.dataclass
class Stats:
    """Totals plus the same counters per source file."""

    totals: Counter = dataclasses.field(default_factory=Counter)
    sources: dict = dataclasses.field(default_factory=dict)  # source -> Counter

    def add(self, name: str, value: int = 1, source: Optional[str] = None) -> None:
        if not value:
            return
        self.totals[name] += int(value)
        if source is not None:
            self.sources.setdefault(source, Counter())[name] += int(value)

    def merge_from(self, other: "Stats") -> "Stats":
        self.totals.update(other.totals)
        for source, counts in other.sources.items():
            self.sources.setdefault(source, Counter()).update(counts)
        return self

    def __getitem__(self, name: str) -> int:
        return self.totals.get(name, 0)

    def with_prefix(self, prefix: str) -> dict:
        return {k[len(prefix):]: v for k, v in sorted(self.totals.items()) if k.startswith(prefix)}


def merge(stats: Iterable[Stats]) -> Stats:
    out = Stats()
    for s in stats:
        out.merge_from(s)
    return out


def real_lengths(rows: np.ndarray, inverted_mask: bool, trailing_eos_input: bool = False,
                 untrained_tail_pad: Optional[int] = None) -> np.ndarray:
    """Per row, the number of non-pad input positions.

    Every mode puts real tokens first and trains the last real input whose
    label is a real token, so the real inputs end right after the last
    loss-valid position. Summarization rows (`trailing_eos_input`) hold one
    more: the EOS, an input whose label is padding and which carries no loss.
    Chat rows with Cerebras 2.10's loss span keep the template's text after
    the last turn as untrained labels (Qwen's final newline): with
    `untrained_tail_pad` (the pad id) the real part runs to the last label
    that is not padding.
    """
    msl = rows.shape[2]
    loss = rows[:, 1, :] == (0 if inverted_mask else 1)
    end = _end_of(loss)
    if trailing_eos_input:
        end = np.where(end > 0, np.minimum(end + 1, msl), 0)
    if untrained_tail_pad is not None:
        end = np.maximum(end, _end_of(rows[:, 2, :] != untrained_tail_pad))
    return end


def _end_of(positions: np.ndarray) -> np.ndarray:
    """Per row of a [n, msl] bool array, the index after its last True (0 without one)."""
    msl = positions.shape[1]
    end = msl - np.argmax(positions[:, ::-1], axis=1)
    return np.where(positions.any(axis=1), end, 0)


def row_stats(rows: np.ndarray, inverted_mask: bool, trailing_eos_input: bool = False,
              lengths: Optional[np.ndarray] = None, untrained_tail_pad: Optional[int] = None) -> Counter:
    """Counts recomputed from rows exactly as they are written; `lengths`: their `real_lengths`, if known."""
    n, features, msl = rows.shape
    loss_valid = int((rows[:, 1, :] == (0 if inverted_mask else 1)).sum())
    if lengths is None:
        lengths = real_lengths(rows, inverted_mask, trailing_eos_input, untrained_tail_pad)
    non_pad = int(lengths.sum())
    counts = Counter({
        "num_sequences": n,
        "num_tokens": n * msl,
        "loss_valid_tokens": loss_valid,
        "num_masked_tokens": n * msl - loss_valid,
        "non_pad_tokens": non_pad,
        "num_pad_tokens": n * msl - non_pad,
    })
    if features == len(VSL_FEATURES):
        # VSL: a document segment starts at every real position whose position id is 0 (so does every
        # padding position, which follows the real ones).
        counts["num_segments"] = int(np.count_nonzero(rows[:, POSITION_IDS, :] == 0)) - (n * msl - non_pad)
    return counts


def post_process_section(stats: Stats, written: Mapping[str, int], *, eos_id: int, pad_id: int,
                         vocab_size: int, vsl: bool = False) -> dict:
    """The reference's post-process keys (SPEC §1e) with COMPAT.md's exact meanings.

    `written` holds the counters of the rows in the committed files. With
    `vsl`, also 2.10's `num_sequences_before_packing` (document segments in
    the rows) and `vsl_packing_factor` (segments per row).
    """
    n_examples = int(written.get("num_sequences", 0))
    processed = stats["docs_good"]
    discarded = sum(stats.with_prefix("dropped.").values())
    raw_chars, raw_bytes = stats["raw_chars"], stats["raw_bytes"]
    section = {
        "average_bytes_per_sequence": math.ceil(raw_bytes / n_examples) if n_examples else 0,
        "average_chars_per_sequence": math.ceil(raw_chars / n_examples) if n_examples else 0,
        "discarded_files": discarded,
        "eos_id": eos_id,
        "loss_valid_tokens": int(written.get("loss_valid_tokens", 0)),
        "n_examples": n_examples,
        "normalized_bytes_count": stats["normalized_bytes"],
        "normalized_chars_count": stats["normalized_chars"],
        "num_masked_tokens": int(written.get("num_masked_tokens", 0)),
        "num_pad_tokens": int(written.get("num_pad_tokens", 0)),
        "num_tokens": int(written.get("num_tokens", 0)),
        "pad_id": pad_id,
        "processed_files": processed,
        "raw_bytes_count": raw_bytes,
        "raw_chars_count": raw_chars,
        "successful_files": processed - discarded,
        "vocab_size": vocab_size,
    }
    if vsl:
        segments = int(written.get("num_segments", 0))
        section["num_sequences_before_packing"] = segments
        section["vsl_packing_factor"] = round(segments / n_examples, 4) if n_examples else 0.0
    return section


def h5_stats_section(written: Mapping[str, int]) -> dict:
    keys = ("detokenized_bytes", "detokenized_chars", "loss_valid_tokens", "non_pad_tokens",
            "num_sequences", "num_tokens")
    return {k: int(written.get(k, 0)) for k in keys}


def input_section(stats: Stats) -> dict:
    """Where every input document went: read = good + bad, good (+ a mixture's repeats) = used + dropped.

    `empty_documents` counts the good documents whose text was empty after
    normalization (LMData keeps them, as the reference does, as a bare EOS; they
    are among `used` or `dropped` like any other document).
    """

    def block(c: Mapping[str, int]) -> dict:
        return {
            "documents_read": int(c.get("docs_read", 0)),
            "good": int(c.get("docs_good", 0)),
            "empty_documents": int(c.get("docs_empty", 0)),
            "bad": int(sum(v for k, v in c.items() if k.startswith("bad."))),
            "bad_by_reason": {k[4:]: int(v) for k, v in sorted(c.items()) if k.startswith("bad.")},
            "used": int(c.get("docs_used", 0)),
            "dropped": int(sum(v for k, v in c.items() if k.startswith("dropped."))),
            "dropped_by_reason": {k[8:]: int(v) for k, v in sorted(c.items()) if k.startswith("dropped.")},
            # A mixture's further copies of documents (transforms.core.mixture): used or dropped like any other.
            **({"repeats": int(c["docs_repeated"])} if c.get("docs_repeated") else {}),
        }

    out = block(stats.totals)
    out["files"] = len(stats.sources)
    out["per_source"] = {src: block(c) for src, c in sorted(stats.sources.items())}
    return out


def check_accounting(section: dict) -> list[str]:
    """Problems with the invariant read = good + bad and good = used + dropped."""
    problems = []
    for name, b in [("total", section)] + sorted(section.get("per_source", {}).items()):
        if b["documents_read"] != b["good"] + b["bad"]:
            problems.append(f"{name}: read {b['documents_read']} != good {b['good']} + bad {b['bad']}")
        repeats = b.get("repeats", 0)
        if b["good"] + repeats != b["used"] + b["dropped"]:
            problems.append(f"{name}: good {b['good']}" + (f" + repeats {repeats}" if repeats else "")
                            + f" != used {b['used']} + dropped {b['dropped']}")
    return problems
