"""The listings of records a stage removed on purpose: one JSONL file per input file, a line per record.

    OUT/dedup/<name>.jsonl                      deduplication (issue #46)
    OUT/filtered/decontaminate/<name>.jsonl     decontamination (issue #47)

Named as the dead letters are (`dead_letter_file_name` of the file's path relative to the input), its records in
file order, each file written whole to a temporary name and renamed: a retried bundle writes the same file again.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Iterable, Optional

import fsspec

from transforms.io import fs
from transforms.io.dead_letters import dead_letter_file_name, json_line

__all__ = ["DEDUP_DIR", "FILTERED_DIR", "write_listing", "listing_counts"]

DEDUP_DIR = "dedup"
FILTERED_DIR = "filtered"  # a directory per filtering stage (transforms.core.decontam.LISTING_DIR)


def write_listing(item: tuple[str, Iterable[tuple]], output_dir: str, directory: str = DEDUP_DIR) -> int:
    """(relpath, its (node, record) pairs) -> OUT/<directory>/<name>.jsonl, in file order; returns the records
    written."""
    relpath, records = item
    records = sorted(records, key=lambda nr: nr[0])
    fs.makedirs(fs.join(output_dir, directory))
    fs.write_text_atomic(fs.join(output_dir, directory, dead_letter_file_name(relpath)),
                         "".join(json_line(record) for _, record in records))
    return len(records)


def listing_counts(output_dir: str, directory: str = DEDUP_DIR, field: str = "kind") -> Optional[dict]:
    """The records OUT/<directory>/ lists, per value of their `field` (None: no such directory), read a line at
    a time. Only the listing files count: a write killed before its rename leaves a temporary (".partial")
    beside them."""
    directory = fs.join(output_dir, directory)
    names = fs.listdir_names(directory)
    if not names:
        return None
    names = [n for n in names if n.endswith(".jsonl")]
    counts: Counter = Counter()
    for name in sorted(names):
        with fsspec.open(fs.join(directory, name), "rt", encoding="utf-8") as f:
            for line in f:
                counts[json.loads(line)[field]] += 1
    return dict(counts)
