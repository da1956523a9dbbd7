"""Mixtures through the whole job: shares within the bound, every copy where the plan says, and the same bytes
whatever the order of the sources, the listing, the packing groups or the workers."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import random
from collections import Counter
from pathlib import Path

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.util import assert_that

from tests.helpers import MULTI_PROCESSING, RUNNER, SHARED, read_rows, require_shared, run_job
from transforms.core.mixture import batch_hashes, parse_mixture
from transforms.core.records import GroupId, TokenBatch

GPT2 = Path(__file__).resolve().parents[1] / "data" / "tokenizers" / "gpt2"
TOKENIZER = ["--tokenizer_type", "GPT2Tokenizer", "--vocab_file", str(GPT2 / "vocab.bpe"),
             "--encoder_file", str(GPT2 / "encoder.json")]
WEIGHTS = {"web": 0.5, "code": 0.3, "ml": 0.2}


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Path:
    """Three sources of very different sizes: web (~600k GPT-2 tokens in 3 files), code (~470k, 41 long
    documents), ml (~120k, 56 documents in many languages)."""
    root = tmp_path_factory.mktemp("mixture_sources")
    web = require_shared(SHARED / "corpora" / "en_small_pd.jsonl").read_text().splitlines(keepends=True)
    (root / "web").mkdir()
    for i in range(3):
        (root / "web" / f"part{i}.jsonl").write_text("".join(web[i::3]))
    (root / "code").mkdir()
    (root / "code" / "code.jsonl").write_text(require_shared(SHARED / "corpora" / "code_small.jsonl").read_text())
    ml = require_shared(SHARED / "corpora" / "multilingual_dev.jsonl").read_text().splitlines(keepends=True)
    (root / "ml").mkdir()
    (root / "ml" / "ml.jsonl").write_text("".join(ml[:56]))
    return root


def _mixture(root: Path, order=("web", "code", "ml"), **repeats) -> str:
    entries = {"web": {"source": str(root / "web"), "weight": WEIGHTS["web"]},
               "code": {"source": str(root / "code" / "*.jsonl"), "name": "code", "weight": WEIGHTS["code"],
                        "max_repeats": 3},
               "ml": {"source": str(root / "ml"), "weight": WEIGHTS["ml"], "max_repeats": 5}}
    for name, r in repeats.items():
        entries[name]["max_repeats"] = r
    return json.dumps([entries[name] for name in order])


def _args(mixture: str, out, *extra, mode: str = "LMData") -> list[str]:
    return [mode, "--mixture", mixture, "--output_dir", str(out), *TOKENIZER, "--max_seq_length", "256",
            "--total_tokens", "1M", "--display_pbar", "False", *extra]


def _digests(out) -> dict:
    found = {os.path.basename(p): hashlib.sha256(open(p, "rb").read()).hexdigest()
             for p in glob.glob(os.path.join(str(out), "*.h5"))}
    params = json.load(open(os.path.join(str(out), "data_params.json")))
    found["params"] = {k: params.get(k) for k in ("post-process", "files", "mixture", "h5_dataset_stats")}
    return found


def _doc_tokens(path: Path) -> list[int]:
    from transforms.core.tokenizer import shared_tokenizer
    from transforms.io.tokenizer_files import read_tokenizer_files

    tok = shared_tokenizer(read_tokenizer_files("GPT2Tokenizer", vocab_file=str(GPT2 / "vocab.bpe"),
                                                encoder_file=str(GPT2 / "encoder.json")))
    texts = [json.loads(line)["text"] for p in sorted(path.parent.glob(path.name)) for line in open(p)]
    return [len(ids) + 1 for ids in tok.encode_batch(texts)]  # + EOS, as the job counts them


@pytest.fixture(scope="module")
def job(sources, tmp_path_factory):
    out = tmp_path_factory.mktemp("mixture_job") / "out"
    return out, run_job(_args(_mixture(sources), out, "--shuffle", "True"))


def test_each_source_is_within_half_a_document_of_its_target(sources, job):
    _, params = job
    mix = params["mixture"]
    assert mix["total_tokens_target"] == 1_000_000
    largest = {"web": max(_doc_tokens(sources / "web" / "*.jsonl")), "code": max(_doc_tokens(sources / "code" /
                                                                                              "code.jsonl")),
               "ml": max(_doc_tokens(sources / "ml" / "ml.jsonl"))}
    for name, entry in mix["sources"].items():
        assert entry["target_tokens"] == round(WEIGHTS[name] * 1_000_000)
        assert abs(entry["tokens_taken"] - entry["target_tokens"]) <= largest[name] / 2, name
        # A share moves with the others' totals too: within one document (code's longest is 7% of the mixture).
        assert abs(entry["realized_share"] - WEIGHTS[name]) <= max(0.001, max(largest.values()) / mix["tokens_taken"])
    # web is cut, code cut too (0.3M of 0.47M), ml repeated (0.2M of 0.12M: once whole, then some twice).
    assert mix["sources"]["web"]["tokens_available"] > 500_000 > mix["sources"]["web"]["tokens_taken"] - 1000
    assert mix["sources"]["ml"]["whole_copies"] == 1 and mix["sources"]["ml"]["repeats"] > 0
    assert mix["sources"]["code"]["repeats"] == 0


def test_every_document_is_accounted_for_with_its_copies(job):
    _, params = job
    inp, mix = params["input"], params["mixture"]["sources"]
    assert inp["documents_read"] == sum(s["documents_available"] for s in mix.values())
    assert inp["repeats"] == sum(s["repeats"] for s in mix.values())
    assert inp["dropped_by_reason"]["not_in_mixture"] == sum(
        s["documents_available"] - s["documents_taken"] for s in mix.values())
    assert inp["good"] + inp["repeats"] == inp["used"] + inp["dropped"]
    # The rows hold the tokens taken: every one of them is an input or the last label of a row.
    rows = read_rows(job[0])
    assert len(rows) == params["post-process"]["n_examples"]
    taken = params["mixture"]["tokens_taken"]
    in_rows = int((rows[:, 1] == 1).sum())
    assert taken - len(rows) - 3 * 64 <= in_rows <= taken  # less each row's last label, dropped short rows


def test_the_bytes_do_not_depend_on_the_order_of_the_sources(sources, job, tmp_path):
    out, _ = job
    run_job(_args(_mixture(sources, order=("ml", "web", "code")), tmp_path / "o", "--shuffle", "True"))
    assert _digests(tmp_path / "o") == _digests(out)


def test_the_bytes_do_not_depend_on_packing_groups_or_work_units(sources, job, tmp_path):
    from pipelines.config import load_config
    from pipelines.job import run

    # Other packing groups give other rows (a group packs on its own), but the same draw of documents.
    config, beam_args = load_config(_args(_mixture(sources), tmp_path / "g", "--shuffle", "True",
                                          "--packing_group_mb", "1") + RUNNER)
    small = run(config, beam_args, {"unit_groups": 1})
    config, beam_args = load_config(_args(_mixture(sources), tmp_path / "u", "--shuffle", "True",
                                          "--packing_group_mb", "1") + RUNNER)
    run(config, beam_args, {"unit_groups": 3})
    assert _digests(tmp_path / "u") == _digests(tmp_path / "g")
    draws = ("tokens_taken", "documents_taken", "threshold", "repeats")
    assert {n: {k: s[k] for k in draws} for n, s in small["mixture"]["sources"].items()} == \
        {n: {k: s[k] for k in draws} for n, s in job[1]["mixture"]["sources"].items()}


@pytest.mark.worker_processes
def test_two_worker_processes_write_the_same_bytes(sources, job, tmp_path):
    run_job(_args(_mixture(sources), tmp_path / "w", "--shuffle", "True"),
            runner=MULTI_PROCESSING + ["--direct_num_workers", "2"])
    assert _digests(tmp_path / "w") == _digests(job[0])


def test_a_budget_alone_is_a_token_limit(sources, tmp_path):
    mixture = json.dumps([{"source": str(sources / "web"), "tokens": "250k"}])
    params = run_job([a for a in _args(mixture, tmp_path / "b") if a not in ("--total_tokens", "1M")])
    web = params["mixture"]["sources"]["web"]
    assert abs(web["tokens_taken"] - 250_000) <= max(_doc_tokens(sources / "web" / "*.jsonl")) / 2
    assert web["realized_share"] == 1.0 and web["whole_copies"] == 0


def test_without_a_total_the_largest_mixture_that_fits(sources, tmp_path):
    params = run_job([a for a in _args(_mixture(sources, ml=1), tmp_path / "l") if a not in ("--total_tokens", "1M")])
    mix = params["mixture"]
    ml = mix["sources"]["ml"]
    assert mix["limited_by"] == "ml" and ml["tokens_taken"] == ml["tokens_available"]
    assert mix["total_tokens_target"] == int(ml["tokens_available"] / WEIGHTS["ml"])


def test_a_share_no_source_can_give_is_a_clear_error(sources, tmp_path, capsys, caplog):
    from pipelines.create_hdf5_dataset import main

    code = main(_args(_mixture(sources, ml=1), tmp_path / "e") + RUNNER)
    assert code == 2
    assert "mixture source ml: its share is 200000 tokens of 1000000" in capsys.readouterr().err
    # One line that says what to change, not also Beam's log of the same error with its traceback.
    assert not [r for r in caplog.records if r.levelno >= 40 and "mixture source" in r.getMessage()]


def test_vsl_rows_from_a_mixture(sources, tmp_path):
    params = run_job(_args(_mixture(sources), tmp_path / "v", mode="LMData_VSL"))
    assert params["mixture"]["sources"]["ml"]["repeats"] > 0
    assert params["input"]["good"] + params["input"]["repeats"] == params["input"]["used"] + params["input"]["dropped"]


def test_the_stage_takes_each_document_as_many_times_as_the_plan_says_each_copy_in_a_group_of_its_own():
    """SelectMixture alone, on batches of known documents: copies per document, and where they go."""
    from transforms.stages.mixture import SelectMixture

    rng = np.random.default_rng(0)
    batches = []
    for f in range(4):  # files 0-1: source a; 2-3: source b (small: repeated)
        n_docs = 60 if f < 2 else 8
        docs = [(rng.integers(0, 50000, int(rng.integers(5, 300))).astype(np.int32),) for _ in range(n_docs)]
        batches.append(TokenBatch(GroupId(f, 0, f"/in/{f}.jsonl", f"src/{f}.jsonl"), docs))
    spec = parse_mixture([{"source": "a", "weight": 1}, {"source": "b", "weight": 1, "max_repeats": 10}],
                         total_tokens=sum(sum(len(d[0]) for d in b.tokens) for b in batches[:2]))
    expected = {}
    for b in batches:
        for doc, h in zip(b.tokens, batch_hashes(b.tokens, spec.seed)[0]):
            expected[doc[0].tobytes()] = int(h)

    def check(out):
        (batches_out, summaries), = out
        plan = summaries[0]["sources"]
        seen = Counter()
        names = Counter(b.group.name for b in batches_out)
        assert max(names.values()) == 1  # every group and copy: a name (and seeds) of its own
        for b in batches_out:
            ids = [d[0].tobytes() for d in b.tokens]
            assert len(set(ids)) == len(ids)  # never two copies of a document in one group
            assert b.group.copy == 0 or b.group.file_index == b.group.file_index % 4 + 4 * b.group.copy
            seen.update(ids)
        for ids, h in expected.items():
            source = "a" if any(ids == d[0].tobytes() for b in batches[:2] for d in b.tokens) else "b"
            want = plan[source]["whole_copies"] + (h < plan[source]["threshold"])
            assert seen[ids] == want
        assert plan["b"]["whole_copies"] >= 3

    with beam.Pipeline("FnApiRunner") as p:
        selected, summary = p | beam.Create(batches) | SelectMixture(spec, (0, 0, 1, 1), 4)
        both = ((selected | "AllBatches" >> beam.combiners.ToList()),
                (summary | "AllSummaries" >> beam.combiners.ToList()))
        assert_that(both[0] | "Pair" >> beam.Map(lambda b, s: (b, s), beam.pvalue.AsSingleton(both[1])), check)


@pytest.mark.parametrize("extra, message", [
    (["--input_dir", "/x"], "mixture and input_dir are both set"),
    (["--top_level_as_subsets", "True"], "mixture and subsets"),
])
def test_what_a_mixture_does_not_go_with_is_refused_before_reading(sources, tmp_path, extra, message):
    from pipelines.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=message):
        load_config(_args(_mixture(sources), tmp_path / "x", *extra))


def test_total_tokens_without_a_mixture_is_refused(tmp_path):
    from pipelines.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="total_tokens applies to a mixture"):
        load_config(["LMData", "--input_dir", str(tmp_path), *TOKENIZER, "--total_tokens", "5M"])


def test_a_mixture_from_yaml_with_a_metadata_file(sources, tmp_path):
    listing = tmp_path / "web_files.txt"
    listing.write_text("".join(f"{p}\n" for p in sorted((sources / "web").glob("*.jsonl"))))
    params_file = tmp_path / "mix.yaml"
    params_file.write_text(
        "setup:\n  data:\n    mixture:\n"
        f"      - {{source: {listing}, name: web, tokens: 100k}}\n"
        f"      - {{source: {sources / 'ml'}, tokens: 50k, max_repeats: 2}}\n")
    params = run_job(["LMData", "--params", str(params_file), "--output_dir", str(tmp_path / "y"), *TOKENIZER,
                      "--max_seq_length", "256", "--display_pbar", "False"])
    mix = params["mixture"]["sources"]
    assert set(mix) == {"web", "ml"} and mix["web"]["documents_available"] == 457
    assert abs(mix["web"]["tokens_taken"] - 100_000) <= max(_doc_tokens(sources / "web" / "*.jsonl")) / 2
    assert params["setup"]["mixture"]  # the settings, as given, in data_params.json


def test_a_210_token_limit_is_a_budget_of_its_source(sources, tmp_path):
    from tests.test_cerebras210_inputs import _config, _run_210

    config = _config(tmp_path, {"type": "local", "source": str(sources / "web")})
    config.write_text(config.read_text().replace("  max_seq_length: 64\n", "  max_seq_length: 64\n"
                                                                          "  token_limit: 120000\n"))
    params = _run_210(config)
    mix = params["mixture"]["sources"]["source"]
    assert mix["target_tokens"] == 120_000 and mix["documents_available"] == 457
    assert abs(mix["tokens_taken"] - 120_000) <= max(_doc_tokens(sources / "web" / "*.jsonl")) / 2


def test_the_example_mixture_config_runs(tmp_path, monkeypatch):
    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(root)  # its paths are the repository's
    params = run_job(["LMData", "--params", "configs/lm_data_mixture.yaml", "--output_dir", str(tmp_path / "o"),
                      "--display_pbar", "False"])
    sample = params["mixture"]["sources"]["sample"]
    assert sample["whole_copies"] == 1 and sample["repeats"] > 0
    assert abs(sample["tokens_taken"] - 250_000) < 5_000


def test_verify_checks_the_mixture_section(job, tmp_path):
    import shutil

    from pipelines.tools import verify_dataset

    out, _ = job
    result = verify_dataset(str(out))
    assert result.problems == [], result.problems
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    params = json.loads((copy / "data_params.json").read_text())
    params["mixture"]["sources"]["web"]["documents_taken"] += 1  # one more taken than the input says
    (copy / "data_params.json").write_text(json.dumps(params))
    problems = verify_dataset(str(copy)).problems
    assert any("not_in_mixture" in p for p in problems), problems


def test_a_split_job_keeps_every_copy_of_a_document_in_its_split(sources, tmp_path):
    """ml is repeated (5x allowed, once whole and then some twice): each of its documents' copies, in the rows of
    VSL's one-document segments, must all be in the one split the document's content draws."""
    from pipelines.tools import verify_dataset
    from transforms.core.tokenizer import shared_tokenizer
    from transforms.io.tokenizer_files import read_tokenizer_files

    out = tmp_path / "s"
    summary = run_job(_args(_mixture(sources), out, "--data_splits", "train=0.8,test=0.2", mode="LMData_VSL"))
    assert verify_dataset(str(out)).problems == []
    taken = [o["tokens_taken"] for o in summary["outputs"]]  # what each split took of the mixture, copies included
    assert min(taken) > 0 and sum(taken) == summary["mixture"]["tokens_taken"]
    summary["outputs"][1]["tokens_taken"] += 1
    (out / "data_params.json").write_text(json.dumps(summary))
    assert verify_dataset(str(out)).problems == [
        f"data_params.json: the outputs took {sum(taken) + 1} tokens of the mixture, its section says {sum(taken)}"]
    summary["outputs"][1]["tokens_taken"] -= 1
    (out / "data_params.json").write_text(json.dumps(summary))
    mix = summary["mixture"]["sources"]
    assert mix["ml"]["repeats"] > 0 and summary["input"]["repeats"] == sum(s["repeats"] for s in mix.values())
    tok = shared_tokenizer(read_tokenizer_files("GPT2Tokenizer", vocab_file=str(GPT2 / "vocab.bpe"),
                                                encoder_file=str(GPT2 / "encoder.json")))
    streams = {o["path"]: read_rows(out / o["path"])[:, 0].astype("<i4").tobytes() for o in summary["outputs"]}
    texts = [json.loads(line)["text"] for line in open(sources / "ml" / "ml.jsonl")]
    repeated = 0
    for ids in tok.encode_batch(texts):
        head = np.asarray(ids[:48], dtype="<i4").tobytes()  # a document's first tokens open its first segment
        found = {path: s.count(head) for path, s in streams.items() if s.count(head)}
        assert len(found) <= 1, found  # never in two splits
        repeated += sum(found.values()) > 1
    assert repeated > 0  # some documents are there twice, both times in their own split


@pytest.mark.parametrize("kill_point", ["before_the_plan", "after_groups_were_stored"])
def test_kill_and_resume_gives_the_uninterrupted_bytes(sources, job, tmp_path, kill_point):
    """Killed before the plan is made, a resumed job counts everything again; killed once groups (and their
    copies) are stored, it reads the kept plan and only the groups not stored."""
    import signal
    import sys
    import time

    from tests.helpers import ROOT, env_to_kill, popen_logged, stderr_text

    out = tmp_path / "out"
    args = _args(_mixture(sources), out, "--shuffle", "True", "--packing_group_mb", "1")
    reference = run_job(_args(_mixture(sources), tmp_path / "ref", "--shuffle", "True", "--packing_group_mb", "1"))
    proc = popen_logged([sys.executable, "-m", "pipelines.create_hdf5_dataset", *args, *RUNNER], cwd=ROOT,
                        start_new_session=True, env=env_to_kill(tmp_path))
    plan, groups = out / ".tmp" / "mixture_plan.json", out / ".tmp" / "groups"

    def copies_stored() -> list:
        return [p for p in glob.glob(str(groups / "*.json")) if _stored_copy(p)]

    ready = (lambda: glob.glob(str(out / ".tmp" / "*"))) if kill_point == "before_the_plan" else \
        (lambda: len(glob.glob(str(groups / "*.json"))) >= 2 and copies_stored())
    deadline = time.time() + 120
    while not ready():
        assert proc.poll() is None, "the job ended before the kill point: " + stderr_text(proc)
        assert time.time() < deadline
        time.sleep(0.002)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "data_params.json").exists()
    if kill_point == "after_groups_were_stored":
        assert plan.exists()
        # As if killed between a group and its copy: the copies' stored files gone, the group's kept. The group
        # must be read again (all its copies are needed), not skipped.
        for meta in copies_stored():
            for suffix in (".json", ".chunks.npy", ".offsets.npy"):
                os.remove(meta[:-len(".json")] + suffix)
    resumed = run_job(args + ["--resume_from_checkpoint", "True"])
    assert _digests(out) == _digests(tmp_path / "ref")
    assert resumed["mixture"] == reference["mixture"] and resumed["input"] == reference["input"]
    if kill_point == "after_groups_were_stored":
        assert resumed["run"]["groups_resumed"] >= 2


def _stored_copy(meta_path: str) -> bool:
    try:
        return json.loads(open(meta_path).read())["group"]["copy"] > 0
    except (OSError, ValueError, KeyError):  # being written
        return False


@pytest.mark.parametrize("mode", ["Summarization", "Summarization_VSL"])
def test_prompt_and_completion_pairs_from_a_mixture(tmp_path, mode):
    """A pair's tokens are its prompt's and completion's: a small source repeated, a large one cut, shares met."""
    from pipelines.tools import verify_dataset

    rng = random.Random(0)
    words = "the a of to and in is it that for on with as was he be by at this".split()
    for name, n in (("big", 300), ("small", 40)):
        (tmp_path / name).mkdir()
        with open(tmp_path / name / "pairs.jsonl", "w") as f:
            for _ in range(n):
                f.write(json.dumps({"prompt": " ".join(rng.choice(words) for _ in range(rng.randint(5, 60))),
                                    "completion": " ".join(rng.choice(words) for _ in range(rng.randint(3, 30)))})
                        + "\n")
    mixture = json.dumps([{"source": str(tmp_path / "big"), "weight": 0.5},
                          {"source": str(tmp_path / "small"), "weight": 0.5, "max_repeats": 10}])
    out = tmp_path / "out"
    params = run_job([mode, "--mixture", mixture, "--output_dir", str(out), *TOKENIZER, "--max_seq_length", "128",
                      "--prompt_key", "prompt", "--completion_key", "completion", "--display_pbar", "False"])
    mix = params["mixture"]["sources"]
    assert mix["small"]["whole_copies"] >= 5 and params["input"]["repeats"] > 0
    for name in ("big", "small"):
        assert abs(mix[name]["realized_share"] - 0.5) <= 100 / params["mixture"]["tokens_taken"]  # a pair < 100
    assert verify_dataset(str(out)).problems == []
