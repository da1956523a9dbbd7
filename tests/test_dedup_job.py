"""Deduplication through the whole job (issue #46): a planted corpus of exact copies, near copies, near misses,
chains, text without spaces and records shorter than a shingle; the rows are the rows of the corpus without the
removed records; the same bytes on two workers; before splits; every mode's record; the settings."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import MULTI_PROCESSING, RUNNER, SHARED, require_shared, run_job
from transforms.core.dedup import shingle_hashes
from transforms.io.dead_letters import dead_letter_file_name

GPT2 = Path(__file__).resolve().parents[1] / "data" / "tokenizers" / "gpt2"
TOKENIZER = ["--tokenizer_type", "GPT2Tokenizer", "--vocab_file", str(GPT2 / "vocab.bpe"),
             "--encoder_file", str(GPT2 / "encoder.json")]


def _tokenizer():
    from transforms.core.tokenizer import build_tokenizer
    from transforms.io.tokenizer_files import read_tokenizer_files

    return build_tokenizer(read_tokenizer_files("GPT2Tokenizer", vocab_file=str(GPT2 / "vocab.bpe"),
                                                encoder_file=str(GPT2 / "encoder.json")))


def _jaccard(tok, a: str, b: str, shingle: int = 12) -> float:
    """The Jaccard of two texts' shingles as the job makes them: runs of whole tokens holding 12 characters."""
    from transforms.core.dedup import token_chars
    from transforms.core.detok import token_pieces
    from transforms.core.tokenizer import tokenize_documents

    chars = token_chars(token_pieces(tok))
    sa, sb = (set(shingle_hashes(np.asarray(ids), shingle, chars).tolist())
              for ids in tokenize_documents(tok, [a, b]))
    return len(sa & sb) / len(sa | sb)


def _changed(words: list[str], positions, rng, tag: str) -> list[str]:
    out = list(words)
    for p in positions:
        out[p] = f"{tag}{rng.randrange(10**6)}"
    return out


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """Three files of records, and what each record is: (file, line) -> its family and role.

    Families: 20 originals each with an exact copy in another file; 40 with a near copy (a few words changed,
    Jaccard >= 0.85 measured); 40 with a near miss (every other word changed); 5 chains A~B~C (B: A's start
    changed, C: B's end changed); a Chinese and a Japanese text with an exact and a near copy; two records
    shorter than a shingle, one copied, and a third of other ids; 60 records of their own."""
    rng = random.Random(46)
    lines = [x for x in require_shared(SHARED / "corpora" / "en_small_pd.jsonl").read_text().split("\n") if x]
    texts = [" ".join(json.loads(line)["text"].split()[:200]) for line in lines]
    texts = [t for t in texts if len(t.split()) == 200][:205]
    tok = _tokenizer()
    files = {"a.jsonl": [], "b.jsonl": [], "c.jsonl": []}
    role = {}  # (file, line) -> (family, what)

    def put(name, text, family, what):
        files[name].append(text)
        role[(name, len(files[name]))] = (family, what)

    t = iter(texts)
    for k in range(20):
        text = next(t)
        put("a.jsonl", text, f"exact{k}", "original")
        put("c.jsonl", text, f"exact{k}", "copy")
    near_j = []
    for k in range(40):
        text = next(t)
        words = text.split()
        near = " ".join(_changed(words, rng.sample(range(200), 2), rng, "n"))
        near_j.append(_jaccard(tok, text, near))
        put("a.jsonl", text, f"near{k}", "original")
        put("b.jsonl", near, f"near{k}", "copy")
    miss_j = []
    for k in range(40):
        text = next(t)
        words = text.split()
        miss = " ".join(_changed(words, range(0, 200, 2), rng, "m"))
        miss_j.append(_jaccard(tok, text, miss))
        put("b.jsonl", text, f"miss{k}", "original")
        put("c.jsonl", miss, f"miss{k}", "miss")
    for k in range(5):
        words = next(t).split()
        b = _changed(words, range(0, 6), rng, "b")
        c = _changed(b, range(194, 200), rng, "c")
        put("a.jsonl", " ".join(words), f"chain{k}", "original")
        put("b.jsonl", " ".join(b), f"chain{k}", "copy")
        put("c.jsonl", " ".join(c), f"chain{k}", "copy")
    cjk = [json.loads(line)["text"] for line in
           require_shared(SHARED / "corpora" / "multilingual_dev.jsonl").read_text().split("\n") if line]
    cjk = [x[:600] for x in cjk if sum("\u4e00" <= ch <= "\u9fff" for ch in x[:600]) > 200][:2]
    for k, text in enumerate(cjk):
        chars = list(text)
        for p in rng.sample(range(len(chars)), 3):
            chars[p] = "丁"
        put("a.jsonl", text, f"cjk{k}", "original")
        put("b.jsonl", text, f"cjk{k}", "copy")
        put("c.jsonl", "".join(chars), f"cjk{k}", "copy")
    put("a.jsonl", "Hi.", "short", "original")
    put("b.jsonl", "Hi.", "short", "copy")
    put("c.jsonl", "Ho!", "other_short", "original")
    for k in range(60):
        put(rng.choice(sorted(files)), next(t), f"own{k}", "original")
    root = tmp_path_factory.mktemp("planted")
    (root / "in").mkdir()
    for name, records in files.items():
        (root / "in" / name).write_text("".join(json.dumps({"text": x}) + "\n" for x in records))
    return {"root": root, "role": role, "files": files, "near_j": near_j, "miss_j": miss_j}


def _args(inp, out, *extra, mode="LMData"):
    return [mode, "--input_dir", str(inp), "--output_dir", str(out), *TOKENIZER, "--max_seq_length", "256",
            "--display_pbar", "False", *extra]


def _listing(out: Path) -> list[dict]:
    found = []
    for path in sorted((out / "dedup").iterdir()):
        found.extend(json.loads(line) for line in path.read_text().splitlines())
    return found


def _digests(out: Path) -> dict:
    found = {}
    for path in sorted(out.rglob("*")):
        if path.is_file() and path.name != "data_params.json":
            found[path.relative_to(out).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@pytest.fixture(scope="module")
def near_job(planted, tmp_path_factory):
    out = tmp_path_factory.mktemp("near") / "out"
    params = run_job(_args(planted["root"] / "in", out, "--dedup", "near"))
    return out, params


def test_the_planted_corpus_is_what_it_says(planted):
    assert min(planted["near_j"]) >= 0.85, planted["near_j"]
    assert max(planted["miss_j"]) < 0.5, planted["miss_j"]


def test_every_family_keeps_its_first_record_and_lists_the_others(planted, near_job):
    out, params = near_job
    role = planted["role"]
    listed = {(r["file"], r["line"]): r for r in _listing(out)}
    families: dict = {}
    for where, (family, _) in role.items():
        families.setdefault(family, []).append(where)
    for family, members in families.items():
        first = min(members)
        if family.startswith(("exact", "near", "chain", "cjk", "short")) and family != "other_short":
            assert first not in listed, (family, first)
            for other in members:
                if other != first:
                    record = listed[other]
                    assert (record["kept"]["file"], record["kept"]["line"]) == first, (family, record)
        else:
            assert not set(members) & set(listed), family
    # Each kind as it is: a copy of the very text is exact, the rest near, with its estimated similarity.
    for where, record in listed.items():
        family, what = role[where]
        if family.startswith(("exact", "short")) or (family.startswith("cjk") and where[0] == "b.jsonl"):
            assert (record["kind"], record["similarity"]) == ("exact", 1.0), record
        else:
            assert record["kind"] == "near" and 0.6 < record["similarity"] < 1.0, record
    assert len(listed) == 20 + 40 + 5 * 2 + 2 * 2 + 1
    assert params["input"]["dropped_by_reason"] == {"duplicate_exact": 20 + 2 + 1, "duplicate_near": 40 + 10 + 2}
    section = params["dedup"]
    assert section["documents_removed"] == {"exact": 23, "near": 52}
    assert section["listed"] == 75 and section["duplicate_groups"] == 20 + 40 + 5 + 2 + 1
    assert section["group_sizes"] == {"2": 61, "3-4": 7}
    assert (section["kind"], section["threshold"], section["bands"], section["rows"], section["values"],
            section["shingle_characters"]) == ("near", 0.8, 20, 8, 400, 12)
    assert sum(s["documents_removed"]["near"] for s in section["per_source"].values()) == 52


def test_the_rows_are_those_of_the_corpus_without_the_removed_records(planted, near_job, tmp_path):
    """The same files with the listed lines taken out, without dedup: byte for byte the same rows, and the
    tokens counted removed are the tokens the rows no longer hold."""
    out, params = near_job
    removed = {(r["file"], r["line"]) for r in _listing(out)}
    (tmp_path / "in").mkdir()
    for name, records in planted["files"].items():
        kept = [x for i, x in enumerate(records, 1) if (name, i) not in removed]
        (tmp_path / "in" / name).write_text("".join(json.dumps({"text": x}) + "\n" for x in kept))
    without = run_job(_args(tmp_path / "in", tmp_path / "out"))
    h5 = {k: v for k, v in _digests(out).items() if k.endswith(".h5")}
    assert h5 and h5 == {k: v for k, v in _digests(tmp_path / "out").items() if k.endswith(".h5")}
    assert without["input"]["used"] == params["input"]["used"]
    from transforms.core.tokenizer import tokenize_documents

    texts = {kind: [planted["files"][r["file"]][r["line"] - 1] for r in _listing(out) if r["kind"] == kind]
             for kind in ("exact", "near")}
    # Each record's ids, its EOS among them.
    assert params["dedup"]["tokens_removed"] == {
        kind: sum(len(ids) for ids in tokenize_documents(_tokenizer(), t)) for kind, t in texts.items()}


def test_exact_dedup_removes_only_copies_of_the_very_ids(planted, tmp_path):
    params = run_job(_args(planted["root"] / "in", tmp_path / "out", "--dedup", "exact"))
    listed = _listing(tmp_path / "out")
    assert {r["kind"] for r in listed} == {"exact"} and len(listed) == 23
    assert params["dedup"]["documents_removed"] == {"exact": 23, "near": 0}
    assert "threshold" not in params["dedup"]


@pytest.mark.worker_processes
def test_two_workers_write_the_same_bytes(planted, near_job, tmp_path):
    out, params = near_job
    other = run_job(_args(planted["root"] / "in", tmp_path / "out", "--dedup", "near"), runner=MULTI_PROCESSING)
    assert _digests(tmp_path / "out") == _digests(out)
    assert other["dedup"] == params["dedup"] and other["input"] == params["input"]


def test_a_split_job_removes_the_same_records_before_routing(planted, near_job, tmp_path):
    """Duplicates are found across the outputs: the same records removed, and no near copy of a kept record in
    another output."""
    out, _ = near_job
    params = run_job(_args(planted["root"] / "in", tmp_path / "out", "--dedup", "near",
                           "--data_splits", "train=0.6,test=0.4"))
    assert _listing(tmp_path / "out") == _listing(out)
    assert params["dedup"]["documents_removed"] == {"exact": 23, "near": 52}
    assert params["input"]["dropped_by_reason"] == {"duplicate_exact": 23, "duplicate_near": 52}
    used = sum(o["documents_used"] for o in params["outputs"])
    assert used == params["input"]["used"] == params["input"]["documents_read"] - 75


def test_lines_are_file_lines_when_a_file_is_read_in_several_units(planted, near_job, tmp_path):
    from pipelines.config import load_config
    from pipelines.job import run

    out, _ = near_job
    config, beam_args = load_config(_args(planted["root"] / "in", tmp_path / "out", "--dedup", "near") + RUNNER)
    run(config, beam_args, {"group_bytes": 20_000, "unit_groups": 1, "fan_out_bytes": None})
    assert _listing(tmp_path / "out") == _listing(out)


def test_chat_and_dpo_records_are_deduplicated_whole(tmp_path):
    qwen = require_shared(SHARED / "tokenizers" / "qwen2.5-instruct")
    (tmp_path / "chat").mkdir()
    talks = [[{"role": "user", "content": f"What is {i} times {i}?"},
              {"role": "assistant", "content": f"{i} times {i} is {i * i}."}] for i in range(12)]
    # A copy of conversation 3 and one of 5 whose answer differs: only the very copy is removed.
    records = talks + [talks[3], talks[5][:1] + [{"role": "assistant", "content": "I do not know."}]]
    (tmp_path / "chat" / "chat.jsonl").write_text("".join(json.dumps({"messages": m}) + "\n" for m in records))
    params = run_job(["Chat", "--input_dir", str(tmp_path / "chat"), "--output_dir", str(tmp_path / "out"),
                      "--tokenizer_type", "HuggingFaceTokenizer", "--huggingface_tokenizer", str(qwen),
                      "--max_seq_length", "128", "--display_pbar", "False", "--dedup", "exact"])
    assert _listing(tmp_path / "out") == [{"file": "chat.jsonl", "line": 13, "kind": "exact",
                                           "kept": {"file": "chat.jsonl", "line": 4}, "similarity": 1.0}]
    assert params["input"]["used"] == 13
    (tmp_path / "dpo").mkdir()
    pairs = [{"prompt": f"Question {i}?", "chosen": f"Answer {i}.", "rejected": f"No answer {i}."}
             for i in range(6)]
    pairs += [pairs[2], {**pairs[4], "rejected": "Something else."}]
    (tmp_path / "dpo" / "dpo.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
    params = run_job(["DPO", "--input_dir", str(tmp_path / "dpo"), "--output_dir", str(tmp_path / "dpo_out"),
                      "--tokenizer_type", "HuggingFaceTokenizer", "--huggingface_tokenizer", str(qwen),
                      "--max_seq_length", "64", "--prompt_key", "prompt", "--display_pbar", "False",
                      "--dedup", "exact"])
    assert [(r["line"], r["kept"]["line"]) for r in _listing(tmp_path / "dpo_out")] == [(7, 3)]
    assert params["input"]["used"] == 7


def test_a_job_without_dedup_says_nothing_of_it(planted, tmp_path):
    params = run_job(_args(planted["root"] / "in", tmp_path / "out"))
    assert "dedup" not in params and not any(k.startswith("dedup") for k in params["processing"])
    assert not (tmp_path / "out" / "dedup").exists()


@pytest.mark.parametrize("flags, message", [
    (["--dedup", "fuzzy"], "dedup: 'fuzzy' is not one of exact, near"),
    (["--dedup", "near", "--dedup_threshold", "0"], "dedup_threshold: 0.0 is not within (0, 1]"),
    (["--dedup", "near", "--dedup_bands", "0"], "dedup_bands: must be >= 1"),
    (["--dedup", "near", "--dedup_bands", "60"], "dedup_bands x dedup_rows (60 x 8) exceed dedup_values (400)"),
    (["--dedup_against", "idx"], "dedup_against needs dedup (exact or near)"),
])
def test_bad_dedup_settings_are_refused_by_name(flags, message, tmp_path):
    from pipelines.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(_args(tmp_path, tmp_path / "out", *flags))


def test_the_listing_is_named_as_the_dead_letters_are(near_job):
    """A file per input file that lost a record (a.jsonl holds every family's first record: none)."""
    out, _ = near_job
    assert sorted(p.name for p in (out / "dedup").iterdir()) == sorted(
        dead_letter_file_name(name) for name in ("b.jsonl", "c.jsonl"))


def _verify(out) -> list[str]:
    from tests.helpers import verify_problems

    return verify_problems(out)


def test_verify_recounts_the_listing_against_the_section_and_the_input(near_job, tmp_path):
    import shutil

    out, _ = near_job
    assert _verify(out) == []
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    listing = sorted((copy / "dedup").iterdir())[0]
    lines = listing.read_text().splitlines(keepends=True)
    listing.write_text("".join(lines[:-1]))
    lost = json.loads(lines[-1])["kind"]
    assert any(f"dedup/ lists" in p and f"{lost} duplicates" in p for p in _verify(copy))
    shutil.rmtree(copy / "dedup")
    assert any("not listed (no dedup/ directory)" in p for p in _verify(copy))


def test_check_dedup_names_each_disagreement():
    from transforms.core.dedup import check_dedup

    section = {"documents_removed": {"exact": 2, "near": 1}, "listed": 3,
               "per_source": {"a": {"documents_removed": {"exact": 2, "near": 1}}}}
    inp = {"dropped_by_reason": {"duplicate_exact": 2, "duplicate_near": 1}}
    assert check_dedup(section, inp, {"exact": 2, "near": 1}) == []
    assert check_dedup(section, {"dropped_by_reason": {"duplicate_exact": 2}}, {"exact": 2, "near": 1}) == [
        "dedup.documents_removed.near is 1, input.dropped_by_reason.duplicate_near is 0"]
    assert check_dedup({**section, "listed": 2}, inp, {"exact": 2, "near": 1}) == [
        "dedup.listed is 2, 3 records were removed"]
    assert check_dedup({**section, "per_source": {}}, inp, {"exact": 2, "near": 1}) == [
        "dedup.per_source removes 0 exact duplicates, the total is 2",
        "dedup.per_source removes 0 near duplicates, the total is 1"]
    assert check_dedup(section, inp, {"exact": 2}) == ["dedup/ lists 0 near duplicates, dedup.documents_removed.near is 1"]
    empty = {"documents_removed": {"exact": 0, "near": 0}, "listed": 0, "per_source": {}}
    assert check_dedup(empty, {"dropped_by_reason": {}}, None) == []


def test_a_split_jobs_dedup_verifies_and_overwriting_replaces_its_listing(planted, tmp_path):
    out = tmp_path / "out"
    run_job(_args(planted["root"] / "in", out, "--dedup", "exact", "--data_splits", "train=0.6,test=0.4"))
    assert _verify(out) == []
    run_job(_args(planted["root"] / "in", out, "--overwrite_output", "True"))
    assert not (out / "dedup").exists()


@pytest.mark.parametrize("split", [False, True])
def test_kill_and_resume_gives_the_uninterrupted_bytes(planted, tmp_path, split):
    """Deduplication needs every record, so a resumed job reads and deduplicates them all again and skips the
    groups stored before the kill after that: the same listing, rows and statistics."""
    import glob
    import os
    import signal
    import sys
    import time

    from tests.helpers import ROOT, env_to_kill, popen_logged, stderr_text

    inp = tmp_path / "in"
    inp.mkdir()
    records = [x for name in sorted(planted["files"]) for x in planted["files"][name]]
    for k in range(24):  # 24 packing groups, each sharing records with the next
        part = records[k * 12:k * 12 + 24]
        (inp / f"part{k:02d}.jsonl").write_text("".join(json.dumps({"text": x}) + "\n" for x in part))
    args = ["--max_seq_length", "32", "--shuffle", "True", "--files_per_record", "300", "--dedup", "near"]
    if split:  # each output's share of a group is skipped once stored; the rest is the job's again
        args += ["--data_splits", "train=0.5,test=0.5"]
    reference = run_job(_args(inp, tmp_path / "ref", *args))
    assert reference["dedup"]["documents_removed"]["exact"] > 200
    out = tmp_path / "out"
    proc = popen_logged([sys.executable, "-m", "pipelines.create_hdf5_dataset", *_args(inp, out, *args), *RUNNER],
                        cwd=ROOT, start_new_session=True, env=env_to_kill(tmp_path))
    def stored_with_rows() -> int:  # (a split job stores each group's rest, of no rows, at once)
        found = 0
        for path in glob.glob(str(out / ".tmp" / "groups" / "*.json")):
            try:
                found += json.loads(Path(path).read_text())["rows"] > 0
            except (OSError, ValueError):  # being renamed into place
                pass
        return found

    deadline = time.time() + 300
    while stored_with_rows() < 3:
        assert proc.poll() is None, "the job ended before the kill point: " + stderr_text(proc)
        assert time.time() < deadline, "kill point never reached"
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "data_params.json").exists()
    resumed = run_job(_args(inp, out, *args, "--resume_from_checkpoint", "True"))
    assert _digests(out) == _digests(tmp_path / "ref")
    assert resumed["input"] == reference["input"] and resumed["dedup"] == reference["dedup"]
    assert resumed.get("post-process") == reference.get("post-process")
    assert resumed.get("outputs") == reference.get("outputs")
    assert resumed["run"]["groups_resumed"] >= 3


def test_a_later_job_removes_what_an_earlier_jobs_index_holds(planted, near_job, tmp_path):
    """a.jsonl and b.jsonl deduplicated with --dedup_index, then c.jsonl alone --dedup_against that index: c's
    records removed as in the job over all three, kept records named in the earlier job's files, except a
    chain's end, whose link (in b.jsonl, removed by the first job) is not in the index."""
    full, _ = near_job
    first, later = tmp_path / "first", tmp_path / "later"
    first.mkdir()
    later.mkdir()
    for name in ("a.jsonl", "b.jsonl"):
        (first / name).write_text((planted["root"] / "in" / name).read_text())
    (later / "c.jsonl").write_text((planted["root"] / "in" / "c.jsonl").read_text())
    index = tmp_path / "index"
    made = run_job(_args(first, tmp_path / "out1", "--dedup", "near", "--dedup_index", str(index)))
    meta = json.loads((index / "index.json").read_text())
    assert meta["records"] == made["input"]["used"] and (meta["kind"], meta["bands"], meta["values"]) == ("near", 20, 400)
    params = run_job(_args(later, tmp_path / "out2", "--dedup", "near", "--dedup_against", str(index)))

    def key(r):
        return (r["file"], r["line"], r["kind"], r["kept"]["file"], r["kept"]["line"], r["similarity"])

    got = _listing(tmp_path / "out2")
    assert {r["kept"].get("index") for r in got} == {str(index)}
    expected = {key(r) for r in _listing(full) if r["file"] == "c.jsonl"}
    assert {key(r) for r in got} <= expected
    missed = {(f, line) for f, line, *_ in expected - {key(r) for r in got}}
    assert missed and all(planted["role"][m][0].startswith("chain") for m in missed)
    assert params["dedup"]["against"] == len(got) == params["dedup"]["listed"]
    assert _verify(tmp_path / "out2") == []


@pytest.fixture(scope="module")
def index_of_all(planted, tmp_path_factory):
    """An index of the planted corpus's kept records (--dedup near --dedup_index), for the refusals."""
    root = tmp_path_factory.mktemp("index_of_all")
    run_job(_args(planted["root"] / "in", root / "out", "--dedup", "near", "--dedup_index", str(root / "index")))
    return root / "index"


@pytest.mark.parametrize("flags, message", [
    (["--tokenizer_type", "NeoXTokenizer", "--encoder_file",
      str(SHARED / "tokenizers" / "olmo-dolma2" / "tokenizer.json")], "its tokenizer is"),
    (["--dedup_bands", "10"], "its bands is 20, this job's 10"),
])
def test_an_index_of_other_settings_is_refused(planted, index_of_all, tmp_path, capsys, flags, message):
    from pipelines.create_hdf5_dataset import main

    def refused(argv) -> str:
        capsys.readouterr()
        assert main(argv + RUNNER) == 2
        return capsys.readouterr().err

    index = index_of_all
    # (The later flags replace the tokenizer's or add a setting; argparse keeps the last of a flag.)
    assert message in refused(_args(planted["root"] / "in", tmp_path / "out2", "--dedup", "near",
                                    "--dedup_against", str(index), *flags))
    assert "holds no index.json" in refused(_args(planted["root"] / "in", tmp_path / "out3", "--dedup", "near",
                                                  "--dedup_against", str(tmp_path / "nothing")))
    assert "is not empty" in refused(_args(planted["root"] / "in", tmp_path / "out4", "--dedup", "near",
                                           "--dedup_index", str(index)))


def test_index_problems_name_each_difference():
    from transforms.core.dedup import DedupConfig, index_problems, index_settings

    near = index_settings(DedupConfig("near"), "tok")
    assert index_problems(near, DedupConfig("near"), "tok") == []
    assert index_problems(near, DedupConfig("exact"), "tok") == []  # a near index serves an exact job
    exact = index_settings(DedupConfig("exact"), "tok")
    assert index_problems(exact, DedupConfig("near"), "tok") == [
        "its kind is 'exact', this job's 'near'", "its shingle is None, this job's 12",
        "its bands is None, this job's 20", "its rows is None, this job's 8",
        "its values is None, this job's 400", "its value_bits is None, this job's 16"]
    assert index_problems(near, DedupConfig("near", seed=2), "other") == [
        "its seed is 0, this job's 2", "its tokenizer is 'tok', this job's 'other'"]


def test_the_estimate_says_it_cannot_see_the_corpus_duplicates(planted, capsys):
    from pipelines.create_hdf5_dataset import main

    argv = _args(planted["root"] / "in", "unused", "--dedup", "near")
    argv.remove("--output_dir")
    argv.remove("unused")
    assert main(["estimate", *argv, *RUNNER]) == 0
    assert "note: dedup: only the sample's own duplicates are removed" in capsys.readouterr().out


def test_a_mixture_draws_from_the_deduplicated_records(planted, tmp_path):
    """Deduplication comes before the mixture's draw: each source's available documents and tokens are those
    left after it, so the budgets count deduplicated tokens; the copies across sources are removed too."""
    root = tmp_path / "sources"
    for name in ("a", "c"):
        (root / name).mkdir(parents=True)
        (root / name / f"{name}.jsonl").write_text((planted["root"] / "in" / f"{name}.jsonl").read_text())
    mixture = json.dumps([{"source": str(root / "a"), "weight": 0.5, "max_repeats": 3},
                          {"source": str(root / "c"), "weight": 0.5, "max_repeats": 3}])
    args = ["LMData", "--mixture", mixture, "--output_dir", str(tmp_path / "out"), *TOKENIZER,
            "--max_seq_length", "256", "--display_pbar", "False", "--dedup", "exact"]
    params = run_job(args)
    removed = params["dedup"]["documents_removed"]["exact"]
    sources = params["mixture"]["sources"]
    # c.jsonl holds an exact copy of every exact family's first record (in a.jsonl), and the short "Hi."'s copy
    # is in b.jsonl, not here: 20 removed, all from c.
    assert removed == 20 and params["input"]["dropped_by_reason"]["duplicate_exact"] == 20
    read = {name: params["input"]["per_source"][path]["documents_read"]
            for name in ("a", "c") for path in params["input"]["per_source"] if f"/{name}.jsonl" in path}
    assert sources["a"]["documents_available"] == read["a"]
    assert sources["c"]["documents_available"] == read["c"] - 20
    plain = args[:-2]
    plain[plain.index("--output_dir") + 1] = str(tmp_path / "plain")
    without = run_job(plain)
    assert without["mixture"]["sources"]["c"]["documents_available"] == read["c"]
    assert without["mixture"]["sources"]["c"]["tokens_available"] > sources["c"]["tokens_available"]
    assert _verify(tmp_path / "out") == []


def test_the_signature_steps_verify_against_the_groups_own_signature_and_refuse_a_missing_one():
    """GroupHeads and GroupKept hold a key's own signature among its members' (_asks makes the key ask for
    itself): verification and similarity are against it, and a group without it fails loudly."""
    from transforms.core.dedup import node_of
    from transforms.core.records import GroupId
    from transforms.stages.dedup import (CANDIDATE, SIGS, _asks, _kept_signature, _send_signature,
                                         _similarity_to_kept, _verify)

    group = GroupId(file_index=0, slice_index=0, source="/in/f.jsonl", relpath="f.jsonl")
    head, near, far = (node_of(group, "", i) for i in range(3))
    base = np.arange(400, dtype=np.uint16)  # verification values, as the signature steps carry them
    sig_near = base.copy()
    sig_near[:40] += 1000  # 360 of 400 values equal: 0.9
    sig_far = base.copy()
    sig_far[:200] += 1000  # 0.5
    members = [(far, sig_far.tobytes()), (head, base.tobytes()), (near, sig_near.tobytes())]
    assert list(_verify((head, members), 0.8)) == [(near, head)]
    assert list(_verify((head, members), 0.5)) == [(far, head), (near, head)]
    with pytest.raises(RuntimeError, match="verify: the signature of f.jsonl, group 0, record 0 is missing"):
        list(_verify((head, members[::2]), 0.8))
    assert _asks((near, head)) == [(near, head), (head, head)]
    sent = list(_send_signature((head, {SIGS: [base.tobytes()], "head": [head, head]})))
    assert sent[0] == (head, (head, base.tobytes())) and sent[1].tag == CANDIDATE and len(sent) == 2
    assert list(_send_signature((far, {SIGS: [sig_far.tobytes()], "head": []}))) == []  # no candidate: no further
    assert list(_kept_signature((near, {SIGS: [sig_near.tobytes()], "kept": [head]}))) == [
        (head, (near, sig_near.tobytes()))]
    with pytest.raises(RuntimeError, match="labelled with 2 kept records"):
        list(_kept_signature((near, {SIGS: [sig_near.tobytes()], "kept": [head, far]})))
    assert sorted(_similarity_to_kept((head, members))) == [(near, (head, 0.9)), (far, (head, 0.5))]
    with pytest.raises(RuntimeError, match="similarity to the kept record"):
        list(_similarity_to_kept((head, members[::2])))
