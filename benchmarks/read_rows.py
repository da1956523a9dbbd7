"""Random access by sample, on one core: `make bench-read`.

Writes the bench corpus as LMData rows of msl 2048 (or takes `--out` of an
earlier run), then reads rows in a random order, one core pinned:

- `H5MapDataset[i]`: what a training loader does (its chunk index, one read, one inflate, a dict of views);
- the floor: inflating the same rows' chunks already in memory with libdeflate, as H5MapDataset does (one
  decompress per row is what any reader of these files must do), and with zlib for comparison;
- h5py's `data[i]` per row, for comparison (what a plain map-style dataset over h5py would do).

    python benchmarks/read_rows.py [--corpus PATH] [--out DIR] [--rows 20000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT_CORPUS = ROOT.parent / "shared" / "corpora" / "bench" / "en_natural.jsonl.zst"
GPT2 = ROOT / "data" / "tokenizers" / "gpt2"
TARGET = 50_000  # rows/s on one core, msl 2048 (the floor for a training loader)


def write_output(corpus: Path, out: Path) -> None:
    input_dir = out.parent / "bench_input"
    input_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(corpus, input_dir / corpus.name)
    subprocess.run([sys.executable, "-m", "pipelines.create_hdf5_dataset", "LMData", "--input_dir", str(input_dir),
                    "--output_dir", str(out), "--tokenizer_type", "GPT2Tokenizer", "--vocab_file",
                    str(GPT2 / "vocab.bpe"), "--encoder_file", str(GPT2 / "encoder.json"), "--max_seq_length",
                    "2048", "--display_pbar", "False", "--files_per_record", "5000"], cwd=ROOT, check=True)


def main() -> int:
    import h5py
    import numpy as np

    from transforms.io.map_dataset import H5MapDataset

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--out", type=Path, default=None, help="an existing LMData output (default: write one)")
    parser.add_argument("--rows", type=int, default=20_000, help="random reads per measure")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core, as the target says
    work = Path(tempfile.mkdtemp(prefix="bench_read_"))
    try:
        out = args.out
        if out is None:
            out = work / "out"
            write_output(args.corpus, out)
        ds = H5MapDataset(str(out))
        n = len(ds)
        rng = np.random.default_rng(0)
        order = rng.integers(0, n, size=args.rows)
        ds[0]  # the chunk index of the first file, built once per process (as in a loader worker)
        for k in range(len(ds.files)):
            ds._file(k)
        # The floor: the same rows' compressed chunks, held in memory, only inflated.
        chunks = []
        for i in order.tolist():
            k, j = ds.locate(i)
            rows = ds._file(k)
            chunks.append(os.pread(rows._fd, int(rows._sizes[j]), int(rows._offsets[j])))
        files = [h5py.File(p, "r")["data"] for p in ds.files]
        from transforms.io.map_dataset import inflate

        size = int(np.prod(ds.row_shape)) * 4
        results = {"H5MapDataset[i]": [], "floor: inflate (libdeflate)": [], "zlib.decompress": [],
                   "h5py data[i]": []}
        for _ in range(args.repeat):
            started = time.perf_counter()
            for i in order.tolist():
                ds[i]
            results["H5MapDataset[i]"].append(args.rows / (time.perf_counter() - started))
            started = time.perf_counter()
            for c in chunks:
                np.frombuffer(inflate(c, size), dtype="<i4")
            results["floor: inflate (libdeflate)"].append(args.rows / (time.perf_counter() - started))
            started = time.perf_counter()
            for c in chunks:
                np.frombuffer(zlib.decompress(c), dtype="<i4")
            results["zlib.decompress"].append(args.rows / (time.perf_counter() - started))
            started = time.perf_counter()
            for i in order[: args.rows // 4].tolist():
                k, j = ds.locate(i)
                files[k][j]
            results["h5py data[i]"].append(args.rows // 4 / (time.perf_counter() - started))
        print(f"{out}: {n} rows of {ds.row_shape} in {len(ds.files)} files; {args.rows} random reads, one core, "
              f"{args.repeat} rounds (median, min-max rows/s)")
        floor = statistics.median(results["floor: inflate (libdeflate)"])
        for name, rates in results.items():
            median = statistics.median(rates)
            print(f"  {name:<26}{median:>10,.0f}  {min(rates):>9,.0f}-{max(rates):,.0f}   {median / floor:6.0%} of floor")
        mine = statistics.median(results["H5MapDataset[i]"])
        print(f"H5MapDataset: {mine:,.0f} rows/s ({'meets' if mine >= TARGET else 'misses'} the {TARGET:,} target)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
