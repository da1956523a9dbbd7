"""The job on each engine, one run: FnApiRunner, Prism and a Flink cluster (and Spark): `make bench-runners`.

Each engine runs the command as a user does (a child process, `python -m
pipelines.create_hdf5_dataset`) twice per round: on a tiny input (the
sample, 0.6 MB), whose time is taken as the engine's start-up (process,
imports, job submission, deploying workers, loading the tokenizer in each),
and on the bench corpus. The data time is the difference. Rounds are
interleaved (every engine in each round) and the table shows medians; the
ratio is each engine's data time over FnApiRunner's in the same round.
The engines run as tests/test_engines.py runs them: SDK workers are separate
processes started by Beam's worker pool (EXTERNAL), Flink is a standalone
cluster of 2 slots at parallelism 2, Spark runs local[2]. The clusters are
started once, before the rounds (their start-up is printed apart). Every
engine's files must be the same bytes as FnApiRunner's.

After the rounds each engine runs the corpus once more with every packing
group handed on to other workers (what a file read in order and larger than
FAN_OUT_BYTES does on a distributed runner: here the corpus's 64 MB groups,
through the engine's shuffle), and must again give FnApiRunner's bytes.

    python benchmarks/runners.py [--corpus PATH] [--engines fnapi,prism,flink,spark] [--repeat 3] [--msl 2048]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts import engines  # noqa: E402

DEFAULT_CORPUS = ROOT.parent / "shared" / "corpora" / "bench" / "en_natural.jsonl.zst"
SAMPLE = ROOT / "data" / "sample"
GPT2 = ROOT / "data" / "tokenizers" / "gpt2"


# The job through launch() with plan fields no flag sets (as tests/test_engines.py sets them).
PLANNED = """
import json, sys
from pipelines.config import load_config
from pipelines.job import launch
launch(*load_config(sys.argv[2:]), json.loads(sys.argv[1])).result.wait_until_finish()
"""


def _job(input_dir: Path, out: Path, flags: list, msl: int, plan: dict = None) -> tuple[float, dict]:
    command = [sys.executable, "-m", "pipelines.create_hdf5_dataset"] if plan is None else \
        [sys.executable, "-c", PLANNED, json.dumps(plan)]
    argv = [*command, "LMData", "--input_dir", str(input_dir),
            "--output_dir", str(out), "--overwrite_output", "True", "--tokenizer_type", "GPT2Tokenizer",
            "--vocab_file", str(GPT2 / "vocab.bpe"), "--encoder_file", str(GPT2 / "encoder.json"),
            "--max_seq_length", str(msl), *flags]
    started = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if proc.returncode:
        raise RuntimeError(f"{' '.join(flags)}: exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return seconds, json.loads((out / "data_params.json").read_text())


def _digests(out: Path) -> dict:
    import hashlib

    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("*.h5"))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--engines", default="fnapi,prism,flink")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--msl", type=int, default=2048)
    args = parser.parse_args(argv)
    names = args.engines.split(",")
    work = Path(tempfile.mkdtemp(prefix="bench_runners_"))
    corpus_dir = work / "corpus"
    corpus_dir.mkdir()
    os.symlink(args.corpus.resolve(), corpus_dir / args.corpus.name)
    print(f"corpus: {args.corpus} ({args.corpus.stat().st_size / 1e6:.1f} MB on disk); msl {args.msl}; "
          f"{os.cpu_count()} cores", flush=True)

    flags, stop, setup_seconds = {}, [], {}
    for name in names:
        started = time.perf_counter()
        if name == "fnapi":
            flags[name] = ["--runner", "FnApiRunner"]
        elif name == "prism":
            binary = engines.setup_prism()
            pool = engines.WorkerPool(work / "prism_pool").start()
            stop.append(pool.stop)
            flags[name] = ["--runner", "PrismRunner", "--prism_location", str(binary),
                           "--environment_type", "EXTERNAL", "--environment_config", pool.address]
        elif name == "flink":
            cluster = engines.FlinkCluster(work / "flink", slots=2).start()
            stop.append(cluster.stop)
            flags[name] = cluster.flags(parallelism=2)
        elif name == "spark":
            server = engines.SparkJobServer(work / "spark", cores=2).start()
            stop.append(server.stop)
            flags[name] = server.flags()
        else:
            raise SystemExit(f"unknown engine {name}")
        setup_seconds[name] = time.perf_counter() - started
        print(f"{name}: set up and started in {setup_seconds[name]:.1f} s", flush=True)

    rows = {name: {"startup": [], "total": [], "data": [], "ratio": [], "stages": []} for name in names}
    digests = {}
    try:
        for r in range(args.repeat):
            data_this_round = {}
            for name in names:
                tiny, _ = _job(SAMPLE, work / f"tiny_{name}", flags[name], args.msl)
                total, params = _job(corpus_dir, work / f"out_{name}", flags[name], args.msl)
                digest = _digests(work / f"out_{name}")
                if digests and digest != next(iter(digests.values())):
                    raise SystemExit(f"{name}: the files differ from {next(iter(digests))}'s")
                digests.setdefault(name, digest)
                row = rows[name]
                row["startup"].append(tiny)
                row["total"].append(total)
                row["data"].append(total - tiny)
                row["stages"].append(params["run"].get("stage_seconds", {}))
                data_this_round[name] = total - tiny
                print(f"round {r + 1} {name}: start-up {tiny:.1f} s, total {total:.1f} s, "
                      f"data {total - tiny:.1f} s; {params['post-process']['n_examples']} sequences", flush=True)
            base = data_this_round.get("fnapi")
            for name in names:
                if base:
                    rows[name]["ratio"].append(data_this_round[name] / base)
        handed_on = {}
        for name in names:
            out = work / f"handed_on_{name}"
            handed_on[name], _ = _job(corpus_dir, out, flags[name], args.msl, {"fan_out_bytes": 0})
            if _digests(out) != next(iter(digests.values())):
                raise SystemExit(f"{name}: with every group handed on, the files differ")
            print(f"{name}: every group handed on: {handed_on[name]:.1f} s, the same files", flush=True)
    finally:
        for s in stop:
            s()

    med = statistics.median
    print()
    print("| engine | start-up (s) | whole job (s) | data (s) | data / FnApiRunner's | stage seconds (median, summed "
          "over workers) |")
    print("|---|---:|---:|---:|---:|---|")
    for name in names:
        row = rows[name]
        stages = {k: med([s.get(k, 0.0) for s in row["stages"]]) for k in row["stages"][0]}
        top = ", ".join(f"{k} {v:.1f}" for k, v in sorted(stages.items(), key=lambda kv: -kv[1])[:4])
        ratio = f"{med(row['ratio']):.2f}x" if row["ratio"] else "-"
        print(f"| {name} | {med(row['startup']):.1f} | {med(row['total']):.1f} | {med(row['data']):.1f} | "
              f"{ratio} | {top} |")
    print(f"\nfiles identical on every engine ({len(next(iter(digests.values())))} .h5 files)")
    print("\nevery group handed on (one run each, the same files): " +
          ", ".join(f"{name} {seconds:.1f} s" for name, seconds in handed_on.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
