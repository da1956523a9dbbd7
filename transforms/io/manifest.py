"""The file written after every shard and dead letter: data_params.json, last.

data_params.json is the completion marker: it is written only once every
shard is committed, so its presence means the dataset is complete. The Beam
side (the steps that gather the shards and statistics and call `finalize`)
is transforms/stages/manifest.py.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Optional

from transforms.core.features import LM_FEATURES, VSL_FEATURES
from transforms.core.decontam import decontam_section
from transforms.core.dedup import dedup_section
from transforms.core.langid import language_section
from transforms.core.quality import quality_section
from transforms.core.mixture import mixture_section, output_tokens_taken
from transforms.core.stats import (ENCODER_CHECK, H5_ROWS, ROLE_TOKENS, ROLE_TRAINED, ROWS_DROPPED, Stats,
                                   check_accounting, h5_stats_section, input_section, merge, post_process_section)
from transforms.core.tokenizer.fast import CHECK_FIELDS
from transforms.core.timing import TIME_PREFIX
from transforms.io import fs

STAGES = ("read", "normalize", "language", "quality", "decontaminate", "tokenize", "pack", "fim", "encode", "shuffle", "write")

__all__ = ["PARAMS_FILE", "EMPTY_NOTE", "STAGES", "build_params", "finalize", "build_summary", "finalize_split"]

PARAMS_FILE = "data_params.json"
# data_params.json's "empty" of a dataset without rows.
EMPTY_NOTE = "no rows: no document reached this output, or none made a row (see input)"


def build_params(shards: list, stats: Stats, sections: dict, *, eos_id: int, pad_id: int, vocab_size: int,
                 extra: dict, dead_letters: Optional[int] = None, features: tuple = LM_FEATURES) -> dict:
    """data_params.json's content; raises if the files, the dead letters and the counts disagree.

    `dead_letters`: records written to OUT/dead_letter (None: not checked).
    `features`: the names of a row's features, in order (Cerebras 2.10's loaders read them from here).
    """
    written = Counter(stats.with_prefix(H5_ROWS))
    in_files = sum(s.num_sequences for s in shards)
    if written["num_sequences"] != in_files:
        raise RuntimeError(f"{in_files} rows in the committed files, but {written['num_sequences']} were encoded")
    params = {k: dict(v) for k, v in sections.items()}
    params["features"] = list(features)
    params["post-process"] = post_process_section(stats, written, eos_id=eos_id, pad_id=pad_id,
                                                  vocab_size=vocab_size, vsl=tuple(features) == VSL_FEATURES)
    params["h5_dataset_stats"] = h5_stats_section(written)
    params["input"] = input_section(stats)
    rows_dropped = stats.with_prefix(ROWS_DROPPED)
    if rows_dropped:
        params["rows_dropped_by_reason"] = rows_dropped
    tokens_by_role = stats.with_prefix(ROLE_TOKENS)
    if tokens_by_role:  # Chat modes: where the tokens and the loss are, by role (counted as encoded)
        params["chat"] = {"tokens_by_role": tokens_by_role,
                          "loss_valid_tokens_by_role": stats.with_prefix(ROLE_TRAINED)}
    params["files"] = {s.name: s.num_sequences for s in sorted(shards, key=lambda s: s.index)}
    if not in_files:
        # A valid dataset of no rows (an output no document reached, or none that made a row): said here, so
        # that a reader and `verify` tell it from one whose files went missing.
        params["empty"] = EMPTY_NOTE
    params.update(extra)
    checks = stats.with_prefix(ENCODER_CHECK)
    if checks:  # fastokens encoded: what its in-job cross-check did (every field, zeros included)
        params["tokenizer"] = {**params.get("tokenizer", {}),
                               "cross_check": {name: checks.get(name, 0) for name in CHECK_FIELDS}}
    run = dict(params.get("run", {}))
    if stats["groups_resumed"]:
        run["groups_resumed"] = stats["groups_resumed"]
    # Summed over workers, so on several workers they exceed the wall time.
    timers = Counter(stats.with_prefix(TIME_PREFIX))
    for shard in shards:
        timers.update({stage: int(seconds * 1000) for stage, seconds in shard.seconds.items()})
    run["stage_seconds"] = {k: round(timers[k] / 1000, 2) for k in STAGES if k in timers}
    params["run"] = run
    problems = check_accounting(params["input"])
    if dead_letters is not None and dead_letters != params["input"]["bad"]:
        problems.append(f"{dead_letters} dead letters written, {params['input']['bad']} bad records counted")
    if problems:
        raise RuntimeError("document accounting does not add up: " + "; ".join(problems))
    return params


# The sections of the stages that remove records: each built from the stage's summary (a singleton list) and
# what the batches counted removed.
STEP_SECTIONS = {"dedup": dedup_section, "decontamination": decontam_section, "language": language_section,
                 "quality": quality_section}


def _step_sections(params: dict, steps: dict, stats: Stats) -> None:
    for name, summary in steps.items():
        if summary:
            params[name] = STEP_SECTIONS[name](summary[0], stats)


def finalize(shards: list, stats: Stats, dead_letters: int, output_dir: str, sections: dict, ids: dict,
             extra: dict, features: tuple, mixture: Optional[list] = None, **steps) -> dict:
    """Write an output's data_params.json (`build_params`), then remove its OUT/.tmp; the params written.
    `steps`: the summaries of the stages that removed records, by section name (STEP_SECTIONS)."""
    params = build_params(shards, stats, sections, extra=extra, dead_letters=dead_letters, features=features, **ids)
    if mixture:  # the plan's summary (a singleton list), with what the job took of each source
        params["mixture"] = mixture_section(mixture[0], stats)
    _step_sections(params, steps, stats)
    fs.makedirs(output_dir)  # an output that received no document has no directory yet
    fs.write_text_atomic(fs.join(output_dir, PARAMS_FILE), json.dumps(params, indent=4, sort_keys=True) + "\n")
    fs.remove_tree(fs.join(output_dir, fs.TMP_DIR))
    return params


def build_summary(outputs: tuple, params: list, stats: list, rest: Stats, sections: dict, *,
                  dead_letters: Optional[int], extra: dict) -> dict:
    """OUT/data_params.json of a split job: every output's counts, the fractions asked and obtained, and the
    job's input accounting (every record read is in exactly one output, dropped there, or a dead letter).

    `outputs`: transforms.core.splits.Output per output; `params`, `stats`: each output's data_params.json
    and Stats, in the same order; `rest`: what no document carries (bad records, reading).
    """
    job = merge([rest, *stats])
    section = input_section(job)
    problems = check_accounting(section)
    if dead_letters is not None and dead_letters != section["bad"]:
        problems.append(f"{dead_letters} dead letters written, {section['bad']} bad records counted")
    if problems:
        raise RuntimeError("document accounting does not add up: " + "; ".join(problems))
    by_subset = Counter()
    for out, p in zip(outputs, params):
        by_subset[out.subset] += p["input"]["documents_read"]
    rows = []
    for out, p in zip(outputs, params):
        post, documents = p["post-process"], p["input"]["documents_read"]
        rows.append({
            "path": out.path, "subset": out.subset, "split": out.split, "max_seq_length": out.max_seq_length,
            "fraction_asked": round(out.fraction, 6),
            # Of the documents of its subset: each document's output is an independent draw.
            "fraction_obtained": round(documents / by_subset[out.subset], 6) if by_subset[out.subset] else 0.0,
            "documents": documents, "documents_used": p["input"]["used"], "sequences": post["n_examples"],
            "tokens": post["num_tokens"], "loss_valid_tokens": post["loss_valid_tokens"],
            "files": len(p["files"]),
        })
    summary = {k: dict(v) for k, v in sections.items()}
    summary["outputs"] = rows
    summary["input"] = section
    summary.update(extra)
    checks = [p["tokenizer"]["cross_check"] for p in params if "cross_check" in p.get("tokenizer", {})]
    if checks:
        summary["tokenizer"] = {**summary.get("tokenizer", {}),
                                "cross_check": {name: sum(c[name] for c in checks) for name in CHECK_FIELDS}}
    run = dict(summary.get("run", {}))
    # Reading and routing are the job's; the rest is each output's.
    timers = Counter(rest.with_prefix(TIME_PREFIX))
    for p in params:
        timers.update({stage: int(seconds * 1000) for stage, seconds in p["run"].get("stage_seconds", {}).items()})
    run["stage_seconds"] = {k: round(timers[k] / 1000, 2) for k in STAGES if k in timers}
    if job["groups_resumed"]:
        run["groups_resumed"] = job["groups_resumed"]
    summary["run"] = run
    return summary


def finalize_split(shards: list, stats_by_part: list, rest: Stats, dead_letters: int, output_dir: str,
                   outputs: tuple, output_dirs: tuple, sections: tuple, extras: tuple, ids: dict, features: tuple,
                   summary_sections: dict, summary_extra: dict, mixture: Optional[list] = None, **steps) -> dict:
    """Write every output's data_params.json, then the job's OUT/data_params.json (`build_summary`); the summary."""
    stats = dict(stats_by_part)
    params, part_stats = [], []
    for k in range(len(outputs)):
        mine = [s for s in shards if s.part == k]
        part_stats.append(stats.get(k, Stats()))  # an output no group reached (none does: every group has a share)
        params.append(finalize(mine, part_stats[-1], None, output_dirs[k], sections[k], ids, extras[k], features))
    summary = build_summary(outputs, params, part_stats, rest, summary_sections, dead_letters=dead_letters,
                            extra=summary_extra)
    if mixture:  # the plan is the job's: what each source gave, over every output (each has its own counters)
        summary["mixture"] = mixture_section(mixture[0], merge([rest, *part_stats]))
        for row, part in zip(summary["outputs"], part_stats):  # what each output took of it (verify adds them up)
            row["tokens_taken"] = output_tokens_taken(part)
    # The job's too: duplicates and evaluation text are found across the outputs.
    _step_sections(summary, steps, merge([rest, *part_stats]))
    fs.write_text_atomic(fs.join(output_dir, PARAMS_FILE), json.dumps(summary, indent=4, sort_keys=True) + "\n")
    fs.remove_tree(fs.join(output_dir, fs.TMP_DIR))
    return summary
