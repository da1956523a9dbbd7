"""End-to-end benchmark against the physical limits: `make bench`.

Three limits, each the raw throughput of one encoder backend on the same texts,
in this process, on all cores, in batches of 1,024 documents: `tokenizers`
(encode_batch_fast), tiktoken (`backends.TiktokenEncoder.encode_batch`) and
fastokens (`fast.FastokensEncoder.encode_batch` with the job's default
cross-check); their token counts must agree. Each configuration then runs the real command
in a child process with the command's default runner options, timed from
the child's start (interpreter and imports included) to its exit, after
data_params.json is written, with the peak RSS of its whole process tree.

Shared machines are noisy, so `--repeat` rounds each measure the limits and
then every configuration; the table shows medians, and each ratio is the
median of the per-round ratios (a configuration against its own round's
limits): "of limit" against `tokenizers`, "of fast" against tiktoken.

`--large-gb 1` runs on about 1 GB of text instead, made at run time from the
bench corpora (both, whole, again and again, each copy's documents in another
seeded order, so no file holds a document twice in a row): start-up is then
a small part of the run and the steady rate shows. The limits are measured on
the first tenth of it and scaled (they are rates; the whole would take minutes
per round on `tokenizers`).

    python benchmarks/bench.py [--corpus PATH.jsonl.zst|.jsonl] [--limit-bytes N] [--msl 2048]
                               [--configs ftfy_off,ftfy_on,shuffle,vsl,splits] [--repeat 3] [--large-gb 1]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = ROOT.parent / "shared" / "corpora" / "bench" / "en_natural.jsonl.zst"
GPT2 = ROOT / "data" / "tokenizers" / "gpt2"
NEOX = ROOT.parent / "shared" / "tokenizers" / "gpt-neox-20b" / "20B_tokenizer.json"
CONFIGS = {
    "ftfy_off": [],
    "ftfy_on": ["--use_ftfy", "True"],
    "shuffle": ["--shuffle", "True"],
    "multi_processing_2": ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"],
    "tokenizers_backend": ["--tokenizer_backend", "tokenizers"],  # ftfy_off encoded by tokenizers, for A/B
    "vsl": ["LMData_VSL"],  # ftfy_off's settings, documents packed whole into 5-feature rows
    # The same texts as conversations (each document's paragraphs as alternating user / assistant turns of
    # at most ~5,000 characters a conversation), with a chat model's tokenizer and template; lm_qwen is
    # LMData over exactly those texts with that tokenizer, the baseline chat is compared with.
    "chat": ["Chat"],
    "lm_qwen": ["LMData"],
    # ftfy_off's job cut three ways by content (one read, one tokenization): three datasets and a summary.
    "splits": ["--data_splits", "train=0.98,validation=0.01,test=0.01"],
    "tiktoken_backend": ["--tokenizer_backend", "tiktoken"],  # ftfy_off encoded by tiktoken, for A/B
    "zlib": ["--compressor", "zlib"],  # ftfy_off with the reference's compressor, for A/B
    "isal": ["--compressor", "isal"],
    "neox": [],  # ftfy_off with GPT-NeoX-20B's tokenizer (through fastokens too)
}
MODES = ("LMData", "LMData_VSL", "Chat")  # a configuration may start with the mode it runs (default LMData)
QWEN = ROOT.parent / "shared" / "tokenizers" / "qwen2.5-instruct"
CHAT_CONFIGS = {"chat": "chat", "lm_qwen": "chat_text"}  # configuration -> its input (from prepare_chat)
BASELINES = {"vsl": "ftfy_off", "chat": "lm_qwen", "splits": "ftfy_off"}  # throughput against this one's


def _post(params: dict) -> dict:
    """The post-process counts of a dataset, or of a split job's outputs added up."""
    if "outputs" not in params:
        return params["post-process"]
    return {"n_examples": sum(o["sequences"] for o in params["outputs"]),
            "loss_valid_tokens": sum(o["loss_valid_tokens"] for o in params["outputs"])}


def prepare(corpus: Path, limit_bytes: int, work: Path) -> Path:
    """The corpus as plain .jsonl (decompressed), cut after `limit_bytes` of lines."""
    import zstandard

    out_dir = work / "input"
    out_dir.mkdir(parents=True)
    out = out_dir / "corpus.jsonl"
    opener = (lambda p: zstandard.ZstdDecompressor().stream_reader(open(p, "rb"))) \
        if corpus.suffix == ".zst" else (lambda p: open(p, "rb"))
    import io

    written = 0
    with opener(corpus) as raw, open(out, "wb") as dst:
        for line in io.BufferedReader(raw, 1 << 20):
            if limit_bytes and written + len(line) > limit_bytes:
                break
            dst.write(line)
            written += len(line)
    return out_dir


def _gpt2_files():
    from transforms.io.tokenizer_files import read_tokenizer_files

    return read_tokenizer_files("GPT2Tokenizer", vocab_file=str(GPT2 / "vocab.bpe"),
                                encoder_file=str(GPT2 / "encoder.json"))


def NEOX_FILES():
    from transforms.io.tokenizer_files import read_tokenizer_files

    return read_tokenizer_files("NeoXTokenizer", encoder_file=str(NEOX))


def measure_limits(input_dir: Path, share: float = 1.0, tokenizer=_gpt2_files) -> dict:
    """The raw speed of each encoder backend on the texts (the first `share` of them, scaled), in the same way."""
    import dataclasses

    from transforms.core.tokenizer import build_tokenizer

    texts = []
    for p in sorted(input_dir.glob("*.jsonl")):
        texts.extend(json.loads(line)["text"] for line in open(p))
    texts = texts[:max(1, int(len(texts) * share))]
    files = tokenizer()
    toks = {name: build_tokenizer(dataclasses.replace(files, backend=name))
            for name in ("tokenizers", "tiktoken", "fastokens")}
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    encoders = {"tokenizers": lambda batch: [len(e.ids) for e in toks["tokenizers"].backend.encode_batch_fast(batch)],
                "tiktoken": lambda batch: [len(ids) for ids in toks["tiktoken"].encoder.encode_batch(batch)],
                "fastokens": lambda batch: [len(ids) for ids in toks["fastokens"].encoder.encode_batch(batch)]}
    out = {}
    for name, encode in encoders.items():
        start = time.perf_counter()
        tokens = 0
        for i in range(0, len(texts), 1024):  # batches, as any real user of encode_batch would
            tokens += sum(encode(texts[i:i + 1024]))
        seconds = time.perf_counter() - start
        out[name] = {"bytes": nbytes / share, "tokens": tokens / share, "seconds": seconds / share}
    counts = {name: int(x["tokens"] * share) for name, x in out.items()}
    if len(set(counts.values())) != 1:
        raise SystemExit(f"the backends disagree on the token count: {counts}")
    return out


def prepare_large(corpora: list[Path], gigabytes: float, work: Path) -> Path:
    """About `gigabytes` GB of JSON lines from the bench corpora, whole copies in seeded orders, in 8 files."""
    import io
    import random

    import zstandard

    lines = []
    for corpus in corpora:
        with zstandard.ZstdDecompressor().stream_reader(open(corpus, "rb")) as raw:
            lines.extend(io.BufferedReader(raw, 1 << 20))
    size = sum(map(len, lines))
    out_dir = work / "input"
    out_dir.mkdir(parents=True)
    copies = max(1, round(gigabytes * 1e9 / size))
    files = [open(out_dir / f"part{i}.jsonl", "wb") for i in range(8)]
    try:
        for copy in range(copies):
            order = list(range(len(lines)))
            random.Random(copy).shuffle(order)
            for k, i in enumerate(order):
                files[k % 8].write(lines[i])
    finally:
        for f in files:
            f.close()
    return out_dir




def prepare_chat(input_dir: Path, work: Path) -> None:
    """The corpus as conversations (work/chat) and as their plain texts (work/chat_text), one record each."""
    (work / "chat").mkdir()
    (work / "chat_text").mkdir()
    with open(work / "chat" / "a.jsonl", "w") as chats, open(work / "chat_text" / "a.jsonl", "w") as texts:
        for line in open(input_dir / "corpus.jsonl", encoding="utf-8"):
            paragraphs = [p for p in json.loads(line)["text"].split("\n\n") if p.strip()]
            piece, size = [], 0
            for p in paragraphs + [None]:
                if piece and (p is None or size + len(p) > 5000):
                    if len(piece) == 1:  # one paragraph: its halves are the two turns
                        piece = [piece[0][:len(piece[0]) // 2], piece[0][len(piece[0]) // 2:]]
                    if len(piece) % 2:
                        piece[-2:] = ["\n\n".join(piece[-2:])]
                    if all(x.strip() for x in piece):
                        roles = ("user", "assistant") * len(piece)
                        chats.write(json.dumps({"messages": [{"role": r, "content": c}
                                                             for r, c in zip(roles, piece)]}) + "\n")
                        texts.write(json.dumps({"text": "\n\n".join(piece)}) + "\n")
                    piece, size = [], 0
                if p is not None:
                    piece.append(p)
                    size += len(p)


LAUNCHER = r"""
import os, subprocess, sys, time
start = time.perf_counter()
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(child.pid, 0)
print(time.perf_counter() - start, usage.ru_maxrss)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_config(name: str, input_dir: Path, work: Path, msl: int) -> dict:
    out = work / f"out_{name}"
    extra = CONFIGS[name]
    mode, extra = (extra[0], extra[1:]) if extra and extra[0] in MODES else ("LMData", extra)
    tokenizer = ["--tokenizer_type", "GPT2Tokenizer", "--vocab_file", str(GPT2 / "vocab.bpe"),
                 "--encoder_file", str(GPT2 / "encoder.json")]
    if name == "neox":
        tokenizer = ["--tokenizer_type", "NeoXTokenizer", "--encoder_file", str(NEOX)]
    if name in CHAT_CONFIGS:
        input_dir = work / CHAT_CONFIGS[name]
        tokenizer = ["--tokenizer_type", "HuggingFaceTokenizer", "--huggingface_tokenizer", str(QWEN)]
    args = [mode, "--input_dir", str(input_dir), "--output_dir", str(out), *tokenizer,
            "--max_seq_length", str(msl), "--display_pbar", "False", *extra]
    # The command as a user runs it (its own exit path included), started by a small launcher process that
    # times it and takes its peak RSS from wait4. Not started from here: Linux carries a process's peak RSS
    # across fork and exec, so a child of this process (which holds the limits' texts) would report at least
    # this process's size.
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.run([sys.executable, "-c", LAUNCHER, sys.executable, "-m", "pipelines.create_hdf5_dataset",
                               *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=stderr, text=True)
        stderr.seek(0)
        err = stderr.read().decode("utf-8", "replace")
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed:\n{err[-3000:]}")
    seconds, peak_kb = proc.stdout.split()
    params = json.loads((out / "data_params.json").read_text())
    shutil.rmtree(out)
    return {"seconds": float(seconds), "peak_rss_mb": int(peak_kb) / 1024, "params": params}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--limit-bytes", type=int, default=0, help="use only the first N bytes of lines (0: all)")
    parser.add_argument("--msl", type=int, default=2048)
    parser.add_argument("--configs", default="ftfy_off,ftfy_on,shuffle,vsl,splits,neox")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of limit + configurations (medians shown)")
    parser.add_argument("--large-gb", type=float, default=0,
                        help="run on about this many GB made from the bench corpora instead of --corpus")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    if not args.corpus.exists():
        print(f"corpus {args.corpus} not found (it lives in ../shared/corpora/bench)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench_"))
    try:
        if args.large_gb:
            input_dir = prepare_large(sorted(DEFAULT_CORPUS.parent.glob("*.jsonl.zst")), args.large_gb, work)
            share, corpus_name = 0.1, f"{args.large_gb:g} GB from the bench corpora"
        else:
            input_dir = prepare(args.corpus, args.limit_bytes, work)
            share, corpus_name = 1.0, args.corpus.name
        names = args.configs.split(",")
        if any(name in CHAT_CONFIGS for name in names):
            prepare_chat(input_dir, work)
        limits, neox_limits, runs = [], [], {name: [] for name in names}
        for _ in range(max(1, args.repeat)):
            limits.append(measure_limits(input_dir, share))
            if "neox" in names:  # NeoX's own tokenizers limit, on a tenth of the texts (a rate)
                neox_limits.append(measure_limits(input_dir, share / 10, tokenizer=NEOX_FILES)["tokenizers"])
            for name in names:
                runs[name].append(run_config(name, input_dir, work, args.msl))
        limit = limits[-1]["tokenizers"]
        mb = limit["bytes"] / 1e6
        limit_s = {k: [x[k]["seconds"] for x in limits] for k in limits[-1]}
        print(f"\ncorpus {corpus_name}: {mb:.1f} MB of text, msl {args.msl}, {os.cpu_count()} cores, "
              f"{len(limits)} rounds (medians; seconds min-max)\n")
        print(f"{'run':<24}{'seconds':>9}{'min-max':>13}{'MB/s':>8}{'Mtok/s':>8}{'of limit':>10}{'of tiktoken':>12}"
              f"{'per round':>16}{'peak RSS MB':>13}  stages (s, last round)")

        def line(name, seconds, tokens, rss, stages, slow=None):
            slow = slow or limit_s["tokenizers"]
            spread = f"{min(seconds):.1f}-{max(seconds):.1f}"
            med = statistics.median(seconds)
            ratios = [lim / s for lim, s in zip(slow, seconds)]
            of_fast = [lim / s for lim, s in zip(limit_s["tiktoken"], seconds)]
            per_round = " ".join(f"{r:.0%}" for r in ratios)
            stage_text = " ".join(f"{k} {v:.1f}" for k, v in stages.items())
            rss_text = f"{rss:.0f}" if rss is not None else "-"
            print(f"{name:<24}{med:>9.1f}{spread:>13}{mb / med:>8.2f}{tokens / med / 1e6:>8.2f}"
                  f"{statistics.median(ratios):>10.0%}{statistics.median(of_fast):>12.0%}{per_round:>16}"
                  f"{rss_text:>13}  {stage_text}")

        for backend in ("tokenizers", "tiktoken", "fastokens"):
            line(f"limit: {backend}", limit_s[backend], limit["tokens"], None, {})
        if neox_limits:
            line("limit: tokenizers (NeoX)", [x["seconds"] for x in neox_limits], neox_limits[-1]["tokens"], None, {},
                 slow=[x["seconds"] for x in neox_limits])
        for name in names:
            seconds = [r["seconds"] for r in runs[name]]
            last = runs[name][-1]
            line(name, seconds, _post(last["params"])["loss_valid_tokens"],
                 max(r["peak_rss_mb"] for r in runs[name]), last["params"].get("run", {}).get("stage_seconds", {}),
                 slow=[x["seconds"] for x in neox_limits] if name == "neox" else None)
        if "neox" in names:
            print("\nneox: \"of limit\" is against NeoX's own tokenizers limit; \"of tiktoken\" against GPT-2's.")
        for name, baseline in BASELINES.items():
            # A mode against LMData on the same texts in the same round: the throughput it keeps.
            if name not in runs or baseline not in runs:
                continue
            ratios = [b["seconds"] / r["seconds"] for b, r in zip(runs[baseline], runs[name])]
            last = _post(runs[name][-1]["params"])
            print(f"\n{name}: {statistics.median(ratios):.1%} of {baseline}'s throughput (LMData, same texts, "
                  f"same round; per round {' '.join(f'{x:.1%}' for x in ratios)}); "
                  f"{last['n_examples']} rows against {_post(runs[baseline][-1]['params'])['n_examples']}"
                  + (f", vsl_packing_factor {last['vsl_packing_factor']}" if "vsl_packing_factor" in last else ""))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
