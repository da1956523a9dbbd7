"""The quality filters against datatrove's, side by side on the same documents (issue #47): CPU seconds per MB on
one core, and whether every decision agrees.

    python benchmarks/filters_bench.py [--corpus ../shared/corpora/bench/en_natural.jsonl.zst] [--docs 3000]

Ours: each document's words split once (spaCy's English tokenizer, as datatrove splits them), then
gopher_quality and gopher_repetition in turn, as the job's FilterQuality stage runs them. datatrove's:
GopherQualityFilter then GopherRepetitionFilter, each splitting the words itself, as a datatrove pipeline runs
them. The bench extra installs datatrove (make bench-filters). The corpus is read from ../shared, never copied.
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

from transforms.core.quality import GopherQuality, GopherRepetition, verdict, words_of  # noqa: E402

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
    from datatrove.pipeline.filters.gopher_quality_filter import GopherQualityFilter
    from datatrove.pipeline.filters.gopher_repetition_filter import GopherRepetitionFilter

    texts = read(args.corpus, args.docs)
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    words_of("warm up")  # (spaCy loaded before either clock starts)
    ours_filters = (GopherQuality(), GopherRepetition())
    start = time.process_time()
    ours = [verdict(ours_filters, t) for t in texts]
    ours_s = time.process_time() - start
    theirs_filters = (GopherQualityFilter(), GopherRepetitionFilter())
    theirs_filters[0].filter(Document(text="warm up", id="w"))
    start = time.process_time()
    theirs = []
    for i, t in enumerate(texts):
        found = None
        for f in theirs_filters:
            got = f.filter(Document(text=t, id=str(i)))
            if got is not True:
                found = (f.name, got[1])
                break
        theirs.append(found)
    theirs_s = time.process_time() - start
    keep = sum((a is None) != (b is None) for a, b in zip(ours, theirs))
    removed = sum(a is not None for a in ours)
    print(f"{args.corpus.name}: {len(texts)} documents, {mb:.1f} MB; gopher_quality then gopher_repetition")
    print(f"  ours       {ours_s:6.1f} CPU-s  {mb / ours_s:5.2f} MB/s per core")
    print(f"  datatrove  {theirs_s:6.1f} CPU-s  {mb / theirs_s:5.2f} MB/s per core")
    print(f"  ours / datatrove: {theirs_s / ours_s:.2f}x (goal >= 3x)")
    print(f"  removed {removed} of {len(texts)}; keep/drop decisions that differ: {keep}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
