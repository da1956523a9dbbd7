"""The orjson path of the JSON-lines reader gives exactly the records json's path gives.

orjson is used only for a line whose one wanted value is a string; these
tests feed both paths the same lines, valid and broken (lone surrogates, NaN,
huge integers, control characters, invalid UTF-8, a BOM, trailing garbage,
duplicate keys, values of every JSON type) and compare the records.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.core.records import JsonKey
from transforms.io.readers import jsonl


def _both(lines: list[bytes], keys=("text",), strip_strings=False):
    fast = jsonl._line_parser("f.jsonl", keys, None, strip_strings)
    assert jsonl._fast_json is not None
    real, jsonl._fast_json = jsonl._fast_json, None
    try:
        slow = jsonl._line_parser("f.jsonl", keys, None, strip_strings)
    finally:
        jsonl._fast_json = real
    return [fast(line, i) for i, line in enumerate(lines)], [slow(line, i) for i, line in enumerate(lines)]


EDGES = [
    b'{"text": "plain"}', b'{"text": "\\ud800"}', b'{"text": "\\ud83d\\ude00 ok"}', b'{"text": NaN}',
    b'{"text": "x", "n": 123456789012345678901234567890}', b'{"text": 123456789012345678901234567890}',
    b'{"text": 1.5e999}', b'{"text": "a\x01b"}', b'{"text": "\xff"}', b'\xef\xbb\xbf{"text": "bom"}',
    b'{"text": "x"}garbage', b'{"text": "a", "text": "b"}', b'{"text": null}', b'{"text": ["a"]}',
    b'{"text": {"a": 1}}', b'{"text": true}', b'{"text": 2.50}', b'"bare"', b'null', b'[1]', b'',
    b'   ', b'{"other": "x"}', b'{"text": "x"}\r', b'{"text": "\\u0000"}', b'{"text": "\xed\xa0\x80"}',
    b'[' * 5000 + b']' * 5000, b'{"text": "' + b'\\ud800' * 3 + b'"}',
]


@pytest.mark.parametrize("keys", [("text",), ("text", "other"), (JsonKey("text"),)])
@pytest.mark.parametrize("strip_strings", [False, True])
def test_edges_give_the_same_records(keys, strip_strings):
    fast, slow = _both(EDGES, keys, strip_strings)
    assert fast == slow


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2 ** 80), 2 ** 80) | st.floats(allow_nan=True) | st.text(),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(records=st.lists(st.dictionaries(st.sampled_from(["text", "meta", "id"]), JSON_VALUES, max_size=3),
                        max_size=8),
       ensure_ascii=st.booleans())
def test_generated_lines_give_the_same_records(records, ensure_ascii):
    lines = [json.dumps(r, ensure_ascii=ensure_ascii).encode("utf-8", "surrogatepass") for r in records]
    fast, slow = _both(lines)
    assert fast == slow
