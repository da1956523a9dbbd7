"""The job as plain values: `plan_job` resolves a Config's inputs, tokenizer and mode settings into a JobPlan.

Everything that can be checked before a worker starts is checked here: the
input files are listed (a mixture's sources, a Hugging Face split, subsets),
the tokenizer is built (or taken from the command's head start, see
pipelines.process), and a chat template, read hook or FIM setting that cannot
work is refused as a UserError. The plan holds no Beam object; `build`
(pipelines.graph) wires the stages from it.
"""

import dataclasses
import json
import os
from typing import Optional

from pipelines.config import Config, job_max_seq_lengths
from pipelines.job_tokenizer import chat_template_setting, tokenizer_files
from transforms.core import fast_ftfy
from transforms.core.chat.batch import ChatConfig
from transforms.core.features import KEY_PADDING_FEATURES
from transforms.core.fim import FimConfig, make_fim_config
from transforms.core.modes import CONVERSATION, PAIR, TEXT, Mode, mode
from transforms.core.decontam import DecontamConfig
from transforms.core.langid import LangIdConfig
from transforms.core.quality import filter_config
from transforms.core.dedup import DedupConfig, index_problems, index_settings
from transforms.core.mixture import MixturePlan, MixtureSpec
from transforms.core.normalize import NormalizeConfig
from transforms.core.pack import PackConfig
from transforms.core.records import InputFile, PerPart
from transforms.core.regions import RegionDefaults
from transforms.core.splits import SplitPlan, check_name, make_split_plan, subset_of
from transforms.core.summarization import SummarizationConfig
from transforms.core.tokenizer import TokenizerFiles, shared_tokenizer
from transforms.core.vsl import VslConfig
from transforms.io import fs
from transforms.io.compressors import Codec
from transforms.io.dedup_index import index_parts, read_index_meta
from transforms.io.eval_sets import EvalSetError, eval_files
from transforms.io.discover import discover_input_files, discover_source
from transforms.io.hdf5_format import GZIP_LEVEL
from transforms.io.hdf5_sink import RowFormat
from transforms.io.hf_datasets import HfDatasetError, resolve_split_files
from transforms.io.hooks import HookSpec, load_hook, parse_hook_spec
from transforms.io.tokenizer_files import StagedTokenizerFiles, read_chat_template, stage_tokenizer_files

__all__ = ["plan_job", "JobPlan", "RunnerPlan", "UserError", "INPUT_MANIFEST"]

INPUT_MANIFEST = "inputs.jsonl"  # inside OUT/.tmp: the input files, read by the workers


class UserError(Exception):
    """A problem the user can fix; reported as one line, without a traceback."""


@dataclasses.dataclass(frozen=True)
class RunnerPlan:
    """What the chosen runner decides of a job (pipelines.runners.runner_plan); the defaults are a plan with no
    runner (the estimate's sample, a graph built by hand)."""

    storage_dir: Optional[str] = None  # where packed groups wait (disk strategy); None: the runner's GroupByKey
    fan_out_bytes: Optional[int] = None  # files read in order and larger than this hand their groups on
    process_cpus: Optional[int] = None  # cores one worker process may use; None: all of this machine's
    mixture_plan: Optional[MixturePlan] = None  # on resume: the plan the interrupted run kept
    stage_dir: Optional[str] = None  # where the tokenizer is staged for the workers; None: not staged
    run: Optional[dict] = None  # data_params.json's record of the run (when, Beam's version and options)


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
    tokenizer_files: TokenizerFiles | StagedTokenizerFiles  # staged for a runner: what the DoFns carry
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
    dedup: Optional[DedupConfig] = None  # duplicates removed after tokenizing (transforms.core.dedup); None: kept
    dedup_index: Optional[str] = None  # where the kept records' keys and signatures go for a later job
    dedup_index_meta: Optional[dict] = None  # its index.json: what they depend on
    dedup_against: Optional[str] = None  # an earlier job's index, compared with
    dedup_against_parts: tuple = ()  # its part files
    decontam: Optional[DecontamConfig] = None  # evaluation text removed (transforms.core.decontam); None: kept
    decontam_sets: tuple = ()  # the evaluation sets, as given
    decontam_files: tuple = ()  # their files
    decontam_keys: Optional[tuple] = None  # the fields of theirs that hold text; None: every string
    langid: Optional[LangIdConfig] = None  # each record's language identified (transforms.core.langid); None: not
    quality: tuple = ()  # the quality filters, in order (transforms.core.quality); (): none

    @property
    def features(self) -> tuple:
        """The names of a row's features, in order: data_params.json's `features`."""
        if self.chat is not None and not isinstance(self.chat, PerPart) and self.chat.key_padding_mask:
            return KEY_PADDING_FEATURES
        return self.traits.features

    @property
    def traits(self) -> Mode:
        """The mode's entry in the table of modes."""
        return mode(self.mode)

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

    def by_part(self) -> "JobPlan":
        """A split job's plan whose row settings hold each output's own (PerPart: the stages take the one of the
        part at hand), so that the graph does not grow with the outputs."""
        outputs = [self.for_output(k) for k in range(len(self.splits.outputs))]

        def per_part(get):
            return None if get(self) is None else PerPart(tuple(get(o) for o in outputs))

        return dataclasses.replace(self, pack=per_part(lambda p: p.pack), fim=per_part(lambda p: p.fim),
                                   summarization=per_part(lambda p: p.summarization), vsl=per_part(lambda p: p.vsl),
                                   chat=per_part(lambda p: p.chat))

    @property
    def row_format(self) -> RowFormat:
        return RowFormat(max_seq_length=self.pack.max_seq_length, pad_id=self.pad_id,
                         inverted_mask=self.sections["dataset"]["inverted_mask"],
                         trailing_eos_input=self.traits.trailing_eos_input, sides=len(self.traits.sides),
                         untrained_tail=self.traits.record == CONVERSATION and self.chat.loss_span != "turn")


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


def plan_job(config: Config, runner: RunnerPlan = RunnerPlan(), changes: Optional[dict] = None) -> JobPlan:
    """The job's plan, whole: inputs and the tokenizer resolved, every stage's settings, what the runner decided
    (`runner`); read-only after (its views for a split's outputs are its own methods). Raise UserError for
    anything the user must fix. `changes` sets JobPlan fields that have no flag (tests: how work is shared out)."""
    mixture, mixture_sources = None, ()
    if config.mixture_spec is not None:
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
    traits = mode(config.mode)
    if traits.fim:
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
    if traits.templated:  # what the job used (a 2.10 config may get ChatML): verify rebuilds from it
        sections["processing"]["chat_template"] = chat_template_setting(config, tok_files)
    # Chat modes render and encode each conversation with offsets, which only tokenizers gives.
    note = {"encoder_note": tokenizer.encoder_note} if tokenizer.encoder_note else {}
    encoder = {"encoder": "tokenizers"} if traits.templated else {"encoder": tokenizer.encoder_name, **note}
    extra = {"tokenizer": {"fingerprint": tokenizer.fingerprint(), "vocab_size": tokenizer.vocab_size,
                           "eos_id": tokenizer.eos_id, "pad_id": tokenizer.pad_id, "bos_id": tokenizer.bos_id,
                           "sep_id": tokenizer.sep_id, **encoder},
             # The files' bytes depend on the library's version too (their rows never do).
             "compression": {"compressor": codec.name, "gzip_level": codec.level, "library": codec.version()},
             "config_fingerprint": config.fingerprint()}
    if config.use_ftfy:  # its fixes change between versions; and whether the exact fast path covered this one
        extra["ftfy"] = fast_ftfy.ftfy_record()
    if runner.run is not None:
        extra["run"] = runner.run
    hook = _hook_spec(config)
    chat = _chat_config(config, tok_files, tokenizer) if traits.templated else None
    vsl = None
    if traits.vsl and chat is None:
        vsl = VslConfig(
            max_seq_length=config.max_seq_length, pad_id=tokenizer.pad_id, min_sequence_len=config.min_sequence_len,
            short_seq_prob=config.short_seq_prob, fold_long_doc=config.fold_long_doc,
            pack_sequences=config.pack_sequences, inverted_mask=config.inverted_mask, eos_id=tokenizer.eos_id,
            sep_id=tokenizer.sep_id if traits.record == PAIR else None,
            truncate=config.truncate if traits.record == PAIR else None)
    plan = JobPlan(
        mode=config.mode,
        files=files,
        input_manifest=input_manifest,
        keys=config.keys_tuple,
        join_keys=traits.record == TEXT,
        group_bytes=config.packing_group_mb << 20,
        max_record_bytes=config.max_record_mb << 20,
        normalize=_normalize_config(config),
        # Named here, written once the output directory is claimed (pipelines.job).
        tokenizer_files=(tok_files if runner.stage_dir is None
                         else stage_tokenizer_files(tok_files, runner.stage_dir, write=False)),
        split_len=config.chunk_len_to_split if config.split_text_to_tokenize else None,
        remove_bos_in_chunks=config.remove_bos_in_chunks,
        pack=PackConfig(
            max_seq_length=config.max_seq_length, pad_id=tokenizer.pad_id, pack_sequences=config.pack_sequences,
            min_sequence_len=config.min_sequence_len, short_seq_prob=config.short_seq_prob,
            # FIM rebuilds the mask of every row, inverting it itself.
            inverted_mask=config.inverted_mask and not traits.fim, write_remainder=config.write_remainder),
        summarization=SummarizationConfig(
            max_seq_length=config.max_seq_length, eos_id=tokenizer.eos_id, pad_id=tokenizer.pad_id,
            sep_id=tokenizer.sep_id, min_sequence_len=config.min_sequence_len,
            inverted_mask=config.inverted_mask, truncate=config.truncate) if traits.record == PAIR and not traits.vsl else None,
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
        storage_dir=runner.storage_dir,
        fan_out_bytes=runner.fan_out_bytes,
        process_cpus=runner.process_cpus,
        mixture_plan=runner.mixture_plan,
        **_dedup_plan(config, tokenizer.fingerprint()),
        **_decontam_plan(config),
        langid=LangIdConfig(tuple(config.languages) if config.languages else None, config.language_threshold)
        if config.language_id or config.languages else None,
        quality=_quality_plan(config),
    )
    return dataclasses.replace(plan, **changes) if changes else plan


def _quality_plan(config: Config) -> tuple:
    """The quality filters, each with its settings over its defaults (checked when the config was loaded)."""
    if not config.quality_filters:
        return ()
    params = json.loads(config.quality_filter_params) if config.quality_filter_params else {}
    return tuple(filter_config(name, params.get(name)) for name in config.quality_filters)


def _decontam_plan(config: Config) -> dict:
    """The plan's decontamination fields: the settings and the evaluation files (found now: a set that names
    no file fails before the job starts)."""
    if not config.decontaminate:
        return {}
    try:
        files = eval_files(config.decontaminate)
    except EvalSetError as e:
        raise UserError(f"decontaminate: {e}") from None
    return {"decontam": DecontamConfig(ngram=config.decontaminate_ngram, min_ngram=config.decontaminate_min_ngram,
                                       action=config.decontaminate_action, max_docs=config.decontaminate_max_docs),
            "decontam_sets": tuple(config.decontaminate), "decontam_files": tuple(files),
            "decontam_keys": tuple(config.decontaminate_keys) if config.decontaminate_keys else None}


def _dedup_plan(config: Config, tokenizer: str) -> dict:
    """The plan's dedup fields: the settings, this job's index, an earlier job's (checked it can serve)."""
    if not config.dedup:
        return {}
    dedup = DedupConfig(config.dedup, threshold=config.dedup_threshold, shingle=config.dedup_shingle,
                        bands=config.dedup_bands, rows=config.dedup_rows, values=config.dedup_values,
                        seed=config.dedup_seed)
    out = {"dedup": dedup}
    if config.dedup_index:
        out.update(dedup_index=config.dedup_index, dedup_index_meta=index_settings(dedup, tokenizer))
    if config.dedup_against:
        found = read_index_meta(config.dedup_against)
        if found is None:
            raise UserError(f"dedup_against: {config.dedup_against} holds no index.json: not an index a job wrote "
                            "with --dedup_index, or its job did not finish")
        problems = index_problems(found, dedup, tokenizer)
        if problems:
            raise UserError(f"dedup_against: the index in {config.dedup_against} cannot be compared with this job: "
                            + "; ".join(problems))
        out.update(dedup_against=config.dedup_against, dedup_against_parts=index_parts(config.dedup_against))
    return out


def _mixture_inputs(config: Config) -> tuple[MixtureSpec, list, list, tuple]:
    """The mixture, its files (sorted by identity), their identities (`<source name>/<path in the source>`) and
    each file's source index."""
    spec = config.mixture_spec
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
    wanted = config.key_padding_mask
    if wanted and not config.region_hook:
        raise UserError("key_padding_mask: only a read hook's regions can mask attention (Cerebras 2.10 config "
                        "with a hook of your own); this job has none")
    return wanted


def _region_defaults(config: Config) -> RegionDefaults:
    try:
        return RegionDefaults.from_processing(config.cerebras.get("processing") or {},
                                              pretraining=not mode(config.mode).templated)
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
    if mode(config.mode).record == CONVERSATION and config.source_of("tools_key") != "default" and not renders_tool_calls(renderer):
        # Asked for tool data explicitly: a template that leaves tools out would refuse every record that has them.
        raise UserError(f"chat template {where}: it does not write tools or tool calls (a probe conversation with "
                        f"both rendered without them), and --tools_key {config.tools_key} asks for them; use a "
                        f"template that renders tools (--chat_template FILE.jinja)")
    return ChatConfig(
        mode=config.mode, max_seq_length=config.max_seq_length, pad_id=tokenizer.pad_id, template=template,
        template_tokens=tuple(sorted(tokens.items())), role_key=config.role_key, content_key=config.content_key,
        normalize=_normalize_config(config),
        min_sequence_len=config.min_sequence_len, inverted_mask=config.inverted_mask,
        train_on_all_assistant_turns=config.train_on_all_assistant_turns,
        truncate=config.truncate, max_prompt_length=config.max_prompt_length,
        pack_sequences=config.pack_sequences,
        loss_span=config.chat_loss_span, regions=config.region_hook and mode(config.mode).record == CONVERSATION,
        bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id, key_padding_mask=_key_padding_mask(config))


def _check_dtypes(config: Config, vocab_size: int) -> None:
    import numpy as np

    info = np.iinfo(np.dtype(config.input_ids_dtype))
    if vocab_size - 1 > info.max:
        raise UserError(f"input_ids_dtype {config.input_ids_dtype} cannot hold ids up to {vocab_size - 1} "
                        f"(vocab_size {vocab_size}); use a wider dtype")
    if np.iinfo(np.int32).max < vocab_size - 1:
        raise UserError(f"vocab_size {vocab_size} does not fit the int32 HDF5 format")
