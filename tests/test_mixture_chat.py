"""Mixtures in the chat modes: records are chosen once encoded, so a conversation's tokens are its template's;
a DPO pair's count its prompt once per side. Shares within half a record, every record accounted for (those
dropped while encoding were never available), the same bytes whatever the order of the sources."""

from __future__ import annotations

import glob
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import SHARED, read_rows, require_shared, run_job

QWEN = SHARED / "tokenizers" / "qwen2.5-instruct"
WORDS = ["alpha", "βeta", "γάμμα", "delta", "日本語", "naïve", "emoji 🙂", "x", "the", "of"]


def _conversation(rng, i: int) -> list[dict]:
    messages = []
    for t in range(int(rng.integers(1, 4))):
        for role in ("user", "assistant"):
            messages.append({"role": role, "content": f"{role} {i}.{t}: "
                             + " ".join(rng.choice(WORDS, int(rng.integers(1, 15))))})
    return messages


def _write(path: Path, records: list) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    return str(path.parent)


@pytest.fixture(scope="module")
def chat_sources(tmp_path_factory) -> dict:
    """big: 200 conversations (and one too long for a row, dropped while encoding); small: 25, to be repeated."""
    root = tmp_path_factory.mktemp("chat_sources")
    rng = np.random.default_rng(7)
    big = [{"messages": _conversation(rng, i)} for i in range(200)]
    big.insert(50, {"messages": [{"role": "user", "content": "long " * 800}, {"role": "assistant", "content": "ok"}]})
    small = [{"messages": _conversation(rng, 1000 + i)} for i in range(25)]
    return {"big": _write(root / "big" / "a.jsonl", big), "small": _write(root / "small" / "b.jsonl", small)}


def _mixture(sources: dict, order=("big", "small")) -> str:
    entries = {"big": {"source": sources["big"], "weight": 0.6, "name": "big"},
               "small": {"source": sources["small"], "weight": 0.4, "max_repeats": 8, "name": "small"}}
    return json.dumps([entries[k] for k in order])


def _args(mode: str, mixture: str, out, *extra) -> list[str]:
    return [mode, "--mixture", mixture, "--output_dir", str(out), "--tokenizer_type", "HuggingFaceTokenizer",
            "--huggingface_tokenizer", str(require_shared(QWEN)), "--max_seq_length", "512",
            "--total_tokens", "30k", "--display_pbar", "False", *extra]


def _digests(out) -> dict:
    found = {os.path.basename(p): hashlib.sha256(open(p, "rb").read()).hexdigest()
             for p in glob.glob(os.path.join(str(out), "*.h5"))}
    params = json.load(open(os.path.join(str(out), "data_params.json")))
    found["params"] = {k: params.get(k) for k in ("post-process", "mixture", "input")}
    return found


def _template_tokens(records: list[list[dict]]) -> list[int]:
    """Each conversation's tokens as Qwen's template renders them (transformers, the oracle)."""
    transformers = pytest.importorskip("transformers", reason="transformers is the oracle of the template")
    hf = transformers.AutoTokenizer.from_pretrained(str(QWEN))
    return [len(hf.apply_chat_template(m, tokenize=True, return_dict=True)["input_ids"]) for m in records]


@pytest.fixture(scope="module")
def chat_job(chat_sources, tmp_path_factory):
    out = tmp_path_factory.mktemp("chat_mixture") / "out"
    return out, run_job(_args("Chat", _mixture(chat_sources), out, "--shuffle", "True"))


def test_chat_shares_are_within_half_a_conversation_and_counted_as_written(chat_sources, chat_job):
    from pipelines.tools import verify_dataset

    out, params = chat_job
    mix, inp = params["mixture"], params["input"]
    longest = {}
    for name, directory in chat_sources.items():
        records = [json.loads(line)["messages"] for line in open(os.path.join(directory, os.listdir(directory)[0]))]
        longest[name] = max(n for n in _template_tokens(records) if n <= 513)
    for name, weight in (("big", 0.6), ("small", 0.4)):
        s = mix["sources"][name]
        assert s["target_tokens"] == round(weight * 30_000)
        assert abs(s["tokens_taken"] - s["target_tokens"]) <= longest[name] / 2, name
    assert mix["sources"]["small"]["whole_copies"] >= 1 and mix["sources"]["small"]["repeats"] > 0
    # The too-long conversation was dropped while encoding: never available to the mixture, still accounted for.
    assert inp["dropped_by_reason"]["too_long"] == 1
    assert mix["sources"]["big"]["documents_available"] == 200
    assert inp["good"] == 226 and inp["good"] + inp["repeats"] == inp["used"] + inp["dropped"]
    # A Chat row is one conversation: the rows are the copies taken, and their tokens the ones counted.
    rows = read_rows(out)
    assert len(rows) == inp["used"] == sum(s["documents_taken"] + s["repeats"] for s in mix["sources"].values())
    assert params["post-process"]["num_tokens"] == len(rows) * 512
    assert verify_dataset(str(out)).problems == []


def test_chat_bytes_do_not_depend_on_the_order_of_the_sources(chat_sources, chat_job, tmp_path):
    run_job(_args("Chat", _mixture(chat_sources, order=("small", "big")), tmp_path / "o", "--shuffle", "True"))
    assert _digests(tmp_path / "o") == _digests(chat_job[0])


def test_a_resumable_chat_job_gives_the_bytes_of_one_held_in_memory(chat_sources, chat_job, tmp_path):
    """With a storage directory the encoded records wait for the plan on disk (their masks kept as they are);
    held by the runner they do not: the same rows either way."""
    run_job(_args("Chat", _mixture(chat_sources), tmp_path / "r", "--shuffle", "True",
                  "--shuffle_strategy", "runner"))
    assert _digests(tmp_path / "r") == _digests(chat_job[0])


def test_chat_vsl_mixture_in_splits_keeps_every_copy_in_its_split(chat_sources, tmp_path):
    from pipelines.tools import verify_dataset

    out = tmp_path / "s"
    summary = run_job(_args("Chat_VSL", _mixture(chat_sources), out, "--data_splits", "train=0.7,test=0.3"))
    assert verify_dataset(str(out)).problems == []
    assert summary["mixture"]["sources"]["small"]["repeats"] > 0
    # Each of small's conversations opens with its own text: all its copies are in one split.
    streams = {o["path"]: read_rows(out / o["path"])[:, 0].astype("<i4").tobytes() for o in summary["outputs"]}
    transformers = pytest.importorskip("transformers", reason="transformers is the oracle of the template")
    hf = transformers.AutoTokenizer.from_pretrained(str(QWEN))
    directory = chat_sources["small"]
    repeated = 0
    for line in open(os.path.join(directory, os.listdir(directory)[0])):
        ids = hf.apply_chat_template(json.loads(line)["messages"], tokenize=True, return_dict=True)["input_ids"]
        head = np.asarray(ids[:40], dtype="<i4").tobytes()
        found = {path: s.count(head) for path, s in streams.items() if s.count(head)}
        assert len(found) == 1, found
        repeated += sum(found.values()) > 1
    assert repeated > 0


def test_dpo_pairs_count_their_prompt_once_per_side(tmp_path):
    from pipelines.tools import verify_dataset

    rng = np.random.default_rng(3)
    sources = {}
    for name, n in (("big", 120), ("small", 15)):
        sources[name] = _write(tmp_path / name / "p.jsonl", [
            {"prompt": " ".join(rng.choice(WORDS, int(rng.integers(2, 20)))),
             "chosen": " ".join(rng.choice(WORDS, int(rng.integers(1, 10)))),
             "rejected": "no " + " ".join(rng.choice(WORDS, int(rng.integers(1, 10))))} for _ in range(n)])
    mixture = json.dumps([{"source": sources["big"], "weight": 0.5, "name": "big"},
                          {"source": sources["small"], "weight": 0.5, "max_repeats": 10, "name": "small"}])
    out = tmp_path / "out"
    params = run_job(["DPO", "--mixture", mixture, "--output_dir", str(out), "--tokenizer_type",
                      "HuggingFaceTokenizer", "--huggingface_tokenizer", str(require_shared(QWEN)),
                      "--max_seq_length", "96", "--prompt_key", "prompt", "--total_tokens", "12k",
                      "--display_pbar", "False"])
    mix = params["mixture"]["sources"]
    assert verify_dataset(str(out)).problems == []
    assert mix["small"]["repeats"] > 0
    rows = read_rows(out)
    assert len(rows) == params["input"]["used"]
    # A pair's tokens: its row's chosen and rejected sequences (prompt + response each), label-shifted by one.
    real = sum(int((r[1] == 1).sum() + np.flatnonzero(r[1] == 1)[0] + 1 + (r[4] == 1).sum()
                   + np.flatnonzero(r[4] == 1)[0] + 1) for r in rows)
    assert real == params["mixture"]["tokens_taken"]
    for name in ("big", "small"):
        assert abs(mix[name]["tokens_taken"] - 6000) <= 100, name  # a pair is under 100 tokens here


def test_a_210_token_limit_in_a_chat_config_is_a_budget_of_its_source(tmp_path):
    """2.10's shipped multi-turn config with processing.token_limit: the conversations a keyed hash draws, to
    within half a conversation of the limit."""
    from pipelines.config import load_config
    from pipelines.job import run
    from tests.helpers import RUNNER
    from tests.test_cerebras210_configs import _chat, _config

    require_shared()
    config = _config("multi_turn_dialogue_preprocessing", tmp_path, _chat(tmp_path / "input"))
    config.write_text(config.read_text().replace("processing:\n", "processing:\n  token_limit: 5000\n", 1))
    cfg, beam_args = load_config(["--config", str(config), *RUNNER])
    params = run(cfg, beam_args, {})
    mix = params["mixture"]["sources"]["source"]
    assert mix["target_tokens"] == 5000 and mix["tokens_available"] > 5000
    rows = read_rows(tmp_path / "out")
    pad = params["post-process"]["pad_id"]
    longest = max(int(np.flatnonzero(r[0] != pad)[-1]) + 3 for r in rows)  # a bound: its inputs, a label, a pad
    assert abs(mix["tokens_taken"] - 5000) <= longest / 2
    assert len(rows) == mix["documents_taken"]
