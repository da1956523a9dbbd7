"""Language identification (issue #47): the rule (transforms/core/langid.py), and the stage through the job:
records not in the languages asked for removed, counted per language and listed; nothing removed without
--languages; verify's recount; the estimate; the settings. (A conversation's language, its messages', is tested
with decontamination's chat job, tests/test_decontam_job.py, to share its job.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import RUNNER, run_job, verify_problems
from transforms.core import langid as L
from transforms.core.stats import Stats

GPT2 = Path(__file__).resolve().parents[1] / "data" / "tokenizers" / "gpt2"
TOKENIZER = ["--tokenizer_type", "GPT2Tokenizer", "--vocab_file", str(GPT2 / "vocab.bpe"),
             "--encoder_file", str(GPT2 / "encoder.json")]
TEXTS = {
    "en": "The committee met on Tuesday to discuss the new budget for the city library and agreed to extend its "
          "opening hours.",
    "de": "Der Ausschuss traf sich am Dienstag, um den neuen Haushalt der Stadtbibliothek zu besprechen, und "
          "beschloss längere Öffnungszeiten.",
    "fr": "Le comité s'est réuni mardi pour discuter du nouveau budget de la bibliothèque municipale et a décidé de "
          "prolonger ses horaires.",
    "es": "El comité se reunió el martes para hablar del nuevo presupuesto de la biblioteca municipal y acordó "
          "ampliar su horario.",
    "ru": "Комитет собрался во вторник, чтобы обсудить новый бюджет городской библиотеки, и решил продлить часы её "
          "работы.",
    "zh": "委员会星期二开会讨论了市图书馆的新预算，并同意延长开放时间。",
    "ja": "委員会は火曜日に集まり、市立図書館の新しい予算について話し合い、開館時間の延長に合意した。",
}


# ------------------------------------------------------------------- the rule


def test_without_languages_every_record_is_kept_and_its_language_named():
    cfg = L.LangIdConfig()
    assert L.decide({"fr": 0.3, "en": 0.2}, cfg) == ("fr", 0.3, True)
    assert L.decide({}, cfg) == ("und", 0.0, True)


def test_with_languages_one_of_them_must_score_above_the_threshold():
    """datatrove's LanguageFilter: kept when any language asked scores strictly above the threshold, whatever
    the record's own (most probable) language."""
    cfg = L.LangIdConfig(("en", "de"), 0.65)
    assert L.decide({"en": 0.9, "fr": 0.1}, cfg) == ("en", 0.9, True)
    assert L.decide({"fr": 0.9, "en": 0.1}, cfg) == ("fr", 0.9, False)
    assert L.decide({"en": 0.65, "fr": 0.35}, cfg) == ("en", 0.65, False)  # strictly above
    assert L.decide({"de": 0.66, "en": 0.3}, cfg)[2]
    assert L.decide({"fr": 0.5, "en": 0.5}, cfg) == ("fr", 0.5, False)  # equal scores: the model's first
    assert L.decide({}, cfg) == ("und", 0.0, False)


def test_a_config_refuses_what_cannot_be_run():
    with pytest.raises(ValueError, match="threshold 1 is not within"):
        L.LangIdConfig(threshold=1)
    with pytest.raises(ValueError, match="languages is empty"):
        L.LangIdConfig(languages=())
    assert L.LangIdConfig(threshold=0).threshold == 0


def test_the_model_ships_in_its_package_and_names_each_language():
    model = L.load_model()
    for lang, text in TEXTS.items():
        scores = L.scores_of(model, text)
        assert max(scores, key=scores.get) == lang and scores[lang] > 0.65
        assert list(scores) == sorted(scores, key=scores.get, reverse=True)
    two_lines = L.scores_of(model, TEXTS["en"] + "\n" + TEXTS["en"])  # (fastText reads one line: no error)
    assert two_lines == L.scores_of(model, TEXTS["en"] + " " + TEXTS["en"])
    assert L.texts_of(["a", "b"]) == "a\nb"
    assert Path(L.model_path()).name == "lid.176.ftz"


def test_the_section_counts_languages_and_what_was_removed():
    stats = Stats()
    for lang, n, milli, low in (("en", 3, 2400, 1), ("fr", 1, 900, 0)):
        stats.add(f"langid.documents.{lang}", n)
        stats.add(f"langid.score_milli.{lang}", milli)
        stats.add(f"langid.low.{lang}", low)
    stats.add("langid.removed", 1, "/in/a.jsonl")
    settings = {"model": L.MODEL, "languages": ["en"], "threshold": 0.65}
    section = L.language_section({"settings": settings, "listed": 1}, stats)
    assert section == {**settings, "documents_removed": 1, "listed": 1,
                       "detected": {"en": {"documents": 3, "mean_score": 0.8, "at_most_threshold": 1},
                                    "fr": {"documents": 1, "mean_score": 0.9, "at_most_threshold": 0}},
                       "per_source": {"/in/a.jsonl": {"documents_removed": 1}}}
    with pytest.raises(RuntimeError, match="1 records removed, 2 listed"):
        L.language_section({"settings": settings, "listed": 2}, stats)


def test_check_language_names_each_disagreement():
    section = {"documents_removed": 3, "listed": 2, "per_source": {"a": {"documents_removed": 1}},
               "detected": {"en": {"documents": 2}}}
    assert L.check_language(section, {"dropped_by_reason": {"language": 4}}, None) == [
        "language.documents_removed is 3, input.dropped_by_reason.language is 4",
        "language.per_source removes 1 records, the total is 3",
        "language.listed is 2, 3 records were removed",
        "language: the removed records are not listed (no filtered/language/ directory)",
        "language: 2 records identified, fewer than the 3 removed"]
    fine = {"documents_removed": 2, "listed": 2, "per_source": {"a": {"documents_removed": 2}},
            "detected": {"en": {"documents": 5}}}
    assert L.check_language(fine, {"dropped_by_reason": {"language": 2}}, {"language": 2}) == []
    assert L.check_language(fine, {"dropped_by_reason": {"language": 2}}, {"language": 1}) == [
        "filtered/language/ lists 1 records, language.documents_removed is 2"]


# ------------------------------------------------------------------- through the job


def _args(inp, out, *extra, mode="LMData"):
    return [mode, "--input_dir", str(inp), "--output_dir", str(out), *TOKENIZER, "--max_seq_length", "64",
            "--display_pbar", "False", *extra]


def _listing(out: Path) -> list[dict]:
    directory = out / "filtered" / "language"
    return [json.loads(line) for p in sorted(directory.iterdir()) for line in p.read_text().splitlines()] \
        if directory.exists() else []


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("langs")
    (root / "in").mkdir()
    (root / "in" / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS.values()))
    (root / "in" / "b.jsonl").write_text(json.dumps({"text": TEXTS["fr"]}) + "\n{bad\n"
                                         + json.dumps({"text": TEXTS["en"]}) + "\n")
    return root


def test_records_not_in_the_languages_asked_are_removed_counted_and_listed(corpus, tmp_path):
    params = run_job(_args(corpus / "in", tmp_path / "out", "--languages", "en,de"))
    section = params["language"]
    assert section["languages"] == ["en", "de"] and section["threshold"] == 0.65 and section["model"] == "lid.176.ftz"
    assert {k: v["documents"] for k, v in section["detected"].items()} == {
        "en": 2, "de": 1, "fr": 2, "es": 1, "ru": 1, "zh": 1, "ja": 1}
    assert section["documents_removed"] == section["listed"] == 6
    assert params["input"]["dropped_by_reason"] == {"language": 6} and params["input"]["used"] == 3
    assert params["input"]["bad"] == 1
    listed = [(r["file"], r["line"], r["language"]) for r in _listing(tmp_path / "out")]
    assert listed == [("a.jsonl", 3, "fr"), ("a.jsonl", 4, "es"), ("a.jsonl", 5, "ru"), ("a.jsonl", 6, "zh"),
                      ("a.jsonl", 7, "ja"), ("b.jsonl", 1, "fr")]
    assert all(r["step"] == r["reason"] == "language" and r["score"] > 0.65 for r in _listing(tmp_path / "out"))
    assert params["processing"]["languages"] == ["en", "de"]
    assert verify_problems(tmp_path / "out") == []
    victim = next((tmp_path / "out" / "filtered" / "language").iterdir())
    victim.write_text("")
    assert verify_problems(tmp_path / "out")[0].startswith("data_params.json: filtered/language/ lists ")


def test_without_languages_nothing_is_removed_and_every_record_is_counted(corpus, tmp_path):
    params = run_job(_args(corpus / "in", tmp_path / "out", "--language_id", "True"))
    assert params["language"]["documents_removed"] == 0 and params["language"]["languages"] is None
    assert sum(v["documents"] for v in params["language"]["detected"].values()) == 9
    assert params["input"]["used"] == 9 and not (tmp_path / "out" / "filtered").exists()
    plain = run_job(_args(corpus / "in", tmp_path / "plain"))
    assert "language" not in plain and not any(k.startswith("language") for k in plain["processing"])
    assert plain["post-process"] == params["post-process"]


def test_a_split_job_identifies_before_routing_and_decontamination(corpus, tmp_path):
    """Before the split and decontamination: the same records removed, one listing, one section."""
    (tmp_path / "eval.jsonl").write_text(json.dumps({"q": TEXTS["en"]}) + "\n")
    params = run_job(_args(corpus / "in", tmp_path / "out", "--languages", "en,de", "--data_splits",
                           "train=0.5,test=0.5", "--decontaminate", str(tmp_path / "eval.jsonl")))
    assert params["language"]["documents_removed"] == 6
    assert params["decontamination"]["documents_removed"] == 2  # both English records, after the language's
    assert params["input"]["dropped_by_reason"] == {"language": 6, "contaminated": 2}
    assert len(_listing(tmp_path / "out")) == 6
    assert verify_problems(tmp_path / "out") == []


@pytest.mark.parametrize("flags, message", [
    (["--languages", "en", "--language_threshold", "1"], "language_threshold: 1.0 is not within [0, 1)"),
    (["--languages", "en,e-n"], "languages: 'e-n' is not a language code"),
])
def test_bad_language_settings_are_refused_by_name(flags, message, tmp_path):
    from pipelines.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        load_config(_args(tmp_path, tmp_path / "out", *flags) + RUNNER)


def test_the_estimate_counts_only_the_records_the_language_keeps(tmp_path, capsys):
    """estimate decides each sampled record's language as the job does: its documents are those kept."""
    from pipelines.create_hdf5_dataset import main

    (tmp_path / "in").mkdir()
    lines = [json.dumps({"text": f"{k}. {t}"}) for k in range(30) for t in TEXTS.values()]
    (tmp_path / "in" / "a.jsonl").write_text("\n".join(lines) + "\n")
    argv = [a for a in _args(tmp_path / "in", "unused", "--languages", "en,de") if a not in ("--output_dir", "unused")]
    assert main(["estimate", *argv, "--sample", "100%", *RUNNER]) == 0
    out = capsys.readouterr().out
    documents = next(line for line in out.splitlines() if line.strip().startswith("documents"))
    low, high = (float(x) for x in documents.split("95%: ")[1].split(",")[0].split("-"))
    job = run_job(_args(tmp_path / "in", tmp_path / "out", "--languages", "en,de"))
    assert job["input"]["used"] == 60 and low <= 60 <= high and high < 100
