"""Peak memory and time of a shuffled LMData run at two input sizes, for both shuffle strategies.

    python benchmarks/shuffle_memory.py [--sizes 100,400] [--strategies disk,runner] [--msl 2048]

Inputs are built from ../shared/corpora/bench (en_natural + code, repeated as
needed to reach the size; repeats are separate files, so separate packing
groups). `disk` keeps packed groups in local files and moves only references
through the GroupByKey; `runner` moves the rows through the DirectRunner's
in-memory GroupByKey (the Dataflow path).
"""

from __future__ import annotations

import argparse
import io
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import GPT2, LAUNCHER, ROOT  # noqa: E402

BENCH = ROOT.parent / "shared" / "corpora" / "bench"


def build_input(target_mb: int, work: Path) -> Path:
    import zstandard

    out = work / f"input_{target_mb}"
    out.mkdir(parents=True)
    sources = [BENCH / "en_natural.jsonl.zst", BENCH / "code.jsonl.zst"]
    written, i = 0, 0
    while written < target_mb * 1_000_000:
        src = sources[i % len(sources)]
        with zstandard.ZstdDecompressor().stream_reader(open(src, "rb")) as raw, \
                open(out / f"part_{i:02d}_{src.stem}", "wb") as dst:
            for line in io.BufferedReader(raw, 1 << 20):
                if written >= target_mb * 1_000_000:
                    break
                dst.write(line)
                written += len(line)
        i += 1
    return out


def run(input_dir: Path, out: Path, strategy: str, msl: int) -> tuple[float, float]:
    import subprocess

    args = ["LMData", "--input_dir", str(input_dir), "--output_dir", str(out), "--tokenizer_type", "GPT2Tokenizer",
            "--vocab_file", str(GPT2 / "vocab.bpe"), "--encoder_file", str(GPT2 / "encoder.json"),
            "--max_seq_length", str(msl), "--shuffle", "True", "--shuffle_strategy", strategy,
            "--display_pbar", "False"]
    # The command as users run it, timed (and its peak RSS taken) by bench.py's launcher around it.
    proc = subprocess.run([sys.executable, "-c", LAUNCHER, sys.executable, "-m", "pipelines.create_hdf5_dataset",
                           *args], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-3000:])
    seconds, peak_kb = proc.stdout.split()
    shutil.rmtree(out)
    return float(seconds), int(peak_kb) / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,400")
    parser.add_argument("--strategies", default="disk,runner")
    parser.add_argument("--msl", type=int, default=2048)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="shuffle_mem_"))
    try:
        print(f"{'input MB':>9} {'strategy':>9} {'seconds':>9} {'peak RSS MB':>12}")
        for size in [int(s) for s in args.sizes.split(",")]:
            input_dir = build_input(size, work)  # part_NN_<corpus>.jsonl files
            for strategy in args.strategies.split(","):
                seconds, rss = run(input_dir, work / f"out_{size}_{strategy}", strategy, args.msl)
                print(f"{size:>9} {strategy:>9} {seconds:>9.1f} {rss:>12.0f}", flush=True)
            shutil.rmtree(input_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
