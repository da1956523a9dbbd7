"""VSL packing time against the number of documents: `make vsl-pack-bench`.

Best-fit decreasing keeps the room of the open rows in a sorted list of
distinct amounts, so a document costs a binary search, never a scan of the
open rows: packing should grow as n log n. This takes the documents' token
lengths of the benchmark corpus (tokenized with GPT-2 once), and packs them
as one packing group at 1x, 10x and 100x the documents (the larger sets are
the same lengths drawn again with a fixed seed), timing segment formation
(`lm_segments`: fold and filter) and `pack_bins` apart, with the fill of the
rows against the lower bound ceil(positions / msl).

    python benchmarks/vsl_packing.py [--corpus PATH] [--msl 2048] [--scales 1,10,100]
"""

from __future__ import annotations

import argparse
import io
import json
import math
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT_CORPUS = ROOT.parent / "shared" / "corpora" / "bench" / "en_natural.jsonl.zst"
GPT2 = ROOT / "data" / "tokenizers" / "gpt2"


def document_lengths(corpus: Path) -> np.ndarray:
    """Tokens (EOS included) of every document of the corpus."""
    import zstandard

    from transforms.core.tokenizer import build_tokenizer, tokenize_documents
    from transforms.io.tokenizer_files import read_tokenizer_files

    tok = build_tokenizer(read_tokenizer_files("GPT2Tokenizer", vocab_file=str(GPT2 / "vocab.bpe"),
                                               encoder_file=str(GPT2 / "encoder.json")))
    raw = zstandard.ZstdDecompressor().stream_reader(open(corpus, "rb")) if corpus.suffix == ".zst" \
        else open(corpus, "rb")
    with raw:
        texts = [json.loads(line)["text"] for line in io.TextIOWrapper(raw, encoding="utf-8")]
    return np.array([len(ids) for ids in tokenize_documents(tok, texts)], dtype=np.int64)


def l2_bound(costs: np.ndarray, capacity: int) -> int:
    """Martello and Toth's lower bound L2 on the bins of any packing (>= ceil(sum / capacity)).

    For every threshold k <= capacity / 2: the items over capacity - k each need a bin of their own, so do
    the items over capacity / 2, and the items of at least k fill what those leave free before needing more.
    """
    p = np.sort(np.asarray(costs, dtype=np.int64))
    total = np.concatenate([[0], np.cumsum(p)])

    def above(x):  # index of the first item > x
        return np.searchsorted(p, x, side="right")

    k = np.arange(0, capacity // 2 + 1)
    half = above(capacity // 2)
    j1 = len(p) - above(capacity - k)
    j2_lo, j2_hi = half, above(capacity - k)
    j2 = j2_hi - j2_lo
    j2_sum = total[j2_hi] - total[j2_lo]
    j3_lo = np.searchsorted(p, k, side="left")
    j3_sum = total[half] - total[j3_lo]
    free = j2 * capacity - j2_sum
    extra = np.maximum(0, -(-(j3_sum - free) // capacity))
    return int(max((j1 + j2 + extra).max(), -(-total[-1] // capacity)))


def main() -> int:
    from transforms.core.vsl import VslConfig, lm_segments, pack_bins

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--msl", type=int, default=2048)
    parser.add_argument("--scales", default="1,10,100")
    args = parser.parse_args()
    if not args.corpus.exists():
        print(f"corpus {args.corpus} not found (it lives in ../shared/corpora/bench)", file=sys.stderr)
        return 2
    lengths = document_lengths(args.corpus)
    cfg = VslConfig(max_seq_length=args.msl, pad_id=0)
    print(f"\n{args.corpus.name}: {len(lengths):,} documents, {lengths.sum():,} tokens, msl {args.msl}\n")
    print(f"{'scale':>6}{'documents':>12}{'segments':>12}{'segments s':>12}{'pack_bins s':>13}"
          f"{'us/doc':>9}{'ns/(n log2 n)':>15}{'rows':>11}{'fill':>8}{'over L1':>9}{'over L2':>9}")
    rng = np.random.default_rng(0)
    base = None
    for scale in (int(x) for x in args.scales.split(",")):
        sample = lengths if scale == 1 else rng.choice(lengths, size=len(lengths) * scale)
        # Documents as views into one stream of zeros: only lengths matter to the packer.
        flat = np.zeros(int(sample.sum()), dtype=np.int32)
        ends = np.cumsum(sample)
        docs = [flat[e - n:e] for e, n in zip(ends.tolist(), sample.tolist())]
        started = time.perf_counter()
        segments, _, _ = lm_segments(docs, cfg, flat=flat)
        formed = time.perf_counter()
        bin_of, rows = pack_bins(segments.positions, args.msl)
        packed = time.perf_counter()
        n = len(segments)
        positions = int(segments.positions.sum())
        bound = math.ceil(positions / args.msl)
        per = (packed - started) / len(docs) * 1e6
        nlogn = (packed - started) / (n * math.log2(n)) * 1e9
        base = base or nlogn
        tight = l2_bound(segments.positions, args.msl)
        print(f"{scale:>5}x{len(docs):>12,}{n:>12,}{formed - started:>12.2f}{packed - formed:>13.2f}{per:>9.2f}"
              f"{nlogn:>15.1f}{rows:>11,}{positions / (rows * args.msl):>8.4f}{rows / bound - 1:>+9.2%}"
              f"{rows / tight - 1:>+9.2%}")
        del docs, flat, segments, bin_of
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak RSS {peak:.0f} MB. Flat ns/(n log2 n) across scales means n log n; a scan of every open "
          "row would grow it with n.\nL1 = ceil(positions / msl); L2 = Martello-Toth's bound, which also counts "
          "the segments over msl / 2 that need a row each: no packing can use fewer rows than either.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
