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
limits): "of limit" against `tokenizers`, "of tiktoken" against tiktoken.

A configuration on another tokenizer than GPT-2 (`neox`; `qwen_off` and
`qwen_on`, Qwen2.5's multilingual tokenizer, ftfy off and on) is measured
against that tokenizer's own limits, taken on every tenth document. Only the
backends exact for a tokenizer are measured; the output names the others and
why (tiktoken for Qwen2.5: its pre-tokenizer regex is not one verified
against tiktoken's). After the table, the issue's targets for the corpus
(TARGETS: English or multilingual bench corpus) are shown met or not met;
they never make the run fail. Then ftfy_off and ftfy_on are set against their
floor (`print_floors`): start-up, fastokens' limit and the default codec's
CPU time on the job's own rows spread on all cores, which no run can beat.

`--large-gb 1` runs on about 1 GB of text instead, made at run time from the
bench corpora (both, whole, again and again, each copy's documents in another
seeded order, so no file holds a document twice in a row): start-up is then
a small part of the run and the steady rate shows. The limits are measured on
every tenth document of it and scaled (they are rates; the whole would take minutes
per round on `tokenizers`).

    python benchmarks/bench.py [--corpus PATH.jsonl.zst|.jsonl] [--limit-bytes N] [--msl 2048]
                               [--configs ftfy_off,ftfy_on,shuffle,vsl,splits,neox,decontam] [--repeat 3] [--large-gb 1]
    python benchmarks/bench.py --corpus ../shared/corpora/bench/multilingual_natural.jsonl.zst \
                               --configs ftfy_off,ftfy_on,qwen_off,qwen_on,mixture
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
    # ftfy_off and ftfy_on with Qwen2.5's tokenizer (multilingual: the multilingual corpus's other baseline).
    "qwen_off": [],
    "qwen_on": ["--use_ftfy", "True"],
    # ftfy_off's input as a one-source mixture taking all of it (the same rows): what the mixture's plan costs.
    "mixture": [],
    # ftfy_off decontaminated against a 10 MB evaluation set (prepare_eval): what the stage costs.
    "decontam": [],
}
EVAL_CONFIGS = ("decontam",)  # run with --decontaminate work/eval
MIXTURE_CONFIGS = ("mixture",)  # read through --mixture instead of --input_dir
MODES = ("LMData", "LMData_VSL", "Chat")  # a configuration may start with the mode it runs (default LMData)
QWEN = ROOT.parent / "shared" / "tokenizers" / "qwen2.5-instruct"
CHAT_CONFIGS = {"chat": "chat", "lm_qwen": "chat_text"}  # configuration -> its input (from prepare_chat)
BASELINES = {"vsl": "ftfy_off", "chat": "lm_qwen", "splits": "ftfy_off", "mixture": "ftfy_off",
             "decontam": "ftfy_off"}  # throughput against this one's
# Each tokenizer once, as the command's flags; the limits read the same files (read_tokenizer_files takes the
# flags' names), so a configuration and its limits cannot be on different tokenizers.
TOKENIZERS = {
    "GPT-2": ("GPT2Tokenizer", {"vocab_file": GPT2 / "vocab.bpe", "encoder_file": GPT2 / "encoder.json"}),
    "NeoX": ("NeoXTokenizer", {"encoder_file": NEOX}),
    "Qwen": ("HuggingFaceTokenizer", {"huggingface_tokenizer": QWEN}),
}
# Configurations on a tokenizer other than GPT-2. Each is measured against that tokenizer's own limits (one set
# per tokenizer and round, on every tenth document: they are rates), so "of limit" compares like with like.
TOKENIZER_OF = {"neox": "NeoX", "qwen_off": "Qwen", "qwen_on": "Qwen", "chat": "Qwen", "lm_qwen": "Qwen"}
# The targets, by corpus kind (the bench corpus's file name) and configuration: (against what, at
# least). "limit" is the configuration's "of limit"; another configuration's name is the share of that one's
# throughput in the same round (as BASELINES prints it). Shown as met or not met; a miss does not fail the run.
CORPUS_KINDS = {"en_natural.jsonl.zst": "English", "multilingual_natural.jsonl.zst": "multilingual"}
TARGETS = {
    "English": {"ftfy_off": ("limit", 4.5), "ftfy_on": ("limit", 3.5), "vsl": ("ftfy_off", 0.95),
                "decontam": ("ftfy_off", 0.8)},
    "multilingual": {"ftfy_off": ("limit", 3.0), "ftfy_on": ("limit", 2.5), "vsl": ("ftfy_off", 0.95)},
}
# Configurations shown against their floor: start-up, plus the two pieces of work no job can skip (encoding with
# the fastest exact encoder on all cores, compressing every row with the default codec), spread on all cores.
FLOORS = ("ftfy_off", "ftfy_on")
MAX_RSS_MB = 1024  # every configuration, on any input: 1 GB, in the table's MB (wait4's KiB / 1024)


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


def tokenizer_args(tokenizer: str) -> list[str]:
    """The command's flags for one of TOKENIZERS."""
    kind, flags = TOKENIZERS[tokenizer]
    return ["--tokenizer_type", kind, *(x for flag, path in flags.items() for x in (f"--{flag}", str(path)))]


def measure_limits(input_dir: Path, share: float = 1.0, tokenizer: str = "GPT-2") -> tuple[dict, dict]:
    """The raw speed of each encoder backend on the texts (every 1/share-th of them, scaled), in the same way.

    Only the backends that are exact for the tokenizer are measured (a limit that gives other ids is none);
    the others come back with the reason, e.g. tiktoken for Qwen2.5, whose pre-tokenizer regex is not one
    verified against tiktoken's. Returns ({backend: measure}, {backend: why not measured}).
    """
    import dataclasses

    from transforms.core.tokenizer import build_tokenizer
    from transforms.io.tokenizer_files import read_tokenizer_files

    texts = []
    for p in sorted(input_dir.glob("*.jsonl")):
        texts.extend(json.loads(line)["text"] for line in open(p))
    total = sum(len(t.encode("utf-8")) for t in texts)
    # Every k-th document, not the first ones: the multilingual corpus comes grouped by language (its first tenth
    # is mostly Latin and Arabic script), and a rate is then scaled by the share of the bytes it was taken on.
    texts = texts[::max(1, round(1 / share))]
    kind, flags = TOKENIZERS[tokenizer]
    files = read_tokenizer_files(kind, **{flag: str(path) for flag, path in flags.items()})
    toks, skipped = {}, {}
    for name in ("tokenizers", "tiktoken", "fastokens"):
        try:
            toks[name] = build_tokenizer(dataclasses.replace(files, backend=name))
        except ValueError as e:  # build_tokenizer's refusal of a backend that would not give the exact ids
            skipped[name] = str(e)
    fraction = sum(len(t.encode("utf-8")) for t in texts) / total
    encoders = {"tokenizers": lambda batch: [len(e.ids) for e in toks["tokenizers"].backend.encode_batch_fast(batch)],
                "tiktoken": lambda batch: [len(ids) for ids in toks["tiktoken"].encoder.encode_batch(batch)],
                "fastokens": lambda batch: [len(ids) for ids in toks["fastokens"].encoder.encode_batch(batch)]}
    out, counts = {}, {}
    for name, encode in encoders.items():
        if name in skipped:
            continue
        start = time.perf_counter()
        tokens = 0
        for i in range(0, len(texts), 1024):  # batches, as any real user of encode_batch would
            tokens += sum(encode(texts[i:i + 1024]))
        seconds = time.perf_counter() - start
        out[name] = {"bytes": total, "tokens": tokens / fraction, "seconds": seconds / fraction}
        counts[name] = tokens
    if len(set(counts.values())) != 1:
        raise SystemExit(f"the backends disagree on the token count ({tokenizer}): {counts}")
    return out, skipped


def print_floors(names: list, runs: dict, startups: list, own: dict) -> None:
    """Per configuration of FLOORS: the least time any job doing its work could take on this machine, as a
    multiple of the tokenizers limit, and how far the configuration is from it.

    floor = start-up (the command on one short document) + fastokens' limit (it encodes on all cores) + the
    default codec's CPU seconds on every row of the job (measured on its own output) / cores. Reading, JSON,
    ftfy, packing, statistics and writing are left out: a lower bound, not an estimate.
    """
    cores = os.cpu_count() or 1
    shown = [name for name in names if name in FLOORS and runs[name][-1]["deflate_cpu_s"] is not None]
    if not shown or "fastokens" not in own:
        return
    startup = statistics.median(startups)
    encode = statistics.median(own["fastokens"])
    print(f"\nfloors (start-up {startup:.1f} s on one short document + fastokens {encode:.1f} s on all cores "
          f"+ the default codec's CPU time on every row / {cores} cores; reading, ftfy, packing left out):")
    for name in shown:
        deflate = statistics.median(r["deflate_cpu_s"] for r in runs[name])
        floor = startup + encode + deflate / cores
        limit = statistics.median(own["tokenizers"])
        seconds = statistics.median(r["seconds"] for r in runs[name])
        print(f"  {name:<10}{floor:>6.1f} s = {limit / floor:.2f}x of the tokenizers limit at best "
              f"(compressing {deflate:.1f} CPU-s); the run takes {seconds / floor:.2f}x its floor")


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


EVAL_CORPUS = ROOT.parent / "shared" / "corpora" / "bench" / "multilingual_natural.jsonl.zst"
EVAL_BYTES = 10_000_000


def prepare_eval(input_dir: Path, work: Path) -> None:
    """work/eval/eval.jsonl: a 10 MB evaluation set of questions (60-word pieces of the multilingual bench
    corpus' documents, text the training corpus does not hold) and, so that some records are found, a 40-word
    piece of every 500th training document."""
    import io

    import zstandard

    (work / "eval").mkdir()
    written = 0
    with open(work / "eval" / "eval.jsonl", "w", encoding="utf-8") as out:
        for k, line in enumerate(open(input_dir / "corpus.jsonl", encoding="utf-8")):
            words = json.loads(line)["text"].split()
            if k % 500 == 0 and len(words) >= 140:
                written += out.write(json.dumps({"question": " ".join(words[100:140]), "answer": "A"}) + "\n")
        with zstandard.ZstdDecompressor().stream_reader(open(EVAL_CORPUS, "rb")) as raw:
            for line in io.TextIOWrapper(raw, encoding="utf-8"):
                words = json.loads(line)["text"].split()
                for i in range(0, len(words) - 59, 60):
                    written += out.write(json.dumps({"question": " ".join(words[i:i + 60]), "answer": "B"},
                                                    ensure_ascii=False) + "\n")
                    if written >= EVAL_BYTES:
                        return


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
    tokenizer = tokenizer_args(TOKENIZER_OF.get(name, "GPT-2"))
    if name in CHAT_CONFIGS:
        input_dir = work / CHAT_CONFIGS[name]
    source = ["--input_dir", str(input_dir)] if name not in MIXTURE_CONFIGS else \
        ["--mixture", json.dumps([{"source": str(input_dir), "name": "all", "weight": 1}])]
    if name in EVAL_CONFIGS:
        extra = [*extra, "--decontaminate", str(work / "eval")]
    args = [mode, *source, "--output_dir", str(out), *tokenizer,
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
    deflate = deflate_cpu_seconds(out, _post(params)["n_examples"]) if name in FLOORS else None
    shutil.rmtree(out)
    return {"seconds": float(seconds), "peak_rss_mb": int(peak_kb) / 1024, "params": params,
            "deflate_cpu_s": deflate}


def deflate_cpu_seconds(out: Path, n_rows: int, sample: int = 2000) -> float:
    """CPU seconds that compressing all of a job's rows takes the job's default codec on one core.

    Every k-th row of the job's own output (up to `sample` of them), read back and compressed again as its
    encoder does (whole rows, libdeflate at the default level, one thread), scaled to the job's rows.
    """
    import h5py
    import numpy as np

    from transforms.io.compressors import DEFAULT_COMPRESSOR, Codec
    from transforms.io.hdf5_format import GZIP_LEVEL

    rows = []
    for path in sorted(out.glob("*.h5")):
        with h5py.File(path, "r") as f:
            rows.append(f["data"][()])
    rows = np.concatenate(rows)
    rows = rows[::max(1, len(rows) // sample)]
    compress = Codec(DEFAULT_COMPRESSOR, GZIP_LEVEL).compress()
    data = [np.ascontiguousarray(row, dtype="<i4").tobytes() for row in rows]
    start = time.process_time()
    for chunk in data:
        compress(chunk)
    return (time.process_time() - start) / len(data) * n_rows


def startup_seconds(work: Path, msl: int) -> float:
    """Wall seconds of ftfy_off's command on one short document: interpreter, imports, the tokenizer, the
    pipeline's construction and its runner's start and end, with (nearly) no data."""
    tiny = work / "tiny"
    if not tiny.exists():
        tiny.mkdir()
        (tiny / "one.jsonl").write_text(json.dumps({"text": "A short document. " * 20}) + "\n")
    return run_config("ftfy_off", tiny, work, msl)["seconds"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--limit-bytes", type=int, default=0, help="use only the first N bytes of lines (0: all)")
    parser.add_argument("--msl", type=int, default=2048)
    parser.add_argument("--configs", default="ftfy_off,ftfy_on,shuffle,vsl,splits,neox,decontam")
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
        if any(name in EVAL_CONFIGS for name in names):
            prepare_eval(input_dir, work)
        # GPT-2's limits on the texts, each other tokenizer's on every tenth document (rates), every round.
        tokenizers = ["GPT-2", *dict.fromkeys(TOKENIZER_OF[name] for name in names if name in TOKENIZER_OF)]
        limits = {tok: [] for tok in tokenizers}  # tokenizer -> per round {backend: measure}
        not_exact, runs, startups = {}, {name: [] for name in names}, []
        for _ in range(max(1, args.repeat)):
            for tok in tokenizers:
                measured, not_exact[tok] = measure_limits(input_dir, share if tok == "GPT-2" else share / 10, tok)
                limits[tok].append(measured)
            for name in names:
                runs[name].append(run_config(name, input_dir, work, args.msl))
            if any(name in FLOORS for name in names):
                startups.append(startup_seconds(work, args.msl))
        limit = limits["GPT-2"][-1]["tokenizers"]
        mb = limit["bytes"] / 1e6
        # tokenizer -> backend -> its seconds in each round
        limit_s = {tok: {k: [x[k]["seconds"] for x in rounds] for k in rounds[-1]} for tok, rounds in limits.items()}
        print(f"\ncorpus {corpus_name}: {mb:.1f} MB of text, msl {args.msl}, {os.cpu_count()} cores, "
              f"{len(limits['GPT-2'])} rounds (medians; seconds min-max)\n")
        print(f"{'run':<24}{'seconds':>9}{'min-max':>13}{'MB/s':>8}{'Mtok/s':>8}{'of limit':>10}{'of tiktoken':>12}"
              f"{'per round':>16}{'peak RSS MB':>13}  stages (s, last round)")

        def line(name, seconds, tokens, rss, stages, tokenizer="GPT-2"):
            """One row, against `tokenizer`'s own limits; returns its median "of limit"."""
            own = limit_s[tokenizer]
            spread = f"{min(seconds):.1f}-{max(seconds):.1f}"
            med = statistics.median(seconds)
            ratios = [lim / s for lim, s in zip(own["tokenizers"], seconds)]
            of_fast = (f"{statistics.median([lim / s for lim, s in zip(own['tiktoken'], seconds)]):>12.0%}"
                       if "tiktoken" in own else f"{'-':>12}")
            per_round = " ".join(f"{r:.0%}" for r in ratios)
            stage_text = " ".join(f"{k} {v:.1f}" for k, v in stages.items())
            rss_text = f"{rss:.0f}" if rss is not None else "-"
            print(f"{name:<24}{med:>9.1f}{spread:>13}{mb / med:>8.2f}{tokens / med / 1e6:>8.2f}"
                  f"{statistics.median(ratios):>10.0%}{of_fast} {per_round:>15}"
                  f"{rss_text:>13}  {stage_text}")
            return statistics.median(ratios)

        for tok in tokenizers:
            for backend, seconds in limit_s[tok].items():
                line(f"limit: {backend}" + ("" if tok == "GPT-2" else f" ({tok})"), seconds,
                     limits[tok][-1][backend]["tokens"], None, {}, tok)
        of_limit = {}
        for name in names:
            seconds = [r["seconds"] for r in runs[name]]
            last = runs[name][-1]
            of_limit[name] = line(name, seconds, _post(last["params"])["loss_valid_tokens"],
                                  max(r["peak_rss_mb"] for r in runs[name]),
                                  last["params"].get("run", {}).get("stage_seconds", {}),
                                  TOKENIZER_OF.get(name, "GPT-2"))
        if tokenizers[1:]:
            print()
        for tok in tokenizers[1:]:
            print(f"{', '.join(n for n in names if TOKENIZER_OF.get(n) == tok)}: \"of limit\" and \"of tiktoken\" "
                  f"are against {tok}'s own limits (measured on every {round(10 / share)}th document).")
        for tok, reasons in not_exact.items():
            for backend, reason in reasons.items():
                print(f"{tok}: no {backend} limit, {backend} is not exact for it: {reason}")

        def share_of(name, baseline):
            """Per round, `name`'s throughput as a share of `baseline`'s (same texts, same round)."""
            return [b["seconds"] / r["seconds"] for b, r in zip(runs[baseline], runs[name])]

        for name, baseline in BASELINES.items():
            # A mode against LMData on the same texts in the same round: the throughput it keeps.
            if name not in runs or baseline not in runs:
                continue
            ratios = share_of(name, baseline)
            last = _post(runs[name][-1]["params"])
            print(f"\n{name}: {statistics.median(ratios):.1%} of {baseline}'s throughput (LMData, same texts, "
                  f"same round; per round {' '.join(f'{x:.1%}' for x in ratios)}); "
                  f"{last['n_examples']} rows against {_post(runs[baseline][-1]['params'])['n_examples']}"
                  + (f", vsl_packing_factor {last['vsl_packing_factor']}" if "vsl_packing_factor" in last else ""))
        # The targets (medians), for the configurations that ran; --large-gb mixes the corpora, so RSS only.
        kind = None if args.large_gb else CORPUS_KINDS.get(args.corpus.name)
        print(f"\ntargets ({kind + ' corpus' if kind else 'no throughput targets for ' + corpus_name}):")
        for name, (against, least) in TARGETS.get(kind, {}).items():
            if name not in runs or (against != "limit" and against not in runs):
                continue
            value = of_limit[name] if against == "limit" else statistics.median(share_of(name, against))
            what = "of the tokenizers limit" if against == "limit" else f"of {against}'s throughput"
            print(f"  {name:<10}{value:>6.2f}x {what:<28} target >= {least:g}x: "
                  f"{'met' if value >= least else 'not met'}")
        rss = {name: max(r["peak_rss_mb"] for r in runs[name]) for name in names}
        worst = max(rss, key=rss.get)
        print(f"  {'peak RSS':<10}{rss[worst]:>6.0f} MB, the largest ({worst}), target <= {MAX_RSS_MB} MB: "
              f"{'met' if rss[worst] <= MAX_RSS_MB else 'not met'}")
        print_floors(names, runs, startups, limit_s["GPT-2"])
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
