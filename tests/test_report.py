"""`report` (a self-contained HTML file with non-empty embedded PNGs) and `inspect` (a row made readable)."""

from __future__ import annotations

import base64
import json
import re
import sys

import pytest

from pipelines.create_hdf5_dataset import main
from tests.helpers import GOLDEN, ROOT, require_shared, run_job

GPT2 = ROOT / "data" / "tokenizers" / "gpt2"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def summarization_out(tmp_path_factory):
    """A Summarization output over prompt/completion records cut from the sample corpus."""
    base = tmp_path_factory.mktemp("report")
    src = base / "in"
    src.mkdir()
    lines = []
    for line in (ROOT / "data" / "sample" / "jargon_devil_sample.jsonl").read_text().splitlines()[:40]:
        text = json.loads(line)["text"]
        lines.append(json.dumps({"prompt": "Define: " + text[:150], "completion": " PLAIN" + text[150:230]}))
    (src / "a.jsonl").write_text("\n".join(lines) + "\n")
    out = base / "out"
    run_job(["Summarization", "--input_dir", str(src), "--output_dir", str(out), "--tokenizer_type", "GPT2Tokenizer",
             "--vocab_file", str(GPT2 / "vocab.bpe"), "--encoder_file", str(GPT2 / "encoder.json"),
             "--max_seq_length", "128", "--prompt_key", "prompt", "--completion_key", "completion",
             "--files_per_record", "15"])
    return out


def _pngs(html_text: str) -> list[bytes]:
    return [base64.b64decode(b64) for b64 in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html_text)]


def test_report_embeds_non_empty_pngs(summarization_out, capsys):
    pytest.importorskip("matplotlib")
    assert main(["report", str(summarization_out)]) == 0
    text = (summarization_out / "report.html").read_text()
    pngs = _pngs(text)
    assert len(pngs) == 6  # real tokens, padding, documents, loss-valid, per source, per output file
    for png in pngs:
        assert png[:8] == PNG_MAGIC and len(png) > 2000
    # Self-contained: nothing fetched from elsewhere.
    assert not re.search(r'(src|href)="(?!data:)', text)
    params = json.loads((summarization_out / "data_params.json").read_text())
    n = params["post-process"]["n_examples"]
    assert f"<th>n_examples</th><td>{n:,}</td>" in text
    assert "Documents per source file" in text and "not tokens" in text
    assert text.count("<h2>") >= 7


def test_report_on_a_reference_output(tmp_path):
    pytest.importorskip("matplotlib")
    require_shared(GOLDEN)
    out = tmp_path / "report.html"
    assert main(["report", str(GOLDEN / "fim_pack_hf" / "out"), "--output", str(out)]) == 0
    text = out.read_text()
    assert len(_pngs(text)) == 6 and "no input.per_source section" in text


def test_report_without_matplotlib_exits_2(summarization_out, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import now raises ImportError
    assert main(["report", str(summarization_out)]) == 2
    err = capsys.readouterr().err
    assert "pip install matplotlib" in err and len(err.strip().splitlines()) == 1


def test_inspect_brackets_the_prompt_and_shows_eos_and_padding(summarization_out, capsys):
    assert main(["inspect", str(summarization_out), "--row", "1", "--color", "never"]) == 0
    out = capsys.readouterr().out
    header, body = out.split("─" * 60 + "\n", 1)
    assert "row 1 of 15 · Summarization" in header
    # The prompt is context only, the completion and its EOS are trained targets.
    assert body.startswith("[Define: ")
    assert "] PLAIN" in body and "PLAIN" not in body.split("]")[0]
    assert "⟨EOS⟩" in body.split("]", 1)[1]
    assert re.search(r"… \d+ pad$", body.strip())


def test_inspect_colors_and_ids_and_errors(summarization_out, capsys):
    assert main(["inspect", str(summarization_out), "--file", "examples_00001.h5", "--row", "-1",
                 "--color", "always"]) == 0
    out = capsys.readouterr().out
    assert "\x1b[2m" in out and "examples_00001.h5 row 14 of 15" in out
    assert main(["inspect", str(summarization_out), "--ids"]) == 0
    table = capsys.readouterr().out
    assert re.search(r"^\s+0\s+\d+ .+\s0\s+\d+ ", table, re.M)
    assert main(["inspect", str(summarization_out), "--row", "99"]) == 2
    assert "out of range" in capsys.readouterr().err
    assert main(["inspect", str(summarization_out), "--file", "nope.h5"]) == 2


def test_inspect_shows_fim_sentinels_on_a_reference_output(capsys):
    require_shared(GOLDEN)
    assert main(["inspect", str(GOLDEN / "fim_pack_hf" / "out"), "--color", "never"]) == 0
    out = capsys.readouterr().out
    assert "(reference output)" in out
    assert "⟨PRE⟩" in out and "⟨SUF⟩" in out and "⟨MID⟩" in out and "⟨EOS⟩" in out
