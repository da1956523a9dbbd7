"""`create_hdf5_dataset verify|inspect|report OUT ...`: trust the output, look into it, see it.

    create_hdf5_dataset verify OUT [--vocab_size V] [--max_seq_length L]
    create_hdf5_dataset inspect OUT [--file F] [--row N] [--ids] [--tokenizer_type T ...]
    create_hdf5_dataset report OUT [--output PATH]

Also a library: `verify_dataset`, `inspect_row`, `build_report`. The checks
themselves are pure (`transforms.core.verify`); file access goes through
`transforms.io.dataset`; this module wires them and owns the flags.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import html
import io
import json
import os
import sys
from collections import Counter
from typing import Callable, Optional

import fsspec
import numpy as np

from transforms.core import verify as V
from transforms.core.features import (ATTENTION_MASK, ATTENTION_SPAN, INPUT_IDS, LABELS, POSITION_IDS,
                                      VSL_FEATURES)
from transforms.core.stats import check_accounting
from transforms.io import fs
from transforms.io.dataset import (PARAMS_FILE, file_layout, iter_row_blocks, list_h5_files, open_dataset_params,
                                   open_dataset_tokenizer, open_h5)

__all__ = ["main", "verify_dataset", "VerifyResult", "inspect_row", "build_report", "write_report", "render_row"]

_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
_TOKENIZER_FLAGS = ("tokenizer_type", "vocab_file", "encoder_file", "huggingface_tokenizer")


class UsageError(Exception):
    """Bad arguments or a missing directory: exit status 2."""


def _basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1].rsplit(os.sep, 1)[-1]


def _require_dir(out_dir: str) -> None:
    if fs.is_local(out_dir):
        if not os.path.isdir(out_dir[len("file://"):] if out_dir.startswith("file://") else out_dir):
            raise UsageError(f"no such directory: {out_dir}")
        return
    fsys, path = fsspec.core.url_to_fs(out_dir)
    if not fsys.isdir(path):
        raise UsageError(f"no such directory: {out_dir}")


def _load_params(out_dir: str) -> tuple[Optional[dict], Optional[str]]:
    """(params, None) or (None, the problem)."""
    try:
        return open_dataset_params(out_dir), None
    except FileNotFoundError:
        return None, "missing: it is written last, so the dataset is incomplete"
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        return None, f"is not valid JSON ({e})"


# ------------------------------------------------------------------------ verify


@dataclasses.dataclass
class VerifyResult:
    """Problems (each naming its file) and notes of one `verify` run."""

    out_dir: str
    problems: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)
    files: int = 0
    rows: int = 0
    mode: Optional[str] = None
    producer: str = V.OURS

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        what = f"{self.files} files, {self.rows} sequences"
        if self.mode:
            what += f", {self.mode}" + (" (reference output)" if self.producer == V.REFERENCE else "")
        if self.ok:
            return f"verify {self.out_dir}: OK: {what}; every check passed ({len(self.notes)} notes)"
        return f"verify {self.out_dir}: FAILED: {len(self.problems)} problems ({what}; {len(self.notes)} notes)"

    def lines(self) -> list[str]:
        return list(self.problems) + [f"note: {n}" for n in self.notes] + [self.summary()]


def _stray_hdf5(out_dir: str) -> list[str]:
    """Names of HDF5 files in out_dir that the dataloader skips because they do not end in .h5 (local only)."""
    if not fs.is_local(out_dir):
        return []
    out = []
    for name in fs.listdir_names(out_dir):
        path = os.path.join(out_dir, name)
        if name.endswith(".h5") or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            if f.read(8) == _HDF5_MAGIC:
                out.append(name)
    return out


def verify_dataset(out_dir: str, *, vocab_size: Optional[int] = None, max_seq_length: Optional[int] = None,
                   **tokenizer: Optional[str]) -> VerifyResult:
    """Check every .h5 file and data_params.json of out_dir; see `transforms.core.verify`.

    `vocab_size` / `max_seq_length`: the model's; by default data_params.json's.
    `tokenizer`: tokenizer flags overriding data_params.json's (for detokenized_* counts).
    """
    _require_dir(out_dir)
    res = VerifyResult(out_dir)
    params, params_problem = _load_params(out_dir)
    if params_problem:
        res.problems.append(f"{PARAMS_FILE}: {params_problem}")
    if params is not None and "outputs" in params:
        return _verify_split_job(out_dir, params, vocab_size=vocab_size, max_seq_length=max_seq_length, **tokenizer)
    spec, notes = V.dataset_spec(params)
    res.notes += notes
    res.mode, res.producer = spec.mode, spec.producer
    vocab = vocab_size if vocab_size is not None else spec.vocab_size
    if vocab is None:
        res.notes.append("no vocabulary size (no --vocab_size, none in data_params.json): ids only checked >= 0")

    tok, tok_how = (None, "no data_params.json")
    if params is not None:
        tok, tok_how = open_dataset_tokenizer(out_dir, params, **tokenizer)
    want_detok = isinstance((params or {}).get("h5_dataset_stats"), dict)
    detok_note = ""
    if want_detok and tok is not None:
        recorded = (params.get("tokenizer") or {}).get("fingerprint")
        if recorded and recorded != tok.fingerprint():
            detok_note = f"the tokenizer found ({tok_how}) differs from the one the dataset was built with"
            want_detok = False
    elif want_detok:
        detok_note = "the tokenizer could not be rebuilt (see below)"
        want_detok = False

    for name in _stray_hdf5(out_dir):
        res.problems.append(f"{name}: an HDF5 file not named *.h5: the Cerebras dataloader will not read it")
    files = list_h5_files(out_dir)
    if not files:
        res.problems.append(f"{out_dir}: no .h5 files")
    counts: Counter = Counter()
    detok: Counter = Counter()
    file_rows: dict[str, int] = {}
    msls: list[int] = []
    layout_msl = max_seq_length if max_seq_length is not None else spec.max_seq_length
    for path in files:
        name = _basename(path)
        try:
            with open_h5(path) as f:
                layout = file_layout(f, name)
                problems, file_notes = V.check_layout(layout, layout_msl, spec.feature_names)
                res.problems += [f"{name}: {p}" for p in problems]
                res.notes += [f"{name}: {n}" for n in file_notes]
                shape = tuple(layout.shape or ())
                if "data" not in layout.datasets or len(shape) != 3 or shape[1] != spec.num_features:
                    continue
                file_rows[name] = shape[0]
                msls.append(shape[2])
                checker = V.RowChecker(spec, vocab)
                for start, block in iter_row_blocks(f["data"]):
                    block = np.asarray(block, dtype=np.int64)  # any stored dtype compares safely
                    checker.add(block, start)
                    counts.update(V.count_rows(block, spec))
                    if want_detok:
                        detok.update(V.text_counts(tok.decode_batch(V.detokenized_inputs(block, spec))))
                res.problems += [f"{name}: {p}" for p in checker.problems()]
                res.notes += [f"{name}: {n}" for n in checker.notes()]
        except OSError as e:
            res.problems.append(f"{name}: cannot be read as HDF5 ({e})")
    res.files = len(files)
    res.rows = sum(file_rows.values())

    if params is not None:
        problems, stat_notes = V.check_stats(params, counts, spec, file_rows=file_rows,
                                             detokenized=detok if want_detok else None, detokenized_note=detok_note)
        res.problems += [f"{PARAMS_FILE}: {p}" for p in problems]
        res.notes += stat_notes
        problems, cfg_notes = V.check_config(params, spec, file_msls=msls, vocab_flag=vocab_size,
                                             msl_flag=max_seq_length,
                                             tokenizer_vocab=tok.vocab_size if tok is not None else None)
        res.problems += [f"{PARAMS_FILE}: {p}" for p in problems]
        res.notes += cfg_notes
        if tok is None:
            res.notes.append(f"tokenizer not rebuilt: {tok_how}")
    elif max_seq_length is None and len(set(msls)) > 1:
        res.problems.append(f"{out_dir}: files hold rows of different lengths: {sorted(set(msls))}")
    return res


def _verify_split_job(out_dir: str, summary: dict, **flags) -> VerifyResult:
    """A split job's directory: every output verified as the dataset it is, and the summary against them."""
    res = VerifyResult(out_dir, mode=summary.get("setup", {}).get("mode"))
    documents = 0
    for entry in summary["outputs"]:
        path = fs.join(out_dir, entry["path"])
        try:
            one = verify_dataset(path, **flags)
        except UsageError as e:
            res.problems.append(f"{entry['path']}: {e}")
            continue
        res.problems += [f"{entry['path']}/{p}" for p in one.problems]
        res.notes += [f"{entry['path']}/{n}" for n in one.notes]
        res.files += one.files
        res.rows += one.rows
        if one.rows != entry["sequences"]:
            res.problems.append(f"{PARAMS_FILE}: {entry['path']} holds {one.rows} sequences, the summary says "
                                f"{entry['sequences']}")
        params, _ = _load_params(path)
        if params is not None:
            documents += params["input"]["documents_read"]
            if params.get("config_fingerprint") != summary.get("config_fingerprint"):
                res.problems.append(f"{entry['path']}/{PARAMS_FILE}: written by another configuration "
                                    f"({params.get('config_fingerprint')}, the job's {summary.get('config_fingerprint')})")
    inp = summary.get("input", {})
    res.problems += [f"{PARAMS_FILE}: {p}" for p in check_accounting(inp)] if inp else []
    if inp and documents != inp["good"]:
        res.problems.append(f"{PARAMS_FILE}: the outputs hold {documents} documents, the job read {inp['good']} "
                            "good ones")
    return res


# ----------------------------------------------------------------------- inspect


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


def _doc_word(spec: V.DatasetSpec) -> str:
    """What a VSL segment is: a conversation in Chat_VSL, a document elsewhere."""
    return "conversation" if spec.mode == V.CHAT_VSL else "document"


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
            lines.append(_document_header(k, len(docs), s, e, int(loss[s:e].sum()), _doc_word(spec)))
            lines.append(_render_tokens(tokens, trained, decode, specials, color).rstrip("\n"))
        if real < msl:
            lines.append(f"… {msl - real} pad")
        return "\n".join(lines)
    tokens = row[INPUT_IDS, :real].tolist()
    if spec.mode in (V.LMDATA, V.CHAT) and real:
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
        if _basename(path) == file or path == file:
            return path
    if fs.is_local(file) and os.path.isfile(file):
        return file
    raise UsageError(f"no file {file!r} in {out_dir} (files: {', '.join(_basename(p) for p in files[:5])}"
                     f"{', …' if len(files) > 5 else ''})")


def inspect_row(out_dir: str, *, file: Optional[str] = None, row: int = 0, color: bool = False, ids: bool = False,
                **tokenizer: Optional[str]) -> str:
    """The text `inspect` prints for one row."""
    _require_dir(out_dir)
    params, _ = _load_params(out_dir)
    spec, _ = V.dataset_spec(params)
    path = _resolve_file(out_dir, file)
    with open_h5(path) as f:
        data = f["data"]
        n = data.shape[0]
        if not -n <= row < n:
            raise UsageError(f"row {row} is out of range: {_basename(path)} holds {n} rows")
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
    title = f"{_basename(path)} row {row} of {n} · {mode}" + (" (reference output)" if spec.producer == V.REFERENCE
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
        word = _doc_word(spec)
        if vsl:
            docs = _documents(r, real)
            what = _plural(len(docs), word)
        elif spec.mode == V.CHAT:
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


# ------------------------------------------------------------------------ report


@dataclasses.dataclass
class ReportData:
    params: Optional[dict]
    spec: V.DatasetSpec
    file_rows: dict  # name -> rows
    real: np.ndarray  # [n, sides]: real tokens of each row's sequences (DPO: chosen, rejected; else one)
    trained: np.ndarray  # [n, sides]
    docs: np.ndarray  # per row: documents (VSL), trained spans (Chat), prompt tokens (DPO), else EOS tokens
    msl: int

    @property
    def sides(self) -> tuple:
        return self.spec.sides


def collect_report_data(out_dir: str) -> ReportData:
    params, _ = _load_params(out_dir)
    spec, _ = V.dataset_spec(params)
    k = len(spec.sides)
    file_rows: dict[str, int] = {}
    real, trained, docs = [], [], []
    msl = spec.max_seq_length or 0
    for path in list_h5_files(out_dir):
        with open_h5(path) as f:
            d = f["data"]
            file_rows[_basename(path)] = int(d.shape[0])
            msl = int(d.shape[2])
            for _, block in iter_row_blocks(d):
                block = np.asarray(block, dtype=np.int64)
                seqs = V.sequences(block, spec)  # DPO: row i's sides at k*i .. k*i + k-1
                real.append(V.real_lengths(seqs, spec).reshape(-1, k))
                loss = V.loss_positions(seqs, spec)
                trained.append(loss.sum(axis=1).reshape(-1, k))
                if k > 1:
                    docs.append(np.where(loss[::k].any(axis=1), np.argmax(loss[::k], axis=1) + 1, 0))
                elif spec.mode == V.CHAT:
                    docs.append(V.trained_runs(block, spec))
                else:
                    docs.append(V.documents_per_row(block, spec))
    cat = lambda xs, *shape: np.concatenate(xs) if xs else np.zeros((0, *shape), dtype=np.int64)  # noqa: E731
    return ReportData(params, spec, file_rows, cat(real, k), cat(trained, k), cat(docs), msl)


_SIDE_COLORS = ("#3b6ea5", "#c0504d")


def _figures(data: ReportData) -> list[tuple[str, str, str]]:
    """(title, caption, base64 PNG) of every plot. DPO: each per-sequence plot shows both sides, side by side."""
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend

    def png(fig) -> str:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
        return base64.b64encode(buf.getvalue()).decode("ascii")

    def hist(values: np.ndarray, xlabel: str, bins, color="#3b6ea5") -> tuple[str, str]:
        """(PNG, caption suffix): a log y axis when one bin dwarfs the rest (packed rows are mostly full).
        `values` [n] or, one column per side, [n, sides]."""
        fig = Figure(figsize=(7, 3.2))
        ax = fig.subplots()
        suffix = ""
        columns = values.ndim == 2 and values.shape[1] > 1
        if len(values):
            if columns:
                counts, _, _ = ax.hist([values[:, i] for i in range(values.shape[1])], bins=bins,
                                       color=list(_SIDE_COLORS[:values.shape[1]]), label=list(data.sides),
                                       edgecolor="white", linewidth=0.3)
                counts = np.asarray(counts).ravel()
                ax.legend(fontsize=8)
            else:
                counts, _, _ = ax.hist(values.ravel(), bins=bins, color=color, edgecolor="white", linewidth=0.3)
            nonzero = np.sort(counts[counts > 0])
            if len(nonzero) > 1 and nonzero[-1] > 0.9 * len(values):
                ax.set_yscale("log")
                suffix = " Log scale: one value dominates."
        else:
            ax.text(0.5, 0.5, "no rows", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("sequences")
        ax.grid(axis="y", alpha=0.3)
        return png(fig), suffix

    def int_bins(values: np.ndarray):
        """Unit-wide bins centred on integers (wider past 64 values), the last holding the maximum."""
        hi = int(values.max()) if values.size else 1
        step = max(1, -(-(hi + 1) // 64))
        return np.arange(-0.5, hi + step + 0.5, step)

    def stats1(values: np.ndarray, fmt) -> str:
        if not len(values):
            return "no rows"
        return (f"mean {fmt.format(values.mean())}, median {fmt.format(np.median(values))}, "
                f"min {fmt.format(values.min())}, max {fmt.format(values.max())}")

    def stats(values: np.ndarray, fmt="{:.0f}") -> str:
        """Of one series, or per side ("chosen: mean …; rejected: mean …")."""
        if values.ndim == 2 and values.shape[1] > 1:
            return "; ".join(f"{name}: {stats1(values[:, i], fmt)}" for i, name in enumerate(data.sides))
        return stats1(values.ravel(), fmt)

    def plot(title: str, caption: str, made: tuple[str, str]) -> tuple[str, str, str]:
        return title, caption + made[1], made[0]

    msl = max(data.msl, 1)
    dpo = len(data.sides) > 1
    per = "per side" if dpo else "per sequence"
    both = f"Both sides of every row ({' and '.join(data.sides)}). " if dpo else ""
    pad_frac = 1.0 - data.real / msl
    if dpo:
        third = plot("Prompt tokens per example", "The prompt both sides start with (|P|: the first trained position "
                     f"+ 1). {stats(data.docs)}.", hist(data.docs, "prompt tokens", int_bins(data.docs), "#4f9a5a"))
    elif data.spec.mode == V.CHAT:
        third = plot("Trained spans per sequence", "Runs of trained positions in each row: the assistant turns it "
                     f"trains. {stats(data.docs, '{:.2f}')}.",
                     hist(data.docs, "trained spans", int_bins(data.docs), "#4f9a5a"))
    else:
        word = _doc_word(data.spec)
        third = plot(f"{word.capitalize()}s per sequence", (
            f"{word.capitalize()}s packed into each row (a {word} starts at each position_ids 0 of the real part). "
            if data.spec.vsl else
            "EOS tokens among each row's real inputs (a document continuing into the next row counts where it ends). ")
            + f"{stats(data.docs, '{:.2f}')}.",
            hist(data.docs, f"{word}s" if data.spec.vsl else "EOS tokens", int_bins(data.docs), "#4f9a5a"))
    out = [
        plot(f"Real (non-pad) tokens {per}", f"{both}Out of {data.msl}. {stats(data.real)}.",
             hist(data.real, "real tokens", int_bins(data.real))),
        plot(f"Padding fraction {per}", f"{both}{stats(pad_frac, '{:.3f}')}.",
             hist(pad_frac, "pad tokens / max_seq_length", np.linspace(0, 1, 41), "#a5673b")),
        third,
        plot(f"Loss-valid tokens {per}", f"{both}Positions whose label is trained"
             + (" (the response's tokens)" if dpo else "") + f". {stats(data.trained)}.",
             hist(data.trained, "loss-valid tokens", int_bins(data.trained), "#7a4fa0")),
    ]
    out.append(_sources_figure(data, Figure, png))
    names = list(data.file_rows)
    fig = Figure(figsize=(7, max(2.5, min(12, 0.22 * len(names) + 1))))
    ax = fig.subplots()
    if names:
        ax.barh(range(len(names)), list(data.file_rows.values()), color="#3b6ea5")
        ax.set_yticks(range(len(names)), names, fontsize=7 if len(names) > 20 else 9)
        ax.invert_yaxis()
    ax.set_xlabel("sequences")
    ax.grid(axis="x", alpha=0.3)
    out.append(("Sequences per output file", f"{len(names)} files, {sum(data.file_rows.values())} sequences.",
                png(fig)))
    return out


def _sources_figure(data: ReportData, Figure, png) -> tuple[str, str, str]:
    per = ((data.params or {}).get("input") or {}).get("per_source") or {}
    fig = Figure(figsize=(7, 3.2))
    ax = fig.subplots()
    tokens_key = next((k for k in ("tokens", "num_tokens", "tokens_written") if any(k in b for b in per.values())),
                      None)
    if not per:
        ax.text(0.5, 0.5, "no per-source data in data_params.json", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_axis_off()
        return ("Tokens per source file", "data_params.json has no input.per_source section (reference "
                "outputs have none), so there is nothing to plot.", png(fig))
    items = sorted(per.items(), key=lambda kv: -kv[1].get(tokens_key or "documents_read", 0))
    shown = items[:40]
    fig.set_size_inches(7, max(2.5, 0.25 * len(shown) + 1))
    labels = [s if len(s) <= 40 else "…" + s[-39:] for s, _ in shown]
    y = np.arange(len(shown))
    if tokens_key:
        ax.barh(y, [b.get(tokens_key, 0) for _, b in shown], color="#3b6ea5")
        ax.set_xlabel("tokens")
        title, caption = "Tokens per source file", "Tokens written per input file."
    else:
        used = [b.get("used", 0) for _, b in shown]
        dropped = [b.get("dropped", 0) for _, b in shown]
        bad = [b.get("bad", 0) for _, b in shown]
        ax.barh(y, used, color="#4f9a5a", label="used")
        ax.barh(y, dropped, left=used, color="#d9a441", label="dropped")
        ax.barh(y, bad, left=np.add(used, dropped), color="#c0504d", label="bad")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        ax.set_xlabel("documents")
        title = "Documents per source file"
        caption = ("data_params.json records documents, not tokens, per source file (input.per_source), "
                   "so this shows documents used / dropped / bad.")
    ax.set_yticks(y, labels, fontsize=7 if len(shown) > 20 else 9)
    ax.invert_yaxis()
    ax.grid(axis="x", alpha=0.3)
    if len(items) > len(shown):
        caption += f" The {len(shown)} largest of {len(items)} sources are shown."
    return title, caption, png(fig)


def _table(rows: list[tuple[str, object]]) -> str:
    body = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(_fmt(v))}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def _fmt(v) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, dict):
        return ", ".join(f"{k}: {_fmt(x)}" for k, x in v.items()) or "—"
    return str(v)


# The chat and DPO settings data_params.json records under `dataset`.
_CHAT_KEYS = ("messages_key", "role_key", "content_key", "train_on_all_assistant_turns", "truncate", "prompt_key",
              "chosen_key", "rejected_key", "max_prompt_length")


def _key_numbers(data: ReportData) -> list[tuple[str, list]]:
    p = data.params or {}
    setup, proc, ds = p.get("setup") or {}, p.get("processing") or {}, p.get("dataset") or {}
    config = [("mode", data.spec.mode), ("written by", "reference" if data.spec.producer == V.REFERENCE
                                         else "create_hdf5_dataset")]
    for key in ("input_dir", "metadata_files"):
        if setup.get(key):
            config.append((key, setup[key]))
    for key in ("tokenizer_type", "huggingface_tokenizer", "encoder_file", "vocab_file", "max_seq_length", "seed"):
        if proc.get(key) is not None:
            config.append((key, proc[key]))
    for key in ("pack_sequences", "inverted_mask", "use_ftfy", "min_sequence_len", "fold_long_doc",
                "position_ids_dtype") + _CHAT_KEYS:
        if key in ds:
            config.append((key, ds[key]))
    if data.spec.mode in (V.CHAT, V.CHAT_VSL, V.DPO) and "chat_template" in proc:
        template = proc["chat_template"]
        config.append(("chat_template", "the tokenizer's own" if template is None
                       else template if len(str(template)) <= 60 else str(template)[:59] + "…"))
    sections = [("Configuration", config)]
    if isinstance(p.get("post-process"), dict):
        sections.append(("post-process", sorted(p["post-process"].items())))
    if isinstance(p.get("h5_dataset_stats"), dict):
        sections.append(("h5_dataset_stats", sorted(p["h5_dataset_stats"].items())))
    inp = p.get("input")
    if isinstance(inp, dict):
        sections.append(("input", [(k, inp[k]) for k in ("documents_read", "good", "bad", "bad_by_reason", "used",
                                                         "dropped", "dropped_by_reason", "files") if k in inp]))
    real = data.real
    recount = [("files", len(data.file_rows)), ("sequences", int(len(real)))]
    if len(data.sides) > 1:
        recount.append((f"sides ({' + '.join(data.sides)})", int(real.size)))
    recount += [("real tokens", int(real.sum())), ("loss-valid tokens", int(data.trained.sum())),
                ("pad tokens", int(real.size * data.msl - real.sum()))]
    if len(data.sides) > 1:
        for i, name in enumerate(data.sides):
            recount += [(f"{name} real tokens", int(real[:, i].sum())),
                        (f"{name} loss-valid tokens", int(data.trained[:, i].sum()))]
        recount.append(("prompt tokens (once per example)", int(data.docs.sum())))
    elif data.spec.mode == V.CHAT:
        recount.append(("trained spans (assistant turns)", int(data.docs.sum())))
    elif data.spec.vsl:
        docs = int(data.docs.sum())
        word = _doc_word(data.spec)
        recount += [(f"{word}s (packed segments)", docs),
                    (f"{word}s per sequence", f"{docs / len(real):.4f}" if len(real) else "—")]
    else:
        recount.append(("EOS tokens (documents)", int(data.docs.sum())))
    sections.append(("Recounted from the files", recount))
    return sections


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;max-width:1100px;color:#222}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 1.5em .5em 0;font-size:.9em;display:inline-table;vertical-align:top}
th,td{border:1px solid #ddd;padding:.2em .6em;text-align:left}th{background:#f5f5f5;font-weight:600}
td{font-variant-numeric:tabular-nums}.cap{color:#555;font-size:.9em}img{max-width:100%}
.tables h3{font-size:1em;margin:.8em 0 .2em}.tables div{display:inline-block;vertical-align:top}
"""


def build_report(out_dir: str) -> str:
    """The self-contained HTML report (PNG plots as data URIs). Needs matplotlib."""
    _require_dir(out_dir)
    data = collect_report_data(out_dir)
    figures = _figures(data)
    tables = "".join(f"<div><h3>{html.escape(title)}</h3>{_table(rows)}</div>"
                     for title, rows in _key_numbers(data))
    plots = "".join(
        f'<h2>{html.escape(title)}</h2><p class="cap">{html.escape(caption)}</p>'
        f'<img alt="{html.escape(title)}" src="data:image/png;base64,{b64}">'
        for title, caption, b64 in figures)
    missing = "" if data.params is not None else "<p><b>data_params.json is missing: the dataset is incomplete.</b></p>"
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>Dataset report: {html.escape(out_dir)}</title><style>{_CSS}</style></head><body>"
            f"<h1>Dataset report</h1><p><code>{html.escape(out_dir)}</code></p>{missing}"
            f"<h2>Key numbers</h2><div class=\"tables\">{tables}</div>{plots}</body></html>\n")


def write_report(out_dir: str, output: Optional[str] = None) -> str:
    """Write the report (default OUT/report.html); returns its path."""
    text = build_report(out_dir)
    path = output or fs.join(out_dir, "report.html")
    fs.write_text_atomic(path, text)
    return path


# --------------------------------------------------------------------------- CLI


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="create_hdf5_dataset", description="Check, inspect or report on an output "
                                "directory of create_hdf5_dataset (or of the reference).")
    sub = p.add_subparsers(dest="tool", required=True)

    def tokenizer_flags(sp):
        g = sp.add_argument_group("tokenizer (default: the one recorded in data_params.json)")
        g.add_argument("--tokenizer_type", choices=("GPT2Tokenizer", "NeoXTokenizer", "HuggingFaceTokenizer"))
        g.add_argument("--vocab_file")
        g.add_argument("--encoder_file")
        g.add_argument("--huggingface_tokenizer")

    v = sub.add_parser("verify", help="check every .h5 file and data_params.json; exit 1 on any problem")
    v.add_argument("out_dir")
    v.add_argument("--vocab_size", type=int, help="the model's vocabulary size (default: data_params.json's)")
    v.add_argument("--max_seq_length", type=int, help="the model's max_seq_length (default: data_params.json's)")
    tokenizer_flags(v)
    i = sub.add_parser("inspect", help="print one row decoded, with the mask and special tokens visible")
    i.add_argument("out_dir")
    i.add_argument("--file", help="file name in OUT (default: the first)")
    i.add_argument("--row", type=int, default=0, help="row index in the file (negative counts from the end)")
    i.add_argument("--ids", action="store_true", help="one line per position: ids, tokens, mask, labels")
    i.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="dim untrained positions with ANSI codes (auto: when stdout is a terminal)")
    tokenizer_flags(i)
    r = sub.add_parser("report", help="write OUT/report.html with plots and the key numbers")
    r.add_argument("out_dir")
    r.add_argument("--output", help="where to write the report (default OUT/report.html)")
    return p


def main(argv: list[str]) -> int:
    """Run a tool; argv[0] is the tool's name. Returns the exit status."""
    try:
        return _main(argv)
    except BrokenPipeError:
        # `inspect ... | head`: the reader left; not an error, and no traceback at exit.
        sys.stdout = open(os.devnull, "w")
        return 0


def _main(argv: list[str]) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # argparse: usage errors (2) and --help (0)
        return int(e.code or 0)
    tok_flags = {k: getattr(args, k, None) for k in _TOKENIZER_FLAGS}
    try:
        if args.tool == "verify":
            result = verify_dataset(args.out_dir, vocab_size=args.vocab_size, max_seq_length=args.max_seq_length,
                                    **tok_flags)
            print("\n".join(result.lines()))
            return 0 if result.ok else 1
        if args.tool == "inspect":
            color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
            print(inspect_row(args.out_dir, file=args.file, row=args.row, color=color, ids=args.ids, **tok_flags))
            return 0
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("create_hdf5_dataset report: error: matplotlib is needed: pip install matplotlib", file=sys.stderr)
            return 2
        print(f"wrote {write_report(args.out_dir, args.output)}")
        return 0
    except UsageError as e:
        print(f"create_hdf5_dataset {args.tool}: error: {e}", file=sys.stderr)
        return 2
