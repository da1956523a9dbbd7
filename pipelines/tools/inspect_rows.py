"""`create_hdf5_dataset inspect OUT [--file F] [--row N] [--ids]`: look into one row.

A row is shown as its text, seen as targets: the tokens the model is not
trained to predict [bracketed] (dimmed on a terminal), special tokens as
⟨NAME⟩, VSL rows document by document and DPO rows as a prompt and two
responses (`render_row`); with `--ids`, one line per position.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Callable, Optional

import numpy as np

from pipelines.tools.common import UsageError, add_tokenizer_flags, basename, doc_word, load_params, require_dir, \
    tokenizer_flags
from transforms.core import verify as V
from transforms.core.modes import TURNS
from transforms.core.features import ATTENTION_MASK, ATTENTION_SPAN, INPUT_IDS, LABELS, POSITION_IDS, VSL_FEATURES
from transforms.io import fs
from transforms.io.dataset import list_h5_files, open_dataset_tokenizer, open_h5

__all__ = ["inspect_row", "render_row", "special_names", "add_parser", "run"]

_DIM, _UNDIM = "\x1b[2m", "\x1b[22m"
_CYAN, _DEFAULT_FG = "\x1b[36m", "\x1b[39m"


def special_names(params: Optional[dict], tok) -> dict[int, str]:
    """id -> short name of the tokens inspect makes visible (EOS wins when ids coincide)."""
    post = (params or {}).get("post-process") or {}
    proc = (params or {}).get("processing") or {}
    recorded = (params or {}).get("tokenizer") or {}
    names: dict[int, str] = {}

    def put(tid, name):
        if isinstance(tid, int) and tid not in names:
            names[tid] = name

    eos = tok.eos_id if tok is not None else post.get("eos_id")
    pad = tok.pad_id if tok is not None else post.get("pad_id")
    put(eos, "EOS")
    put(pad, "PAD")
    put(tok.bos_id if tok is not None else recorded.get("bos_id"), "BOS")
    put(tok.sep_id if tok is not None else recorded.get("sep_id"), "SEP")
    if tok is not None:
        for key, name in (("fim_prefix_tok", "PRE"), ("fim_middle_tok", "MID"), ("fim_suffix_tok", "SUF")):
            if proc.get(key):
                put(tok.token_to_id(proc[key]), name)
    return names


def _is_vsl_row(row: np.ndarray, spec: V.DatasetSpec) -> bool:
    """Whether a [F, msl] row holds VSL documents: 5 features, named as VSL's (or not named at all)."""
    return row.shape[0] == len(VSL_FEATURES) and (spec.features is None or spec.feature_names == VSL_FEATURES)


def _is_dpo_row(row: np.ndarray, spec: V.DatasetSpec) -> bool:
    """Whether a [F, msl] row holds DPO's two sides (chosen, rejected)."""
    return len(spec.sides) > 1 and row.shape[0] == 3 * len(spec.sides)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _documents(row: np.ndarray, real: int) -> list[tuple[int, int]]:
    """A VSL row's documents as [start, end) position ranges of its real part: one starts at each
    position_ids 0 (and at position 0 whatever it holds)."""
    starts = [0] + [int(i) for i in np.flatnonzero(row[POSITION_IDS, 1:real] == 0) + 1] if real else []
    return list(zip(starts, starts[1:] + [real]))


def _render_tokens(tokens: list[int], trained: list[bool], decode: Callable[[list[int]], str],
                   specials: dict[int, str], color: bool) -> str:
    """Tokens as text: runs of untrained ones [bracketed] (dimmed with color), specials ⟨NAME⟩, a line
    break after each EOS."""

    def span(ids: list[int]) -> str:
        out, run = [], []
        for t in ids:
            if t in specials:
                if run:
                    out.append(decode(run))
                    run = []
                marker = f"⟨{specials[t]}⟩"
                out.append(f"{_CYAN}{marker}{_DEFAULT_FG}" if color else marker)
                if specials[t] == "EOS":
                    out.append("\n")
            else:
                run.append(t)
        if run:
            out.append(decode(run))
        return "".join(out)

    parts, i = [], 0
    while i < len(tokens):
        j = i
        while j < len(tokens) and trained[j] == trained[i]:
            j += 1
        text = span(tokens[i:j])
        if not trained[i]:
            body = text.rstrip("\n")
            text = (f"{_DIM}{body}{_UNDIM}" if color else f"[{body}]") + text[len(body):]
        parts.append(text)
        i = j
    return "".join(parts)


def _document_header(k: int, count: int, start: int, end: int, trained: int, word: str = "document") -> str:
    return f"── {word} {k}/{count} · positions {start}–{end - 1} · {end - start} positions, {trained} trained"


def _positions(start: int, end: int) -> str:
    return f"positions {start}–{end - 1}" if end > start else "no positions"


@dataclasses.dataclass(frozen=True)
class _DpoSide:
    """One side of a DPO row as inspect shows it: |P| (first trained position + 1), |S| (real inputs)."""

    name: str
    seq: np.ndarray  # [3, msl]
    loss: np.ndarray  # [msl] bool
    prompt: int
    real: int

    @classmethod
    def of(cls, row: np.ndarray, spec: V.DatasetSpec) -> list["_DpoSide"]:
        out = []
        for name, seq in zip(spec.sides, V.sequences(row[None], spec)):
            loss = seq[ATTENTION_MASK] == spec.loss_value
            prompt = int(np.argmax(loss)) + 1 if loss.any() else 0
            out.append(cls(name, seq, loss, prompt, int(V.real_lengths(seq[None], spec)[0])))
        return out

    @property
    def trained(self) -> int:
        return int(self.loss.sum())


def _same_prompt(sides: list[_DpoSide]) -> bool:
    first = sides[0]
    return all(s.prompt == first.prompt and np.array_equal(s.seq[INPUT_IDS, :s.prompt],
                                                           first.seq[INPUT_IDS, :first.prompt]) for s in sides)


def _render_dpo(row: np.ndarray, spec: V.DatasetSpec, decode: Callable[[list[int]], str], specials: dict[int, str],
                color: bool) -> str:
    """A DPO row: the prompt once (each side's when they differ), then each side's response, its tokens marked
    as targets like any row's (a response token is trained when it is the label of a trained position)."""
    msl = row.shape[1]
    sides = _DpoSide.of(row, spec)
    shared = _same_prompt(sides)
    lines = []

    def prompt(side: _DpoSide, title: str) -> None:
        lines.append(f"── {title} · {_positions(0, side.prompt)} · {_plural(side.prompt, 'token')}")
        tokens = side.seq[INPUT_IDS, :side.prompt].tolist()
        lines.append(_render_tokens(tokens, [False] * len(tokens), decode, specials, color).rstrip("\n"))

    if shared:
        prompt(sides[0], "prompt")
    for side in sides:
        if not shared:
            prompt(side, f"{side.name} prompt")
        start = max(side.prompt, 1)  # a response token is the label of the position before it
        tokens = side.seq[INPUT_IDS, start:side.real].tolist()
        trained = side.loss[start - 1:side.real - 1].tolist()
        lines.append(f"── {side.name} · {_positions(start, side.real)} · {_plural(len(tokens), 'token')}, "
                     f"{side.trained} trained")
        lines.append(_render_tokens(tokens, trained, decode, specials, color).rstrip("\n"))
        if side.real < msl:
            lines.append(f"… {msl - side.real} pad")
    return "\n".join(lines)


def render_row(row: np.ndarray, spec: V.DatasetSpec, decode: Callable[[list[int]], str],
               specials: dict[int, str], *, color: bool = False) -> str:
    """One row's real tokens as text, seen as targets: a token the model is not trained to predict
    (its position's mask excludes it, or it is the row's first token) is [bracketed] (dimmed with
    color); specials are ⟨NAME⟩, each EOS ends a line, trailing padding is summarized.

    The tokens are the real inputs, plus for LMData and Chat the last real label (the stream's next
    token, the conversation's last one). A VSL row is shown document by document (Chat_VSL: conversation),
    each under a `── document k/m` line: its inputs plus its last label (the document's last token, never
    an input), its first token bracketed. A DPO row is shown as its prompt under `── prompt`, then each
    side's response under `── chosen` and `── rejected` (see `_render_dpo`).
    """
    if _is_dpo_row(row, spec):
        return _render_dpo(row, spec, decode, specials, color)
    msl = row.shape[1]
    real = int(V.real_lengths(row[None], spec)[0])
    loss = row[ATTENTION_MASK] == spec.loss_value
    if _is_vsl_row(row, spec):
        docs = _documents(row, real)
        lines = []
        for k, (s, e) in enumerate(docs, 1):
            tokens = row[INPUT_IDS, s:e].tolist() + [int(row[LABELS, e - 1])]
            trained = [False] + loss[s:e].tolist()
            lines.append(_document_header(k, len(docs), s, e, int(loss[s:e].sum()), doc_word(spec)))
            lines.append(_render_tokens(tokens, trained, decode, specials, color).rstrip("\n"))
        if real < msl:
            lines.append(f"… {msl - real} pad")
        return "\n".join(lines)
    tokens = row[INPUT_IDS, :real].tolist()
    if real and spec.traits is not None and not spec.vsl and not spec.trailing_eos_input:
        # The last real input's label is the next token (LMData: the next window's first; Chat: the template's).
        tokens.append(int(row[LABELS, real - 1]))
    # tokens[k] (k >= 1) is the label of position k - 1.
    trained = [False] + [bool(loss[k - 1]) for k in range(1, len(tokens))]
    out = _render_tokens(tokens, trained, decode, specials, color)
    if real < msl:
        out += ("" if out.endswith("\n") else "\n") + f"… {msl - real} pad"
    return out


def _resolve_file(out_dir: str, file: Optional[str]) -> str:
    files = list_h5_files(out_dir)
    if file is None:
        if not files:
            raise UsageError(f"no .h5 files in {out_dir}")
        return files[0]
    for path in files:
        if basename(path) == file or path == file:
            return path
    if fs.is_local(file) and os.path.isfile(file):
        return file
    raise UsageError(f"no file {file!r} in {out_dir} (files: {', '.join(basename(p) for p in files[:5])}"
                     f"{', …' if len(files) > 5 else ''})")


def inspect_row(out_dir: str, *, file: Optional[str] = None, row: int = 0, color: bool = False, ids: bool = False,
                **tokenizer) -> str:
    """The text `inspect` prints for one row."""
    require_dir(out_dir)
    params, _ = load_params(out_dir)
    spec, _ = V.dataset_spec(params)
    path = _resolve_file(out_dir, file)
    with open_h5(path) as f:
        data = f["data"]
        n = data.shape[0]
        if not -n <= row < n:
            raise UsageError(f"row {row} is out of range: {basename(path)} holds {n} rows")
        row = row % n
        r = np.asarray(data[row], dtype=np.int64)
    tok, how = open_dataset_tokenizer(out_dir, params, **tokenizer)
    specials = special_names(params, tok)
    if tok is not None:
        decode = lambda t: tok.decode(t)  # noqa: E731
    else:
        decode = lambda t: " ".join(map(str, t)) + " "  # noqa: E731
    msl = r.shape[1]
    mode = spec.mode or "unknown mode"
    title = f"{basename(path)} row {row} of {n} · {mode}" + (" (reference output)" if spec.producer == V.REFERENCE
                                                              else "")
    legend = ("legend: " + ("dimmed" if color else "[…]") + " = tokens the model is not trained to predict; "
              + " ".join(f"⟨{s}⟩" for s in dict.fromkeys(specials.values())) + " = special tokens")
    shown = lambda t: specials.get(t) and f"⟨{specials[t]}⟩" or repr(decode([t]))  # noqa: E731
    table = f"{'pos':>5} {'input':>7} {'token':<24} {'mask':>4} {'label':>7} token"

    def id_line(seq: np.ndarray, p: int, extra: str = "") -> str:
        return (f"{p:>5} {seq[INPUT_IDS, p]:>7} {shown(int(seq[INPUT_IDS, p])):<24} {seq[ATTENTION_MASK, p]:>4} "
                f"{extra}{seq[LABELS, p]:>7} {shown(int(seq[LABELS, p]))}")

    if _is_dpo_row(r, spec):
        sides = _DpoSide.of(r, spec)
        prompt = (f"prompt {_plural(sides[0].prompt, 'token')}" if _same_prompt(sides) else
                  "the prompts differ (" + ", ".join(f"{s.name} {s.prompt}" for s in sides) + " tokens)")
        lines = [f"{title} · {msl} positions per side, {prompt}"
                 + "".join(f"; {s.name}: {s.real} real, {s.trained} trained, {msl - s.real} pad" for s in sides),
                 legend + "; ── prompt, then ── " + " and ── ".join(spec.sides) + " = each side's response "
                 "(its inputs after the prompt)"]
    else:
        real = int(V.real_lengths(r[None], spec)[0])
        trained = int((r[ATTENTION_MASK] == spec.loss_value).sum())
        vsl = _is_vsl_row(r, spec)
        word = doc_word(spec)
        if vsl:
            docs = _documents(r, real)
            what = _plural(len(docs), word)
        elif spec.loss == TURNS:
            what = _plural(int(V.trained_runs(r[None], spec)[0]), "trained span")
        else:
            eos_spec = dataclasses.replace(spec, eos_id=tok.eos_id if tok else spec.eos_id)
            what = f"{int(V.documents_per_row(r[None], eos_spec)[0])} EOS"
        lines = [f"{title} · {msl} positions: {real} real, {trained} trained, {msl - real} pad, {what}",
                 legend + (f"; ── {word} k/m = a {word} starts (position_ids 0)" if vsl else "")]
    if tok is None:
        lines.append(f"(ids shown, {how})")
    lines.append("─" * 60)
    if not ids:
        lines.append(render_row(r, spec, decode, specials, color=color))
    elif _is_dpo_row(r, spec):
        for side in sides:
            lines.append(f"── {side.name} · {side.real} real, {side.trained} trained")
            lines.append(table)
            lines += [id_line(side.seq, p) for p in range(side.real)]
            if side.real < msl:
                lines.append(f"… {msl - side.real} pad")
    else:
        if vsl:
            lines.append(f"{'pos':>5} {'input':>7} {'token':<24} {'mask':>4} {'span':>5} {'pos_id':>6} "
                         f"{'label':>7} token")
            first = {s: (k, s, e) for k, (s, e) in enumerate(docs, 1)}
        else:
            lines.append(table)
        for p in range(real):
            if vsl and p in first:
                k, s, e = first[p]
                lines.append(_document_header(k, len(docs), s, e, int((r[ATTENTION_MASK, s:e] == spec.loss_value)
                                                                      .sum()), word))
            lines.append(id_line(r, p, f"{r[ATTENTION_SPAN, p]:>5} {r[POSITION_IDS, p]:>6} " if vsl else ""))
        if real < msl:
            lines.append(f"… {msl - real} pad")
    return "\n".join(lines)


def add_parser(sub) -> None:
    """`inspect` and its flags, as a subcommand of the tools' parser."""
    i = sub.add_parser("inspect", help="print one row decoded, with the mask and special tokens visible")
    i.add_argument("out_dir")
    i.add_argument("--file", help="file name in OUT (default: the first)")
    i.add_argument("--row", type=int, default=0, help="row index in the file (negative counts from the end)")
    i.add_argument("--ids", action="store_true", help="one line per position: ids, tokens, mask, labels")
    i.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="dim untrained positions with ANSI codes (auto: when stdout is a terminal)")
    add_tokenizer_flags(i)


def run(args: argparse.Namespace) -> int:
    """Print the row (`inspect_row`), dimmed when stdout is a terminal unless --color says otherwise; 0."""
    color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
    print(inspect_row(args.out_dir, file=args.file, row=args.row, color=color, ids=args.ids,
                      **tokenizer_flags(args)))
    return 0
