"""Tests for pipelines.config.load_config: precedence, defaults, coercion, validation, sections."""

from __future__ import annotations

import pytest
import yaml

from pipelines.config import ConfigError, load_config

NEOX = ["--tokenizer_type", "NeoXTokenizer", "--encoder_file", "tokenizer.json", "--input_dir", "in"]
FIM_SENTINELS = ["--fim_prefix_tok", "<PRE>", "--fim_middle_tok", "<MID>", "--fim_suffix_tok", "<SUF>"]
SUMMARIZATION_KEYS = ["--prompt_key", "prompt", "--completion_key", "completion"]


def lm(*extra):
    return ["LMData", *NEOX, *extra]


def write_yaml(tmp_path, data, name="params.yaml") -> str:
    path = tmp_path / name
    if isinstance(data, str):
        path.write_text(data)
    else:
        path.write_text(yaml.safe_dump(data))
    return str(path)


def load(argv):
    config, rest = load_config(list(argv))
    return config


# ---------------------------------------------------------------- precedence


@pytest.mark.parametrize("section, key, yaml_value, expected", [
    ("dataset", "min_sequence_len", 3, 3),
    ("processing", "short_seq_prob", 0.25, 0.25),
    ("processing", "output_name", "shard", "shard"),
    ("processing", "max_seq_length", 128, 128),
    ("processing", "seed", 7, 7),
    ("processing", "write_remainder", False, False),
    ("processing", "display_pbar", False, False),
    ("processing", "files_per_record", 12, 12),
    ("dataset", "pack_sequences", False, False),
    ("dataset", "use_ftfy", True, True),
    ("setup", "output_dir", "/tmp/x/", "/tmp/x/"),
])
def test_yaml_beats_default(tmp_path, section, key, yaml_value, expected):
    params = write_yaml(tmp_path, {section: {key: yaml_value}})
    config = load(lm("--params", params))
    assert getattr(config, key) == expected
    assert config.source_of(key) == "yaml"


def test_fim_yaml_rates_beat_defaults(tmp_path):
    params = write_yaml(tmp_path, {"processing": {"fim_rate": 0.2, "spm_rate": 0.8}})
    config = load(["FIM", *NEOX, *FIM_SENTINELS, "--params", params])
    assert config.fim_rate == 0.2 and config.spm_rate == 0.8


def test_cli_beats_yaml(tmp_path):
    params = write_yaml(tmp_path, {"processing": {"max_seq_length": 128, "short_seq_prob": 0.25},
                                   "dataset": {"min_sequence_len": 3}})
    config = load(lm("--params", params, "--max_seq_length", "64", "--short_seq_prob", "0.5"))
    assert config.max_seq_length == 64 and config.source_of("max_seq_length") == "cli"
    assert config.short_seq_prob == 0.5
    assert config.min_sequence_len == 3


def test_explicit_flag_with_the_default_value_beats_yaml(tmp_path):
    params = write_yaml(tmp_path, {"processing": {"short_seq_prob": 0.25, "output_name": "shard",
                                                  "max_seq_length": 128},
                                   "dataset": {"min_sequence_len": 3}})
    config = load(lm("--params", params, "--min_sequence_len", "10", "--short_seq_prob", "0.0",
                     "--output_name", "examples", "--max_seq_length", "2048"))
    assert config.min_sequence_len == 10 and config.source_of("min_sequence_len") == "cli"
    assert config.short_seq_prob == 0.0
    assert config.output_name == "examples"
    assert config.max_seq_length == 2048


def test_fim_explicit_default_rates_beat_yaml(tmp_path):
    params = write_yaml(tmp_path, {"processing": {"fim_rate": 0.2, "spm_rate": 0.8}})
    config = load(["FIM", *NEOX, *FIM_SENTINELS, "--params", params, "--fim_rate", "0.9", "--spm_rate", "0.5"])
    assert config.fim_rate == 0.9 and config.spm_rate == 0.5


def test_yaml_may_carry_dataset_processor(tmp_path):
    params = write_yaml(tmp_path, {"setup": {"dataset_processor": "LMDataPreprocessor", "processes": 2}})
    config = load(lm("--params", params))
    assert config.processes == 2


# ---------------------------------------------------------------- coercion


@pytest.mark.parametrize("text, expected", [("True", True), ("False", False), ("true", True), ("false", False)])
def test_boolean_strings_on_the_command_line(text, expected):
    config = load(lm("--pack_sequences", text, "--use_ftfy", text, "--write_remainder", text,
                     "--display_pbar", text))
    assert config.pack_sequences is expected
    assert config.use_ftfy is expected
    assert config.write_remainder is expected
    assert config.display_pbar is expected


def test_boolean_strings_in_yaml(tmp_path):
    params = write_yaml(tmp_path, "dataset:\n  pack_sequences: 'False'\n  use_ftfy: 'True'\n")
    config = load(lm("--params", params))
    assert config.pack_sequences is False and config.use_ftfy is True


def test_ftfy_normalizer_none():
    assert load(lm("--ftfy_normalizer", "None")).ftfy_normalizer is None
    assert load(lm("--ftfy_normalizer", "NFKC")).ftfy_normalizer == "NFKC"
    assert load(lm()).ftfy_normalizer == "NFC"


def test_ftfy_normalizer_none_in_yaml(tmp_path):
    params = write_yaml(tmp_path, "dataset:\n  ftfy_normalizer: None\n")
    config = load(lm("--params", params))
    assert config.ftfy_normalizer is None
    assert config.source_of("ftfy_normalizer") == "yaml"


def test_numbers_are_coerced():
    config = load(lm("--max_seq_length", "128", "--short_seq_prob", "0.5", "--seed", "3"))
    assert config.max_seq_length == 128 and isinstance(config.max_seq_length, int)
    assert config.short_seq_prob == 0.5 and isinstance(config.short_seq_prob, float)
    assert config.seed == 3


# ---------------------------------------------------------------- defaults


def test_compat_defaults():
    config = load(lm())
    assert config.use_ftfy is False
    assert config.min_sequence_len == 10
    assert config.output_dir == "./data_dir/"
    assert config.files_per_record == 50000
    assert config.write_remainder is True
    assert config.display_pbar is True
    assert config.max_seq_length == 2048
    assert config.short_seq_prob == 0.0
    assert config.output_name == "examples"
    assert config.pack_sequences is True
    assert config.num_output_files is None
    assert config.source_of("min_sequence_len") == "default"


def test_fim_defaults():
    config = load(["FIM", *NEOX, *FIM_SENTINELS])
    assert config.fim_rate == 0.9 and config.spm_rate == 0.5


# ---------------------------------------------------------------- fail fast


def assert_config_error(argv, *words):
    with pytest.raises(ConfigError) as info:
        load_config(list(argv))
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    return message


def test_unknown_yaml_key(tmp_path):
    params = write_yaml(tmp_path, {"processing": {"max_seq_lenght": 128}})
    assert_config_error(lm("--params", params), "max_seq_lenght")


def test_unknown_yaml_section(tmp_path):
    params = write_yaml(tmp_path, {"training": {"max_seq_length": 128}})
    assert_config_error(lm("--params", params), "training")


def test_summarization_only_key_in_lmdata_yaml(tmp_path):
    params = write_yaml(tmp_path, {"dataset": {"prompt_key": "prompt"}})
    assert_config_error(lm("--params", params), "prompt_key")


def test_fim_only_key_in_lmdata_yaml(tmp_path):
    params = write_yaml(tmp_path, {"processing": {"fim_rate": 0.5}})
    assert_config_error(lm("--params", params), "fim_rate")


def test_missing_tokenizer_type():
    assert_config_error(["LMData", "--encoder_file", "tokenizer.json", "--input_dir", "in"], "tokenizer_type")


def test_gpt2_without_vocab_file():
    assert_config_error(["LMData", "--tokenizer_type", "GPT2Tokenizer", "--encoder_file", "encoder.json",
                         "--input_dir", "in"], "vocab_file")


@pytest.mark.parametrize("flag", ["--pack_sequences", "--use_ftfy", "--write_remainder"])
def test_bad_boolean_string(flag):
    assert_config_error(lm(flag, "maybe"), flag.lstrip("-"))


def test_bad_boolean_in_yaml(tmp_path):
    params = write_yaml(tmp_path, {"dataset": {"pack_sequences": "sometimes"}})
    assert_config_error(lm("--params", params), "pack_sequences")


def test_short_seq_prob_out_of_range():
    assert_config_error(lm("--short_seq_prob", "1.5"), "short_seq_prob")
    assert_config_error(lm("--short_seq_prob", "-0.1"), "short_seq_prob")


def test_gzip_level_out_of_range():
    assert_config_error(lm("--gzip_level", "10"), "gzip_level")
    assert_config_error(lm("--gzip_level", "-1"), "gzip_level")
    config, _ = load_config(lm("--gzip_level", "1"))
    assert config.gzip_level == 1
    assert load_config(lm())[0].gzip_level == 4


def test_tokenizer_backend(tmp_path):
    assert load(lm()).tokenizer_backend == "auto"
    assert load(lm("--tokenizer_backend", "tokenizers")).tokenizer_backend == "tokenizers"
    params = write_yaml(tmp_path, {"processing": {"tokenizer_backend": "tiktoken"}})
    config = load(lm("--params", params))
    assert config.tokenizer_backend == "tiktoken" and config.source_of("tokenizer_backend") == "yaml"
    assert config.sections()["processing"]["tokenizer_backend"] == "tiktoken"
    assert_config_error(lm("--tokenizer_backend", "sentencepiece"), "tokenizer_backend")
    bad = write_yaml(tmp_path, {"processing": {"tokenizer_backend": "fast"}}, name="bad.yaml")
    assert_config_error(lm("--params", bad), "tokenizer_backend")


def test_num_output_files_with_files_per_record(tmp_path):
    assert_config_error(lm("--num_output_files", "4", "--files_per_record", "10"),
                        "num_output_files", "files_per_record")
    params = write_yaml(tmp_path, {"processing": {"files_per_record": 10}})
    assert_config_error(lm("--params", params, "--num_output_files", "4"), "num_output_files", "files_per_record")
    # alone, either is fine
    assert load(lm("--num_output_files", "4")).num_output_files == 4


def test_jsonl_key_with_dataset_keys(tmp_path):
    params = write_yaml(tmp_path, {"dataset": {"keys": ["title", "body"]}})
    assert_config_error(lm("--params", params, "--jsonl_key", "text"), "jsonl_key", "keys")
    config = load(lm("--params", params))
    assert config.keys_tuple == ("title", "body")


def test_fim_without_sentinels():
    assert_config_error(["FIM", *NEOX], "fim_prefix_tok")
    assert_config_error(["FIM", *NEOX, "--fim_prefix_tok", "<PRE>", "--fim_middle_tok", "<MID>"],
                        "fim_suffix_tok")


def test_max_seq_length_one():
    assert_config_error(lm("--max_seq_length", "1"), "max_seq_length")


def test_non_integer_max_seq_length():
    assert_config_error(lm("--max_seq_length", "12.5"), "max_seq_length")


def test_min_sequence_len_above_msl_plus_one():
    assert_config_error(lm("--max_seq_length", "8", "--min_sequence_len", "10"), "min_sequence_len")
    assert load(lm("--max_seq_length", "8", "--min_sequence_len", "9")).min_sequence_len == 9


def test_yaml_key_without_a_value_does_not_crash(tmp_path):
    # `max_seq_length:` with nothing after it is YAML null. Either the default applies or a
    # ConfigError names the setting; a TypeError from the validation code is neither.
    params = write_yaml(tmp_path, "processing:\n  max_seq_length:\n")
    try:
        config = load(lm("--params", params))
    except ConfigError as e:
        assert "max_seq_length" in str(e)
    else:
        assert config.max_seq_length == 2048


def test_msl_two_with_short_seq_prob_fails_at_load_time():
    # short_seq_prob cuts a window to randint(2, msl - 1) tokens: an empty range when msl = 2, so the
    # packing stage would raise ValueError mid-pipeline. It must fail here, naming a setting.
    assert load(lm("--max_seq_length", "2", "--min_sequence_len", "0")).max_seq_length == 2  # fine without it
    with pytest.raises(ConfigError) as info:
        load_config(lm("--max_seq_length", "2", "--min_sequence_len", "0", "--short_seq_prob", "0.5"))
    assert "short_seq_prob" in str(info.value)


def test_missing_params_file(tmp_path):
    assert_config_error(lm("--params", str(tmp_path / "absent.yaml")), "absent.yaml")


# ---------------------------------------------------------------- unknown flags go to Beam


def test_unknown_cli_flags_are_returned_in_rest():
    config, rest = load_config(lm("--runner", "FnApiRunner", "--max_seq_length", "64", "--direct_num_workers=2",
                                  "--temp_location", "/tmp/beam"))
    assert config.max_seq_length == 64
    assert rest == ["--runner", "FnApiRunner", "--direct_num_workers=2", "--temp_location", "/tmp/beam"]


def test_no_rest_without_beam_flags():
    _, rest = load_config(lm())
    assert rest == []


# ---------------------------------------------------------------- sections, processor, fingerprint


def test_sections_follow_the_reference():
    sections = load(lm("--processes", "4")).sections()
    assert set(sections) == {"setup", "processing", "dataset"}
    setup, processing, dataset = sections["setup"], sections["processing"], sections["dataset"]
    for key in ("input_dir", "output_dir", "processes", "dataset_processor"):
        assert key in setup, key
    for key in ("tokenizer_type", "max_seq_length", "short_seq_prob", "output_name", "files_per_record",
                "write_in_batch", "write_remainder", "resume_from_checkpoint", "display_pbar", "seed",
                "eos_id", "pad_id", "split_text_to_tokenize", "chunk_len_to_split", "remove_bos_in_chunks",
                "max_chunk_size", "shuffle", "shuffle_seed"):
        assert key in processing, key
    for key in ("use_ftfy", "ftfy_normalizer", "wikitext_detokenize", "pack_sequences", "min_sequence_len",
                "inverted_mask", "input_ids_dtype", "input_mask_dtype", "jsonl_key"):
        assert key in dataset, key
    assert setup["processes"] == 4
    assert processing["max_seq_length"] == 2048
    assert dataset["min_sequence_len"] == 10
    # every key appears in exactly one section
    keys = [k for body in sections.values() for k in body]
    assert len(keys) == len(set(keys))
    # mode-specific keys stay out of LMData
    assert "fim_rate" not in processing and "prompt_key" not in dataset


def test_sections_record_the_params_file(tmp_path):
    params = write_yaml(tmp_path, {"processing": {"max_seq_length": 64}})
    sections = load(lm("--params", params)).sections()
    assert sections["processing"]["max_seq_length"] == 64
    assert sections["setup"]["params"] == params


def test_dataset_processor_lmdata():
    assert load(lm()).sections()["setup"]["dataset_processor"] == "LMDataPreprocessor"


def test_dataset_processor_fim():
    sections = load(["FIM", *NEOX, *FIM_SENTINELS]).sections()
    assert sections["setup"]["dataset_processor"] == "FIMDataPreprocessor"
    assert sections["processing"]["fim_rate"] == 0.9


def test_dataset_processor_summarization():
    sections = load(["Summarization", *NEOX, *SUMMARIZATION_KEYS]).sections()
    assert sections["setup"]["dataset_processor"] == "SummarizationPreprocessor"
    assert sections["dataset"]["prompt_key"] == "prompt"
    assert sections["dataset"]["completion_key"] == "completion"
    assert "jsonl_key" not in sections["dataset"]


def test_fingerprint():
    base = load(lm()).fingerprint()
    assert load(lm()).fingerprint() == base
    assert load(lm("--max_seq_length", "128")).fingerprint() != base
    assert load(lm("--display_pbar", "False")).fingerprint() == base
    # Either backend writes the same files: a run may be resumed with the other one.
    assert load(lm("--tokenizer_backend", "tokenizers")).fingerprint() == base
    assert load(lm("--min_sequence_len", "3")).fingerprint() != base


# ---------------------------------------------------------------- VSL modes


def test_vsl_flags_on_the_command_line_and_in_yaml(tmp_path):
    # --position_ids_dtype works on the command line (the reference raises "Unexpected arguments").
    config = load(["LMData_VSL", *NEOX, "--position_ids_dtype", "int16", "--fold_long_doc", "False"])
    assert config.position_ids_dtype == "int16" and config.fold_long_doc is False
    params = write_yaml(tmp_path, {"dataset": {"fold_long_doc": False, "position_ids_dtype": "uint16"}})
    config = load(["LMData_VSL", *NEOX, "--params", params])
    assert (config.fold_long_doc, config.position_ids_dtype) == (False, "uint16")
    assert config.source_of("fold_long_doc") == "yaml"
    defaults = load(["LMData_VSL", *NEOX])
    assert (defaults.fold_long_doc, defaults.position_ids_dtype, defaults.min_sequence_len) == (True, "int32", 10)
    sections = defaults.sections()
    assert sections["setup"]["dataset_processor"] == "VSLLMDataPreprocessor"
    assert sections["dataset"]["fold_long_doc"] is True and sections["dataset"]["position_ids_dtype"] == "int32"
    summ = load(["Summarization_VSL", *NEOX, *SUMMARIZATION_KEYS, "--sep_token", "<sep>",
                 "--position_ids_dtype", "int16"])
    assert summ.keys_tuple == ("prompt", "completion") and summ.sep_token == "<sep>"
    assert summ.sections()["setup"]["dataset_processor"] == "VSLSummarizationPreprocessor"
    assert "fold_long_doc" not in summ.sections()["dataset"]


def test_vsl_settings_are_checked_where_they_apply(tmp_path):
    with pytest.raises(ConfigError, match="position_ids_dtype: int8 cannot hold position ids up to 255"):
        load(["LMData_VSL", *NEOX, "--max_seq_length", "256", "--position_ids_dtype", "int8"])
    assert load(["LMData_VSL", *NEOX, "--max_seq_length", "128", "--position_ids_dtype", "int8"])
    with pytest.raises(ConfigError, match="--prompt_key is required for Summarization_VSL"):
        load(["Summarization_VSL", *NEOX])
    with pytest.raises(ConfigError, match="fold_long_doc does not apply to LMData"):
        load(lm("--params", write_yaml(tmp_path, {"dataset": {"fold_long_doc": True}})))
    with pytest.raises(ConfigError, match="fold_long_doc does not apply to Summarization_VSL"):
        load(["Summarization_VSL", *NEOX, *SUMMARIZATION_KEYS,
              "--params", write_yaml(tmp_path, {"dataset": {"fold_long_doc": True}}, "s.yaml")])
    # LMData has no such flag: it is left for Beam, which refuses it (tests/test_cli.py).
    config, rest = load_config(lm("--fold_long_doc", "True"))
    assert rest == ["--fold_long_doc", "True"]


# ---------------------------------------------------------------- splits


CEREBRAS_SPLITS = """
setup:
  data:
    source: corpus
    top_level_as_subsets: true
  data_splits_dir: ignored/raw_splits
  data_splits:
    train: {split_fraction: 0.9}
    validation: {split_fraction: 0.1}
  context_splits:
    MSL_List: [1K, 0.5K]
    split_fractions: [3, 1]
processing:
  split_seed: 7
"""


def test_cerebras_split_settings_read_from_yaml(tmp_path):
    config = load(["LMData", "--tokenizer_type", "NeoXTokenizer", "--encoder_file", "t.json", "--params",
                   write_yaml(tmp_path, CEREBRAS_SPLITS)])
    assert config.input_dir == "corpus" and config.top_level_as_subsets is True and config.split_seed == 7
    assert config.data_splits == (("train", 0.9, None), ("validation", 0.1, None))
    assert config.context_splits == ((1024, 0.75), (512, 0.25))
    assert config.source_of("data_splits") == "yaml"
    # The command line wins, in its own short form; the YAML form also works inline.
    config = load(["LMData", "--tokenizer_type", "NeoXTokenizer", "--encoder_file", "t.json", "--params",
                   write_yaml(tmp_path, CEREBRAS_SPLITS), "--data_splits", "a=0.5,b=1/2",
                   "--context_splits", "{MSL_List: [2K], split_fractions: [1]}"])
    assert config.data_splits == (("a", 0.5, None), ("b", 0.5, None))
    assert config.context_splits == ((2048, 1.0),)
    assert config.sections()["setup"]["data_splits"] == (("a", 0.5, None), ("b", 0.5, None))


@pytest.mark.parametrize("text, message", [
    ("setup:\n  data: {source: a, sources: b}\n", "unknown setting setup.data.sources"),
    ("setup:\n  input_dir: a\n  data: {source: b}\n", "setup.data.source and setup.input_dir disagree"),
    ("setup:\n  data_splits: {a: {split_fraction: 0.5, context_splits: {MSL_List: [512], split_fractions: [1]}}, "
     "b: 0.5}\n  context_splits: {MSL_List: [512], split_fractions: [1]}\n",
     "given both for the whole job and inside data_splits"),
    ("setup:\n  top_level_as_subsets: true\n  subsets: [a]\n", "top_level_as_subsets and subsets are both set"),
    ("setup:\n  subsets: [a, a]\n", "a directory is listed twice"),
    ("setup:\n  subsets: [.tmp]\n", "cannot be a directory of the output"),
    ("setup:\n  data_splits: [0.5, 0.5]\n", "data_splits (from YAML): expected"),
    ("setup:\n  data_splits: {a: {split_fraction: 1, context_splits: {MSL_List: [2], split_fractions: [1]}}}\n",
     "min_sequence_len: 10 exceeds data_splits.a.context_splits + 1 = 3"),
])
def test_bad_split_settings_name_the_setting(tmp_path, text, message):
    with pytest.raises(ConfigError) as err:
        load(lm("--params", write_yaml(tmp_path, text)))
    assert message in str(err.value)


def test_subsets_need_an_input_directory():
    with pytest.raises(ConfigError, match="cannot be used with metadata_files"):
        load(["LMData", "--tokenizer_type", "NeoXTokenizer", "--encoder_file", "t", "--metadata_files", "m.txt",
              "--subsets", "a,b"])
