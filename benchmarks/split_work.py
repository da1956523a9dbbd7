"""Real local runs of the two input shapes that need work split up: `make split-bench`.

1. Many small inputs: the bench corpus cut into N files (default 5 000): wall time, and the same
   documents in one file for comparison (what a file costs on its own).
2. One large .jsonl split into work units: the bench corpus decompressed (~98 MB), packing groups of
   `--group-mb`, read as one unit (unsplit), as one unit per group, and one unit per group on two
   worker processes. Wall times, and whether the outputs are byte-identical (they must be).

Each run is the real job in a child process, timed from its start to its exit.

    python benchmarks/split_work.py [--corpus PATH.jsonl.zst] [--files 5000] [--group-mb 16]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = ROOT.parent / "shared" / "corpora" / "bench" / "en_natural.jsonl.zst"
GPT2 = ROOT / "data" / "tokenizers" / "gpt2"

_CHILD = """
import json, sys
from pipelines.config import load_config
from pipelines.job import run
argv, changes = json.loads(sys.argv[1])
config, beam_args = load_config(argv)
run(config, beam_args, changes)
"""


def _lines(corpus: Path) -> list[bytes]:
    import zstandard

    with open(corpus, "rb") as f:
        data = zstandard.ZstdDecompressor().stream_reader(f).read()
    return io.BytesIO(data).read().splitlines(keepends=True)


def _job(inputs: Path, out: Path, extra: list[str], changes: dict) -> float:
    argv = ["LMData", "--input_dir", str(inputs), "--output_dir", str(out), "--tokenizer_type", "GPT2Tokenizer",
            "--vocab_file", str(GPT2 / "vocab.bpe"), "--encoder_file", str(GPT2 / "encoder.json"),
            "--max_seq_length", "2048", *extra]
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps([argv, changes])], cwd=ROOT,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return seconds


def _digest(out: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(out.glob("*.h5")):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()[:16]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--group-mb", type=int, default=16)
    args = parser.parse_args(argv)
    lines = _lines(args.corpus)
    work = Path(tempfile.mkdtemp(prefix="split_work_"))
    try:
        mb = sum(map(len, lines)) / 1e6
        print(f"corpus {args.corpus.name}: {len(lines)} documents, {mb:.1f} MB of JSON lines")

        many, one = work / "many", work / "one"
        many.mkdir()
        one.mkdir()
        for i in range(args.files):
            (many / f"part-{i:05d}.jsonl").write_bytes(b"".join(lines[i::args.files]))
        (one / "all.jsonl").write_bytes(b"".join(lines[i] for k in range(args.files)
                                                 for i in range(k, len(lines), args.files)))
        t_many = _job(many, work / "out_many", [], {})
        t_one = _job(one, work / "out_one", ["--packing_group_mb", "1024"], {})
        print(f"{args.files} files: {t_many:.1f} s; the same documents in one file: {t_one:.1f} s "
              f"({(t_many - t_one) / args.files * 1000:.1f} ms per extra file)")

        big = work / "big"
        big.mkdir()
        (big / "corpus.jsonl").write_bytes(b"".join(lines))
        group = ["--packing_group_mb", str(args.group_mb)]
        runs = [
            ("one unit (unsplit)", [], {"unit_groups": 1 << 30}),
            ("one unit per group", [], {"unit_groups": 1}),
            ("one unit per group, 2 processes",
             ["--runner", "DirectRunner", "--direct_running_mode", "multi_processing", "--direct_num_workers", "2"],
             {"unit_groups": 1}),
        ]
        digests = []
        for name, extra, changes in runs:
            out = work / f"out_{len(digests)}"
            seconds = _job(big, out, group + extra, changes)
            digests.append(_digest(out))
            print(f"large file, {name}: {seconds:.1f} s, output {digests[-1]}")
        same = len(set(digests)) == 1
        print(f"large file: outputs byte-identical: {'yes' if same else 'NO'}")
        return 0 if same else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
