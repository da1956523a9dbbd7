"""The progress bar: it follows the work done, reaches the input's size exactly once, never passes it.

Driven through the real job with a fake terminal for stderr; what the bar
shows is read from the bar itself (every value its count took).
"""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers import MULTI_PROCESSING, ROOT, SHARED, make_tar, require_shared, run_job, zst
from transforms.io import progress

GPT2 = ROOT / "data" / "tokenizers" / "gpt2"


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True

    def fileno(self):
        raise io.UnsupportedOperation("no file descriptor")


@pytest.fixture
def recorded(monkeypatch):
    """Every value the bar's count takes, and the bars made."""
    values, bars = [], []
    real = progress._bar_class

    def recording():
        base = real()

        class Recording(base):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                bars.append(self)

            def update(self, n=1):
                super().update(n)
                values.append(self.n)

        return Recording

    monkeypatch.setattr(progress, "_bar_class", recording)
    return values, bars


def _inputs(root):
    corpus = require_shared(SHARED / "corpora" / "en_small_pd.jsonl").read_bytes()
    root.mkdir()
    lines = corpus.splitlines(keepends=True)
    (root / "a.jsonl").write_bytes(b"".join(lines[:300]) + b"{broken\n")  # 3 groups of 1 MiB + a bad line
    (root / "b.jsonl.zst").write_bytes(zst(b"".join(lines[300:])))  # read in order, 1 MiB groups
    texts = [json.loads(line)["text"] for line in lines[:200]]
    pq.write_table(pa.table({"text": texts}), root / "c.parquet", row_group_size=40)
    (root / "d.txt").write_text("a short text file")
    (root / "e.jsonl").write_bytes(b"")
    # A tar whose second header is garbage: reading stops there, far from the end of the file.
    member = zst(b"".join(lines[:20]))
    tar = bytearray(make_tar([("m0.jsonl.zst", member), ("m1.jsonl.zst", member), ("m2.jsonl.zst", member * 40)]))
    second = 512 + -(-len(member) // 512) * 512
    tar[second:second + 512] = b"\xff" * 512
    (root / "f.jsonl.zst.tar").write_bytes(bytes(tar))
    # A parquet without the column: its reader stops after the footer.
    pq.write_table(pa.table({"body": texts}), root / "g.parquet")
    return sum(p.stat().st_size for p in root.iterdir())


def _argv(inputs, out, *extra, mode="LMData"):
    return [mode, "--input_dir", str(inputs), "--output_dir", str(out), "--tokenizer_type", "GPT2Tokenizer",
            "--vocab_file", str(GPT2 / "vocab.bpe"), "--encoder_file", str(GPT2 / "encoder.json"),
            "--max_seq_length", "256", "--packing_group_mb", "1", *extra]


@pytest.mark.parametrize("mode, extra", [("LMData", []), ("LMData_VSL", []),
                                         ("LMData", ["--data_splits", "train=0.6,validation=0.4"])],
                         ids=["LMData", "LMData_VSL", "splits"])
def test_the_bar_reaches_the_input_size_once_and_never_passes_it(tmp_path, monkeypatch, recorded, mode, extra):
    values, bars = recorded
    total = _inputs(tmp_path / "in")
    terminal = FakeTerminal()
    monkeypatch.setattr("sys.stderr", terminal)
    params = run_job(_argv(tmp_path / "in", tmp_path / "out", *extra, mode=mode))
    if extra:  # a split job: its summary, and the outputs' counts added up
        assert len(params["outputs"]) == 2
        params["post-process"] = {"n_examples": sum(o["sequences"] for o in params["outputs"])}
    assert len(bars) == 1 and bars[0].total == total
    assert values == sorted(values) and len(values) > 10  # it moved, in many steps, never back
    assert values[-1] == total and values.count(total) == 1  # the total exactly once: at the very end
    assert progress._overshoot == 0  # no share was cut to stay under the total
    drawn = terminal.getvalue()
    assert "tokenizing" in drawn and "100%" in drawn
    inp, post = params["input"], params["post-process"]
    assert progress._counts["documents"] == inp["good"]
    assert progress._counts["bad"] == inp["bad"] == 3  # the broken line, the broken tar, the missing column
    assert progress._counts["sequences"] == post["n_examples"]
    assert f"sequences {post['n_examples']:,}" in drawn.rsplit("tokenizing", 1)[1]


@pytest.mark.parametrize("why", ["not_a_terminal", "display_pbar_false",
                                 pytest.param("multi_processing", marks=pytest.mark.worker_processes)])
def test_no_bar_where_it_does_not_belong(tmp_path, monkeypatch, recorded, why):
    values, bars = recorded
    _inputs(tmp_path / "in")
    extra, runner = [], None
    if why == "display_pbar_false":
        monkeypatch.setattr("sys.stderr", FakeTerminal())
        extra = ["--display_pbar", "False"]
    elif why == "multi_processing":
        monkeypatch.setattr("sys.stderr", FakeTerminal())
        runner = MULTI_PROCESSING + ["--direct_num_workers", "1"]
    argv = _argv(tmp_path / "in", tmp_path / "out", *extra)
    run_job(argv) if runner is None else run_job(argv, runner=runner)
    assert bars == [] and values == []
