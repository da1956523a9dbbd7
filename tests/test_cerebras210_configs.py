"""Cerebras 2.10's shipped example configs, run unchanged (`create_hdf5_dataset --config`).

tests/data/cerebras210/ holds every config Model Zoo 2.10 ships, with the same keys and values and only the
paths and tokenizer names pointing at test data. Each of a supported mode runs, writes the rows of the mode it
translates to and passes `verify`; each of an unsupported one fails before anything is read, naming the key.
"""

from __future__ import annotations

import json
import re
import string
from pathlib import Path

import pytest

from tests.helpers import REFERENCE, RUNNER, SHARED, h5_files, read_rows, require_shared

CONFIGS = Path(__file__).parent / "data" / "cerebras210"
GOLDEN_210 = REFERENCE / "golden-2.10"


def _lines(path: Path, n: int) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for _, line in zip(range(n), f)]


def _write(directory: Path, records: list[dict], name: str = "part_0.jsonl") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / name, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    return directory


def _text(tmp: Path) -> Path:
    return _write(tmp, _lines(GOLDEN_210 / "lm_gpt2_en_small_pd_512" / "input" / "en_small_pd.jsonl", 120))


def _pairs(prompt: str, completion: str):
    def make(tmp: Path) -> Path:
        rows = _lines(REFERENCE / "inputs" / "summarization" / "part_0.jsonl", 120)
        return _write(tmp, [{prompt: r["prompt"], completion: r["completion"]} for r in rows])
    return make


def _fim(tmp: Path) -> Path:
    return _write(tmp, _lines(REFERENCE / "inputs" / "fim" / "part_0.jsonl", 100))


def _chat(tmp: Path) -> Path:
    source = GOLDEN_210 / "chat_qwen25_kto_multiturn_512" / "input" / "llamafactory_kto_en_demo.jsonl"
    return _write(tmp, _lines(source, 120))


def _dpo(tmp: Path) -> Path:
    """HH-RLHF transcripts with the prompt apart (the shipped config names prompt_key)."""
    rows = []
    for r in _lines(GOLDEN_210 / "dpo_qwen25_hh_rlhf_512" / "input" / "hh_rlhf_harmless_base_test_first1000.jsonl",
                    120):
        cut = r["chosen"].rfind("\n\nAssistant:") + len("\n\nAssistant:")
        if r["rejected"][:cut] == r["chosen"][:cut]:
            rows.append({"prompt": r["chosen"][:cut], "chosen": r["chosen"][cut:], "rejected": r["rejected"][cut:]})
    return _write(tmp, rows)


# config -> (input maker, our mode, outputs under OUT (None: one dataset))
SUPPORTED = {
    "autoregressive_lm_preprocessing": (_text, "LMData", None),
    "wikitext103_lm_preprocessing": (_text, "LMData", None),
    "hf_autoregressive_lm_preprocessing": (_text, "LMData", None),
    "fim_aug_preprocessing": (_fim, "FIM", None),
    "summarization_preprocessing": (_pairs("source", "target"), "Summarization", None),
    "curation_corpus_summarization_preprocessing": (_pairs("article_content", "summary"), "Summarization", None),
    "multi_turn_dialogue_preprocessing": (_chat, "Chat", None),
    "dpo_preprocessing": (_dpo, "DPO", None),
    "nlg_preprocessing": (_pairs("context", "completion"), "Summarization", None),
    "finetuning_data_split": (_pairs("prompt", "completion"), "Summarization", ["train", "val"]),
    "finetuning_context_split": (_pairs("prompt", "completion"), "Summarization",
                                 ["msl_1024", "msl_2048", "msl_3072"]),
    "pretraining_data_context_split": (_text, "LMData", ["train/msl_1024", "train/msl_2048", "train/msl_3072",
                                                         "val/msl_512", "val/msl_1024", "val/msl_2048"]),
}
# config -> the key its refusal names
UNSUPPORTED = {
    "bert_pretraining_config": "training_objective",
    "esm2_preprocessing_pre_training": "mlm_with_gather",
    "llava_phase_1_llama3": "image_dir",
    "llava_phase_2_preproc": "image_dir",
    "llava_single_image_token": "image_dir",
    "mllama_preproc_using_llava_phase_2": "image_dir",
    "multimodal_pretraining_conceptual_captions": "image_dir",
}


def _config(name: str, tmp: Path, input_dir: Path) -> Path:
    text = string.Template((CONFIGS / f"{name}.yaml").read_text()).substitute(
        SHARED=str(SHARED), INPUT=str(input_dir), OUT=str(tmp / "out"))
    path = tmp / f"{name}.yaml"
    path.write_text(text)
    return path


def test_every_shipped_config_is_a_fixture():
    assert sorted(p.stem for p in CONFIGS.glob("*.yaml")) == sorted([*SUPPORTED, *UNSUPPORTED])


@pytest.mark.parametrize("name", sorted(SUPPORTED))
def test_shipped_config_runs_unchanged(name, tmp_path, capsys):
    require_shared()
    from pipelines.create_hdf5_dataset import main
    from pipelines.tools.verify import verify_dataset

    make, mode, outputs = SUPPORTED[name]
    config = _config(name, tmp_path, make(tmp_path / "input"))
    assert main(["--config", str(config), *RUNNER]) == 0, capsys.readouterr().err
    out = tmp_path / "out"
    for sub in outputs or [""]:
        params = json.loads((out / sub / "data_params.json").read_text())
        assert params["setup"]["dataset_processor"].endswith(_PROCESSORS[mode]), params["setup"]
        assert params["setup"]["mode"] == _raw(config)["setup"]["mode"]  # 2.10's mode, as 2.10 records it
        assert params["processing"]["read_hook"] == _raw(config)["processing"]["read_hook"]
        for key in ("eos_id", "pad_id", "vocab_size"):  # resolved, where 2.10's tools read them
            assert isinstance(params["processing"][key], int), key
        assert params["features"] == list(_FEATURES[mode])
        assert params["post-process"]["n_examples"] > 0, sub
        result = verify_dataset(str(out / sub))
        assert result.ok, result.problems
        assert read_rows(out / sub).shape[1] == len(_FEATURES[mode])
    if outputs:
        assert not h5_files(out)
    from transforms.io.hooks import parse_hook_spec

    # As 2.10 saves it: the source of the hook that read the records (here, our built-in hooks' module).
    function = parse_hook_spec(_raw(config)["processing"]["read_hook"]).function
    assert f"def {function}(" in (out / "hook.py").read_text()


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_unsupported_config_is_refused_before_reading(name, tmp_path, capsys):
    from pipelines.create_hdf5_dataset import main

    config = _config(name, tmp_path, tmp_path / "no-such-input")  # nothing to read: a refusal must come first
    assert main(["--config", str(config), *RUNNER]) == 2
    err = capsys.readouterr().err
    assert UNSUPPORTED[name] in err, err
    assert "not supported" in err, err
    assert not (tmp_path / "out").exists()


def _raw(config: Path) -> dict:
    import yaml

    return yaml.safe_load(config.read_text())


_PROCESSORS = {"LMData": "LMDataPreprocessor", "FIM": "FIMDataPreprocessor", "Chat": "ChatPreprocessor",
               "DPO": "DPOPreprocessor", "Summarization": "SummarizationPreprocessor"}
_FEATURES = {
    "DPO": ("chosen_input_ids", "chosen_attention_mask", "chosen_labels", "rejected_input_ids",
            "rejected_attention_mask", "rejected_labels"),
}
for _mode in ("LMData", "FIM", "Chat", "Summarization"):
    _FEATURES[_mode] = ("input_ids", "attention_mask", "labels")
del _mode


# ---------------------------------------------------------------- our own examples (configs/cerebras210)

OURS = Path(__file__).resolve().parents[1] / "configs" / "cerebras210"
EXAMPLE_MODES = {"lm": "LMData", "lm_vsl": "LMData_VSL", "lm_splits": "LMData", "fim": "FIM",
                 "summarization": "Summarization", "chat": "Chat", "dpo": "DPO", "nlg": "Summarization",
                 "own_hook": "Chat"}


def test_every_example_config_loads_as_its_mode(tmp_path, monkeypatch):
    from pipelines.config import load_config

    assert sorted(p.stem for p in OURS.glob("*.yaml")) == sorted(EXAMPLE_MODES)
    (tmp_path / "my_hooks.py").write_text("def qa_hook(example, **kwargs):\n    return []\n")
    monkeypatch.chdir(tmp_path)  # own_hook.yaml names ./my_hooks.py
    for name, mode in EXAMPLE_MODES.items():
        config, _ = load_config(["--config", str(OURS / f"{name}.yaml")])
        assert config.mode == mode, name


@pytest.mark.parametrize("name", ["lm", "lm_vsl"])
def test_runnable_examples_run(name, tmp_path, monkeypatch):
    """The examples that name this repository's sample data and GPT-2 files run as they are (from its root)."""
    from pipelines.create_hdf5_dataset import main
    from pipelines.tools.verify import verify_dataset

    monkeypatch.chdir(OURS.parents[1])
    out = tmp_path / "out"
    assert main(["--config", f"configs/cerebras210/{name}.yaml", "--output_dir", str(out), *RUNNER]) == 0
    assert verify_dataset(str(out)).ok


def test_summarization_truncate_to_msl_cuts_the_pairs(tmp_path):
    """2.10's shipped summarization config asks for truncate_to_msl (spelt truncation_mode: keep_start): pairs
    longer than the row are cut, the prompt first, instead of dropped."""
    require_shared()
    from pipelines.create_hdf5_dataset import main

    config = _config("summarization_preprocessing", tmp_path, _pairs("source", "target")(tmp_path / "input"))
    short = tmp_path / "short.yaml"
    short.write_text(config.read_text().replace("max_seq_length: 2048", "max_seq_length: 256"))
    assert main(["--config", str(short), *RUNNER]) == 0
    params = json.loads((tmp_path / "out" / "data_params.json").read_text())
    assert params["input"]["used"] == 120 and not params["input"]["dropped_by_reason"]
    assert params["dataset"]["truncate"] == "keep_start"
    rows = read_rows(tmp_path / "out")
    assert (rows[:, 1].sum(axis=1) > 0).all()  # every row still trains its completion


def test_summarization_vsl_truncate_to_msl_cuts_the_pairs(tmp_path):
    """The same config with dataset.use_vsl: Summarization_VSL cuts the pairs longer than msl by the same rule
    (to msl positions, the EOS a label), where it used to drop them with a notice; `verify` passes the rows."""
    require_shared()
    from pipelines.create_hdf5_dataset import main
    from pipelines.tools.verify import verify_dataset

    config = _config("summarization_preprocessing", tmp_path, _pairs("source", "target")(tmp_path / "input"))
    text = config.read_text().replace("max_seq_length: 2048", "max_seq_length: 256")
    vsl = tmp_path / "vsl.yaml"
    vsl.write_text(text.replace("dataset:\n", "dataset:\n  use_vsl: true\n"))
    uncut = tmp_path / "uncut.yaml"  # the same pairs without truncate_to_msl: which are too long
    uncut.write_text(vsl.read_text().replace(str(tmp_path / "out"), str(tmp_path / "uncut"))
                     .replace("  truncate_to_msl:\n    truncation_mode: keep_start\n    max_turn_length: 512\n", ""))
    assert main(["--config", str(uncut), *RUNNER]) == 0
    too_long = json.loads((tmp_path / "uncut" / "data_params.json").read_text())["input"]["dropped_by_reason"]
    assert too_long.get("too_long", 0) > 0, too_long

    assert main(["--config", str(vsl), *RUNNER]) == 0
    out = tmp_path / "out"
    params = json.loads((out / "data_params.json").read_text())
    assert params["setup"]["dataset_processor"].endswith("VSLSummarizationPreprocessor")
    assert params["input"]["used"] == 120 and not params["input"]["dropped_by_reason"]
    assert params["dataset"]["truncate"] == "keep_start"
    from pipelines.config import load_config

    notices = load_config(["--config", str(vsl)])[0].notices
    assert not any(n.startswith("dataset.truncate_to_msl:") for n in notices), notices
    result = verify_dataset(str(out))
    assert result.ok, result.problems
    rows = read_rows(out)
    assert params["post-process"]["num_sequences_before_packing"] == 120
    # A cut pair fills a row alone: its last position is its EOS label, with span 0 and position msl - 1.
    full = rows[:, 4, -1] == 255
    assert full.sum() >= too_long["too_long"] and (rows[full, 3, -1] == 0).all()
    assert (rows[full, 2, -1] == params["processing"]["eos_id"]).all()


def test_preprocess_data_command(tmp_path):
    """2.10's command name: `preprocess_data --config cfg.yaml` runs the job; without --config it says how."""
    import subprocess
    import sys

    require_shared()
    code = "import sys; from pipelines.command import preprocess_data; preprocess_data()"
    bare = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=OURS.parents[1])
    assert bare.returncode == 2 and "--config is required" in bare.stderr
    config = _config("autoregressive_lm_preprocessing", tmp_path, _text(tmp_path / "input"))
    run = subprocess.run([sys.executable, "-c", code, "--config", str(config), *RUNNER], capture_output=True,
                         text=True, cwd=OURS.parents[1])
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads((tmp_path / "out" / "data_params.json").read_text())["post-process"]["n_examples"] > 0


# ---------------------------------------------------------------- the translation's rules, without a job

_BASE = {"setup": {"data": {"type": "local", "source": "/in"}, "mode": "pretraining", "output_dir": "/out"},
         "processing": {"custom_tokenizer": "neoxtokenizer", "tokenizer_params": {"encoder_file": "/t.json"},
                        "read_hook": "text_read_hook", "read_hook_kwargs": {"text_key": "text"}},
         "dataset": {}}


def _load(tmp_path, changes=None, flags=()):
    import copy

    import yaml

    from pipelines.config import load_config

    data = copy.deepcopy(_BASE)
    for section, body in (changes or {}).items():
        data.setdefault(section, {}).update(body)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(["--config", str(path), *flags])[0]


def test_a_misplaced_key_is_refused_in_2_10s_words(tmp_path):
    from pipelines.config import ConfigError

    with pytest.raises(ConfigError, match="Parameter 'max_seq_length' in section 'dataset' is misplaced. It should "
                                          "be in 'processing'."):
        _load(tmp_path, {"dataset": {"max_seq_length": 128}})


def test_an_unknown_key_is_named_and_ours_are_welcome(tmp_path):
    config = _load(tmp_path, {"processing": {"max_seq_lenght": 128, "gzip_level": 1}})
    assert any("processing.max_seq_lenght: unknown to 2.10 and to this tool" in n for n in config.notices)
    assert config.gzip_level == 1 and config.max_seq_length == 2048  # the misspelt key changed nothing


def test_flags_override_the_file_and_2_10_defaults_apply(tmp_path):
    config = _load(tmp_path, {"processing": {"max_seq_length": 128}}, ["--max_seq_length", "64"])
    assert (config.max_seq_length, config.source_of("max_seq_length")) == (64, "cli")
    assert config.use_ftfy is True and config.source_of("use_ftfy") == "default"  # 2.10's default, not 2.1.1's
    assert config.mode == "LMData" and config.jsonl_key == "text" and config.tokenizer_type == "NeoXTokenizer"


@pytest.mark.parametrize("changes, says", [
    ({"processing": {"huggingface_tokenizer": "/hf"}}, "both given"),
    ({"processing": {"read_hook_kwargs": {"text_key": "text", "image_key": "img"}}}, "image_key"),
    ({"processing": {"read_hook_kwargs": {}}}, "read_hook_kwargs.text_key is required"),
    ({"setup": {"mode": "finetuning"}}, "does not serve setup.mode finetuning"),
    ({"dataset": {"training_objective": "mlm"}}, "training_objective 'mlm' is not supported"),
    ({"setup": {"mode": "embedding_training"}}, "embedding models are not supported"),
    ({"processing": {"read_hook": "finetuning_llava_hook"}}, "multimodal data is not supported"),
])
def test_what_cannot_run_is_refused_naming_the_key(changes, says, tmp_path):
    from pipelines.config import ConfigError

    with pytest.raises(ConfigError, match=re.escape(says)):
        _load(tmp_path, changes)


def test_a_2_10_file_given_as_params_points_to_config(tmp_path):
    import yaml

    from pipelines.config import ConfigError, load_config

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_BASE))
    with pytest.raises(ConfigError, match="is a Cerebras 2.10 config .* --config"):
        load_config(["LMData", "--params", str(path)])


# ---------------------------------------------------------------- translate() exactly: values, notices, messages
# Each rule of pipelines/cerebras210.py on a small config, with the exact mode, values, notices and messages the
# user gets (mutation testing: scripts/mutation.py). The base is _BASE: text pretraining, NeoX tokenizer.

_PATH = "c.yaml"
_BASE_VALUES = {"output_dir": "/out", "input_dir": "/in", "tokenizer_type": "NeoXTokenizer",
                "encoder_file": "/t.json", "jsonl_key": "text"}
# 2.10's defaults that differ from ours, all of them but output_dir, which _BASE gives.
_BASE_DEFAULTS = {"use_ftfy": True, "ftfy_normalizer": "NFC", "chat_loss_span": "content", "txt_lines": True}
_SUPPORTED = ("supported: text pretraining (LM, VSL, FIM), prompt/completion and chat finetuning (VSL too), DPO, "
              "NLG")
_PC = {"read_hook": "prompt_completion_text_read_hook", "read_hook_kwargs": {"prompt_key": "p", "completion_key": "c"}}
_PC_CHAT = {"read_hook": "prompt_completion_chat_read_hook",
            "read_hook_kwargs": {"prompt_key": "p", "completion_key": "c"}}  # no mode of ours: its regions
_CHAT = {"read_hook": "chat_read_hook", "read_hook_kwargs": {"multi_turn_key": "m", "multi_turn_role_key": "r",
                                                             "multi_turn_content_key": "t"}}
_DPO = {"read_hook": "dpo_read_hook", "read_hook_kwargs": {"chosen_key": "ch", "rejected_key": "rj"}}
_NLG = {"read_hook": "nlg_read_hook", "read_hook_kwargs": {"context_key": "x", "completion_key": "y"}}


def _data(changes=None) -> dict:
    import copy

    data = copy.deepcopy(_BASE)
    for section, body in (changes or {}).items():
        if isinstance(body, dict) and isinstance(data.get(section), dict):
            data[section].update(body)
        else:
            data[section] = body
    return data


def _tr(changes=None):
    from pipelines.cerebras210 import translate

    return translate(_data(changes), _PATH)


def _refusal(changes) -> str:
    from pipelines.cerebras210 import translate
    from pipelines.settings import ConfigError

    with pytest.raises(ConfigError) as info:
        translate(_data(changes), _PATH)
    return str(info.value)


def _mode_of(mode210, processing=None, dataset=None):
    return _tr({"setup": {"mode": mode210}, "processing": processing or {}, "dataset": dataset or {}}).mode


def test_translate_base_exactly():
    data = _data()
    from pipelines.cerebras210 import translate

    config = translate(data, _PATH)
    assert (config.mode, config.values, config.defaults, config.notices) == ("LMData", _BASE_VALUES, _BASE_DEFAULTS,
                                                                             ())
    assert (config.hook, config.hook_digest) == ("text_read_hook", None)
    assert config.raw is data


def test_translate_copies_same_named_keys_even_when_false_or_zero():
    config = _tr({"setup": {"processes": 2, "metadata_files": None},
                  "processing": {"eos_id": 0, "seed": None, "use_ftfy": False, "shuffle_seed": 7},
                  "dataset": {"pack_sequences": False}})
    # A value given (0 and False too) is the setting; a null one is not given. use_ftfy given: no 2.10 default.
    assert config.values == {**_BASE_VALUES, "processes": 2, "eos_id": 0, "use_ftfy": False, "shuffle_seed": 7,
                             "pack_sequences": False}
    assert config.defaults == {"ftfy_normalizer": "NFC", "chat_loss_span": "content", "txt_lines": True}


def test_translate_takes_our_own_settings_from_a_section():
    config = _tr({"processing": {"gzip_level": 1}})
    assert config.values == {**_BASE_VALUES, "gzip_level": 1} and config.notices == ()


@pytest.mark.parametrize("section, key, what", [("setup", "image_dir", "multimodal data"),
                                                ("dataset", "num_patches", "multimodal data"),
                                                ("dataset", "mlm_fraction", "MLM (bert_pretraining)")])
def test_refused_settings_are_named_exactly(section, key, what):
    assert _refusal({section: {key: 1}}) == f"c.yaml: {section}.{key}: {what} is not supported; {_SUPPORTED}"


def test_refused_settings_given_as_false_or_empty_ask_for_nothing():
    config = _tr({"setup": {"image_dir": ""}, "dataset": {"mlm_with_gather": False, "excluded_tokens": [],
                                                          "image_token": None, "max_num_img": {}}})
    assert (config.mode, config.values) == ("LMData", _BASE_VALUES)


def test_modes_refused_or_unknown_are_named_exactly():
    assert _refusal({"setup": {"mode": "embedding_training"}}) == (
        "c.yaml: setup.mode 'embedding_training': embedding models are not supported; supported modes: "
        "pretraining, finetuning, dpo, nlg")
    assert _refusal({"setup": {"mode": "custom"}}) == (
        "c.yaml: setup.mode 'custom': custom token generators (setup.token_generator) are not supported; supported "
        "modes: pretraining, finetuning, dpo, nlg")
    assert _refusal({"setup": {"mode": "bert"}}) == (
        "c.yaml: setup.mode: expected one of pretraining, finetuning, dpo, nlg, got 'bert'")
    assert _refusal({"setup": {"mode": None}}) == (
        "c.yaml: setup.mode: expected one of pretraining, finetuning, dpo, nlg, got None")


def test_a_config_without_a_mode_is_told_where_a_211_params_file_goes(capsys):
    """A 2.1.1 params file given to --config (this project's configs/ are in 2.1.1's form) names no setup.mode:
    2.10's refusal of its first misplaced key says where such a file goes, not only where the key would."""
    from pipelines.cerebras210 import translate
    from pipelines.create_hdf5_dataset import main
    from pipelines.settings import ConfigError

    hint = (" (this file names no setup.mode: a Model Zoo 2.1.1 params file, as configs/*.yaml are, is given with "
            "--params)")
    misplaced = "Parameter 'use_ftfy' in section 'dataset' is misplaced. It should be in 'processing'."
    data = _data({"dataset": {"use_ftfy": True}})
    with pytest.raises(ConfigError) as info:
        translate(data, _PATH)
    assert str(info.value) == f"c.yaml: {misplaced}"  # a 2.10 config with its mode: 2.10's words alone
    del data["setup"]["mode"]
    with pytest.raises(ConfigError) as info:
        translate(data, _PATH)
    assert str(info.value) == f"c.yaml: {misplaced}{hint}"
    assert main(["--config", "configs/lm_data_mixture.yaml"]) == 2
    assert capsys.readouterr().err.endswith(f"error: configs/lm_data_mixture.yaml: {misplaced}{hint}\n")
    data = _data({"setup": {"image_dir": "/img"}})  # a 2.10 config without a mode, asking for what is refused
    del data["setup"]["mode"]
    with pytest.raises(ConfigError) as info:
        translate(data, _PATH)
    assert "not supported" in str(info.value) and "--params" not in str(info.value)


def test_is_multimodal_is_refused_only_when_true():
    assert _refusal({"dataset": {"is_multimodal": True}}) == (
        "c.yaml: dataset.is_multimodal: multimodal data is not supported")
    assert _tr({"dataset": {"is_multimodal": False}}).values == _BASE_VALUES


@pytest.mark.parametrize("key", ["semantic_loss_weight", "semantic_drop_mask", "semantic_attention_mask"])
def test_semantic_region_settings_need_a_region_hook(key):
    assert _refusal({"processing": {key: {"text": 1}}}) == (
        f"c.yaml: processing.{key}: semantic region settings are supported with a read hook of your own (its "
        "regions make the rows), not with text_read_hook")
    assert _tr({"setup": {"mode": "finetuning"}, "processing": {**_PC_CHAT, key: {"text": 1}}}).mode == "Chat"


def test_semantic_region_settings_left_empty_ask_for_nothing():
    assert _tr({"processing": {"semantic_loss_weight": {}, "semantic_drop_mask": None}}).mode == "LMData"


def test_fim_settings_without_the_objective_make_fim_rows_with_a_notice():
    fim = "dataset.fim_*: FIM rows, as the settings ask (2.10 needs training_objective: fim, and without it " \
          "writes plain LM rows)"
    config = _tr({"dataset": {"fim_rate": 0.5}})
    assert (config.mode, config.notices) == ("FIM", (fim,))
    assert config.values == {**_BASE_VALUES, "fim_rate": 0.5}
    config = _tr({"dataset": {"fim_rate": 0.5, "training_objective": "fim"}})
    assert (config.mode, config.notices) == ("FIM", ())


def test_settings_with_no_effect_here_are_noticed_once_each():
    config = _tr({"setup": {"data_splits_dir": "/splits"},
                  "processing": {"read_chunk_size": 1024, "UNSAFE_skip_jsonl_decoding_errors": False}})
    assert config.notices == (
        "data_splits_dir: accepted, no effect here (splits are made in one job, without a copy of the raw records)",
        "read_chunk_size: accepted, no effect here (records are read in packing groups of packing_group_mb)")
    assert _tr({"processing": {"UNSAFE_skip_jsonl_decoding_errors": True}}).notices == (
        "UNSAFE_skip_jsonl_decoding_errors: accepted, no effect here (a line that is not valid JSON always goes to "
        "the dead letters)",)


# --- sections

def test_sections_other_than_2_10s_are_noticed_and_the_rest_read():
    from pipelines.cerebras210 import translate

    data = {"notes": {"a": 1}, **_data()}  # first: the sections after it are still read
    config = translate(data, _PATH)
    assert config.notices == ("notes: not a section of a 2.10 config (setup, processing, dataset): ignored",)
    assert config.values == _BASE_VALUES


def test_a_section_left_out_reads_as_empty():
    from pipelines.cerebras210 import translate

    data = _data()
    del data["dataset"]
    config = translate(data, _PATH)
    assert (config.mode, config.values, config.notices) == ("LMData", _BASE_VALUES, ())


def test_a_section_must_be_a_mapping_or_empty():
    assert _refusal({"dataset": ["use_vsl"]}) == "c.yaml: section 'dataset' must be a mapping"
    assert _tr({"dataset": None}).values == _BASE_VALUES


def test_keys_misplaced_unknown_and_also_read():
    assert _refusal({"setup": {"use_vsl": True}}) == (
        "c.yaml: Parameter 'use_vsl' in section 'setup' is misplaced. It should be in 'dataset'.")
    # After a known key, an unknown one is still named; the keys 2.10's code reads beyond its lists are silent.
    config = _tr({"processing": {"seed": 1, "max_seq_lenght": 128, "end_of_turn_token": "<eot>"}})
    assert config.notices == ("processing.max_seq_lenght: unknown to 2.10 and to this tool: ignored",)
    assert config.values == {**_BASE_VALUES, "seed": 1}


# --- context splits

def test_context_splits_take_the_place_of_max_seq_length():
    dropped = "processing.max_seq_length 128: not used, the context splits give the lengths (as in 2.10)"
    config = _tr({"setup": {"context_splits": {"MSL_List": [128]}}, "processing": {"max_seq_length": 128}})
    assert "max_seq_length" not in config.values and config.notices == (dropped,)
    per_split = {"train": {"split_fraction": 0.9, "context_splits": {"MSL_List": [128]}}, "val": 0.1}
    config = _tr({"setup": {"data_splits": per_split}, "processing": {"max_seq_length": 128}})
    assert "max_seq_length" not in config.values and config.notices == (dropped,)


def test_max_seq_length_stays_without_context_splits():
    config = _tr({"setup": {"data_splits": {"train": {"split_fraction": 1.0}}}, "processing": {"max_seq_length": 128}})
    assert config.values["max_seq_length"] == 128 and config.notices == ()
    assert _tr({"setup": {"context_splits": {"MSL_List": [128]}}}).notices == ()  # nothing to drop


# --- the data source

def test_local_data_source_keys():
    config = _tr({"setup": {"data": {"source": "/in", "subsets": ["a"], "top_level_as_subsets": True, "glob": "*"}}})
    assert config.values == {**_BASE_VALUES, "subsets": ["a"], "top_level_as_subsets": True}
    assert config.notices == ("setup.data.glob: not read for type local: ignored",)
    assert _tr({"setup": {"data": {"type": "local", "source": "/x"}}}).values["input_dir"] == "/x"


@pytest.mark.parametrize("data, message", [
    (None, "setup.data (type: local, source: DIR) or setup.metadata_files is required"),
    ("/in", "setup.data must be a mapping (type: local, source: DIR)"),
    ({"type": "s3", "source": "/in"}, "setup.data.type: expected local or huggingface, got 's3'"),
    ({"type": "local"}, "setup.data.source (the input directory) is required"),
])
def test_data_source_refusals(data, message):
    assert _refusal({"setup": {"data": data}}) == f"c.yaml: {message}"


def test_metadata_files_stand_for_the_data():
    config = _tr({"setup": {"data": None, "metadata_files": "/m.txt"}})
    assert config.values == {**{k: v for k, v in _BASE_VALUES.items() if k != "input_dir"}, "metadata_files": "/m.txt"}


def test_huggingface_source_exactly():
    config = _tr({"setup": {"data": {"type": "huggingface", "source": 7, "split": "train", "revision": "v1",
                                     "cache_dir": "/c"}}})
    base = {k: v for k, v in _BASE_VALUES.items() if k != "input_dir"}
    assert config.values == {**base, "hf_dataset": "7", "hf_split": "train", "hf_options": {"revision": "v1"}}
    assert config.notices == ("setup.data.cache_dir: accepted, no effect here (the split's files are read where they "
                              "are, without a copy)",)
    assert "hf_options" not in _tr({"setup": {"data": {"type": "huggingface", "source": "u/d", "split": "t"}}}).values


@pytest.mark.parametrize("data, message", [
    ({"split": "train"}, "setup.data.source (the dataset's name on the Hub, or its directory) is required for type "
                         "huggingface"),
    ({"source": "u/d", "split": ""}, "setup.data.split (e.g. train) is required for type huggingface"),
    ({"source": "u/d", "split": "train", "top_level_as_subsets": True},
     "setup.data.top_level_as_subsets: subsets are directories of a local source; they do not apply to type "
     "huggingface"),
    ({"source": "u/d", "split": "train", "x": 1},
     "setup.data: x: not supported for a Hugging Face dataset (supported: name, data_dir, data_files, revision, "
     "token)"),
])
def test_huggingface_source_refusals(data, message):
    assert _refusal({"setup": {"data": {"type": "huggingface", **data}}}) == f"c.yaml: {message}"


# --- the tokenizer

@pytest.mark.parametrize("processing, values", [
    ({"huggingface_tokenizer": "/hf", "custom_tokenizer": None, "tokenizer_params": None},
     {"tokenizer_type": "HuggingFaceTokenizer", "huggingface_tokenizer": "/hf"}),
    ({"huggingface_tokenizer": "/hf", "custom_tokenizer": None, "tokenizer_params": {"use_fast": True}},
     {"tokenizer_type": "HuggingFaceTokenizer", "huggingface_tokenizer": "/hf", "tokenizer_params": {"use_fast": True}}),
    ({"custom_tokenizer": "gpt2tokenizer", "tokenizer_params": {"vocab_file": "/v", "encoder_file": "/e"}},
     {"tokenizer_type": "GPT2Tokenizer", "vocab_file": "/v", "encoder_file": "/e"}),
    ({"custom_tokenizer": "neoxtokenizer", "tokenizer_params": {"encoder_file": "/e"}},
     {"tokenizer_type": "NeoXTokenizer", "encoder_file": "/e"}),
    ({"custom_tokenizer": "my.module:Tok", "tokenizer_params": None},
     {"tokenizer_type": "HuggingFaceTokenizer", "custom_tokenizer": "my.module:Tok", "tokenizer_params": {}}),
])
def test_tokenizers_by_2_10s_names(processing, values):
    config = _tr({"processing": processing})
    rest = {k: v for k, v in _BASE_VALUES.items() if k not in ("tokenizer_type", "encoder_file")}
    assert config.values == {**rest, **values}


@pytest.mark.parametrize("processing, message", [
    ({"tokenizer_params": ["a"]}, "processing.tokenizer_params must be a mapping"),
    ({"huggingface_tokenizer": "/hf"}, "processing.huggingface_tokenizer and custom_tokenizer are both given: "
                                       "choose one"),
    ({"custom_tokenizer": "gpt2tokenizer", "tokenizer_params": {"vocab_file": "/v", "encoder_file": "/e", "x": 1}},
     "processing.tokenizer_params ['x']: not supported for gpt2tokenizer (it takes vocab_file, encoder_file)"),
    ({"custom_tokenizer": "gpt2tokenizer", "tokenizer_params": {"encoder_file": "/e"}},
     "processing.tokenizer_params.vocab_file is required for gpt2tokenizer"),
    ({"custom_tokenizer": "gpt2tokenizer", "tokenizer_params": {"vocab_file": "/v"}},
     "processing.tokenizer_params.encoder_file is required for gpt2tokenizer"),
    ({"tokenizer_params": {"encoder_file": "/e", "vocab_file": "/v"}},
     "processing.tokenizer_params ['vocab_file']: not supported for neoxtokenizer (it takes encoder_file)"),
    ({"tokenizer_params": {}}, "processing.tokenizer_params.encoder_file is required for neoxtokenizer"),
    ({"custom_tokenizer": "MyTokenizer"}, "processing.custom_tokenizer 'MyTokenizer': expected gpt2tokenizer, "
                                          "neoxtokenizer, or 'module:Class'"),
    ({"custom_tokenizer": None}, "a tokenizer is required: processing.huggingface_tokenizer or custom_tokenizer "
                                 "(gpt2tokenizer, neoxtokenizer)"),
])
def test_tokenizer_refusals(processing, message):
    assert _refusal({"processing": processing}) == f"c.yaml: {message}"


# --- the read hook and its kwargs

@pytest.mark.parametrize("processing, message", [
    ({"read_hook": None}, "processing.read_hook is required (e.g. "
                          "cerebras.modelzoo.data_preparation.data_preprocessing.hooks:text_read_hook)"),
    ({"read_hook_kwargs": ["text_key"]}, "processing.read_hook_kwargs must be a mapping"),
    ({"read_hook_kwargs": {"text_key": ""}}, "processing.read_hook_kwargs.text_key is required by text_read_hook"),
    ({"read_hook_kwargs": None}, "processing.read_hook_kwargs.text_key is required by text_read_hook"),
    ({"read_hook_kwargs": {"text_key": "t", "image_key": "i"}},
     "processing.read_hook_kwargs.image_key: multimodal data is not supported"),
    ({"read_hook_kwargs": {"text_key": "t", "b": 1, "a": 2}},
     "processing.read_hook_kwargs ['a', 'b']: not read by text_read_hook (it takes text_key)"),
    ({**_DPO, "read_hook_kwargs": {**_DPO["read_hook_kwargs"], "x_key": "x"}},
     "processing.read_hook_kwargs ['x_key']: not read by dpo_read_hook (it takes chosen_key, rejected_key, "
     "prompt_key, assistant_role)"),
    # A built-in hook run on its regions still needs its kwargs; any hook needs a column.
    ({**_PC_CHAT, "read_hook_kwargs": {"prompt_key": "p"}},
     "processing.read_hook_kwargs: prompt_completion_chat_read_hook needs read_hook_kwargs.completion_key"),
    ({"read_hook": "my_hooks:qa", "read_hook_kwargs": {"q": "question"}},
     "processing.read_hook_kwargs: read_hook_kwargs names no column: give at least one kwarg ending in _key"),
])
def test_hook_refusals(processing, message):
    assert _refusal({"processing": processing}) == f"c.yaml: {message}"


def test_a_hook_spec_that_cannot_be_parsed_is_named_with_the_config():
    from transforms.io.hooks import parse_hook_spec

    with pytest.raises(ValueError) as info:
        parse_hook_spec("nohook")
    assert str(info.value).startswith("processing.read_hook 'nohook': expected 'module:function'")
    assert _refusal({"processing": {"read_hook": "nohook"}}) == f"c.yaml: {info.value}"


def test_a_hook_module_is_not_imported_to_translate_the_config():
    # The workers import it: here only its name and kwargs are read (no such module exists on this machine).
    config = _tr({"processing": {"read_hook": "no_such_package.hooks:qa", "read_hook_kwargs": {"q_key": "q"}}})
    assert (config.mode, config.hook, config.hook_digest) == ("LMData", "no_such_package.hooks:qa", None)
    assert config.values == {k: v for k, v in _BASE_VALUES.items() if k != "jsonl_key"}


def test_a_hook_file_is_one_job_by_its_text(tmp_path):
    import hashlib

    text = "def qa(example, **kwargs):\n    return []\n"
    (tmp_path / "h.py").write_text(text)
    config = _tr({"processing": {"read_hook": f"{tmp_path / 'h.py'}:qa", "read_hook_kwargs": {"q_key": "q"}}})
    assert config.hook_digest == hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert len(config.hook_digest) == 64


def test_chat_and_dpo_hooks_take_their_optional_kwargs():
    config = _tr({"setup": {"mode": "finetuning"},
                  "processing": {**_CHAT, "read_hook_kwargs": {**_CHAT["read_hook_kwargs"], "has_system_prompt": 1}}})
    assert config.notices == ("read_hook_kwargs.has_system_prompt: accepted; a leading system message is always "
                              "read as the system turn",)
    config = _tr({"setup": {"mode": "dpo"},
                  "processing": {**_DPO, "read_hook_kwargs": {**_DPO["read_hook_kwargs"], "prompt_key": "pr",
                                                              "assistant_role": "Assistant:"}}})
    assert (config.mode, config.hook) == ("DPO", "dpo_read_hook")


def test_dpo_with_another_assistant_marker_runs_on_its_regions():
    # Our DPO mode splits transcripts at "Assistant:"; another marker is 2.10's rule, applied to the hook's regions,
    # so the record keys are the hook's columns, not chosen_key / rejected_key settings.
    config = _tr({"setup": {"mode": "dpo"},
                  "processing": {**_DPO, "read_hook_kwargs": {**_DPO["read_hook_kwargs"], "assistant_role": "Bot:"}}})
    assert (config.mode, config.hook) == ("DPO", "dpo_read_hook")
    assert config.values == {k: v for k, v in _BASE_VALUES.items() if k != "jsonl_key"}


# --- modes and the keys each hook gives

_REGION_MODES = [("dpo", {}, "DPO"), ("finetuning", {}, "Chat"), ("finetuning", {"use_vsl": True}, "Chat_VSL"),
                 ("nlg", {}, "Chat"), ("nlg", {"use_vsl": True}, "Chat_VSL"), ("pretraining", {}, "LMData"),
                 ("pretraining", {"use_vsl": True}, "LMData_VSL"), ("pretraining", {"fim_rate": 0.5}, "FIM")]


@pytest.mark.parametrize("mode210, dataset, mode", _REGION_MODES)
def test_a_region_hooks_mode(mode210, dataset, mode):
    assert _mode_of(mode210, _PC_CHAT, dataset) == mode


@pytest.mark.parametrize("mode210, dataset, message", [
    ("dpo", {"use_vsl": True}, "dataset.use_vsl and training_objective do not apply to setup.mode dpo"),
    ("dpo", {"training_objective": "fim"}, "dataset.use_vsl and training_objective do not apply to setup.mode dpo"),
    ("finetuning", {"training_objective": "fim"}, "dataset.training_objective does not apply to finetuning"),
    ("nlg", {"training_objective": "fim"}, "dataset.training_objective does not apply to finetuning"),
])
def test_a_region_hooks_mode_refusals(mode210, dataset, message):
    assert _refusal({"setup": {"mode": mode210}, "processing": _PC_CHAT, "dataset": dataset}) == f"c.yaml: {message}"


@pytest.mark.parametrize("mode210, processing, dataset, mode", [
    ("pretraining", {}, {}, "LMData"),
    ("pretraining", {}, {"use_vsl": True}, "LMData_VSL"),
    ("pretraining", {}, {"use_vsl": True, "fim_rate": 0.5}, "LMData_VSL"),  # FIM settings ask nothing of VSL
    ("pretraining", {}, {"training_objective": "fim"}, "FIM"),
    ("pretraining", {}, {"fim_rate": 0.5}, "FIM"),
    ("pretraining", {}, {"spm_rate": 0.5}, "FIM"),
    ("pretraining", {}, {"fim_prefix_tok": "<p>"}, "FIM"),
    ("pretraining", {}, {"fim_middle_tok": "<m>"}, "FIM"),
    ("pretraining", {}, {"fim_suffix_tok": "<s>"}, "FIM"),
    ("finetuning", _PC, {}, "Summarization"),
    ("finetuning", _PC, {"fim_rate": 0.5}, "Summarization"),  # FIM settings make FIM rows only when pretraining
    ("finetuning", _PC, {"use_vsl": True}, "Summarization_VSL"),
    ("finetuning", _CHAT, {}, "Chat"),
    ("finetuning", _CHAT, {"use_vsl": True}, "Chat_VSL"),
    ("dpo", _DPO, {}, "DPO"),
    ("nlg", _NLG, {}, "Summarization"),
])
def test_a_builtin_hooks_mode(mode210, processing, dataset, mode):
    assert _mode_of(mode210, processing, dataset) == mode


@pytest.mark.parametrize("mode210, processing, dataset, message", [
    ("finetuning", {}, {}, "processing.read_hook text_read_hook does not serve setup.mode finetuning (it serves "
                           "pretraining)"),
    ("dpo", _PC, {}, "processing.read_hook prompt_completion_text_read_hook does not serve setup.mode dpo (it serves "
                     "finetuning)"),
    ("pretraining", {}, {"training_objective": "mlm"},
     "dataset.training_objective 'mlm' is not supported (supported: fim, or none for plain next-token prediction)"),
    ("pretraining", {}, {"training_objective": "fim", "use_vsl": True},
     "dataset.training_objective fim applies to setup.mode pretraining without use_vsl"),
    ("finetuning", _PC, {"training_objective": "fim"},
     "dataset.training_objective fim applies to setup.mode pretraining without use_vsl"),
    ("dpo", _DPO, {"use_vsl": True}, "dataset.use_vsl does not apply to setup.mode dpo"),
    ("nlg", _NLG, {"use_vsl": True}, "dataset.use_vsl does not apply to setup.mode nlg"),
])
def test_a_builtin_hooks_mode_refusals(mode210, processing, dataset, message):
    assert _refusal({"setup": {"mode": mode210}, "processing": processing, "dataset": dataset}) == f"c.yaml: {message}"


@pytest.mark.parametrize("mode210, processing, keys", [
    ("finetuning", _PC, {"prompt_key": "p", "completion_key": "c"}),
    ("nlg", _NLG, {"prompt_key": "x", "completion_key": "y"}),  # nlg's context is the prompt
    ("finetuning", _CHAT, {"messages_key": "m", "role_key": "r", "content_key": "t"}),
    ("dpo", _DPO, {"chosen_key": "ch", "rejected_key": "rj"}),
    ("dpo", {**_DPO, "read_hook_kwargs": {**_DPO["read_hook_kwargs"], "prompt_key": "pr"}},
     {"chosen_key": "ch", "rejected_key": "rj", "prompt_key": "pr"}),
    ("finetuning", _PC_CHAT, {}),  # a region hook: its *_key columns are read, no key setting of ours
])
def test_the_keys_each_hook_gives(mode210, processing, keys):
    config = _tr({"setup": {"mode": mode210}, "processing": processing})
    assert config.values == {**{k: v for k, v in _BASE_VALUES.items() if k != "jsonl_key"}, **keys}
    assert config.notices == ()


# --- dataset settings

def test_sep_token_is_read_for_prompt_completion_text_only():
    assert _tr({"setup": {"mode": "finetuning"}, "processing": _PC, "dataset": {"sep_token": "<sep>"}}).values[
        "sep_token"] == "<sep>"
    # null: 2.10's "no separator", which is our default (no sep_token setting)
    assert "sep_token" not in _tr({"setup": {"mode": "finetuning"}, "processing": _PC,
                                   "dataset": {"sep_token": None}}).values
    assert "sep_token" not in _tr({"dataset": {"sep_token": "<sep>"}}).values  # LMData has no separator


@pytest.mark.parametrize("mode210, processing, dataset", [("finetuning", _CHAT, {}),
                                                          ("finetuning", _CHAT, {"use_vsl": True}),
                                                          ("dpo", _DPO, {})])
def test_chat_template_is_read_for_chat_and_dpo(mode210, processing, dataset):
    config = _tr({"setup": {"mode": mode210}, "processing": processing,
                  "dataset": {**dataset, "chat_template": "{{ x }}"}})
    assert config.values["chat_template"] == "{{ x }}" and config.notices == ()


def test_chat_template_elsewhere_is_noticed():
    config = _tr({"dataset": {"chat_template": "{{ x }}"}})
    assert "chat_template" not in config.values
    assert config.notices == ("dataset.chat_template: not read for LMData: ignored",)


@pytest.mark.parametrize("key", ["response_delimiter", "respose_delimiter"])  # 2.10 reads its own misspelling too
def test_a_response_delimiter_is_noticed(key):
    assert _tr({"dataset": {key: "<r>"}}).notices == (
        "dataset.response_delimiter: not needed here (prompt and responses are told apart by rendering them): "
        "ignored",)


_KEEP_END = ("dataset.truncate_to_msl.prompt_truncation_mode {!r}: not keep_start or keep_end; keep_end, as 2.10")


@pytest.mark.parametrize("truncate, how, notices", [
    ({"prompt_truncation_mode": "keep_start"}, "keep_start", ()),
    ({"prompt_truncation_mode": "keep_end"}, "keep_end", ()),
    # 2.10 reads prompt_truncation_mode; a shipped config's truncation_mode is read when that is absent.
    ({"truncation_mode": "keep_start"}, "keep_start",
     ("dataset.truncate_to_msl.truncation_mode: read as prompt_truncation_mode (keep_start); 2.10 ignores this "
      "spelling and keeps the end",)),
    ({"prompt_truncation_mode": "keep_start", "truncation_mode": "keep_end"}, "keep_start", ()),
    ({"prompt_truncation_mode": "middle"}, "keep_end", (_KEEP_END.format("middle"),)),
    (True, "keep_end", (_KEEP_END.format(None),)),  # not a mapping: no mode given
    ({"prompt_truncation_mode": "keep_start", "max_turn_length": 5}, "keep_start",
     ("dataset.truncate_to_msl.max_turn_length: no per-turn floor here: the prompt (user turns, longest first) is "
      "cut before the answer (docs/guides/chat.md, docs/guides/modes.md)",)),
    ({"prompt_truncation_mode": "keep_start", "b": 1, "a": 2}, "keep_start",
     ("dataset.truncate_to_msl ['a', 'b']: unknown keys, ignored",)),
])
def test_truncate_to_msl(truncate, how, notices):
    config = _tr({"setup": {"mode": "finetuning"}, "processing": _PC, "dataset": {"truncate_to_msl": truncate}})
    assert (config.values["truncate"], config.notices) == (how, notices)


def test_truncate_to_msl_empty_asks_nothing():
    assert "truncate" not in _tr({"dataset": {"truncate_to_msl": {}}}).values


# --- token_limit

def test_token_limit_is_a_one_source_budget():
    config = _tr({"processing": {"token_limit": "2k"}})
    assert "input_dir" not in config.values
    assert config.values["mixture"] == [{"source": "/in", "name": "source", "tokens": 2000}]
    assert config.notices == (
        "processing.token_limit 2000: the documents a keyed hash of their content draws, to within half a document "
        "of the limit (2.10 stops after the first chunks tokenized reach it, which depend on its processes' order)",)
    assert _tr({"processing": {"token_limit": None}}).values == _BASE_VALUES


def test_token_limit_zero_is_no_limit_as_in_210_and_said():
    # 2.10 tests `if self.token_limit:`, so 0 asks for no limit there; here too, but not in silence.
    for zero in (0, 0.0):
        config = _tr({"processing": {"token_limit": zero}})
        assert config.values == _BASE_VALUES
        assert config.notices == ("processing.token_limit 0: no limit (2.10 reads 0 as no limit too)",)
    assert _tr({"processing": {"token_limit": False}}).notices == ()


def test_token_limit_refusals():
    assert _refusal({"processing": {"token_limit": "lots"}}) == (
        "c.yaml: processing.token_limit: 'lots' is not a number of tokens (e.g. 2000000, 500M, 1.5B, 2T)")
    assert _refusal({"setup": {"data": {"type": "huggingface", "source": "u/d", "split": "t"}},
                     "processing": {"token_limit": 100}}) == (
        "c.yaml: processing.token_limit: supported with a local setup.data.source only")


# --- the small helpers

def test_is_210_config():
    from pipelines.cerebras210 import is_210_config

    assert is_210_config({"setup": {"mode": "dpo"}}) is True
    assert is_210_config({"setup": {"mode": "embedding_training"}}) is True  # 2.10's, refused later by name
    assert is_210_config({"setup": {"mode": "LMData"}}) is False
    assert is_210_config({"setup": {"input_dir": "/in"}}) is False  # a params file of ours
    assert is_210_config({"setup": None}) is False
    assert is_210_config(["setup"]) is False


def test_hook_names_and_stripping():
    from pipelines.cerebras210 import HOOK_PREFIX, hook_name, hook_strips

    assert hook_name(f"{HOOK_PREFIX}chat_read_hook") == "chat_read_hook"
    assert hook_name("prompt_completion_key") == "prompt_completion_text_read_hook"
    assert hook_name("my.hooks:chat_read_hook") is None
    assert [hook_strips(s) for s in ("text_read_hook", f"{HOOK_PREFIX}chat_read_hook", "nlg_read_hook", None)] == [
        True, True, False, False]


def test_which_hooks_give_their_regions():
    from pipelines.cerebras210 import uses_regions

    assert uses_regions(None) is False
    assert uses_regions("text_read_hook") is False
    assert uses_regions("prompt_completion_chat_read_hook") is True  # a built-in with no mode of ours
    assert uses_regions("my.hooks:qa") is True
    assert uses_regions("dpo_read_hook") is False
    assert uses_regions("dpo_read_hook", {"assistant_role": " Assistant: "}) is False  # our DPO mode's marker
    assert uses_regions("dpo_read_hook", {"assistant_role": "bot:"}) is True  # 2.10's rule, on the regions
    assert uses_regions("text_read_hook", {"assistant_role": "bot:"}) is False


def test_raw_json_is_sorted_and_writes_any_value():
    import datetime

    from pipelines.cerebras210 import raw_json

    # YAML reads an unquoted date as a date: written as its text, keys sorted for a stable config hash.
    assert raw_json({"b": 1, "a": datetime.date(2024, 1, 2)}) == '{"a": "2024-01-02", "b": 1}'


def test_merge_sections_keeps_ours_and_adds_2_10s():
    from pipelines.cerebras210 import merge_sections

    ours = {"setup": {"mode": "LMData", "input_dir": "/in"}, "processing": {"eos_id": 0, "pad_id": None}}
    raw = {"setup": {"mode": "pretraining", "input_dir": "/other", "data": {"source": "/in"}},
           "processing": {"eos_id": 5, "pad_id": 1}, "dataset": {"use_vsl": False}, "notes": {"x": 1}}
    assert merge_sections(ours, raw) == {
        "setup": {"mode": "pretraining", "input_dir": "/in", "data": {"source": "/in"}},  # 2.10's mode kept
        "processing": {"eos_id": 0, "pad_id": 1},  # ours where set (0 too), 2.10's where ours is null
        "dataset": {"use_vsl": False}}
    assert ours == {"setup": {"mode": "LMData", "input_dir": "/in"}, "processing": {"eos_id": 0, "pad_id": None}}
    assert merge_sections({"setup": {"a": 1}}, {"setup": None}) == {"setup": {"a": 1}}
