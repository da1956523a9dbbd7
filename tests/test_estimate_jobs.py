"""`estimate` predicts what the job writes (issue #44), not only what it reads: a mixture's mixed output (its plan
run on the sample's availabilities, the sample job mixed as the job will be, the plan's error propagated to the
intervals), and each output of a split job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import SHARED, require_shared, run_job

GPT2 = Path(__file__).resolve().parents[1] / "data" / "tokenizers" / "gpt2"
TOKENIZER = ["--tokenizer_type", "GPT2Tokenizer", "--vocab_file", str(GPT2 / "vocab.bpe"),
             "--encoder_file", str(GPT2 / "encoder.json")]
SEEDS = range(5)


@pytest.fixture(scope="module")
def three_sources(tmp_path_factory) -> tuple[Path, list]:
    """English prose (~594k GPT-2 tokens) upsampled a little, 12 code files (~147k) upsampled 2.5 times, and 50
    languages (~1.18M) cut to a fifth: weights 0.5 / 0.3 / 0.2 of 1.2M tokens, as issue #44's case."""
    root = tmp_path_factory.mktemp("estimate_mixture")
    (root / "prose.jsonl").write_bytes(require_shared(SHARED / "corpora" / "en_small_pd.jsonl").read_bytes())
    code = require_shared(SHARED / "corpora" / "code_small.jsonl").read_bytes().splitlines(keepends=True)
    (root / "code.jsonl").write_bytes(b"".join(code[:12]))
    (root / "ml.jsonl").write_bytes(require_shared(SHARED / "corpora" / "multilingual_dev.jsonl").read_bytes())
    mixture = [{"source": str(root / "prose.jsonl"), "name": "prose", "weight": 0.5, "max_repeats": 4},
               {"source": str(root / "code.jsonl"), "name": "code", "weight": 0.3, "max_repeats": 4},
               {"source": str(root / "ml.jsonl"), "name": "ml", "weight": 0.2}]
    return root, mixture


def _args(mixture: list, out: Path, *more: str) -> list[str]:
    return ["LMData", "--mixture", json.dumps(mixture), "--output_dir", str(out), *TOKENIZER,
            "--max_seq_length", "512", *more]


def test_a_mixture_is_predicted_as_mixed(three_sources, tmp_path):
    """The intervals hold the real job's taken tokens, rows, documents used, loss-valid tokens and each source's
    repeats in at least 4 of 5 seeded 1% samples; with total_tokens the token total is the plan's, within a
    document per source."""
    from pipelines.config import load_config
    from pipelines.estimate import estimate, render

    _, mixture = three_sources
    args = _args(mixture, tmp_path / "out", "--total_tokens", "1.2M")
    real = run_job(args + ["--display_pbar", "False"])
    sources = real["mixture"]["sources"]
    assert sources["ml"]["tokens_taken"] < sources["ml"]["tokens_available"]  # cut
    assert sources["code"]["repeats"] > 0 and sources["prose"]["repeats"] > 0  # upsampled
    truth = {"tokens": real["mixture"]["tokens_taken"], "rows": real["post-process"]["n_examples"],
             "documents used": real["input"]["used"], "loss-valid": real["post-process"]["loss_valid_tokens"]}
    config, _ = load_config(args)
    hits = {name: 0 for name in [*truth, *(f"repeats {s}" for s in sources)]}
    for seed in SEEDS:
        e = estimate(config, "1%", seed)
        assert e.tokens.value == 1_200_000  # the plan's targets add up to total_tokens
        got = {"tokens": e.tokens, "rows": e.rows, "documents used": e.mixture.documents,
               "loss-valid": e.loss_valid_tokens}
        for p in e.mixture.sources:
            got[f"repeats {p.name}"] = p.repeats
            truth[f"repeats {p.name}"] = sources[p.name]["repeats"]
        for name, interval in got.items():
            hits[name] += interval.low <= truth[name] <= interval.high
    assert all(n >= 4 for n in hits.values()), (hits, truth)
    text = render(e, "LMData")
    assert "taken by the mixture (total_tokens 1,200,000" in text and "source code" in text and "repeats" in text


def test_the_largest_mixture_is_predicted_with_its_plan(three_sources, tmp_path):
    """Without total_tokens the total is what the limiting source's max_repeats allows, itself estimated: the
    interval of the taken tokens holds the real job's."""
    from pipelines.config import load_config
    from pipelines.estimate import estimate

    _, mixture = three_sources
    mixture = [{**m, "max_repeats": 2} if m["name"] == "code" else m for m in mixture]
    args = _args(mixture, tmp_path / "out")
    real = run_job(args + ["--display_pbar", "False"])
    config, _ = load_config(args)
    hits = 0
    for seed in SEEDS:
        e = estimate(config, "1%", seed)
        assert e.mixture.limited_by == real["mixture"]["limited_by"] == "code"
        hits += e.tokens.low <= real["mixture"]["tokens_taken"] <= e.tokens.high
        assert e.tokens.relative > 0.005  # the availability's error reaches the total
    assert hits >= 4


def test_each_output_of_a_split_job_is_predicted(three_sources, tmp_path):
    """Two splits times two context lengths: each output's documents, rows and loss-valid tokens inside its
    printed interval in at least 4 of 5 seeded 5% samples (the rows at each output's own max_seq_length), and so
    the bytes on disk of them all (the sample job's rows told apart by document in each of its four outputs)."""
    from pipelines.config import load_config
    from pipelines.estimate import estimate, render

    root, _ = three_sources
    args = ["LMData", "--input_dir", str(root), "--output_dir", str(tmp_path / "out"), *TOKENIZER,
            "--data_splits", "train=0.8,test=0.2", "--context_splits", "256=1,1024=1"]
    real = {o["path"]: o for o in run_job(args + ["--display_pbar", "False"])["outputs"]}
    disk = sum(p.stat().st_size for p in (tmp_path / "out").rglob("*.h5"))
    config, _ = load_config(args)
    hits: dict = {}
    for seed in SEEDS:
        e = estimate(config, "5%", seed)
        hits["bytes"] = hits.get("bytes", 0) + (e.bytes_on_disk.low <= disk <= e.bytes_on_disk.high)
        assert [o.path for o in e.outputs] == ["train/msl_256", "train/msl_1024", "test/msl_256", "test/msl_1024"]
        _count_output_hits(e, real, hits)
    assert all(n >= 4 for n in hits.values()), hits
    assert "output test/msl_1024" in render(e, "LMData")


def test_each_output_of_a_split_mixture_is_predicted(three_sources, tmp_path):
    """A mixture split train 0.8 / test 0.2, each at two context lengths: the split routes documents before the
    mixture draws, so each output holds its fraction of the mixed output, copies going with their document. Each
    output's documents, tokens taken, rows and loss-valid tokens inside its printed interval in at least 4 of 5
    seeded 1% samples; the outputs' tokens add up to the mixture's, and no output is predicted more loss-valid
    tokens than tokens (rows and loss-valid tokens per token are the sample job's over what its outputs took, not
    over their fractions asked: a 1% sample's outputs stray far from those)."""
    from pipelines.config import load_config
    from pipelines.estimate import estimate, render

    _, mixture = three_sources
    args = [a for a in _args(mixture, tmp_path / "out", "--total_tokens", "1.2M", "--data_splits",
                             "train=0.8,test=0.2", "--context_splits", "256=1,1024=1")]
    del args[args.index("--max_seq_length"):args.index("--max_seq_length") + 2]  # the context splits give them
    params = run_job(args + ["--display_pbar", "False"])
    real = {o["path"]: o for o in params["outputs"]}
    assert sum(o["tokens_taken"] for o in real.values()) == params["mixture"]["tokens_taken"]
    config, _ = load_config(args)
    hits: dict = {}
    for seed in SEEDS:
        e = estimate(config, "1%", seed)
        assert [o.path for o in e.outputs] == ["train/msl_256", "train/msl_1024", "test/msl_256", "test/msl_1024"]
        _count_output_hits(e, real, hits)
        for o in e.outputs:
            hits[o.path, "tokens"] = hits.get((o.path, "tokens"), 0) + (
                o.tokens.low <= real[o.path]["tokens_taken"] <= o.tokens.high)
            assert o.loss_valid_tokens.value <= o.tokens.value, o
        assert sum(o.tokens.value for o in e.outputs) == pytest.approx(e.tokens.value)
    assert all(n >= 4 for n in hits.values()), hits
    text = render(e, "LMData")
    assert "output test/msl_1024" in text


def _count_output_hits(e, real: dict, hits: dict) -> None:
    """Per output and quantity, one more hit where the estimate's interval holds the job's figure."""
    for o in e.outputs:
        truth = real[o.path]
        for name, interval, value in (("documents", o.documents, truth["documents"]),
                                      ("rows", o.rows, truth["sequences"]),
                                      ("loss-valid", o.loss_valid_tokens, truth["loss_valid_tokens"])):
            hits[o.path, name] = hits.get((o.path, name), 0) + (interval.low <= value <= interval.high)


def test_a_mixture_that_cannot_be_made_is_the_jobs_error_not_a_traceback(three_sources, tmp_path, capsys):
    """Code's 12 files cannot give 30% of 2M tokens within max_repeats 4: the estimate says what the job says."""
    from pipelines.estimate import main

    _, mixture = three_sources
    assert main(_args(mixture, tmp_path / "never", "--total_tokens", "2M")) == 2
    said = capsys.readouterr().err
    assert said.startswith("create_hdf5_dataset estimate: error: mixture source code: its share is 600000 tokens "
                           "of 2000000, but it has ")
    assert said.rstrip().endswith("(at the tokens the sample estimates)") and "Traceback" not in said
