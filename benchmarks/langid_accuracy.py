"""Language identification against the multilingual bench corpus' labels (issue #47): how many documents of each
language the job's model names right, its speed per core, and (with the bench extra installed) whether
datatrove's LanguageFilter, given the same model file, decides every document as the job does.

    python benchmarks/langid_accuracy.py [--corpus ../shared/corpora/bench/multilingual_natural.jsonl.zst]
                                         [--languages en,de] [--no-datatrove]

The corpus labels each document with its language (ISO 639-1; pt-BR, sr-Latn, zh-CN, zh-TW by region or
script): a document is right when the model's most probable label is its language. The model's labels are
fastText's: "sr" for Serbian in either script, "no" for Norwegian Bokmål. The corpus is read from ../shared,
never copied here.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from collections import Counter
from pathlib import Path

import zstandard

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transforms.core.langid import LangIdConfig, decide, load_model, model_path, scores_of  # noqa: E402

DEFAULT_CORPUS = ROOT.parent / "shared" / "corpora" / "bench" / "multilingual_natural.jsonl.zst"
ALIASES = {"nb": "no"}  # the corpus' code -> fastText's label for the same language


def truth(label: str) -> str:
    code = label.split("-")[0]
    return ALIASES.get(code, code)


def read(corpus: Path) -> list[tuple[str, str]]:
    with zstandard.ZstdDecompressor().stream_reader(open(corpus, "rb")) as raw:
        return [(r["text"], r["lang"]) for r in map(json.loads, io.TextIOWrapper(raw, encoding="utf-8"))]


def datatrove_decisions(docs, languages):
    """datatrove's LanguageFilter over the documents, given the job's model file; None when not installed."""
    try:
        import numpy as np
        import datatrove.pipeline.base as base
        import datatrove.utils.lid as lid
        import fasttext.FastText as ft
        from datatrove.data import Document
        from datatrove.pipeline.filters.language_filter import LanguageFilter
        from datatrove.utils.lid import FT176LID
    except ImportError:
        return None
    # datatrove asks for the distribution fasttext-numpy2-wheel; fasttext-predict provides the same module, whose
    # predict returns floats where datatrove calls .item() on numpy scalars.
    base.check_required_dependencies = lid.check_required_dependencies = lambda *a, **k: None
    original = ft._FastText.predict
    ft._FastText.predict = lambda self, *a, **k: (lambda r: (r[0], np.asarray(r[1])))(original(self, *a, **k))
    FT176LID.MODEL_URL = model_path()
    lf = LanguageFilter(languages=languages)
    out = []
    for i, (text, _) in enumerate(docs):
        doc = Document(text=text, id=str(i))
        keep = bool(lf.filter(doc))
        out.append((doc.metadata["language"], doc.metadata["language_score"], keep))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--languages", default="en,de", help="the languages datatrove's decisions are compared at")
    parser.add_argument("--no-datatrove", action="store_true")
    args = parser.parse_args()
    if not args.corpus.exists():
        print(f"corpus {args.corpus} not found (it lives in ../shared/corpora/bench)", file=sys.stderr)
        return 2
    docs = read(args.corpus)
    model = load_model()
    known = set(scores_of(model, "x"))  # (every label: k = -1)
    cfg = LangIdConfig(tuple(args.languages.split(",")))
    start = time.process_time()
    ours = [decide(scores_of(model, text), cfg) for text, _ in docs]
    cpu = time.process_time() - start
    mb = sum(len(t.encode("utf-8")) for t, _ in docs) / 1e6
    right, total, low = Counter(), Counter(), Counter()
    for (text, label), (lang, score, _) in zip(docs, ours):
        total[label] += 1
        right[label] += lang == truth(label)
        low[label] += score <= cfg.threshold
    print(f"corpus {args.corpus.name}: {len(docs)} documents, {len(total)} languages, {mb:.1f} MB; model "
          f"{Path(model_path()).name}\n")
    print(f"{'language':<10}{'documents':>10}{'right':>8}{'share':>8}{'<= 0.65':>9}  model knows it")
    for label in sorted(total):
        print(f"{label:<10}{total[label]:>10}{right[label]:>8}{right[label] / total[label]:>8.1%}"
              f"{low[label] / total[label]:>9.1%}  {'yes' if truth(label) in known else 'NO'}")
    supported = [k for k in total if truth(k) in known]
    print(f"\nright: {sum(right.values()) / len(docs):.2%} of all documents; "
          f"{sum(right[k] for k in supported) / sum(total[k] for k in supported):.2%} of the "
          f"{len(supported)} languages the model knows")
    print(f"speed: {mb / cpu:.2f} MB/s per core ({len(docs) / cpu:.0f} documents/s; CPU time, one thread)")
    if not args.no_datatrove:
        theirs = datatrove_decisions(docs, list(cfg.languages))
        if theirs is None:
            print("datatrove: not installed (make bench-dedup installs the bench extra); not compared")
        else:
            labels = sum(a[0] != b[0] for a, b in zip(ours, theirs))
            scores = sum(abs(a[1] - b[1]) > 1e-6 for a, b in zip(ours, theirs))
            keeps = sum(a[2] != b[2] for a, b in zip(ours, theirs))
            print(f"datatrove LanguageFilter(languages={list(cfg.languages)}), the same model file: "
                  f"{labels} labels, {scores} scores, {keeps} keep/drop decisions differ of {len(docs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
