"""Record keys read as JSON (JsonKey): chat messages and DPO fields, whatever their JSON type."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq

from transforms.core.records import BadRecord, Document, JsonKey
from transforms.io.readers import read_records

MESSAGES = [{"role": "user", "content": "héllo"}, {"role": "assistant", "content": "hi"}]


def _values(path, keys):
    return [r.values if isinstance(r, Document) else (r.reason, r.line) for r in read_records(str(path), keys)]


def test_jsonl_values_of_any_type_become_json_text(tmp_path):
    lines = [{"messages": MESSAGES}, {"messages": "text"}, {"messages": {"a": 1}}, {"messages": 3},
             {"messages": None}, {"other": 1}]
    path = tmp_path / "a.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + '\n"a bare string"\n')
    assert _values(path, (JsonKey("messages"),)) == [
        (json.dumps(MESSAGES, ensure_ascii=False),), ('"text"',), ('{"a": 1}',), ("3",),
        ("null_text", 5), ("missing_key", 6), ("missing_key", 7)]
    # A plain key keeps its meaning: a list of objects is not text.
    assert _values(path, ("messages",))[:2] == [("not_a_string", 1), ("text",)]
    assert _values(path, ("messages",))[-1] == ("a bare string",)
    # Several keys, one of them JSON: each keeps its own reading.
    two = tmp_path / "b.jsonl"
    two.write_text(json.dumps({"prompt": "p", "chosen": MESSAGES}) + "\n")
    assert _values(two, ("prompt", JsonKey("chosen"))) == [("p", json.dumps(MESSAGES, ensure_ascii=False))]


def test_a_lone_surrogate_in_json_text_is_invalid_utf8(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"messages": [{"role": "user", "content": "\\ud800"}]}\n')
    assert _values(path, (JsonKey("messages"),)) == [("invalid_utf8", 1)]


def test_parquet_lists_of_structs_and_values_json_cannot_hold(tmp_path):
    path = tmp_path / "a.parquet"
    table = pa.table({"messages": [MESSAGES, [{"role": "user", "content": "x"}]],
                      "blob": [b"\x00", b"\x01"], "text": ["a", "b"]})
    pq.write_table(table, path)
    assert _values(path, (JsonKey("messages"),)) == [(json.dumps(MESSAGES, ensure_ascii=False),),
                                                     ('[{"role": "user", "content": "x"}]',)]
    assert _values(path, (JsonKey("text"),)) == [('"a"',), ('"b"',)]  # strings too: always JSON text
    assert [r.reason for r in read_records(str(path), (JsonKey("blob"),))] == ["not_a_string"] * 2
    assert _values(path, ("text",)) == [("a",), ("b",)]


def test_txt_and_json_gz_with_a_json_key(tmp_path):
    txt = tmp_path / "a.txt"
    txt.write_text("plain text")
    assert _values(txt, (JsonKey("messages"),)) == [('"plain text"',)]
    gz = tmp_path / "a.json.gz"
    gz.write_bytes(gzip.compress((json.dumps({"messages": MESSAGES}) + "\n" + json.dumps("bare") + "\n").encode()))
    records = list(read_records(str(gz), (JsonKey("messages"),)))
    assert records[0].values == (json.dumps(MESSAGES, ensure_ascii=False),)
    assert isinstance(records[1], BadRecord) and records[1].reason == "missing_key"


def test_a_json_key_survives_pickling_as_itself():
    import pickle

    key = pickle.loads(pickle.dumps(JsonKey("messages")))
    assert type(key) is JsonKey and key == "messages"
