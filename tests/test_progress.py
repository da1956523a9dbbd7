"""The progress bar: a share of the job's work time at the costs measured in the run; it reaches the input's size
exactly once and never goes back.

The arithmetic (`estimate`, `WorkClock`) is tested on made-up runs whose
truth is known; the bar through the module's calls with a fake clock; then
through the real job with a fake terminal for stderr, reading what the bar
showed from the bar itself (every value its count took).
"""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers import MULTI_PROCESSING, ROOT, SHARED, make_tar, require_shared, run_job, zst
from transforms.io import progress
from transforms.io.progress import StageTimes, WorkClock, estimate

GPT2 = ROOT / "data" / "tokenizers" / "gpt2"
QWEN = SHARED / "tokenizers" / "qwen2.5-instruct"


# ------------------------------------------------------------------------------------------- the arithmetic


def test_a_stage_costs_the_seconds_of_its_finished_work_over_the_bytes_it_finished():
    # tokenize: 40 of 100 B in 8 s (0.2 s/B); encode: 10 B in 1 s (0.1 s/B), and 0.5 s of work under way.
    stages = {"tokenize": StageTimes(40, 8.0, 8.0), "encode": StageTimes(10, 1.0, 1.5)}
    fraction, left = estimate(100, stages, elapsed=19.0)
    assert left == pytest.approx((60 * 0.2 + 90 * 0.1) * 19.0 / 9.5)  # 21 s of work, 2 s of wall time each
    assert fraction == pytest.approx(9.0 / (9.0 + 21.0))


def test_no_estimate_while_a_stage_at_work_has_no_cost():
    assert estimate(100, {"tokenize": StageTimes(10, 1.0, 1.0), "fim": StageTimes(0, 0.0, 2.0)}, 3.0) is None
    assert estimate(100, {}, 3.0) is None


def test_a_prior_stands_for_a_stage_to_come_and_fades_as_it_measures_its_own():
    tokenized = {"tokenize": StageTimes(100, 10.0, 10.0)}
    assert estimate(100, tokenized, 10.0, priors={"encode": 0.3}, prior_bytes=10)[1] == pytest.approx(30.0)
    measured = {**tokenized, "encode": StageTimes(90, 9.0, 9.0)}  # 0.1 s/B of its own over 90 B
    cost = (0.3 * 10 + 9.0) / (10 + 90)
    assert estimate(100, measured, 19.0, priors={"encode": 0.3}, prior_bytes=10)[1] == pytest.approx(10 * cost)


def _serial_run(costs: dict, prior: dict, total=1000, pieces=50):
    """A job whose stages run one after the other over every byte, piece by piece, each at its cost per byte
    (so the truth is known): (time, estimate, seconds really left) at each report."""
    clock = WorkClock(total)
    end = sum(costs.values()) * total
    out, now, step = [], 0.0, total // pieces
    for stage, cost in costs.items():
        for _ in range(pieces):
            clock.begin("main", now, stage)
            now += cost * step
            if stage == "tokenize":
                clock.tokens += step  # a token a byte: a prior is seconds a byte
            clock.end("main", now, stage, step)
            out.append((now, clock.estimate(now, prior), end - now))
    return out


@pytest.mark.parametrize("tokenize, encode", [(1.0, 1.0), (4.0, 1.0), (1.0, 4.0), (0.1, 3.0)])
def test_the_eta_is_the_time_left_whatever_the_stages_cost(tokenize, encode):
    # The old rule (half a group's share as it is tokenized, half as it is encoded) held only for equal costs.
    for now, (fraction, left), truth in _serial_run({"tokenize": tokenize, "encode": encode}, {"encode": encode}):
        assert left == pytest.approx(truth)
        assert fraction == pytest.approx(now / (now + truth))  # the bar moves at a steady pace


def test_a_wrong_prior_is_corrected_by_the_stages_own_costs():
    run = _serial_run({"tokenize": 1.0, "encode": 2.0}, {"encode": 4.0})
    errors = [abs(left - truth) / truth for _, (_, left), truth in run if truth]
    assert min(errors[:50]) > 0.3  # while encode has measured nothing, its prior rules
    assert errors[50:] == sorted(errors[50:], reverse=True) and max(errors[75:]) < 0.1  # then it fades


def test_stages_at_work_together_share_the_wall_time_and_a_stage_its_part_among_its_threads():
    clock = WorkClock(100)
    clock.begin("pool-1", 0.0, "tokenize")
    clock.begin("pool-2", 0.0, "tokenize")
    clock.begin("main", 2.0, "encode")
    clock.end("pool-1", 4.0, "tokenize", 10)  # 2 s beside pool-2 (1 s its own), 2 s beside encode too (0.5 s)
    assert clock.stages["tokenize"].done_seconds == pytest.approx(1.5)
    assert clock.stages["tokenize"].seconds == pytest.approx(3.0)  # pool-2's work is still under way
    clock.end("main", 6.0, "encode", 5)  # 1 s of 2 s shared, then 1 s of 2 s shared with pool-2
    assert clock.stages["encode"].done_seconds == pytest.approx(2.0)
    clock.end("pool-2", 6.0, "tokenize", 10)
    assert clock.stages["tokenize"].done_seconds == pytest.approx(4.0)
    assert sum(s.seconds for s in clock.stages.values()) == pytest.approx(6.0)  # the wall time, once


def test_a_workers_first_report_is_its_start_up_and_its_cost_counts_from_the_next():
    clock = WorkClock(1000)
    for worker in ("pool-1", "pool-2"):  # one after the other: a tokenizer's first call builds its caches
        clock.begin(worker, 0.0 if worker == "pool-1" else 5.0, "tokenize")
        clock.end(worker, 5.0 if worker == "pool-1" else 10.0, "tokenize", 10)
    assert clock.stages["tokenize"].own() == (20, 10.0)  # nothing else yet: the start-ups are all there is
    for i in range(4):
        clock.begin("pool-1", 10.0 + i, "tokenize")
        clock.end("pool-1", 11.0 + i, "tokenize", 10)
    assert clock.stages["tokenize"].own() == (40, 4.0)
    clock.tokens = 60
    fraction, left = clock.estimate(14.0)
    assert left == pytest.approx(940 * 0.1)
    assert fraction == pytest.approx(14.0 / (14.0 + 94.0))


def test_nothing_is_known_before_the_tokenizer_reports_and_skipped_bytes_are_done():
    clock = WorkClock(100)
    clock.begin("main", 0.0, "read")
    clock.end("main", 1.0, "read", 100)
    assert clock.estimate(1.0, {"encode": 0.01}) is None  # the later stages' costs follow the tokens
    clock.skipped = 50  # an earlier attempt did half of it
    clock.begin("main", 1.0, "tokenize")
    clock.tokens += 10
    clock.end("main", 2.0, "tokenize", 50)
    fraction, left = clock.estimate(2.0, {"encode": 0.01})  # encode: 50 B at 0.01 s a token, 0.2 tokens a byte
    assert left == pytest.approx(0.1 * 2.0 / 2.0)
    assert fraction == pytest.approx(0.5 + 0.5 * 2.0 / 2.1)
    assert clock.finished == 50


def test_the_examples_in_the_docstrings_hold():
    import doctest

    assert doctest.testmod(progress).failed == 0


# ------------------------------------------------------------------------------------------------ the bar


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


def test_the_bar_follows_the_estimate_forwards_only_and_reaches_the_total_once(monkeypatch, recorded):
    values, bars = recorded
    now = [0.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(progress, "seconds_per_position", lambda *_, **__: 1e-3)

    def work(stage, seconds, nbytes=0, key=None, tokens=0):
        progress.begin(stage)
        now[0] += seconds
        progress.count("tokens", tokens)
        if key is not None:
            progress.settle(key, nbytes, stage=stage)
            progress.end(stage)
        else:
            progress.end(stage, nbytes)

    progress.start(1000, file=FakeTerminal(), command_started=0.0)
    try:
        progress.row_width(5)
        assert progress._rows_cost()["encode"] == pytest.approx(progress.ROWS_COST["encode"] * 1e-3)
        work("read", 1.0, 600)
        assert values == []  # nothing known before the tokenizer's first report
        progress.expect("a", 600)
        for _ in range(6):
            work("tokenize", 1.0, 100, tokens=100)
        assert 0 < values[-1] < 1000 and bars[0].format_dict["rate"]  # an ETA
        work("pack", 0.5, 1.0, key="a")
        work("encode", 0.5, 0.05, key="a")  # its start-up
        shown = values[-1]
        work("encode", 20.0, 0.1, key="a")  # far slower than its prior: the estimate falls, the bar holds
        assert values[-1] == shown
        work("encode", 1.0, 1.0, key="a")
        progress.advance(400)  # the rest needs no work (an earlier attempt did it)
    finally:
        bar = bars[0]
        progress.finish()
    assert values == sorted(values) and values[-1] == 1000 and values.count(1000) == 1
    assert progress._overshoot == 0 and bar.n == 1000



def test_the_bar_times_its_prior_on_rows_of_the_jobs_width_with_its_compressor(monkeypatch):
    timed = []
    monkeypatch.setattr(progress, "seconds_per_position",
                        lambda codec, features: timed.append((codec, features)) or 1e-3 * features)
    progress.start(1000, file=FakeTerminal(), command_started=0.0)
    try:
        progress.compressor("the job's codec")  # told by EncodeRows, then the width by WriteHdf5Shards
        progress.row_width(5)
        assert timed[-1] == ("the job's codec", 5)
        priors = {stage: 5e-3 * cost for stage, cost in progress.ROWS_COST.items()}
        assert progress._rows_cost() == pytest.approx(priors)
    finally:
        progress.finish()


@pytest.mark.parametrize("features", [3, 5, 6])
def test_the_priors_unit_is_a_position_of_the_jobs_rows_compressed_as_the_encoder_does(monkeypatch, features):
    """The encoder compresses a row of 3 or 6 int32 a position whole with the codec, and a VSL row's token rows
    through the codec's stream with its counting rows from pieces (compress_vsl_row, which refuses counting rows
    that are not ramps): the unit is the same work on rows of the job's width, per position."""
    from transforms.io import vsl_chunks
    from transforms.io.compressors import Codec

    codec = Codec("zlib", 3)
    whole, vsl = [], []
    real_compress, real_vsl = Codec.compress, vsl_chunks.compress_vsl_row
    monkeypatch.setattr(Codec, "compress",
                        lambda self: lambda data: whole.append((self, data)) or real_compress(self)(data))
    monkeypatch.setattr(vsl_chunks, "compress_vsl_row",
                        lambda row, lengths, c: vsl.append((row.shape, c)) or real_vsl(row, lengths, c))
    ticks = iter(range(100))
    monkeypatch.setattr(progress.time, "perf_counter", lambda: float(next(ticks)))  # every timed pass: 1 s
    assert progress.seconds_per_position(codec, features, rows=4, msl=1024, repeats=2) == 1 / (4 * 1024)
    if features == 5:
        assert whole == [] and vsl == [((5, 1024), codec)] * 8
    else:
        assert vsl == [] and [(c, len(data)) for c, data in whole] == [(codec, features * 1024 * 4)] * 8
        if features == 6:  # a DPO row's sides are different sequences, as a real pair's responses are
            assert all(data[:len(data) // 2] != data[len(data) // 2:] for _, data in whole)


def test_a_chat_encoder_call_is_reported_once_its_records_are_done_with(monkeypatch):
    """What a call of the chat encoder made is reported when the next call begins or the group ends: fitting the
    records to their rows and counting them follows the call and is part of their cost, so a group's last
    report must come after all of it (reported at once, that work would follow the group's last report)."""
    from types import SimpleNamespace

    from transforms.core.chat.batch import ChatConfig
    from transforms.stages import chat

    events = []
    monkeypatch.setattr(chat.progress, "done", lambda stage, n: events.append(("done", stage, n)))
    monkeypatch.setattr(chat.progress, "count", lambda name, n=1: events.append((name, n)))

    class Encoder:
        def encode_many(self, conversations, **kwargs):
            events.append(("encode", len(conversations)))
            return [SimpleNamespace(ids=[0] * 5) for _ in conversations]

    docs = [SimpleNamespace(values=(text,)) for text in ("ab", "cdef", "gh", "ijkl")]  # 12 characters
    for mode, row in (("Chat", 8), ("Chat_VSL", 5)):  # a Chat row is padded to 8; a VSL row's are its tokens
        events.clear()
        encoder = chat._Reporting(Encoder(), SimpleNamespace(docs=docs, progress_bytes=1200),
                                  ChatConfig(mode, 8, 0, "", ()))
        encoder.encode_many(["1", "2"])
        assert events == [("encode", 2)]  # its records are not fitted yet
        encoder.encode_many(["3"])  # records 1-2, 6 of the 12 characters: half the share
        assert events[1:] == [("tokens", 10), ("positions", 2 * row), ("done", "chat", 600), ("encode", 1)]
        encoder.flush()  # the group's end: record 3, 8 of 12 characters
        assert events[5:] == [("tokens", 5), ("positions", row), ("done", "chat", 200)]
        encoder.flush()
        assert len(events) == 8 and (encoder.reported, encoder.positions) == (800, 3 * row)


def test_normalize_reports_a_groups_share_in_slices_once_their_documents_are_normalized(monkeypatch):
    """ftfy takes a second or more on a group: its share is reported a slice of documents at a time, each slice
    once all of its documents have been normalized (the next one asked for), the whole share in the end."""
    from transforms.stages import normalize

    events = []
    monkeypatch.setattr(normalize.progress, "done", lambda stage, n: events.append((stage, n)))
    docs = list(range(40))  # slices of ceil(40 / 16) = 3 documents
    for doc in normalize._reporting(docs, 1000):
        events.append(("normalized", doc))
    assert [e for e in events if e[0] == "normalized"] == [("normalized", d) for d in docs]
    done = 0
    for at, (stage, n) in enumerate(events):
        if stage == "normalize":
            done += n
            before = sum(e[0] == "normalized" for e in events[:at])  # documents normalized by then
            assert before % 3 == 0 or before == 40
            assert done == 1000 * before // 40  # their part of the share, by count
    assert done == 1000 and sum(e[0] == "normalize" for e in events) == 14


# ---------------------------------------------------------------------------------------------- the real job


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


@pytest.fixture
def reports(monkeypatch):
    """How many times each stage reported bytes done."""
    seen = {}
    real = progress.WorkClock.done

    def done(self, worker, now, stage, nbytes):
        seen[stage] = seen.get(stage, 0) + (nbytes > 0)
        real(self, worker, now, stage, nbytes)

    monkeypatch.setattr(progress.WorkClock, "done", done)
    return seen


def _check_bar(values, bars, total, terminal):
    assert len(bars) == 1 and bars[0].total == total
    assert values == sorted(values) and len(values) > 3  # it moved, in steps, never back
    assert values[-1] == total and values.count(total) == 1  # the total exactly once: at the very end
    assert progress._overshoot == 0  # no share was cut to stay under the total
    drawn = terminal.getvalue()
    assert "tokenizing" in drawn and "100%" in drawn
    return drawn


@pytest.mark.parametrize("mode, extra", [("LMData", []), ("LMData_VSL", []),
                                         ("LMData", ["--data_splits", "train=0.6,validation=0.4"])],
                         ids=["LMData", "LMData_VSL", "splits"])
def test_the_bar_reaches_the_input_size_once_and_never_passes_it(tmp_path, monkeypatch, recorded, reports, mode,
                                                                  extra):
    values, bars = recorded
    total = _inputs(tmp_path / "in")
    terminal = FakeTerminal()
    monkeypatch.setattr("sys.stderr", terminal)
    params = run_job(_argv(tmp_path / "in", tmp_path / "out", *extra, mode=mode))
    if extra:  # a split job: its summary, and the outputs' counts added up
        assert len(params["outputs"]) == 2
        params["post-process"] = {"n_examples": sum(o["sequences"] for o in params["outputs"])}
    drawn = _check_bar(values, bars, total, terminal)
    assert set(reports) == {"read", "normalize", "tokenize", "pack", "encode"}
    assert progress._clock.stages["tokenize"].done == progress._clock.stages["encode"].done  # every byte, each
    inp, post = params["input"], params["post-process"]
    assert progress._counts["documents"] == inp["good"]
    assert progress._counts["bad"] == inp["bad"] == 3  # the broken line, the broken tar, the missing column
    assert progress._counts["sequences"] == post["n_examples"]
    assert f"sequences {post['n_examples']:,}" in drawn.rsplit("tokenizing", 1)[1]


def test_fim_rows_are_a_stage_of_their_own(tmp_path, monkeypatch, recorded, reports):
    values, bars = recorded
    inputs = require_shared(SHARED / "reference" / "inputs" / "fim")
    terminal = FakeTerminal()
    monkeypatch.setattr("sys.stderr", terminal)
    run_job(["FIM", "--input_dir", str(inputs), "--output_dir", str(tmp_path / "out"), "--tokenizer_type",
             "HuggingFaceTokenizer", "--huggingface_tokenizer", str(SHARED / "reference" / "tokenizer" / "hf"),
             "--max_seq_length", "128", "--fim_prefix_tok", "<fim_prefix>", "--fim_middle_tok", "<fim_middle>",
             "--fim_suffix_tok", "<fim_suffix>"])
    _check_bar(values, bars, sum(p.stat().st_size for p in inputs.rglob("*") if p.is_file()), terminal)
    assert {"tokenize", "pack", "fim", "encode"} <= set(reports)


def _records(mode: str) -> list[dict]:
    lines = require_shared(SHARED / "corpora" / "en_small_pd.jsonl").read_text().splitlines()
    out = []
    for line in lines[:60]:
        paragraphs = [p for p in json.loads(line)["text"].split("\n\n") if p.strip()][:5]
        if len(paragraphs) < 3:
            continue
        if mode == "DPO":
            out.append({"prompt": paragraphs[0], "chosen": paragraphs[1], "rejected": paragraphs[2]})
        else:
            roles = ("user", "assistant") * 3
            messages = [{"role": r, "content": c} for r, c in zip(roles, paragraphs[:len(paragraphs) // 2 * 2])]
            out.append({"messages": messages})
    return out


@pytest.mark.parametrize("mode", ["Chat", "Chat_VSL", "DPO"])
def test_a_chat_group_moves_the_bar_as_its_records_are_encoded(tmp_path, monkeypatch, recorded, reports, mode):
    values, bars = recorded
    monkeypatch.setattr("transforms.core.chat.batch.ENCODE_SLICE_CHARS", 4000)  # Chat: many encode_many calls
    (tmp_path / "in").mkdir()
    path = tmp_path / "in" / "a.jsonl"
    records = _records(mode)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))  # one group
    terminal = FakeTerminal()
    monkeypatch.setattr("sys.stderr", terminal)
    params = run_job([mode, "--input_dir", str(tmp_path / "in"), "--output_dir", str(tmp_path / "out"),
                      "--tokenizer_type", "HuggingFaceTokenizer", "--huggingface_tokenizer", str(require_shared(QWEN)),
                      "--max_seq_length", "2048", *(["--prompt_key", "prompt"] if mode == "DPO" else [])])
    _check_bar(values, bars, path.stat().st_size, terminal)
    assert reports["chat"] > 5  # the one group, reported as it goes
    assert progress._counts["documents"] == params["input"]["good"] == len(records)
    # Encode's prior follows the positions of the rows it compresses (padding included), once they are laid out.
    assert progress._clock.positions == params["post-process"]["n_examples"] * 2048 != progress._clock.tokens


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
