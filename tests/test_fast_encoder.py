"""The fastokens encoder: chosen only where exact, checked at load, in tests and inside every job.

Differential tests against `tokenizers` (the reference) on every shared
corpus and tokenizer, on generated text, and on the same texts in other
orders, interleavings and threads (a cache that leaked state from one text to
the next would show there). The in-job cross-check is shown to draw the same
texts however they are batched, and to keep a wrong id out of the files: a
fastokens made to lie is caught, the batch re-encoded, the worker switched to
the reference and the job's data_params.json says so.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import random
import shutil
import threading
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import ROOT, SHARED, h5_files, require_shared, run_job
from tests.test_tiktoken_backend import CASES, TEXT, _corpus_slices
from transforms.core.tokenizer import HF, build_tokenizer, encode_bounded, tokenize_documents
from transforms.core.tokenizer import backends, fast
from transforms.io.tokenizer_files import read_tokenizer_files

TOKS = SHARED / "tokenizers"
BUNDLED = ROOT / "data" / "tokenizers" / "gpt2"
# Every tokenizer of ../shared/tokenizers, and the layers the tiktoken tests vary: an added sep token, a
# prefix space with a BOS, the reference's HF directory; Mistral is SentencePiece-style BPE with byte
# fallback, which tiktoken cannot encode but fastokens can. (The other tiktoken cases have the same
# tokenizer JSON as one of these.)
MORE = {name: (True, (lambda name=name: read_tokenizer_files(HF, huggingface_tokenizer=str(TOKS / name))))
        for name in ("mistral-7b", "qwen2.5-instruct", "llama3-instruct", "mistral-nemo-instruct")}
ALL = {name: CASES[name] for name in ("gpt2-bundled", "gpt2-sep", "gpt2-hf-prefix-bos", "neox-20b", "olmo-dolma2",
                                      "ref-hf")} | MORE


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory, monkeypatch):
    """The load check's machine cache in a directory of this test session, not the user's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "xdg_cache"))


@lru_cache(maxsize=None)
def pair(name: str):
    """(the tokenizer on tokenizers, the same tokenizer on fastokens)."""
    shared, files = ALL[name]
    if shared:
        require_shared(TOKS)
    files = files()
    slow = build_tokenizer(dataclasses.replace(files, backend="tokenizers"))
    quick = build_tokenizer(dataclasses.replace(files, backend="fastokens"))
    assert (slow.encoder_name, quick.encoder_name) == ("tokenizers", "fastokens")
    return slow, quick


def assert_same_ids(slow, quick, texts, **kw):
    a = tokenize_documents(slow, texts, **kw)
    b = tokenize_documents(quick, texts, **kw)
    assert len(a) == len(b) == len(texts)
    for text, x, y in zip(texts, a, b):
        assert x.dtype == y.dtype == np.int32
        assert x.tolist() == y.tolist(), f"{slow.name}: ids differ on {text[:80]!r}"


@pytest.fixture(scope="module")
def corpora():
    return _corpus_slices()


# ------------------------------------------------------------- choice


@pytest.mark.parametrize("name, reference", [("gpt2-bundled", "tiktoken"), ("olmo-dolma2", "tiktoken"),
                                             ("mistral-7b", "tokenizers"), ("qwen2.5-instruct", "tokenizers")])
def test_auto_takes_fastokens_with_the_exact_reference(name, reference):
    """auto: fastokens; its reference is tiktoken where that is exact (Qwen's regex is not one tiktoken's
    was verified for, Mistral is not byte-level), else tokenizers."""
    if ALL[name][0]:
        require_shared(TOKS)
    tok = build_tokenizer(ALL[name][1]())
    assert tok.encoder_name == "fastokens" and tok.encoder_note is None
    assert tok.encoder.reference.name == reference


def test_without_fastokens_auto_is_what_it_was(monkeypatch, caplog):
    def missing():
        raise fast.Unavailable("fastokens is not installed")

    monkeypatch.setattr(fast, "_fastokens", missing)
    files = CASES["gpt2-bundled"][1]()
    backends._LOGGED.clear()
    with caplog.at_level(logging.WARNING, logger=backends.__name__):
        tok = build_tokenizer(files)
    assert tok.encoder_name == "tiktoken" and tok.encoder_note == "not fastokens: fastokens is not installed"
    assert not caplog.records  # the installation's doing, said in the note, not on every start
    with pytest.raises(ValueError, match="--tokenizer_backend fastokens: .*not installed"):
        build_tokenizer(dataclasses.replace(files, backend="fastokens"))


class _Lying:
    """A fastokens that adds 1 to the last id of every text containing `marker`."""

    def __init__(self, native, marker: str):
        self._native, self._marker = native, marker

    def encode_batch_flat(self, texts, add_special_tokens=False):
        ids, offsets = self._native.encode_batch_flat(texts, add_special_tokens=add_special_tokens)
        ids = np.frombuffer(ids, dtype=np.uint32).copy()
        offsets = np.frombuffer(offsets, dtype=np.uint64)
        for i, text in enumerate(texts):
            if self._marker in text and offsets[i + 1] > offsets[i]:
                ids[offsets[i + 1] - 1] += 1
        return ids.tobytes(), offsets.tobytes()


def _lying_fastokens(monkeypatch, marker: str, cache: Path):
    """fastokens replaced by a liar; the load check's caches emptied (they trust a release to be itself)."""
    real = fast._fastokens

    class Module:
        class Tokenizer:
            @staticmethod
            def from_json_str(state):
                return _Lying(real()[0].Tokenizer.from_json_str(state), marker)

    monkeypatch.setattr(fast, "_fastokens", lambda: (Module, real()[1]))
    monkeypatch.setattr(fast, "_CHECKS", fast._CHECKS.fresh())
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))


@pytest.mark.parametrize("marker", ["Hello", "\u4e2d", "the"])
def test_the_load_check_finds_a_wrong_encoder(monkeypatch, marker, caplog, tmp_path):
    """A fastokens wrong on one probe, on a CJK token of the vocabulary, or on a frequent word is refused."""
    _lying_fastokens(monkeypatch, marker, tmp_path)
    files = CASES["gpt2-bundled"][1]()
    backends._LOGGED.clear()
    with caplog.at_level(logging.WARNING, logger=backends.__name__):
        tok = build_tokenizer(files)
    assert tok.encoder_name == "tiktoken"
    assert tok.encoder_note.startswith("not fastokens: fastokens and tiktoken disagree on the probe text")
    assert [r.getMessage() for r in caplog.records if "disagree" in r.getMessage()]  # said, once
    with pytest.raises(ValueError, match="--tokenizer_backend fastokens: .*disagree"):
        build_tokenizer(dataclasses.replace(files, backend="fastokens"))


def test_the_load_check_is_cached_per_machine(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(fast, "_CHECKS", fast._CHECKS.fresh())
    calls = []
    real = fast.vocabulary_check
    monkeypatch.setattr(fast, "vocabulary_check", lambda *a: calls.append(1) or real(*a))
    files = CASES["gpt2-bundled"][1]()
    assert build_tokenizer(files).encoder_name == "fastokens"
    assert len(calls) == 1
    cached = list((tmp_path / "create_hdf5_dataset" / "fastokens_checks").glob("*.json"))
    assert len(cached) == 1 and json.loads(cached[0].read_text()) == {"reason": None}
    fast._CHECKS.clear()  # a new process on the same machine
    assert build_tokenizer(files).encoder_name == "fastokens"
    assert len(calls) == 1
    cached[0].write_text("{not json")  # a torn or foreign file: checked again, and rewritten
    fast._CHECKS.clear()
    assert build_tokenizer(files).encoder_name == "fastokens"
    assert len(calls) == 2 and json.loads(cached[0].read_text()) == {"reason": None}
    # A failed check is kept as well, with its reason.
    cached[0].write_text(json.dumps({"reason": "disagrees on x"}))
    fast._CHECKS.clear()
    tok = build_tokenizer(files)
    assert tok.encoder_name == "tiktoken" and tok.encoder_note == "not fastokens: disagrees on x"


# ------------------------------------------------------ differential


@pytest.mark.parametrize("name", list(ALL))
def test_corpora_give_the_same_ids(name, corpora):
    slow, quick = pair(name)
    for texts in corpora.values():
        assert_same_ids(slow, quick, texts)
    texts = corpora["multilingual_dev.jsonl"][:40] + corpora["code_small.jsonl"][:5]
    assert_same_ids(slow, quick, texts, split_len=300, remove_bos_in_chunks=True)
    a = encode_bounded(slow, texts, uncut=3000, piece=700)
    b = encode_bounded(quick, texts, uncut=3000, piece=700)
    assert [x.tolist() for x in a] == [y.tolist() for y in b]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(texts=st.lists(TEXT, min_size=1, max_size=4))
def test_generated_text_gives_the_same_ids(texts):
    for name in ALL:
        if ALL[name][0] and not TOKS.is_dir():
            continue
        slow, quick = pair(name)
        for add in (True, False):
            a = slow.encoder.encode_batch(texts, add_special_tokens=add)
            b = quick.encoder.encode_batch(texts, add_special_tokens=add)
            assert [x.tolist() for x in a] == [y.tolist() for y in b], name


def test_long_runs():
    """Whitespace runs of a million, a word of 200k letters, a run of ideographic spaces."""
    slow, quick = pair("neox-20b")
    texts = [" " * 1_000_000, "a" * 200_000, "x\u3000" * 100_000, "ab " * 10_000 + " " * 50_000 + "z", ""]
    assert_same_ids(slow, quick, texts)


@pytest.mark.parametrize("name", ["qwen2.5-instruct", "gpt2-bundled", "neox-20b"])
def test_order_interleaving_and_threads_do_not_change_ids(name, corpora):
    """The same texts alone, in batches in other orders, and from four threads at once: the same ids.

    An earlier fastokens release was reported to give Qwen ids that depended on
    what the thread had encoded before (its word cache).
    """
    slow, quick = pair(name)
    texts = [t[:3000] for t in corpora["multilingual_dev.jsonl"][:120] + corpora["code_small.jsonl"][:60]]
    want = [ids.tolist() for ids in slow.encoder.encode_batch(texts)]
    rng = random.Random(7)
    for _ in range(3):
        order = list(range(len(texts)))
        rng.shuffle(order)
        got = quick.encoder.encode_batch([texts[i] for i in order])
        assert all(got[k].tolist() == want[i] for k, i in enumerate(order))
    assert all(quick.encoder.encode_batch([t])[0].tolist() == w for t, w in zip(texts[::7], want[::7]))
    results, errors = {}, []

    def work(seed: int):
        try:
            local = random.Random(seed)
            for _ in range(4):
                picked = local.sample(range(len(texts)), 40)
                for i, ids in zip(picked, quick.encoder.encode_batch([texts[i] for i in picked])):
                    results.setdefault(i, set()).add(tuple(ids.tolist()))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors
    assert results and all(ids == {tuple(want[i])} for i, ids in results.items())


def test_lone_surrogates_are_refused_as_tokenizers_does():
    _, quick = pair("gpt2-bundled")
    with pytest.raises(TypeError, match="not valid Unicode"):
        quick.encoder.encode_batch(["ab\ud800c"])


def test_eos_and_empty_batches():
    slow, quick = pair("gpt2-bundled")
    texts = ["a b", "", "\u4e2d\u6587 x", ""]
    for eos in (None, 50256, 7):
        a = slow.encoder.encode_batch(texts, eos=eos)
        b = quick.encoder.encode_batch(texts, eos=eos)
        assert [x.tolist() for x in a] == [y.tolist() for y in b]
        assert all(y.dtype == np.int32 for y in b)
    assert quick.encoder.encode_batch([]) == []


# ------------------------------------------------------ in-job check


def test_the_draw_is_the_texts_own():
    """Which texts are checked depends on the text, the share and the seed: never on the batch."""
    texts = [f"text {i} " + "x" * (i % 50) for i in range(5000)]
    whole = {texts[i] for i in fast.sampled(texts, 1 / 16, 3)}
    pieces = set()
    for lo in range(0, len(texts), 333):
        batch = texts[lo:lo + 333][::-1]
        pieces |= {batch[i] for i in fast.sampled(batch, 1 / 16, 3)}
    assert whole == pieces
    assert 5000 / 16 * 0.75 < len(whole) < 5000 / 16 * 1.25
    assert {texts[i] for i in fast.sampled(texts, 1 / 16, 4)} != whole  # the seed draws others
    assert fast.sampled(texts, 0, 3) == [] and fast.sampled(texts, 1, 3) == list(range(5000))
    # Texts that differ only after the first 4 KiB are told apart by their length, or drawn alike.
    long = "y" * 5000
    assert fast.sampled([long + "a"], 1 / 2, 1) == fast.sampled([long + "b"], 1 / 2, 1)


def test_a_wrong_id_is_never_returned(monkeypatch, caplog):
    """With every text checked, a fastokens that lies on some texts: the reference's ids, and the worker switched."""
    slow, _ = pair("gpt2-bundled")
    files = CASES["gpt2-bundled"][1]()
    real = fast.FastokensEncoder(slow.backend, backends.TiktokenEncoder(slow.backend), share=1.0)
    lying = fast.FastokensEncoder.__new__(fast.FastokensEncoder)
    lying.__dict__.update(real.__dict__)
    lying._native = _Lying(real._native, "zebra")
    lying._off = None
    texts = ["a horse", "a zebra and a horse", "plain", "zebra"]
    with caplog.at_level(logging.WARNING, logger=fast.__name__), fast.tally() as counts:
        got = lying.encode_batch(texts, eos=50256)
        again = lying.encode_batch(texts)
    want = slow.encoder.encode_batch(texts, eos=50256)
    assert [x.tolist() for x in got] == [y.tolist() for y in want]
    assert [x.tolist() for x in again] == [y.tolist() for y in slow.encoder.encode_batch(texts)]
    assert "2 of 4 checked texts" in lying.switched_off
    assert counts == fast.Tally(texts=4, checked=4, checked_chars=sum(map(len, texts)), mismatches=2,
                                fallback_texts=8)
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "encodes with tiktoken from now on" in warnings[0]
    del files


def test_a_fastokens_failure_falls_back_for_that_batch(monkeypatch):
    slow, quick = pair("gpt2-bundled")
    enc = fast.FastokensEncoder(slow.backend, slow.encoder, share=0.0)

    class Broken:
        def encode_batch_flat(self, texts, add_special_tokens=False):
            raise RuntimeError("PCRE2 match limit")

    enc._native = Broken()
    with fast.tally() as counts:
        got = enc.encode_batch(["a b c"])
    assert got[0].tolist() == slow.encoder.encode_batch(["a b c"])[0].tolist()
    assert counts.fallback_texts == 1 and enc.switched_off is None


def _digests(out) -> dict:
    return {Path(p).name: hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in h5_files(out)}


def _job(src: Path, out: Path, *extra: str) -> dict:
    return run_job(["LMData", "--input_dir", str(src), "--output_dir", str(out), "--tokenizer_type", "GPT2Tokenizer",
                    "--vocab_file", str(BUNDLED / "vocab.bpe"), "--encoder_file", str(BUNDLED / "encoder.json"),
                    "--max_seq_length", "256", "--files_per_record", "200", "--display_pbar", "False", *extra])


@pytest.fixture(scope="module")
def reference_job(tmp_path_factory) -> tuple[Path, Path, dict]:
    """The sample through _job on the reference (`tokenizers`): (its input, its output, its data_params.json). Both
    tests below compare their files with the very same job's, so it runs once; they read its input (the job's
    fingerprint covers the input's path) and change neither."""
    tmp = tmp_path_factory.mktemp("reference_job")
    src = tmp / "in"
    src.mkdir()
    shutil.copy(ROOT / "data" / "sample" / "jargon_devil_sample.jsonl", src / "sample.jsonl")
    with pytest.MonkeyPatch.context() as mp:  # as _own_cache, which a module's fixture cannot use
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "xdg_cache"))
        return src, tmp / "slow", _job(src, tmp / "slow", "--tokenizer_backend", "tokenizers")


def test_pipeline_bytes_and_the_cross_check_record(tmp_path, reference_job):
    src, slow_out, slow = reference_job
    quick = _job(src, tmp_path / "quick")
    assert _digests(slow_out) == _digests(tmp_path / "quick") != {}
    assert quick["tokenizer"]["encoder"] == "fastokens" and "cross_check" not in slow["tokenizer"]
    check = quick["tokenizer"]["cross_check"]
    documents = quick["input"]["documents_read"]
    assert check["texts"] == documents and check["mismatches"] == check["fallback_texts"] == 0
    assert 0 < check["checked"] < documents / 16  # the default share, 1/64 of the texts
    assert quick["processing"]["tokenizer_cross_check"] == pytest.approx(1 / 64)
    assert slow["config_fingerprint"] == quick["config_fingerprint"]
    # Another seed draws other texts; the files stay the same (LMData draws nothing else from it here).
    other = _job(src, tmp_path / "other", "--seed", "5")
    assert other["tokenizer"]["cross_check"]["checked_chars"] != check["checked_chars"]
    assert _digests(tmp_path / "other") == _digests(tmp_path / "quick")


def test_a_lying_fastokens_never_reaches_the_files(tmp_path, monkeypatch, reference_job):
    """Every text checked: the job's files are the reference's, and data_params says what happened."""
    src, slow_out, _ = reference_job
    monkeypatch.setattr(fast, "vocabulary_check", lambda *a: None)  # let the liar past the load check
    _lying_fastokens(monkeypatch, " the ", tmp_path / "cache")
    from transforms.core.tokenizer import load

    monkeypatch.setattr(load, "_SHARED", load.OrderedDict())
    params = _job(src, tmp_path / "lying", "--tokenizer_cross_check", "1")
    assert _digests(slow_out) == _digests(tmp_path / "lying")
    check = params["tokenizer"]["cross_check"]
    assert check["mismatches"] >= 1 and check["fallback_texts"] >= 1
    assert check["texts"] + check["fallback_texts"] - check["mismatches"] >= params["input"]["documents_read"]
