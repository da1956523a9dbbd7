"""The quality filters against datatrove's, side by side on the same documents (issue #47): CPU seconds per MB on
one core, and whether every decision (and every text C4 leaves) agrees.

    python benchmarks/filters_bench.py [--corpus ../shared/corpora/bench/en_natural.jsonl.zst] [--docs 3000]

The filter set is FineWeb's, in its pipeline's order (datatrove's examples/fineweb.py): Gopher's repetition and
quality rules, C4's (without its terminal-punctuation rule, as FineWeb runs it), FineWeb's. Ours as the job's
FilterQuality stage runs them (transforms.core.quality.judge: a document's words split once, again after C4 cuts
it); datatrove's filters one after the other on a Document, each splitting what it needs itself, as a datatrove
pipeline runs them. The bench extra installs datatrove (make bench-filters). The corpus is read from ../shared,
never copied.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from pathlib import Path

import zstandard

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transforms.core.quality import (C4Quality, FineWebQuality, GopherQuality, GopherRepetition, judge,  # noqa: E402
                                     words_of)

DEFAULT_CORPUS = ROOT.parent / "shared" / "corpora" / "bench" / "en_natural.jsonl.zst"


def read(corpus: Path, docs: int) -> list[str]:
    out = []
    with zstandard.ZstdDecompressor().stream_reader(open(corpus, "rb")) as raw:
        for line in io.TextIOWrapper(raw, encoding="utf-8"):
            out.append(json.loads(line)["text"])
            if len(out) >= docs:
                break
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--docs", type=int, default=3000)
    args = parser.parse_args()
    from datatrove.data import Document
    from datatrove.pipeline.filters.c4_filters import C4QualityFilter
    from datatrove.pipeline.filters.fineweb_quality_filter import FineWebQualityFilter
    from datatrove.pipeline.filters.gopher_quality_filter import GopherQualityFilter
    from datatrove.pipeline.filters.gopher_repetition_filter import GopherRepetitionFilter

    texts = read(args.corpus, args.docs)
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    words_of("warm up")  # (spaCy loaded before either clock starts)
    ours_filters = (GopherRepetition(), GopherQuality(), C4Quality(filter_no_terminal_punct=False), FineWebQuality())
    start = time.process_time()
    ours = [judge(ours_filters, t) for t in texts]
    ours_s = time.process_time() - start
    theirs_filters = (GopherRepetitionFilter(), GopherQualityFilter(), C4QualityFilter(filter_no_terminal_punct=False),
                      FineWebQualityFilter())
    theirs_filters[1].filter(Document(text="warm up", id="w"))
    start = time.process_time()
    theirs = []
    for i, t in enumerate(texts):
        doc = Document(text=t, id=str(i))
        found = None
        for f in theirs_filters:
            got = f.filter(doc)
            if got is not True:
                found = got[1]
                break
        theirs.append((found, doc.text if found is None else None))
    theirs_s = time.process_time() - start
    empty = {"empty": "fineweb_empty"}  # (datatrove's reason names that are ours under another name)
    mine = [(j.removed[1] if j.removed else None,
             None if j.removed else (j.text if j.text is not None else t)) for j, t in zip(ours, texts)]
    keep = sum((a[0] is None) != (b[0] is None) for a, b in zip(mine, theirs))
    rules = sum(a[0] != empty.get(b[0], b[0]) for a, b in zip(mine, theirs))
    cut_texts = sum(a[1] != b[1] for a, b in zip(mine, theirs) if a[0] is None and b[0] is None)
    removed = sum(a[0] is not None for a in mine)
    cut = sum(j.text is not None for j in ours)
    print(f"{args.corpus.name}: {len(texts)} documents, {mb:.1f} MB; gopher_repetition, gopher_quality, "
          f"c4_quality (filter_no_terminal_punct false), fineweb_quality")
    print(f"  ours       {ours_s:6.1f} CPU-s  {mb / ours_s:5.2f} MB/s per core")
    print(f"  datatrove  {theirs_s:6.1f} CPU-s  {mb / theirs_s:5.2f} MB/s per core")
    print(f"  ours / datatrove: {theirs_s / ours_s:.2f}x (goal >= 3x)")
    print(f"  removed {removed} of {len(texts)}, cut {cut}; decisions that differ: keep/drop {keep}, rule {rules}; "
          f"texts left that differ: {cut_texts}")
    from datatrove.utils.text import split_into_words

    words = sum(words_of(t) != split_into_words(t) for t in texts)
    print(f"  documents whose words differ from datatrove's (a special case across a space: docs/guides/filters.md): "
          f"{words}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
