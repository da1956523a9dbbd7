"""The group store on an object store (memory:// here): written whole, found on resume, read by byte range."""

from __future__ import annotations

import uuid

import numpy as np

from transforms.core.encoded import EncodedRows
from transforms.core.records import GroupId
from transforms.core.stats import Stats
from transforms.io.spill import find_spilled, load_spilled, read_spilled, spill_group


def test_round_trip_on_an_object_store():
    directory = f"memory://spill-{uuid.uuid4().hex[:8]}/out/.tmp/groups"
    rng = np.random.default_rng(0)
    chunks = [rng.integers(0, 256, rng.integers(1, 50), dtype=np.uint8).tobytes() for _ in range(40)]
    rows = EncodedRows.from_chunks(chunks)
    group = GroupId(3, 1, "memory://in/a.jsonl", "a.jsonl")
    stats = Stats()
    stats.add("docs_read", 7, group.source)
    ref = spill_group(directory, group, rows, stats)
    assert not ref.local

    found = find_spilled(directory, group)
    assert found is not None and found[1] == 40 and found[2].sources == stats.sources
    assert find_spilled(directory, GroupId(3, 2, "memory://in/a.jsonl", "a.jsonl")) is None

    whole = read_spilled(ref)
    assert [bytes(whole.chunk(i)) for i in range(40)] == chunks
    stored = load_spilled(ref)
    for index in ([5], [0, 1, 2, 3], [39, 2, 3, 4, 17], list(range(40))[::-1], []):
        got = stored.take(np.array(index, dtype=np.int64))
        assert [bytes(got.chunk(i)) for i in range(len(index))] == [chunks[i] for i in index]
