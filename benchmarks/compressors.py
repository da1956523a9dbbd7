"""Each --compressor on real rows, one thread: MB/s of row bytes and size against zlib level 4.

`make bench-compress`. The rows are LMData rows (input_ids, mask, labels, msl
2048) of the bench corpus, encoded by the job's own encoder; every chunk is
read back through zlib.decompress before it counts.

    python benchmarks/compressors.py [--rows 2000] [--level 4] [--repeat 3]
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transforms.io.compressors import COMPRESSORS, Codec  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpora" / "bench" / "en_natural.jsonl.zst"
GPT2 = ROOT / "data" / "tokenizers" / "gpt2"


def real_rows(n: int, msl: int = 2048) -> list[bytes]:
    import zstandard

    from transforms.core.tokenizer import build_tokenizer
    from transforms.io.tokenizer_files import read_tokenizer_files

    tok = build_tokenizer(read_tokenizer_files("GPT2Tokenizer", vocab_file=str(GPT2 / "vocab.bpe"),
                                               encoder_file=str(GPT2 / "encoder.json")))
    need = n * msl + 1
    stream, have = [], 0
    with zstandard.ZstdDecompressor().stream_reader(open(CORPUS, "rb")) as raw:
        for line in io.BufferedReader(raw, 1 << 20):
            ids = tok.encode_batch([json.loads(line)["text"]])[0]
            stream.append(np.append(ids, np.int32(tok.eos_id)))
            have += len(stream[-1])
            if have >= need:
                break
    flat = np.concatenate(stream)
    rows = []
    for i in range(n):
        window = flat[i * msl:i * msl + msl + 1]
        rows.append(np.stack([window[:-1], np.ones(msl, np.int32), window[1:]]).astype("<i4").tobytes())
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--level", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = real_rows(args.rows)
    raw = sum(map(len, rows))
    print(f"{len(rows)} rows of 3 x 2048 int32 ({raw / 1e6:.1f} MB), level {args.level}, one thread, "
          f"best of {args.repeat}\n")
    print(f"{'compressor':<12}{'MB/s':>8}{'x zlib':>8}{'size':>10}{'of zlib':>9}  library")
    base = {}
    for name in ("zlib", *(c for c in COMPRESSORS if c != "zlib")):  # zlib first: the others' yardstick
        try:
            codec = Codec(name, args.level).check()
            compress = codec.compress()
        except ValueError as e:
            print(f"{name:<12}  skipped: {e}")
            continue
        best = float("inf")
        for _ in range(args.repeat):
            start = time.perf_counter()
            out = [compress(r) for r in rows]
            best = min(best, time.perf_counter() - start)
        if any(zlib.decompress(o) != r for o, r in zip(out, rows)):
            raise SystemExit(f"{name}: a chunk does not read back")
        size = sum(map(len, out))
        base.setdefault("size", size)
        base.setdefault("rate", raw / best)
        print(f"{name:<12}{raw / best / 1e6:>8.0f}{raw / best / base['rate']:>8.2f}{size / 1e6:>9.2f}M"
              f"{size / base['size']:>9.3f}  {codec.version()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
