"""Plain value types that flow between pipeline stages.

No Beam here: these are the shapes the pure core works on, and what Beam
pickles between stages. Keep them small; everything that crosses a shuffle
costs bandwidth at terabyte scale.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional

import numpy as np

from transforms.core.stats import Stats

# Dead-letter reason codes: one vocabulary for every reader and stage (transforms.core.reasons, where each is
# explained), so the statistics and the dead-letter files can be grouped by reason.
from transforms.core.reasons import (  # noqa: F401 - the readers take them from here
    BLANK_LINE, INVALID_UTF8, JSON_DECODE, MISSING_KEY, NOT_A_STRING, NULL_TEXT, TOO_DEEP, TOO_LONG, TRUNCATED_STREAM,
    UNREADABLE_FILE)

# JSON nested deeper than this is a TOO_DEEP bad record, in every mode. No real record comes near it, and
# Python's parser and serializer stop at the interpreter's recursion limit, whose distance from the caller
# depends on the runner's stack: without a fixed limit the same line could be read on one runner and
# refused (or end the job) on another.
MAX_JSON_DEPTH = 256

RAW_PREVIEW_BYTES = 1024


class Rewritten(NamedTuple):
    """A reader's check found a record good and gives the values to hand on instead of the ones read (a read
    hook's regions: the hook runs where the record's raw bytes are still at hand for a dead letter)."""

    values: tuple


class JsonKey(str):
    """A record key whose value is read whatever its JSON type and kept as JSON text.

    Chat messages and DPO fields are lists of objects, not text: a reader
    hands them on as `json.dumps(value)` so that a Document still holds one
    string per key, and the stage that understands them parses them again.
    A plain `str` key keeps its meaning: text, or a list of strings joined
    as paragraphs.
    """

    __slots__ = ()

    def __reduce__(self):
        return JsonKey, (str(self),)


class HookColumn(JsonKey):
    """A column a read hook of the user's own names (a kwarg ending in `_key`), read as a JsonKey except that a
    record lacking it, or holding null there, gives None (the JSON text "null"): 2.10's reader hands a hook
    `{k: x.get(k, None) for k in keys}` (data_reader.py, `load_supported_format`), so a hook's kwargs that name
    keys inside its messages (multi_turn_role_key, ...) are no reason to refuse a record. A record holding none
    of its hook's columns is still a MISSING_KEY bad record (a parquet file: when it has none of them); see
    transforms.core.hooks210.hook_columns."""

    __slots__ = ()

    def __reduce__(self):
        return HookColumn, (str(self),)


class ConversationKey(JsonKey):
    """A conversation's messages key, read together with the record's tool list when it has one.

    The value is the messages' JSON text, as for a JsonKey; when the record's
    `tools_key` holds a value (not null), it is `{"messages": ..., "tools": ...}`
    instead (transforms.core.chat.encode.parse_chat reads both). A record
    without tools thus reads exactly as it always did.
    """

    def __new__(cls, key: str, tools_key: Optional[str] = None):
        self = super().__new__(cls, key)
        self.tools_key = tools_key or None
        return self

    def __reduce__(self):
        return ConversationKey, (str(self), self.tools_key)

    def with_tools(self, value, tools):
        """The value to write as JSON: the messages alone, or with the record's tools."""
        return value if tools is None else {"messages": value, "tools": tools}


@dataclasses.dataclass(frozen=True)
class InputFile:
    index: int  # position in the sorted input list
    path: str
    relpath: str
    size: Optional[int] = None  # bytes on storage, when the listing said


# How a work unit reads its file (see WorkUnit).
WHOLE = "whole"
BYTES = "bytes"
ROWS = "rows"


@dataclasses.dataclass(frozen=True)
class WorkUnit:
    """The share of one input file that one worker reads: packing groups [first_group, end_group) of it.

    - WHOLE: the file read in order, cut into packing groups of `group_bytes`
      of text as it is read (compressed streams, .txt, and files whose
      layout could not be read at planning time). Always the whole file.
    - BYTES (.jsonl): group k holds the lines whose first byte lies in
      [k * group_size, (k + 1) * group_size) of the file.
    - ROWS (.parquet): group k holds rows [k * group_size, (k + 1) * group_size).

    The groups of a file depend only on its content and the settings, never
    on how they are shared out among units, so neither does the output.
    """

    file: InputFile
    kind: str = WHOLE
    first_group: int = 0
    end_group: int = 1
    num_groups: int = 1  # groups in the whole file (WHOLE: unknown until read, 1)
    group_size: int = 0  # bytes (BYTES) or rows (ROWS) per group
    total: int = 0  # file bytes (BYTES) or rows (ROWS)
    fan_out: bool = False  # WHOLE: hand the groups to other workers as they are read (a large file)

    @property
    def span(self) -> tuple[int, int]:
        """The unit's byte or row range [lo, hi) of the file (BYTES, ROWS)."""
        return self.first_group * self.group_size, min(self.end_group * self.group_size, self.total)

    def group_span(self, k: int) -> tuple[int, int]:
        """Group k's byte or row range [lo, hi) of the file (BYTES, ROWS)."""
        return k * self.group_size, min((k + 1) * self.group_size, self.total)


@dataclasses.dataclass(frozen=True)
class GroupId:
    """Stable identity of a packing group: one input file, or a fixed slice of it.

    `file_index` is the position of the file in the sorted input list, so
    ordering groups by (file_index, slice_index) is the deterministic input order.
    """

    file_index: int
    slice_index: int
    source: str  # the path as read (local or URL)
    relpath: str  # the path relative to the input root: the identity seeds derive from
    part: Optional[int] = None  # a split job: the output (transforms.core.splits) this share of the group goes to
    # A mixture's repetition: the documents of the group taken a (copy + 1)-th time, as a group of their own
    # (transforms.core.mixture.select_batch), whose file_index is then past the real files' so that its sort
    # key is its own.
    copy: int = 0

    @property
    def sort_key(self) -> tuple[int, int]:
        return (self.file_index, self.slice_index)

    @property
    def name(self) -> str:
        """Identity that survives moving the input directory or adding other files."""
        name = f"{self.relpath}#{self.slice_index}" + (f"~{self.copy}" if self.copy else "")
        return name if self.part is None else f"{name}@{self.part}"


@dataclasses.dataclass(frozen=True)
class PerPart:
    """A setting with one value per output of a split job (indexed by `GroupId.part`).

    Every stage after the split resolves its settings for the group at hand
    (`for_group`), so a job's outputs (their lengths, their directories) share
    one set of transforms: the job graph does not grow with the outputs.
    """

    values: tuple

    def of(self, group: GroupId):
        return self.values[group.part]


def for_part(value, part: Optional[int]):
    """`value` as it applies to output `part`: a PerPart's value for it, anything else as it is."""
    return value.values[part] if isinstance(value, PerPart) else value


def for_group(value, group: GroupId):
    """`value` as it applies to `group` (see for_part)."""
    return for_part(value, group.part)


@dataclasses.dataclass(frozen=True)
class Document:
    """One input record: `values` holds one string per requested key, in key order.

    `index` is the 0-based record index within its file (or tar member), the
    reference's `doc_idx`; `member` names the tar member, when there is one.
    """

    index: int
    values: tuple[str, ...]
    member: Optional[str] = None

    @property
    def text(self) -> str:
        return self.values[0]


@dataclasses.dataclass(frozen=True)
class SkippedRecord:
    """A record read and deliberately not handed on: there is nothing in it, and nothing wrong with it.

    A blank line of a .txt file read a line a record (Cerebras 2.10's reading) is one: it separates
    lines, it is not damage. It counts as read, good and dropped for `reason` (input.dropped_by_reason),
    so every line of a file is accounted for, without a dead letter for each blank line to bury the real
    ones and without a bare EOS in the rows (2.10 writes no token for it either).
    """

    index: int  # 0-based record index within its file, as Document.index
    reason: str


@dataclasses.dataclass(frozen=True)
class BadRecord:
    """A record that could not become a document, with where and why."""

    source: str
    line: Optional[int]  # 1-based line (jsonl) or 0-based row (parquet); None if unknown
    reason: str
    raw: bytes = b""
    member: Optional[str] = None
    detail: str = ""

    def to_json(self) -> dict:
        return {
            "source": self.source,
            "member": self.member,
            "line": self.line,
            "reason": self.reason,
            "detail": self.detail,
            "raw": self.raw[:RAW_PREVIEW_BYTES].decode("utf-8", errors="backslashreplace"),
            "raw_truncated": len(self.raw) > RAW_PREVIEW_BYTES,
        }


@dataclasses.dataclass
class DeadLetterPart:
    """Up to a few thousand bad records of one work unit, in file order.

    Parts are what the dead-letter sink writes, so no process ever holds more
    than one part of bad records. `lines` is set on the last part of every
    unit of a .jsonl file read as several units: the number of lines the
    unit read, from which the sink turns unit-relative line numbers
    (`relative`) into file line numbers.
    """

    source: str
    first_group: int  # the unit's first group: orders the units of a source
    end_group: int
    part: int  # index within the unit
    records: list  # BadRecord
    relative: bool = False  # line numbers count from the unit's first line
    lines: Optional[int] = None
    relpath: str = ""  # the source's path relative to the input (deduplication renumbers its records by it)


@dataclasses.dataclass
class DocBatch:
    """All documents of one packing group, in input order.

    A batch is one packing group, so the packer sees the whole stream of the
    group and the result cannot depend on how a runner splits bundles.
    """

    group: GroupId
    docs: list  # list[Document]
    stats: Stats = dataclasses.field(default_factory=Stats)
    progress_bytes: int = 0  # the group's share of its file's bytes on storage: the progress bar's unit of work


@dataclasses.dataclass(frozen=True)
class Origins:
    """Where each document of a batch was read: its `Document.index` (the record's index in its file or tar
    member; in the later units of a .jsonl file read as several, from the unit's first line) and its tar member
    ("" for none). With the batch's group, a document's stable identity."""

    index: np.ndarray  # int64 per document
    members: Optional[tuple] = None  # str per document, when any has a member

    @classmethod
    def of(cls, docs) -> "Origins":
        members = tuple(d.member or "" for d in docs)
        return cls(np.fromiter((d.index for d in docs), dtype=np.int64, count=len(docs)),
                   members if any(members) else None)

    def member(self, i: int) -> str:
        return self.members[i] if self.members is not None else ""

    def take(self, keep: np.ndarray) -> "Origins":
        members = self.members
        return Origins(self.index[keep], tuple(members[i] for i in keep.tolist()) if members is not None else None)


def document_token_counts(tokens) -> np.ndarray:
    """int64 per document (a tuple of per-key id arrays): its tokens, every key's."""
    return np.fromiter((sum(len(ids) for ids in doc) for doc in tokens), dtype=np.int64, count=len(tokens))


@dataclasses.dataclass
class TokenBatch:
    """Token arrays of one packing group: per document, one int32 array per key, EOS appended.

    `flat`, when set, holds the first key's arrays back to back, and those
    arrays are views into it: the packer's token stream, without a copy.
    """

    group: GroupId
    tokens: list  # list[tuple[np.ndarray, ...]]
    stats: Stats = dataclasses.field(default_factory=Stats)
    flat: Optional[np.ndarray] = None
    origins: Optional[Origins] = None  # where each document was read (deduplication's identities)

    def token_counts(self) -> np.ndarray:
        return document_token_counts(self.tokens)

    def take(self, keep: np.ndarray, group: GroupId, stats: Stats) -> "TokenBatch":
        """The documents at `keep` (indices, in order) as a batch of `group` with `stats`."""
        whole = len(keep) == len(self.tokens)
        return TokenBatch(group, [self.tokens[i] for i in keep.tolist()], stats,
                          flat=self.flat if whole and group == self.group else None,
                          origins=self.origins.take(keep) if self.origins is not None else None)


@dataclasses.dataclass
class EncodedBatch:
    """Encoded chat records of one packing group, before their rows are laid out.

    Per record, a tuple of arrays: Chat and Chat_VSL (ids int32, trained
    bool[, attend bool]); DPO (prompt, chosen, rejected, int32).
    `doc_stats`: what each record adds to the statistics once it is written,
    name -> int64 per record; its "tokens" are the record's tokens as the job
    counts them (a DPO pair's prompt twice, once per side), and a Chat
    record's tokens by role. Kept per record so that a mixture's selection and
    copies count exactly what they write.
    """

    group: GroupId
    tokens: list  # list[tuple[np.ndarray, ...]]
    stats: Stats
    doc_stats: dict  # str -> int64 [n], "tokens" among them
    positions: int = 0  # the rows' positions the encoder told the progress bar (the row stage settles it)
    origins: Optional[Origins] = None  # where each record was read (deduplication's identities)

    def token_counts(self) -> np.ndarray:
        return self.doc_stats["tokens"]

    def take(self, keep: np.ndarray, group: GroupId, stats: Stats) -> "EncodedBatch":
        return EncodedBatch(group, [self.tokens[i] for i in keep.tolist()], stats,
                            {k: v[keep] for k, v in self.doc_stats.items()},
                            positions=self.positions if group == self.group else 0,
                            origins=self.origins.take(keep) if self.origins is not None else None)


@dataclasses.dataclass
class MixtureBatch:
    """A TokenBatch of a mixture's source, with each document's keyed hash and token count
    (transforms.core.mixture): computed once, read by the plan's two passes and the selection."""

    batch: TokenBatch  # (or EncodedBatch) its tokens, or (`stored`) only its group and statistics
    source: int  # the mixture source's index
    hashes: np.ndarray  # uint64 per document
    counts: np.ndarray  # int64 per document: its tokens, every key's
    stored: Optional[object] = None  # where its tokens wait for the plan (transforms.io.spill.spill_tokens)


@dataclasses.dataclass
class RowBlock:
    """Packed rows of one packing group: `rows` is int32 [n, 3, msl]."""

    group: GroupId
    rows: np.ndarray
    stats: Stats = dataclasses.field(default_factory=Stats)

    def __len__(self) -> int:
        return int(self.rows.shape[0])


@dataclasses.dataclass
class WindowBlock:
    """Packed rows of one packing group, described but not built (LMData).

    `windows` is a transforms.core.pack.PackResult: windows over the group's
    token stream, whose `rows_between` builds the rows a batch at a time.
    """

    group: GroupId
    windows: object
    stats: Stats = dataclasses.field(default_factory=Stats)

    def __len__(self) -> int:
        return len(self.windows)


@dataclasses.dataclass
class EncodedBlock:
    """A packing group's rows on their way to the sink: inline encoded rows, or a reference to stored ones."""

    group: GroupId
    n_rows: int
    rows: Optional[object] = None  # transforms.core.encoded.EncodedRows, when inline
    stored: Optional[object] = None  # a reference the sink can load rows from (see transforms.io.spill)
    stats: Stats = dataclasses.field(default_factory=Stats)
