"""The value types of transforms.core.records: what a dead-letter line holds, sizes of blocks, spans."""

from __future__ import annotations

import dataclasses
import json

import numpy as np

from transforms.core import records as R
from transforms.core.records import BYTES, BadRecord, GroupId, InputFile, RowBlock, WorkUnit


def test_a_bad_record_as_a_dead_letter_line():
    record = BadRecord("gs://b/in/a.jsonl.zst.tar", 7, R.JSON_DECODE, b'{"text": "caf\xe9', "m/0.jsonl.zst",
                       "Unterminated string")
    assert record.to_json() == {
        "source": "gs://b/in/a.jsonl.zst.tar",
        "member": "m/0.jsonl.zst",
        "line": 7,
        "reason": "json_decode",
        "detail": "Unterminated string",
        "raw": '{"text": "caf\\xe9',  # bytes that are not UTF-8 are shown escaped
        "raw_truncated": False,
    }
    json.dumps(record.to_json())  # one JSON line
    assert BadRecord("a.parquet", 0, R.NULL_TEXT).to_json() == {
        "source": "a.parquet", "member": None, "line": 0, "reason": "null_text", "detail": "", "raw": "",
        "raw_truncated": False}


def test_the_raw_preview_is_one_kibibyte():
    assert R.RAW_PREVIEW_BYTES == 1024
    exact = BadRecord("a.jsonl", 1, R.TOO_LONG, b"x" * 1024).to_json()
    assert (exact["raw"], exact["raw_truncated"]) == ("x" * 1024, False)
    cut = BadRecord("a.jsonl", 1, R.TOO_LONG, b"x" * 1023 + "\u00e9".encode()).to_json()
    # 1025 bytes: the preview ends inside the two bytes of "é", whose first byte is shown escaped.
    assert (cut["raw"], cut["raw_truncated"]) == ("x" * 1023 + "\\xc3", True)


def test_group_identity():
    group = GroupId(3, 2, "gs://b/in/sub/a.jsonl", "sub/a.jsonl")
    assert (group.name, group.sort_key) == ("sub/a.jsonl#2", (3, 2))


def test_a_row_block_has_as_many_rows_as_its_array():
    rows = np.zeros((5, 3, 16), np.int32)
    assert len(RowBlock(GroupId(0, 0, "a.jsonl", "a.jsonl"), rows)) == 5


def test_the_spans_of_a_unit_and_of_its_groups():
    # A 1,000-byte .jsonl in groups of 300 bytes: [0, 300), [300, 600), [600, 900), [900, 1000).
    unit = WorkUnit(InputFile(0, "a.jsonl", "a.jsonl", 1000), BYTES, first_group=1, end_group=4, num_groups=4,
                    group_size=300, total=1000)
    assert [unit.group_span(k) for k in range(4)] == [(0, 300), (300, 600), (600, 900), (900, 1000)]
    assert unit.span == (300, 1000)
    assert WorkUnit(unit.file, BYTES, 0, 1, 4, 300, 1000).span == (0, 300)


def test_per_part_settings_resolve_for_the_group_at_hand():
    from transforms.core.records import PerPart, for_group, for_part

    group = GroupId(1, 0, "a.jsonl", "a.jsonl")
    settings = PerPart(("train", "validation", "test"))
    assert [for_group(settings, dataclasses.replace(group, part=k)) for k in range(3)] == ["train", "validation",
                                                                                            "test"]
    assert for_part(settings, 2) == "test" and settings.of(dataclasses.replace(group, part=1)) == "validation"
    # A plain setting is every part's (and the only one of a job without splits).
    assert for_group("all", group) == "all" and for_part(None, 0) is None and for_part(7, None) == 7
    assert dataclasses.replace(group, part=2).name == "a.jsonl#0@2" and group.name == "a.jsonl#0"
