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
