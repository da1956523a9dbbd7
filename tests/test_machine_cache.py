"""The encoders' load checks kept per process and per machine.

The cache (transforms/core/tokenizer/check_cache.py) keeps them in the process and in the store it is
handed; the machine's store (transforms/io/machine_cache.py) keeps them in files.

The rank table that makes tiktoken exact is the one result kept whole (the
fastokens check keeps a verdict, tests/test_fast_encoder.py): a table read
back must be the table, a file that is not one must be a miss, and what the
check found wrong must stay wrong.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat

import numpy as np
import pytest

from tests.test_tiktoken_backend import BROKEN, CASES, synthetic
from transforms.core.tokenizer import build_tokenizer
from transforms.core.tokenizer import backends
from transforms.core.tokenizer.check_cache import CheckCache, cache_key, use_store
from transforms.core.tokenizer.exact import RankTable
from transforms.core.tokenizer.probes import PROBES
from transforms.io.machine_cache import MACHINE_STORE
from transforms.io.tokenizer_files import stage_tokenizer_files


@pytest.fixture(autouse=True)
def machine_store():
    """The machine's store installed, as reading a tokenizer's files installs it; the one before restored."""
    before = use_store(MACHINE_STORE)
    yield MACHINE_STORE
    use_store(before)


# ------------------------------------------------------------ the cache itself


def _counting(values: dict):
    calls = []

    def compute(key):
        return lambda: calls.append(key) or values[key]

    return calls, compute


def test_a_result_is_computed_once_per_machine(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache = CheckCache("things")
    calls, compute = _counting({"k": [1, "x", None]})
    assert cache.get("k", compute("k")) == [1, "x", None]
    assert cache.get("k", compute("k")) == [1, "x", None] and calls == ["k"]  # from this process
    path = tmp_path / "create_hdf5_dataset" / "things" / "k.json"
    assert json.loads(path.read_text()) == [1, "x", None]
    assert [p.name for p in path.parent.iterdir()] == ["k.json"]  # nothing half-written left beside it
    cache.clear()  # a new process on the same machine
    assert cache.get("k", compute("k")) == [1, "x", None] and calls == ["k"]
    fresh = cache.fresh()
    assert fresh.folder == cache.folder == "things"
    assert fresh.get("k", compute("k")) == [1, "x", None] and calls == ["k"]


def test_without_xdg_the_home_cache_is_used(monkeypatch, tmp_path):
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert MACHINE_STORE.directory("things") == str(tmp_path / ".cache" / "create_hdf5_dataset" / "things")
    monkeypatch.setenv("XDG_CACHE_HOME", "")  # set but empty: as unset
    assert MACHINE_STORE.directory("things") == str(tmp_path / ".cache" / "create_hdf5_dataset" / "things")


@pytest.mark.parametrize("content", ["{not json", "", json.dumps({"other": 1}), json.dumps([1, 2])])
def test_a_file_that_does_not_load_is_computed_again_and_rewritten(monkeypatch, tmp_path, content):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

    def load(data):
        if not isinstance(data, dict) or set(data) != {"v"}:
            raise ValueError("not mine")
        return data["v"]

    cache = CheckCache("things", dump=lambda v: {"v": v}, load=load)
    path = tmp_path / "create_hdf5_dataset" / "things" / "k.json"
    path.parent.mkdir(parents=True)
    path.write_text(content)
    calls, compute = _counting({"k": 7})
    assert cache.get("k", compute("k")) == 7 and calls == ["k"]
    assert json.loads(path.read_text()) == {"v": 7}
    cache.clear()
    assert cache.get("k", compute("k")) == 7 and calls == ["k"]


def test_memory_keeps_the_most_recent(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache = CheckCache("things", keep=2)
    calls, compute = _counting({"a": 1, "b": 2, "c": 3})
    cache.get("a", compute("a"))
    cache.get("b", compute("b"))
    cache.get("a", compute("a"))  # a is now the most recent
    cache.get("c", compute("c"))  # b goes
    for path in (tmp_path / "create_hdf5_dataset" / "things").iterdir():
        path.unlink()  # from here on, only memory answers
    assert [cache.get(k, compute(k)) for k in "ac"] == [1, 3] and calls == ["a", "b", "c"]
    assert cache.get("b", compute("b")) == 2 and calls == ["a", "b", "c", "b"]


def _checked_by_every_process(monkeypatch, root) -> None:
    """Nothing can be kept under `root`: each new process computes the result again, without an error."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(root))
    cache = CheckCache("things")
    calls, compute = _counting({"k": 1})
    assert cache.get("k", compute("k")) == 1
    cache.clear()
    assert cache.get("k", compute("k")) == 1 and calls == ["k", "k"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")
def test_a_read_only_home_costs_only_the_check(monkeypatch, tmp_path):
    tmp_path.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        _checked_by_every_process(monkeypatch, tmp_path)
    finally:
        tmp_path.chmod(stat.S_IRWXU)


def test_an_unwritable_cache_path_costs_only_the_check(monkeypatch, tmp_path):
    (tmp_path / "create_hdf5_dataset").write_text("a file where the folder would be")
    _checked_by_every_process(monkeypatch, tmp_path)


def test_keys_join_their_parts_unambiguously():
    assert cache_key("ab", "c") != cache_key("a", "bc")
    # The parts joined by NUL, as the fastokens verdicts' files have been named: those already on a machine stay.
    assert cache_key("1", "0.3.5", "{}") == hashlib.sha256(b"1\x000.3.5\x00{}").hexdigest()
    with pytest.raises(ValueError, match="^a part of a cache key holds a NUL$"):
        cache_key("a\0b")


def test_memory_keeps_eight_by_default_and_a_fresh_cache_its_own_limit(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = tmp_path / "create_hdf5_dataset" / "things"
    for cache, keep in ((CheckCache("things"), 8), (CheckCache("things", keep=2).fresh(), 2)):
        for path in folder.glob("*"):
            path.unlink()
        calls, compute = _counting({k: k for k in "abcdefghi"})
        for k in "abcdefghi"[:keep + 1]:
            cache.get(k, compute(k))
        for path in folder.iterdir():
            path.unlink()
        first, rest = "a", "abcdefghi"[1:keep + 1]
        assert [cache.get(k, compute(k)) for k in rest] == list(rest) and len(calls) == keep + 1  # all held
        cache.get(first, compute(first))
        assert calls[-1] == first and len(calls) == keep + 2  # the oldest had gone


def test_without_a_store_a_result_is_kept_by_the_process_only(monkeypatch, tmp_path):
    """The pure core's own default: no file anywhere; a new process checks again."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    use_store(None)  # the fixture puts the machine's back
    cache = CheckCache("things")
    calls, compute = _counting({"k": 1})
    assert cache.get("k", compute("k")) == 1 and cache.get("k", compute("k")) == 1 and calls == ["k"]
    assert list(tmp_path.iterdir()) == []
    cache.clear()
    assert cache.get("k", compute("k")) == 1 and calls == ["k", "k"]


def test_the_ways_to_a_tokenizers_files_install_the_machines_store(tmp_path):
    use_store(None)
    files = CASES["gpt2-bundled"][1]()  # read_tokenizer_files: the launcher's way
    assert use_store(None) is MACHINE_STORE
    staged = stage_tokenizer_files(files, str(tmp_path))
    staged.load()  # a worker's way
    assert use_store(None) is MACHINE_STORE


def test_a_store_of_the_callers_own_is_kept(tmp_path):
    """Reading tokenizer files installs the machine's store only where there is none."""
    class Mine:
        def get(self, folder, key):
            raise KeyError(key)

        def put(self, folder, key, data):
            pass

    mine = Mine()
    use_store(mine)
    CASES["gpt2-bundled"][1]()
    assert use_store(None) is mine


# ------------------------------------------------------------ rank tables


def _table(files) -> RankTable:
    tok = build_tokenizer(dataclasses.replace(files, backend="tiktoken"))
    model_json = backends.tokenizers.Tokenizer(tok.backend.model).to_str()
    table = backends._table_for(tok.backend, model_json)
    assert isinstance(table, RankTable)
    return table


def _same(a: RankTable, b: RankTable) -> None:
    assert list(a.ranks.items()) == list(b.ranks.items())
    assert (a.ids is None) == (b.ids is None)
    if a.ids is not None:
        assert a.ids.dtype == b.ids.dtype == np.int32 and np.array_equal(a.ids, b.ids)


@pytest.mark.parametrize("files", [CASES["gpt2-bundled"][1], lambda: synthetic(
    [("a", "b"), ("b", "c"), ("ab", "c"), ("c", "d")], reverse_ids=True)], ids=["ids-are-ranks", "ranks-to-ids"])
def test_a_rank_table_reads_back_as_itself(files):
    table = _table(files())
    assert (table.ids is None) == (files is CASES["gpt2-bundled"][1])
    _same(RankTable.from_json(json.loads(json.dumps(table.to_json()))), table)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(lengths=d["lengths"][:-1]), "do not match"),
    (lambda d: d.update(ranks=d["ranks"][:-1]), "do not match"),
    (lambda d: d.update(lengths=[0] + d["lengths"][1:]), "do not match"),
    (lambda d: d.update(tokens=d["tokens"][:-4]), "do not match"),
    (lambda d: d.update(tokens="@@@@" + d["tokens"][4:]), "base64"),
    (lambda d: d.update(ids=d["ids"][:-1]), "a rank has no id"),
    (lambda d: d.update(ids=[d["ids"]]), "a rank has no id"),
])
def test_what_is_not_a_rank_table_is_refused(edit, message):
    data = _table(synthetic([("a", "b"), ("b", "c"), ("ab", "c")], reverse_ids=True)).to_json()
    edit(data)
    with pytest.raises(ValueError, match=message):
        RankTable.from_json(data)


def test_a_token_listed_twice_is_refused():
    assert RankTable.from_json({"tokens": "YWI=", "lengths": [1, 1], "ranks": [1, 2], "ids": None}).ranks == {
        b"a": 1, b"b": 2}
    with pytest.raises(ValueError, match="listed twice"):
        RankTable.from_json({"tokens": "YWE=", "lengths": [1, 1], "ranks": [1, 2], "ids": None})


def _counted_rank_table(monkeypatch):
    calls = []
    real = backends.rank_table
    monkeypatch.setattr(backends, "rank_table", lambda model, oracle: calls.append(1) or real(model, oracle))
    return calls


def _new_process(monkeypatch):
    monkeypatch.setattr(backends, "_CORES", backends.OrderedDict())
    backends._TABLES.clear()


def test_the_rank_table_is_checked_once_per_machine(monkeypatch, fresh_load_checks):
    calls = _counted_rank_table(monkeypatch)
    files = dataclasses.replace(CASES["gpt2-bundled"][1](), backend="tiktoken")
    first = build_tokenizer(files)
    assert calls == [1]
    folder = os.path.join(os.environ["XDG_CACHE_HOME"], "create_hdf5_dataset", "rank_tables")
    assert len(os.listdir(folder)) == 1
    _new_process(monkeypatch)
    again = build_tokenizer(files)
    assert calls == [1] and again.encoder_name == "tiktoken"
    assert [a.tolist() for a in again.encoder.encode_batch(list(PROBES))] == [
        a.tolist() for a in first.encoder.encode_batch(list(PROBES))]
    # Another tokenizers release checks again: the check is tokenizers' own BPE.
    monkeypatch.setattr(backends.tokenizers, "__version__", "0.0.0+another")
    _new_process(monkeypatch)
    build_tokenizer(files)
    assert calls == [1, 1] and len(os.listdir(folder)) == 2


def test_a_torn_table_is_checked_again(monkeypatch, fresh_load_checks):
    calls = _counted_rank_table(monkeypatch)
    files = dataclasses.replace(CASES["gpt2-bundled"][1](), backend="tiktoken")
    build_tokenizer(files)
    folder = os.path.join(os.environ["XDG_CACHE_HOME"], "create_hdf5_dataset", "rank_tables")
    (path,) = [os.path.join(folder, name) for name in os.listdir(folder)]
    with open(path, "r+") as f:
        f.truncate(os.path.getsize(path) // 2)
    _new_process(monkeypatch)
    assert build_tokenizer(files).encoder_name == "tiktoken" and calls == [1, 1]
    with open(path) as f:
        _same(RankTable.from_json(json.load(f)), _table(files))


def test_a_failed_check_is_kept_with_its_reason(monkeypatch, fresh_load_checks):
    calls = _counted_rank_table(monkeypatch)
    files = synthetic(BROKEN, backend="tiktoken")
    with pytest.raises(ValueError, match="does not rebuild token 'abc'") as first:
        build_tokenizer(files)
    _new_process(monkeypatch)
    with pytest.raises(ValueError, match="does not rebuild token 'abc'") as again:
        build_tokenizer(files)
    assert calls == [1] and str(again.value) == str(first.value)
