"""Per-core rates of the steps the Dataflow cost model needs beside tokenizing: `make read-rates`.

On one core (run it under `taskset -c 0` to be sure), for the bench corpus as
.jsonl.zst (read in order), as .jsonl (read as byte ranges of 64 MiB) and as
.parquet (read as row ranges): MB of text per second read and parsed into
documents; and what handing a packing group to another worker costs (the
fan-out of a large file read in order): bytes pickled per token and seconds.

    python benchmarks/read_rates.py [--corpus PATH.jsonl.zst]
"""

from __future__ import annotations

import argparse
import pickle
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT_CORPUS = ROOT.parent / "shared" / "corpora" / "bench" / "en_natural.jsonl.zst"
GPT2 = ROOT / "data" / "tokenizers" / "gpt2"


def _best(fn, rounds: int = 3) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def main(argv=None) -> int:
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard

    from transforms.core.records import DocBatch, Document, GroupId, InputFile
    from transforms.core.units import jsonl_units, parquet_units
    from transforms.io.readers import read_records

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    args = parser.parse_args(argv)
    with open(args.corpus, "rb") as f:
        raw = zstandard.ZstdDecompressor().stream_reader(f).read()
    texts = [json.loads(line)["text"] for line in raw.splitlines()]
    text_mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    keys = ("text",)
    with tempfile.TemporaryDirectory() as tmp:
        jsonl = Path(tmp) / "c.jsonl"
        jsonl.write_bytes(raw)
        parquet = Path(tmp) / "c.parquet"
        pq.write_table(pa.table({"text": texts}), parquet, row_group_size=2000)

        def serial():
            return sum(1 for _ in read_records(str(args.corpus), keys))

        def ranges():
            f = InputFile(0, str(jsonl), "c.jsonl")
            for u in jsonl_units(f, len(raw), 64 << 20):
                end = None if u.end_group == u.num_groups else u.span[1]
                for _ in read_records(str(jsonl), keys, byte_range=(u.span[0], end)):
                    pass

        def rows():
            n = pq.ParquetFile(parquet).metadata.num_rows
            size = sum(len(t) for t in texts)
            for u in parquet_units(InputFile(0, str(parquet), "c.parquet"), n, size, 64 << 20):
                for _ in read_records(str(parquet), keys, rows=u.span):
                    pass

        print(f"corpus {args.corpus.name}: {len(texts)} documents, {text_mb:.1f} MB of text")
        for name, fn in (("jsonl.zst, in order", serial), ("jsonl, 64 MiB byte ranges", ranges),
                         ("parquet, row ranges", rows)):
            seconds = _best(fn)
            print(f"read {name:<28} {text_mb / seconds:7.1f} MB of text/s per core")

    from transforms.core.tokenizer import build_tokenizer, tokenize_documents
    from transforms.io.tokenizer_files import read_tokenizer_files

    tok = build_tokenizer(read_tokenizer_files("GPT2Tokenizer", vocab_file=str(GPT2 / "vocab.bpe"),
                                               encoder_file=str(GPT2 / "encoder.json")))
    sample = texts[:2000]
    tokens = sum(len(ids) for ids in tokenize_documents(tok, sample))
    batch = DocBatch(GroupId(0, 0, "c.jsonl.zst", "c.jsonl.zst"), [Document(i, (t,)) for i, t in enumerate(sample)])
    blob = pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL)
    seconds = _best(lambda: pickle.loads(pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL)))
    print(f"hand a group on: {len(blob) / tokens:.2f} bytes per token pickled, "
          f"{seconds / (len(blob) / 1e6) * 1000:.2f} ms per MB to pickle and unpickle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
