"""Tokenizers against llama.cpp test vectors, the reference's small tokenizer and SPEC rules."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.core.tokenizer import (
    GPT2,
    HF,
    NEOX,
    Tokenizer,
    TokenizerFiles,
    build_tokenizer,
    split_text,
    tokenize_documents,
)
from transforms.io.tokenizer_files import read_tokenizer_files

SHARED = Path(__file__).resolve().parents[2] / "shared"
TOKS = SHARED / "tokenizers"
REF = SHARED / "reference" / "tokenizer"
VECTORS = TOKS / "test-vectors"

pytestmark = pytest.mark.skipif(
    not (TOKS.is_dir() and REF.is_dir()), reason=f"shared tokenizer files not found at {SHARED}"
)

EOT = "<|endoftext|>"


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def gpt2() -> Tokenizer:
    return build_tokenizer(read_tokenizer_files(GPT2, encoder_file=str(TOKS / "gpt2/encoder.json"),
                                                vocab_file=str(TOKS / "gpt2/vocab.bpe")))


@pytest.fixture(scope="module")
def neox20b() -> Tokenizer:
    return build_tokenizer(read_tokenizer_files(NEOX, encoder_file=str(TOKS / "gpt-neox-20b/20B_tokenizer.json")))


@pytest.fixture(scope="module")
def mistral_files() -> TokenizerFiles:
    return read_tokenizer_files(HF, huggingface_tokenizer=str(TOKS / "mistral-7b"))


@pytest.fixture(scope="module")
def mistral(mistral_files) -> Tokenizer:
    return build_tokenizer(mistral_files)


def ref_files(kind: str, **overrides) -> TokenizerFiles:
    if kind == GPT2:
        return read_tokenizer_files(kind, encoder_file=str(REF / "gpt2/vocab.json"),
                                    vocab_file=str(REF / "gpt2/merges.txt"), **overrides)
    if kind == NEOX:
        return read_tokenizer_files(kind, encoder_file=str(REF / "tokenizer.json"), **overrides)
    return read_tokenizer_files(kind, huggingface_tokenizer=str(REF / "hf"), **overrides)


@pytest.fixture(scope="module")
def ref() -> dict[str, Tokenizer]:
    return {kind: build_tokenizer(ref_files(kind)) for kind in (GPT2, NEOX, HF)}


def vector_cases(name: str) -> list[tuple[str, list[int]]]:
    inp = (VECTORS / f"ggml-vocab-{name}.gguf.inp").read_bytes().decode("utf-8")
    out = (VECTORS / f"ggml-vocab-{name}.gguf.out").read_bytes().decode("utf-8")
    sep = "\n__ggml_vocab_test__\n"
    # Every case, the last included, is followed by the separator; .out has one
    # line per case and a final newline.
    assert inp.endswith(sep) and out.endswith("\n")
    texts = inp[: -len(sep)].split(sep)
    ids = [[int(x) for x in line.split()] for line in out[:-1].split("\n")]
    assert len(texts) == len(ids), (len(texts), len(ids))
    return list(zip(texts, ids))


# ------------------------------------------------------------ test vectors


def test_gpt2_test_vectors(gpt2):
    cases = vector_cases("gpt-2")
    assert len(cases) == 46
    got = [row.tolist() for row in gpt2.encode_batch([t for t, _ in cases])]
    for (text, want), have in zip(cases, got):
        assert have == want, text
    assert gpt2.encode("Hello world").tolist() == [15496, 995]


def test_neox20b_test_vectors(neox20b):
    cases = vector_cases("mpt")
    assert len(cases) == 46
    for text, want in cases:
        assert neox20b.encode(text).tolist() == want, text


def test_gpt2_ids_and_literal_special_text(gpt2):
    assert (gpt2.eos_id, gpt2.pad_id, gpt2.bos_id, gpt2.adds_bos) == (50256, 50256, None, False)
    assert gpt2.vocab_size == 50257
    assert gpt2.encode(EOT).tolist() == [27, 91, 437, 1659, 5239, 91, 29]
    assert gpt2.token_to_id(EOT) == 50256
    assert gpt2.decode([50256, 15496]) == EOT + "Hello"


def test_neox20b_ids(neox20b):
    assert (neox20b.eos_id, neox20b.pad_id, neox20b.bos_id, neox20b.adds_bos) == (0, 1, None, False)
    assert neox20b.vocab_size == 50277
    assert neox20b.encode(f"a{EOT}b").tolist()[1] == 0


# ---------------------------------------------------- reference tokenizer


def test_reference_layouts(ref):
    g, n, h = ref[GPT2], ref[NEOX], ref[HF]
    assert (g.eos_id, g.pad_id) == (8187, 8187)
    assert (n.eos_id, n.pad_id) == (8187, 8188)  # <|padding|>
    assert (h.eos_id, h.pad_id) == (8187, 8187)  # its config has no pad token
    assert g.vocab_size == n.vocab_size == h.vocab_size == 8192
    # HF's config names <|endoftext|> as BOS without adding it per encode.
    assert (h.bos_id, h.adds_bos) == (8187, False)
    assert not n.adds_bos and not g.adds_bos
    assert 8187 not in g.encode(f"x {EOT} y").tolist()
    assert 8187 in n.encode(f"x {EOT} y").tolist()
    assert 8187 in h.encode(f"x {EOT} y").tolist()
    assert h.token_to_id("<fim_middle>") == 8190 == g.token_to_id("<fim_middle>")


def test_reference_layouts_agree_on_ordinary_text(ref):
    corpus = SHARED / "corpora" / "en_small_pd.jsonl"
    if not corpus.is_file():
        pytest.skip(f"{corpus} not found")
    texts = [json.loads(line)["text"] for line in corpus.read_text(encoding="utf-8").splitlines()[:60]]
    rows = {k: [r.tolist() for r in t.encode_batch(texts)] for k, t in ref.items()}
    assert rows[GPT2] == rows[NEOX] == rows[HF]


# --------------------------------------------------------- HF behaviours


def test_mistral_adds_bos(mistral):
    assert (mistral.bos_id, mistral.adds_bos, mistral.eos_id, mistral.pad_id) == (1, True, 2, 2)
    ids = mistral.encode("Hello world").tolist()
    assert ids[0] == 1 and ids.count(1) == 1
    plain = mistral.without_bos()
    assert plain.adds_bos is False and plain.bos_id == 1 and mistral.adds_bos is True
    assert plain.encode("Hello world").tolist() == ids[1:]
    assert [r.tolist() for r in plain.encode_batch(["Hello world", ""])] == [ids[1:], []]
    assert mistral.encode("").tolist() == [1]
    assert mistral.decode(ids) == "<s> Hello world"
    assert mistral.decode(ids, skip_special_tokens=True) == "Hello world"


def test_llama_post_processor_follows_config_flags(mistral_files):
    cfg = dict(mistral_files.tokenizer_config, add_bos_token=False, add_eos_token=True)
    tok = build_tokenizer(_replace(mistral_files, tokenizer_config=cfg))
    assert tok.adds_bos is False and tok.bos_id == 1
    ids = tok.encode("Hello").tolist()
    assert ids[0] != 1 and ids[-1] == 2
    assert tok.without_bos() is tok


def test_olmo_fim_tokens():
    tok = build_tokenizer(read_tokenizer_files(NEOX, encoder_file=str(TOKS / "olmo-dolma2/tokenizer.json")))
    assert tok.token_to_id("<|fim_prefix|>") == 100258
    assert tok.token_to_id("<|fim_middle|>") == 100259
    assert tok.token_to_id("<|fim_suffix|>") == 100260
    assert tok.token_to_id("<fim_prefix>") is None
    assert tok.eos_id == 100257 and tok.pad_id == 100257  # no <|padding|>: pad = eos
    assert tok.encode("a<|fim_prefix|>b").tolist()[1] == 100258


@pytest.fixture(scope="module")
def hf_legacy_dir(tmp_path_factory) -> Path:
    """The older Hugging Face layout: vocab.json + merges.txt, no tokenizer.json."""
    d = tmp_path_factory.mktemp("gpt2_legacy")
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(TOKS / "gpt2" / name, d / name)
    return d


def test_hf_vocab_merges_layout(hf_legacy_dir, gpt2):
    files = read_tokenizer_files(HF, huggingface_tokenizer=str(hf_legacy_dir))
    assert files.tokenizer_json is None and files.encoder_json and files.merges
    tok = build_tokenizer(files)
    assert (tok.eos_id, tok.pad_id, tok.bos_id, tok.adds_bos, tok.vocab_size) == (50256, 50256, 50256, False, 50257)
    texts = [text for text, _ in vector_cases("gpt-2")]
    assert [r.tolist() for r in tok.encode_batch(texts)] == [r.tolist() for r in gpt2.encode_batch(texts)]
    # Named special tokens become recognised text, as transformers makes them.
    assert tok.encode(f"a{EOT}").tolist() == [64, 50256]
    # No clean_up_tokenization_spaces in this config: the transformers 4.x default (True).
    ids = tok.encode("Hello , world .")
    assert tok.decode(ids) == "Hello, world."
    assert gpt2.decode(ids) == "Hello , world ."


def test_hf_tokenizer_json_layout_matches_gpt2(gpt2):
    tok = build_tokenizer(read_tokenizer_files(HF, huggingface_tokenizer=str(TOKS / "gpt2")))
    texts = [text for text, _ in vector_cases("gpt-2")]
    assert [r.tolist() for r in tok.encode_batch(texts)] == [r.tolist() for r in gpt2.encode_batch(texts)]
    assert tok.decode_batch([tok.encode("a , b"), tok.encode("c .")]) == ["a, b", "c."]


def test_special_tokens_map_overrides_config(hf_legacy_dir):
    files = read_tokenizer_files(HF, huggingface_tokenizer=str(hf_legacy_dir))
    files = _replace(
        files,
        tokenizer_config={"eos_token": "!", "bos_token": None},
        special_tokens_map={"eos_token": {"content": EOT, "lstrip": False}, "pad_token": "<pad>"},
    )
    tok = build_tokenizer(files)
    assert tok.eos_id == 50256
    assert tok.pad_id == 50257 and tok.vocab_size == 50258  # a missing named token is added
    assert tok.bos_id is None


def test_reference_hf_no_cleanup(ref):
    h = ref[HF]
    assert h.decode(h.encode("Hello , world .")) == "Hello , world ."


# ------------------------------------------------------------ documents


def reference_split(text: str, n: int) -> list[str]:
    """SPEC 1a / the reference's split_text_and_tokenize loop, transcribed."""
    pieces, start = [], 0
    while start < len(text):
        end = min(text.find(" ", start + n), len(text))
        if end < 0:
            pieces.append(text[start:])
            end = len(text)
        else:
            pieces.append(text[start:end])
        start = end
    return pieces


def test_split_text_examples():
    assert split_text("Hello world this is a test", 5) == ["Hello", " world", " this", " is a", " test"]
    assert split_text("abcdefgh ij", 3) == ["abcdefgh", " ij"]
    assert split_text("ab cd", 1) == ["ab", " cd"]
    assert split_text("", 4) == []
    assert split_text("   ", 1) == [" ", " ", " "]
    with pytest.raises(ValueError, match="chunk_len_to_split"):
        split_text("abc", 0)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab \n", max_size=60), st.integers(1, 12))
def test_split_text_matches_reference(text, n):
    pieces = split_text(text, n)
    assert pieces == reference_split(text, n)
    assert "".join(pieces) == text
    for k, piece in enumerate(pieces):
        if k:
            assert piece.startswith(" ")
        if k < len(pieces) - 1:
            assert len(piece) >= n and " " not in piece[n:]


def test_tokenize_documents_eos_and_empty(gpt2, mistral):
    rows = tokenize_documents(gpt2, ["Hello world", ""])
    assert [r.tolist() for r in rows] == [[15496, 995, 50256], [50256]]
    assert all(r.dtype == np.int32 for r in rows)
    assert [r.tolist() for r in tokenize_documents(gpt2, ["", "Hello world"], split_len=3)] == [
        [50256],
        [15496, 995, 50256],
    ]
    # The reference encodes an empty document unsplit as [bos]; split, it has no pieces.
    assert tokenize_documents(mistral, [""])[0].tolist() == [1, 2]
    assert tokenize_documents(mistral, [""], split_len=4)[0].tolist() == [2]
    assert tokenize_documents(gpt2, []) == [] and tokenize_documents(gpt2, [], split_len=5) == []


TEXTS = [
    "The quick brown fox jumps over the lazy dog. " * 7,
    "nospacesatallinthisverylongword",
    "",
    "  leading spaces and trailing  ",
    f"split {EOT} special",
]


@pytest.mark.parametrize("split_len", [1, 4, 10, 2000])
def test_split_tokenization_is_piecewise(ref, mistral, split_len):
    for tok in (*ref.values(), mistral):
        for remove_bos in (False, True):
            rows = tokenize_documents(tok, TEXTS, split_len=split_len, remove_bos_in_chunks=remove_bos)
            for text, row in zip(TEXTS, rows):
                want: list[int] = []
                for k, piece in enumerate(reference_split(text, split_len)):
                    ids = tok.encode(piece).tolist()
                    if k and remove_bos and tok.adds_bos:
                        assert ids[0] == tok.bos_id
                        ids = ids[1:]
                    want += ids
                assert row.tolist() == want + [tok.eos_id]


def test_remove_bos_in_chunks_never_drops_ordinary_tokens(ref):
    # The reference drops element [0] of every piece; we only drop a real BOS.
    text = "alpha beta gamma delta epsilon"
    for tok in ref.values():
        with_flag = tokenize_documents(tok, [text], split_len=3, remove_bos_in_chunks=True)[0]
        without = tokenize_documents(tok, [text], split_len=3)[0]
        assert with_flag.tolist() == without.tolist()


def test_remove_bos_in_chunks_with_bos(mistral):
    text = "alpha beta gamma"
    row = tokenize_documents(mistral, [text], split_len=3, remove_bos_in_chunks=True)[0].tolist()
    assert row[0] == 1 and row.count(1) == 1 and row[-1] == 2
    assert tokenize_documents(mistral, [text], split_len=3)[0].tolist().count(1) == 3


# ------------------------------------------------------------ sep token


@pytest.mark.parametrize("kind", [GPT2, NEOX, HF])
def test_sep_token_added(ref, kind):
    before = ref[kind]
    tok = build_tokenizer(ref_files(kind, sep_token="<sep>"))
    assert before.token_to_id("<sep>") is None
    assert tok.sep_id == before.vocab_size == 8192
    assert tok.vocab_size == before.vocab_size + 1
    assert tok.token_to_id("<sep>") == 8192
    assert tok.encode("a<sep>b").tolist() == [*before.encode("a").tolist(), 8192, *before.encode("b").tolist()]
    assert tok.decode([8192]) == "<sep>"


@pytest.mark.parametrize("kind", [GPT2, NEOX, HF])
def test_sep_token_existing_is_reused(ref, kind):
    tok = build_tokenizer(ref_files(kind, sep_token="<fim_middle>"))
    assert tok.sep_id == 8190 and tok.vocab_size == 8192
    assert ref[kind].sep_id is None


# ------------------------------------------------------------ overrides


@pytest.mark.parametrize(
    "kind, eos_id, pad_id, want",
    [
        (NEOX, 5, None, (5, 5)),
        (NEOX, 5, 7, (5, 7)),
        (NEOX, None, 7, (8187, 7)),
        (HF, 5, None, (5, 5)),
        (HF, None, 7, (8187, 7)),
        (GPT2, 5, None, (5, 5)),
        (GPT2, 5, 7, (5, 5)),  # --pad_id is forced back to eos for GPT2Tokenizer
        (GPT2, None, 7, (8187, 8187)),
    ],
)
def test_eos_pad_overrides(kind, eos_id, pad_id, want):
    tok = build_tokenizer(ref_files(kind, eos_id=eos_id, pad_id=pad_id))
    assert (tok.eos_id, tok.pad_id) == want
    assert tokenize_documents(tok, [""])[0].tolist() == [want[0]]


def test_override_outside_vocabulary():
    with pytest.raises(ValueError, match="--eos_id 8192"):
        build_tokenizer(ref_files(NEOX, eos_id=8192))
    with pytest.raises(ValueError, match="--pad_id -1"):
        build_tokenizer(ref_files(HF, pad_id=-1))


# --------------------------------------------------------------- errors


def test_missing_settings_are_clear():
    with pytest.raises(ValueError, match="--encoder_file is required for GPT2Tokenizer"):
        build_tokenizer(TokenizerFiles(GPT2, merges="#version: 0.2\n"))
    with pytest.raises(ValueError, match="--vocab_file is required for GPT2Tokenizer"):
        build_tokenizer(TokenizerFiles(GPT2, encoder_json="{}"))
    with pytest.raises(ValueError, match="--encoder_file is required for NeoXTokenizer"):
        build_tokenizer(TokenizerFiles(NEOX))
    with pytest.raises(ValueError, match="neither tokenizer.json nor vocab.json"):
        build_tokenizer(TokenizerFiles(HF, tokenizer_config={"eos_token": "x"}))
    with pytest.raises(ValueError, match="--tokenizer_type must be one of"):
        build_tokenizer(TokenizerFiles("BertTokenizer"))
    with pytest.raises(ValueError, match="--tokenizer_type must be one of"):
        read_tokenizer_files("BertTokenizer")
    with pytest.raises(ValueError, match="--huggingface_tokenizer is required"):
        read_tokenizer_files(HF)


def test_missing_eos_token():
    vocab = json.dumps({"a": 0, "b": 1, "ab": 2})
    with pytest.raises(ValueError, match="--eos_id"):
        build_tokenizer(TokenizerFiles(GPT2, encoder_json=vocab, merges="#version: 0.2\na b\n", name="tiny"))
    tok = build_tokenizer(TokenizerFiles(GPT2, encoder_json=vocab, merges="#version: 0.2\na b\n", eos_id=1))
    assert tok.encode("abab").tolist() == [2, 2] and tok.eos_id == tok.pad_id == 1
    neox_json = (REF / "tokenizer.json").read_text(encoding="utf-8")
    with pytest.raises(ValueError, match="defines no eos_token"):
        build_tokenizer(TokenizerFiles(HF, tokenizer_json=neox_json))
    with pytest.raises(ValueError, match="not a tokenizers JSON"):
        build_tokenizer(TokenizerFiles(NEOX, tokenizer_json="{}"))


def test_missing_files_name_flag_and_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"--vocab_file: no such file: .*nope\.bpe"):
        read_tokenizer_files(GPT2, encoder_file=str(REF / "gpt2/vocab.json"), vocab_file=str(tmp_path / "nope.bpe"))
    with pytest.raises(FileNotFoundError, match="--encoder_file"):
        read_tokenizer_files(NEOX, encoder_file=str(tmp_path / "nope.json"))
    with pytest.raises(FileNotFoundError, match="neither tokenizer.json"):
        read_tokenizer_files(HF, huggingface_tokenizer=str(tmp_path))
    with pytest.raises(FileNotFoundError, match="not a directory"):
        read_tokenizer_files(HF, huggingface_tokenizer=str(REF / "tokenizer.json"))


def test_hub_fallback(monkeypatch, tmp_path):
    import huggingface_hub
    from huggingface_hub.errors import EntryNotFoundError

    calls = []

    def fake_download(repo_id, filename, **kw):
        calls.append((repo_id, filename))
        if repo_id == "broken/repo":
            raise OSError("no network")
        path = REF / "hf" / filename
        if not path.is_file():
            raise EntryNotFoundError(f"{filename} not in {repo_id}")
        return str(path)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    files = read_tokenizer_files(HF, huggingface_tokenizer="someone/ref-tokenizer")
    assert files.name == "someone/ref-tokenizer" and files.tokenizer_json and files.special_tokens_map is None
    assert ("someone/ref-tokenizer", "vocab.json") not in calls
    assert build_tokenizer(files).eos_id == 8187
    with pytest.raises(ValueError, match=r"cannot load Hugging Face tokenizer 'broken/repo': not a local directory"):
        read_tokenizer_files(HF, huggingface_tokenizer="broken/repo")


# ------------------------------------------------ pickling, provenance


def test_pickling_and_fingerprint(mistral_files, mistral):
    files2 = pickle.loads(pickle.dumps(mistral_files))
    assert files2 == mistral_files
    tok2 = pickle.loads(pickle.dumps(mistral))
    assert tok2.fingerprint() == mistral.fingerprint() == build_tokenizer(mistral_files).fingerprint()
    plain = pickle.loads(pickle.dumps(mistral.without_bos()))
    assert plain.adds_bos is False and plain.fingerprint() == mistral.without_bos().fingerprint()
    assert plain.fingerprint() != mistral.fingerprint()
    assert len(mistral.fingerprint()) == 64


def test_fingerprint_covers_overrides(ref):
    base = ref[NEOX].fingerprint()
    assert build_tokenizer(ref_files(NEOX)).fingerprint() == base
    assert build_tokenizer(ref_files(NEOX, pad_id=3)).fingerprint() != base
    assert build_tokenizer(ref_files(NEOX, sep_token="<sep>")).fingerprint() != base
    assert ref[HF].fingerprint() != base


def test_encode_batch_equals_encode(ref, mistral):
    texts = ["", "Hello world", f"x{EOT}y", "naïve café 😀"]
    for tok in (*ref.values(), mistral):
        batch = tok.encode_batch(texts)
        assert [r.dtype for r in batch] == [np.int32] * len(texts)
        assert [r.tolist() for r in batch] == [tok.encode(t).tolist() for t in texts]
        assert tok.decode(np.asarray(tok.without_bos().encode(texts[3]))) == texts[3]


def _replace(files: TokenizerFiles, **changes) -> TokenizerFiles:
    import dataclasses

    return dataclasses.replace(files, **changes)


def test_long_real_documents_are_encoded_whole():
    """A long run without spaces (identifiers one per line) once got a piece boundary inside a word."""
    from transforms.core.tokenizer import UNCUT_CHARS

    tok = build_tokenizer(read_tokenizer_files("GPT2Tokenizer", vocab_file=str(TOKS / "gpt2" / "vocab.bpe"),
                                               encoder_file=str(TOKS / "gpt2" / "encoder.json")))
    text = "Perl internals:\n" + "".join(f"magic_setlvref_{i}\nPerl_sv_{i}\n" for i in range(20_000))
    assert 100_000 < len(text) < UNCUT_CHARS
    ids = tokenize_documents(tok, [text])[0]
    assert ids[:-1].tolist() == tok.backend.encode(text).ids and ids[-1] == tok.eos_id
