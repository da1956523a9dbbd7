"""data_params.json without a pipeline (transforms/io/manifest.py, transforms/stages/manifest.py): what it holds,
and when it refuses to be written.

The rules, from the README's data_params.json section and the module's description: the sections given, the
features, the post-process, h5_dataset_stats and input sections recounted from the rows written (which must be
the rows the committed files hold), rows dropped and chat counts only when there are any, the files in index
order, the run section with the stages' time (counters in milliseconds plus each file's seconds) and the groups
resumed; the accounting checked, dead letters included; the file written last (after every shard), the scratch
space removed. A split job's summary lists each output with the fractions asked and obtained of its subset.
"""

from __future__ import annotations

import json
import os
from collections import Counter

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from transforms.core.features import DPO_FEATURES, LM_FEATURES, VSL_FEATURES
from transforms.core.splits import Output
from transforms.core.stats import ENCODER_CHECK, H5_ROWS, ROLE_TOKENS, ROLE_TRAINED, ROWS_DROPPED, Stats
from transforms.core.tokenizer.fast import CHECK_FIELDS
from transforms.core.timing import TIME_PREFIX
from transforms.io import fs
from transforms.io.hdf5_sink import ShardResult
from transforms.io.manifest import PARAMS_FILE, STAGES, build_params, build_summary, finalize, finalize_split
from transforms.stages.manifest import MergeStats, WriteDatasetParams, WriteSplitParams

IDS = {"eos_id": 2, "pad_id": 0, "vocab_size": 50}


def _stats(*, read=10, bad=1, used=7, dropped=2, rows=5, source="/in/a.jsonl", **more) -> Stats:
    """A job's counts that add up: read = good + bad, good = used + dropped; `rows` rows written."""
    s = Stats()
    s.add("docs_read", read, source)
    s.add("docs_good", read - bad, source)
    s.add("bad.json_decode", bad, source)
    s.add("docs_used", used, source)
    s.add("dropped.too_short", dropped, source)
    s.add("raw_chars", 1000, source)
    s.add("raw_bytes", 1100, source)
    for name, value in {"num_sequences": rows, "num_tokens": rows * 8, "loss_valid_tokens": rows * 6,
                        "num_masked_tokens": rows * 2, "non_pad_tokens": rows * 7, "num_pad_tokens": rows,
                        "detokenized_chars": rows * 30, "detokenized_bytes": rows * 31}.items():
        s.add(H5_ROWS + name, value)
    for name, value in more.items():
        s.add(name, value)
    return s


def _shards(*sizes, seconds=None, part=None) -> list:
    return [ShardResult(i, f"examples_{i:05d}.h5", n, dict(seconds or {}), part) for i, n in enumerate(sizes)]


# ---------------------------------------------------------------- MergeStats


def test_merge_stats_sums_every_counter_in_any_grouping():
    a, b, c = _stats(read=3, bad=0, used=3, dropped=0, rows=1), _stats(read=5, source="/in/b.jsonl"), Stats()
    fn = MergeStats()
    one = fn.extract_output(fn.add_input(fn.add_input(fn.add_input(fn.create_accumulator(), a), b), c))
    left = fn.add_input(fn.create_accumulator(), a)
    right = fn.add_input(fn.add_input(fn.create_accumulator(), c), b)
    two = fn.extract_output(fn.merge_accumulators([left, right]))
    assert one.totals == two.totals and one.sources == two.sources
    assert one["docs_read"] == 8 and one[H5_ROWS + "num_sequences"] == 6
    assert one.sources["/in/b.jsonl"]["docs_read"] == 5 and one.sources["/in/a.jsonl"]["docs_read"] == 3
    assert fn.extract_output(fn.create_accumulator()).totals == Counter()


# ---------------------------------------------------------------- build_params


def test_params_hold_every_section_recounted():
    stats = _stats()
    sections = {"setup": {"mode": "LMData"}, "dataset": {"max_seq_length": 8}}
    params = build_params(_shards(3, 2), stats, sections, extra={"config_fingerprint": "abc"}, **IDS)
    assert params["setup"] == {"mode": "LMData"} and params["dataset"] == {"max_seq_length": 8}
    assert params["setup"] is not sections["setup"]  # copies: the caller's sections stay as they are
    assert params["config_fingerprint"] == "abc"
    assert params["features"] == ["input_ids", "attention_mask", "labels"]
    post = params["post-process"]
    assert (post["n_examples"], post["num_tokens"], post["loss_valid_tokens"]) == (5, 40, 30)
    assert (post["eos_id"], post["pad_id"], post["vocab_size"]) == (2, 0, 50)
    assert (post["processed_files"], post["discarded_files"], post["successful_files"]) == (9, 2, 7)
    assert "num_sequences_before_packing" not in post
    assert params["h5_dataset_stats"] == {"detokenized_bytes": 155, "detokenized_chars": 150,
                                          "loss_valid_tokens": 30, "non_pad_tokens": 35, "num_sequences": 5,
                                          "num_tokens": 40}
    assert params["input"]["documents_read"] == 10 and params["input"]["bad_by_reason"] == {"json_decode": 1}
    assert params["input"]["per_source"]["/in/a.jsonl"]["used"] == 7
    assert params["files"] == {"examples_00000.h5": 3, "examples_00001.h5": 2}
    assert "rows_dropped_by_reason" not in params and "chat" not in params


def test_vsl_and_dpo_features():
    stats = _stats()
    stats.add(H5_ROWS + "num_segments", 12)
    vsl = build_params(_shards(5), stats, {}, extra={}, features=VSL_FEATURES, **IDS)
    assert vsl["features"] == list(VSL_FEATURES)
    assert vsl["post-process"]["num_sequences_before_packing"] == 12
    assert vsl["post-process"]["vsl_packing_factor"] == 2.4
    dpo = build_params(_shards(5), stats, {}, extra={}, features=DPO_FEATURES, **IDS)
    assert dpo["features"] == list(DPO_FEATURES) and "vsl_packing_factor" not in dpo["post-process"]
    assert build_params(_shards(5), stats, {}, extra={}, features=list(VSL_FEATURES), **IDS)["post-process"][
        "num_sequences_before_packing"] == 12  # any sequence of the five names


def test_files_are_listed_by_index():
    shards = [ShardResult(2, "x_00002.h5", 1, {}), ShardResult(0, "x_00000.h5", 3, {}),
              ShardResult(1, "x_00001.h5", 1, {})]
    params = build_params(shards, _stats(), {}, extra={}, **IDS)
    assert list(params["files"].items()) == [("x_00000.h5", 3), ("x_00001.h5", 1), ("x_00002.h5", 1)]


def test_rows_in_files_must_be_the_rows_encoded():
    with pytest.raises(RuntimeError, match=r"^6 rows in the committed files, but 5 were encoded$"):
        build_params(_shards(3, 3), _stats(), {}, extra={}, **IDS)
    with pytest.raises(RuntimeError, match=r"^0 rows in the committed files, but 5 were encoded$"):
        build_params([], _stats(), {}, extra={}, **IDS)


def test_dropped_rows_and_chat_counts_appear_when_there_are_any():
    stats = _stats(**{ROWS_DROPPED + "fim_without_loss": 2, ROWS_DROPPED + "too_long": 1,
                      ROLE_TOKENS + "assistant": 20, ROLE_TOKENS + "user": 9, ROLE_TRAINED + "assistant": 18})
    params = build_params(_shards(5), stats, {}, extra={}, **IDS)
    assert params["rows_dropped_by_reason"] == {"fim_without_loss": 2, "too_long": 1}
    assert params["chat"] == {"tokens_by_role": {"assistant": 20, "user": 9},
                              "loss_valid_tokens_by_role": {"assistant": 18}}


def test_the_encoders_cross_check_is_recorded_with_every_field():
    """fastokens' in-job check (README, Encoding): every field, zeros included, beside the tokenizer's record."""
    assert {"texts", "checked", "mismatches"} <= set(CHECK_FIELDS)
    stats = _stats(**{ENCODER_CHECK + "texts": 64, ENCODER_CHECK + "checked": 1})
    extra = {"tokenizer": {"type": "GPT2Tokenizer", "encoder": "fastokens"}}
    params = build_params(_shards(5), stats, {}, extra=extra, **IDS)
    assert params["tokenizer"] == {"type": "GPT2Tokenizer", "encoder": "fastokens",
                                   "cross_check": {name: {"texts": 64, "checked": 1}.get(name, 0)
                                                   for name in CHECK_FIELDS}}
    assert list(params["tokenizer"]["cross_check"]) == list(CHECK_FIELDS)
    assert extra == {"tokenizer": {"type": "GPT2Tokenizer", "encoder": "fastokens"}}  # not changed
    assert "tokenizer" not in build_params(_shards(5), _stats(), {}, extra={}, **IDS)  # no check, no record
    alone = build_params(_shards(5), stats, {}, extra={}, **IDS)["tokenizer"]  # without a tokenizer record
    assert list(alone) == ["cross_check"] and alone["cross_check"]["texts"] == 64


def test_the_run_section_times_every_stage():
    stats = _stats(**{TIME_PREFIX + "read": 1500, TIME_PREFIX + "tokenize": 12345, TIME_PREFIX + "shuffle": 100,
                      TIME_PREFIX + "unknown_stage": 999})
    shards = _shards(3, 2, seconds={"shuffle": 10.0, "write": 2.5})
    extra = {"run": {"started_at": "2026-11-24T00:00:00Z", "beam_version": "x"}}
    params = build_params(shards, stats, {}, extra=extra, **IDS)
    assert params["run"] == {"started_at": "2026-11-24T00:00:00Z", "beam_version": "x",
                             "stage_seconds": {"read": 1.5, "tokenize": 12.35, "shuffle": 20.1, "write": 5.0}}
    assert list(params["run"]["stage_seconds"]) == ["read", "tokenize", "shuffle", "write"]  # the stages' order
    assert extra["run"] == {"started_at": "2026-11-24T00:00:00Z", "beam_version": "x"}  # not changed


def test_the_run_section_of_a_job_without_a_run_given_and_of_a_resumed_one():
    params = build_params(_shards(5, seconds={"write": 0.0019}), _stats(), {}, extra={}, **IDS)
    assert params["run"] == {"stage_seconds": {"write": 0.0}}  # 1 ms: a stage that ran, however briefly
    resumed = build_params(_shards(5), _stats(groups_resumed=3), {}, extra={"run": {"started_at": "t"}}, **IDS)
    assert resumed["run"] == {"started_at": "t", "groups_resumed": 3, "stage_seconds": {}}


def test_the_accounting_must_add_up():
    broken = _stats()
    broken.add("docs_read", 1, "/in/a.jsonl")  # read once more than good + bad
    with pytest.raises(RuntimeError, match=r"^document accounting does not add up: total: read 11 != good 9 \+ bad "
                                           r"1; /in/a.jsonl: read 11 != good 9 \+ bad 1$"):
        build_params(_shards(5), broken, {}, extra={}, **IDS)
    build_params(_shards(5), _stats(), {}, extra={}, dead_letters=1, **IDS)  # as many as counted: fine
    build_params(_shards(5), _stats(), {}, extra={}, dead_letters=None, **IDS)  # not checked
    with pytest.raises(RuntimeError, match=r"^document accounting does not add up: 2 dead letters written, 1 bad "
                                           r"records counted$"):
        build_params(_shards(5), _stats(), {}, extra={}, dead_letters=2, **IDS)
    with pytest.raises(RuntimeError, match=r"^document accounting does not add up: 0 dead letters written"):
        build_params(_shards(5), _stats(), {}, extra={}, dead_letters=0, **IDS)


# ---------------------------------------------------------------- writing it


def test_finalize_writes_the_file_last_and_removes_the_scratch_space(tmp_path):
    out = tmp_path / "out"
    (out / fs.TMP_DIR / "groups").mkdir(parents=True)
    (out / fs.TMP_DIR / "groups" / "x.json").write_text("{}")
    params = finalize(_shards(5), _stats(), 1, str(out), {"setup": {"mode": "LMData"}}, IDS, {"k": "v"},
                       VSL_FEATURES)
    text = (out / PARAMS_FILE).read_text()
    assert json.loads(text) == params and params["k"] == "v" and params["features"] == list(VSL_FEATURES)
    assert text == json.dumps(params, indent=4, sort_keys=True) + "\n"  # readable, stable
    assert params["post-process"]["vocab_size"] == 50
    assert not (out / fs.TMP_DIR).exists()
    with pytest.raises(RuntimeError, match="dead letters"):  # refused: nothing written, scratch kept
        finalize(_shards(5), _stats(), 3, str(tmp_path / "other"), {}, IDS, {}, LM_FEATURES)
    assert not (tmp_path / "other" / PARAMS_FILE).exists()


def _pipeline() -> beam.Pipeline:
    return beam.Pipeline(options=PipelineOptions(["--runner", "FnApiRunner"]))


def test_the_composite_writes_one_datasets_params(tmp_path):
    out = tmp_path / "out"
    (out / fs.TMP_DIR).mkdir(parents=True)
    p = _pipeline()
    stats = p | "Stats" >> beam.Create([_stats(rows=3, read=5, bad=0, used=5, dropped=0),
                                        _stats(rows=2, read=6, bad=1, used=3, dropped=2, source="/in/b.jsonl")])
    merged = stats | beam.CombineGlobally(MergeStats())
    dead = p | "Dead" >> beam.Create([1])
    written = (p | "Shards" >> beam.Create(_shards(4, 1))
               | WriteDatasetParams(output_dir=str(out), sections={"setup": {"mode": "LMData"}}, eos_id=2, pad_id=0,
                                    vocab_size=50, stats=merged, dead_letters=dead, extra={"e": 1},
                                    features=VSL_FEATURES))
    assert_that(written | beam.Map(lambda params: (params["post-process"]["n_examples"], params["e"])),
                equal_to([(5, 1)]))
    p.run().wait_until_finish()
    params = json.loads((out / PARAMS_FILE).read_text())
    assert params["files"] == {"examples_00000.h5": 4, "examples_00001.h5": 1}
    assert params["input"]["documents_read"] == 11 and params["input"]["files"] == 2
    assert params["features"] == list(VSL_FEATURES) and params["setup"] == {"mode": "LMData"}
    assert (params["post-process"]["eos_id"], params["post-process"]["pad_id"]) == (2, 0)
    assert not (out / fs.TMP_DIR).exists()


# ---------------------------------------------------------------- a split job's summary


OUTPUTS = (Output("wiki", "train", 8, 2 / 3, False), Output("wiki", "test", 8, 1 / 3, False),
           Output("code", None, 16, 1.0, True))


def _output_params(documents: int, used: int, n: int, files: int, stage_seconds=None) -> dict:
    run = {} if stage_seconds is None else {"stage_seconds": stage_seconds}
    return {"input": {"documents_read": documents, "used": used},
            "post-process": {"n_examples": n, "num_tokens": 8 * n, "loss_valid_tokens": 6 * n},
            "files": {f"examples_{i:05d}.h5": 1 for i in range(files)}, "run": run}


def _output_stats(read: int, source: str) -> Stats:
    return _stats(read=read, bad=0, used=read, dropped=0, source=source)


def test_a_summary_lists_every_output_with_its_fractions():
    params = [_output_params(7, 7, 3, 1), _output_params(2, 2, 1, 1), _output_params(5, 4, 4, 2)]
    stats = [_output_stats(7, "/in/wiki/a.jsonl"), _output_stats(2, "/in/wiki/a.jsonl"),
             _stats(read=5, bad=0, used=4, dropped=1, source="/in/code/b.jsonl")]
    rest = Stats()
    rest.add("docs_read", 1, "/in/wiki/a.jsonl")
    rest.add("bad.blank_line", 1, "/in/wiki/a.jsonl")
    summary = build_summary(OUTPUTS, params, stats, rest, {"setup": {"mode": "LMData"}}, dead_letters=1,
                            extra={"features": ["input_ids"]})
    assert summary["setup"] == {"mode": "LMData"} and summary["features"] == ["input_ids"]
    assert summary["outputs"] == [
        {"path": "wiki/train", "subset": "wiki", "split": "train", "max_seq_length": 8, "fraction_asked": 0.666667,
         "fraction_obtained": 0.777778, "documents": 7, "documents_used": 7, "sequences": 3, "tokens": 24,
         "loss_valid_tokens": 18, "files": 1},
        {"path": "wiki/test", "subset": "wiki", "split": "test", "max_seq_length": 8, "fraction_asked": 0.333333,
         "fraction_obtained": 0.222222, "documents": 2, "documents_used": 2, "sequences": 1, "tokens": 8,
         "loss_valid_tokens": 6, "files": 1},
        {"path": "code/msl_16", "subset": "code", "split": None, "max_seq_length": 16, "fraction_asked": 1.0,
         "fraction_obtained": 1.0, "documents": 5, "documents_used": 4, "sequences": 4, "tokens": 32,
         "loss_valid_tokens": 24, "files": 2}]
    # the job's accounting: every record read is in one output, dropped there, or a dead letter
    assert summary["input"]["documents_read"] == 15 and summary["input"]["bad"] == 1
    assert summary["input"]["per_source"]["/in/wiki/a.jsonl"]["documents_read"] == 10
    assert summary["run"] == {"stage_seconds": {}}


def test_an_output_of_a_subset_without_documents():
    params = [_output_params(0, 0, 0, 0), _output_params(0, 0, 0, 0), _output_params(3, 3, 1, 1)]
    stats = [Stats(), Stats(), _output_stats(3, "/in/code/b.jsonl")]
    summary = build_summary(OUTPUTS, params, stats, Stats(), {}, dead_letters=None, extra={})
    assert [o["fraction_obtained"] for o in summary["outputs"]] == [0.0, 0.0, 1.0]


def test_a_summary_times_the_job_and_its_outputs():
    rest = Stats()
    rest.add(TIME_PREFIX + "read", 2504)
    rest.add(TIME_PREFIX + "normalize", 1000)
    rest.add("groups_resumed", 2)
    params = [_output_params(1, 1, 1, 1, {"encode": 1.25, "write": 0.5}),
              _output_params(0, 0, 0, 0, {"encode": 10.0}), _output_params(0, 0, 0, 0)]
    stats = [_output_stats(1, "/in/wiki/a.jsonl"), Stats(), _output_stats(0, "/in/code/b.jsonl")]
    stats[2].add("groups_resumed", 1)
    summary = build_summary(OUTPUTS, params, stats, rest, {}, dead_letters=None,
                            extra={"run": {"started_at": "t"}})
    assert summary["run"] == {"started_at": "t", "groups_resumed": 3,
                              "stage_seconds": {"read": 2.5, "normalize": 1.0, "encode": 11.25, "write": 0.5}}
    # milliseconds summed, shown in seconds to two decimals
    assert list(summary["run"]["stage_seconds"]) == ["read", "normalize", "encode", "write"]


def test_a_summary_sums_the_outputs_cross_checks():
    checked = {name: i + 1 for i, name in enumerate(CHECK_FIELDS)}
    params = [_output_params(1, 1, 1, 1), _output_params(0, 0, 0, 0), _output_params(0, 0, 0, 0)]
    params[0]["tokenizer"] = {"cross_check": checked}
    params[2]["tokenizer"] = {"cross_check": {name: 10 for name in CHECK_FIELDS}, "encoder": "fastokens"}
    params[1]["tokenizer"] = {"encoder": "fastokens"}  # no check of its own
    stats = [_output_stats(1, "/in/wiki/a.jsonl"), Stats(), Stats()]
    summary = build_summary(OUTPUTS, params, stats, Stats(), {}, dead_letters=None,
                            extra={"tokenizer": {"type": "GPT2Tokenizer"}})
    assert summary["tokenizer"] == {"type": "GPT2Tokenizer",
                                    "cross_check": {name: checked[name] + 10 for name in CHECK_FIELDS}}
    alone = build_summary(OUTPUTS, params, stats, Stats(), {}, dead_letters=None, extra={})
    assert list(alone["tokenizer"]) == ["cross_check"]
    for p in params:
        p.pop("tokenizer")
    assert "tokenizer" not in build_summary(OUTPUTS, params, stats, Stats(), {}, dead_letters=None, extra={})


def test_a_summary_refuses_an_accounting_that_does_not_add_up():
    params = [_output_params(1, 1, 1, 1), _output_params(0, 0, 0, 0), _output_params(0, 0, 0, 0)]
    stats = [_output_stats(1, "/in/wiki/a.jsonl"), Stats(), Stats()]
    broken = Stats()
    broken.add("docs_read", 1, "/in/wiki/a.jsonl")  # read, but neither good nor bad
    with pytest.raises(RuntimeError, match=r"^document accounting does not add up: total: read 2 != good 1 \+ bad 0; "
                                           r"/in/wiki/a.jsonl: read 2 != good 1 \+ bad 0$"):
        build_summary(OUTPUTS, params, stats, broken, {}, dead_letters=None, extra={})
    with pytest.raises(RuntimeError, match=r"^document accounting does not add up: 1 dead letters written, 0 bad "
                                           r"records counted$"):
        build_summary(OUTPUTS, params, stats, Stats(), {}, dead_letters=1, extra={})
    assert build_summary(OUTPUTS, params, stats, Stats(), {}, dead_letters=0, extra={})["input"]["bad"] == 0


def test_finalize_split_writes_every_output_then_the_summary(tmp_path):
    out = tmp_path / "out"
    dirs = tuple(str(out / o.path) for o in OUTPUTS)
    for d in dirs:
        os.makedirs(os.path.join(d, fs.TMP_DIR))
    (out / fs.TMP_DIR).mkdir()
    shards = _shards(2, part=0) + _shards(1, 1, part=2)
    stats_by_part = [(0, _stats(read=2, bad=0, used=2, dropped=0, rows=2, source="/in/wiki/a.jsonl")),
                     (2, _stats(read=2, bad=0, used=2, dropped=0, rows=2, source="/in/code/b.jsonl"))]
    rest = Stats()
    rest.add("docs_read", 1, "/in/wiki/a.jsonl")
    rest.add("bad.blank_line", 1, "/in/wiki/a.jsonl")
    sections = tuple({"setup": {"output": k}} for k in range(3))
    extras = tuple({"split": {"name": o.split}} for o in OUTPUTS)
    summary = finalize_split(shards, stats_by_part, rest, 1, str(out), OUTPUTS, dirs, sections, extras, IDS,
                              LM_FEATURES, {"setup": {"mode": "LMData"}}, {"features": list(LM_FEATURES)})
    written = [json.loads(open(os.path.join(d, PARAMS_FILE)).read()) for d in dirs]
    assert [w["setup"] for w in written] == [{"output": 0}, {"output": 1}, {"output": 2}]
    assert [w["split"] for w in written] == [{"name": "train"}, {"name": "test"}, {"name": None}]
    assert [w["files"] for w in written] == [{"examples_00000.h5": 2}, {},
                                             {"examples_00000.h5": 1, "examples_00001.h5": 1}]
    assert [w["post-process"]["n_examples"] for w in written] == [2, 0, 2]  # output 1: no group reached it
    assert [w["post-process"]["vocab_size"] for w in written] == [50, 50, 50]
    on_disk = json.loads((out / PARAMS_FILE).read_text())
    assert on_disk == summary and (out / PARAMS_FILE).read_text() == json.dumps(summary, indent=4,
                                                                                 sort_keys=True) + "\n"
    assert summary["input"]["bad"] == 1 and [o["sequences"] for o in summary["outputs"]] == [2, 0, 2]
    assert summary["setup"] == {"mode": "LMData"} and summary["features"] == list(LM_FEATURES)
    assert not any(os.path.exists(os.path.join(d, fs.TMP_DIR)) for d in dirs + (str(out),))
    # the job's dead letters are checked against the job's bad records
    with pytest.raises(RuntimeError, match=r"2 dead letters written, 1 bad records counted$"):
        finalize_split(shards, stats_by_part, rest, 2, str(tmp_path / "other"), OUTPUTS, dirs, sections, extras,
                        IDS, LM_FEATURES, {}, {})
    assert not (tmp_path / "other" / PARAMS_FILE).exists()


def test_the_split_composite(tmp_path):
    out = tmp_path / "out"
    dirs = tuple(str(out / o.path) for o in OUTPUTS)
    for d in dirs:
        os.makedirs(d)
    p = _pipeline()
    stats = p | "Stats" >> beam.Create([
        (0, _stats(read=2, bad=0, used=2, dropped=0, rows=2, source="/in/wiki/a.jsonl")),
        (2, _stats(read=1, bad=0, used=1, dropped=0, rows=1, source="/in/code/b.jsonl"))])
    rest = Stats()
    rest.add("docs_read", 1, "/in/wiki/a.jsonl")
    rest.add("bad.blank_line", 1, "/in/wiki/a.jsonl")
    rest_stats = p | "Rest" >> beam.Create([rest])
    dead = p | "Dead" >> beam.Create([1])
    summary = (p | "Shards" >> beam.Create(_shards(2, part=0) + _shards(1, part=2))
               | WriteSplitParams(output_dir=str(out), outputs=OUTPUTS, output_dirs=dirs,
                                  sections=({}, {}, {}), extras=({}, {}, {}), eos_id=2, pad_id=0, vocab_size=50,
                                  features=VSL_FEATURES, stats=stats, rest_stats=rest_stats, dead_letters=dead,
                                  summary_sections={"setup": {}}, summary_extra={"x": 1}))
    assert_that(summary | beam.Map(lambda s: ([o["sequences"] for o in s["outputs"]], s["x"], s["input"]["bad"])),
                equal_to([([2, 0, 1], 1, 1)]))
    p.run().wait_until_finish()
    written = [json.loads(open(os.path.join(d, PARAMS_FILE)).read()) for d in dirs]
    assert [w["features"] for w in written] == [list(VSL_FEATURES)] * 3
    assert [w["post-process"]["eos_id"] for w in written] == [2, 2, 2]
    assert json.loads((out / PARAMS_FILE).read_text())["x"] == 1


def test_the_composites_check_the_dead_letters_written(tmp_path):
    """A job whose dead letters and bad records disagree is refused, one dataset or a split job."""
    p = _pipeline()
    merged = p | "Stats" >> beam.Create([_stats()])  # one bad record counted
    dead = p | "Dead" >> beam.Create([2])
    _ = (p | "Shards" >> beam.Create(_shards(5))
         | WriteDatasetParams(output_dir=str(tmp_path / "one"), sections={}, eos_id=2, pad_id=0, vocab_size=50,
                              stats=merged, dead_letters=dead, extra={}))
    with pytest.raises(Exception, match="2 dead letters written, 1 bad records counted"):
        p.run().wait_until_finish()
    assert not (tmp_path / "one" / PARAMS_FILE).exists()

    out = tmp_path / "split"
    dirs = tuple(str(out / o.path) for o in OUTPUTS)
    for d in dirs:
        os.makedirs(d)
    p = _pipeline()
    stats = p | "Stats" >> beam.Create([(0, _stats(read=2, bad=0, used=2, dropped=0, rows=2))])
    rest = Stats()
    rest.add("docs_read", 1, "/in/wiki/a.jsonl")
    rest.add("bad.blank_line", 1, "/in/wiki/a.jsonl")
    _ = (p | "Shards" >> beam.Create(_shards(2, part=0))
         | WriteSplitParams(output_dir=str(out), outputs=OUTPUTS, output_dirs=dirs, sections=({}, {}, {}),
                            extras=({}, {}, {}), eos_id=2, pad_id=0, vocab_size=50, features=LM_FEATURES,
                            stats=stats, rest_stats=p | "Rest" >> beam.Create([rest]),
                            dead_letters=p | "Dead" >> beam.Create([3]), summary_sections={}, summary_extra={}))
    with pytest.raises(Exception, match="3 dead letters written, 1 bad records counted"):
        p.run().wait_until_finish()
    assert not (out / PARAMS_FILE).exists()
