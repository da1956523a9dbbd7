"""The tiktoken encoder backend: its exactness check, its fallback, and differential tests against tokenizers.

Every tokenizer that takes the fast path is compared with the same tokenizer
on `tokenizers`: on a slice of every corpus in ../shared/corpora, on
generated text (all Unicode planes, whitespace runs, digits, contractions,
emoji, added tokens), on llama.cpp's test vectors, and through the pipeline
(identical .h5 bytes). Synthetic vocabularies show that the check finds a
merge list tiktoken would get wrong, and that what it lets through is exact.

`auto` prefers fastokens where it is exact (tests/test_fast_encoder.py); here
fastokens is taken away, so that `auto` means what it means without it:
tiktoken where exact, else tokenizers.

The default run stays well under a minute. TIKTOKEN_EXHAUSTIVE=1 compares
the whole small corpora and 24 MB of each benchmark corpus, and every Unicode
code point through each verified pre-tokenizer regex (several minutes).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import logging
import os
import shutil
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import ROOT, SHARED, h5_files, require_shared, run_job
from transforms.core.tokenizer import GPT2, HF, NEOX, TokenizerFiles, build_tokenizer, encode_bounded, tokenize_documents
from transforms.core.tokenizer import backends, fast
from transforms.core.tokenizer.exact import RankTable, byte_stand_ins
from transforms.io.tokenizer_files import read_tokenizer_files

EXHAUSTIVE = os.environ.get("TIKTOKEN_EXHAUSTIVE") == "1"
TOKS = SHARED / "tokenizers"
REF = SHARED / "reference" / "tokenizer"
CORPORA = SHARED / "corpora"
BUNDLED = ROOT / "data" / "tokenizers" / "gpt2"
SLICE_BYTES = 24_000_000 if EXHAUSTIVE else 250_000



@pytest.fixture(autouse=True)
def _without_fastokens(monkeypatch):
    """As on a machine without fastokens: auto chooses between tiktoken and tokenizers."""
    def missing():
        raise fast.Unavailable("fastokens is not installed")

    monkeypatch.setattr(fast, "_fastokens", missing)

# ------------------------------------------------------------ tokenizers


def _hf_legacy_dir(config: dict) -> Path:
    """The gpt2 vocab.json + merges.txt layout with a given tokenizer_config.json."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="gpt2_legacy_"))
    for name in ("vocab.json", "merges.txt", "special_tokens_map.json"):
        shutil.copy(TOKS / "gpt2" / name, d / name)
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    return d


# name -> (needs ../shared, TokenizerFiles factory); every byte-level tokenizer the project ships or reads.
CASES = {
    "gpt2-bundled": (False, lambda: read_tokenizer_files(GPT2, vocab_file=str(BUNDLED / "vocab.bpe"),
                                                         encoder_file=str(BUNDLED / "encoder.json"))),
    "gpt2": (True, lambda: read_tokenizer_files(GPT2, vocab_file=str(TOKS / "gpt2/vocab.bpe"),
                                                encoder_file=str(TOKS / "gpt2/encoder.json"))),
    # Summarization's sep token: an added special token on a GPT2Tokenizer.
    "gpt2-sep": (True, lambda: read_tokenizer_files(GPT2, vocab_file=str(TOKS / "gpt2/vocab.bpe"),
                                                    encoder_file=str(TOKS / "gpt2/encoder.json"), sep_token="<sep>")),
    "gpt2-hf-dir": (True, lambda: read_tokenizer_files(HF, huggingface_tokenizer=str(TOKS / "gpt2"))),
    # vocab.json + merges.txt with a prefix space and a BOS added per encode.
    "gpt2-hf-prefix-bos": (True, lambda: read_tokenizer_files(HF, huggingface_tokenizer=str(_hf_legacy_dir(
        {"add_prefix_space": True, "add_bos_token": True, "bos_token": "<|endoftext|>",
         "eos_token": "<|endoftext|>"})))),
    "neox-20b": (True, lambda: read_tokenizer_files(NEOX, encoder_file=str(TOKS / "gpt-neox-20b/20B_tokenizer.json"))),
    "olmo-dolma2": (True, lambda: read_tokenizer_files(NEOX, encoder_file=str(TOKS / "olmo-dolma2/tokenizer.json"))),
    "ref-gpt2": (True, lambda: read_tokenizer_files(GPT2, encoder_file=str(REF / "gpt2/vocab.json"),
                                                    vocab_file=str(REF / "gpt2/merges.txt"))),
    "ref-neox": (True, lambda: read_tokenizer_files(NEOX, encoder_file=str(REF / "tokenizer.json"))),
    "ref-hf": (True, lambda: read_tokenizer_files(HF, huggingface_tokenizer=str(REF / "hf"))),
}


@lru_cache(maxsize=None)
def pair(name: str):
    """(the tokenizer on tokenizers, the same tokenizer on tiktoken)."""
    shared, files = CASES[name]
    if shared:
        require_shared(TOKS)
        require_shared(REF)
    files = files()
    slow = build_tokenizer(dataclasses.replace(files, backend="tokenizers"))
    fast = build_tokenizer(dataclasses.replace(files, backend="tiktoken"))
    assert (slow.encoder_name, fast.encoder_name) == ("tokenizers", "tiktoken")
    return slow, fast


def assert_same_ids(slow, fast, texts, **kw):
    a = tokenize_documents(slow, texts, **kw)
    b = tokenize_documents(fast, texts, **kw)
    assert len(a) == len(b) == len(texts)
    for text, x, y in zip(texts, a, b):
        assert x.dtype == y.dtype == np.int32
        assert x.tolist() == y.tolist(), f"{slow.name}: ids differ on {text[:80]!r}"


# ------------------------------------------------------ shipped tokenizers


def test_shipped_tokenizers_choose_as_documented(caplog):
    """auto takes tiktoken for every byte-level BPE we ship, and says why Mistral stays on tokenizers."""
    require_shared(TOKS)
    for name in CASES:
        _, files = CASES[name]
        assert build_tokenizer(files()).encoder_name == "tiktoken", name
    mistral = read_tokenizer_files(HF, huggingface_tokenizer=str(TOKS / "mistral-7b"))
    backends._LOGGED.clear()
    with caplog.at_level(logging.WARNING, logger=backends.__name__):
        tok = build_tokenizer(mistral)
        build_tokenizer(mistral)  # once per process, not per build
    assert tok.encoder_name == "tokenizers"
    assert "byte_fallback" in tok.encoder_note and "not a byte-level one" in tok.encoder_note
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "mistral-7b" in lines[0] and "byte_fallback" in lines[0]
    with pytest.raises(ValueError, match="--tokenizer_backend tiktoken: .*byte_fallback"):
        build_tokenizer(dataclasses.replace(mistral, backend="tiktoken"))
    assert build_tokenizer(dataclasses.replace(mistral, backend="tokenizers")).encoder_note is None
    with pytest.raises(ValueError, match="--tokenizer_backend must be one of"):
        build_tokenizer(dataclasses.replace(mistral, backend="fast"))


def _corpus_slices() -> dict[str, list[str]]:
    """The first SLICE_BYTES of lines of every corpus in ../shared/corpora (whole small corpora when exhaustive)."""
    require_shared(CORPORA)
    out = {}
    for path in sorted(CORPORA.rglob("*.jsonl*")):
        if path.suffix == ".zst":
            import zstandard

            raw = io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(open(path, "rb")), 1 << 20)
        else:
            raw = open(path, "rb")
        limit = None if EXHAUSTIVE and path.suffix != ".zst" else SLICE_BYTES
        texts, size = [], 0
        with raw:
            for line in raw:
                texts.append(json.loads(line)["text"])
                size += len(line)
                if limit and size >= limit:
                    break
        out[path.name] = texts
    assert {"en_small_pd.jsonl", "code_small.jsonl", "multilingual_dev.jsonl"} <= out.keys()
    return out


@pytest.fixture(scope="module")
def corpora():
    return _corpus_slices()


@pytest.mark.parametrize("name", list(CASES))
def test_corpora_give_the_same_ids(name, corpora):
    slow, fast = pair(name)
    for texts in corpora.values():
        assert_same_ids(slow, fast, texts)  # batches over 64 KiB: tiktoken encodes them on every core
    texts = corpora["multilingual_dev.jsonl"][:40] + corpora["code_small.jsonl"][:5]
    assert_same_ids(slow, fast, texts, split_len=300, remove_bos_in_chunks=True)
    # Long texts cut at safe spaces (UNCUT_CHARS made small): the cut plan and the pieces.
    a = encode_bounded(slow, texts, uncut=3000, piece=700)
    b = encode_bounded(fast, texts, uncut=3000, piece=700)
    assert [x.tolist() for x in a] == [y.tolist() for y in b]
    assert slow._cut_plan().drop_space == fast._cut_plan().drop_space and fast._cut_plan().exact


@pytest.mark.parametrize("name", ["ref-gpt2", "ref-neox", "ref-hf", "gpt2"])
def test_reference_inputs_give_the_same_ids(name):
    """The golden runs' inputs (edge cases: empty documents, mojibake, NFD text, a literal <|endoftext|>)."""
    inputs = require_shared(SHARED / "reference" / "inputs")
    texts = []
    for path in sorted(inputs.glob("*/*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            texts += [record[k] for k in ("text", "prompt", "completion") if isinstance(record.get(k), str)]
    assert len(texts) > 1000 and "" in texts
    slow, fast = pair(name)
    assert_same_ids(slow, fast, texts)


def test_llama_cpp_test_vectors():
    """The gpt-2 and mpt (= GPT-NeoX-20B) vectors, on tiktoken."""
    vectors = require_shared(TOKS / "test-vectors")
    for name, case in (("gpt-2", "gpt2"), ("mpt", "neox-20b")):
        inp = (vectors / f"ggml-vocab-{name}.gguf.inp").read_text(encoding="utf-8")
        out = (vectors / f"ggml-vocab-{name}.gguf.out").read_text(encoding="utf-8")
        sep = "\n__ggml_vocab_test__\n"
        texts = inp[: -len(sep)].split(sep)
        want = [[int(x) for x in line.split()] for line in out[:-1].split("\n")]
        _, fast = pair(case)
        assert [fast.encode(t).tolist() for t in texts] == want


# Pieces tokenizers are easily wrong on: whitespace runs (NeoX's space tokens),
# contractions (the regexes' first alternatives), digits, combining marks
# (normal forms), emoji sequences, odd spaces, and every added token we use.
FRAGMENTS = [
    " ", "  ", "   ", " " * 23, " " * 25, "\t", "\n", "\n\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2028", "\u200b",
    "\u0085", "\x0b", "\x0c", "'s", "'S", "'re", "'LL", "'ve", "'d", "'m", "'t", "\u2019s", "n't", "123", "1234567",
    "\u0661\u0662\u0663", "\u2163", "\u00bd", "e\u0301", "\u1e9b\u0323", "\u1100\u1161\u11a8", "\ufb01", "\u2460",
    "A\u030a", "\U0001f600", "\U0001f468\u200d\U0001f469\u200d\U0001f467", "\U0001f1eb\U0001f1f7", "\u00e9",
    "\u4e2d\u6587", "\u0627\u0644", "hello", "World", "def", "_x", "->", "...", "$", "<", ">", "|",
    "<|endoftext|>", "<|padding|>", "<|fim_prefix|>", "<|fim_middle|>", "<fim_middle>", "<sep>", "<s>", "\x00",
    "\ufffd", "\U000e0001", "\U0010fffd", "\U00020000",
]
CODE_POINTS = st.integers(0, 0x10FFFF).filter(lambda c: not 0xD800 <= c < 0xE000).map(chr)
TEXT = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), CODE_POINTS, st.text(max_size=6),
              st.text(alphabet=st.sampled_from(" \t\n\u00a0abc123'"), max_size=8)),
    max_size=30,
).map("".join)


@settings(max_examples=200 if not EXHAUSTIVE else 3000, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(texts=st.lists(TEXT, min_size=1, max_size=4))
def test_generated_text_gives_the_same_ids(texts):
    for name in CASES:
        slow, fast = pair(name)
        for add in (True, False):
            a = slow.encoder.encode_batch(texts, add_special_tokens=add)
            b = fast.encoder.encode_batch(texts, add_special_tokens=add)
            assert [x.tolist() for x in a] == [y.tolist() for y in b], (name, add)


def test_long_runs_and_long_words():
    """Words of 100 bytes or more take tiktoken's other BPE (a heap); a run of a million spaces exceeds
    fancy-regex's backtracking stack, and such a text is encoded by tokenizers instead."""
    import random

    rng = random.Random(13)
    texts = ["a" * 3000, "ab" * 1500, "".join(rng.choice("abcdefghij") for _ in range(5000)), "1" * 2000,
             "\u00e9" * 800, "\U0001f600" * 300, "=" * 1000, "x" + " " * 5000 + "y", "\n" * 3000 + "z",
             "".join(rng.choice("ab cd\n") for _ in range(20000))]
    for name in ("gpt2-bundled", "neox-20b", "olmo-dolma2"):
        slow, fast = pair(name)
        assert_same_ids(slow, fast, texts)
    slow, fast = pair("gpt2-bundled")
    huge = ["x" + " " * 1_000_000 + "y", "\n" * 1_000_000]
    with pytest.raises(backends._RegexLimit):
        fast.encoder._words(huge[0])
    assert_same_ids(slow, fast, huge + ["after"])


@pytest.mark.parametrize("setting, size", [("1", 1), ("3", 3), ("", None)])
def test_encoding_pool_follows_the_native_thread_limit(monkeypatch, setting, size):
    """The pool is sized as tokenizers' rayon pool is (threads.limit_native_threads), else by the cores."""
    from transforms.core.threads import machine_cpus

    monkeypatch.setenv("RAYON_NUM_THREADS", setting)
    for name in ("_POOL", "_POOL_SIZE", "_POOL_PID"):
        monkeypatch.setattr(backends, name, getattr(backends, name))  # restored afterwards
    backends._POOL = None
    slow, fast = pair("gpt2-bundled")
    texts = [f"document {i}: " + "Hello world, this is a test. " * 40 for i in range(200)]  # > 64 KiB
    assert_same_ids(slow, fast, texts)
    assert backends._POOL_SIZE == (size or machine_cpus())
    backends._POOL.shutdown(wait=True)


def test_lone_surrogates_are_refused_by_both():
    """Readers dead-letter them (transforms.io.readers); the tokenizer refuses them whichever backend runs."""
    slow, fast = pair("gpt2-bundled")
    for tok in (slow, fast):
        with pytest.raises(TypeError):
            tokenize_documents(tok, ["fine", "lone \ud800 surrogate"])
        with pytest.raises(TypeError):
            tok.encode("\udfff")


def test_tokenizer_api_is_the_same_on_both(tmp_path):
    import pickle

    for name in ("gpt2-hf-prefix-bos", "neox-20b"):
        slow, fast = pair(name)
        assert fast.fingerprint() == slow.fingerprint()  # the fingerprint names the tokenizer, not the encoder
        assert (fast.bos_id, fast.adds_bos, fast.eos_id, fast.pad_id) == (slow.bos_id, slow.adds_bos, slow.eos_id,
                                                                         slow.pad_id)
        text = "  Hello world\n<|endoftext|> x"
        assert fast.encode(text).tolist() == slow.encode(text).tolist() == slow.backend.encode(text).ids
        plain_slow, plain_fast = slow.without_bos(), fast.without_bos()
        assert plain_fast.encoder_name == "tiktoken"
        assert plain_fast.encode(text).tolist() == plain_slow.encode(text).tolist()
        again = pickle.loads(pickle.dumps(fast))
        assert again.encoder_name == "tiktoken" and again.encode(text).tolist() == fast.encode(text).tolist()
    slow, fast = pair("gpt2-hf-prefix-bos")
    assert fast.adds_bos and fast.encode("").tolist() == [fast.bos_id] == slow.encode("").tolist()
    assert fast.encode("a").tolist()[1] == slow.backend.token_to_id("\u0120a")  # the prefix space


# ---------------------------------------------------- synthetic vocabularies


BYTE_CHARS = list(byte_stand_ins())  # the 256 stand-ins, in GPT-2's id order


def synthetic(merges: list[tuple[str, str]], *, drop: str = "", reverse_ids: bool = False,
              backend: str = "auto") -> TokenizerFiles:
    """A GPT2Tokenizer over the 256 bytes (less `drop`) plus `merges`' results, ids in merge order unless reversed."""
    merged = []
    for a, b in merges:
        if a + b not in merged:
            merged.append(a + b)
    tokens = [c for c in BYTE_CHARS if c not in drop] + (merged[::-1] if reverse_ids else merged)
    vocab = {t: i for i, t in enumerate(tokens)}
    text = "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges)
    return TokenizerFiles(GPT2, encoder_json=json.dumps(vocab), merges=text, eos_id=0, name="synthetic",
                          backend=backend)


def naive_tiktoken(files: TokenizerFiles):
    """tiktoken with every merge result ranked by its first merge: what exact.py guards against."""
    import tiktoken

    to_byte = byte_stand_ins()
    vocab = json.loads(files.encoder_json)
    ranks = {bytes([to_byte[c]]): 10_000 + to_byte[c] for c in vocab if len(c) == 1}
    for i, line in enumerate(files.merges.splitlines()[1:]):
        a, b = line.split(" ")
        ranks.setdefault(bytes(to_byte[c] for c in a + b), i)
    enc = tiktoken.Encoding("naive", pat_str=backends.GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={})
    by_bytes = {bytes(to_byte[c] for c in t): i for t, i in vocab.items()}
    return lambda text: [by_bytes[enc.decode_single_token_bytes(r)] for r in enc.encode_ordinary(text)]


BROKEN = [("b", "c"), ("a", "b"), ("ab", "c")]  # "abc" is listed as ab + c, but b + c merges first


def test_broken_merge_list_is_detected_and_falls_back(caplog):
    files = synthetic(BROKEN)
    slow = build_tokenizer(dataclasses.replace(files, backend="tokenizers"))
    # What tiktoken with naive ranks would do: it merges the split a + bc, which is no listed merge.
    assert [slow.backend.id_to_token(i) for i in slow.encode("abc").tolist()] == ["a", "bc"]
    assert naive_tiktoken(files)("abc") != slow.encode("abc").tolist()
    assert naive_tiktoken(files)(" xabcd") != slow.encode(" xabcd").tolist()
    backends._LOGGED.clear()
    with caplog.at_level(logging.WARNING, logger=backends.__name__):
        tok = build_tokenizer(files)
    assert tok.encoder_name == "tokenizers"
    assert "does not rebuild token 'abc'" in tok.encoder_note
    assert len(caplog.records) == 1 and "'abc'" in caplog.records[0].getMessage()
    with pytest.raises(ValueError, match="does not rebuild token 'abc'"):
        build_tokenizer(synthetic(BROKEN, backend="tiktoken"))
    # The same tokens, listed so that the run on "abc" does reach ab + c: exact.
    assert build_tokenizer(synthetic([("a", "b"), ("b", "c"), ("ab", "c")])).encoder_name == "tiktoken"


WORDS = st.lists(st.text(alphabet="abcd", min_size=1, max_size=12), min_size=1, max_size=8).map(" ".join)


@pytest.mark.parametrize("merges, reverse_ids", [
    ([("a", "b"), ("b", "c"), ("ab", "c"), ("c", "d"), ("abc", "d"), ("d", "d"), ("dd", "a")], False),
    ([("a", "b"), ("b", "c"), ("ab", "c"), ("c", "d"), ("abc", "d"), ("d", "d"), ("dd", "a")], True),
    # "abc" is produced by two merges; the run on "abc" ends with ab + c (priority 4, not a + bc's 2),
    # and c + d (priority 3) sits between: "abcd" must become ab, cd.
    ([("a", "b"), ("b", "c"), ("a", "bc"), ("c", "d"), ("ab", "c")], False),
])
def test_exact_vocabularies_match_tokenizers(merges, reverse_ids):
    files = synthetic(merges, reverse_ids=reverse_ids)
    slow = build_tokenizer(dataclasses.replace(files, backend="tokenizers"))
    fast = build_tokenizer(dataclasses.replace(files, backend="tiktoken"))

    @settings(max_examples=150, deadline=None)
    @given(WORDS)
    def check(text):
        assert fast.encode(text).tolist() == slow.encode(text).tolist()

    check()
    if merges[2] == ("a", "bc"):
        assert [slow.backend.id_to_token(i) for i in fast.encode("abcd").tolist()] == ["ab", "cd"]


@pytest.mark.parametrize("reverse_ids", [False, True])
def test_ids_serve_as_ranks_when_they_follow_the_merges(reverse_ids):
    """No rank -> id mapping when the ids of merged tokens follow merge priority (GPT-2's do)."""
    files = synthetic([("a", "b"), ("b", "c"), ("ab", "c"), ("c", "d"), ("abc", "d")], reverse_ids=reverse_ids)
    fast = build_tokenizer(dataclasses.replace(files, backend="tiktoken"))
    slow = build_tokenizer(dataclasses.replace(files, backend="tokenizers"))
    assert (fast.encoder._ids is None) == (not reverse_ids)
    for text in ("abcd", "dcba abc", "bcd ab", "d"):
        assert fast.encode(text).tolist() == slow.encode(text).tolist()
    assert build_tokenizer(CASES["gpt2-bundled"][1]()).encoder._ids is None


@settings(max_examples=120 if not EXHAUSTIVE else 2000, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(picks=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)), min_size=1, max_size=24),
       words=st.lists(WORDS, min_size=1, max_size=6))
def test_random_merge_lists(picks, words):
    """Random merge lists over "abcd": where the check passes tiktoken gives tokenizers' ids; where it fails,
    the token it names is one on which tiktoken with naive ranks would differ."""
    tokens, merges = list("abcd"), []
    for i, j in picks:
        a, b = tokens[i % len(tokens)], tokens[j % len(tokens)]
        if len(a + b) <= 10:
            merges.append((a, b))
            if a + b not in tokens:
                tokens.append(a + b)
    if not merges:
        return
    files = synthetic(merges)
    slow = build_tokenizer(dataclasses.replace(files, backend="tokenizers"))
    tok = build_tokenizer(files)
    if tok.encoder_name == "tiktoken":
        for text in words + tokens:
            assert tok.encode(text).tolist() == slow.encode(text).tolist(), (merges, text)
    else:
        bad = tok.encoder_note.split("does not rebuild token ")[1].split(" (")[0].strip("'")
        assert naive_tiktoken(files)(bad) != slow.encode(bad).tolist(), (merges, bad)


def test_missing_bytes():
    # NeoX-20B lacks the bytes UTF-8 never holds (C0, C1, F5-FF): fine.
    never = "".join(c for c, b in byte_stand_ins().items() if b in (0xC0, 0xC1) or b >= 0xF5)
    assert build_tokenizer(synthetic([("a", "b")], drop=never)).encoder_name == "tiktoken"
    lacking = build_tokenizer(synthetic([("a", "b")], drop="z"))  # tokenizers would drop a "z"; tiktoken cannot
    assert lacking.encoder_name == "tokenizers" and "lacks 1 byte" in lacking.encoder_note


def _ref_json(edit) -> TokenizerFiles:
    state = json.loads((require_shared(REF) / "tokenizer.json").read_text(encoding="utf-8"))
    edit(state)
    return TokenizerFiles(NEOX, tokenizer_json=json.dumps(state), name="edited")


def _set(path: str, value):
    def edit(state):
        *keys, last = path.split(".")
        node = state
        for k in keys:
            node = node[k]
        node[last] = value
    return edit


@pytest.mark.parametrize("edit, reason", [
    (_set("model.dropout", 0.1), "dropout"),
    (_set("model.byte_fallback", True), "byte_fallback"),
    (_set("model.unk_token", "<|padding|>"), "unk token"),
    (_set("model.end_of_word_suffix", "</w>"), "end_of_word_suffix"),
    (_set("normalizer", {"type": "Lowercase"}), "normalizer (Lowercase)"),
    (_set("pre_tokenizer", {"type": "Whitespace"}), "not a byte-level one"),
    (_set("pre_tokenizer", {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"\w+|\W+"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}),
     "not one whose regex was verified"),
    (_set("truncation", {"direction": "Right", "max_length": 8, "strategy": "LongestFirst", "stride": 0}),
     "truncates"),
    (lambda s: s["added_tokens"][2].update(lstrip=True), "strips spaces"),
    (lambda s: (s["model"].update(ignore_merges=True), s["model"]["vocab"].update({"zzq": 9000})),
     "ignore_merges"),
])
def test_options_tiktoken_cannot_reproduce_fall_back(edit, reason):
    tok = build_tokenizer(_ref_json(edit))
    assert tok.encoder_name == "tokenizers"
    assert reason in tok.encoder_note


@pytest.mark.parametrize("edit", [
    _set("normalizer", {"type": "NFKC"}),
    _set("normalizer", {"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "NFC"}]}),
    _set("pre_tokenizer", {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": backends.CL100K_PATTERN}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}),
    _set("pre_tokenizer", {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}),
    _set("post_processor", {"type": "TemplateProcessing",
                            "single": [{"SpecialToken": {"id": "<|padding|>", "type_id": 0}},
                                       {"Sequence": {"id": "A", "type_id": 0}},
                                       {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}],
                            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                            "special_tokens": {"<|padding|>": {"id": "<|padding|>", "ids": [8188],
                                                               "tokens": ["<|padding|>"]},
                                               "<|endoftext|>": {"id": "<|endoftext|>", "ids": [8187],
                                                                 "tokens": ["<|endoftext|>"]}}}),
    lambda s: s["added_tokens"].append({"id": 8192, "content": "  ", "single_word": False, "lstrip": False,
                                        "rstrip": False, "normalized": True, "special": False}),
    lambda s: (s["model"].update(ignore_merges=True),
               s["model"]["vocab"].pop("<|endoftext|>"), s["model"]["vocab"].pop("<|padding|>"),
               [s["model"]["vocab"].pop(t["content"]) for t in s["added_tokens"] if t["content"] in s["model"]["vocab"]]),
])
def test_layers_tiktoken_reproduces(edit, corpora):
    files = _ref_json(edit)
    slow = build_tokenizer(dataclasses.replace(files, backend="tokenizers"))
    fast = build_tokenizer(dataclasses.replace(files, backend="tiktoken"))
    texts = corpora["multilingual_dev.jsonl"][:60] + corpora["code_small.jsonl"][:3] + FRAGMENTS + [
        "".join(FRAGMENTS), " ".join(FRAGMENTS)]
    assert_same_ids(slow, fast, texts)


def test_a_wrong_rank_table_is_caught_by_the_probes(monkeypatch, fresh_load_checks):
    """The probe comparison at load time catches a layer that does not behave as argued."""
    real = backends.rank_table

    def reversed_priorities(model, oracle):
        # Each token keeps its id, but merges are applied in reverse order.
        table = real(model, oracle)
        id_of = table.ranks if table.ids is None else {b: int(table.ids[r]) for b, r in table.ranks.items()}
        merged = [b for _, b in sorted((r, b) for b, r in table.ranks.items() if len(b) > 1)]
        n = len(merged)
        ranks, ids = {}, np.zeros(n + 256, dtype=np.int32)
        for rank, token in enumerate(reversed(merged)):
            ranks[token], ids[rank] = rank, id_of[token]
        for token in (b for b in table.ranks if len(b) == 1):
            ranks[token], ids[n + token[0]] = n + token[0], id_of[token]
        return RankTable(ranks, ids)

    monkeypatch.setattr(backends, "rank_table", reversed_priorities)
    tok = build_tokenizer(CASES["gpt2-bundled"][1]())
    assert tok.encoder_name == "tokenizers" and "disagree on the probe text" in tok.encoder_note


def test_a_check_that_breaks_falls_back(monkeypatch, fresh_load_checks):
    def broken(model, oracle):
        raise KeyError("merges")

    monkeypatch.setattr(backends, "rank_table", broken)
    files = CASES["gpt2-bundled"][1]()
    tok = build_tokenizer(files)
    assert tok.encoder_name == "tokenizers" and "its check failed (KeyError" in tok.encoder_note
    with pytest.raises(ValueError, match="--tokenizer_backend tiktoken: .*KeyError"):
        build_tokenizer(dataclasses.replace(files, backend="tiktoken"))


# ----------------------------------------------------------- end to end


def _digests(out) -> dict:
    return {Path(p).name: hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in h5_files(out)}


STATISTICS = ("post-process", "h5_dataset_stats", "input", "files")


@pytest.mark.parametrize("mode", ["LMData", "Summarization"])
def test_pipeline_output_is_identical_with_either_backend(tmp_path, mode):
    src = tmp_path / "in"
    src.mkdir()
    if mode == "LMData":
        shutil.copy(ROOT / "data" / "sample" / "jargon_devil_sample.jsonl", src / "sample.jsonl")
        if CORPORA.is_dir():
            lines = (CORPORA / "multilingual_dev.jsonl").read_text(encoding="utf-8").splitlines()[:150]
            (src / "multilingual.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        extra = ["--max_seq_length", "256", "--files_per_record", "200"]
    else:
        texts = [json.loads(line)["text"] for line in (ROOT / "data" / "sample" / "jargon_devil_sample.jsonl")
                 .read_text(encoding="utf-8").splitlines()]
        # A literal "<sep>" in a prompt is the added sep token: the added-token path.
        rows = [{"prompt": t[:300] + " <sep> x", "completion": t[300:700]} for t in texts[:120]]
        (src / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        extra = ["--max_seq_length", "256", "--prompt_key", "prompt", "--completion_key", "completion",
                 "--sep_token", "<sep>"]
    params = {}
    for backend in ("tokenizers", "tiktoken"):
        out = tmp_path / backend
        params[backend] = run_job([mode, "--input_dir", str(src), "--output_dir", str(out),
                                   "--tokenizer_type", "GPT2Tokenizer", "--vocab_file", str(BUNDLED / "vocab.bpe"),
                                   "--encoder_file", str(BUNDLED / "encoder.json"), "--tokenizer_backend", backend,
                                   "--display_pbar", "False", *extra])
    slow, fast = params["tokenizers"], params["tiktoken"]
    assert _digests(tmp_path / "tokenizers") == _digests(tmp_path / "tiktoken") != {}
    for key in STATISTICS:
        assert slow[key] == fast[key], key
    assert slow["post-process"]["n_examples"] > 0
    assert (slow["processing"]["tokenizer_backend"], fast["processing"]["tokenizer_backend"]) == ("tokenizers",
                                                                                                  "tiktoken")
    assert (slow["tokenizer"]["encoder"], fast["tokenizer"]["encoder"]) == ("tokenizers", "tiktoken")
    assert slow["tokenizer"]["fingerprint"] == fast["tokenizer"]["fingerprint"]
    assert slow["config_fingerprint"] == fast["config_fingerprint"]


# ------------------------------------------------- opt-in: every code point


@pytest.mark.skipif(not EXHAUSTIVE, reason="every code point through both regex engines: TIKTOKEN_EXHAUSTIVE=1")
@pytest.mark.parametrize("name, pattern", [("gpt2", backends.GPT2_PATTERN), ("olmo-dolma2", backends.CL100K_PATTERN)],
                         ids=["gpt2-pattern", "cl100k-pattern"])
def test_every_code_point_is_classified_alike(name, pattern):
    """Oniguruma (tokenizers) and fancy-regex (tiktoken) agree on \\p{L}, \\p{N}, \\s and case folding
    for every code point, in the contexts the patterns distinguish."""
    slow, fast = pair(name)
    assert fast.encoder._encoding._pat_str == pattern
    points = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    template = "{c}a{c} {c}1{c}'s{c}'S {c}\n{c}  {c}.{c}{c}\r\n"
    for start in range(0, len(points), 20_000):
        texts = [template.format(c=c) for c in points[start:start + 20_000]]
        a = slow.encoder.encode_batch(texts)
        b = fast.encoder.encode_batch(texts)
        for text, x, y in zip(texts, a, b):
            assert x.tolist() == y.tolist(), f"U+{ord(text[0]):04X}"
