"""`create_hdf5_dataset estimate MODE [the job's flags] [--sample 1%] [--sample_seed 0]`: a job's outcome, predicted.

The same flags and config as the job. A seeded sample of every input file
(transforms.io.sample: lines drawn by byte where a file allows it, else a
coin per record) is normalized and tokenized as the job would, document by
document, for the totals and their 95 % intervals (transforms.core.estimate);
then the job itself runs on the sample (in this process, into a temporary
directory), for what follows from the tokens: loss-valid tokens, rows, files,
bytes on disk, and the seconds its work takes. Nothing is written to the
output directory.

Printed: documents, tokens, loss-valid tokens, rows, files and bytes on disk
with their intervals; a mixture's tokens available per source and the largest
total it allows; wall time on this machine (start-up plus the sample job's
data time scaled); vCPU-hours and cost on Dataflow (docs/dataflow.md's model:
the CPU seconds the sample took per token, at its price per vCPU-hour).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import json
import math
import os
import re
import sys
import tempfile
import time
from typing import Optional

import fsspec
import numpy as np

from pipelines.config import DEFAULT_SAMPLE, Config, ConfigError, load_config, split_estimate_args
from pipelines.process import HeadStart
from transforms.core.estimate import (Interval, MixturePrediction, Stratum, attribute, by_bytes, by_poisson, combine,
                                      effective_count, mean_spread, predict_mixture, scaled, scaled_seconds,
                                      share_ratio, split_share)
from transforms.core.mixture import targets
from transforms.core.modes import PAIR
from transforms.core.normalize import normalized_document
from transforms.core.records import Document, JsonKey, Rewritten
from transforms.io.readers import file_size, read_records
from transforms.io.sample import by_byte, coin_records, draw_lines, lines_around

__all__ = ["main", "estimate", "Estimate"]

# docs/dataflow.md, "Prices assumed": an n2-standard-4 worker-hour, all in (vCPU, memory, disk), per vCPU.
DATAFLOW_USD_PER_VCPU_HOUR = 0.07057


@dataclasses.dataclass
class Estimate:
    fraction: float  # of the input's bytes sampled (by byte), or of its records kept (by coin)
    documents: Interval
    tokens: Interval
    loss_valid_tokens: Interval
    rows: Interval
    files: tuple  # (low, value, high)
    bytes_on_disk: Interval
    seconds: float  # the whole job on this machine
    vcpu_hours: Interval  # on Dataflow
    per_source: dict  # mixture source -> Interval of its tokens available
    mixture_total: Optional[Interval]  # the largest total the mixture allows (None: no mixture or a total given)
    sample_seconds: float  # what this estimate took, start-up included
    startup_seconds: float = 0.0  # of which the process's start-up (interpreter, imports, tokenizer)
    notes: tuple = ()
    # A mixture: the output as its plan takes it (then tokens, loss-valid tokens, rows and bytes are the mixed
    # output's; `documents` stays the input's) and the total tokens asked, if any.
    mixture: Optional[MixturePrediction] = None
    total_tokens: Optional[int] = None
    outputs: tuple = ()  # OutputPrediction per dataset of a split job, in the plan's order


@dataclasses.dataclass(frozen=True)
class OutputPrediction:
    """One dataset of a split job: its documents, their tokens, its loss-valid tokens and rows."""

    path: str
    max_seq_length: int
    documents: Interval
    tokens: Interval
    loss_valid_tokens: Interval
    rows: Interval


def parse_sample(text: str, total_bytes: int) -> float:
    """--sample: a percentage (1%), a fraction (0.01) or a byte budget (64MB, 1GiB) -> a fraction of the input."""
    t = str(text).strip()
    match = re.fullmatch(r"([0-9.]+)\s*([KMGT]i?B|B)", t, re.IGNORECASE)
    try:
        if t.endswith("%"):
            fraction = float(t[:-1]) / 100
        elif match:
            unit = match.group(2).upper()
            scale = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "KIB": 2**10, "MIB": 2**20,
                     "GIB": 2**30, "TIB": 2**40}[unit]
            fraction = float(match.group(1)) * scale / max(total_bytes, 1)
        else:
            fraction = float(t)
    except ValueError:
        raise ConfigError(f"--sample: {text!r} is not a percentage (1%), a fraction (0.01) or a size (64MB)") from None
    if not 0 < fraction:
        raise ConfigError(f"--sample: {text!r} must be more than nothing")
    return min(fraction, 1.0)


def _checked(check, doc: Document) -> Optional[Document]:
    """The document as the job's reader passes it on (a read hook's regions, a conversation checked), or None for
    a record the check refuses (a dead letter in the job)."""
    failure = check(doc.values) if check is not None else None
    if failure is None:
        return doc
    return Document(doc.index, failure.values, doc.member) if type(failure) is Rewritten else None


class _Tokens:
    """Each document's tokens as the job counts them. Text modes: normalized, keys joined as the reader joins
    them, encoded (with EOS in the modes that append it). Chat modes: rendered by the template and fitted to
    the row (a conversation dropped while encoding counts no tokens, a DPO pair its prompt once per side)."""

    def __init__(self, plan):
        from transforms.core.tokenizer import shared_tokenizer

        self._plan = plan
        self._tok = shared_tokenizer(plan.tokenizer_files)
        if plan.traits.fim and self._tok.adds_bos:
            self._tok = self._tok.without_bos()
        self._chat = None
        if plan.chat is not None:
            from transforms.core.chat.batch import chat_encoder

            self._chat = chat_encoder(plan.chat, self._tok.backend)

    def __call__(self, docs: list) -> list[int]:
        return self.count(docs)[0]

    def count(self, docs: list) -> tuple[list[int], list[tuple]]:
        """Each document's tokens, and the values a split's draw sees (normalized in the text modes; Chat and DPO
        route records as read, transforms.core.splits.route_batch)."""
        if not docs:
            return [], []
        if self._chat is not None:
            return self._chat_tokens(docs), [d.values for d in docs]
        plan, tok = self._plan, self._tok
        from transforms.core.tokenizer import tokenize_documents

        values = []
        for doc in docs:
            if plan.join_keys and len(doc.values) > 1:
                doc = Document(doc.index, ("\n\n".join(doc.values),), doc.member)
            values.append(normalized_document(doc, plan.normalize)[0].values)
        if plan.traits.record == PAIR:  # prompt and completion, each encoded
            lengths = [0] * len(values)
            for k in range(len(values[0])):
                for i, ids in enumerate(tok.encode_batch([v[k] for v in values])):
                    lengths[i] += len(ids)
            return lengths, values
        out = tokenize_documents(tok, [v[0] for v in values], split_len=plan.split_len,
                                 remove_bos_in_chunks=plan.remove_bos_in_chunks)
        return [len(ids) for ids in out], values

    def _chat_tokens(self, docs: list) -> list[int]:
        """A record at a time (a dropped one yields nothing to align by), through the job's own encoding."""
        from transforms.core.chat.batch import encode_conversations, encode_pairs
        from transforms.core.records import DocBatch, GroupId

        cfg = self._plan.chat
        encode = encode_pairs if cfg.dpo else encode_conversations
        group = GroupId(0, 0, "estimate", "estimate")
        return [int(encode(DocBatch(group, [doc]), self._chat, cfg).token_counts().sum()) for doc in docs]


def _json_line(keys: tuple, doc: Document) -> bytes:
    return json.dumps({str(k): v for k, v in zip(keys, doc.values)}, ensure_ascii=False).encode("utf-8")


def estimate(config: Config, sample: str = DEFAULT_SAMPLE, seed: int = 0, *, job: bool = True,
             startup: float = 0.0) -> Estimate:
    """The estimate; `job=False` stops after the documents and tokens (what a calibration needs), the fields
    that follow from the job on the sample left None. `startup`: the seconds this process took to start (the
    command passes its own: a job pays as much), added to the predicted time."""
    from pipelines.graph import record_check
    from pipelines.plan import UserError, plan_job

    started = time.perf_counter()
    plan = plan_job(config)
    sizes = [f.size if f.size is not None else file_size(f.path) for f in plan.files]
    if any(s is None for s in sizes):
        raise UserError("estimate: the size of every input file is needed (a listing that gives none)")
    fraction = parse_sample(sample, sum(sizes))
    sources = plan.mixture_sources or (0,) * len(plan.files)
    n_sources = len(plan.mixture.sources) if plan.mixture else 1
    strata: dict = {name: [[] for _ in range(n_sources)] for name in ("documents", "tokens", "kept", "squares")}
    n_outputs = len(plan.splits.outputs) if plan.splits is not None else 1
    n_subsets = len(plan.splits.subsets) if plan.splits is not None else 1
    # Per subset (a split job's outputs share out their subset's documents): its files' strata.
    by_subset: dict = {name: [[] for _ in range(n_subsets)] for name in ("documents", "tokens", "kept", "squares")}
    sample_by_output = [0] * n_outputs
    notes = []
    sample_tokens = 0  # what the job on the sample tokenizes
    sample_by_source = [0] * n_sources  # of which each mixture source's
    count = _Counter(record_check(plan), _Tokens(plan), plan.splits, _Filters(plan))
    shares, sample_paths = [], []  # per file: its documents in the job on the sample, and where they were written
    # Bytes on disk by document (`_document_costs`) where the sample job's rows can be told apart by document.
    by_document = plan.traits.packed_windows and not plan.traits.fim and plan.mixture is None and job
    with tempfile.TemporaryDirectory(prefix="create_hdf5_dataset_estimate_") as work:
        sample_dir = os.path.join(work, "in")
        for f, size, source in zip(plan.files, sizes, sources):
            if by_byte(f.path, plan.txt_lines):
                sample_paths.append(os.path.join(sample_dir, f.relpath))
                drawn = _by_byte(plan, count, f, size, fraction, seed, work, sample_paths[-1], by_document)
            else:
                sample_paths.append(os.path.join(sample_dir, f.relpath + ".jsonl"))
                drawn = _by_coin(plan, count, f, fraction, seed, sample_paths[-1])
                if fraction < 1:
                    notes.append(f"{f.relpath}: read whole (no random access in a {os.path.splitext(f.path)[1]} "
                                 "file), its records kept by a coin")
            shares.append((drawn.share, source))
            documents, tokens, kept, in_job = drawn.whole
            subset = plan.splits.subset_index(f.relpath) if plan.splits is not None else 0
            for name, stratum in zip(("documents", "tokens", "kept", "squares"), (*drawn.whole[:3], drawn.squares)):
                by_subset[name][subset].append(stratum)
            for k, j in enumerate(drawn.per_output):
                sample_by_output[k] += j
            strata["documents"][source].append(documents)
            strata["tokens"][source].append(tokens)
            strata["kept"][source].append(kept)
            strata["squares"][source].append(drawn.squares)
            sample_tokens += in_job
            sample_by_source[source] += in_job
        documents = combine(s for per in strata["documents"] for s in per)
        tokens = combine(s for per in strata["tokens"] for s in per)
        if not job:
            return Estimate(fraction, documents, tokens, None, None, (), None, 0.0, None, {}, None,
                            time.perf_counter() - started + startup, startup, tuple(notes))
        mixed, budgets = None, None
        if plan.mixture:
            try:
                mixed = predict_mixture(plan.mixture, *([combine(per) for per in strata[name]]
                                                        for name in ("tokens", "documents", "kept")), seed=seed,
                                        lengths=_document_lengths(shares, n_sources))
            except ValueError as e:  # the plan cannot be made at the estimated availabilities: the job's error
                raise UserError(f"{e} (at the tokens the sample estimates)") from None
            budgets = _sample_budgets(plan.mixture, mixed, sample_by_source)
            if mixed.shortfall > 0.025:
                notes.append(f"the mixture cannot be made in {mixed.shortfall:.0%} of the availabilities the sample "
                             "allows: a source may not hold its budget or share within max_repeats")
        # A job pays a price of its own whatever its size (the graph, the runner, each stage's first use of the
        # tokenizer and the codec): a job on one sampled record pays it first, so that the sample job's costs
        # are its data's alone, scaled, and that price is counted once.
        fixed_params, fixed_cpu, _, _ = _sample_job(config, _one_record(sample_dir, os.path.join(work, "one")),
                                                    os.path.join(work, "one_out"))
        job_params, job_cpu, _, chunks = _sample_job(config, sample_dir, os.path.join(work, "out"), budgets)
        # Each sampled document's bytes on disk, where the sample job's rows can be told apart by document.
        costs = None
        if by_document:
            costs = _document_costs(plan, [s for s, _ in shares], sample_paths, os.path.join(work, "out"), chunks)
    post = job_params["post-process"] if "post-process" in job_params else _summed_outputs(job_params)
    # The output's tokens and what they hold per token, on the sample: a mixture's sample job takes each source
    # in the proportion the job will (its copies too), so its rows, loss-valid tokens and bytes per token are
    # the mixed output's.
    out_tokens, out_sample_tokens = tokens, sample_tokens
    if mixed is not None:
        out_tokens, out_sample_tokens = mixed.tokens, job_params["mixture"]["tokens_taken"]

    def per_token(x: float) -> float:
        return x / out_sample_tokens if out_sample_tokens else 0.0

    positions = (job_params.get("h5_dataset_stats") or {}).get("non_pad_tokens")
    if plan.traits.one_row_per_record:
        # A row per record kept: counted record by record. The rows per token of the sample job would be biased
        # where the draw favours long records (by byte), and long ones are the ones a row drops.
        rows = mixed.kept if mixed is not None else combine(s for per in strata["kept"] for s in per)
    elif plan.traits.packed_windows and positions is not None:
        # Windows of max_seq_length over each group's stream: full rows in proportion to the real positions a
        # token makes (EOS, windows), plus one partial row per group. The sample job has as many groups as the
        # job has (a copy of a source is a group), on far fewer tokens, so its rows per token would count
        # every partial row again at the scale of the whole: each group's last row is taken as half full,
        # give or take half a row.
        groups = _groups(plan, sizes, mixed)
        full = scaled(out_tokens, per_token(positions) / plan.pack.max_seq_length)
        rows = Interval(full.value + groups / 2, full.half_width + groups / 2)
    else:
        rows = scaled(out_tokens, per_token(post["n_examples"]))
    outputs = ()
    if plan.splits is not None and mixed is None:
        outputs = _predict_outputs(plan, by_subset, sample_by_output, job_params, _groups(plan, sizes, None))
    elif plan.splits is not None:  # (a mixture has no subsets: the configuration refuses them together)
        outputs = _mixture_outputs(plan, mixed, documents, [combine(per).value for per in strata["squares"]],
                                   job_params, _groups(plan, sizes, mixed))
    if config.decontaminate:
        notes.append("decontamination: a sampled record holding an evaluation n-gram is counted removed (the "
                     "boilerplate rule, an n-gram in more than decontaminate_max_docs of the corpus' records, cannot "
                     "be applied to a sample): the prediction is of at most the records the job keeps")
    if config.dedup:
        # A sample holds few of a record's copies: it cannot say how many of the corpus' records are duplicates.
        notes.append("dedup: only the sample's own duplicates are removed, not the corpus': the prediction is of the "
                     "job without the duplicates the sample cannot see (an upper bound on documents, tokens and rows)")
    if outputs and not plan.traits.one_row_per_record:  # the outputs' rows, each at its own max_seq_length
        rows = Interval(sum(o.rows.value for o in outputs), sum(o.rows.half_width for o in outputs))
    files_per = config.files_per_record if config.num_output_files is None else None
    file_range = tuple(config.num_output_files if files_per is None else math.ceil(x / files_per)
                       for x in (rows.low, rows.value, rows.high))
    per_file, per_row = _hdf5_overhead(plan)
    overhead = (per_file * max(file_range[1], n_outputs), per_row)  # the files' own bytes, a row's
    if costs is not None:
        bytes_on_disk = _bytes_by_document([s for s, _ in shares], costs, rows, overhead)
    else:
        times = [1.0] * n_sources
        if budgets:
            names = [s.name for s in plan.mixture.sources]
            for b in budgets:
                have = sample_by_source[names.index(b["name"])]
                times[names.index(b["name"])] = b["tokens"] / have if have else 0.0
        weights = [w * times[source] for share, source in shares for w in _row_weights(plan, share)]
        bytes_on_disk = _bytes_by_row(rows, [n for sizes in chunks.values() for n in sizes],
                                      effective_count(weights), overhead)
    # This machine: the start-up, plus the sample job's stage seconds scaled to the whole (on the bench corpora a
    # job's data phase lasts about as long as its stages' seconds add up to). What any job pays in its stages (the
    # job of one record's: the encoders' and writers' first use) is paid once, not scaled with the data: scaled,
    # a second of it at a 1% sample was a hundred seconds of prediction.
    share = sample_tokens / tokens.value if tokens.value else 1.0
    seconds = startup + scaled_seconds(sum(fixed_params.get("run", {}).get("stage_seconds", {}).values()),
                                       sum(job_params.get("run", {}).get("stage_seconds", {}).values()), share)
    # The job's CPU: its fixed price once, and the sample job's beyond that price per token (the estimate's own
    # tokenizing of the draws is not the job's work: the sample job tokenizes its share again).
    per_token_cpu = max(job_cpu - fixed_cpu, 0.0) / sample_tokens if sample_tokens else 0.0
    vcpu = Interval((fixed_cpu + per_token_cpu * tokens.value) / 3600, per_token_cpu * tokens.half_width / 3600)
    per_source, mixture_total = {}, None
    if plan.mixture:
        per_source = {s.name: combine(strata["tokens"][k]) for k, s in enumerate(plan.mixture.sources)}
        if plan.mixture.total_tokens is None:
            mixture_total = _largest_total(plan.mixture, per_source)
    return Estimate(fraction, documents, out_tokens, scaled(out_tokens, per_token(post["loss_valid_tokens"])), rows,
                    file_range, bytes_on_disk, seconds, vcpu, per_source, mixture_total,
                    time.perf_counter() - started + startup, startup, tuple(notes), mixed,
                    plan.mixture.total_tokens if plan.mixture else None, outputs)


class _Filters:
    """What the job's language identification (--languages), quality filters and decontamination leave of each
    record, decided for each record as the job decides it: the record, what a filter or the cut action leaves of
    it, or None. A sample cannot apply decontamination's boilerplate rule (an n-gram in more than
    decontaminate_max_docs of the corpus' records), so a sampled record holding any evaluation n-gram counts
    removed (or cut): the prediction is then of at most the records the job keeps."""

    def __init__(self, plan):
        self._plan = plan
        self._json = tuple(isinstance(k, JsonKey) for k in plan.keys)
        self._model = self._index = None
        if plan.langid is not None and plan.langid.languages:
            from transforms.core.langid import load_model

            self._model = load_model()
        if plan.decontam is not None:
            from transforms.core.decontam import build_index, merge_indexes
            from transforms.io.eval_sets import read_eval_items

            self._index = merge_indexes([build_index((i.text for i in read_eval_items(path, plan.decontam_keys)),
                                                     plan.decontam) for path in plan.decontam_files])

    def __bool__(self) -> bool:
        return self._model is not None or self._index is not None or bool(self._plan.quality)

    def apply(self, docs: list) -> list:
        """Per record, None if the job removes it, else the record (with the text a quality filter's cut leaves,
        normalized: the job tokenizes that)."""
        from transforms.core.decontam import record_evidence, record_texts
        from transforms.core.langid import decide, scores_of, texts_of

        plan = self._plan
        values = [self._values(d) for d in docs]
        texts = [record_texts(v, self._json) for v in values]
        out = list(docs)
        if self._model is not None:
            out = [d if decide(scores_of(self._model, texts_of(t)), plan.langid)[2] else None
                   for d, t in zip(out, texts)]
        if plan.quality:
            from transforms.core.quality import judge

            for i, doc in enumerate(out):
                found = judge(plan.quality, "\n".join(texts[i])) if doc is not None else None
                if found is not None and found.removed is not None:
                    out[i] = None
                elif found is not None and found.text is not None:  # (a record of one text value: c4_quality's)
                    out[i], texts[i] = Document(doc.index, (found.text,), doc.member), [found.text]
                    values[i] = (found.text,)
        if self._index is not None:
            from transforms.core.decontam import CUT, cut_record, verdict

            evidence = record_evidence([t if d is not None else [] for t, d in zip(texts, out)], self._index)
            cutting = plan.decontam.action == CUT and not any(self._json)
            for i, found in enumerate(evidence):
                if found:
                    kept = cut_record(values[i], verdict(found)[3], plan.decontam) if cutting else None
                    out[i] = None if kept is None else Document(out[i].index, kept, out[i].member)
        return out

    def _values(self, doc) -> tuple:
        """A record's values as the job's steps see them: normalized (keys joined as the reader joins them), but a
        conversation's, which are checked as read."""
        plan = self._plan
        if plan.chat is not None:
            return doc.values
        if plan.join_keys and len(doc.values) > 1:
            doc = Document(doc.index, ("\n\n".join(doc.values),), doc.member)
        return normalized_document(doc, plan.normalize)[0].values


class _Counter:
    """(1, its tokens, its output) for a record the job would use, (0, 0, -1) for one it would not (a bad record,
    one the reader's check refuses, one its language or decontamination removes). The output is the index of the
    dataset a split job writes it to (the job's own draw, `SplitPlan.route`), 0 without splits."""

    def __init__(self, check, tokens: _Tokens, splits=None, filters: Optional[_Filters] = None):
        self._check, self._tokens, self._splits = check, tokens, splits
        self._filters = filters if filters else None

    @property
    def outputs(self) -> int:
        return len(self._splits.outputs) if self._splits is not None else 1

    def __call__(self, records: list, relpath: str = "") -> list[tuple[int, int, int]]:
        docs = [_checked(self._check, r) if isinstance(r, Document) else None for r in records]
        if self._filters is not None:
            present = [i for i, d in enumerate(docs) if d is not None]
            for i, doc in zip(present, self._filters.apply([docs[i] for i in present])):
                docs[i] = doc
        lengths, values = self._tokens.count([d for d in docs if d is not None])
        if self._splits is not None:
            subset = self._splits.subset_index(relpath)
            routes = [self._splits.route(subset, v) for v in values]
        else:
            routes = [0] * len(lengths)
        got = iter(zip(lengths, routes))
        return [(0, 0, -1) if d is None else (1, *next(got)) for d in docs]


@dataclasses.dataclass(frozen=True)
class _Share:
    """A file's draws as its bytes on disk are estimated from them: every draw's size and tokens; the records of
    its part of the job on the sample, in the order they were written to it (each one's tokens, the output the
    job's draw sends it to, the bytes of its line: what places it in a packing group); and where in them each of
    the first k draws is (k = len(drawn): the draws the job on the sample holds; the other records are the text
    around them).

    By byte (`probabilities` None): `total` is the file's bytes, `sizes` the drawn lines' bytes. By coin: `total`
    is the characters of the file's documents, `sizes` the kept records' characters, each kept with its
    probability, and all of them are in the job on the sample."""

    total: float
    sizes: tuple
    tokens: tuple
    drawn: tuple
    records: tuple  # (tokens, output, bytes written)
    probabilities: Optional[tuple] = None


@dataclasses.dataclass(frozen=True)
class _FileDraw:
    """A file's sample: (documents, tokens, kept records) strata and the tokens its share of the job on the sample
    holds; the total of its documents' squared token counts (what a split's draw spreads); per output of a
    split job, the tokens of its part of the job on the sample that the job's draw sends there; and its draws
    as its bytes on disk are estimated from them."""

    whole: tuple
    squares: Stratum
    per_output: tuple
    share: _Share


def _by_byte(plan, count: _Counter, f, size: int, fraction: float, seed: int, work: str, target: str,
             context: bool = False) -> _FileDraw:
    """A file sampled by byte: its strata (documents, tokens, kept records; the tokens its share of the job on the
    sample holds), that share written to `target`; with `context`, each drawn document of the share between the
    text around it in its file (`_context`)."""
    draws = draw_lines(f.path, size, math.ceil(fraction * size), seed, f.relpath)
    drawn = os.path.join(work, "drawn", f.relpath)
    os.makedirs(os.path.dirname(drawn), exist_ok=True)
    with open(drawn, "wb") as out:
        out.writelines(line + b"\n" for line in draws.lines)
    records = list(read_records(drawn, plan.keys, plan.max_record_bytes, txt_lines=plan.txt_lines))
    if len(records) != len(draws.lines):
        raise RuntimeError(f"estimate: {len(draws.lines)} lines drawn from {f.path}, {len(records)} records read back")
    per_line = count(records, f.relpath)
    # The job on the sample gets the first draws up to the file's share of the budget (a file smaller than its
    # minimum of draws would otherwise weigh more than its bytes in the ratios).
    share = int(np.searchsorted(np.cumsum(draws.lengths), fraction * size)) + 1
    around = _context(plan, count, f, size, draws, records, per_line, share, work) if context else {}
    written, at = [], []  # (tokens, output, bytes) of each record of the job on the sample; where each draw is
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, "wb") as out:
        for j, line in enumerate(draws.lines[:share]):
            before, after = around.get(j, ((), ()))
            for data, (_, t, k) in before:
                out.write(data)
                written.append((t, k, len(data)))
            at.append(len(written))
            out.write(line + b"\n")
            written.append((per_line[j][1], per_line[j][2], len(line) + 1))
            for data, (_, t, k) in after:
                out.write(data)
                written.append((t, k, len(data)))
    # Records: the density of line ends in windows at the drawn offsets (a line drawn by its bytes says little
    # about the short ones), times the share of the file's lines that are documents the job uses: each drawn line
    # weighed by one over its bytes, as it was drawn in proportion to them (a language the job removes may be
    # written in longer lines than the one it keeps).
    weights = [1 / max(n, 1) for n in draws.lengths]
    good = sum(u * w for (u, _, _), w in zip(per_line, weights)) / max(sum(weights), 1e-300)
    whole = (by_bytes(size, draws.window_bytes, [e * good for e in draws.window_ends]),
             by_bytes(size, draws.lengths, [t for _, t, _ in per_line]),
             by_bytes(size, draws.lengths, [int(t > 0) for _, t, _ in per_line]),
             sum(t for t, _, _ in written))
    squares = by_bytes(size, draws.lengths, [t * t for _, t, _ in per_line])
    drawn_share = _Share(float(size), tuple(draws.lengths), tuple(t for _, t, _ in per_line), tuple(at),
                         tuple(written))
    return _FileDraw(whole, squares, _per_output([(1, t, k) for t, k, _ in written], len(written), count.outputs),
                     drawn_share)


def _context(plan, count: _Counter, f, size: int, draws, records: list, per_line: list, share: int,
             work: str) -> dict:
    """The text a drawn document is packed among in the job, for the job on the sample to pack it among too: per
    draw of the share (its index), the documents before and after it in its file, cut to about a row of tokens
    each side ((its line as written, what `count` says of it), in the file's order). A row shared by documents
    compresses by all of them: among the draws of other places of a file (other languages, where a corpus goes
    one language after another) a short document's rows compressed a third worse than among its neighbours, and
    its weight in the estimate (its draw's, as a short line is drawn seldom) made that 4% of the bytes of the
    50 languages."""
    msl = plan.pack.max_seq_length
    wanted = []  # (draw, the bytes, characters a row of its tokens takes)
    for j in range(share):
        t, record = per_line[j][1], records[j]
        if t > 0 and isinstance(record, Document) and len(record.values) == 1:
            wanted.append((j, math.ceil(msl * draws.lengths[j] / t), msl * len(record.values[0]) / t))
    if not wanted:
        return {}
    lines = []  # (draw, side, line), sides -1 before and 1 after
    with fsspec.open(f.path, "rb") as fh:
        for j, budget, _ in wanted:
            back, forth = lines_around(fh, draws.starts[j], draws.starts[j] + draws.lengths[j], size, budget, budget)
            lines += [(j, -1, line) for line in back] + [(j, 1, line) for line in forth]
    path = os.path.join(work, "context", f.relpath)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as out:
        out.writelines(line + b"\n" for _, _, line in lines)
    read = list(read_records(path, plan.keys, plan.max_record_bytes, txt_lines=plan.txt_lines))
    if len(read) != len(lines):
        return {}
    chars = {j: c for j, _, c in wanted}
    cut: dict = {}
    for side in (-1, 1):  # the characters a row's worth of tokens takes, the farthest document cut to them
        for j in chars:
            need = chars[j]
            mine = [r for (i, sd, _), r in zip(lines, read) if i == j and sd == side]
            kept = []
            for r in (mine[::-1] if side < 0 else mine):
                if need <= 0 or not isinstance(r, Document) or len(r.values) != 1:
                    break
                text = r.values[0]
                text = text[max(0, len(text) - int(need)):] if side < 0 else text[:int(need)]
                kept.append(Document(r.index, (text,), r.member))
                need -= len(text)
            cut[j, side] = kept[::-1] if side < 0 else kept
    docs = [d for key in sorted(cut) for d in cut[key]]
    said = iter(count(docs, f.relpath))
    out: dict = {}
    for (j, side) in sorted(cut):
        pair = out.setdefault(j, ([], []))
        for d in cut[j, side]:
            got = next(said)
            if got[0] and got[1] > 0:  # a document the job packs
                pair[side > 0].append((_json_line(plan.keys, d) + b"\n", got))
    return out


def _by_coin(plan, count: _Counter, f, fraction: float, seed: int, target: str) -> _FileDraw:
    """A file read whole, its records kept by a coin: as `_by_byte`, the kept records written to `target`."""
    kept, probabilities, written, n_docs, chars = [], [], [], 0, 0
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, "wb") as out:
        for p, record in coin_records(f.path, plan.keys, fraction, seed, f.relpath,
                                      max_record_bytes=plan.max_record_bytes, txt_lines=plan.txt_lines):
            if isinstance(record, Document):  # read whole anyway: counted exactly
                n_docs += 1
                chars += sum(map(len, record.values))
            if p:
                kept.append(record)
                probabilities.append(p)
                line = _json_line(plan.keys, record) + b"\n"  # as read: the job on the sample checks it
                written.append(len(line))
                out.write(line)
    counted = count(kept, f.relpath)
    tokens = [t for _, t, _ in counted]
    used = [u for u, _, _ in counted]
    # The documents: every one read, exactly, unless the reader's check refuses some; then the kept ones' share
    # of good records, as a ratio to their number (each record a size of 1).
    documents = Stratum(float(n_docs), 0.0, math.inf) if all(used) else by_poisson(
        used, probabilities, [1.0] * len(used), float(n_docs))
    kept_rows = [int(t > 0) for t in tokens]
    whole = (documents, by_poisson(tokens, probabilities, [sum(map(len, d.values)) for d in kept], chars),
             by_poisson(kept_rows, probabilities, [1.0] * len(kept_rows), float(n_docs)), sum(tokens))
    squares = by_poisson([t * t for t in tokens], probabilities)
    sizes = tuple(float(sum(map(len, d.values))) for d in kept)
    drawn_share = _Share(float(chars), sizes, tuple(tokens), tuple(range(len(kept))),
                         tuple((t, k, b) for (_, t, k), b in zip(counted, written)), tuple(probabilities))
    return _FileDraw(whole, squares, _per_output(counted, len(counted), count.outputs), drawn_share)


def _per_output(counted: list, share: int, outputs: int) -> tuple:
    """Per output of a split job, the tokens of the file's part of the job on the sample (its first `share`
    records) that the job's draw sends there."""
    out = [0] * outputs
    for _, t, k in counted[:share]:
        if k >= 0:
            out[k] += t
    return tuple(out)


def _largest_total(spec, per_source: dict) -> Interval:
    """The largest mixture total the estimated availabilities allow, at the estimate and at its interval's ends."""
    ends = []
    for pick in (lambda i: i.low, lambda i: i.value, lambda i: i.high):
        available = [max(1, int(pick(per_source[s.name]))) for s in spec.sources]
        try:
            ends.append(targets(spec, available)[1])
        except ValueError:
            ends.append(0)
    return Interval(ends[1], max(ends[1] - ends[0], ends[2] - ends[1]))


def _document_costs(plan, shares: list, sample_paths: list, out: str, chunks: dict) -> Optional[list]:
    """Per input file, the bytes on disk of each of its draws in the job on the sample: its share of the compressed
    size of every row it is in (`attribute`). Where rows are windows over each packing group's tokens (LMData),
    the rows of each output are the job's packing (`pack_documents`) of its groups' documents, group after group
    in the order the job reads its files; that is checked row by row against the real positions of the rows
    written, and anything else (a document the job counts otherwise than the estimate; short_seq_prob's cuts;
    rows in another order) gives None: the documents cannot be told apart in the rows."""
    from transforms.core.pack import pack_documents

    outputs = plan.splits.outputs if plan.splits is not None else (None,)
    inverted = bool(plan.sections["dataset"].get("inverted_mask"))
    costs = [np.zeros(len(share.records)) for share in shares]
    order = sorted(range(len(shares)), key=lambda i: sample_paths[i])  # the job reads its files sorted by path
    for k, spec in enumerate(outputs):
        folder = spec.path if spec is not None and spec.path else ""
        names = sorted(n for n in chunks if os.path.dirname(n) == folder)
        sizes = [c for n in names for c in chunks[n]]
        positions = [p for n in names for p in _row_positions(os.path.join(out, n), inverted)]
        pack = plan.for_output(k).pack if spec is not None else plan.pack
        row = 0
        for i in order:
            records = shares[i].records
            starts = np.concatenate([[0], np.cumsum([b for _, _, b in records])[:-1]]).astype(np.int64)
            groups = starts // plan.group_bytes  # a line is in the group its first byte is in
            for g in np.unique(groups):
                mine = [j for j in np.flatnonzero(groups == g) if records[j][1] == k and records[j][0] > 0]
                if not mine:
                    continue
                tokens = [int(records[j][0]) for j in mine]
                # The job's own packing of documents of these lengths (their token values do not move a window).
                packed = pack_documents([range(t) for t in tokens], pack, flat=np.zeros(sum(tokens), np.int32))
                n = len(packed.starts)
                if positions[row:row + n] != [int(x) - 1 for x in packed.lengths]:
                    return None
                costs[i][mine] = attribute(tokens, packed.starts, packed.lengths, sizes[row:row + n])
                row += n
        if row != len(sizes):
            return None
    return [cost[list(share.drawn)] for cost, share in zip(costs, shares)]


def _row_positions(path: str, inverted: bool) -> list:
    """The real (unpadded) inputs of each row of a shard: its attention mask's ones (zeros when inverted)."""
    import h5py

    out = []
    with h5py.File(path, "r") as f:
        data = f["data"]
        for lo in range(0, data.shape[0], 1024):
            mask = data[lo:lo + 1024, 1, :]
            out.extend(((mask == 0) if inverted else (mask != 0)).sum(axis=1).tolist())
    return out


def _bytes_by_document(shares: list, costs: list, rows: Interval, overhead: tuple) -> Interval:
    """Bytes on disk as a per-document value like the tokens: each file's bytes the Hansen-Hurwitz total of its
    sampled documents' bytes (`share_ratio`, in ratio to the tokens of all its draws; by coin, the ratio form
    `by_poisson`), the files' totals added; then the HDF5 files' own bytes (`overhead`: the files', a row's).
    Each document weighs as its draw did (a long one, drawn more often, counts less each time), where the bytes
    per row of the job on the sample weighed a document by its bytes twice over (drawn in proportion to them,
    then counted in proportion to its rows): one drawn book made most of a small sample job, and the bytes per
    row of the bench corpora varied 5.5% from sample to sample (2.5% low on average) for intervals of 3.5%."""
    strata = []
    for share, cost in zip(shares, costs):
        if share.probabilities is None:
            strata.append(share_ratio(share.total, share.sizes, share.tokens, cost))
        else:
            strata.append(by_poisson(cost, share.probabilities, share.sizes, share.total))
    chunks = combine(strata)
    files, per_row = overhead
    return Interval(chunks.value + files + per_row * rows.value, chunks.half_width + per_row * rows.half_width)


def _bytes_by_row(rows: Interval, chunk_sizes: list, documents: float, overhead: tuple) -> Interval:
    """Bytes on disk where the sample job's rows cannot be told apart by document: the rows at the mean compressed
    size of the sample job's rows, plus the HDF5 files' own bytes (`overhead`). The mean's error counts the
    sampled documents as its independent values, each as many as its rows weigh (`documents`, Kish's effective
    number: a drawn book of a hundred rows is one value, not a hundred), and never more than the rows.
    `overhead`: the HDF5 files' own bytes, and a row's."""
    files, per_row = overhead
    if not chunk_sizes:
        return Interval(files + per_row * rows.value, per_row * rows.half_width)
    mean = float(np.mean(chunk_sizes))
    spread = mean_spread(chunk_sizes, min(len(chunk_sizes), documents))
    content = Interval(rows.value * mean, rows.value * mean * math.hypot(rows.relative, spread))
    return Interval(content.value + files + per_row * rows.value, content.half_width + per_row * rows.half_width)


def _document_lengths(shares: list, n_sources: int) -> list:
    """Per mixture source, its sampled documents' tokens and how many of its documents each stands for (a line
    drawn by byte: the file's bytes over the draws times its own; a record kept by a coin: 1 / its probability):
    the sizes among which a remainder's documents are drawn (`predict_mixture`)."""
    out = [([], []) for _ in range(n_sources)]
    for share, source in shares:
        n = len(share.sizes)
        for i, t in enumerate(share.tokens):
            if t > 0:
                out[source][0].append(float(t))
                out[source][1].append(1 / share.probabilities[i] if share.probabilities is not None
                                      else share.total / (n * share.sizes[i]))
    return [(np.array(t), np.array(m)) if t else None for t, m in out]


def _row_weights(plan, share: _Share) -> list:
    """The rows each document of the job on the sample makes, as a weight: one per kept record where each
    record is a row of its own (Chat, DPO, Summarization), else its tokens (rows are windows, or bins, of tokens)."""
    one_row = plan.traits.one_row_per_record or plan.traits.rows == "pairs"
    return [1.0 if one_row else float(t) for t, _, _ in share.records if t > 0]


@functools.lru_cache(maxsize=8)
def _hdf5_costs(msl: int, features: int) -> tuple:
    """What an HDF5 shard costs beyond its rows' compressed chunks, measured: (a file, a row), from a shard of
    one row and one of 4,096 (one-byte chunks: the index entry of a chunk does not depend on its size). About
    6.6 kB a file and 56 bytes a row: a sample job of a few hundred rows pays its file over far fewer rows."""
    from transforms.io.hdf5_format import write_chunks

    with tempfile.TemporaryDirectory(prefix="create_hdf5_dataset_estimate_h5_") as work:
        got = []
        for n in (1, 4096):
            path = os.path.join(work, f"{n}.h5")
            write_chunks(path, n, msl, (b"\0" for _ in range(n)), features=features)
            got.append(os.path.getsize(path) - n)
    per_row = (got[1] - got[0]) / 4095
    return got[0] - per_row, per_row


def _hdf5_overhead(plan) -> tuple:
    return _hdf5_costs(plan.pack.max_seq_length, len(plan.features))


def _predict_outputs(plan, by_subset: dict, sample_tokens: list, job_params: dict, groups: int) -> tuple:
    """Each output of a split job: its fraction of its subset's documents, tokens and kept records
    (`split_share`: the job's draw is a keyed hash, blind to a document's size, so the fraction asked is the
    share expected), and the ratios the sample job measured at its max_seq_length."""
    measured = {o["path"]: o for o in job_params.get("outputs") or []}
    # The ratios per token are pooled over the outputs of one max_seq_length: the draw is blind to content, so
    # they differ only by chance (and a small output may get no sampled document at all).
    pooled: dict = {}
    for k, spec in enumerate(plan.splits.outputs):
        got = measured.get(spec.path, {})
        acc = pooled.setdefault(spec.max_seq_length, [0, 0, 0])
        for i, value in enumerate((got.get("loss_valid_tokens", 0), got.get("sequences", 0), sample_tokens[k])):
            acc[i] += value
    out = []
    for k, spec in enumerate(plan.splits.outputs):
        subset = plan.splits.subset_index(f"{spec.subset}/" if spec.subset is not None else "")
        squares = combine(by_subset["squares"][subset])
        tokens = split_share(combine(by_subset["tokens"][subset]), spec.fraction, squares.value)
        documents = combine(by_subset["documents"][subset])
        documents = split_share(documents, spec.fraction, documents.value)
        kept = combine(by_subset["kept"][subset])
        kept = split_share(kept, spec.fraction, kept.value)
        out.append(_output(plan, spec, documents, tokens, kept, pooled[spec.max_seq_length], groups))
    return tuple(out)


def _output(plan, spec, documents: Interval, tokens: Interval, kept: Interval, pooled: list,
            groups: int) -> "OutputPrediction":
    """One output's prediction from its documents, tokens and kept records, with the sample job's (loss-valid
    tokens, rows, tokens) at its max_seq_length (`pooled`)."""
    loss, sequences, have = pooled

    def per_token(x: float) -> float:
        return x / have if have else 0.0

    if plan.traits.one_row_per_record:
        rows = kept
    elif plan.traits.packed_windows:  # as for one output: real positions over msl, a partial row a group
        full = scaled(tokens, per_token(loss) / spec.max_seq_length)
        rows = Interval(full.value + groups / 2, full.half_width + groups / 2)
    else:
        rows = scaled(tokens, per_token(sequences))
    return OutputPrediction(spec.path, spec.max_seq_length, documents, tokens, scaled(tokens, per_token(loss)), rows)


def _mixture_outputs(plan, mixed: MixturePrediction, documents: Interval, squares: list, job_params: dict,
                     groups: int) -> tuple:
    """Each output of a split job over a mixture. The split routes every document read before the mixture draws
    (a document's copies go where it goes), each to an output with probability its fraction, blind to its size
    and to the mixture's hash: an output holds that fraction of the documents read and of the mixed tokens and
    kept records. The draw's spread counts a document taken c times as c of its tokens at once: per source, the
    mean of c^2 (whole copies w, one more for a share r of its documents: w^2 + r(2w + 1)) times its documents'
    sum of squared tokens (`squares`, per source). Rows and loss-valid tokens per token taken: the sample job's
    outputs', pooled over the outputs of one max_seq_length (the draw is blind to content), over the tokens
    those outputs took (each output's `tokens_taken`: on a small sample the share an output gets strays far from
    its fraction, and a ratio over the fraction asked would carry that stray into every prediction)."""
    measured = {o["path"]: o for o in job_params.get("outputs") or []}
    pooled: dict = {}
    for spec in plan.splits.outputs:
        got = measured.get(spec.path, {})
        acc = pooled.setdefault(spec.max_seq_length, [0, 0, 0])
        for i, value in enumerate((got.get("loss_valid_tokens", 0), got.get("sequences", 0),
                                   got.get("tokens_taken", 0))):
            acc[i] += value
    c2 = []  # per source, the mean squared number of times a document is taken
    for p in mixed.sources:
        times = p.target.value / p.available.value if p.available.value else 0.0
        whole = math.floor(times)
        c2.append(whole**2 + (times - whole) * (2 * whole + 1))
    token_squares = sum(c * q for c, q in zip(c2, squares))
    kept_squares = sum(c * p.documents.value for c, p in zip(c2, mixed.sources)) * (
        mixed.kept.value / mixed.documents.value if mixed.documents.value else 0.0)
    out = []
    for spec in plan.splits.outputs:
        out.append(_output(plan, spec, split_share(documents, spec.fraction, documents.value),
                           split_share(mixed.tokens, spec.fraction, token_squares),
                           split_share(mixed.kept, spec.fraction, kept_squares), pooled[spec.max_seq_length], groups))
    return tuple(out)


def _groups(plan, sizes: list, mixed: Optional[MixturePrediction]) -> int:
    """The job's packing groups: every file's bytes in groups of `group_bytes`, once per copy a mixture takes of
    its source (whole copies, and the partial one)."""
    copies = [1.0] * len(sizes)
    if mixed is not None:
        per_source = [p.target.value / p.available.value if p.available.value else 0.0 for p in mixed.sources]
        copies = [per_source[s] for s in plan.mixture_sources]
    return sum(math.ceil(max(size, 1) / plan.group_bytes) * max(1, math.ceil(c)) for size, c in zip(sizes, copies))


def _one_record(sample_dir: str, target: str) -> str:
    """A directory holding the first record of the sample (the first line of its first file), for a job of one
    record: what any job costs beyond its data."""
    for root, _, names in sorted(os.walk(sample_dir)):
        for name in sorted(names):
            with open(os.path.join(root, name), "rb") as f:
                line = f.readline()
            if line.strip():
                os.makedirs(target, exist_ok=True)
                path = os.path.join(target, "one" + os.path.splitext(name)[1])
                with open(path, "wb") as out:
                    out.write(line.rstrip(b"\n") + b"\n")
                return target
    raise RuntimeError(f"estimate: the sample in {sample_dir} holds no record")


def _sample_budgets(spec, mixed: MixturePrediction, sample_tokens: list) -> list:
    """The sample job's mixture: each source asked, of the tokens the sample holds of it, the share of its
    available tokens the job will take (copies included), so that the sample is mixed as the job will be. A
    source the sample holds nothing of is left out."""
    out = []
    for s, prediction, have in zip(spec.sources, mixed.sources, sample_tokens):
        if have <= 0 or prediction.available.value <= 0:
            continue
        times = prediction.target.value / prediction.available.value
        budget = max(1, int(round(times * have)))
        out.append({"source": s.name, "name": s.name, "tokens": budget,
                    "max_repeats": max(1, math.ceil(budget / have) + 1)})
    return out


def _summed_outputs(params: dict) -> dict:
    """A split job's totals over its outputs, as one output's post-process names them."""
    outputs = params.get("outputs") or []
    return {"n_examples": sum(o["sequences"] for o in outputs),
            "loss_valid_tokens": sum(o["loss_valid_tokens"] for o in outputs)}


def _sample_job(config: Config, sample_dir: str, out: str, budgets: Optional[list] = None
                ) -> tuple[dict, float, int, list]:
    """The job on the sample: every sampled document once, as drawn; or, with `budgets` (a mixture), the sources
    under `sample_dir` mixed by them. Its data_params.json, its CPU seconds, the bytes of its files, and per
    file (its path under `out`) the compressed size of each of its rows (HDF5 chunks, a row each)."""
    from transforms.io.hdf5_format import chunk_sizes
    from pipelines.job import run

    values = dict(input_dir=sample_dir, output_dir=out, metadata_files=None, hf_dataset=None, hf_split=None,
                  hf_options=None, display_pbar=False, resume_from_checkpoint=False, overwrite_output=False,
                  total_tokens=None, shuffle=False, mixture=None)
    if budgets:
        values["mixture"] = json.dumps([{**b, "source": os.path.join(sample_dir, b["source"])} for b in budgets])
        values["input_dir"] = None
    sample_config = config.replace(**values)
    cpu = time.process_time()
    with contextlib.redirect_stderr(io.StringIO()):  # its summary line is about the sample, not the job
        params = run(sample_config, ["--runner", "FnApiRunner"])
    cpu = time.process_time() - cpu
    files = sorted(os.path.relpath(os.path.join(root, name), out) for root, _, names in os.walk(out)
                   for name in names if name.endswith(".h5"))
    return (params, cpu, sum(os.path.getsize(os.path.join(out, f)) for f in files),
            {f: chunk_sizes(os.path.join(out, f)) for f in files})


def _process_age() -> float:
    """Seconds since this process started (interpreter, imports, the tokenizer: what a job pays too); Linux's
    /proc, else 0."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def render(e: Estimate, mode: str) -> str:
    def fmt(i: Interval, unit: str = "") -> str:
        return f"{_human(i.value)}{unit}  (95%: {_human(i.low)}-{_human(i.high)}, +-{i.relative:.1%})"

    lines = [f"estimate of the {mode} job from a {e.fraction:.2%} sample:",
             f"  documents         {fmt(e.documents)}" + ("  read" if e.mixture else "")]
    if e.mixture is not None:
        lines.append(f"  documents used    {fmt(e.mixture.documents)}  (copies included)")
        tokens = fmt(e.tokens) + "  taken by the mixture"
        if e.total_tokens is not None:
            tokens += f" (total_tokens {e.total_tokens:,}: each source within one document of its target)"
        lines.append(f"  tokens            {tokens}")
    else:
        lines.append(f"  tokens            {fmt(e.tokens)}")
    lines += [
             f"  loss-valid tokens {fmt(e.loss_valid_tokens)}",
             f"  rows              {fmt(e.rows)}",
             f"  files             {e.files[1]}  (95%: {e.files[0]}-{e.files[2]})",
             f"  bytes on disk     {fmt(e.bytes_on_disk, 'B')}",
             f"  wall time here    {_duration(e.seconds)}  (this machine, {os.cpu_count()} cores"
             + (f", {e.startup_seconds:.1f} s of start-up included)" if e.startup_seconds
                else ", start-up not counted)"),
             f"  Dataflow          {e.vcpu_hours.value:.3g} vCPU-hours (+-{e.vcpu_hours.relative:.1%}), "
             f"{_dollars(e.vcpu_hours.value * DATAFLOW_USD_PER_VCPU_HOUR)} at ${DATAFLOW_USD_PER_VCPU_HOUR}/vCPU-hour "
             "(docs/dataflow.md)"]
    for o in e.outputs:
        lines.append(f"  output {o.path:<16} documents {fmt(o.documents)}; tokens {fmt(o.tokens)}")
        lines.append(f"  {'':<23} rows {fmt(o.rows)}; loss-valid tokens {fmt(o.loss_valid_tokens)} "
                     f"(msl {o.max_seq_length})")
    if e.mixture is not None:
        for p in e.mixture.sources:
            lines.append(f"  source {p.name:<10} available {fmt(p.available)} tokens, {_human(p.documents.value)} "
                         f"documents")
            lines.append(f"  {'':<17} target {_human(p.target.value)} tokens; taken {fmt(p.taken)} tokens, "
                         f"{_human(p.taken_documents.value)} documents, {_human(p.repeats.value)} of them repeats "
                         f"(95%: {_human(p.repeats.low)}-{_human(p.repeats.high)})")
        if e.mixture.limited_by:
            lines.append(f"  (the total is set by source {e.mixture.limited_by}'s max_repeats)")
    else:
        for name, i in e.per_source.items():
            lines.append(f"  source {name:<10} {fmt(i)} tokens available")
    if e.mixture_total is not None:
        lines.append(f"  largest mixture   {fmt(e.mixture_total)} tokens (every source within its max_repeats)")
    lines.extend(f"  note: {n}" for n in e.notes)
    lines.append(f"  (this estimate took {e.sample_seconds:.1f} s, {e.startup_seconds:.1f} s of it start-up; "
                 "nothing was written to the output)")
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _dollars(x: float) -> str:
    return f"about ${x:,.2f}" if x >= 0.01 else "under $0.01"


def _human(x: float) -> str:
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}" if x != int(x) else str(int(x))


def main(argv: list[str], head_start: Optional[HeadStart] = None) -> int:
    """`argv`: what follows `estimate`; `head_start`: the job's flags among them, parsed already
    (pipelines.process.HeadStart), not parsed again."""
    from pipelines.plan import UserError

    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.split("\n\n")[0] + "\n\n" + "usage: create_hdf5_dataset estimate MODE [flags of the job] "
              f"[--sample {DEFAULT_SAMPLE}|0.01|64MB] [--sample_seed 0]")
        return 0
    try:
        rest, sample, seed = split_estimate_args(argv)
        config, _ = head_start.load() if head_start is not None else load_config(rest)
        result = estimate(config, sample, seed, startup=_process_age())
    except (ConfigError, UserError) as e:
        print(f"create_hdf5_dataset estimate: error: {e}", file=sys.stderr)
        return 2
    print(render(result, config.mode))
    return 0
