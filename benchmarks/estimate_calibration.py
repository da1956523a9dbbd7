"""The estimate's calibration and cost on the bench corpora: `make bench-estimate` (part of `make bench`).

For each bench corpus (decompressed to plain .jsonl, as `benchmarks/bench.py`
runs it, so that lines are drawn by byte):

1. the truth: every document normalized and tokenized once, as the job
   counts tokens (`pipelines.estimate._Tokens`);
2. `--trials` seeded estimates at `--sample` (default 40 at 1%): how often
   the printed 95% interval holds the true token count (the issue asks for
   at least 90%), and the intervals' half-widths;
3. the command as a user runs it, `create_hdf5_dataset estimate ...` at the
   same sample, against the job itself, each timed from its process's start
   to its exit: the estimate's share of the job's time (and how much of the
   estimate is the start-up both pay: interpreter, Beam, the tokenizer), and
   its figures against the job's.

    python benchmarks/estimate_calibration.py [--trials 40] [--sample 1%] [--corpora en_natural,code,...]
                                              [--large-gb 1]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
BENCH = ROOT.parent / "shared" / "corpora" / "bench"
GPT2 = ROOT / "data" / "tokenizers" / "gpt2"
TOKENIZER = ["--tokenizer_type", "GPT2Tokenizer", "--vocab_file", str(GPT2 / "vocab.bpe"),
             "--encoder_file", str(GPT2 / "encoder.json")]
TARGET_COVERAGE = 0.90
TARGET_SHARE = 0.10


def _decompress(corpus: Path, out_dir: Path) -> Path:
    import zstandard

    out_dir.mkdir(parents=True)
    with open(corpus, "rb") as src, open(out_dir / "corpus.jsonl", "wb") as dst:
        zstandard.ZstdDecompressor().copy_stream(src, dst)
    return out_dir


def _truth(input_dir: Path) -> int:
    from pipelines.config import load_config
    from pipelines.plan import plan_job
    from pipelines.estimate import _Tokens
    from transforms.core.records import Document
    from transforms.io.readers import read_records

    config, _ = load_config(["LMData", "--input_dir", str(input_dir), *TOKENIZER])
    plan = plan_job(config)
    tokens = _Tokens(plan)
    total = 0
    for f in plan.files:
        batch = []
        for record in read_records(f.path, plan.keys):
            if isinstance(record, Document):
                batch.append(record)
                if len(batch) == 1024:
                    total += sum(tokens(batch))
                    batch = []
        total += sum(tokens(batch))
    return total


def _timed(args: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pipelines.create_hdf5_dataset", *args], cwd=ROOT,
                          capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{' '.join(args[:2])} failed:\n{proc.stderr[-2000:]}")
    return time.perf_counter() - started, proc.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--sample", default="1%")
    parser.add_argument("--corpora", default="en_natural,code,multilingual_natural")
    parser.add_argument("--large-gb", type=float, default=0,
                        help="also this many GB made from the bench corpora (bench.py's --large-gb input): the "
                             "estimate's share of a job's time where start-up no longer dominates")
    args = parser.parse_args()
    from pipelines.config import load_config
    from pipelines.estimate import estimate

    work = Path(tempfile.mkdtemp(prefix="bench_estimate_"))
    rows = []
    try:
        names = [n for n in args.corpora.split(",") if n] + ([f"{args.large_gb:g}GB"] if args.large_gb else [])
        for name in names:
            corpus = BENCH / f"{name}.jsonl.zst"
            if name.endswith("GB"):
                from benchmarks.bench import prepare_large

                input_dir = prepare_large(sorted(BENCH.glob("*.jsonl.zst")), args.large_gb, work / name)
            elif not corpus.exists():
                print(f"{corpus} not found (it lives in ../shared/corpora/bench)", file=sys.stderr)
                return 2
            else:
                input_dir = _decompress(corpus, work / name)
            truth = _truth(input_dir)
            config, _ = load_config(["LMData", "--input_dir", str(input_dir), "--output_dir", str(work / "none"),
                                     *TOKENIZER])
            hits, widths, errors = 0, [], []
            for seed in range(args.trials):
                e = estimate(config, args.sample, seed, job=False)
                hits += e.tokens.low <= truth <= e.tokens.high
                widths.append(e.tokens.relative)
                errors.append(e.tokens.value / truth - 1)
            out = work / f"{name}_out"
            job_args = ["LMData", "--input_dir", str(input_dir), *TOKENIZER, "--display_pbar", "False"]
            estimate_seconds, text = _timed(["estimate", *job_args, "--output_dir", str(out), "--sample",
                                             args.sample])
            job_seconds, _ = _timed([*job_args, "--output_dir", str(out)])
            params = json.loads((out / "data_params.json").read_text())
            shutil.rmtree(out)
            rows.append((name, truth, hits, widths, errors, estimate_seconds, job_seconds, text,
                         params["post-process"]))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"\nestimate calibration: {args.trials} seeded samples of {args.sample} per corpus, GPT-2, LMData, "
          f"{os.cpu_count()} cores\n")
    print(f"{'corpus':<22}{'true tokens':>14}{'in 95% CI':>11}{'half-width median (max)':>26}"
          f"{'error median (max)':>21}{'estimate s':>12}{'of it start-up':>16}{'job s':>8}{'share':>8}")
    for name, truth, hits, widths, errors, est_s, job_s, text, _ in rows:
        startup = float(re.search(r"s, ([0-9.]+) s of it start-up", text).group(1))
        print(f"{name:<22}{truth:>14,}{hits / args.trials:>10.0%} {statistics.median(widths):>14.1%} "
              f"({max(widths):.1%}){statistics.median(map(abs, errors)):>13.1%} ({max(map(abs, errors)):.1%})"
              f"{est_s:>12.1f}{startup:>16.1f}{job_s:>8.1f}{est_s / job_s:>8.0%}")
    print("\nthe estimate (one run of the command) against the job:")
    for name, _, _, _, _, _, _, text, post in rows:
        rows_line = re.search(r"rows\s+(\S+)\s+\(95%: ([^,)]+)", text)
        lv_line = re.search(r"loss-valid tokens\s+(\S+)\s+\(95%: ([^,)]+)", text)
        print(f"  {name:<22} rows {rows_line.group(1)} ({rows_line.group(2)}) vs {post['n_examples']:,}; "
              f"loss-valid {lv_line.group(1)} ({lv_line.group(2)}) vs {post['loss_valid_tokens']:,}")
    print("\ntargets:")
    for name, _, hits, _, _, est_s, job_s, _, _ in rows:
        coverage, share = hits / args.trials, est_s / job_s
        print(f"  {name:<22} coverage {coverage:.0%} (>= {TARGET_COVERAGE:.0%}: "
              f"{'met' if coverage >= TARGET_COVERAGE else 'not met'}); estimate {share:.0%} of the job's time "
              f"(< {TARGET_SHARE:.0%}: {'met' if share < TARGET_SHARE else 'not met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
