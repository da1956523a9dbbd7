"""Bad input never loses good data (issue 5).

Every broken case of the issue in one generated corpus run through the real
pipeline; fuzzing; bounded tokenization cost (subprocesses with timeouts);
transient storage errors; every drop reason counted; clear user errors.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import io
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fsspec.implementations.memory import MemoryFileSystem
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import ROOT, RUNNER, make_tar, read_rows, run_job, zst
from transforms.core import records as R
from transforms.core import tokenizer as T
from transforms.core.records import BadRecord, Document
from transforms.core.stats import check_accounting
from transforms.core.tokenizer import build_tokenizer, encode_bounded, piece_spans, tokenize_documents
from transforms.io import readers
from transforms.io.dead_letters import dead_letter_file_name
from transforms.io.readers import read_records
from transforms.io.tokenizer_files import read_tokenizer_files

GPT2_DIR = ROOT / "data" / "tokenizers" / "gpt2"
SHARED_TOKS = ROOT.parent / "shared" / "tokenizers"
REF_TOK = ROOT.parent / "shared" / "reference" / "tokenizer"
MSL = 2048
EOS = 50256  # GPT-2 <|endoftext|>


@pytest.fixture(scope="module")
def gpt2():
    return build_tokenizer(read_tokenizer_files("GPT2Tokenizer", vocab_file=str(GPT2_DIR / "vocab.bpe"),
                                                encoder_file=str(GPT2_DIR / "encoder.json")))


def gpt2_args(input_dir, out, *extra) -> list[str]:
    return ["LMData", "--input_dir", str(input_dir), "--output_dir", str(out),
            "--tokenizer_type", "GPT2Tokenizer", "--vocab_file", str(GPT2_DIR / "vocab.bpe"),
            "--encoder_file", str(GPT2_DIR / "encoder.json"), *extra]


def fast_args(input_dir, out, *extra) -> list[str]:
    """The reference's small NeoX tokenizer when present (a run costs ~0.7 s instead of ~1.9 s), else GPT-2."""
    if not (REF_TOK / "tokenizer.json").exists():
        return gpt2_args(input_dir, out, *extra)
    return ["LMData", "--input_dir", str(input_dir), "--output_dir", str(out),
            "--tokenizer_type", "NeoXTokenizer", "--encoder_file", str(REF_TOK / "tokenizer.json"), *extra]


def jline(obj) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n"


def parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def dead_letters(out) -> list[dict]:
    """Every dead-letter record, checking each file holds one source, in file order.

    File order: each tar member's records together (members in archive order,
    which the caller checks), lines ascending within a member.
    """
    found = []
    for path in sorted((Path(out) / "dead_letter").glob("*")):
        assert path.suffix == ".jsonl", path
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        assert records, f"{path.name} is empty"
        assert {r["source"] for r in records} == {records[0]["source"]}, path.name
        assert path.name == dead_letter_file_name(records[0]["source"])
        members = [r["member"] for r in records]
        runs = [m for i, m in enumerate(members) if i == 0 or m != members[i - 1]]
        assert len(runs) == len(set(runs)), f"{path.name}: a member's records are not together"
        for member in runs:
            lines = [-1 if r["line"] is None else r["line"] for r in records if r["member"] == member]
            assert lines == sorted(lines), path.name
        found.extend(records)
    return found


def expected_line_count(data: bytes) -> int:
    lines = data.split(b"\n")
    return len(lines) - (1 if lines[-1] == b"" else 0)


# ------------------------------------------------------------------ the corpus of every case

# A 30 MB document. Each unit starts with a space after a non-space, where the
# GPT-2 pre-tokenizer always starts a new pre-token, so its ids are the unit's
# ids repeated: known without tokenizing 30 MB whole (40 s and 4 GB unbounded).
BIG_UNIT = " " + "=" * 63
BIG_REPEAT = (30 << 20) // len(BIG_UNIT)
# 200k characters without a space or newline (base64 of random bytes).
NOSPACE = base64.b64encode(random.Random(5).randbytes(150_000)).decode("ascii")[:200_000]
assert len(NOSPACE) == 200_000 and " " not in NOSPACE and "\n" not in NOSPACE


class Corpus:
    """A corpus holding every case of issue 5, with what the job must make of it."""

    def __init__(self, root: Path):
        self.root = root
        self.good: dict[str, list] = {}  # file -> its good documents (str, or ("big",) / ("nospace",))
        self.bad: list[tuple] = []  # (file, member, line, reason)
        self.read: dict[str, int] = {}  # file -> records read
        self.empty: dict[str, int] = {}
        root.mkdir(parents=True)

    def add(self, name: str, data: bytes, good: list, bad: list = (), read: int | None = None, empty: int = 0):
        (self.root / name).write_bytes(data)
        self.good[name] = list(good)
        self.bad.extend((name, member, line, reason) for member, line, reason in bad)
        self.read[name] = len(good) + len(bad) if read is None else read
        self.empty[name] = empty


def build_corpus(root: Path) -> Corpus:
    c = Corpus(root)
    lines = [
        jline({"text": "Alpha document one."}),                     # 1 good
        b'{"text": "broken\n',                                      # 2 malformed JSON
        b"\n",                                                      # 3 blank line
        b"   \t \n",                                                # 4 blank (whitespace only)
        jline({"text": None}),                                      # 5 null text
        jline({"text": 42}),                                        # 6 a number
        jline({"text": [1, 2]}),                                    # 7 a list of non-strings
        jline({"text": ["para one", "para two"]}),                  # 8 good: paragraphs joined
        jline({"title": "no text here"}),                           # 9 missing key
        b'{"text": "caf\xe9 au lait"}\n',                           # 10 invalid UTF-8 (dead-lettered)
        b"null\n",                                                  # 11 a bare null
        b"7\n",                                                     # 12 a bare number
        jline("a bare string line"),                                # 13 good
        jline({"text": "sep\u2028line\u2029para\u0085next"}),       # 14 good: not line breaks in jsonl
        b'{"text": "lone \\ud800 surrogate"}\n',                    # 15 unpaired surrogate escape
        jline({"text": ""}),                                        # 16 good, empty
        b'{"text": "Omega document, the last line without newline."}',  # 17 good, no final newline
    ]
    c.add("a_mixed.jsonl", b"".join(lines),
          good=["Alpha document one.", "para one\n\npara two", "a bare string line",
                "sep\u2028line\u2029para\u0085next", "", "Omega document, the last line without newline."],
          bad=[(None, 2, R.JSON_DECODE), (None, 3, R.BLANK_LINE), (None, 4, R.BLANK_LINE),
               (None, 5, R.NULL_TEXT), (None, 6, R.NOT_A_STRING), (None, 7, R.NOT_A_STRING),
               (None, 9, R.MISSING_KEY), (None, 10, R.INVALID_UTF8), (None, 11, R.NULL_TEXT),
               (None, 12, R.NOT_A_STRING), (None, 15, R.INVALID_UTF8)],
          empty=1)
    c.add("b_crlf.jsonl", b'{"text": "crlf one"}\r\n{"text": "crlf two"}\r\n', good=["crlf one", "crlf two"])

    # Truncated .jsonl.zst: two whole frames, then only the magic number of the third.
    zst_lines = [jline({"text": f"zst line {i}"}) for i in range(1, 7)]
    data = zst(b"".join(zst_lines[:3])) + zst(zst_lines[3]) + zst(b"".join(zst_lines[4:]))[:4]
    c.add("c_truncated.jsonl.zst", data, good=[f"zst line {i}" for i in range(1, 5)],
          bad=[(None, 5, R.TRUNCATED_STREAM)])

    # Zero-byte files of every format.
    for ext in (".jsonl", ".jsonl.zst", ".json.gz", ".jsonl.zst.tar"):
        c.add(f"d_empty{ext}", b"", good=[])
    c.add("d_empty.txt", b"", good=[""], empty=1)
    c.add("d_empty.parquet", b"", good=[], bad=[(None, None, R.UNREADABLE_FILE)])

    # Parquet: zero rows, no key column, corrupt, and a null value among good rows.
    c.add("e_zero_rows.parquet", parquet_bytes(pa.table({"text": pa.array([], pa.string())})), good=[])
    c.add("e_no_key.parquet", parquet_bytes(pa.table({"body": ["x", "y"]})), good=[],
          bad=[(None, None, R.MISSING_KEY)])
    c.add("e_corrupt.parquet", b"this is not a parquet file at all", good=[], bad=[(None, None, R.UNREADABLE_FILE)])
    c.add("e_rows.parquet", parquet_bytes(pa.table({"text": ["parquet zero", None, "parquet two"]})),
          good=["parquet zero", "parquet two"], bad=[(None, 1, R.NULL_TEXT)])

    # .json.gz: not gzip at all; and a good one (string lines are stripped, objects are not).
    c.add("f_not_gzip.json.gz", b'{"text": "plain text, not gzip"}\n', good=[],
          bad=[(None, None, R.UNREADABLE_FILE)])
    c.add("f_good.json.gz", gzip.compress(b'"  padded string  "\n' + jline({"text": " object kept "})),
          good=["padded string", " object kept "])

    # A tar with a non-zst member between two good ones.
    tar = make_tar([
        ("m0.jsonl.zst", zst(jline({"text": "tar m0 one"}) + jline({"text": "tar m0 two"}))),
        ("notes.txt", b"plain text, not zstd\n"),
        ("m2.jsonl.zst", zst(jline({"text": "tar m2 one"}) + b'{"text": broken}\n')),
    ])
    c.add("g_archive.jsonl.zst.tar", tar, good=["tar m0 one", "tar m0 two", "tar m2 one"],
          bad=[("notes.txt", None, R.UNREADABLE_FILE), ("m2.jsonl.zst", 2, R.JSON_DECODE)])

    # A 30 MB document between two small ones; a 200k-character document without spaces.
    big = b'{"text": "' + (BIG_UNIT * BIG_REPEAT).encode("ascii") + b'"}\n'
    c.add("h_big.jsonl", jline({"text": "small before big"}) + big + jline({"text": "small after big"}),
          good=["small before big", ("big",), "small after big"])
    c.add("i_nospace.jsonl", jline({"text": NOSPACE}), good=[("nospace",)])
    c.add("j_good.txt", b"A text file.\r\nWith CRLF.\r\n", good=["A text file.\nWith CRLF.\n"])
    return c


def expected_ids(tok, doc) -> np.ndarray:
    if doc == ("big",):
        return np.tile(np.asarray(tok.backend.encode(BIG_UNIT).ids, dtype=np.int32), BIG_REPEAT)
    # The whole text encoded at once: the tokenizer's own ids, no cutting involved.
    return np.asarray(tok.backend.encode(doc).ids, dtype=np.int32)


def group_streams(rows: np.ndarray, lengths: list[int]) -> list[np.ndarray]:
    """Split packed rows into the token stream of each packing group, given each stream's length."""
    streams, pos = [], 0
    for length in lengths:
        n = 0 if length < 2 else math.ceil((length - 1) / MSL)
        group = rows[pos:pos + n]
        pos += n
        if not n:
            streams.append(np.zeros(0, np.int32))
            continue
        real = group[:, 1, :].sum(axis=1)
        parts = [r[0, :k] for r, k in zip(group, real)]
        parts.append(group[-1:, 2, real[-1] - 1])
        streams.append(np.concatenate(parts))
    assert pos == len(rows), f"{len(rows) - pos} rows left over"
    return streams


def test_corpus_with_every_bad_case(tmp_path, gpt2, capsys):
    corpus = build_corpus(tmp_path / "in")
    out = tmp_path / "out"
    params = run_job(gpt2_args(corpus.root, out, "--max_seq_length", str(MSL), "--min_sequence_len", "2"))
    summary = capsys.readouterr().err

    # Good documents: each file's token stream, read back from the rows, is exactly its good documents.
    names = sorted(corpus.good)
    nospace = encode_bounded(gpt2, [NOSPACE])[0]  # checked against the text itself below
    expected = {}
    for name in names:
        docs = [nospace if d == ("nospace",) else expected_ids(gpt2, d) for d in corpus.good[name]]
        expected[name] = np.concatenate([np.append(d, EOS) for d in docs]) if docs else np.zeros(0, np.int32)
    streams = dict(zip(names, group_streams(read_rows(out), [len(expected[n]) for n in names])))
    for name in names:
        if len(expected[name]) >= 2:
            assert np.array_equal(streams[name], expected[name]), name
    assert gpt2.decode(streams["i_nospace.jsonl"][:-1]) == NOSPACE  # lossless despite the hard cuts
    unbounded = len(gpt2.backend.encode(NOSPACE).ids)
    cuts = len(piece_spans(NOSPACE)) - 1
    assert abs(len(nospace) - unbounded) <= 2 * cuts, (len(nospace), unbounded, cuts)

    # Bad records: each exactly once, with its reason and line, in its source's dead-letter file.
    got = [(Path(d["source"]).name, d["member"], d["line"], d["reason"]) for d in dead_letters(out)]
    assert Counter(got) == Counter(corpus.bad)
    for name in names:  # in file order: the order the corpus lists them (tar members as archived)
        assert [g for g in got if g[0] == name] == [b for b in corpus.bad if b[0] == name], name

    # Accounting: overall and per source file.
    inp = params["input"]
    assert check_accounting(inp) == []
    per = {Path(src).name: block for src, block in inp["per_source"].items()}
    assert set(per) == set(names)
    for name in names:
        b = per[name]
        reasons = Counter(reason for f, _, _, reason in corpus.bad if f == name)
        assert b["documents_read"] == corpus.read[name], name
        assert b["good"] == len(corpus.good[name]), name
        assert b["bad_by_reason"] == dict(reasons), name
        assert b["empty_documents"] == corpus.empty[name], name
        assert b["documents_read"] == b["good"] + b["bad"] and b["good"] == b["used"] + b["dropped"], name
    assert per["d_empty.txt"]["dropped_by_reason"] == {"no_token_to_predict": 1}  # a lone EOS
    assert inp["dropped_by_reason"] == {"no_token_to_predict": 1}
    assert inp["used"] == sum(len(g) for g in corpus.good.values()) - 1
    assert inp["bad"] == len(corpus.bad) and inp["empty_documents"] == 2

    # The one-line summary names the bad records by reason.
    line = [s for s in summary.splitlines() if s.startswith("Wrote ")][-1]
    by_reason = Counter(reason for *_, reason in corpus.bad)
    assert f"{len(corpus.bad)} bad records (" in line and f"see {out}/dead_letter" in line
    for reason, n in by_reason.items():
        assert f"{reason} {n}" in line


# ------------------------------------------------------------------ fuzzing


class _Timeout(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: int):
    def handler(signum, frame):
        raise _Timeout(f"no result after {seconds}s: a hang")

    old = signal.signal(signal.SIGALRM, handler)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["text", "x"]), inner, max_size=2),
    max_leaves=6,
)
fuzz_line = st.one_of(
    st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")),
    json_values.map(lambda v: json.dumps(v).encode()),
    json_values.map(lambda v: json.dumps({"text": v}).encode()),
    st.text(max_size=30).map(lambda t: json.dumps({"text": t}, ensure_ascii=False).encode()),
    st.sampled_from([b"", b"\r", b"null", b"{}", b'{"text": "\\ud800"}', b"\xef\xbb\xbf" + jline("bom")[:-1]]),
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(fuzz_line, min_size=1, max_size=10), terminated=st.booleans())
def test_fuzzed_jsonl_never_crashes_and_always_adds_up(lines, terminated):
    data = b"\n".join(lines) + (b"\n" if terminated else b"")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in"
        src.mkdir()
        (src / "fuzz.jsonl").write_bytes(data)
        with time_limit(120):
            params = run_job(fast_args(src, Path(tmp) / "out", "--max_seq_length", "64"))
        inp = params["input"]
        assert check_accounting(inp) == []
        assert inp["documents_read"] == expected_line_count(data)
        assert inp["documents_read"] == inp["good"] + inp["bad"]
        assert inp["good"] == inp["used"] + inp["dropped"]
        assert len(dead_letters(Path(tmp) / "out")) == inp["bad"]


# ------------------------------------------------------------------ every drop reason is counted


def test_every_drop_reason_is_counted(tmp_path, gpt2):
    src = tmp_path / "in"
    src.mkdir()
    (src / "empty.jsonl").write_bytes(jline({"text": ""}))  # a lone EOS: nothing to predict
    (src / "short.jsonl").write_bytes(jline({"text": "Hi"}))  # 2 tokens < min_sequence_len 3
    (src / "cut.jsonl").write_bytes(b"".join(jline({"text": "Hi"}) for _ in range(20)))
    params = run_job(gpt2_args(src, tmp_path / "out", "--max_seq_length", "16", "--min_sequence_len", "3",
                               "--short_seq_prob", "1.0"))
    inp = params["input"]
    assert check_accounting(inp) == []
    per = {Path(s).name: b for s, b in inp["per_source"].items()}
    assert per["empty.jsonl"]["dropped_by_reason"] == {"no_token_to_predict": 1}
    assert per["empty.jsonl"]["empty_documents"] == 1
    assert per["short.jsonl"]["dropped_by_reason"] == {"shorter_than_min_sequence_len": 1}
    assert set(per["cut.jsonl"]["dropped_by_reason"]) == {"cut_by_short_seq_prob"}
    assert params["post-process"]["discarded_files"] == inp["dropped"]

    # write_remainder False: with msl 16, 30 + 2 tokens are rows [0, 17) and [16, 32), the second one
    # the unwritten remainder, which holds all of "Hi".
    rem = tmp_path / "rem"
    rem.mkdir()
    long_doc = "word" + " word" * 28
    assert len(gpt2.encode(long_doc)) == 29 and len(gpt2.encode("Hi")) == 1
    (rem / "remainder.jsonl").write_bytes(jline({"text": long_doc}) + jline({"text": "Hi"}))
    params = run_job(gpt2_args(rem, tmp_path / "rem_out", "--max_seq_length", "16", "--write_remainder", "False"))
    inp = params["input"]
    assert check_accounting(inp) == []
    assert inp["dropped_by_reason"] == {"remainder_not_written": 1} and inp["used"] == 1

    summ = tmp_path / "summ"
    summ.mkdir()
    (summ / "s.jsonl").write_bytes(
        jline({"prompt": "a long prompt " * 10, "completion": " answer"})   # too long for msl 16
        + jline({"prompt": "Hi", "completion": ""})                         # 2 tokens < min_sequence_len 5
        + jline({"prompt": "Question here", "completion": " an answer"})    # kept
        + jline({"prompt": "no completion"}))                               # bad: missing key
    params = run_job(["Summarization", *gpt2_args(summ, tmp_path / "summ_out")[1:], "--max_seq_length", "16",
                      "--min_sequence_len", "5", "--prompt_key", "prompt", "--completion_key", "completion"])
    inp = params["input"]
    assert check_accounting(inp) == []
    assert inp["dropped_by_reason"] == {"too_long": 1, "shorter_than_min_sequence_len": 1}
    assert inp["used"] == 1 and inp["bad_by_reason"] == {"missing_key": 1}


# ------------------------------------------------------------------ max_bad_record_fraction


@pytest.mark.parametrize("limit, code", [("0.25", 3), ("0.5", 0)])
def test_max_bad_record_fraction(tmp_path, capsys, limit, code):
    from pipelines.create_hdf5_dataset import main

    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jsonl").write_bytes(jline({"text": "good one"}) + b"{bad\n" + jline({"text": "good two"}) + b"\n")
    assert main(fast_args(src, tmp_path / "out", "--max_seq_length", "32", "--max_bad_record_fraction", limit)
                + RUNNER) == code
    errors = [s for s in capsys.readouterr().err.splitlines() if s.startswith("create_hdf5_dataset: error")]
    if code:
        [line] = errors
        assert "2 of 4 records were bad (50.00%)" in line and "25.00%" in line
    else:
        assert errors == []
    assert (tmp_path / "out" / "data_params.json").exists()  # the dataset is written either way


# ------------------------------------------------------------------ user errors


def _cli(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelines.create_hdf5_dataset", *args, *RUNNER],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def _user_error_cases(tmp: Path) -> dict:
    sample = ROOT / "data" / "sample"
    (tmp / "empty_dir").mkdir()
    (tmp / "no_match").mkdir()
    (tmp / "no_match" / "notes.csv").write_text("a,b\n")
    (tmp / "bad_tok").mkdir()
    (tmp / "bad_tok" / "encoder.json").write_text("{not json")
    (tmp / "full").mkdir()
    (tmp / "full" / "keep.txt").write_text("user file")
    out = str(tmp / "out")
    fim = ["--fim_prefix_tok", "<fim_prefix>", "--fim_middle_tok", "<fim_middle>", "--fim_suffix_tok", "<fim_suffix>"]
    return {
        "missing input dir": (gpt2_args(tmp / "nowhere", out), "nowhere"),
        "no matching files (empty dir)": (gpt2_args(tmp / "empty_dir", out), "no input files"),
        "no matching files": (gpt2_args(tmp / "no_match", out), "no input files"),
        "unreadable tokenizer file": (_with(gpt2_args(sample, out), encoder_file=str(tmp / "bad_tok" / "encoder.json")),
                                      "not valid JSON"),
        "tokenizer file is a directory": (_with(gpt2_args(sample, out), vocab_file=str(tmp / "bad_tok")),
                                          "bad_tok"),
        "missing FIM sentinel": (["FIM", *gpt2_args(sample, out)[1:], *fim], "<fim_prefix>"),
        "output dir not empty": (gpt2_args(sample, tmp / "full"), "not empty"),
        "a split of fraction 0": (gpt2_args(sample, out, "--data_splits", "train=1,validation=0"),
                                  "validation: '0' must be a fraction > 0"),
    }


def _with(args: list[str], **replace) -> list[str]:
    args = list(args)
    for flag, value in replace.items():
        args[args.index(f"--{flag}") + 1] = value
    return args


def test_user_errors_fail_before_the_pipeline_with_one_line(tmp_path):
    for name, (argv, message) in _user_error_cases(tmp_path).items():
        proc = _cli(argv)
        assert proc.returncode == 2, (name, proc.stderr)
        assert "Traceback" not in proc.stderr, name
        errors = [s for s in proc.stderr.splitlines() if s.strip() and not s.startswith("WARNING")]
        assert len(errors) == 1 and errors[0].startswith("create_hdf5_dataset: error: "), (name, proc.stderr)
        assert message in errors[0], (name, errors[0])
        assert not (tmp_path / "out").exists(), name  # nothing was started, nothing written
    assert (tmp_path / "full" / "keep.txt").read_text() == "user file"


# ------------------------------------------------------------------ bounded tokenization cost


def test_pieces_bound_the_cost_for_any_tokenizer():
    """Whatever a tokenizer does on one piece, the pieces of a text are bounded and cover it exactly."""
    cases = {"nospace": NOSPACE, "big": BIG_UNIT * 20_000, "spaces": " " * 100_000 + "x",
             "mixed": ("word " * 5000 + "y" * 30_000 + " z") * 3}
    for name, text in cases.items():
        for drop_space in (False, True):
            spans = piece_spans(text, drop_space=drop_space)
            assert all(0 < e - s <= T.PIECE_CHARS for s, e in spans), name
            assert spans[0][0] == 0 and spans[-1][1] == len(text)
            for (_, e), (s2, _) in zip(spans, spans[1:]):
                # Contiguous, or (drop_space) skipping exactly the one safe space at the cut.
                assert s2 == e or (drop_space and s2 == e + 1 and text[e] == " " and not text[e - 1].isspace())
            # A cost quadratic in a piece's length stays linear in the text's.
            assert sum((e - s) ** 2 for s, e in spans) <= len(text) * T.PIECE_CHARS


def _long_text() -> str:
    sample = ROOT / "data" / "sample" / "jargon_devil_sample.jsonl"
    return "\n\n".join(json.loads(line)["text"] for line in sample.read_text(encoding="utf-8").splitlines())


def _tokenizers() -> dict:
    toks = {"gpt2-bundled": lambda: read_tokenizer_files("GPT2Tokenizer", vocab_file=str(GPT2_DIR / "vocab.bpe"),
                                                        encoder_file=str(GPT2_DIR / "encoder.json"))}
    if (REF_TOK / "tokenizer.json").exists():
        toks["neox-ref"] = lambda: read_tokenizer_files("NeoXTokenizer", encoder_file=str(REF_TOK / "tokenizer.json"))
        toks["hf-ref"] = lambda: read_tokenizer_files("HuggingFaceTokenizer", huggingface_tokenizer=str(REF_TOK / "hf"))
    if (SHARED_TOKS / "mistral-7b").exists():  # SentencePiece-style: prepends "\u2581", adds BOS
        toks["mistral"] = lambda: read_tokenizer_files("HuggingFaceTokenizer",
                                                       huggingface_tokenizer=str(SHARED_TOKS / "mistral-7b"))
    return toks


@pytest.mark.parametrize("name", sorted(_tokenizers()))
def test_cutting_normal_text_gives_the_same_ids(name):
    """Long normal text: cut at safe spaces, the ids are those of the whole text, BOS included."""
    tok = build_tokenizer(_tokenizers()[name]())
    assert tok._cut_plan().exact
    text = _long_text()[:300_000]
    whole = np.asarray(tok.backend.encode(text).ids, dtype=np.int32)
    # The sample holds a 1000-digit number: pieces of 8192 characters cut it only at safe spaces.
    # Explicit small limits: real defaults encode a text this short whole.
    spans = piece_spans(text, limit=8192, drop_space=tok._cut_plan().drop_space, safe_cut=tok._cut_plan().safe_cut)
    assert len(spans) > 30
    assert np.array_equal(encode_bounded(tok, [text], uncut=1 << 16, piece=8192)[0], whole)
    assert np.array_equal(tokenize_documents(tok, [text, "short"])[0], np.append(whole, tok.eos_id))
    assert np.array_equal(encode_bounded(tok, [text[:T.UNCUT_CHARS]], piece=257)[0],
                          tok.backend.encode(text[:T.UNCUT_CHARS]).ids)  # below the bound: never cut


words = st.lists(st.one_of(st.sampled_from(["the", "a", "It's", "x1", "2024", "...", "--", "中文", "ÿ", "\n", "\t",
                                             "", "(", "don't", "'s", "$3.5", "<|endoftext|>", "\u00a0", "😀"]),
                           st.text(max_size=4)), max_size=120)


@settings(max_examples=60, deadline=None)
@given(words=words, seps=st.lists(st.sampled_from([" ", "  ", "\n ", " \n", ""]), min_size=1, max_size=5))
def test_cut_at_safe_spaces_is_exact(gpt2, words, seps):
    text = "".join(w + seps[i % len(seps)] for i, w in enumerate(words))
    spans = piece_spans(text, 24)
    got = encode_bounded(gpt2, [text], uncut=0, piece=24)[0]
    if all(e == len(text) or text[e] == " " for _, e in spans):  # no hard cut
        assert got.tolist() == gpt2.backend.encode(text).ids
    assert gpt2.decode(got) == text  # lossless whatever the cuts


# Runs the job and prints its peak RSS (wait4's KiB), from a small process of its own: Linux carries a process's
# peak RSS across fork and exec, so a job started straight from this (large, by then) test process would report
# this process's size, not its own.
_LAUNCHER = """
import os, subprocess, sys
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(child.pid, 0)
print(usage.ru_maxrss, os.waitstatus_to_exitcode(status))
"""


def _pipeline_in_subprocess(args: list[str], timeout: float) -> tuple[int, float, int, str]:
    """Run the pipeline in a subprocess: (exit code, seconds, its own peak RSS in MiB, stderr)."""
    with tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-c", _LAUNCHER, sys.executable, "-m",
                                 "pipelines.create_hdf5_dataset", *args, *RUNNER],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=err, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            pytest.fail(f"the pipeline took more than {timeout}s: tokenization cost is not bounded")
        seconds = time.monotonic() - start
        err.seek(0)
        maxrss, code = (int(x) for x in out.split())
        return code, seconds, maxrss // 1024, err.read().decode("utf-8", "replace")


def test_200k_characters_without_spaces_in_bounded_time(tmp_path):
    # The job takes ~3 s on 2 cores; tokenizing the documents ~0.1 s (tokenizers 0.23
    # is linear on one giant "word", and 200k characters are under UNCUT_CHARS, so
    # they are encoded whole). Texts over UNCUT_CHARS are encoded in pieces of at
    # most PIECE_CHARS characters, which bounds the cost of any tokenizer.
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jsonl").write_bytes(jline({"text": NOSPACE}) + jline({"text": "x" * 200_000}))
    code, seconds, rss, err = _pipeline_in_subprocess(gpt2_args(src, tmp_path / "out"), timeout=120)
    assert code == 0, err
    params = json.loads((tmp_path / "out" / "data_params.json").read_text())
    assert params["input"]["used"] == 2


def test_30mb_document_in_bounded_time_and_memory(tmp_path):
    # Measured on 2 cores: whole-text encoding of 30 MB of English takes 13-40 s
    # (with the load) and ~3.8 GB (the tokenizer keeps ~400 bytes per token); in
    # pieces 7-12 s and ~0.3 GB. The whole job: 20 s and 4.0 GB unbounded, 13-35 s
    # and 0.9 GB bounded. A quadratic cost would blow the timeout, unbounded
    # memory the RSS limit.
    src = tmp_path / "in"
    src.mkdir()
    sample = _long_text()
    text = (sample * ((30 << 20) // len(sample) + 1))[:30 << 20]
    (src / "big.jsonl").write_bytes(jline({"text": "a small document"}) + jline({"text": text}))
    del text
    code, seconds, rss, err = _pipeline_in_subprocess(gpt2_args(src, tmp_path / "out"), timeout=400)
    assert code == 0, err
    assert rss < 2500, f"peak RSS {rss} MiB for a 30 MB document: tokenization memory is not bounded"
    params = json.loads((tmp_path / "out" / "data_params.json").read_text())
    assert params["input"]["used"] == 2 and params["post-process"]["num_tokens"] > 9_000_000


# ------------------------------------------------------------------ transient vs permanent storage errors


class FlakyFS(MemoryFileSystem):
    """An in-memory store whose reads fail with a chosen error after a chosen offset."""

    protocol = "flakytest"
    store: dict = {}
    pseudo_dirs = [""]
    failures: dict = {}  # path -> (offset, exception)

    @classmethod
    def _strip_protocol(cls, path):
        return super()._strip_protocol(str(path).removeprefix("flakytest://"))

    def _open(self, path, mode="rb", **kwargs):
        f = super()._open(path, mode, **kwargs)
        failure = self.failures.get(self._strip_protocol(path))
        if failure is None or "r" not in mode:
            return f
        return _FailingFile(f.getvalue(), *failure)


class _FailingFile(io.BytesIO):
    def __init__(self, data: bytes, offset: int, error: Exception):
        super().__init__(data)
        self._offset, self._error = offset, error

    def read(self, size=-1):
        end = len(self.getbuffer()) if size is None or size < 0 else self.tell() + size
        if end > self._offset:
            raise self._error
        return super().read(size)


fsspec.register_implementation("flakytest", FlakyFS, clobber=True)

GOOD_JSONL = b"".join(jline({"text": f"doc {i} " + "y" * 50}) for i in range(200))
FORMATS = {
    "a.jsonl": GOOD_JSONL,
    "a.jsonl.zst": zst(GOOD_JSONL),
    "a.json.gz": gzip.compress(GOOD_JSONL),
    "a.jsonl.zst.tar": make_tar([("m.jsonl.zst", zst(GOOD_JSONL))]),
    "a.txt": GOOD_JSONL,
    "a.parquet": parquet_bytes(pa.table({"text": [f"doc {i}" for i in range(200)]})),
}


@pytest.fixture
def flaky():
    fs = FlakyFS()
    yield fs
    FlakyFS.failures.clear()
    FlakyFS.store.clear()


@pytest.mark.parametrize("name", sorted(FORMATS))
@pytest.mark.parametrize("error", [OSError("503 Service Unavailable"), ConnectionResetError("reset"),
                                   TimeoutError("timed out")], ids=["503", "reset", "timeout"])
def test_transient_storage_errors_are_raised_for_a_retry(flaky, name, error):
    data = FORMATS[name]
    flaky.pipe(f"/t/{name}", data)
    assert not any(isinstance(r, BadRecord) for r in read_records(f"flakytest://t/{name}", ("text",)))
    for offset in (0, len(data) // 2):
        FlakyFS.failures[f"/t/{name}"] = (offset, error)
        with pytest.raises(type(error)):
            list(read_records(f"flakytest://t/{name}", ("text",)))


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_permanent_storage_errors_are_dead_lettered(flaky, name):
    flaky.pipe(f"/t/{name}", FORMATS[name])
    FlakyFS.failures[f"/t/{name}"] = (0, PermissionError("forbidden"))
    records = list(read_records(f"flakytest://t/{name}", ("text",)))
    assert [(type(r), r.reason) for r in records] == [(BadRecord, R.UNREADABLE_FILE)]
    assert [r.reason for r in read_records("flakytest://t/missing.jsonl", ("text",))] == [R.UNREADABLE_FILE]


def test_a_transient_error_fails_the_job_instead_of_losing_data(flaky, tmp_path):
    flaky.pipe("/job/in/a.jsonl", GOOD_JSONL)
    flaky.pipe("/job/in/b.jsonl", GOOD_JSONL)
    FlakyFS.failures["/job/in/b.jsonl"] = (len(GOOD_JSONL) // 2, OSError("503 Service Unavailable"))
    out = tmp_path / "out"
    with pytest.raises(Exception, match="503"):
        run_job(gpt2_args("flakytest://job/in", out, "--max_seq_length", "64"))
    assert not (out / "data_params.json").exists()
    assert not (out / "dead_letter").exists()


# ------------------------------------------------------------------ records too long to hold


def test_records_longer_than_the_limit_are_dead_lettered_without_being_held(tmp_path):
    cap = 1000
    long_line = jline({"text": "z" * 3_000_000})  # spans several read blocks
    data = jline({"text": "before"}) + jline({"text": "w" * 2000}) + long_line + jline({"text": "after"})
    for name, blob in [("a.jsonl", data), ("a.jsonl.zst", zst(data)),
                       ("a.jsonl.zst.tar", make_tar([("m.jsonl.zst", zst(data))]))]:
        (tmp_path / name).write_bytes(blob)
        records = list(read_records(str(tmp_path / name), ("text",), max_record_bytes=cap))
        assert [r.text for r in records if isinstance(r, Document)] == ["before", "after"], name
        assert [r.index for r in records if isinstance(r, Document)] == [0, 3], name
        bad = [r for r in records if isinstance(r, BadRecord)]
        assert [(b.line, b.reason) for b in bad] == [(2, R.TOO_LONG), (3, R.TOO_LONG)], name
        assert all(len(b.raw) <= R.RAW_PREVIEW_BYTES + 1 for b in bad)
        assert bad[1].raw.startswith(b'{"text": "zzz')
    (tmp_path / "final.jsonl").write_bytes(jline({"text": "ok"}) + b'{"text": "' + b"q" * 5000)  # no final newline
    records = list(read_records(str(tmp_path / "final.jsonl"), ("text",), max_record_bytes=cap))
    assert [(type(r).__name__, getattr(r, "reason", None)) for r in records] == [
        ("Document", None), ("BadRecord", R.TOO_LONG)]
    (tmp_path / "big.txt").write_bytes(b"t" * 5000)
    [bad] = read_records(str(tmp_path / "big.txt"), ("text",), max_record_bytes=cap)
    assert (bad.reason, bad.line) == (R.TOO_LONG, None)
    assert readers.MAX_RECORD_BYTES >= 64 << 20  # a 30 MB document is never too long by default
