"""Fuzzing whole jobs of every mode (issue #33): hostile records in every input format, among file-system oddities.

Each example is a small input directory: files of the mode's records, some well formed and some not (random
JSON values of any type and nesting, nesting past the limit, invalid UTF-8, blank lines, byte order marks,
lone surrogates, huge numbers, lines longer than the record limit, compressed streams cut short), as .jsonl
(with or without a last newline), .jsonl.zst, .json.gz, .parquet and .txt, plus a symbolic link loop, a
dangling link, a FIFO, a zero-byte file and a file that vanishes between the listing and the read. The job
runs in process, and must:

- finish (no exception, no hang: a time limit), and write data_params.json;
- read exactly the records the files hold (lines, rows, one per .txt, one per unreadable file);
- account for every one: read = good + bad, good = used + dropped, one dead letter per bad record, each with
  its reason and either raw bytes or a detail.

`make test` runs FUZZ_EXAMPLES (default 3) examples per mode; `make fuzz` runs 60 per mode.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import ROOT, SHARED, require_shared, run_job, zst
from tests.test_bad_input import dead_letters, expected_line_count, time_limit
from transforms.core.records import MAX_JSON_DEPTH
from transforms.core.stats import check_accounting
from transforms.io import readers

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "3"))
GPT2 = ROOT / "data" / "tokenizers" / "gpt2"
QWEN = SHARED / "tokenizers" / "qwen2.5-instruct"
OLMO = SHARED / "tokenizers" / "olmo-dolma2" / "tokenizer.json"
RECORD_CAP = 2000  # bytes: the record limit, patched low so that lines past it are cheap to make

_GPT2 = ["--tokenizer_type", "GPT2Tokenizer", "--vocab_file", str(GPT2 / "vocab.bpe"),
         "--encoder_file", str(GPT2 / "encoder.json")]
FIM_TOKENS = ["--fim_prefix_tok", "<|fim_prefix|>", "--fim_middle_tok", "<|fim_middle|>",
              "--fim_suffix_tok", "<|fim_suffix|>"]


def _mode_args(mode: str) -> list[str]:
    if mode in ("Chat", "Chat_VSL", "DPO"):
        args = ["--tokenizer_type", "HuggingFaceTokenizer", "--huggingface_tokenizer", str(require_shared(QWEN))]
        return args + (["--prompt_key", "prompt"] if mode == "DPO" else [])
    if mode == "FIM":
        return ["--tokenizer_type", "NeoXTokenizer", "--encoder_file", str(require_shared(OLMO)),
                "--fim_rate", "0.9", "--spm_rate", "0.5", *FIM_TOKENS]
    if mode.startswith("Summarization"):
        return [*_GPT2, "--prompt_key", "prompt", "--completion_key", "completion"]
    return _GPT2


MODES = ["LMData", "LMData_VSL", "FIM", "Summarization", "Summarization_VSL", "Chat", "Chat_VSL", "DPO"]

# ---------------------------------------------------------------- values and records

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["text", "role", "content", "x", "tool_calls", "function", "name"]), inner, max_size=3),
    max_leaves=8)
texts = st.text(max_size=60) | st.sampled_from(["", " ", "\n\n", "<|endoftext|>", "<|im_end|>", "é" * 50,
                                                "a\u0301", "\ufeffbom", "x" * 300])
roles = st.sampled_from(["user", "assistant", "system", "tool", "human", "gpt", "function_call", "observation",
                         "wizard", None, 3])
tool_calls = st.none() | st.lists(st.fixed_dictionaries(
    {"type": st.just("function"),
     "function": st.fixed_dictionaries({"name": st.sampled_from(["f", "", "get_x"]),
                                        "arguments": json_values})}), max_size=2) | json_values
messages = st.lists(st.fixed_dictionaries({"role": roles, "content": texts | json_values},
                                          optional={"tool_calls": tool_calls}), max_size=5)
good_conversation = st.lists(st.tuples(texts.filter(lambda t: t.strip()), texts.filter(lambda t: t.strip())),
                             min_size=1, max_size=3).map(
    lambda turns: [m for u, a in turns for m in ({"role": "user", "content": u}, {"role": "assistant", "content": a})])


def _records(mode: str):
    """Records of the mode: mostly plausible, often hostile."""
    if mode in ("Chat", "Chat_VSL"):
        return st.one_of(
            good_conversation.map(lambda m: {"messages": m}),
            messages.map(lambda m: {"messages": m}),
            st.tuples(good_conversation, json_values).map(lambda p: {"messages": p[0], "tools": p[1]}),
            json_values.map(lambda v: {"messages": v}))
    if mode == "DPO":
        side = texts | good_conversation | json_values | st.sampled_from(
            ["\n\nHuman: q\n\nAssistant: a", "\n\nHuman: q\n\nAssistant: b"])
        return st.fixed_dictionaries({"prompt": texts | good_conversation | json_values, "chosen": side,
                                      "rejected": side})
    if mode.startswith("Summarization"):
        return st.fixed_dictionaries({"prompt": texts | json_values, "completion": texts | json_values})
    return st.fixed_dictionaries({"text": texts | json_values})


def _hostile_lines():
    return st.sampled_from([
        b"", b"\r", b"not json", b"{", b"null", b"[]", b"\xff\xfe\x00", b'{"text": "\\ud800"}',
        b'{"text": ' + b"9" * 400 + b"}", b"[" * (MAX_JSON_DEPTH + 5) + b"]" * (MAX_JSON_DEPTH + 5),
        b'{"text": "' + b"y" * (RECORD_CAP + 50) + b'"}', b"\xef\xbb\xbf{}",
    ])


def _lines(mode: str):
    return st.lists(_records(mode).map(lambda r: json.dumps(r, ensure_ascii=False).encode("utf-8", "surrogatepass"))
                    | _hostile_lines(), max_size=8)


# ---------------------------------------------------------------- files

def _parquet(records: list) -> bytes:
    """Records as parquet: every value as its JSON text (a column has one type), or the text itself."""
    if not records:
        return b""
    keys = sorted({k for r in records for k in r})
    table = pa.table({k: [None if k not in r else r[k] if isinstance(r[k], str) else json.dumps(r[k])
                          for r in records] for k in keys})
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


files = st.lists(st.tuples(st.sampled_from(["jsonl", "jsonl_open", "zst", "zst_cut", "gz", "parquet", "txt"]),
                           st.integers(0, 2 ** 16)), min_size=1, max_size=4)
oddities = st.sets(st.sampled_from(["loop", "dangling", "fifo", "zero", "vanish"]))


def _write(root: Path, mode: str, data, kinds, odd) -> int:
    """The input files; returns how many records the job must read from them."""
    expected = 0
    for k, (kind, seed) in enumerate(kinds):
        lines = data.draw(_lines(mode), label=f"lines {k}")
        body = b"\n".join(lines) + b"\n" if lines else b""
        if kind == "jsonl":
            (root / f"f{k}.jsonl").write_bytes(body)
            expected += expected_line_count(body)
        elif kind == "jsonl_open":  # no newline after the last line
            (root / f"f{k}.jsonl").write_bytes(body[:-1])
            expected += expected_line_count(body[:-1])
        elif kind == "zst":
            (root / f"f{k}.jsonl.zst").write_bytes(zst(body))
            expected += expected_line_count(body)
        elif kind == "zst_cut":
            # Cut short: the complete lines before the cut, then one bad record for the damage. Which lines are
            # complete depends on where the cut falls in the compressed stream: the readers count them.
            whole = zst(body * 3 + b"tail")
            path = root / f"f{k}.jsonl.zst"
            path.write_bytes(whole[:max(1, len(whole) * (seed % 100) // 100)])
            expected += sum(1 for _ in readers.read_records(str(path), ("text",), RECORD_CAP))
        elif kind == "gz":
            (root / f"f{k}.json.gz").write_bytes(gzip.compress(body))
            expected += expected_line_count(body)
        elif kind == "parquet":
            records = data.draw(st.lists(_records(mode), max_size=6), label=f"rows {k}")
            (root / f"f{k}.parquet").write_bytes(_parquet(records))
            expected += len(records) if records else 1  # a zero-byte .parquet is an unreadable file
        else:
            (root / f"f{k}.txt").write_bytes(body[:RECORD_CAP * 2])
            expected += 1
    if "loop" in odd:
        os.symlink("loop_b.jsonl", root / "loop_a.jsonl")
        os.symlink("loop_a.jsonl", root / "loop_b.jsonl")
        expected += 2
    if "dangling" in odd:
        os.symlink("nowhere.jsonl", root / "dangling.jsonl")
        expected += 1
    if "fifo" in odd:
        os.mkfifo(root / "pipe.jsonl")
        expected += 1
    if "zero" in odd:
        for ext in ("jsonl", "jsonl.zst", "json.gz", "parquet", "txt"):
            (root / f"zero.{ext}").write_bytes(b"")
        expected += 2  # .txt: one empty document; .parquet: an unreadable file; the others: nothing
    return expected


@pytest.mark.parametrize("mode", MODES)
def test_a_fuzzed_job_finishes_and_accounts_for_every_record(mode, monkeypatch):
    monkeypatch.setattr(readers, "MAX_RECORD_BYTES", RECORD_CAP)

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 3,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data(), kinds=files, odd=oddities)
    def run(data, kinds, odd):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "in"
            root.mkdir()
            expected = _write(root, mode, data, kinds, odd)
            vanished = None
            if "vanish" in odd:
                vanished = root / "vanish.jsonl"
                vanished.write_bytes(b'{"text": "gone"}\n')
            out = Path(tmp) / "out"
            argv = [mode, "--input_dir", str(root), "--output_dir", str(out), *_mode_args(mode),
                    "--max_seq_length", "64", "--min_sequence_len", "2"]
            with time_limit(300), monkeypatch.context() as patch:
                if vanished is not None:
                    _vanish_after_listing(vanished, patch)
                params = run_job(argv)
            inp = params["input"]
            assert check_accounting(inp) == []
            assert inp["documents_read"] == expected + (1 if vanished else 0), (inp, sorted(os.listdir(root)))
            letters = dead_letters(out)
            assert len(letters) == inp["bad"]
            assert all(d["reason"] and (d["raw"] or d["detail"]) for d in letters)
            if vanished:
                assert any(d["source"].endswith("vanish.jsonl") and d["reason"] == "unreadable_file"
                           for d in letters)

    run()


def _vanish_after_listing(path: Path, patch) -> None:
    """Deletes a file once the job has listed its input: it is gone by the time a worker opens it."""
    from pipelines import plan

    listed = plan.discover_input_files

    def list_then_delete(*args, **kwargs):
        found = listed(*args, **kwargs)
        path.unlink()
        return found

    patch.setattr(plan, "discover_input_files", list_then_delete)
