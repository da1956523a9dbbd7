"""How far the progress bar's ETA is from the truth: `make progress-eta`.

Runs the real command on the bench corpus in a pseudo-terminal (where the bar
is drawn), records every frame of the bar with the time it was drawn, and
compares, from the first frame past 10% on, the ETA the bar showed with the
time the bar really had left (until it reached 100%) and the time the command
really had left (until it exited). Prints a line per frame and the worst
errors.

    python benchmarks/progress_eta.py [--corpus PATH.jsonl.zst] [-- extra flags]
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import re
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = ROOT.parent / "shared" / "corpora" / "bench" / "en_natural.jsonl.zst"
GPT2 = ROOT / "data" / "tokenizers" / "gpt2"
# tqdm: "tokenizing:  45%|####5     | 41.2M/91.5M [00:03<00:04, 12.3MB/s, docs 7,120 · ...]"
_FRAME = re.compile(r"(\d+)%\|.*?\[(\d+):(\d+)<(?:(\d+):(\d+)|\?)")


def _seconds(m: str, s: str) -> int:
    return int(m) * 60 + int(s)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("extra", nargs="*", help="more flags for the command")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="progress_eta_"))
    try:
        (work / "in").mkdir()
        os.symlink(args.corpus, work / "in" / args.corpus.name)
        command = [sys.executable, "-m", "pipelines.create_hdf5_dataset", "LMData", "--input_dir", str(work / "in"),
                   "--output_dir", str(work / "out"), "--tokenizer_type", "GPT2Tokenizer",
                   "--vocab_file", str(GPT2 / "vocab.bpe"), "--encoder_file", str(GPT2 / "encoder.json"),
                   "--max_seq_length", "2048", *args.extra]
        controller, terminal = pty.openpty()
        # A pseudo-terminal starts 0 columns wide, where tqdm draws nothing.
        fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
        started = time.time()
        proc = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=terminal)
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
                *done, buffer = re.split(rb"[\r\n]", buffer)
                now = time.time() - started
                for text in done:
                    m = _FRAME.search(text.decode("utf-8", "replace"))
                    if m:
                        eta = _seconds(m[4], m[5]) if m[4] else None
                        frames.append((now, int(m[1]), _seconds(m[2], m[3]), eta))
            elif proc.poll() is not None:
                break
        proc.wait()
        ended = time.time() - started
        os.close(controller)
        if proc.returncode:
            print(f"the command exited with {proc.returncode}", file=sys.stderr)
            return 1
        full = next((t for t, pct, _, _ in frames if pct >= 100), ended)
        print(f"{len(frames)} frames; the bar reached 100% at {full:.1f} s, the command exited at {ended:.1f} s")
        print(f"{'time':>6} {'%':>4} {'elapsed':>8} {'eta':>5} {'left to 100%':>13} {'left to exit':>13}")
        worst_bar = worst_exit = 0.0
        for t, pct, elapsed, eta in frames:
            left_bar, left_exit = full - t, ended - t
            print(f"{t:6.1f} {pct:4d} {elapsed:8d} {'?' if eta is None else eta:>5} {left_bar:13.1f} {left_exit:13.1f}")
            if pct >= 10 and pct < 100 and eta is not None:
                # The bar shows whole seconds: an ETA within a second of the truth is as right as it can be.
                worst_bar = max(worst_bar, max(abs(eta - left_bar) - 1, 0) / max(left_bar, 1))
                worst_exit = max(worst_exit, max(abs(eta - left_exit) - 1, 0) / max(left_exit, 1))
        print(f"worst ETA error after 10%, beyond the display's 1 s: {worst_bar:.0%} of the time left to 100%, "
              f"{worst_exit:.0%} of the time left to the command's exit")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
