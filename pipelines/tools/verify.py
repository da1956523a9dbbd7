"""`create_hdf5_dataset verify OUT [--vocab_size V] [--max_seq_length L]`: trust the output.

Checks every .h5 file of OUT and its data_params.json as the Cerebras
dataloader would read them, and recounts the statistics; exit 0 when every
check passes, 1 on any problem, 2 on a usage error. The checks themselves are
pure (`transforms.core.verify`); the files are read through
`transforms.io.dataset`; this module wires them and owns the flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections import Counter
from typing import Optional

import numpy as np

from pipelines.tools.common import UsageError, add_tokenizer_flags, basename, load_params, require_dir, \
    tokenizer_flags
from transforms.core import verify as V
from transforms.core.decontam import LISTING_DIR as DECONTAM_DIR
from transforms.core.langid import LISTING_DIR as LANGUAGE_DIR
from transforms.core.quality import LISTING_DIR as QUALITY_DIR
from transforms.core.mixture import check_mixture
from transforms.io.listing import DEDUP_DIR, listing_counts
from transforms.core.modes import mode_of_processor
from transforms.core.stats import check_accounting
from transforms.io import fs
from transforms.io.dataset import PARAMS_FILE, file_layout, iter_row_blocks, list_h5_files, open_dataset_tokenizer, \
    open_h5

__all__ = ["VerifyResult", "verify_dataset", "add_parser", "run"]

_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


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
                   **tokenizer) -> VerifyResult:
    """Check every .h5 file and data_params.json of out_dir; see `transforms.core.verify`.

    `vocab_size` / `max_seq_length`: the model's; by default data_params.json's.
    `tokenizer`: tokenizer flags overriding data_params.json's (for detokenized_* counts).
    """
    require_dir(out_dir)
    res = VerifyResult(out_dir)
    params, params_problem = load_params(out_dir)
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
    if not files and _says_empty(params):
        res.notes.append(f"an empty dataset: data_params.json records no files and 0 sequences "
                         f"({params.get('empty', 'no reason given')})")
    elif not files:
        res.problems.append(f"{out_dir}: no .h5 files")
    counts: Counter = Counter()
    detok: Counter = Counter()
    file_rows: dict[str, int] = {}
    msls: list[int] = []
    layout_msl = max_seq_length if max_seq_length is not None else spec.max_seq_length
    for path in files:
        name = basename(path)
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
                                             detokenized=detok if want_detok else None, detokenized_note=detok_note,
                                             listings=_listings(out_dir, params))
        res.problems += [f"{PARAMS_FILE}: {p}" for p in problems]
        res.notes += stat_notes
        problems, cfg_notes = V.check_config(params, spec, file_msls=msls, vocab_flag=vocab_size,
                                             msl_flag=max_seq_length,
                                             tokenizer_vocab=tok.vocab_size if tok is not None else None)
        res.problems += [f"{PARAMS_FILE}: {p}" for p in problems]
        res.notes += cfg_notes
        if tok is None:
            res.notes.append(f"tokenizer not rebuilt: {tok_how}; skipped: {_needing_a_tokenizer(params, spec)}")
    elif max_seq_length is None and len(set(msls)) > 1:
        res.problems.append(f"{out_dir}: files hold rows of different lengths: {sorted(set(msls))}")
    return res


def _needing_a_tokenizer(params: dict, spec: V.DatasetSpec) -> str:
    """The checks this dataset would get from its tokenizer, by name: every other check runs without it."""
    checks = []
    if isinstance(params.get("h5_dataset_stats"), dict):
        checks.append("h5_dataset_stats.detokenized_chars/bytes against the rows decoded")
    if spec.vocab_size is not None:
        checks.append("post-process.vocab_size against the tokenizer's vocabulary")
    return "; ".join(checks) if checks else "nothing (no check of this dataset needs it)"


def _says_empty(params: Optional[dict]) -> bool:
    """data_params.json of a dataset of no rows: no files listed, 0 sequences written."""
    if not params or params.get("files") != {}:
        return False
    return (params.get("post-process") or {}).get("n_examples") == 0


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
        # Each output's messages name their file inside it (or the output itself): say which output.
        res.problems += [f"{entry['path']}: {p}" for p in one.problems]
        res.notes += [f"{entry['path']}: {n}" for n in one.notes]
        res.files += one.files
        res.rows += one.rows
        if one.rows != entry["sequences"]:
            res.problems.append(f"{PARAMS_FILE}: {entry['path']} holds {one.rows} sequences, the summary says "
                                f"{entry['sequences']}")
        params, _ = load_params(path)
        if params is not None:
            documents += params["input"]["documents_read"]
            if params.get("config_fingerprint") != summary.get("config_fingerprint"):
                res.problems.append(f"{entry['path']}/{PARAMS_FILE}: written by another configuration "
                                    f"({params.get('config_fingerprint')}, the job's {summary.get('config_fingerprint')})")
    inp = summary.get("input", {})
    res.problems += [f"{PARAMS_FILE}: {p}" for p in check_accounting(inp)] if inp else []
    if inp and isinstance(summary.get("mixture"), dict):  # a mixture's plan is the job's, its section the summary's
        res.problems += [f"{PARAMS_FILE}: {p}" for p in check_mixture(summary["mixture"], inp,
                                                                      encoded=_templated(res.mode))]
        per_output = [entry.get("tokens_taken") for entry in summary["outputs"]]
        if None not in per_output and sum(per_output) != summary["mixture"].get("tokens_taken"):
            res.problems.append(f"{PARAMS_FILE}: the outputs took {sum(per_output)} tokens of the mixture, its "
                                f"section says {summary['mixture'].get('tokens_taken')}")
    if inp:  # deduplication and decontamination are the job's, across its outputs
        res.problems += [f"{PARAMS_FILE}: {p}" for p in V.check_steps(summary, inp, _listings(out_dir, summary))]
    if inp and documents != inp["good"]:
        res.problems.append(f"{PARAMS_FILE}: the outputs hold {documents} documents, the job read {inp['good']} "
                            "good ones")
    return res


def add_parser(sub) -> None:
    """`verify` and its flags, as a subcommand of the tools' parser."""
    v = sub.add_parser("verify", help="check every .h5 file and data_params.json; exit 1 on any problem")
    v.add_argument("out_dir")
    v.add_argument("--vocab_size", type=int, help="the model's vocabulary size (default: data_params.json's)")
    v.add_argument("--max_seq_length", type=int, help="the model's max_seq_length (default: data_params.json's)")
    add_tokenizer_flags(v)


def run(args: argparse.Namespace) -> int:
    """Print every problem and note, then the summary; 0 when every check passed, else 1."""
    result = verify_dataset(args.out_dir, vocab_size=args.vocab_size, max_seq_length=args.max_seq_length,
                            **tokenizer_flags(args))
    print("\n".join(result.lines()))
    return 0 if result.ok else 1


# Where each removing stage lists its records, and the field it counts them by.
_LISTINGS = {"dedup": (DEDUP_DIR, "kind"), "decontamination": (DECONTAM_DIR, "reason"),
             "language": (LANGUAGE_DIR, "reason"), "quality": (QUALITY_DIR, "reason")}


def _listings(out_dir: str, params: dict) -> dict:
    """The records each removing stage of `params` lists, per kind or reason (None: no listing)."""
    return {name: listing_counts(out_dir, directory, field) for name, (directory, field) in _LISTINGS.items()
            if name in params}


def _templated(name) -> bool:
    """Whether the mode of this name renders records with a chat template (False for an unknown one)."""
    traits = mode_of_processor(name)
    return traits is not None and traits.templated
