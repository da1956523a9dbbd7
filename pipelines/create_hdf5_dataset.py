"""create_hdf5_dataset: raw text corpora -> training-ready HDF5, as an Apache Beam pipeline.

    create_hdf5_dataset LMData --input_dir DIR --output_dir OUT \\
        --tokenizer_type GPT2Tokenizer --vocab_file vocab.bpe --encoder_file encoder.json \\
        [--params cfg.yaml] [reference flags] [Beam pipeline options]

Three layers: `main` parses flags and YAML and checks everything that can be
checked before a worker starts; `plan_job` turns the config into plain
values; `build` only wires stages.
"""

if __name__ == "__main__":
    # As `python -m`: settings only the process's first lines can make, before numpy and Beam load.
    from pipelines import process

    process.prepare()

import argparse
import shutil
import atexit
import dataclasses
import json
import logging
import os
import sys
import time
from typing import Optional

import apache_beam as beam
import fsspec
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from pipelines import process
from pipelines.beam_notices import drop_errors_said_again
from pipelines.config import (CHAT_MODES, DPO, FIM, LMDATA, SUMMARIZATION, SUMMARIZATION_MODES,
                              SUMMARIZATION_VSL, TOOLS, VSL_MODES, Config, ConfigError, job_max_seq_lengths,
                              load_config)
from pipelines.job_tokenizer import chat_template_setting, tokenizer_files
from transforms.core.chat.batch import ChatConfig, RecordCheck
from transforms.core.features import DPO_FEATURES, KEY_PADDING_FEATURES, LM_FEATURES, VSL_FEATURES
from transforms.core.fim import FimConfig, make_fim_config
from transforms.core import fast_ftfy
from transforms.core.mixture import MixturePlan, MixtureSpec, parse_mixture
from transforms.core.normalize import NormalizeConfig
from transforms.core.pack import PackConfig
from transforms.core.records import InputFile, PerPart
from transforms.core.regions import RegionDefaults
from transforms.core.splits import SplitPlan, check_name, make_split_plan, subset_of
from transforms.core.summarization import SummarizationConfig
from transforms.core.tokenizer import TokenizerFiles, shared_tokenizer
from transforms.core.vsl import VslConfig
from transforms.io import fs, progress
from transforms.io.discover import discover_input_files, discover_source
from transforms.io.hf_datasets import HfDatasetError, resolve_split_files
from transforms.io.compressors import Codec
from transforms.io.hdf5_format import GZIP_LEVEL
from transforms.io.hdf5_sink import EncodeRows, RowFormat, WriteHdf5Shards
from transforms.io.hooks import (DOCUMENT, PREFERENCE, REGIONS, HookSpec, ReadHookCheck, hook_source, load_hook,
                                 parse_hook_spec)
from transforms.io.intermediate import MIXTURE_PLAN, STORED, SkipStoredGroups, StoreGroups, load_mixture_plan
from transforms.io.job_progress import FlinkRestMetrics, JobProgress, live_metrics
from transforms.io.dead_letters import DEAD_LETTER_DIR, WriteDeadLetters
from transforms.io.manifest import PARAMS_FILE, MergeStats, WriteDatasetParams, WriteSplitParams
from transforms.io.read_corpus import DEAD_LETTERS, DOCS, FAN_OUT_BYTES, ReadCorpus, ReadInputManifest, \
    write_input_manifest
from transforms.io.tokenizer_files import StagedTokenizerFiles, read_chat_template, stage_tokenizer_files
from transforms.stages.chat import BuildChatRows, EncodeConversations
from transforms.stages.fim import ApplyFim
from transforms.stages.mixture import MixtureError, SelectMixture
from transforms.stages.normalize import NormalizeDocuments
from transforms.stages.pack import PackSequences
from transforms.stages.splits import REST, RouteDocuments, SeparateRest
from transforms.stages.summarize import BuildSummarizationRows
from transforms.stages.tokenize import TokenizeDocuments
from transforms.stages.vsl import PackDocumentsVsl

__all__ = ["main", "build", "plan_job", "runner_plan", "JobPlan", "UserError"]


HOOK_FILE = "hook.py"  # where 2.10 saves its read hook's source, under the output directory


class UserError(Exception):
    """A problem the user can fix; reported as one line, without a traceback."""


@dataclasses.dataclass(frozen=True)
class JobPlan:
    """Everything the pipeline needs, as plain values."""

    mode: str
    files: tuple  # InputFile: known to the launcher only; the job reads them from `input_manifest`
    input_manifest: str  # where launch() writes the list of input files for the workers
    keys: tuple
    join_keys: bool
    group_bytes: int
    max_record_bytes: int
    normalize: NormalizeConfig
    tokenizer_files: TokenizerFiles | StagedTokenizerFiles  # staged by launch(): what the DoFns carry
    split_len: Optional[int]
    remove_bos_in_chunks: bool
    pack: PackConfig
    summarization: Optional[SummarizationConfig]
    fim: Optional[FimConfig]
    vsl: Optional[VslConfig]
    chat: Optional[ChatConfig]
    seed: int
    output_dir: str
    output_name: str
    files_per_record: int
    num_output_files: Optional[int]
    sections: dict
    eos_id: int
    pad_id: int
    vocab_size: int
    extra: dict
    shuffle_seed: Optional[int] = None  # None: output in input order
    gzip_level: int = GZIP_LEVEL
    codec: Codec = Codec()  # who deflates the chunks (--compressor), at gzip_level
    storage_dir: Optional[str] = None  # where packed groups wait (disk strategy); None: the runner's GroupByKey
    resume: bool = False
    unit_groups: int = 1  # packing groups per work unit of a large .jsonl/.parquet file
    fan_out_bytes: Optional[int] = None  # files read in order and larger than this hand their groups on; None: never
    process_cpus: Optional[int] = None  # cores one worker process may use; None: all of this machine's
    splits: Optional[SplitPlan] = None  # several datasets under output_dir (subsets, splits, lengths); None: one
    hook: Optional[HookSpec] = None  # a Cerebras 2.10 config's read hook (its source is saved as OUT/hook.py)
    hook_kwargs: tuple = ()  # its read_hook_kwargs, as sorted (name, value) pairs
    region_defaults: Optional[RegionDefaults] = None  # the config's semantic_* maps, when the hook's regions count
    mixture: Optional[MixtureSpec] = None  # sources taken by token budget (transforms.core.mixture)
    mixture_sources: tuple = ()  # per input file, the index of its mixture source
    mixture_plan: Optional[MixturePlan] = None  # on resume: the plan the interrupted run kept
    txt_lines: bool = False  # a .txt file is a record per line (Cerebras 2.10's reading), else one document

    @property
    def features(self) -> tuple:
        """The names of a row's features, in order: data_params.json's `features`."""
        if self.mode == DPO:
            return DPO_FEATURES
        if self.chat is not None and not isinstance(self.chat, PerPart) and self.chat.key_padding_mask:
            return KEY_PADDING_FEATURES
        return VSL_FEATURES if self.mode in VSL_MODES else LM_FEATURES

    def for_output(self, k: int) -> "JobPlan":
        """The plan of a split job's output k: its own directory and max sequence length, one dataset."""
        out = self.splits.outputs[k]
        msl = out.max_seq_length

        def with_msl(config):
            return None if config is None else dataclasses.replace(config, max_seq_length=msl)

        output_dir = fs.join(self.output_dir, out.path) if out.path else self.output_dir
        sections = {name: dict(body) for name, body in self.sections.items()}
        given = self.sections["setup"]["output_dir"]  # data_params.json records the user's spelling
        sections["setup"]["output_dir"] = fs.join(given, out.path) if out.path else given
        sections["processing"]["max_seq_length"] = msl
        split = {"path": out.path, "subset": out.subset, "split": out.split, "max_seq_length": msl,
                 "fraction": out.fraction, "split_seed": self.splits.seed, "job_output_dir": given}
        return dataclasses.replace(
            self, splits=None, output_dir=output_dir, sections=sections, extra={**self.extra, "split": split},
            pack=with_msl(self.pack), summarization=with_msl(self.summarization), fim=with_msl(self.fim),
            vsl=with_msl(self.vsl), chat=with_msl(self.chat))

    @property
    def row_format(self) -> RowFormat:
        return RowFormat(max_seq_length=self.pack.max_seq_length, pad_id=self.pad_id,
                         inverted_mask=self.sections["dataset"]["inverted_mask"],
                         trailing_eos_input=self.mode in (SUMMARIZATION, FIM, DPO),
                         sides=2 if self.mode == DPO else 1)


def _relpath(path: str, root: Optional[str]) -> str:
    """The path relative to the input root: the identity that seeds derive from."""
    if root and "://" in root and "://" in path:
        # Listings may spell a URL differently from the user (memory://x vs memory:///x).
        root = root.split("://", 1)[1].lstrip("/")
        path = path.split("://", 1)[1].lstrip("/")
    if root and fs.is_local(path) and fs.is_local(root):
        rel = os.path.relpath(path, root)
        if not rel.startswith(".."):
            return rel.replace(os.sep, "/")
    if root and path.startswith(root.rstrip("/") + "/"):
        return path[len(root.rstrip("/")) + 1:]
    return path


JOB_FILE = "job.json"  # inside OUT/.tmp: the fingerprint of the configuration that owns the partial output
INPUT_MANIFEST = "inputs.jsonl"  # inside OUT/.tmp: the input files, read by the workers


def _check_output_dir(config: Config, plan: JobPlan) -> None:
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


def _remove_dataset(directory: str, names: list[str]) -> None:
    """What a run writes into a dataset directory: shards, data_params.json, dead letters, scratch space."""
    for name in names:
        if name.endswith(".h5") or name in (PARAMS_FILE,):
            fs.remove_file(fs.join(directory, name))
        elif name in (DEAD_LETTER_DIR, fs.TMP_DIR):
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


def _claim_output_dir(config: Config) -> None:
    """Record which configuration the (partial) output belongs to, before any shard exists."""
    if fs.is_local(config.output_dir):
        os.makedirs(fs.join(config.output_dir, fs.TMP_DIR), exist_ok=True)
    fs.write_text_atomic(fs.join(config.output_dir, fs.TMP_DIR, JOB_FILE),
                         json.dumps({"config_fingerprint": config.fingerprint()}))


def _storage_dir(config: Config, local_runner: bool) -> Optional[str]:
    """Where packed groups wait for the writers (None: in the runner's GroupByKey).

    Locally: on this machine's disk, so memory does not grow with the input.
    On a distributed runner: in the output's bucket, so the rows cross the
    service's shuffle at most once (the layout's side input is a barrier, and
    what crosses it is written out by the service) and an interrupted job can
    resume.
    """
    strategy, output_dir = config.shuffle_strategy, fs.absolute(config.output_dir)
    if strategy == "runner":
        return None
    if not local_runner:
        if not fs.is_local(output_dir):
            return fs.join(output_dir, fs.TMP_DIR, "groups")
        if strategy == "disk":
            raise UserError("shuffle_strategy disk keeps packed groups under output_dir, which remote workers "
                            "can only share when it is a bucket (gs://...): use auto or runner")
        return None
    if fs.is_local(output_dir):
        return fs.join(output_dir, fs.TMP_DIR, "groups")
    import tempfile

    return tempfile.mkdtemp(prefix="create_hdf5_dataset_groups_")


def _process_cpus(options: PipelineOptions) -> Optional[int]:
    """Cores one SDK process gets, when the runner shares a machine among several; None: all of them.

    Dataflow starts one Python SDK process per vCPU (unless the experiment
    no_use_multiple_sdk_containers is set); the DirectRunner's multi_processing
    mode starts direct_num_workers processes on this machine.
    """
    from apache_beam.options.pipeline_options import DebugOptions, DirectOptions

    from transforms.core.threads import machine_cpus

    if _runner_name(options) == "DataflowRunner":
        experiments = options.view_as(DebugOptions).experiments or []
        return None if "no_use_multiple_sdk_containers" in experiments else 1
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode == "multi_processing":
        workers = direct.direct_num_workers or machine_cpus()
        return max(1, machine_cpus() // workers)
    return None


def _runner_name(options: PipelineOptions) -> str:
    runner = options.get_all_options().get("runner") or "DirectRunner"
    runner = runner if isinstance(runner, str) else type(runner).__name__
    return runner.split(".")[-1]


def _is_local_runner(options: PipelineOptions) -> bool:
    return _runner_name(options) in LOCAL_RUNNERS


DEFAULT_RUNNER = "FnApiRunner"
LOCAL_RUNNERS = ("DirectRunner", "FnApiRunner", "SwitchingDirectRunner", "BundleBasedDirectRunner")


def plan_job(config: Config) -> JobPlan:
    """Resolve inputs and the tokenizer; raise UserError for anything the user must fix."""
    mixture, mixture_sources = None, ()
    if getattr(config, "mixture", None):
        mixture, paths, relpaths, mixture_sources = _mixture_inputs(config)
    else:
        paths, root = _input_paths(config)
        relpaths = [_relpath(p, root) for p in paths]
    subsets = _subsets(config, relpaths)
    if subsets != (None,):
        keep = [i for i, rel in enumerate(relpaths) if subset_of(rel) in subsets]
        paths, relpaths = [paths[i] for i in keep], [relpaths[i] for i in keep]
    # Workers open these: absolute, since a worker's working directory is not this process's (a relative
    # input_dir read on a Flink TaskManager names nothing). Seeds derive from the relative paths alone.
    files = tuple(InputFile(i, fs.absolute(p), rel, fs.local_size(p))
                  for i, (p, rel) in enumerate(zip(paths, relpaths)))
    output_dir = fs.absolute(config.output_dir)
    input_manifest = fs.join(output_dir, fs.TMP_DIR, INPUT_MANIFEST)
    try:
        tok_files = tokenizer_files(config)
        tokenizer = shared_tokenizer(tok_files)  # built already, or being built, when the command had a head start
    except (FileNotFoundError, ValueError, OSError) as e:
        raise UserError(f"tokenizer: {e}") from None
    _check_dtypes(config, tokenizer.vocab_size)
    splits = None
    if config.data_splits or config.context_splits or subsets != (None,):
        splits = make_split_plan(data_splits=config.data_splits, context_splits=config.context_splits,
                                 subsets=subsets, max_seq_length=config.max_seq_length, seed=config.split_seed)
        _check_msl_limit(config, tok_files)
    fim = None
    if config.mode == FIM:
        try:
            fim = make_fim_config(tokenizer, max_seq_length=config.max_seq_length, fim_rate=config.fim_rate,
                                  spm_rate=config.spm_rate, prefix_tok=config.fim_prefix_tok,
                                  middle_tok=config.fim_middle_tok, suffix_tok=config.fim_suffix_tok,
                                  inverted_mask=config.inverted_mask)
        except ValueError as e:
            raise UserError(f"FIM: {e}") from None

    try:
        codec = Codec(config.compressor, config.gzip_level).check()
    except ValueError as e:
        raise UserError(str(e)) from None
    sections = config.sections()
    sections["processing"]["eos_id"] = config.eos_id
    sections["processing"]["pad_id"] = config.pad_id
    if config.cerebras_config:  # where 2.10 records the ids its tokenizer resolved (update_args), and tools read them
        sections["processing"].update(eos_id=tokenizer.eos_id, pad_id=tokenizer.pad_id, vocab_size=tokenizer.vocab_size)
    if config.mode in CHAT_MODES:  # what the job used (a 2.10 config may get ChatML): verify rebuilds from it
        sections["processing"]["chat_template"] = chat_template_setting(config, tok_files)
    # Chat modes render and encode each conversation with offsets, which only tokenizers gives.
    encoder = {"encoder": "tokenizers"} if config.mode in CHAT_MODES else {
        "encoder": tokenizer.encoder_name, **({"encoder_note": tokenizer.encoder_note} if tokenizer.encoder_note else {})}
    extra = {"tokenizer": {"fingerprint": tokenizer.fingerprint(), "vocab_size": tokenizer.vocab_size,
                           "eos_id": tokenizer.eos_id, "pad_id": tokenizer.pad_id, "bos_id": tokenizer.bos_id,
                           "sep_id": tokenizer.sep_id, **encoder},
             # The files' bytes depend on the library's version too (their rows never do).
             "compression": {"compressor": codec.name, "gzip_level": codec.level, "library": codec.version()},
             "config_fingerprint": config.fingerprint()}
    if config.use_ftfy:  # its fixes change between versions; and whether the exact fast path covered this one
        extra["ftfy"] = fast_ftfy.ftfy_record()
    hook = _hook_spec(config)
    chat = _chat_config(config, tok_files, tokenizer) if config.mode in CHAT_MODES else None
    vsl = None
    if config.mode in VSL_MODES and chat is None:
        vsl = VslConfig(
            max_seq_length=config.max_seq_length, pad_id=tokenizer.pad_id, min_sequence_len=config.min_sequence_len,
            short_seq_prob=config.short_seq_prob, fold_long_doc=bool(getattr(config, "fold_long_doc", True)),
            pack_sequences=config.pack_sequences, inverted_mask=config.inverted_mask, eos_id=tokenizer.eos_id,
            sep_id=tokenizer.sep_id if config.mode == SUMMARIZATION_VSL else None)
    return JobPlan(
        mode=config.mode,
        files=files,
        input_manifest=input_manifest,
        keys=config.keys_tuple,
        join_keys=config.mode not in SUMMARIZATION_MODES + CHAT_MODES,
        group_bytes=config.packing_group_mb << 20,
        max_record_bytes=config.max_record_mb << 20,
        normalize=_normalize_config(config),
        tokenizer_files=tok_files,
        split_len=config.chunk_len_to_split if getattr(config, "split_text_to_tokenize", False) else None,
        remove_bos_in_chunks=bool(getattr(config, "remove_bos_in_chunks", False)),
        pack=PackConfig(
            max_seq_length=config.max_seq_length, pad_id=tokenizer.pad_id, pack_sequences=config.pack_sequences,
            min_sequence_len=config.min_sequence_len, short_seq_prob=config.short_seq_prob,
            # FIM rebuilds the mask of every row, inverting it itself.
            inverted_mask=config.inverted_mask and config.mode != FIM, write_remainder=config.write_remainder),
        summarization=SummarizationConfig(
            max_seq_length=config.max_seq_length, eos_id=tokenizer.eos_id, pad_id=tokenizer.pad_id,
            sep_id=tokenizer.sep_id, min_sequence_len=config.min_sequence_len,
            inverted_mask=config.inverted_mask, truncate=config.truncate) if config.mode == SUMMARIZATION else None,
        fim=fim,
        vsl=vsl,
        chat=chat,
        seed=config.seed,
        output_dir=output_dir,
        output_name=config.output_name,
        files_per_record=config.files_per_record,
        num_output_files=config.num_output_files,
        sections=sections,
        eos_id=tokenizer.eos_id,
        pad_id=tokenizer.pad_id,
        vocab_size=tokenizer.vocab_size,
        extra=extra,
        shuffle_seed=config.shuffle_seed if config.shuffle else None,
        gzip_level=config.gzip_level,
        codec=codec,
        resume=config.resume_from_checkpoint,
        splits=splits,
        hook=hook,
        txt_lines=config.txt_lines,
        hook_kwargs=tuple(sorted(config.hook_kwargs.items())),
        region_defaults=_region_defaults(config) if config.region_hook else None,
        mixture=mixture,
        mixture_sources=mixture_sources,
    )


def _mixture_inputs(config: Config) -> tuple[MixtureSpec, list, list, tuple]:
    """The mixture, its files (sorted by identity), their identities (`<source name>/<path in the source>`) and
    each file's source index."""
    try:
        spec = parse_mixture(json.loads(config.mixture), total_tokens=config.total_tokens, seed=config.mixture_seed)
    except ValueError as e:
        raise UserError(str(e)) from None
    found = []
    for k, source in enumerate(spec.sources):
        try:
            files, root = discover_source(source.path)
        except (FileNotFoundError, NotADirectoryError, ValueError) as e:
            raise UserError(f"mixture source {source.name}: {e}") from None
        found.extend((f"{source.name}/{_relpath(p, root)}", p, k) for p in files)
    seen: dict = {}
    for rel, path, k in found:
        if path in seen and seen[path] != k:
            raise UserError(f"mixture: {path} belongs to two sources ({spec.sources[seen[path]].name} and "
                            f"{spec.sources[k].name}): a document must have one target")
        seen[path] = k
    found.sort()
    return spec, [p for _, p, _ in found], [rel for rel, _, _ in found], tuple(k for _, _, k in found)


def _input_paths(config: Config) -> tuple[list, Optional[str]]:
    """The input files, and the root their relative paths (the identity seeds derive from) count from.

    A Hugging Face dataset's split is resolved to its files here, at launch, once (transforms.io.hf_datasets).
    """
    if config.hf_dataset:
        try:
            found = resolve_split_files(config.hf_dataset, config.hf_split, json.loads(config.hf_options or "{}"))
        except HfDatasetError as e:
            raise UserError(str(e)) from None
        return list(found.files), found.root
    try:
        paths = discover_input_files(config.input_dir, list(config.metadata_files or []) or None)
    except (FileNotFoundError, ValueError) as e:
        raise UserError(str(e)) from None
    return paths, None if config.metadata_files else config.input_dir


def _hook_spec(config: Config) -> Optional[HookSpec]:
    """The config's read hook; one whose regions make the rows is loaded here, so that a hook that cannot be
    imported (or a file that does not compile) fails now, not on every worker."""
    if config.read_hook is None:
        return None
    try:
        spec = parse_hook_spec(config.read_hook)
        if config.region_hook:
            load_hook(spec)
    except ValueError as e:
        raise UserError(str(e)) from None
    return spec


def _key_padding_mask(config: Config) -> bool:
    wanted = bool(getattr(config, "key_padding_mask", False))
    if wanted and not config.region_hook:
        raise UserError("key_padding_mask: only a read hook's regions can mask attention (Cerebras 2.10 config "
                        "with a hook of your own); this job has none")
    return wanted


def _region_defaults(config: Config) -> RegionDefaults:
    try:
        return RegionDefaults.from_processing(config.cerebras.get("processing") or {},
                                              pretraining=config.mode not in CHAT_MODES)
    except ValueError as e:
        raise UserError(str(e)) from None


def _normalize_config(config: Config) -> NormalizeConfig:
    from pipelines.cerebras210 import hook_strips

    return NormalizeConfig(config.use_ftfy, config.ftfy_normalizer, config.wikitext_detokenize,
                           strip=hook_strips(config.read_hook))


def _subsets(config: Config, relpaths: list[str]) -> tuple:
    """The subsets the job writes: top-level directories of input_dir, in sorted order; (None,): no subsets."""
    if config.top_level_as_subsets:
        outside = sorted(rel for rel in relpaths if subset_of(rel) is None)
        if outside:
            raise UserError(f"top_level_as_subsets: {len(outside)} input file(s) lie directly in input_dir, in no "
                            f"subset directory (e.g. {', '.join(outside[:3])}): move them into a subset, or list "
                            "the subsets to read with subsets")
        found = sorted({subset_of(rel) for rel in relpaths})
        try:
            return tuple(check_name("top_level_as_subsets: subset", name) for name in found)
        except ValueError as e:
            raise UserError(str(e)) from None
    if config.subsets:
        present = {subset_of(rel) for rel in relpaths}
        missing = [name for name in config.subsets if name not in present]
        if missing:
            raise UserError(f"subsets: no input files under {', '.join(fs.join(config.input_dir, m) for m in missing)}")
        return tuple(sorted(config.subsets))
    return (None,)


# transformers' model_max_length when the tokenizer sets none (int(1e30)): no limit.
_NO_LIMIT = 10 ** 18


def _check_msl_limit(config: Config, files: TokenizerFiles) -> None:
    """A context split's length must fit the tokenizer's model_max_length, when its config gives one."""
    limit = (files.tokenizer_config or {}).get("model_max_length")
    if not isinstance(limit, (int, float)) or limit >= _NO_LIMIT:
        return
    for name, msl in job_max_seq_lengths(config.as_dict()):
        if name != "max_seq_length" and msl > limit:
            raise UserError(f"{name}: max sequence length {msl} exceeds the tokenizer's model_max_length "
                            f"{int(limit)}")


def _chat_config(config: Config, files: TokenizerFiles, tokenizer) -> ChatConfig:
    """The chat template and what it sees, checked before any data is read."""
    from transforms.core.chat.template import ChatError, ChatRenderer, probe_template, renders_tool_calls, \
        template_tokens

    flag = chat_template_setting(config, files)
    try:
        template = read_chat_template(flag, files)
    except (FileNotFoundError, ValueError, OSError) as e:
        raise UserError(f"chat template: {e}") from None
    if files.tokenizer_config is not None:
        tokens = template_tokens(files.tokenizer_config, files.special_tokens_map)
    else:  # GPT2Tokenizer / NeoXTokenizer files have no config: the template sees their own EOS and BOS
        tokens = {name: tokenizer.backend.id_to_token(i) for name, i in (("eos_token", tokenizer.eos_id),
                                                                            ("bos_token", tokenizer.bos_id))
                  if i is not None}
    try:
        renderer = ChatRenderer(template, tokens)
    except ChatError as e:
        raise UserError(f"chat template: {e.detail or e.reason}") from None
    where = "dataset.chat_template" if flag and "{" in flag else flag or f"the tokenizer's ({files.name})"
    problem = probe_template(renderer)
    if problem is not None:
        raise UserError(f"chat template {where}: {problem}")
    if config.mode != "DPO" and config.source_of("tools_key") != "default" and not renders_tool_calls(renderer):
        # Asked for tool data explicitly: a template that leaves tools out would refuse every record that has them.
        raise UserError(f"chat template {where}: it does not write tools or tool calls (a probe conversation with "
                        f"both rendered without them), and --tools_key {config.tools_key} asks for them; use a "
                        f"template that renders tools (--chat_template FILE.jinja)")
    return ChatConfig(
        mode=config.mode, max_seq_length=config.max_seq_length, pad_id=tokenizer.pad_id, template=template,
        template_tokens=tuple(sorted(tokens.items())), role_key=config.role_key, content_key=config.content_key,
        normalize=_normalize_config(config),
        min_sequence_len=config.min_sequence_len, inverted_mask=config.inverted_mask,
        train_on_all_assistant_turns=bool(getattr(config, "train_on_all_assistant_turns", True)),
        truncate=getattr(config, "truncate", None), max_prompt_length=int(getattr(config, "max_prompt_length", 512)),
        pack_sequences=config.pack_sequences,
        loss_span=getattr(config, "chat_loss_span", "turn"), regions=config.region_hook and config.mode != DPO,
        bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id, key_padding_mask=_key_padding_mask(config))


def _check_dtypes(config: Config, vocab_size: int) -> None:
    import numpy as np

    info = np.iinfo(np.dtype(config.input_ids_dtype))
    if vocab_size - 1 > info.max:
        raise UserError(f"input_ids_dtype {config.input_ids_dtype} cannot hold ids up to {vocab_size - 1} "
                        f"(vocab_size {vocab_size}); use a wider dtype")
    if np.iinfo(np.int32).max < vocab_size - 1:
        raise UserError(f"vocab_size {vocab_size} does not fit the int32 HDF5 format")


def build(pipeline: beam.Pipeline, plan: JobPlan):
    """Wire the stages; returns the PCollection holding the final params dict."""
    read = (
        pipeline
        | "InputFiles" >> ReadInputManifest(plan.input_manifest)
        | "ReadCorpus" >> ReadCorpus(keys=plan.keys, join_keys=plan.join_keys, group_bytes=plan.group_bytes,
                                     max_record_bytes=plan.max_record_bytes, unit_groups=plan.unit_groups,
                                     fan_out_bytes=plan.fan_out_bytes, txt_lines=plan.txt_lines,
                                     check=record_check(plan))
    )
    docs, stored = read[DOCS], None
    # A mixture resumes from the plan its interrupted run kept; without one, no group was selected (and so none
    # stored) before it stopped.
    if plan.storage_dir and plan.resume and (plan.mixture is None or plan.mixture_plan is not None):
        copies = None
        if plan.mixture is not None:
            copies = (*(plan.mixture_plan.groups_of(k) for k in plan.mixture_sources), len(plan.files))
        skipped = docs | "SkipStoredGroups" >> SkipStoredGroups(plan.storage_dir, plan.splits, copies)
        docs, stored = skipped.todo, skipped[STORED]
    dead_letters = read[DEAD_LETTERS] | "DeadLetters" >> WriteDeadLetters(plan.output_dir)
    if plan.splits is None:
        tokens, mixture = _tokens(plan, docs), None
        if plan.mixture is not None:
            tokens, mixture = tokens | "SelectMixture" >> _select_mixture(plan)
        return _write(plan, _rows(plan, tokens), stored, dead_letters, mixture)
    return _build_splits(plan, docs, stored, dead_letters)


def _select_mixture(plan: JobPlan) -> SelectMixture:
    """The mixture's stage: its plan kept beside the stored groups (a resumable job), or the kept one used."""
    keep = fs.join(plan.output_dir, fs.TMP_DIR, MIXTURE_PLAN) if plan.storage_dir else None
    return SelectMixture(plan.mixture, plan.mixture_sources, len(plan.files), keep_plan=keep,
                         plan=plan.mixture_plan, encoded=plan.chat is not None,
                         storage_dir=fs.join(plan.storage_dir, "mixture") if plan.storage_dir else None)


def record_check(plan: JobPlan):
    """What the reader asks of each record it parsed: a read hook's regions, a chat's well-formedness, nothing."""
    if plan.region_defaults is not None:  # a record is what the hook's regions make of it, for the mode at hand
        output = DOCUMENT if plan.chat is None else PREFERENCE if plan.chat.dpo else REGIONS
        return ReadHookCheck(plan.hook, dict(plan.hook_kwargs), tuple(map(str, plan.keys)), plan.region_defaults,
                             output=output)
    return RecordCheck(plan.chat) if plan.chat else None


def _build_splits(plan: JobPlan, docs, stored, dead_letters):
    """Each document routed to one output; the outputs written by one set of transforms, each stage taking
    its settings for the output at hand (PerPart); every output's data_params.json, then the summary.

    Documents are read, normalized and tokenized once. The graph does not grow with the outputs.
    """
    splits = plan.splits
    outputs = [plan.for_output(k) for k in range(len(splits.outputs))]

    def per_part(get):
        return None if get(plan) is None else PerPart(tuple(get(o) for o in outputs))

    keyed = dataclasses.replace(plan, pack=per_part(lambda p: p.pack), fim=per_part(lambda p: p.fim),
                                summarization=per_part(lambda p: p.summarization), vsl=per_part(lambda p: p.vsl),
                                chat=per_part(lambda p: p.chat))
    routed = docs | "RouteDocuments" >> RouteDocuments(splits, plan.normalize if plan.chat is None else None)
    parts, rest = routed.parts, routed[REST]
    tokens, mixture = (parts | "EncodeConversations" >> _encode_conversations(keyed) if plan.chat is not None
                       else parts | "TokenizeDocuments" >> _tokenize(plan)), None
    if plan.mixture is not None:
        # After the routing: a document's copies are drawn with it, so they are all in its output.
        tokens, mixture = tokens | "SelectMixture" >> _select_mixture(plan)
    rows = _rows(keyed, tokens)
    if plan.storage_dir:
        rest = rest | "StoreRest" >> StoreGroups(plan.storage_dir)
    if stored is not None:
        stored = stored | "SeparateStoredRest" >> SeparateRest(splits)
        rest = (rest, stored["rest"]) | "WithStoredRest" >> beam.Flatten()
        stored = stored["outputs"]
    rest_stats = (rest | "RestStats" >> beam.Map(lambda b: b.stats)
                  | "MergeRestStats" >> beam.CombineGlobally(MergeStats()))
    blocks, shards = _write_shards(plan, rows, stored, row_format=per_part(lambda p: p.row_format),
                                   output_dir=per_part(lambda p: p.output_dir))
    stats = (blocks | "Stats" >> beam.Map(lambda b: (b.group.part, b.stats))
             | "MergeStats" >> beam.CombinePerKey(MergeStats()))
    return shards | "WriteSplitParams" >> WriteSplitParams(
        output_dir=plan.output_dir, outputs=splits.outputs, output_dirs=tuple(o.output_dir for o in outputs),
        sections=tuple(o.sections for o in outputs), extras=tuple(o.extra for o in outputs), eos_id=plan.eos_id,
        pad_id=plan.pad_id, vocab_size=plan.vocab_size, features=plan.features, stats=stats,
        rest_stats=rest_stats, dead_letters=dead_letters, summary_sections=plan.sections,
        summary_extra={**plan.extra, "features": list(plan.features)}, mixture=mixture)


def _tokenize(plan: JobPlan) -> TokenizeDocuments:
    return TokenizeDocuments(
        plan.tokenizer_files, split_len=plan.split_len, remove_bos_in_chunks=plan.remove_bos_in_chunks,
        append_eos=plan.mode not in SUMMARIZATION_MODES, drop_bos=plan.mode == FIM, process_cpus=plan.process_cpus)


def _encode_conversations(plan: JobPlan) -> EncodeConversations:
    # Contents are normalized, rendered and tokenized together: the template decides the tokens.
    return EncodeConversations(plan.chat, plan.tokenizer_files, process_cpus=plan.process_cpus)


def _tokens(plan: JobPlan, docs):
    """DocBatch -> TokenBatch (the text modes) or EncodedBatch (Chat, Chat_VSL, DPO)."""
    if plan.chat is not None:
        return docs | "EncodeConversations" >> _encode_conversations(plan)
    return (docs
            | "NormalizeDocuments" >> NormalizeDocuments(plan.normalize)
            | "TokenizeDocuments" >> _tokenize(plan))


def _rows(plan: JobPlan, batches):
    """TokenBatch (Chat and DPO: EncodedBatch) -> the mode's rows (RowBlock, or WindowBlock whose rows are built
    a batch at a time)."""
    if plan.chat is not None:
        return batches | "BuildChatRows" >> BuildChatRows(plan.chat)
    tokens = batches
    if plan.mode == LMDATA:
        # Windows over the token stream: full [n, 3, msl] rows are only built, a batch at a time, to encode them.
        return tokens | "PackSequences" >> PackSequences(plan.pack, seed=plan.seed, windows_only=True)
    if plan.mode == SUMMARIZATION:
        return tokens | "BuildSummarizationRows" >> BuildSummarizationRows(plan.summarization)
    if plan.mode in VSL_MODES:
        # Segments and where they go; the [n, 5, msl] rows are only built, a batch at a time, to encode them.
        return tokens | "PackDocumentsVsl" >> PackDocumentsVsl(plan.vsl, seed=plan.seed,
                                                              summarization=plan.mode == SUMMARIZATION_VSL)
    return (tokens
            | "PackSequences" >> PackSequences(plan.pack, seed=plan.seed)
            | "ApplyFim" >> ApplyFim(plan.fim, tokenizer_files=plan.tokenizer_files, seed=plan.seed))


def _write_shards(plan: JobPlan, rows, stored, *, row_format, output_dir):
    """Rows -> compressed chunks -> shards (every mode alike); returns (the encoded blocks, the shards)."""
    blocks = rows | "EncodeRows" >> EncodeRows(row_format, plan.tokenizer_files, gzip_level=plan.codec,
                                               process_cpus=plan.process_cpus)
    if plan.storage_dir:
        blocks = blocks | "StoreGroups" >> StoreGroups(plan.storage_dir)
    if stored is not None:
        blocks = (blocks, stored) | "WithStoredGroups" >> beam.Flatten()
    shards = blocks | "WriteHdf5Shards" >> WriteHdf5Shards(
        output_dir=output_dir, output_name=plan.output_name, files_per_record=plan.files_per_record,
        num_output_files=plan.num_output_files, shuffle_seed=plan.shuffle_seed,
        max_seq_length=PerPart(tuple(f.max_seq_length for f in row_format.values))
        if isinstance(row_format, PerPart) else row_format.max_seq_length,
        features=len(plan.features), gzip_level=plan.gzip_level, keep_existing=plan.resume)
    return blocks, shards


def _write(plan: JobPlan, rows, stored, dead_letters, mixture=None):
    """Rows -> shards, dead letters counted, data_params.json (one dataset; `mixture`: its plan's summary)."""
    blocks, shards = _write_shards(plan, rows, stored, row_format=plan.row_format, output_dir=plan.output_dir)
    stats = blocks | "Stats" >> beam.Map(lambda b: b.stats) | "MergeStats" >> beam.CombineGlobally(MergeStats())
    return shards | "WriteDatasetParams" >> WriteDatasetParams(
        output_dir=plan.output_dir, sections=plan.sections, eos_id=plan.eos_id, pad_id=plan.pad_id,
        vocab_size=plan.vocab_size, features=plan.features, stats=stats, dead_letters=dead_letters,
        extra=plan.extra, mixture=mixture)


def _beam_options(beam_args: list[str]) -> PipelineOptions:
    """Beam options, refusing any argument neither we nor Beam know (Beam would only log and drop it)."""
    parser = argparse.ArgumentParser(add_help=False)
    seen = set()

    def add_all(cls):
        for sub in cls.__subclasses__():
            if sub not in seen:
                seen.add(sub)
                try:
                    sub._add_argparse_args(parser)
                except argparse.ArgumentError:
                    pass  # an option declared by two classes
                add_all(sub)

    add_all(PipelineOptions)
    _, unknown = parser.parse_known_args(beam_args)
    if unknown:
        raise UserError(f"unrecognized arguments: {' '.join(unknown)}")
    options = PipelineOptions(beam_args)
    if not options.view_as(StandardOptions).runner:
        # A bare DirectRunner first tries to download and start Prism; the in-process
        # FnApiRunner is what runs locally anyway, and the fastest here (benchmarks/bench.py).
        options.view_as(StandardOptions).runner = DEFAULT_RUNNER
    return options


def _summary(params: dict, output_dir: str, seconds: float) -> str:
    inp = params["input"]

    def by_reason(counts: dict) -> str:
        # Most frequent first, then by name: "json_decode 2, missing_key 1".
        return ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    dropped = f", {inp['dropped']} dropped ({by_reason(inp['dropped_by_reason'])})" if inp["dropped"] else ""
    bad = (f", {inp['bad']} bad record{'s' if inp['bad'] != 1 else ''} ({by_reason(inp['bad_by_reason'])}; "
           f"see {fs.join(output_dir, DEAD_LETTER_DIR)})" if inp["bad"] else "")
    repeats = f" ({inp['repeats']} of them repeats)" if inp.get("repeats") else ""
    tail = f"in {seconds:.1f}s: {inp['documents_read']} documents read, {inp['used']} used{repeats}{dropped}{bad}."
    if "mixture" in params:
        tail += " Mixture: " + ", ".join(
            f"{name} {s['realized_share']:.2%} of the tokens (target {s['target_share']:.2%})"
            for name, s in params["mixture"]["sources"].items()) + "."
    if "outputs" in params:  # a split job: one dataset per output
        each = "; ".join(f"{o['path']}: {o['sequences']} sequences, {o['documents']} documents "
                         f"({o['fraction_obtained']:.2%} of {o['fraction_asked']:.2%} asked)"
                         + (" - EMPTY" if not o["sequences"] else "") for o in params["outputs"])
        return f"Wrote {len(params['outputs'])} datasets to {output_dir} ({each}) {tail}"
    post = params["post-process"]
    empty = " (an EMPTY dataset)" if not post["n_examples"] else ""
    return (f"Wrote {post['n_examples']} sequences ({post['num_tokens']} tokens, "
            f"{post['loss_valid_tokens']} loss-valid) in {len(params['files'])} files to {output_dir}{empty} {tail}")


@dataclasses.dataclass
class Launched:
    result: object  # the runner's PipelineResult
    dry_run: bool
    local: bool
    storage_dir: Optional[str]
    started: float
    progress: Optional[JobProgress] = None  # a job running elsewhere: followed by its Beam counters


def runner_plan(plan: JobPlan, config: Config, options: PipelineOptions) -> JobPlan:
    """The plan as the chosen runner needs it: where packed rows wait, how work is shared out, threads per process.

    Groups of a large file read in order are handed to other workers only on a
    distributed runner: locally every core already works on one group
    (the tokenizer's threads), and a local runner would hold the handed-on
    text in memory.
    """
    local = _is_local_runner(options)
    plan = dataclasses.replace(plan, storage_dir=_storage_dir(config, local),
                               fan_out_bytes=None if local else FAN_OUT_BYTES, process_cpus=_process_cpus(options))
    if plan.mixture is not None and plan.resume and plan.storage_dir:
        kept = load_mixture_plan(fs.join(plan.output_dir, fs.TMP_DIR, MIXTURE_PLAN))
        plan = dataclasses.replace(plan, mixture_plan=kept)
    return plan


def launch(config: Config, beam_args: list[str], plan_changes: Optional[dict] = None) -> Launched:
    """Check everything, claim the output directory, build the job and submit it (without waiting).

    With Beam's --dry_run True the job graph is built and validated, and nothing is written or submitted.
    `plan_changes` replaces JobPlan fields that have no flag (tests: how work is shared out).
    """
    from apache_beam.options.pipeline_options import DirectOptions, TestOptions

    options = _beam_options(beam_args)
    plan = runner_plan(plan_job(config), config, options)
    dry_run = bool(options.view_as(TestOptions).dry_run)
    local, storage = _is_local_runner(options), plan.storage_dir
    if not dry_run:
        _check_output_dir(config, plan)
        fs.makedirs(config.output_dir)
        _claim_output_dir(config)
        if plan.hook is not None:  # as 2.10 does: what read the records, beside what they became
            fs.write_text_atomic(fs.join(config.output_dir, HOOK_FILE), hook_source(plan.hook))
    if (config.display_pbar and sys.stderr.isatty() and local and not dry_run
            and options.view_as(DirectOptions).direct_running_mode != "multi_processing"):
        # The bar follows the input's bytes tokenized, in this process (the in-memory runner's workers).
        sizes = [f.size for f in plan.files]
        progress.start(None if None in sizes else sum(sizes), file=sys.stderr)
    plan = dataclasses.replace(plan, extra={
        **plan.extra, "run": {"started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              "beam_version": beam.__version__, "beam_options": beam_args,
                              "shuffle_strategy": "disk" if storage else "runner"}})
    # DoFns carry a reference to the tokenizer files, staged where every worker can read them.
    staged = stage_tokenizer_files(plan.tokenizer_files, fs.join(plan.output_dir, fs.TMP_DIR), write=not dry_run)
    plan = dataclasses.replace(plan, tokenizer_files=staged, **(plan_changes or {}))
    if not dry_run:
        # The job graph names this file instead of holding the list: its size must not grow with the input.
        write_input_manifest(plan.input_manifest, plan.files)
    if config.use_ftfy and not fast_ftfy.fast_path():
        print(f"create_hdf5_dataset: {fast_ftfy.ftfy_record()['why_not']}, which the exact fast path was not "
              "checked against: ftfy itself runs (about 3 MB/s per core)", file=sys.stderr)
    started = time.time()
    pipeline = beam.Pipeline(options=options)
    build(pipeline, plan)
    if not local:
        _check_graph_size(pipeline)
    if dry_run and local:
        # A local runner knows no dry run: it would run the job (on files a dry run does not write). The graph is
        # built and turned into the portable form every runner reads: that is what can be checked here.
        pipeline.to_runner_api()
        shutil.rmtree(pipeline.local_tempdir, ignore_errors=True)  # Beam removes it when a pipeline runs
        result = None
    else:
        result = pipeline.run()
    job_id = getattr(result, "job_id", lambda: None)()
    follower = None
    if dry_run:
        print("create_hdf5_dataset: dry run: the job graph is valid; nothing was written or submitted",
              file=sys.stderr)
    elif not local:
        if job_id:
            print(f"create_hdf5_dataset: submitted job {job_id}", file=sys.stderr)
        # The workers are other processes: the bar follows the job's own counters.
        sizes = [f.size for f in plan.files]
        follower = JobProgress(result, None if None in sizes else sum(sizes), sys.stderr,
                               terminal=bool(config.display_pbar) and sys.stderr.isatty(),
                               metrics=_metrics_source(options, result)).start()
    return Launched(result, dry_run, local, storage, started, follower)


def _metrics_source(options: PipelineOptions, result):
    """Where a running job's counters are read: Flink's REST API when a Flink master is named (Beam's Flink job
    server answers only once the job has ended), else the runner's own answer."""
    master = options.get_all_options().get("flink_master")
    job_id = getattr(result, "_job_id", None)
    if master and master not in ("[auto]", "[local]", "[collection]") and job_id:
        return FlinkRestMetrics(master, job_id)
    return live_metrics


# Dataflow refuses a job whose graph is over 10 MB; the request holds more than the pipeline, so keep a margin.
GRAPH_LIMIT_BYTES = 9 << 20


def _check_graph_size(pipeline: beam.Pipeline) -> None:
    """Refuse, before submitting, a graph the service would refuse (it does not grow with the inputs, and a
    split job's outputs share their transforms, but settings are part of it)."""
    size = len(pipeline.to_runner_api().SerializeToString())
    if size > GRAPH_LIMIT_BYTES:
        raise UserError(f"the job graph is {size / 2**20:.1f} MiB, over the {GRAPH_LIMIT_BYTES / 2**20:.1f} MiB a "
                        "distributed runner such as Dataflow accepts")


def run(config: Config, beam_args: list[str], plan_changes: Optional[dict] = None) -> Optional[dict]:
    """Launch the job and wait for it; returns data_params.json (None for a dry run)."""
    launched, succeeded = None, False
    try:
        try:
            launched = launch(config, beam_args, plan_changes)  # a local runner runs the job here
            if launched.dry_run:
                return None
            launched.result.wait_until_finish()
        except MixtureError as e:  # a setting no source count could satisfy: said as what to change
            raise UserError(str(e).split(" [while running")[0]) from None
        succeeded = True
    finally:
        if launched is not None and launched.progress is not None:
            launched.progress.finish(succeeded)
        progress.finish()
        if launched and launched.storage_dir and fs.is_local(launched.storage_dir) \
                and not fs.is_local(config.output_dir):
            fs.remove_tree(launched.storage_dir)  # this machine's scratch space, not part of the output
    params = _read_json(fs.join(config.output_dir, PARAMS_FILE))
    if params is None:
        raise RuntimeError(f"the job finished without writing {fs.join(config.output_dir, PARAMS_FILE)}")
    print(_summary(params, config.output_dir, time.time() - launched.started), file=sys.stderr)
    return params




def _bad_share_problem(params: dict, limit: Optional[float]) -> Optional[str]:
    inp = params["input"]
    if limit is None or not inp["documents_read"]:
        return None
    share = inp["bad"] / inp["documents_read"]
    if share > limit:
        return (f"{inp['bad']} of {inp['documents_read']} records were bad ({share:.2%}), more than "
                f"max_bad_record_fraction {limit:.2%}; the dataset was written, see "
                f"{fs.join(params['setup']['output_dir'], DEAD_LETTER_DIR)}")
    return None


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "estimate":
        from pipelines.estimate import main as estimate_main

        process.configure_logging()
        return estimate_main(argv[1:])
    if argv and argv[0] in TOOLS:
        from pipelines.tools import main as tools_main

        return tools_main(argv)
    process.configure_logging()
    drop_errors_said_again(MixtureError)
    try:
        config, beam_args = load_config(argv)
        for notice in config.notices:
            print(f"create_hdf5_dataset: {config.params_file}: {notice}", file=sys.stderr)
        params = run(config, beam_args)
    except (ConfigError, UserError) as e:
        print(f"create_hdf5_dataset: error: {e}", file=sys.stderr)
        return 2
    problem = params and _bad_share_problem(params, config.max_bad_record_fraction)
    if problem:
        print(f"create_hdf5_dataset: error: {problem}", file=sys.stderr)
        return 3
    return 0


def cli() -> None:
    """The command: `main()`, then out of the process without tearing the interpreter down.

    When main() returns, the job has ended: every file is committed by rename,
    data_params.json is written and the summary printed. What Python would do
    next is free the run's objects one by one, drop the tokenizers' caches and
    wake idle thread pools only to stop them: 0.4-0.7 s of a 5-6 s run on the
    bench corpus (benchmarks/bench.py), for nothing outside this process. So
    the exit handlers run, logging and the streams are flushed, and the process
    ends there. An exception (or argparse's exit) still ends it the usual way.
    """
    process.started()
    code = main()
    atexit._run_exitfuncs()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    cli()
