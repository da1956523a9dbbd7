"""ftfy's speed per script on one core: `ftfy.fix_text` against the project's exact fast path (`make bench-ftfy`).

Each document is put in the group of its dominant script: the first word of
`unicodedata.name` of its letters (`str.isalpha`), the most frequent such
word winning: LATIN, CYRILLIC, CJK (ideographs), HIRAGANA, HANGUL, ARABIC,
DEVANAGARI, GREEK, ... It is deliberately crude: a Japanese text with more
kanji than kana counts as CJK, digits and punctuation do not count, and a
document without letters is NONE. It is enough to show where ftfy's cost
lies, which depends on the script (fast_ftfy's shortcuts depend on which
characters occur).

Both functions run on the same documents (at most --sample-per-script of
each group, in corpus order), one after the other per document, in this
process and thread: both are single-threaded Python, so MB/s (UTF-8 bytes of
input per second) is per core. Each timed document's two outputs are
compared; the run exits 1 if any differ (fast_ftfy must equal ftfy).

    python benchmarks/ftfy_rates.py [--corpus PATH.jsonl.zst|.jsonl] [--limit-docs N] [--sample-per-script N]
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
import unicodedata
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # transforms, when run as a script from anywhere

DEFAULT_CORPUS = ROOT.parent / "shared" / "corpora" / "bench" / "multilingual_natural.jsonl.zst"


def read_texts(corpus: Path, limit: int) -> list[str]:
    """The first `limit` documents' texts (0: all) of a .jsonl or .jsonl.zst corpus."""
    import zstandard

    texts = []
    with open(corpus, "rb") as f:
        raw = zstandard.ZstdDecompressor().stream_reader(f) if corpus.suffix == ".zst" else f
        for line in io.BufferedReader(raw, 1 << 20):
            if limit and len(texts) >= limit:
                break
            texts.append(json.loads(line)["text"])
    return texts


def script(text: str) -> str:
    """The first word of the Unicode name of the document's most frequent kind of letter (module doc)."""
    scripts = Counter()
    for ch, n in Counter(text).items():  # names looked up once per distinct character, not per character
        if ch.isalpha():
            scripts[unicodedata.name(ch, "UNNAMED").split()[0]] += n
    return scripts.most_common(1)[0][0] if scripts else "NONE"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--limit-docs", type=int, default=0, help="read only the first N documents (0: all)")
    parser.add_argument("--sample-per-script", type=int, default=0,
                        help="time at most N documents of each script, the first ones (0: all)")
    args = parser.parse_args()
    if not args.corpus.exists():
        print(f"corpus {args.corpus} not found (it lives in ../shared/corpora/bench)", file=sys.stderr)
        return 2

    import ftfy

    from transforms.core import fast_ftfy

    texts = read_texts(args.corpus, args.limit_docs)
    groups: dict[str, list[str]] = {}
    for text in texts:
        groups.setdefault(script(text), []).append(text)
    if args.sample_per_script:
        groups = {k: v[:args.sample_per_script] for k, v in groups.items()}
    # Lazy set-up (ftfy's imports, fast_ftfy's tables read off ftfy) outside the timings: else the first
    # script measured would pay it.
    warm = "caf\u00c3\u00a9 \u201cx\u201d &amp; \ufb01\n"
    ftfy.fix_text(warm)
    fast_ftfy.fix_text(warm)

    rows, first_mismatch = [], None
    for name, docs in groups.items():
        nbytes, slow_s, fast_s, mismatches = 0, 0.0, 0.0, 0
        for text in docs:
            nbytes += len(text.encode("utf-8"))
            t0 = time.perf_counter()
            expected = ftfy.fix_text(text)
            t1 = time.perf_counter()
            got = fast_ftfy.fix_text(text)
            t2 = time.perf_counter()
            slow_s += t1 - t0
            fast_s += t2 - t1
            if got != expected:
                mismatches += 1
                if first_mismatch is None:
                    at = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b),
                              min(len(got), len(expected)))
                    first_mismatch = (name, at, expected[max(0, at - 20):at + 20], got[max(0, at - 20):at + 20])
        rows.append((name, len(docs), nbytes, slow_s, fast_s, mismatches))
    rows.sort(key=lambda r: -r[2])
    total = ("TOTAL", *(sum(r[i] for r in rows) for i in range(1, 6)))

    timed_mb = total[2] / 1e6
    print(f"\ncorpus {args.corpus.name}: {len(texts)} documents read, {total[1]} timed ({timed_mb:.1f} MB); "
          f"ftfy {ftfy.__version__}, one core (this process)\n")
    print(f"{'script':<14}{'docs':>7}{'MB':>8}{'ftfy MB/s':>11}{'fast MB/s':>11}{'speed-up':>10}{'mismatches':>12}")
    for name, docs, nbytes, slow_s, fast_s, mismatches in [*rows, total]:
        print(f"{name:<14}{docs:>7}{nbytes / 1e6:>8.2f}{nbytes / 1e6 / max(slow_s, 1e-9):>11.1f}"
              f"{nbytes / 1e6 / max(fast_s, 1e-9):>11.1f}{slow_s / max(fast_s, 1e-9):>9.1f}x{mismatches:>12}")
    if first_mismatch:
        name, at, expected, got = first_mismatch
        print(f"\nfast_ftfy.fix_text differs from ftfy.fix_text on {total[5]} documents; the first ({name}) at "
              f"character {at}: ftfy {expected!r}, fast_ftfy {got!r}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
