"""How far the progress bar's ETA is from the truth, setting by setting: `make progress-eta`.

Runs the real command for each setting in a pseudo-terminal (where the bar is
drawn), records every frame of the bar with the time it was drawn, and
compares the ETA each frame showed with the time really left: until the bar
reached 100% (what the ETA stands for) and until the command exited. Only
frames after the first 10% of the run count: drawn at 10% of the bar or more
(the bar is a share of the work's time) and at 10% of the command's run time
or later. The bar shows whole seconds, so an ETA within a second of the truth
is as right as it can be: the error is |eta - left| less that second, over
max(left, 1 s). A frame with no ETA after the first 10% counts as an error of
100%.

The text settings run on the bench corpus (en_natural.jsonl.zst, 91.5 MB of
text, 2 packing groups), the others on records made from it: Summarization_VSL
on prompt / completion pairs (a document's first paragraph, the next ones up
to ~4,000 characters), Chat and Chat_VSL on conversations (paragraphs as
alternating user / assistant turns of ~5,000 characters a conversation, as
benchmarks/bench.py makes them) from its first 44 MB, and DPO on prompt /
chosen / rejected triples from its first 32 MB; each input is given under as
many names as make a run take 30-60 s on 2 cores (SETTINGS; `--copies 1`: each
once, where a small job's first group is half of it). The chat modes use
Qwen2.5's tokenizer and template (../shared/tokenizers/qwen2.5-instruct). The
last column is the time the bar assumed for pack and encode before they had
measured their own (progress.ROWS_COST) over the time they took: how good that
prior is on this machine.

    python benchmarks/progress_eta.py [--settings default,ftfy,...] [--frames] [--copies N]
                                      [--corpus PATH.jsonl.zst] [--chat-bytes N] [--dpo-bytes N]
                                      [-- extra flags for every run]
"""

from __future__ import annotations

import argparse
import fcntl
import io
import json
import os
import pty
import re
import select
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = ROOT.parent / "shared" / "corpora" / "bench" / "en_natural.jsonl.zst"
GPT2 = ROOT / "data" / "tokenizers" / "gpt2"
QWEN = ROOT.parent / "shared" / "tokenizers" / "qwen2.5-instruct"
_GPT2 = ["--tokenizer_type", "GPT2Tokenizer", "--vocab_file", str(GPT2 / "vocab.bpe"),
         "--encoder_file", str(GPT2 / "encoder.json")]
_QWEN = ["--tokenizer_type", "HuggingFaceTokenizer", "--huggingface_tokenizer", str(QWEN)]
_SUMMARIZATION = ["--prompt_key", "prompt", "--completion_key", "completion"]
# name -> (mode, input, copies of it, tokenizer, flags): copies so that a run takes 30-60 s on 2 cores.
SETTINGS = {
    "default": ("LMData", "text", 9, _GPT2, []),
    "ftfy": ("LMData", "text", 6, _GPT2, ["--use_ftfy", "True"]),
    "tokenizers": ("LMData", "text", 2, _GPT2, ["--tokenizer_backend", "tokenizers"]),
    "shuffle": ("LMData", "text", 9, _GPT2, ["--shuffle", "True"]),
    "LMData_VSL": ("LMData_VSL", "text", 6, _GPT2, []),
    "Summarization_VSL": ("Summarization_VSL", "summarization", 6, _GPT2, _SUMMARIZATION),
    "Chat": ("Chat", "chat", 1, _QWEN, []),
    "Chat_VSL": ("Chat_VSL", "chat", 1, _QWEN, []),
    "DPO": ("DPO", "dpo", 1, _QWEN, ["--prompt_key", "prompt"]),
    "splits": ("LMData", "text", 7, _GPT2, ["--data_splits", "train=0.98,validation=0.01,test=0.01"]),
}
# tqdm: "tokenizing:  45%|####5     | 41.2M/91.5M [00:03<00:04, 12.3MB/s, docs 7,120 · ...]"
_FRAME = re.compile(r"(\d+)%\|.*?\[(\d+):(\d+)<(?:(\d+):(\d+)|\?)")


def _seconds(m: str, s: str) -> int:
    return int(m) * 60 + int(s)


# ------------------------------------------------------------------------------------------------ inputs


def _documents(corpus: Path, limit: int) -> Iterator[str]:
    """The corpus's texts, up to `limit` bytes of lines (0: all)."""
    import zstandard

    n = 0
    with zstandard.ZstdDecompressor().stream_reader(open(corpus, "rb")) as raw:
        for line in io.BufferedReader(raw, 1 << 20):
            if limit and n + len(line) > limit:
                return
            n += len(line)
            yield json.loads(line)["text"]


def _pieces(text: str, size: int) -> Iterator[list[str]]:
    """A document's paragraphs in runs of about `size` characters."""
    piece, n = [], 0
    for p in [p for p in text.split("\n\n") if p.strip()] + [None]:
        if piece and (p is None or n + len(p) > size):
            yield piece
            piece, n = [], 0
        if p is not None:
            piece.append(p)
            n += len(p)


def _conversations(corpus: Path, limit: int) -> Iterator[dict]:
    for text in _documents(corpus, limit):
        for piece in _pieces(text, 5000):
            if len(piece) == 1:  # one paragraph: its halves are the two turns
                piece = [piece[0][:len(piece[0]) // 2], piece[0][len(piece[0]) // 2:]]
            if len(piece) % 2:
                piece[-2:] = ["\n\n".join(piece[-2:])]
            if all(x.strip() for x in piece):
                roles = ("user", "assistant") * len(piece)
                yield {"messages": [{"role": r, "content": c} for r, c in zip(roles, piece)]}


def _summarization(corpus: Path, limit: int) -> Iterator[dict]:
    for text in _documents(corpus, limit):
        for piece in _pieces(text, 4000):
            if len(piece) >= 2:
                yield {"prompt": piece[0], "completion": "\n\n".join(piece[1:])}


def _dpo(corpus: Path, limit: int) -> Iterator[dict]:
    for text in _documents(corpus, limit):
        for piece in _pieces(text, 4000):
            if len(piece) >= 3:
                half = 1 + (len(piece) - 1) // 2
                yield {"prompt": piece[0], "chosen": "\n\n".join(piece[1:half]),
                       "rejected": "\n\n".join(piece[half:])}


def prepare(kind: str, copies: int, corpus: Path, work: Path, args) -> Path:
    """The input directory of a kind of setting: its file (made once) under `copies` names."""
    directory = work / f"{kind}_x{copies}"
    if directory.exists():
        return directory
    if kind == "text":
        source = corpus
    else:
        source = work / f"{kind}.jsonl"
        if not source.exists():
            records = {"chat": lambda: _conversations(corpus, args.chat_bytes),
                       "summarization": lambda: _summarization(corpus, 0),
                       "dpo": lambda: _dpo(corpus, args.dpo_bytes)}[kind]()
            with open(source, "w", encoding="utf-8") as f:
                for record in records:
                    f.write(json.dumps(record) + "\n")
    directory.mkdir()
    for i in range(copies):
        os.symlink(source, directory / f"{i}_{source.name}")
    return directory


# ------------------------------------------------------------------------------------------------ a run


def record_frames(command: list[str]) -> tuple[list, float, int]:
    """Run `command` with stderr on a pseudo-terminal: (frames (time, %, elapsed, eta or None), seconds, code)."""
    controller, terminal = pty.openpty()
    # A pseudo-terminal starts 0 columns wide, where tqdm draws nothing.
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    started = time.time()
    proc = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=terminal)
    os.close(terminal)
    frames, buffer = [], b""
    while True:
        ready, _, _ = select.select([controller], [], [], 0.05)
        if ready:
            try:
                data = os.read(controller, 65536)
            except OSError:
                data = b""
            if not data and proc.poll() is not None:
                break
            buffer += data
            *lines, buffer = re.split(rb"[\r\n]", buffer)
            now = time.time() - started
            for text in lines:
                m = _FRAME.search(text.decode("utf-8", "replace"))
                if m:
                    eta = _seconds(m[4], m[5]) if m[4] else None
                    frames.append((now, int(m[1]), _seconds(m[2], m[3]), eta))
        elif proc.poll() is not None:
            break
    proc.wait()
    os.close(controller)
    return frames, time.time() - started, proc.returncode


def eta_errors(frames: list, full: float, ended: float) -> dict:
    """Each counted frame's error against the time left to the bar's 100% (`full`) and to the exit (`ended`),
    and the frame of the worst against `full`."""
    to_full, to_exit, worst = [], [], None
    for t, pct, _, eta in frames:
        if pct < 10 or pct >= 100 or t < 0.1 * ended:
            continue
        for errors, end in ((to_full, full), (to_exit, ended)):
            left = end - t
            errors.append(1.0 if eta is None else max(abs(eta - left) - 1, 0) / max(left, 1))
        if worst is None or to_full[-1] > worst[0]:
            worst = (to_full[-1], t, pct, eta, full - t)
    return {"to_full": to_full, "to_exit": to_exit, "worst": worst}


def run_setting(name: str, work: Path, args) -> dict:
    mode, kind, copies, tokenizer, flags = SETTINGS[name]
    out = work / f"out_{name}"
    inputs = prepare(kind, args.copies or copies, args.corpus, work, args)
    command = [sys.executable, "-m", "pipelines.create_hdf5_dataset", mode,
               "--input_dir", str(inputs), "--output_dir", str(out), *tokenizer,
               "--max_seq_length", "2048", *flags, *args.extra]
    unit = _unit()
    frames, ended, code = record_frames(command)
    if code:
        raise SystemExit(f"{name}: the command exited with {code}: {' '.join(command)}")
    prior = _prior_over_measured(json.loads((out / "data_params.json").read_text()), unit, kind, mode)
    shutil.rmtree(out, ignore_errors=True)
    full = next((t for t, pct, _, _ in frames if pct >= 100), ended)
    errors = eta_errors(frames, full, ended)
    if args.frames:
        print(f"\n{name}: {len(frames)} frames; the bar reached 100% at {full:.1f} s, the command exited at "
              f"{ended:.1f} s")
        print(f"{'time':>6} {'%':>4} {'elapsed':>8} {'eta':>5} {'left to 100%':>13} {'left to exit':>13}")
        for t, pct, elapsed, eta in frames:
            print(f"{t:6.1f} {pct:4d} {elapsed:8d} {'?' if eta is None else eta:>5} {full - t:13.1f} {ended - t:13.1f}")
    return {"seconds": ended, "full": full, "frames": len(frames), "prior": prior, **errors}


def _unit() -> dict:
    """What the bar's priors are in units of, per row width: this machine's time now to compress a position of
    rows that wide with the default compressor, as the encoder does (as the job times it when its graph is
    built)."""
    from transforms.io.compressors import DEFAULT_COMPRESSOR, Codec
    from transforms.io.progress import seconds_per_position

    return {features: seconds_per_position(Codec(DEFAULT_COMPRESSOR, 4), features) for features in (3, 5, 6)}


def _prior_over_measured(params: dict, unit: dict, kind: str, mode: str) -> float:
    """The time the bar assumed for pack and encode before they measured their own (ROWS_COST per position of
    the rows to come), over the time they took (the job's run.stage_seconds): how good a prior ROWS_COST is on
    this machine."""
    from transforms.io.progress import ROWS_COST

    stages = params.get("run", {}).get("stage_seconds", {})
    chat = kind in ("chat", "dpo")
    if chat:  # the chat stage tells the bar its rows' positions, padding included, once they are laid out
        positions = params["post-process"]["n_examples"] * params["processing"]["max_seq_length"]
    else:  # the text modes: the tokens produced
        outputs = params.get("outputs") or [params]
        positions = sum(o.get("h5_dataset_stats", {}).get("non_pad_tokens", 0) for o in outputs) or \
            sum(o.get("loss_valid_tokens", 0) for o in outputs)
    features = len(params.get("features", [])) or 3
    assumed = (ROWS_COST["encode"] + (0 if chat else ROWS_COST["pack"])) * unit[features] * positions
    took = stages.get("encode", 0) + (0 if chat else stages.get("pack", 0))
    return assumed / took if took else float("nan")


def _cell(errors: list, how) -> str:
    return f"{how(errors):.0%}" if errors else "-"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", default=",".join(SETTINGS), help=f"some of {', '.join(SETTINGS)}")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--copies", type=int, help="copies of every setting's input (default: the setting's own)")
    parser.add_argument("--chat-bytes", type=int, default=44_000_000,
                        help="bytes of the corpus's lines made into conversations")
    parser.add_argument("--dpo-bytes", type=int, default=32_000_000,
                        help="bytes of the corpus's lines made into DPO records")
    parser.add_argument("--frames", action="store_true", help="print every frame of every run")
    parser.add_argument("extra", nargs="*", help="more flags for every run")
    args = parser.parse_args(argv)
    names = args.settings.split(",")
    unknown = [n for n in names if n not in SETTINGS]
    if unknown:
        parser.error(f"unknown settings: {', '.join(unknown)}")
    if not args.corpus.exists():
        print(f"corpus {args.corpus} not found (it lives in ../shared/corpora/bench)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="progress_eta_"))
    load = os.getloadavg()
    try:
        results = {}
        for name in names:
            results[name] = run_setting(name, work, args)
            r = results[name]
            w = r["worst"]
            where = f" (at {w[1]:.1f} s, {w[2]}%: ETA {w[3]} s, {w[4]:.1f} s left)" if w else ""
            print(f"{name}: {r['seconds']:.1f} s, worst {_cell(r['to_full'], max)}{where}", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nETA error after the first 10% of the run ({os.cpu_count()} cores; load average "
          f"{load[0]:.2f} before, {os.getloadavg()[0]:.2f} after)\n")
    print("| setting | run s | bar 100% at s | worst error | median error | worst error to exit | frames "
          "| rows prior / measured |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        print(f"| {name} | {r['seconds']:.1f} | {r['full']:.1f} | {_cell(r['to_full'], max)} | "
              f"{_cell(r['to_full'], statistics.median)} | {_cell(r['to_exit'], max)} | {r['frames']} | "
              f"{r['prior']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
