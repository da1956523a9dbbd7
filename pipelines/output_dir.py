"""The output directory before a job writes to it: refused, emptied, or resumed; then claimed.

A directory that holds something is refused unless --overwrite_output
(the datasets a run writes there are removed: shards, data_params.json, dead
letters, scratch space; nothing else) or --resume_from_checkpoint (only over
the partial output of the same configuration). Before any shard exists, the
directory's OUT/.tmp/job.json records which configuration it belongs to.
"""

import json
import os
from typing import Optional

import fsspec

from pipelines.config import Config
from pipelines.plan import JobPlan, UserError
from transforms.io import fs
from transforms.io.dead_letters import DEAD_LETTER_DIR
from transforms.io.dedup_index import INDEX_FILE, PARTS_DIR
from transforms.io.listing import DEDUP_DIR, FILTERED_DIR
from transforms.io.manifest import PARAMS_FILE

__all__ = ["check_output_dir", "claim_output_dir", "read_params", "HOOK_FILE", "JOB_FILE"]

HOOK_FILE = "hook.py"  # where 2.10 saves its read hook's source, under the output directory
JOB_FILE = "job.json"  # inside OUT/.tmp: the fingerprint of the configuration that owns the partial output


def check_output_dir(config: Config, plan: JobPlan) -> None:
    """An output directory that holds something: emptied (--overwrite_output), checked for resuming, or refused.
    So is a dedup index directory (--dedup_index)."""
    if plan.dedup_index is not None:
        _check_index_dir(config, plan.dedup_index)
    out = config.output_dir
    names = fs.listdir_names(out)
    if not names:
        return
    if config.resume_from_checkpoint:
        _check_resumable(config, names)
        return
    if config.overwrite_output:
        # A split job's outputs (those of the run being replaced, and this one's) are datasets of their own.
        old = _read_json(fs.join(out, PARAMS_FILE)) or {}
        mine = {o.path for o in plan.splits.outputs} if plan.splits else set()
        for path in sorted({o["path"] for o in old.get("outputs", []) if o.get("path")} | mine):
            _remove_dataset(fs.join(out, path), fs.listdir_names(fs.join(out, path)))
            _remove_empty_dirs(out, path)
        _remove_dataset(out, names)
        return
    raise UserError(f"output_dir {out} is not empty ({len(names)} entries): pass --overwrite_output True "
                    "to replace the dataset in it, --resume_from_checkpoint True to finish an interrupted "
                    "run, or choose another directory")


def _check_index_dir(config: Config, directory: str) -> None:
    """An index directory already holding an index is replaced only with --overwrite_output (or finished on
    resume: its parts are written again, the same bytes)."""
    names = fs.listdir_names(directory)
    if not names or config.resume_from_checkpoint:
        return
    if not config.overwrite_output:
        raise UserError(f"dedup_index {directory} is not empty: pass --overwrite_output True to replace the index "
                        "in it, or choose another directory")
    for name in names:
        if name == INDEX_FILE:
            fs.remove_file(fs.join(directory, name))
        elif name == PARTS_DIR:
            fs.remove_tree(fs.join(directory, name))


def _remove_dataset(directory: str, names: list[str]) -> None:
    """What a run writes into a dataset directory: shards, data_params.json, dead letters, the listings of the
    records removed on purpose (dedup/, filtered/), scratch space."""
    for name in names:
        if name.endswith(".h5") or name in (PARAMS_FILE,):
            fs.remove_file(fs.join(directory, name))
        elif name in (DEAD_LETTER_DIR, DEDUP_DIR, FILTERED_DIR, fs.TMP_DIR):
            fs.remove_tree(fs.join(directory, name))


def _remove_empty_dirs(root: str, path: str) -> None:
    """root/path and its parents below root, those left empty (local only: a bucket has no directories)."""
    if not fs.is_local(root):
        return
    parts = path.split("/")
    for depth in range(len(parts), 0, -1):
        try:
            os.rmdir(os.path.join(root, *parts[:depth]))
        except OSError:
            return  # not empty, or not there


def _read_json(path: str) -> Optional[dict]:
    try:
        with fsspec.open(path, "r") as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _check_resumable(config: Config, names: list[str]) -> None:
    """Refuse to resume over the partial output of a different configuration."""
    out, mine = config.output_dir, config.fingerprint()
    owner = _read_json(fs.join(out, fs.TMP_DIR, JOB_FILE)) or _read_json(fs.join(out, PARAMS_FILE)) or {}
    theirs = owner.get("config_fingerprint")
    if theirs is None and any(n.endswith(".h5") for n in names):
        raise UserError(f"output_dir {out} holds .h5 files of an unknown run: cannot resume over them")
    if theirs is not None and theirs != mine:
        raise UserError(f"output_dir {out} holds the partial output of a different configuration "
                        f"(fingerprint {theirs}, this run {mine}): resume with the same settings, or use "
                        "--overwrite_output True")


def claim_output_dir(config: Config) -> None:
    """Record which configuration the (partial) output belongs to, before any shard exists."""
    if fs.is_local(config.output_dir):
        os.makedirs(fs.join(config.output_dir, fs.TMP_DIR), exist_ok=True)
    fs.write_text_atomic(fs.join(config.output_dir, fs.TMP_DIR, JOB_FILE),
                         json.dumps({"config_fingerprint": config.fingerprint()}))


def read_params(output_dir: str) -> Optional[dict]:
    """The dataset's data_params.json (None when there is none yet)."""
    return _read_json(fs.join(output_dir, PARAMS_FILE))
