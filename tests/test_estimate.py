"""`create_hdf5_dataset estimate`: intervals that hold the truth as often as they say, and a prediction of the
job that matches the job."""

from __future__ import annotations

import hashlib
import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import RUNNER, SHARED, require_shared, run_job
from transforms.core.estimate import Interval, Stratum, by_bytes, by_coin, combine, student_t
from transforms.io.sample import WINDOW, LineDraws, _ends_in_window, _line_at, by_byte, coin_records, draw_lines, keeps

GPT2 = Path(__file__).resolve().parents[1] / "data" / "tokenizers" / "gpt2"
TOKENIZER = ["--tokenizer_type", "GPT2Tokenizer", "--vocab_file", str(GPT2 / "vocab.bpe"),
             "--encoder_file", str(GPT2 / "encoder.json")]


def test_student_t_quantiles():
    for df, t in ((4, 2.776), (5, 2.571), (10, 2.228), (30, 2.042), (120, 1.980)):
        assert student_t(df) == pytest.approx(t, rel=0.003)
    assert student_t(3) == pytest.approx(3.182, rel=0.008)
    assert student_t(math.inf) == pytest.approx(1.95996, rel=1e-4)


def test_hansen_hurwitz_is_unbiased_and_its_intervals_hold():
    rng = np.random.default_rng(0)
    sizes = rng.integers(10, 5000, 2000)
    values = (sizes * rng.uniform(0.1, 0.5, 2000)).astype(int)
    truth, total = int(values.sum()), int(sizes.sum())
    p = sizes / total
    inside, estimates = 0, []
    for _ in range(400):
        pick = rng.choice(len(sizes), 60, p=p)
        i = combine([by_bytes(total, sizes[pick], values[pick])])
        estimates.append(i.value)
        inside += i.low <= truth <= i.high
    assert abs(np.mean(estimates) - truth) < 0.01 * truth
    assert 0.92 <= inside / 400 <= 0.98


def test_hansen_hurwitz_variance_by_hand():
    """Three draws of a 12-byte file: lines of 6, 3 and 2 bytes with one record each give y = 2, 4, 6. The mean is
    4, the sample variance (n - 1 in the denominator) (4 + 0 + 4) / 2 = 4, so the mean's variance 4 / 3 with 2
    degrees of freedom. The population variance (8 / 3, then 8 / 9) narrows the interval by sqrt(2 / 3): a
    calibration test of tens of trials cannot see that, this can."""
    s = by_bytes(12, [6, 3, 2], [1, 1, 1])
    assert (s.value, s.variance, s.df) == (4.0, 4 / 3, 2)
    i = combine([s])
    assert (i.value, i.half_width) == (4.0, student_t(2) * math.sqrt(4 / 3))
    assert i.half_width == pytest.approx(4.816, abs=0.001)  # t(2) by the expansion 4.171 * 1.155
    # Two draws: y = 12 * 3 / 4 = 9 and 12 * 1 / 4 = 3: variance ((9 - 6)**2 + (3 - 6)**2) / 1 / 2 = 9, 1 df.
    assert by_bytes(12, [4, 4], [3, 1]) == Stratum(6.0, 9.0, 1)
    # One draw says nothing of its spread: as wide as its value. No draw: nothing.
    assert by_bytes(12, [4], [3]) == Stratum(9.0, 81.0, 1)
    assert by_bytes(12, [], []) == Stratum(0.0, 0.0, math.inf)


def test_horvitz_thompson_coin():
    rng = np.random.default_rng(1)
    values = rng.integers(0, 1000, 5000)
    inside = 0
    for _ in range(300):
        kept = values[rng.random(len(values)) < 0.05]
        i = combine([by_coin(kept, 0.05)])
        inside += i.low <= values.sum() <= i.high
    assert 0.92 <= inside / 300 <= 0.98
    assert combine([by_coin([1, 2, 3], 1.0)]) == Interval(6.0, 0.0)


def test_strata_add_up():
    i = combine([Stratum(10.0, 4.0, 9), Stratum(20.0, 9.0, 19)])
    assert i.value == 30.0 and i.half_width == pytest.approx(student_t(25.1) * math.sqrt(13), rel=0.01)


# ---------------------------------------------------------------- the sample (transforms.io.sample)


def _documents(path: Path, fraction: float, seed: int) -> Stratum:
    """A file's by-byte document stratum as `estimate` computes it (every drawn line a document)."""
    size = path.stat().st_size
    draws = draw_lines(str(path), size, math.ceil(fraction * size), seed, path.name)
    return by_bytes(size, draws.window_bytes, draws.window_ends)


def test_a_last_line_without_a_newline_is_a_document(tmp_path):
    """Three records, the last without a newline: 3 documents, counted in every window (each the whole file)."""
    lines = [b'{"text": "a"}', b'{"text": "' + b"b" * 200 + b'"}', b'{"text": "c"}']
    path = tmp_path / "three.jsonl"
    path.write_bytes(b"\n".join(lines))  # 240 bytes
    draws = draw_lines(str(path), 240, 12, 0, path.name)
    assert len(draws.lines) == 30  # at least _MIN_DRAWS, as the budget (5%) is less than the file
    assert draws.window_ends == [3] * 30 and draws.window_bytes == [240] * 30
    # The drawn line is the whole line, its bytes with its newline (the last has none).
    assert {(line, n) for line, n in zip(draws.lines, draws.lengths)} == {(lines[0], 14), (lines[1], 213),
                                                                          (lines[2], 13)}
    # The draws are a function of the seed and the file's identity (its relative path) alone: pinned.
    assert draws.lengths[:12] == [213, 213, 213, 213, 213, 13, 213, 213, 213, 213, 14, 213]
    assert _documents(path, 0.05, 0) == Stratum(3.0, 0.0, 29)
    assert combine([_documents(path, 0.05, 0)]) == Interval(3.0, 0.0)
    path.write_bytes(b'{"text": "only"}')  # one record, no newline at all
    assert _documents(path, 0.05, 3) == Stratum(1.0, 0.0, 29)


def test_the_offsets_spread_over_the_whole_file(tmp_path):
    """A file of 1,000 lines of 11 bytes: the lines of the first n draws are spread evenly, whatever n (each
    tenth of the file holds n / 10 of them, give or take one), where independent offsets leave tenths with
    none; each draw alone is still uniform (over 400 seeds, every tenth drawn first about as often)."""
    path = tmp_path / "even.jsonl"
    path.write_bytes(b"".join(b'{"t":%4d}\n' % i for i in range(1000)))  # line i holds bytes 11i .. 11i + 10
    draws = draw_lines(str(path), 11_000, 1100, 0, path.name)
    tenth = [int(line[5:9]) // 100 for line in draws.lines]  # which tenth of the file each drawn line is in
    for n in (10, 30, 100):
        counts = np.bincount(tenth[:n], minlength=10)
        assert counts.max() - counts.min() <= 2, (n, counts.tolist())
    firsts = np.bincount([int(draw_lines(str(path), 11_000, 11, seed, path.name).lines[0][5:9]) // 100
                          for seed in range(400)], minlength=10)
    assert firsts.min() >= 20 and firsts.max() <= 65, firsts.tolist()  # 40 expected, binomial sd 6


def test_the_document_count_of_a_file_smaller_than_the_window_is_exact(tmp_path):
    """A window wraps past the file's end to its start, so in a file smaller than WINDOW every window is the whole
    file: the count is exact, whatever the seed, the lengths and the final newline. Windows cut at the file's end
    over-counted the last lines: means of 5.8 and 9.0 for 3 records (short, uneven) over 2,000 seeds, 3.4
    for 1."""
    rng = np.random.default_rng(4)
    for n in (1, 2, 3, 40):
        body = b"\n".join(json.dumps({"text": "w" * int(rng.integers(0, 300))}).encode() for _ in range(n))
        assert len(body) < WINDOW
        for ending in (b"", b"\n"):
            path = tmp_path / "small.jsonl"
            path.write_bytes(body + ending)
            for seed in range(50):
                s = _documents(path, 0.05, seed)
                assert (s.value, s.variance) == (n, 0.0), (n, ending, seed, s)


def test_the_document_count_of_a_larger_file_is_unbiased(tmp_path):
    """A file of 2.2 windows (300 records): over 200 seeds the mean estimate is within 0.2% of the truth (the mean's
    standard error is 0.01%; it is 300.03). Windows cut at the file's end gave 301.78 here (+0.6%)."""
    rng = np.random.default_rng(0)
    path = tmp_path / "mid.jsonl"
    path.write_bytes(b"".join(json.dumps({"text": "w" * int(rng.integers(1, 200))}).encode() + b"\n"
                              for _ in range(300)))
    assert 2 * WINDOW < path.stat().st_size < 3 * WINDOW
    estimates = [_documents(path, 0.05, seed).value for seed in range(200)]
    assert abs(np.mean(estimates) - 300) < 0.002 * 300, np.mean(estimates)


def test_files_sampled_by_byte():
    assert by_byte("d/a.jsonl", False) and by_byte("d/a.jsonl", True)
    assert by_byte("d/a.txt", True) and not by_byte("d/a.txt", False)  # a .txt read a line a record, or whole
    for path in ("d/a.jsonl.zst", "d/a.json.gz", "d/a.parquet", "d/a.jsonl.zst.tar", "d/a.JSONL"):
        assert not by_byte(path, True), path


def test_draws_stop_when_their_bytes_reach_the_budget(tmp_path):
    """Four lines of 10 bytes: a budget of the whole file (no minimum of draws then) takes exactly 4 draws, one
    byte more takes 5; a budget below the file takes at least 30; max_draws caps them."""
    path = tmp_path / "four.jsonl"
    path.write_bytes(b"".join(b'{"t": %d}\n' % i for i in range(10, 14)))
    assert path.stat().st_size == 40

    def count(budget, **kw):
        draws = draw_lines(str(path), 40, budget, 5, "four.jsonl", **kw)
        assert draws.lengths == [10] * len(draws.lines) and draws.window_ends == [4] * len(draws.lines)
        return len(draws.lines)

    assert count(40, max_draws=100) == 4
    assert count(41, max_draws=100) == 5
    assert count(20, max_draws=100) == 30
    assert count(10**6, max_draws=7) == 7


def test_at_most_200000_draws(tmp_path):
    """However far the budget: a file of one byte drawn 200,000 times, not once more."""
    path = tmp_path / "x.txt"
    path.write_bytes(b"x")
    draws = draw_lines(str(path), 1, 10**9, 0, "x.txt")
    assert len(draws.lines) == 200_000 and set(draws.lines) == {b"x"} and set(draws.lengths) == {1}
    assert set(draws.window_ends) == {1} and set(draws.window_bytes) == {1}


def test_an_empty_file_gives_no_draws(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    assert draw_lines(str(path), 0, 100, 0, "empty.jsonl") == LineDraws(0, [], [], [], [])


def test_every_offset_gives_its_whole_line(tmp_path):
    """Empty lines, a line at the file's start and one at its end without a newline: each byte's line, exactly,
    and every window (the whole file, from any offset) counts the 5 lines."""
    data = b"\nab\n\ncd\nefg"
    path = tmp_path / "lines.txt"
    path.write_bytes(data)
    expected = [(b"", 1), (b"ab", 3), (b"ab", 3), (b"ab", 3), (b"", 1), (b"cd", 3), (b"cd", 3), (b"cd", 3),
                (b"efg", 3), (b"efg", 3), (b"efg", 3)]
    with open(path, "rb") as fh:
        assert [_line_at(fh, offset) for offset in range(len(data))] == expected
        assert [_ends_in_window(fh, len(data), offset, len(data)) for offset in range(len(data))] == [5] * 11
    draws = draw_lines(str(path), len(data), 10**4, 1, "lines.txt")
    assert set(zip(draws.lines, draws.lengths)) == set(expected)


def test_lines_longer_than_a_read_and_windows_that_wrap(tmp_path):
    """Lines of 150,000 and 70,000 bytes (several 64 KiB reads back and forth), the last without a newline; the
    16 KiB windows of a file this size wrap from its end to its start."""
    short, long, last = b"s" * 5, b"L" * 150_000, b"T" * 70_000
    data = short + b"\n" + long + b"\n" + last
    size = len(data)  # 220,007
    path = tmp_path / "long.txt"
    path.write_bytes(data)
    at_long, at_last = len(short) + 1, len(short) + len(long) + 2  # where the long and the last lines start
    cases = {0: (short, 6), 5: (short, 6), at_long: (long, 150_001), at_long + 1: (long, 150_001),
             at_long + 100_000: (long, 150_001), at_last - 1: (long, 150_001), at_last: (last, 70_000),
             at_last + 66_000: (last, 70_000), size - 1: (last, 70_000)}
    with open(path, "rb") as fh:
        assert {offset: _line_at(fh, offset) for offset in cases} == cases
        ends = {offset: _ends_in_window(fh, size, offset, WINDOW)
                for offset in (0, at_long, at_last - 10, at_last, size - 10, size - WINDOW, size - WINDOW - 1)}
    # From the start: the short line's end. Inside a long line: none, or its end. The last line ends at the file's
    # end; a window wrapping past it also holds the short line's end; one ending a byte before the end holds none.
    assert ends == {0: 1, at_long: 0, at_last - 10: 1, at_last: 0, size - 10: 2, size - WINDOW: 1,
                    size - WINDOW - 1: 0}


def test_a_drawn_line_reads_its_neighbourhood_not_the_file(tmp_path):
    """Only the drawn lines are read (a 1% sample of a terabyte reads about 1% of it): finding a short line in the
    middle of 1 MB reads at most a 64 KiB block back and one forward, not the rest of the file."""
    data = b"".join(b"%099d\n" % i for i in range(10_000))  # 1,000,000 bytes of 100-byte lines
    path = tmp_path / "big.txt"
    path.write_bytes(data)

    class Counting:
        def __init__(self, fh):
            self.fh, self.read_bytes = fh, 0

        def seek(self, offset):
            return self.fh.seek(offset)

        def read(self, n=-1):
            got = self.fh.read(n)
            self.read_bytes += len(got)
            return got

    with open(path, "rb") as fh:
        counting = Counting(fh)
        assert _line_at(counting, 500_050) == (b"%099d" % 5000, 100)
        assert counting.read_bytes <= 2 * 65536


def test_records_kept_by_a_coin_in_proportion_to_their_size(tmp_path):
    """A record of s characters is kept with p = min(1, fraction * s / m), m the mean size so far (this one
    included; an empty first record: the fraction itself), at least 1e-9; bad and too long records never. Its
    coin is `keeps` of the seed, the file's identity and its place."""
    texts = ["", "a" * 10, "b" * 30, 5, "c" * 20, "d" * 200, "e" * 400, "f" * 2000, "h" * 4000, "g", ""]
    path = tmp_path / "coin.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    f = 0.25
    p = [0.25, f * 10 * 2 / 10, f * 30 * 3 / 40, 0.0, f * 20 * 4 / 60, f * 200 * 5 / 260, f * 400 * 6 / 660,
         1.0, 0.0, f * 1 * 8 / 2661, 1e-9]  # "f" * 2000 would be 1.32; "h" * 4000 is too long (3000 bytes at most)
    assert p[1:3] == [0.5, 0.5625]
    kept = [0] * len(texts)
    for seed in range(200):
        got = list(coin_records(str(path), ("text",), f, seed, "coin.jsonl", max_record_bytes=3000))
        assert [type(r).__name__ for _, r in got] == ["Document"] * 3 + ["BadRecord"] + ["Document"] * 4 + [
            "BadRecord"] + ["Document"] * 2
        assert [got[i][1].reason for i in (3, 8)] == ["not_a_string", "too_long"]
        for i, (q, _) in enumerate(got):
            assert q == (p[i] if p[i] and keeps(seed, "coin.jsonl", i, p[i]) else 0.0), (seed, i, q)
            kept[i] += q > 0
    assert kept == [55, 98, 121, 0, 71, 194, 183, 200, 0, 0, 0]  # about 200 p (50, 100, 112, 0, 67, 192, 182, 200)
    assert [q for q, _ in coin_records(str(path), ("text",), f, 3, "coin.jsonl", max_record_bytes=3000)] == [
        0.25, 0.5, 0.5625, 0.0, f * 20 * 4 / 60, f * 200 * 5 / 260, f * 400 * 6 / 660, 1.0, 0.0, 0.0, 0.0]


def test_a_txt_file_is_one_record_unless_read_a_line_a_record(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("line one\nline two\n")
    whole = list(coin_records(str(path), ("text",), 1.0, 0, "t.txt"))
    assert [(q, r.values) for q, r in whole] == [(1.0, ("line one\nline two\n",))]
    lines = list(coin_records(str(path), ("text",), 1.0, 0, "t.txt", txt_lines=True))
    assert [(q, r.values) for q, r in lines] == [(1.0, ("line one",)), (1.0, ("line two",))]


def test_the_coin_keeps_hashes_below_the_fraction():
    """Kept when the keyed hash (8 bytes of blake2b, big-endian) is below fraction * 2**64: a share `fraction` of
    the records, and a hash exactly at the boundary is not below it."""
    assert sum(keeps(0, "f.jsonl", i, 0.3) for i in range(10_000)) == 3031
    assert [i for i in range(20) if keeps(0, "f.jsonl", i, 0.3)] == [9, 10, 15, 18, 19]
    assert not any(keeps(0, "f.jsonl", i, 0.0) for i in range(1000))
    assert all(keeps(0, "f.jsonl", i, 1.0) for i in range(1000))
    h = int.from_bytes(hashlib.blake2b(b"0:f.jsonl:1646", digest_size=8).digest(), "big")
    assert h == 13485751820839643136 and h % 2048 == 0  # exactly a float: the boundary is a fraction
    assert not keeps(0, "f.jsonl", 1646, h / 2**64)
    assert keeps(0, "f.jsonl", 1646, (h + 2048) / 2**64)


# ---------------------------------------------------------------- estimates of whole jobs


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Three real corpora (English books, code, 50 languages): three .jsonl files and one .jsonl.zst."""
    import zstandard

    root = tmp_path_factory.mktemp("estimate_corpus")
    en = require_shared(SHARED / "corpora" / "en_small_pd.jsonl").read_bytes().splitlines(keepends=True)
    (root / "en_a.jsonl").write_bytes(b"".join(en[::2]))
    (root / "en_b.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(b"".join(en[1::2])))
    (root / "code.jsonl").write_bytes(require_shared(SHARED / "corpora" / "code_small.jsonl").read_bytes())
    (root / "ml.jsonl").write_bytes(require_shared(SHARED / "corpora" / "multilingual_dev.jsonl").read_bytes())
    return root


def _truth(corpus: Path) -> int:
    from pipelines.config import load_config
    from pipelines.plan import plan_job
    from pipelines.estimate import _Tokens
    from transforms.core.records import Document
    from transforms.io.readers import read_records

    config, _ = load_config(["LMData", "--input_dir", str(corpus), *TOKENIZER])
    plan = plan_job(config)
    docs = [r for f in plan.files for r in read_records(f.path, plan.keys) if isinstance(r, Document)]
    return sum(_Tokens(plan)(docs))


def test_the_token_interval_holds_the_truth_as_often_as_it_says(corpus):
    """40 seeded samples of 5% (a few hundred kilobytes): the printed 95% interval holds the true token count in
    at least 90% of them (the bench corpora at 1%: `make bench`)."""
    from pipelines.config import load_config
    from pipelines.estimate import estimate

    truth = _truth(corpus)
    config, _ = load_config(["LMData", "--input_dir", str(corpus), "--output_dir", str(corpus / "never"),
                             *TOKENIZER])
    hits, widths = 0, []
    for seed in range(40):
        e = estimate(config, "5%", seed, job=False)
        hits += e.tokens.low <= truth <= e.tokens.high
        widths.append(e.tokens.relative)
    assert hits >= 36, (hits, truth)
    assert max(widths) < 0.25
    assert not (corpus / "never").exists()


def _near(interval: Interval, truth: float) -> bool:
    """One run: the truth within twice the 95% half-width (3.9 standard errors: a miss once in 10,000 runs); the
    95% intervals themselves are calibrated over many runs above."""
    return abs(interval.value - truth) <= 2 * interval.half_width


def test_the_prediction_matches_the_job(corpus, tmp_path):
    from pipelines.config import load_config
    from pipelines.estimate import estimate, render

    args = ["LMData", "--input_dir", str(corpus), "--output_dir", str(tmp_path / "out"), *TOKENIZER,
            "--max_seq_length", "256"]
    config, _ = load_config(args)
    e = estimate(config, "20%", 0)
    text = render(e, "LMData")
    assert "tokens" in text and "vCPU-hours" in text and "nothing was written" in text
    assert not (tmp_path / "out").exists()
    params = run_job(args + ["--display_pbar", "False"])
    post = params["post-process"]
    for name, interval, true in (("rows", e.rows, post["n_examples"]),
                                 ("loss-valid tokens", e.loss_valid_tokens, post["loss_valid_tokens"])):
        assert _near(interval, true), (name, interval, true)
    assert _near(e.documents, params["input"]["documents_read"])
    disk = sum(p.stat().st_size for p in (tmp_path / "out").glob("*.h5"))
    assert _near(e.bytes_on_disk, disk), (e.bytes_on_disk, disk)


def test_estimate_on_the_command_line(corpus, capsys):
    from pipelines.create_hdf5_dataset import main

    assert main(["estimate", "LMData", "--input_dir", str(corpus), *TOKENIZER, "--sample", "2MB",
                 "--sample_seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "estimate of the LMData job" in out and "note: en_b.jsonl.zst: read whole" in out
    assert main(["estimate", "LMData", "--input_dir", str(corpus), *TOKENIZER, "--sample", "lots"]) == 2
    assert main(["estimate", "--help"]) == 0


def test_a_mixtures_availability_and_largest_total(corpus, tmp_path):
    from pipelines.config import load_config
    from pipelines.estimate import estimate

    mixture = json.dumps([{"source": str(corpus / "en_*.jsonl"), "name": "en", "weight": 0.5},
                          {"source": str(corpus / "code.jsonl"), "name": "code", "weight": 0.5}])
    config, _ = load_config(["LMData", "--mixture", mixture, "--output_dir", str(tmp_path / "o"), *TOKENIZER])
    e = estimate(config, "20%", 0)
    assert set(e.per_source) == {"en", "code"}
    real = run_job(["LMData", "--mixture", mixture, "--output_dir", str(tmp_path / "r"), *TOKENIZER,
                    "--display_pbar", "False"])["mixture"]
    for name, interval in e.per_source.items():
        assert _near(interval, real["sources"][name]["tokens_available"]), name
    assert _near(e.mixture_total, real["total_tokens_target"])


@pytest.mark.parametrize("mode", ["Chat", "DPO"])
def test_chat_records_are_counted_as_their_template_renders_them(tmp_path, mode):
    """Conversations (a .jsonl drawn by byte and a .jsonl.zst kept by coin), some too long for a row, some refused
    by the reader's check: the estimate's tokens are the template's tokens of the records the job keeps."""
    import zstandard

    from pipelines.config import load_config
    from pipelines.estimate import estimate

    qwen = require_shared(SHARED / "tokenizers" / "qwen2.5-instruct")
    rng = np.random.default_rng(5)
    words = ["alpha", "βeta", "γάμμα", "delta", "日本語", "naïve", "x", "the", "of", "and"]

    def text(lo, hi):
        return " ".join(rng.choice(words, int(rng.integers(lo, hi))))

    lines = []
    for i in range(1500):
        if mode == "DPO":
            record = {"prompt": text(2, 40), "chosen": text(1, 30), "rejected": "no " + text(1, 30)}
        else:
            record = {"messages": [m for t in range(int(rng.integers(1, 4))) for m in (
                {"role": "user", "content": text(1, 30 if i % 9 else 300)},
                {"role": "assistant", "content": text(1, 30)})]}
        if i % 50 == 7:  # refused by the reader's check: a role the template does not know / no chosen side
            record = {"messages": [{"role": "narrator", "content": "x"}]} if mode == "Chat" else {"prompt": "q"}
        lines.append(json.dumps(record, ensure_ascii=False).encode() + b"\n")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_bytes(b"".join(lines[::2]))
    (tmp_path / "in" / "b.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(b"".join(lines[1::2])))
    common = ["--tokenizer_type", "HuggingFaceTokenizer", "--huggingface_tokenizer", str(qwen),
              "--max_seq_length", "256", *(["--prompt_key", "prompt"] if mode == "DPO" else [])]
    config, _ = load_config([mode, "--input_dir", str(tmp_path / "in"), "--output_dir", str(tmp_path / "never"),
                             *common])
    e = estimate(config, "25%", 0)
    assert not (tmp_path / "never").exists()
    # The truth: a one-source mixture counts exactly the tokens of the records it could take.
    mixture = json.dumps([{"source": str(tmp_path / "in"), "weight": 1}])
    params = run_job([mode, "--mixture", mixture, "--output_dir", str(tmp_path / "out"), *common,
                      "--display_pbar", "False"])
    inp = params["input"]
    assert inp["bad"] > 0 and (mode == "DPO" or inp["dropped_by_reason"]["too_long"] > 0)
    truth = sum(s["tokens_available"] for s in params["mixture"]["sources"].values())
    assert _near(e.tokens, truth), (e.tokens, truth)
    assert _near(e.documents, inp["good"]), (e.documents, inp)
    assert _near(e.rows, params["post-process"]["n_examples"]), (e.rows, params["post-process"])
    assert e.tokens.relative < 0.2
