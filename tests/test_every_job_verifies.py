"""No job writes what its own `verify` rejects: the class of defect behind issue #44's 2.10 VSL chat rows.

Every shipped Cerebras 2.10 config whose mode has a VSL form, run again with `dataset.use_vsl: True`; and every
mode's command-line form as a mixture of two sources, cut and repeated, and with splits (tests/test_splits_pipeline.py
runs each mode's splits; test_cerebras210_configs.py each shipped config as it is). A job whose output `verify`
rejects fails here, whatever else its own tests check.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.helpers import REFERENCE, RUNNER, SHARED, require_shared, run_job
from tests.test_cerebras210_configs import SUPPORTED, _config

HF = REFERENCE / "tokenizer" / "hf"
# The shipped 2.10 configs whose mode has a VSL form (2.10's `dataset.use_vsl`): pretraining, prompt/completion
# and chat finetuning. FIM and DPO have none.
VSL_FORMS = {"LMData": "LMData_VSL", "Summarization": "Summarization_VSL", "Chat": "Chat_VSL"}


def _verify(out: Path) -> None:
    from pipelines.tools import verify_dataset

    result = verify_dataset(str(out))
    assert result.ok, result.lines()


# nlg has no VSL form in 2.10 (its use_vsl is refused, naming the mode).
@pytest.mark.parametrize("name", sorted(n for n, (_, mode, _) in SUPPORTED.items()
                                        if mode in VSL_FORMS and not n.startswith("nlg")))
def test_a_shipped_2_10_config_with_use_vsl_verifies(name, tmp_path):
    from pipelines.create_hdf5_dataset import main

    require_shared()
    make, mode, outputs = SUPPORTED[name]
    path = _config(name, tmp_path, make(tmp_path / "input"))
    config = yaml.safe_load(path.read_text())
    config.setdefault("dataset", {})["use_vsl"] = True
    path.write_text(yaml.safe_dump(config))
    assert main(["--config", str(path), *RUNNER]) == 0
    out = tmp_path / "out"
    for sub in outputs or [""]:
        params = json.loads((out / sub / "data_params.json").read_text())
        assert params["setup"]["dataset_processor"] == f"VSL{_PROCESSOR[mode]}", params["setup"]
        assert params["post-process"]["n_examples"] > 0, sub
    _verify(out)


_PROCESSOR = {"LMData": "LMDataPreprocessor", "Summarization": "SummarizationPreprocessor",
              "Chat": "ChatPreprocessor"}


# ---------------------------------------------------------------- every mode's command line, mixed


def _texts(root: Path, name: str, lines: list[str]) -> Path:
    (root / name).mkdir(parents=True)
    (root / name / "part.jsonl").write_text("".join(lines))
    return root / name


def _sources(mode: str, root: Path) -> tuple[Path, Path]:
    """Two sources of the mode's records, one about three times the other."""
    prose = require_shared(SHARED / "corpora" / "en_small_pd.jsonl").read_text().splitlines()
    if mode in ("LMData", "LMData_VSL", "FIM"):
        return _texts(root, "a", [x + "\n" for x in prose[:90]]), _texts(root, "b", [x + "\n" for x in prose[90:120]])
    if mode in ("Chat", "Chat_VSL"):
        def chats(start: int, n: int) -> list[str]:
            return [json.dumps({"messages": [{"role": "user", "content": f"question {i} " * (1 + i % 5)},
                                             {"role": "assistant", "content": f"answer {i} " * (1 + i % 7)}]}) + "\n"
                    for i in range(start, start + n)]
        return _texts(root, "a", chats(0, 90)), _texts(root, "b", chats(90, 30))

    def pairs(lines: list[str]) -> list[str]:
        out = []
        for line in lines:
            text = json.loads(line)["text"]
            out.append(json.dumps({"prompt": text[:200], "completion": text[200:320], "chosen": text[200:260],
                                   "rejected": text[260:320]}) + "\n")
        return out
    return _texts(root, "a", pairs(prose[:90])), _texts(root, "b", pairs(prose[90:120]))


MODE_FLAGS = {
    "LMData": [],
    "LMData_VSL": [],
    "FIM": ["--fim_prefix_tok", "<fim_prefix>", "--fim_middle_tok", "<fim_middle>", "--fim_suffix_tok",
            "<fim_suffix>"],
    "Summarization": ["--prompt_key", "prompt", "--completion_key", "completion"],
    "Summarization_VSL": ["--prompt_key", "prompt", "--completion_key", "completion"],
    "Chat": ["--chat_template", "chatml"],
    "Chat_VSL": ["--chat_template", "chatml"],
    "DPO": ["--prompt_key", "prompt", "--chat_template", "chatml"],
}


@pytest.mark.parametrize("splits", [False, True], ids=["one_output", "splits"])
@pytest.mark.parametrize("mode", sorted(MODE_FLAGS))
def test_every_mode_as_a_mixture_verifies(mode, splits, tmp_path):
    """Source b (a third of a's records) is drawn three times over, which limits the mixture, so a is cut below
    what it holds: the copies, the cut and the mixture section must all pass verify, with and without splits."""
    a, b = _sources(mode, tmp_path / "in")
    mixture = [{"source": str(a), "name": "a", "weight": 0.4},
               {"source": str(b), "name": "b", "weight": 0.6, "max_repeats": 3}]
    out = tmp_path / "out"
    argv = [mode, *MODE_FLAGS[mode], "--mixture", json.dumps(mixture), "--output_dir", str(out),
            "--tokenizer_type", "HuggingFaceTokenizer", "--huggingface_tokenizer", str(require_shared(HF)),
            "--max_seq_length", "128"]
    if splits:
        argv += ["--data_splits", "train=0.7,validation=0.3"]
    summary = run_job(argv)
    sources = json.loads((out / "data_params.json").read_text())["mixture"]["sources"]
    assert sources["a"]["tokens_taken"] < sources["a"]["tokens_available"], sources
    assert sources["b"]["repeats"] > 0, sources
    if splits:
        assert [o["path"] for o in summary["outputs"]] == ["train", "validation"]
    _verify(out)


@pytest.mark.parametrize("mode", sorted(MODE_FLAGS))
def test_every_mode_deduplicated_verifies(mode, tmp_path):
    """Each mode's records with copies of a third of them, deduplicated (near) before a split: every copy is
    removed, listed and counted, and verify accepts the outputs and the job's summary (the class of defect the
    mixture's check had: a new stage that drops records must not make a job's output unverifiable)."""
    a, b = _sources(mode, tmp_path / "in")
    (a / "copies.jsonl").write_text((b / "part.jsonl").read_text())  # b's 30 records twice in one input
    out = tmp_path / "out"
    summary = run_job([mode, *MODE_FLAGS[mode], "--input_dir", str(tmp_path / "in"), "--output_dir", str(out),
                       "--tokenizer_type", "HuggingFaceTokenizer", "--huggingface_tokenizer",
                       str(require_shared(HF)), "--max_seq_length", "128", "--dedup", "near",
                       "--data_splits", "train=0.7,validation=0.3"])
    # Every copy is removed but those whose record was dropped before (a pair too long for DPO's rows), as its
    # original was.
    other = summary["input"]["dropped"] - sum(summary["dedup"]["documents_removed"].values())
    assert 30 - other <= summary["dedup"]["documents_removed"]["exact"] <= 30, (summary["dedup"], other)
    assert summary["dedup"]["listed"] == sum(summary["dedup"]["documents_removed"].values())
    _verify(out)
