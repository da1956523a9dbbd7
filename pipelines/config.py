"""Command line + YAML -> one frozen, validated `Config`.

Precedence is: a flag given on the command line > the YAML file > the
documented default. Every argparse default is None so that "not given" can be
told apart from "given the default value" (the reference gets this wrong,
SPEC bug 4). Validation happens here, at load time, so a bad setting fails
before any data is read, with a message naming the setting.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
from typing import Any, Optional

import yaml

from transforms.core.records import ConversationKey, HookColumn, JsonKey
from transforms.core.mixture import MixtureSpec, parse_mixture
from transforms.core.modes import CONVERSATION, PAIR, PREFERENCE, TEXT, Mode
from transforms.core.modes import mode as mode_traits

from transforms.core.splits import check_name, parse_context_splits, parse_data_splits

__all__ = ["Config", "ConfigError", "MODES", "build_parser", "load_config", "SETTINGS"]

from pipelines.settings import (  # noqa: F401 - the table and the modes' names, which callers also take from here
    COMPRESSORS, INT_DTYPES, MODES, SETTINGS, TOKENIZER_BACKENDS, TOKENIZER_TYPES, ConfigError, Setting, Settings)

_BY_NAME = {s.name: s for s in SETTINGS}
# Keys the reference's YAML files may carry that mean nothing to a Beam job.
# data_splits_dir: where Cerebras' first stage writes the raw split records; one job needs no such copy.
_IGNORED_YAML_KEYS = {"dataset_processor", "data_splits_dir"}
# Cerebras 2.10's `setup.data` mapping: its keys, and the settings they are here.
_SETUP_DATA_KEYS = {"source": "input_dir", "top_level_as_subsets": "top_level_as_subsets", "subsets": "subsets",
                    "mixture": "mixture"}
_TRUE = {"true", "1", "yes", "y", "on"}
_FALSE = {"false", "0", "no", "n", "off"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(Settings):
    """The job's settings, typed (`Settings`: every setting a field, a setting its mode does not read at its
    default), and where they came from. Frozen: `replace` makes a changed copy."""

    mode: str
    sources: tuple = ()  # sorted (name, "cli" | "yaml" | "default"), the mode's settings
    params_file: Optional[str] = None
    # A Cerebras 2.10 config (--config): its YAML as JSON text, recorded in data_params.json; what the
    # translation has to say (printed once, by main()); the read hook it names.
    cerebras_config: Optional[str] = None
    notices: tuple = ()
    read_hook: Optional[str] = None
    read_hook_digest: Optional[str] = None  # sha256 of a hook file's text
    # The mixture setting parsed (with total_tokens and mixture_seed), once, when the config is made.
    mixture_spec: Optional[MixtureSpec] = dataclasses.field(default=None, compare=False)

    @property
    def values(self) -> tuple:
        """The settings its mode reads, as sorted (name, value) pairs."""
        return tuple(sorted((s.name, getattr(self, s.name)) for s in SETTINGS if self.mode in s.modes))

    def as_dict(self) -> dict:
        return dict(self.values)

    def replace(self, **changes) -> "Config":
        """A copy with these settings changed (not validated again; the mixture parsed again if it changed)."""
        new = dataclasses.replace(self, **changes)
        if changes.keys() & {"mixture", "total_tokens", "mixture_seed"}:
            new = dataclasses.replace(new, mixture_spec=_mixture_spec(new.mixture, new.total_tokens,
                                                                      new.mixture_seed))
        return new

    def source_of(self, name: str) -> str:
        return dict(self.sources)[name]

    @property
    def region_hook(self) -> bool:
        """A 2.10 config whose read hook's regions make the rows (pipelines.cerebras210.REGION_HOOK)."""
        from pipelines.cerebras210 import uses_regions

        return uses_regions(self.read_hook, self.hook_kwargs)

    @property
    def cerebras(self) -> dict:
        """A 2.10 config's YAML, as read ({} for a job of this tool's own interface)."""
        return json.loads(self.cerebras_config) if self.cerebras_config else {}

    @property
    def hook_kwargs(self) -> dict:
        """A 2.10 config's processing.read_hook_kwargs."""
        return dict((self.cerebras.get("processing") or {}).get("read_hook_kwargs") or {})

    @property
    def traits(self) -> Mode:
        """The mode's entry in the table of modes."""
        return mode_traits(self.mode)

    @property
    def keys_tuple(self) -> tuple[str, ...]:
        """Record keys to read, in the order the mode consumes them."""
        if self.region_hook:  # the hook's `*_key` columns, each as its JSON value (the hook sees the values)
            from transforms.core.hooks210 import BUILTIN_HOOKS, hook_columns

            # A hook of the user's own is given None for a column the record lacks or holds null in, as 2.10
            # gives it; a built-in hook's columns must be there (hook_columns).
            key = JsonKey if str(self.read_hook).strip() in BUILTIN_HOOKS else HookColumn
            return tuple(key(c) for c in hook_columns(self.hook_kwargs))
        record = self.traits.record
        if record == PAIR:
            return (self.prompt_key, self.completion_key)
        if record == CONVERSATION:
            return (ConversationKey(self.messages_key, self.tools_key),)
        if record == PREFERENCE:
            keys = (JsonKey(self.chosen_key), JsonKey(self.rejected_key))
            return keys + ((JsonKey(self.prompt_key),) if self.prompt_key else ())
        if self.keys:
            return tuple(self.keys)
        return (self.jsonl_key or "text",)

    def sections(self) -> dict:
        """The effective settings as data_params.json's setup/processing/dataset."""
        out: dict = {"setup": {"dataset_processor": self.traits.processor, "mode": self.mode},
                     "processing": {}, "dataset": {}}
        for s in SETTINGS:
            # Deduplication's and decontamination's settings only where they run: a job without them writes the
            # file it always wrote.
            if self.mode in s.modes and (self.dedup or not s.name.startswith("dedup")) and (
                    self.decontaminate or not s.name.startswith("decontaminate")) and (
                    self.language_id or self.languages or not s.name.startswith("language")) and (
                    self.quality_filters or not s.name.startswith("quality_filter")):
                out[s.section][s.name] = getattr(self, s.name)
        if self.params_file:
            out["setup"]["params"] = self.params_file
        if self.cerebras_config:
            from pipelines.cerebras210 import merge_sections

            out = merge_sections(out, self.cerebras)
        return out

    def fingerprint(self, exclude: tuple = ("resume_from_checkpoint", "display_pbar", "overwrite_output",
                                            "processes", "output_dir", "max_bad_record_fraction",
                                            "shuffle_strategy", "tokenizer_backend")) -> str:
        """Hash of everything that determines the output bytes."""
        relevant = {k: v for k, v in self.values if k not in exclude}
        relevant["mode"] = self.mode
        if self.read_hook:  # a 2.10 hook decides what is read (and whether texts are stripped)
            relevant["read_hook"] = self.read_hook
            relevant["read_hook_kwargs"] = self.hook_kwargs
            if self.read_hook_digest:  # the same path with other code is another job
                relevant["read_hook_digest"] = self.read_hook_digest
            if self.region_hook:  # the config's region weights and masks
                processing = self.cerebras.get("processing") or {}
                relevant["semantic"] = {k: v for k, v in processing.items() if k.startswith("semantic_")}
        return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]


def _add_argument(parser: argparse.ArgumentParser, s: Setting) -> None:
    # Every default is None: "absent" must stay distinguishable from a value.
    parser.add_argument(f"--{s.name}", dest=s.name, default=None, type=str, help=s.help)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="create_hdf5_dataset",
        description="Turn raw text corpora into training-ready HDF5 with Apache Beam. A Cerebras 2.10 "
        "preprocess_data config runs as: create_hdf5_dataset --config cfg.yaml [flags]. "
        "Beam pipeline options (--runner, --direct_num_workers, --project, ...) may follow.",
    )
    sub = parser.add_subparsers(dest="mode", required=True, metavar="{" + ",".join(MODES + tuple(TOOLS)) + "}")
    for mode in MODES:
        p = sub.add_parser(mode, help=f"{mode} mode")
        p.add_argument("--params", default=None, help="YAML file with setup/processing/dataset sections")
        for s in SETTINGS:
            if s.cli and mode in s.modes:
                _add_argument(p, s)
    for tool, what in TOOLS.items():
        # Listed for --help only: main() hands these to pipelines.tools, which has their own flags.
        sub.add_parser(tool, help=what, add_help=False)
    return parser


# The commands on a written dataset (pipelines.tools), and `estimate` (pipelines.estimate), as --help lists them.
TOOLS = {
    "verify": "check OUT against the Cerebras dataloader's rules and recount data_params.json (verify --help)",
    "inspect": "print a row of OUT as text or ids (inspect --help)",
    "report": "write OUT/report.html with plots of the dataset (report --help)",
    "estimate": "predict a job from a sample: documents, tokens, rows, bytes, time, Dataflow cost (estimate --help)",
}


def _coerce(s: Setting, raw: Any, origin: str) -> Any:
    """Turn a CLI string or YAML value into the setting's type, or fail naming it."""
    where = f"{s.name} (from {origin})"
    if raw is None:
        return None
    try:
        if s.type == "bool":
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in _TRUE:
                return True
            if text in _FALSE:
                return False
            raise ValueError("expected True or False")
        if s.type == "int":
            if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                raise ValueError("expected an integer")
            return int(raw)
        if s.type == "float":
            if isinstance(raw, bool):
                raise ValueError("expected a number")
            return float(raw)
        if s.type == "str":
            if isinstance(raw, (dict, list)):
                raise ValueError("expected a string")
            return str(raw)
        if s.type == "list":
            items = raw if isinstance(raw, list) else str(raw).split(",")
            items = [str(x).strip() for x in items if str(x).strip()]
            return tuple(items) or None
        if s.type == "keys":
            if isinstance(raw, dict):
                items = list(raw.values())
            elif isinstance(raw, list):
                items = raw
            else:
                items = str(raw).split(",")
            items = [str(x).strip() for x in items if str(x).strip()]
            if not items:
                raise ValueError("expected at least one key")
            return tuple(items)
        if s.type == "normalizer":
            text = str(raw)
            if text in ("None", "none", ""):
                return None
            if text not in ("NFC", "NFKC"):
                raise ValueError("expected NFC, NFKC or None")
            return text
        if s.type == "mapping":
            value = json.loads(raw) if isinstance(raw, str) else raw
            if not isinstance(value, dict):
                raise ValueError("expected a mapping (on the command line: a JSON object)")
            return json.dumps(value, sort_keys=True)  # as text: a Config's values must be hashable
        if s.type in ("splits", "context"):
            if isinstance(raw, str) and raw.strip().startswith("{"):
                raw = yaml.safe_load(raw)  # the YAML form, inline on the command line
            parse = parse_data_splits if s.type == "splits" else parse_context_splits
            try:
                return parse(raw, where)
            except ValueError as e:
                raise ConfigError(str(e)) from None
        if s.type == "mixture":
            if isinstance(raw, str):
                raw = yaml.safe_load(raw)  # JSON (or inline YAML) on the command line
            # As text: a Config's values must be hashable. It is parsed (and checked) once, with total_tokens
            # and mixture_seed, when the values are validated (_validate_mixture).
            return json.dumps(raw, sort_keys=True)
        if s.type == "dtype":
            text = str(raw)
            if text not in INT_DTYPES:
                raise ValueError(f"expected one of {', '.join(INT_DTYPES)}")
            return text
    except ConfigError:
        raise  # already names the setting and what is wrong with it
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: invalid value {raw!r}: {e}") from None
    raise AssertionError(s.type)


def _read_yaml(path: str, flag: str = "--params") -> dict:
    import fsspec

    try:
        with fsspec.open(path, "r") as f:
            data = yaml.safe_load(f) or {}
    except FileNotFoundError:
        raise ConfigError(f"{flag}: file not found: {path}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{flag}: {path} is not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{flag}: {path} must hold a mapping with setup/processing/dataset sections")
    if flag == "--params":
        from pipelines.cerebras210 import is_210_config

        if is_210_config(data):
            raise ConfigError(f"--params: {path} is a Cerebras 2.10 config (setup.mode {data['setup']['mode']}): "
                              f"run it as create_hdf5_dataset --config {path}")
    return data


def _flatten_yaml(data: dict, mode: str, path: str) -> dict:
    flat: dict = {}
    for section, body in data.items():
        if section not in ("setup", "processing", "dataset"):
            raise ConfigError(f"{path}: unknown section {section!r} (expected setup, processing, dataset)")
        if body is None:
            continue
        if not isinstance(body, dict):
            raise ConfigError(f"{path}: section {section!r} must be a mapping")
        if section == "setup" and isinstance(body.get("data"), dict):
            body = dict(body)
            for key, value in body.pop("data").items():
                if key not in _SETUP_DATA_KEYS:
                    raise ConfigError(f"{path}: unknown setting setup.data.{key} "
                                      f"(expected {', '.join(_SETUP_DATA_KEYS)})")
                if _SETUP_DATA_KEYS[key] in body and body[_SETUP_DATA_KEYS[key]] != value:
                    raise ConfigError(f"{path}: setup.data.{key} and setup.{_SETUP_DATA_KEYS[key]} disagree")
                body[_SETUP_DATA_KEYS[key]] = value
        for key, value in body.items():
            if key in _IGNORED_YAML_KEYS:
                continue
            s = _BY_NAME.get(key)
            if s is None:
                raise ConfigError(f"{path}: unknown setting {section}.{key}")
            if mode not in s.modes:
                raise ConfigError(f"{path}: setting {section}.{key} does not apply to {mode} "
                                  f"(it is for {', '.join(s.modes)})")
            if value is None:
                continue  # "key:" with no value leaves the setting unset
            if key in flat and flat[key] != value:
                raise ConfigError(f"{path}: setting {key} is given twice with different values")
            flat[key] = value
    return flat


def _config_file(argv: list[str]) -> Optional[tuple[str, list[str]]]:
    """(path, the other arguments) when the command is `--config FILE ...` (Cerebras 2.10's form)."""
    if argv and argv[0] == "--config":
        if len(argv) < 2:
            raise ConfigError("--config: expected a YAML file")
        return argv[1], argv[2:]
    if argv and argv[0].startswith("--config="):
        return argv[0].split("=", 1)[1], argv[1:]
    return None


def load_config(argv: list[str]) -> tuple[Config, list[str]]:
    """Parse our flags and YAML; return the config and the arguments left for Beam.

    `MODE [--params FILE] [flags]` is this tool's form (2.1.1's); `--config FILE [flags]` reads a Cerebras
    2.10 config (pipelines.cerebras210), whose mode comes from the file. Flags override the file either way.
    """
    given = _config_file(argv)
    translated = None
    if given is not None:
        from pipelines.cerebras210 import raw_json, translate

        path, argv = given
        translated = translate(_read_yaml(path, "--config"), path)
        argv = [translated.mode, *argv]
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    mode = args.mode
    cli = {k: v for k, v in vars(args).items() if k not in ("mode", "params") and v is not None}
    if translated is not None:
        if args.params:
            raise ConfigError("--config and --params: give one settings file")
        yaml_values, defaults = translated.values, translated.defaults
        unused = sorted(k for k in yaml_values if mode not in _BY_NAME[k].modes)
        if unused:
            translated = dataclasses.replace(translated, notices=translated.notices + (
                f"{', '.join(unused)}: not read by {mode}: ignored",))
    else:
        yaml_values = _flatten_yaml(_read_yaml(args.params), mode, args.params) if args.params else {}
        defaults = {}
    if cli.get("hf_dataset") or yaml_values.get("hf_dataset"):
        defaults = {**defaults, "txt_lines": True}  # 🤗 datasets reads a .txt a line a record, so its jobs do

    values, sources = {}, {}
    for s in SETTINGS:
        if mode not in s.modes:
            continue
        if s.name in cli:
            values[s.name], sources[s.name] = _coerce(s, cli[s.name], "command line"), "cli"
        elif s.name in yaml_values:
            values[s.name], sources[s.name] = _coerce(s, yaml_values[s.name], "YAML"), "yaml"
        else:
            values[s.name], sources[s.name] = _coerce(s, defaults.get(s.name, s.default), "default"), "default"
    mixture = _validate(mode, values, sources)
    extra = {"params_file": args.params} if translated is None else dict(
        params_file=path, cerebras_config=raw_json(translated.raw), notices=translated.notices,
        read_hook=translated.hook, read_hook_digest=translated.hook_digest)
    config = Config(mode=mode, **values, sources=tuple(sorted(sources.items())), mixture_spec=mixture, **extra)
    return config, rest


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise ConfigError(message)


def _validate(mode: str, v: dict, sources: dict) -> Optional[MixtureSpec]:
    """Refuse a setting out of range or contradicting another (ConfigError naming it); returns the mixture,
    parsed."""
    _require(v["tokenizer_type"] is not None, "--tokenizer_type is required "
             f"(one of {', '.join(TOKENIZER_TYPES)})")
    _require(v["tokenizer_type"] in TOKENIZER_TYPES,
             f"tokenizer_type: {v['tokenizer_type']!r} is not one of {', '.join(TOKENIZER_TYPES)}")
    tt = v["tokenizer_type"]
    if tt == "GPT2Tokenizer":
        _require(bool(v["vocab_file"]), "--vocab_file (vocab.bpe) is required for GPT2Tokenizer")
        _require(bool(v["encoder_file"]), "--encoder_file (encoder.json) is required for GPT2Tokenizer")
    elif tt == "NeoXTokenizer":
        _require(bool(v["encoder_file"]), "--encoder_file (tokenizer.json) is required for NeoXTokenizer")
    else:
        _require(bool(v["huggingface_tokenizer"]) != bool(v["custom_tokenizer"]),
                 "HuggingFaceTokenizer needs --huggingface_tokenizer or --custom_tokenizer module:Class (one)")
        _require(not v["custom_tokenizer"] or ":" in v["custom_tokenizer"],
                 f"custom_tokenizer: expected 'module:Class', got {v['custom_tokenizer']!r}")
    _require(not json.loads(v["tokenizer_params"] or "{}") or tt == "HuggingFaceTokenizer",
             "tokenizer_params: arguments of a custom_tokenizer or of a Hugging Face tokenizer only")
    _validate_source(v)
    mixture = _validate_mixture(v, sources)
    msl = v["max_seq_length"]
    _require(msl >= 2, f"max_seq_length: must be at least 2, got {msl}")
    _require(v["min_sequence_len"] >= 0, "min_sequence_len: must be >= 0")
    _require(0.0 <= v["short_seq_prob"] <= 1.0, "short_seq_prob: must be within [0, 1]")
    _validate_splits(v, sources)
    for name, m in job_max_seq_lengths(v):
        _require(v["min_sequence_len"] <= m + 1, f"min_sequence_len: {v['min_sequence_len']} exceeds {name} + 1 "
                 f"= {m + 1}; every row would be dropped")
        _require(v["short_seq_prob"] == 0.0 or m >= 3, f"short_seq_prob: cutting rows to a random length in "
                 f"[2, max_seq_length - 1] needs {name} >= 3")
    _require(v["files_per_record"] >= 1, "files_per_record: must be >= 1")
    _require(v["max_bad_record_fraction"] is None or 0.0 <= v["max_bad_record_fraction"] <= 1.0,
             "max_bad_record_fraction: must be within [0, 1]")
    if v["num_output_files"] is not None:
        _require(v["num_output_files"] >= 1, "num_output_files: must be >= 1")
        _require(sources["files_per_record"] == "default",
                 "num_output_files and files_per_record are both set: choose one way to size the files")
    _require(v.get("chunk_len_to_split") is None or v["chunk_len_to_split"] >= 1, "chunk_len_to_split: must be >= 1")
    _require(v["max_chunk_size"] >= 1, "max_chunk_size: must be >= 1 (KiB)")
    _require(v["packing_group_mb"] >= 1, "packing_group_mb: must be >= 1")
    _require(v["max_record_mb"] >= 1, "max_record_mb: must be >= 1")
    _require(0 <= v["gzip_level"] <= 9, "gzip_level: must be 0-9")
    _require(v["compressor"] in COMPRESSORS,
             f"compressor: {v['compressor']!r} is not one of {', '.join(COMPRESSORS)}")
    _require(v["tokenizer_backend"] in TOKENIZER_BACKENDS,
             f"tokenizer_backend: {v['tokenizer_backend']!r} is not one of {', '.join(TOKENIZER_BACKENDS)}")
    _require(0 <= v["tokenizer_cross_check"] <= 1,
             f"tokenizer_cross_check: {v['tokenizer_cross_check']!r} is not a share between 0 and 1")
    _require(v["shuffle_strategy"] in ("auto", "disk", "runner"),
             f"shuffle_strategy: {v['shuffle_strategy']!r} is not one of auto, disk, runner")
    _require(v["processes"] is None or v["processes"] >= 0, "processes: must be >= 0")
    _validate_dedup(v)
    _validate_decontaminate(v)
    _validate_language(v)
    _validate_quality(v)
    for name in ("eos_id", "pad_id"):
        _require(v[name] is None or v[name] >= 0, f"{name}: must be >= 0")
    if v["keys"] and v.get("jsonl_key"):
        _require(False, "jsonl_key and dataset.keys are both set: choose one")
    traits = mode_traits(mode)
    cutting = [n for n in v["quality_filters"] or () if _quality_filter_cuts(n)]
    if cutting:
        from pipelines.cerebras210 import uses_regions

        _require(traits.record == TEXT and len(v["keys"] or ()) <= 1
                 and not uses_regions(v.get("read_hook"), v.get("hook_kwargs") or {}),
                 f"quality_filters: {cutting[0]} cuts lines out of a record's text, which must be one text value "
                 f"(LMData, LMData_VSL, FIM, one key, no read hook's regions); {mode}'s records are not")
    if traits.templated:
        _require(not v["keys"], f"dataset.keys does not apply to {mode}: use messages_key, chosen_key, ...")
        _require(v.get("chat_loss_span") in (None, "turn", "content"),
                 f"chat_loss_span: {v.get('chat_loss_span')!r} is not one of turn, content")
        _require(v.get("truncate") in (None, "keep_start", "keep_end"),
                 f"truncate: {v.get('truncate')!r} is not one of keep_start, keep_end")
        _require(v.get("max_prompt_length") is None or v["max_prompt_length"] >= 1, "max_prompt_length: must be >= 1")
    if traits.record == PAIR:
        _require(v.get("truncate") in (None, "keep_start", "keep_end"),
                 f"truncate: {v.get('truncate')!r} is not one of keep_start, keep_end")
        _require(bool(v["prompt_key"]), f"--prompt_key is required for {mode}")
        _require(bool(v["completion_key"]), f"--completion_key is required for {mode}")
        _require(not v["keys"], f"dataset.keys does not apply to {mode}: use prompt_key/completion_key")
    if traits.vsl:
        import numpy as np

        top = np.iinfo(np.dtype(v["position_ids_dtype"])).max
        for name, m in job_max_seq_lengths(v):
            _require(top >= m - 1, f"position_ids_dtype: {v['position_ids_dtype']} cannot hold position ids up "
                     f"to {m - 1} ({name} {m}); use a wider dtype")
    if traits.fim:
        for name in ("fim_prefix_tok", "fim_middle_tok", "fim_suffix_tok"):
            _require(bool(v[name]), f"--{name} is required for {mode}")
        for name in ("fim_rate", "spm_rate"):
            _require(0.0 <= v[name] <= 1.0, f"{name}: must be within [0, 1]")
    if v["resume_from_checkpoint"] and v["overwrite_output"]:
        _require(False, "resume_from_checkpoint and overwrite_output contradict each other")
    return mixture



def job_max_seq_lengths(v: dict) -> list[tuple[str, int]]:
    """(the setting that gives it, max sequence length) for every length the job writes."""
    out = []
    for name, _, context in v.get("data_splits") or ():
        out.extend((f"data_splits.{name}.context_splits", m) for m, _ in context or ())
    out.extend(("context_splits", m) for m, _ in v.get("context_splits") or ())
    if not v.get("context_splits") and not all(c for _, _, c in v.get("data_splits") or ((None, 1, None),)):
        out.append(("max_seq_length", v["max_seq_length"]))
    return out


def _quality_filter_cuts(name: str) -> bool:
    """Whether the quality filter `name` (a known one: _validate_quality) cuts lines out of a record's text."""
    from transforms.core.quality import FILTERS

    return name in FILTERS and FILTERS[name].cuts_lines


def _validate_quality(v: dict) -> None:
    from transforms.core.quality import filter_config

    params = json.loads(v["quality_filter_params"]) if v["quality_filter_params"] else {}
    names = v["quality_filters"] or ()
    for name in sorted(set(params) - set(names)):
        _require(False, f"quality_filter_params: names {name}, which quality_filters does not")
    for name in names:
        try:
            filter_config(name, params.get(name))
        except (ValueError, TypeError) as e:
            _require(False, f"quality_filters: {e}")


def _validate_language(v: dict) -> None:
    _require(0 <= v["language_threshold"] < 1,
             f"language_threshold: {v['language_threshold']!r} is not within [0, 1)")
    for code in v["languages"] or ():
        _require(code.isalpha() and code == code.strip(),
                 f"languages: {code!r} is not a language code (fastText's labels: en, de, zh, ...)")


def _validate_decontaminate(v: dict) -> None:
    from transforms.core.decontam import ACTIONS

    _require(v["decontaminate_action"] in ACTIONS,
             f"decontaminate_action: {v['decontaminate_action']!r} is not one of {', '.join(ACTIONS)}")
    _require(v["decontaminate_ngram"] >= 1, "decontaminate_ngram: must be >= 1")
    _require(1 <= v["decontaminate_min_ngram"] <= v["decontaminate_ngram"],
             f"decontaminate_min_ngram: {v['decontaminate_min_ngram']} is not between 1 and decontaminate_ngram "
             f"({v['decontaminate_ngram']})")
    _require(v["decontaminate_max_docs"] >= 1, "decontaminate_max_docs: must be >= 1")
    _require(not v["decontaminate_keys"] or bool(v["decontaminate"]), "decontaminate_keys needs decontaminate")


def _validate_dedup(v: dict) -> None:
    _require(v["dedup"] in (None, "exact", "near"), f"dedup: {v['dedup']!r} is not one of exact, near")
    _require(0 < v["dedup_threshold"] <= 1, f"dedup_threshold: {v['dedup_threshold']!r} is not within (0, 1]")
    for name in ("dedup_shingle", "dedup_bands", "dedup_rows", "dedup_values"):
        _require(v[name] >= 1, f"{name}: must be >= 1")
    _require(v["dedup_bands"] * v["dedup_rows"] <= v["dedup_values"],
             f"dedup_bands x dedup_rows ({v['dedup_bands']} x {v['dedup_rows']}) exceed dedup_values "
             f"({v['dedup_values']}): the bands are made of the signature's values")
    for name in ("dedup_index", "dedup_against"):
        _require(not v[name] or bool(v["dedup"]), f"{name} needs dedup (exact or near)")


def _validate_mixture(v: dict, sources: dict) -> Optional[MixtureSpec]:
    """The mixture, parsed: it names its own sources; what it does not work with yet is refused here, before
    any reading."""
    if not v.get("mixture"):
        _require(v.get("total_tokens") is None, "total_tokens applies to a mixture, which is not set")
        return None
    try:
        spec = _mixture_spec(v["mixture"], v["total_tokens"], v["mixture_seed"])
    except ValueError as e:
        origin = {"cli": "command line", "yaml": "YAML"}.get(sources.get("mixture"), "default")
        raise ConfigError(f"mixture (from {origin}): {e}") from None
    _require(not v.get("subsets") and not v.get("top_level_as_subsets"),
             "mixture and subsets: subsets are top-level directories of input_dir, and a mixture has none (its "
             "sources are its subsets' counterpart: one job per subset, or a source each)")
    return spec


def _mixture_spec(text: Optional[str], total_tokens, seed: int) -> Optional[MixtureSpec]:
    return parse_mixture(json.loads(text), total_tokens=total_tokens, seed=seed) if text else None


def _validate_source(v: dict) -> None:
    """One source of input files: input_dir, metadata_files, a Hugging Face dataset's split, or a mixture's."""
    if v.get("mixture"):
        for name in ("input_dir", "metadata_files", "hf_dataset"):
            _require(not v[name], f"mixture and {name} are both set: a mixture lists its own sources")
        return
    if not v["hf_dataset"]:
        _require(bool(v["input_dir"]) or bool(v["metadata_files"]),
                 "--input_dir, --metadata_files or --hf_dataset is required")
        for name in ("hf_split", "hf_options"):
            _require(v[name] is None, f"{name} applies to hf_dataset, which is not set")
        return
    _require(not v["input_dir"] and not v["metadata_files"],
             "hf_dataset and input_dir/metadata_files are both set: choose one source of input files")
    _require(bool(v["hf_split"]), "hf_split is required with hf_dataset (train, validation, ...)")
    _require(not v["top_level_as_subsets"] and not v["subsets"],
             "subsets are top-level directories of input_dir: they do not apply to hf_dataset")
    _require(v["txt_lines"], "txt_lines False does not apply to hf_dataset: 🤗 datasets reads a .txt a line a record")
    if v["hf_options"]:
        from transforms.io.hf_datasets import check_options

        try:
            check_options(json.loads(v["hf_options"]))
        except ValueError as e:
            raise ConfigError(f"hf_options: {e}") from None


def _validate_splits(v: dict, sources: dict) -> None:
    per_split = any(c is not None for _, _, c in v.get("data_splits") or ())
    _require(not (per_split and v.get("context_splits")),
             "context_splits: given both for the whole job and inside data_splits; choose one")
    _require(not (v.get("context_splits") and sources.get("max_seq_length") != "default"),
             "max_seq_length and context_splits are both set: the context splits give the sequence lengths")
    _require(not (v.get("top_level_as_subsets") and v.get("subsets")),
             "top_level_as_subsets and subsets are both set: choose one (subsets lists the directories to use)")
    if v.get("top_level_as_subsets") or v.get("subsets"):
        _require(not v.get("metadata_files"), "subsets are the top-level directories of input_dir: they cannot "
                 "be used with metadata_files")
        for name in v.get("subsets") or ():
            try:
                check_name("subsets: subset", name)
            except ValueError as e:
                raise ConfigError(str(e)) from None
        _require(len(set(v.get("subsets") or ())) == len(v.get("subsets") or ()),
                 "subsets: a directory is listed twice")


# pipelines.estimate: the share of the input it samples unless --sample says otherwise.
DEFAULT_SAMPLE = "1%"


def split_estimate_args(argv: list[str]) -> tuple[list[str], str, int]:
    """`create_hdf5_dataset estimate`'s arguments -> (the job's own, --sample, --sample_seed). Here, with every
    other flag, so that the process's head start parses the job's flags without importing the estimate."""
    rest, sample, seed = [], DEFAULT_SAMPLE, 0
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if name in ("--sample", "--sample_seed"):
            if not eq:
                if i + 1 >= len(argv):
                    raise ConfigError(f"{name}: expected a value")
                value, i = argv[i + 1], i + 1
            if name == "--sample":
                sample = value
            else:
                try:
                    seed = int(value)
                except ValueError:
                    raise ConfigError(f"--sample_seed: {value!r} is not an integer") from None
        else:
            rest.append(arg)
        i += 1
    return rest, sample, seed
