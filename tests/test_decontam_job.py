"""Decontamination through the whole job (issue #47): a corpus with planted evaluation items (verbatim,
re-wrapped, re-cased and re-punctuated, inside a longer record, an item of 8 to 12 words, a .txt item), near
misses, a boilerplate item and one at the boilerplate limit, a short item; the records removed are exactly
those, listed with the item that matched; the rows are those of the corpus without them; the same bytes on
two workers; before splits and dedup; in a chat turn and a DPO response; the settings."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest

from tests.helpers import MULTI_PROCESSING, RUNNER, SHARED, require_shared, run_job

GPT2 = Path(__file__).resolve().parents[1] / "data" / "tokenizers" / "gpt2"
TOKENIZER = ["--tokenizer_type", "GPT2Tokenizer", "--vocab_file", str(GPT2 / "vocab.bpe"),
             "--encoder_file", str(GPT2 / "encoder.json")]


def _args(inp, out, *extra, mode="LMData"):
    return [mode, "--input_dir", str(inp), "--output_dir", str(out), *TOKENIZER, "--max_seq_length", "256",
            "--display_pbar", "False", *extra]


def _listing(out: Path) -> list[dict]:
    found = []
    directory = out / "filtered" / "decontaminate"
    for path in sorted(directory.iterdir()) if directory.exists() else ():
        found.extend(json.loads(line) for line in path.read_text().splitlines())
    return found


def _digests(out: Path) -> dict:
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file() and p.name != "data_params.json"}


def _words(text: str, n: int, start: int = 0) -> str:
    return " ".join(text.split()[start:start + n])


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """The corpus (a.jsonl, b.jsonl), the evaluation set (eval/qa.jsonl, eval/passage.txt), and which records
    must be removed: (file, line) -> (evaluation file, line, field)."""
    rng = random.Random(47)
    lines = [x for x in require_shared(SHARED / "corpora" / "en_small_pd.jsonl").read_text().split("\n") if x]
    texts = [" ".join(json.loads(line)["text"].split()[:120]) for line in lines]
    texts = [t for t in texts if len(t.split()) == 120]
    own, spare = texts[:60], iter(texts[60:])
    items = [_words(next(spare), 30) for _ in range(8)]  # text no training record holds
    items[6] = _words(items[6], 10)  # between min_ngram (8) and ngram (13) units: one n-gram of all ten
    short = "Which planet is largest?"  # 4 units: too short to be evidence
    passage = _words(next(spare), 40)
    root = tmp_path_factory.mktemp("decontam")
    (root / "eval").mkdir()
    qa = [{"id": k, "question": item, "answer": "yes"} for k, item in enumerate(items)]
    qa.append({"id": 8, "question": short, "answer": "Jupiter"})
    (root / "eval" / "qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in qa))
    (root / "eval" / "passage.txt").write_text(passage + "\n")
    qa_path, txt_path = str(root / "eval" / "qa.jsonl"), str(root / "eval" / "passage.txt")
    files = {"a.jsonl": [], "b.jsonl": []}
    removed = {}
    t = iter(own)

    def put(name, text, item=None):
        files[name].append(text)
        if item is not None:
            removed[(name, len(files[name]))] = item

    def q(k):
        return (qa_path, k + 1, "question")

    put("a.jsonl", next(t))
    put("a.jsonl", next(t) + " " + items[0], q(0))  # verbatim, at the end
    wrapped = items[1].split()
    put("a.jsonl", "\n  ".join(" ".join(wrapped[i:i + 4]) for i in range(0, 30, 4)), q(1))  # re-wrapped alone
    loud = [w.upper() + ("," if i % 3 == 2 else "") for i, w in enumerate(items[2].split())]
    put("b.jsonl", next(t) + ' "' + " ".join(loud) + '!" ' + next(t), q(2))  # re-cased, re-punctuated, inside
    words = items[3].split()
    for p in (6, 18):  # every 13 consecutive words hold a changed one: 12 of 13 at most
        words[p] = "zebra"
    put("b.jsonl", next(t) + " " + " ".join(words), None)
    put("a.jsonl", _words(items[4], 12) + " " + next(t), None)  # 12 words of an item: kept
    for k in range(11):  # in 11 training records: boilerplate, no evidence
        put("ab"[k % 2] + ".jsonl", next(t) + " " + items[5])
    put("b.jsonl", "Something else. " + items[6] + " and more words after it", q(6))
    for k in range(10):  # in 10 records: at the limit, each removed
        put("ab"[k % 2] + ".jsonl", items[7] + " " + next(t), q(7))
    put("a.jsonl", next(t) + " " + short)  # too short to be evidence
    put("b.jsonl", "As the passage said: " + passage.lower(), (txt_path, 1, "text"))
    for text in t:
        put(rng.choice(sorted(files)), text)
    (root / "in").mkdir()
    for name, records in files.items():
        (root / "in" / name).write_text("".join(json.dumps({"text": x}) + "\n" for x in records))
    return {"root": root, "files": files, "removed": removed, "eval": str(root / "eval")}


@pytest.fixture(scope="module")
def job(planted, tmp_path_factory):
    out = tmp_path_factory.mktemp("job") / "out"
    return out, run_job(_args(planted["root"] / "in", out, "--decontaminate", planted["eval"]))


def test_exactly_the_planted_records_are_removed_each_listed_with_its_item(planted, job):
    out, params = job
    listed = {(r["file"], r["line"]): (r["item"]["file"], r["item"]["line"], r["item"]["field"])
              for r in _listing(out)}
    assert listed == planted["removed"]
    assert len(listed) == 15
    for r in _listing(out):
        assert r["step"] == "decontaminate" and r["reason"] == "contaminated" and r["items"] == 1
    by_line = {(r["file"], r["line"]): r for r in _listing(out)}
    # Distinct n-grams matched: a 30-word item has 18, the 10-word one is one n-gram, the passage 28.
    ngrams = {planted["removed"][k][1]: r["ngrams"] for k, r in by_line.items() if "qa" in r["item"]["file"]}
    assert ngrams == {1: 18, 2: 18, 3: 18, 7: 1, 8: 18}


def test_the_section_counts_what_was_removed_and_left_out(planted, job):
    out, params = job
    section = params["decontamination"]
    assert section["documents_removed"] == section["listed"] == 15
    assert params["input"]["dropped_by_reason"] == {"contaminated": 15}
    assert section["evaluation"] == {"sets": [planted["eval"]], "files": 2, "items": 19, "items_too_short": 10,
                                     "ngrams": 7 * 18 + 1 + 28}
    # items: each record's strings (its question and its answer) and the passage; the short ones are the answers
    # and the short question.
    assert section["ngrams_boilerplate"] == 18  # the item in 11 records
    assert section["ngrams_matched"] == 4 * 18 + 1 + 28
    assert (section["action"], section["ngram"], section["min_ngram"], section["max_docs"]) == ("drop", 13, 8, 10)
    assert sum(s["documents_removed"] for s in section["per_source"].values()) == 15
    assert params["processing"]["decontaminate"] == [planted["eval"]]
    assert params["run"]["stage_seconds"]["decontaminate"] >= 0


def test_the_rows_are_those_of_the_corpus_without_the_removed_records(planted, job, tmp_path):
    """The same files with the listed lines taken out, without decontamination: byte for byte the same rows,
    and the characters counted removed are the removed records' characters."""
    out, params = job
    (tmp_path / "in").mkdir()
    for name, records in planted["files"].items():
        kept = [x for i, x in enumerate(records, 1) if (name, i) not in planted["removed"]]
        (tmp_path / "in" / name).write_text("".join(json.dumps({"text": x}) + "\n" for x in kept))
    without = run_job(_args(tmp_path / "in", tmp_path / "out"))
    h5 = {k: v for k, v in _digests(out).items() if k.endswith(".h5")}
    assert h5 and h5 == {k: v for k, v in _digests(tmp_path / "out").items() if k.endswith(".h5")}
    assert without["input"]["used"] == params["input"]["used"]
    assert "decontamination" not in without and not (tmp_path / "out" / "filtered").exists()
    texts = [planted["files"][f][line - 1] for f, line in planted["removed"]]
    assert params["decontamination"]["characters_removed"] == sum(map(len, texts))


def test_verify_recounts_the_listing(job, tmp_path):
    import shutil

    from tests.helpers import verify_problems

    out, _ = job
    assert verify_problems(out) == []
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    victim = sorted((copy / "filtered" / "decontaminate").iterdir())[0]
    kept = victim.read_text().splitlines()
    victim.write_text("\n".join(kept[1:]) + ("\n" if kept[1:] else ""))
    assert verify_problems(copy) == [
        "data_params.json: filtered/decontaminate/ lists 14 records (14 contaminated), "
        "decontamination.documents_removed is 15"]


def test_check_decontam_names_each_disagreement():
    from transforms.core.decontam import check_decontam

    section = {"documents_removed": 3, "listed": 2, "per_source": {"a": {"documents_removed": 1}}}
    assert check_decontam(section, {"dropped_by_reason": {"contaminated": 4}}, None) == [
        "decontamination.documents_removed is 3, input.dropped_by_reason.contaminated is 4",
        "decontamination.per_source removes 1 records, the total is 3",
        "decontamination.listed is 2, 3 records were removed",
        "decontamination: the removed records are not listed (no filtered/decontaminate/ directory)"]
    fine = {"documents_removed": 2, "listed": 2, "per_source": {"a": {"documents_removed": 2}}}
    assert check_decontam(fine, {"dropped_by_reason": {"contaminated": 2}}, {"contaminated": 2}) == []
    assert check_decontam(fine, {"dropped_by_reason": {"contaminated": 2}}, {"contaminated": 2, "x": 1}) == [
        "filtered/decontaminate/ lists 3 records (2 contaminated), decontamination.documents_removed is 2"]
    none = {"documents_removed": 0, "listed": 0, "per_source": {}}
    assert check_decontam(none, {"dropped_by_reason": {}}, None) == []


def test_the_cut_action_keeps_what_is_around_each_match(planted, tmp_path, capsys):
    """--decontaminate_action cut: each planted record loses its matches and 200 characters each side of them
    (its pieces a blank line apart), or is removed when nothing of 200 characters is left; the rows are those of
    the corpus so cut, without decontamination; each record listed, counted, and verify agrees."""
    from tests.helpers import verify_problems
    from transforms.core.decontam import (DecontamConfig, build_index, cut_record, merge_indexes,
                                          record_evidence, verdict)
    from transforms.io.eval_sets import read_eval_items

    out = tmp_path / "out"
    params = run_job(_args(planted["root"] / "in", out, "--decontaminate", planted["eval"],
                           "--decontaminate_action", "cut"))
    config = DecontamConfig(action="cut")
    index = merge_indexes([build_index((i.text for i in read_eval_items(str(p))), config)
                           for p in sorted(Path(planted["eval"]).iterdir())])
    left = {}
    for (name, line) in planted["removed"]:
        text = planted["files"][name][line - 1]
        left[(name, line)] = cut_record((text,), verdict(record_evidence([[text]], index)[0])[3], config)
    cut = {k for k, v in left.items() if v is not None}
    assert 0 < len(cut) < len(left)
    assert left[("a.jsonl", 3)] is None  # the re-wrapped item alone: nothing left
    listing = {(r["file"], r["line"]): r for r in _listing(out)}
    assert {k: r["reason"] for k, r in listing.items()} == {
        k: "cut" if k in cut else "contaminated" for k in planted["removed"]}
    for k in cut:
        assert listing[k]["characters_removed"] == len(planted["files"][k[0]][k[1] - 1]) - len(left[k][0])
    section = params["decontamination"]
    assert (section["action"], section["documents_cut"], section["documents_removed"]) == (
        "cut", len(cut), len(left) - len(cut))
    assert section["characters_cut"] == sum(r["characters_removed"] for r in listing.values() if r["reason"] == "cut")
    assert params["input"]["dropped_by_reason"] == {"contaminated": len(left) - len(cut)}
    assert verify_problems(out) == []
    (tmp_path / "in").mkdir()
    for name, records in planted["files"].items():
        kept = [left[(name, i)][0] if (name, i) in left else x for i, x in enumerate(records, 1)
                if (name, i) not in left or left[(name, i)] is not None]
        (tmp_path / "in" / name).write_text("".join(json.dumps({"text": x}) + "\n" for x in kept))
    run_job(_args(tmp_path / "in", tmp_path / "plain"))
    h5 = {k: v for k, v in _digests(out).items() if k.endswith(".h5")}
    assert h5 and h5 == {k: v for k, v in _digests(tmp_path / "plain").items() if k.endswith(".h5")}
    # The estimate cuts each sampled record as the job does (the boilerplate item's 11 records too: it cannot
    # count them); its documents are the job's, within 5%.
    from pipelines.create_hdf5_dataset import main

    argv = [a for a in _args(planted["root"] / "in", "unused", "--decontaminate", planted["eval"],
                             "--decontaminate_action", "cut") if a not in ("--output_dir", "unused")]
    capsys.readouterr()
    assert main(["estimate", *argv, "--sample", "100%", *RUNNER]) == 0
    documents = next(line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("documents"))
    assert abs(float(documents.split()[1]) - params["input"]["used"]) <= 0.05 * params["input"]["used"]


@pytest.mark.worker_processes
def test_two_workers_write_the_same_bytes(planted, job, tmp_path):
    out, params = job
    other = run_job(_args(planted["root"] / "in", tmp_path / "out", "--decontaminate", planted["eval"]),
                    runner=MULTI_PROCESSING)
    assert _digests(tmp_path / "out") == _digests(out)
    assert other["decontamination"] == params["decontamination"] and other["input"] == params["input"]


def test_a_split_job_with_dedup_removes_the_same_records_first(planted, job, tmp_path):
    """Before the routing and before dedup: the same records removed and listed across the outputs, and the
    records that are removed as contaminated are not dedup's to remove (the ten copies of one item)."""
    out, _ = job
    params = run_job(_args(planted["root"] / "in", tmp_path / "out", "--decontaminate", planted["eval"],
                           "--data_splits", "train=0.6,test=0.4", "--dedup", "exact"))
    assert _listing(tmp_path / "out") == _listing(out)
    assert params["decontamination"]["documents_removed"] == 15
    assert params["input"]["dropped_by_reason"] == {"contaminated": 15}
    assert params["dedup"]["documents_removed"] == {"exact": 0, "near": 0}
    assert sum(o["documents_used"] for o in params["outputs"]) == params["input"]["used"]
    from tests.helpers import verify_problems

    assert verify_problems(tmp_path / "out") == []


def test_evaluation_fields_and_files_are_chosen(planted, tmp_path):
    """decontaminate_keys: only those fields' strings are items (the answers only, too short: nothing is
    removed; a .txt file's item is its "text", not asked for); one file named alone, a boilerplate limit
    raised."""
    params = run_job(_args(planted["root"] / "in", tmp_path / "out", "--decontaminate", planted["eval"],
                           "--decontaminate_keys", "answer"))
    assert params["decontamination"]["documents_removed"] == 0
    assert params["decontamination"]["evaluation"]["items"] == params["decontamination"]["evaluation"][
        "items_too_short"] == 9
    qa = str(Path(planted["eval"]) / "qa.jsonl")
    params = run_job(_args(planted["root"] / "in", tmp_path / "out2", "--decontaminate", qa,
                           "--decontaminate_max_docs", "11"))
    # No passage; the 11 records holding one item are now evidence.
    assert params["decontamination"]["documents_removed"] == 15 - 1 + 11
    assert params["decontamination"]["ngrams_boilerplate"] == 0


def test_chat_turns_and_dpo_responses_are_checked(tmp_path):
    """An item inside an assistant's turn removes the conversation whole; one inside a DPO pair's chosen
    response removes the pair; the rest are kept. (With --languages en too: a conversation in French is removed
    for its language, its messages' text; issue #47's language identification, tested here to share the job.)"""
    qwen = require_shared(SHARED / "tokenizers" / "qwen2.5-instruct")
    item = ("the committee agreed that the northern bridge would be rebuilt in stone before the winter "
            "floods of the following year")
    (tmp_path / "eval.jsonl").write_text(json.dumps({"answer": item}) + "\n")
    (tmp_path / "chat").mkdir()
    talks = [[{"role": "user", "content": f"What is {i} times {i}?"},
              {"role": "assistant", "content": f"{i} times {i} is {i * i}."}] for i in range(6)]
    talks[4][1]["content"] = "As recorded, " + item.capitalize() + "."
    french = "Le comité s'est réuni mardi pour discuter du nouveau budget de la bibliothèque municipale."
    talks.append([{"role": "user", "content": french}, {"role": "assistant", "content": french}])
    (tmp_path / "chat" / "chat.jsonl").write_text("".join(json.dumps({"messages": m}) + "\n" for m in talks))
    common = ["--tokenizer_type", "HuggingFaceTokenizer", "--huggingface_tokenizer", str(qwen),
              "--display_pbar", "False", "--decontaminate", str(tmp_path / "eval.jsonl")]
    params = run_job(["Chat", "--input_dir", str(tmp_path / "chat"), "--output_dir", str(tmp_path / "out"),
                      "--max_seq_length", "128", "--languages", "en", *common])
    assert [(r["file"], r["line"]) for r in _listing(tmp_path / "out")] == [("chat.jsonl", 5)]
    assert params["input"]["used"] == 5 and params["decontamination"]["documents_removed"] == 1
    languages = tmp_path / "out" / "filtered" / "language"
    assert [json.loads(x)["line"] for p in languages.iterdir() for x in p.read_text().splitlines()] == [7]
    assert params["language"]["detected"]["fr"]["documents"] == 1
    (tmp_path / "dpo").mkdir()
    pairs = [{"prompt": f"Question {i}?", "chosen": f"Answer {i}.", "rejected": f"No answer {i}."}
             for i in range(4)]
    pairs[1]["chosen"] = item.upper()
    (tmp_path / "dpo" / "dpo.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
    params = run_job(["DPO", "--input_dir", str(tmp_path / "dpo"), "--output_dir", str(tmp_path / "dpo_out"),
                      "--max_seq_length", "64", "--prompt_key", "prompt", *common])
    assert [r["line"] for r in _listing(tmp_path / "dpo_out")] == [2]
    assert params["input"]["used"] == 3


@pytest.mark.parametrize("flags, message", [
    (["--decontaminate", "x.jsonl", "--decontaminate_action", "trim"],
     "decontaminate_action: 'trim' is not one of drop, cut"),
    (["--decontaminate", "x.jsonl", "--decontaminate_max_docs", "0"], "decontaminate_max_docs: must be >= 1"),
    (["--decontaminate", "x.jsonl", "--decontaminate_min_ngram", "14"],
     "decontaminate_min_ngram: 14 is not between 1 and decontaminate_ngram"),
    (["--decontaminate_keys", "question"], "decontaminate_keys needs decontaminate"),
])
def test_bad_decontamination_settings_are_refused_by_name(flags, message, tmp_path):
    from pipelines.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(_args(tmp_path, tmp_path / "out", *flags))


def test_an_evaluation_set_without_files_fails_before_the_job(planted, tmp_path):
    from pipelines.create_hdf5_dataset import main

    (tmp_path / "empty").mkdir()
    assert main(_args(planted["root"] / "in", tmp_path / "out", "--decontaminate", str(tmp_path / "empty"))
                + RUNNER) != 0
    assert not (tmp_path / "out" / "data_params.json").exists()


def test_the_estimate_counts_the_sampled_records_the_evaluation_set_removes(planted, job, capsys):
    """estimate finds each sampled record's evidence as the job does, without the boilerplate rule (which needs
    the corpus): it says so, and its documents are at most those the job keeps, give or take its interval."""
    from pipelines.create_hdf5_dataset import main

    out, params = job
    argv = [a for a in _args(planted["root"] / "in", "unused", "--decontaminate", planted["eval"])
            if a not in ("--output_dir", "unused")]
    assert main(["estimate", *argv, "--sample", "100%", *RUNNER]) == 0
    printed = capsys.readouterr().out
    assert "note: decontamination: a sampled record holding an evaluation n-gram is counted removed" in printed
    documents = next(line for line in printed.splitlines() if line.strip().startswith("documents"))
    value = float(documents.split()[1])
    # The job keeps the 11 records of the boilerplate item; the estimate counts them removed. (Its interval does
    # not hold the sampling error of the share of lines kept: a known gap, left to issue #44.)
    kept_by_estimate = params["input"]["used"] - 11
    assert abs(value - kept_by_estimate) <= 0.05 * kept_by_estimate


def test_kill_and_resume_gives_the_uninterrupted_bytes(planted, tmp_path):
    """Decontamination needs every record (its boilerplate rule counts them all), and the listings are written a
    file at a time: a resumed job checks them all again and skips the groups stored before the kill after that:
    the same listings, rows and statistics as a job never interrupted."""
    import glob
    import os
    import signal
    import sys
    import time

    from tests.helpers import ROOT, env_to_kill, popen_logged, stderr_text

    inp = tmp_path / "in"
    inp.mkdir()
    records = [x for name in sorted(planted["files"]) for x in planted["files"][name]]
    for k in range(12):  # 12 files, so that several groups are stored before the kill
        (inp / f"part{k:02d}.jsonl").write_text("".join(json.dumps({"text": x}) + "\n" for x in records[k::12]))
    args = ["--max_seq_length", "32", "--shuffle", "True", "--files_per_record", "50", "--decontaminate",
            planted["eval"], "--decontaminate_max_docs", "2", "--language_id", "True"]
    reference = run_job(_args(inp, tmp_path / "ref", *args))
    assert reference["decontamination"]["documents_removed"] > 0
    out = tmp_path / "out"
    proc = popen_logged([sys.executable, "-m", "pipelines.create_hdf5_dataset", *_args(inp, out, *args), *RUNNER],
                        cwd=ROOT, start_new_session=True, env=env_to_kill(tmp_path))

    def stored() -> int:
        return len(glob.glob(str(out / ".tmp" / "groups" / "*.json")))

    deadline = time.time() + 300
    while stored() < 3:
        assert proc.poll() is None, "the job ended before the kill point: " + stderr_text(proc)
        assert time.time() < deadline, "kill point never reached"
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "data_params.json").exists()
    resumed = run_job(_args(inp, out, *args, "--resume_from_checkpoint", "True"))
    assert _digests(out) == _digests(tmp_path / "ref")
    assert resumed["input"] == reference["input"] and resumed["decontamination"] == reference["decontamination"]
    assert resumed["language"] == reference["language"]
    assert resumed["post-process"] == reference["post-process"] and resumed["run"]["groups_resumed"] >= 3
