"""Cerebras Model Zoo 2.10's `preprocess_data.py --config cfg.yaml`, read as it is.

A 2.10 config names a *mode* (pretraining, finetuning, dpo, nlg), a *read
hook* with its kwargs, and settings in three sections. This module turns it
into the same (mode, settings) a `create_hdf5_dataset MODE --params` job
has, so a 2.10 job runs through exactly the pipeline, checks and statistics
of ours; nothing below the command knows which interface was used.

What is kept from 2.10, and why:
- The section rules of 2.10's `update_params`: a key 2.10 knows, placed in
  another section, is an error with 2.10's message; a key nobody knows is
  tolerated, as in 2.10, but warned about by name (2.10 is silent, and a
  misspelt key is the most common way a setting is lost).
- 2.10's defaults where they differ from 2.1.1's: `use_ftfy` True,
  `output_dir` ./output, and ChatML when the tokenizer has no chat template.
- The built-in hooks by their import paths and short names; each decides the
  mode's row builder and the record keys (see HOOK_MODES).

What is refused before any data is read, naming the key: multimodal,
embedding, MLM/BERT and custom token generators, and settings whose meaning
this tool does not implement yet (docs/guides/cerebras-210.md). Keys that only tune 2.10's own machinery
(read/write chunk sizes, RAM share) are accepted and have no effect: the
notices say so.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Optional

from pipelines.settings import SETTINGS, ConfigError
from transforms.core.hooks210 import BUILTIN_HOOKS
from transforms.core.hooks210 import REQUIRED_KWARGS, check_hook_kwargs
from transforms.core.modes import CONVERSATION, PAIR, PREFERENCE, TEXT, Mode, find_mode
from transforms.io.hf_datasets import check_options
from transforms.io.hooks import load_hook, parse_hook_spec

__all__ = ["CerebrasConfig", "translate", "HOOK_PREFIX", "SUPPORTED_HOOKS", "hook_name", "hook_strips",
           "is_210_config", "merge_sections", "raw_json"]

# 2.10's update_params: the keys each section may hold [B/utils.py:285-395].
SETUP_KEYS = ("data", "metadata_files", "output_dir", "image_dir", "processes", "mode")
PROCESSING_KEYS = (
    "custom_tokenizer", "huggingface_tokenizer", "tokenizer_params", "eos_id", "pad_id", "max_seq_length",
    "min_sequence_len", "input_ids_dtype", "input_mask_dtype", "inverted_mask", "use_ftfy", "ftfy_normalizer",
    "wikitext_detokenize", "short_seq_prob", "write_in_batch", "resume_from_checkpoint", "seed", "read_chunk_size",
    "write_chunk_size", "shuffle", "shuffle_seed", "fraction_of_RAM_alloted", "read_hook", "read_hook_kwargs",
    "semantic_drop_mask", "semantic_loss_weight", "semantic_attention_mask")
DATASET_KEYS = (
    "use_vsl", "truncate_to_msl", "max_prompt_length", "is_multimodal", "training_objective", "pack_sequences",
    "sep_token", "fim_rate", "spm_rate", "fim_prefix_tok", "fim_middle_tok", "fim_suffix_tok", "fold_long_doc",
    "split_text_to_tokenize", "chunk_len_to_split", "remove_bos_in_chunks", "user_role", "assistant_role",
    "chat_template", "respose_delimiter", "num_patches", "mlm_fraction", "mlm_with_gather", "ignore_index",
    "excluded_tokens", "max_num_img")
_SECTIONS = {"setup": SETUP_KEYS, "processing": PROCESSING_KEYS, "dataset": DATASET_KEYS}
# Keys outside those lists that 2.10's code still reads (its shipped configs carry them).
_ALSO_READ = {
    "setup": ("data_splits", "context_splits", "data_splits_dir", "token_generator"),
    "processing": ("UNSAFE_skip_jsonl_decoding_errors", "end_of_turn_token", "token_limit"),
    "dataset": ("response_delimiter", "image_token", "register_special_image_token", "use_single_image_token"),
}

HOOK_PREFIX = "cerebras.modelzoo.data_preparation.data_preprocessing.hooks:"
# Built-in hook with a mode of ours -> (the 2.10 modes it serves, its optional kwargs); the required ones are
# transforms.core.hooks210.REQUIRED_KWARGS.
SUPPORTED_HOOKS = {
    "text_read_hook": (("pretraining",), ()),
    "prompt_completion_text_read_hook": (("finetuning",), ()),
    "chat_read_hook": (("finetuning",), ("has_system_prompt",)),
    "dpo_read_hook": (("dpo",), ("prompt_key", "assistant_role")),
    "nlg_read_hook": (("nlg",), ()),
}
# Any other hook (the user's own, or a built-in with no mode of ours) gives the rows its regions (chat.hooked).
REGION_HOOK = "regions"
_MODES = ("pretraining", "finetuning", "dpo", "nlg")
_REFUSED_MODES = {"custom": "custom token generators (setup.token_generator)",
                  "embedding_training": "embedding models", "embedding_generation": "embedding models"}
# Settings refused when present with a value that asks for something not supported: key -> what it is.
_REFUSED = {
    ("setup", "image_dir"): "multimodal data", ("setup", "token_generator"): "custom token generators",
    ("dataset", "num_patches"): "multimodal data", ("dataset", "max_num_img"): "multimodal data",
    ("dataset", "image_token"): "multimodal data", ("dataset", "register_special_image_token"): "multimodal data",
    ("dataset", "use_single_image_token"): "multimodal data",
    ("dataset", "mlm_fraction"): "MLM (bert_pretraining)", ("dataset", "mlm_with_gather"): "MLM (bert_pretraining)",
    ("dataset", "ignore_index"): "MLM (bert_pretraining)", ("dataset", "excluded_tokens"): "MLM (bert_pretraining)",
}
# 2.10 keys with the same name and meaning here.
_SAME = {
    "setup": ("output_dir", "processes", "metadata_files", "data_splits", "context_splits"),
    "processing": ("eos_id", "pad_id", "max_seq_length", "min_sequence_len", "input_ids_dtype", "input_mask_dtype",
                   "inverted_mask", "use_ftfy", "ftfy_normalizer", "wikitext_detokenize", "short_seq_prob",
                   "write_in_batch", "resume_from_checkpoint", "seed", "shuffle", "shuffle_seed"),
    "dataset": ("pack_sequences", "fim_rate", "spm_rate", "fim_prefix_tok", "fim_middle_tok", "fim_suffix_tok",
                "fold_long_doc", "split_text_to_tokenize", "chunk_len_to_split", "remove_bos_in_chunks",
                "max_prompt_length"),
}
# Accepted with no effect here, and why (said once per job).
_NO_EFFECT = {
    "read_chunk_size": "records are read in packing groups of packing_group_mb",
    "write_chunk_size": "file sizes follow files_per_record",
    "fraction_of_RAM_alloted": "memory is bounded by the pipeline's design",
    "UNSAFE_skip_jsonl_decoding_errors": "a line that is not valid JSON always goes to the dead letters",
    "data_splits_dir": "splits are made in one job, without a copy of the raw records",
}
_OURS = {s.name for s in SETTINGS}
# 2.10's defaults that differ from ours [B/pretraining_token_generator.py:60-87].
# chat_loss_span: what 2.10 trains of an assistant turn (its content and end-of-turn token), so that a 2.10
# chat config's rows are 2.10's (tests/test_cerebras210_golden.py).
# txt_lines: 2.10 reads a .txt with Hugging Face's "text" builder, a record per line [B/data_reader.py:500-608].
DEFAULTS_210 = {"use_ftfy": True, "ftfy_normalizer": "NFC", "output_dir": "./output", "chat_loss_span": "content",
                "txt_lines": True}
# setup.data keys of type huggingface that tune only 2.10's own copy of the split (utils.load_dataset_wrapper)
# or how load_dataset builds it: no copy is made here, the split's files are read where they are.
_HF_NO_EFFECT = ("cache_dir", "format", "num_proc", "keep_in_memory", "streaming", "download_mode",
                 "verification_mode", "trust_remote_code")


@dataclasses.dataclass(frozen=True)
class CerebrasConfig:
    """A 2.10 config, translated: our mode, our settings, and what the user should know."""

    mode: str  # one of pipelines.config.MODES
    values: dict  # our setting name -> value (YAML-typed, coerced by pipelines.config)
    defaults: dict  # 2.10's defaults where they differ from ours, for settings the file leaves out
    raw: dict  # the YAML as read: recorded in data_params.json under setup / processing / dataset
    notices: tuple  # one line each: keys warned about, settings with no effect here
    hook: str  # the read hook's 2.10 name, as given
    hook_digest: Optional[str] = None  # sha256 of a hook file's text: a changed file is another job (resume)


def is_210_config(data: dict) -> bool:
    """A file that says `setup.mode` in 2.10's words is a 2.10 config."""
    setup = data.get("setup") if isinstance(data, dict) else None
    return isinstance(setup, dict) and setup.get("mode") in _MODES + tuple(_REFUSED_MODES)


def translate(data: dict, path: str) -> CerebrasConfig:
    """2.10's YAML (a mapping) -> CerebrasConfig; ConfigError names the first key that cannot be run."""
    try:
        return _translate(data, path)
    except _Unshaped as e:
        if "mode" in (data.get("setup") if isinstance(data.get("setup"), dict) else {}):
            raise ConfigError(str(e)) from None
        # A file without a mode whose keys are not where 2.10 keeps them may be a 2.1.1 params file (as
        # configs/*.yaml are), which 2.10 would refuse one misplaced key at a time: say where it goes.
        raise ConfigError(f"{e} (this file names no setup.mode: a Model Zoo 2.1.1 params file, as configs/*.yaml "
                          "are, is given with --params)") from None


class _Unshaped(ConfigError):
    """A config not in 2.10's shape (a key in another section, no mode), rather than one asking for what is not
    supported."""


def _translate(data: dict, path: str) -> CerebrasConfig:
    notices: list[str] = []
    ours: dict[str, Any] = {}
    sections = _sections(data, path, notices, ours)
    setup, processing, dataset = sections["setup"], sections["processing"], sections["dataset"]
    for (section, key), what in _REFUSED.items():
        if _given(sections[section].get(key)):
            raise ConfigError(f"{path}: {section}.{key}: {what} is not supported; supported: text pretraining "
                              "(LM, VSL, FIM), prompt/completion and chat finetuning (VSL too), DPO, NLG")
    mode210 = setup.get("mode")
    if mode210 in _REFUSED_MODES:
        raise ConfigError(f"{path}: setup.mode {mode210!r}: {_REFUSED_MODES[mode210]} are not supported; "
                          f"supported modes: {', '.join(_MODES)}")
    if mode210 not in _MODES:
        raise _Unshaped(f"{path}: setup.mode: expected one of {', '.join(_MODES)}, got {mode210!r}")
    if dataset.get("is_multimodal"):
        raise ConfigError(f"{path}: dataset.is_multimodal: multimodal data is not supported")
    values: dict[str, Any] = {}
    for section, keys in _SAME.items():
        for key in keys:
            if sections[section].get(key) is not None:
                values[key] = sections[section][key]
    _context_lengths(setup, path, values, notices)
    _data_source(setup, path, values, notices)
    _tokenizer(processing, path, values)
    hook, kwargs, digest = _hook(processing, path)
    mode = _mode(mode210, hook, dataset, path)
    semantic = [k for k in ("semantic_loss_weight", "semantic_drop_mask", "semantic_attention_mask")
                if _given(processing.get(k))]
    if semantic and hook != REGION_HOOK:
        raise ConfigError(f"{path}: processing.{semantic[0]}: semantic region settings are supported with a read "
                          f"hook of your own (its regions make the rows), not with {hook}")
    if mode.fim and dataset.get("training_objective") is None:
        notices.append("dataset.fim_*: FIM rows, as the settings ask (2.10 needs training_objective: fim, and "
                       "without it writes plain LM rows)")
    _hook_keys(hook, kwargs, path, values, notices)
    _dataset(mode, dataset, path, values, notices)
    _token_limit(processing, path, values, notices)
    for section in sections.values():
        for key, why in _NO_EFFECT.items():
            if section.get(key) not in (None, False):  # False: UNSAFE_skip_jsonl_decoding_errors asks nothing
                notices.append(f"{key}: accepted, no effect here ({why})")
    values.update(ours)
    defaults = {k: v for k, v in DEFAULTS_210.items() if k not in values}
    return CerebrasConfig(mode=mode.name, values=values, defaults=defaults, raw=data, notices=tuple(notices),
                          hook=processing["read_hook"], hook_digest=digest)


def _token_limit(processing: dict, path: str, values: dict, notices: list) -> None:
    """2.10's processing.token_limit as a one-source mixture budget (transforms.core.mixture).

    2.10 stops once the chunks it has tokenized reach the limit: which documents those are depends on the
    order its processes get to them. Here the budget takes the documents a keyed hash of their content draws,
    to within half a document of the limit, whatever the order.
    """
    limit = processing.get("token_limit")
    if limit == 0 and not isinstance(limit, bool):  # 2.10 tests `if self.token_limit:`: 0 is no limit
        notices.append("processing.token_limit 0: no limit (2.10 reads 0 as no limit too)")
        return
    if not _given(limit):
        return
    from transforms.core.mixture import parse_token_count

    try:
        tokens = parse_token_count(limit, "processing.token_limit")
    except ValueError as e:
        raise ConfigError(f"{path}: {e}") from None
    if "input_dir" not in values:
        raise ConfigError(f"{path}: processing.token_limit: supported with a local setup.data.source only")
    source = values.pop("input_dir")
    values["mixture"] = [{"source": source, "name": "source", "tokens": tokens}]
    notices.append(f"processing.token_limit {tokens}: the documents a keyed hash of their content draws, to within "
                   "half a document of the limit (2.10 stops after the first chunks tokenized reach it, which "
                   "depend on its processes' order)")


def _given(value: Any) -> bool:
    return value not in (None, False, {}, [], "")


def _sections(data: dict, path: str, notices: list, ours: dict) -> dict:
    out = {}
    for name, body in data.items():
        if name not in _SECTIONS:
            notices.append(f"{name}: not a section of a 2.10 config (setup, processing, dataset): ignored")
            continue
        if body is not None and not isinstance(body, dict):
            raise ConfigError(f"{path}: section {name!r} must be a mapping")
        out[name] = dict(body or {})
    for name in _SECTIONS:
        out.setdefault(name, {})
    for name, body in out.items():
        for key in body:
            if key in _SECTIONS[name] or key in _ALSO_READ[name]:
                continue
            home = next((s for s, keys in _SECTIONS.items() if key in keys), None)
            if home is not None:  # 2.10's own words, so that a 2.10 user recognises the error
                raise _Unshaped(f"{path}: Parameter '{key}' in section '{name}' is misplaced. It should be in "
                                  f"'{home}'.")
            if key in _OURS:
                ours[key] = body[key]  # this tool's own settings are welcome in a 2.10 config (2.10 ignores them)
                continue
            notices.append(f"{name}.{key}: unknown to 2.10 and to this tool: ignored")
    return out


def _context_lengths(setup: dict, path: str, values: dict, notices: list) -> None:
    splits = setup.get("data_splits")
    per_split = isinstance(splits, dict) and any(isinstance(v, dict) and v.get("context_splits")
                                                 for v in splits.values())
    if (setup.get("context_splits") or per_split) and "max_seq_length" in values:
        # 2.10 runs each context split at its own length and never reads max_seq_length then.
        notices.append(f"processing.max_seq_length {values.pop('max_seq_length')}: not used, the context splits "
                       "give the lengths (as in 2.10)")


def _data_source(setup: dict, path: str, values: dict, notices: list) -> None:
    data = setup.get("data")
    if data is None:
        if not setup.get("metadata_files"):
            raise ConfigError(f"{path}: setup.data (type: local, source: DIR) or setup.metadata_files is required")
        return
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: setup.data must be a mapping (type: local, source: DIR)")
    kind = data.get("type", "local")
    if kind == "huggingface":
        _huggingface_source(data, path, values, notices)
        return
    if kind != "local":
        raise ConfigError(f"{path}: setup.data.type: expected local or huggingface, got {kind!r}")
    for key, value in data.items():
        if key == "source":
            values["input_dir"] = value
        elif key in ("top_level_as_subsets", "subsets"):
            values[key] = value
        elif key != "type":
            notices.append(f"setup.data.{key}: not read for type local: ignored")
    if "input_dir" not in values:
        raise ConfigError(f"{path}: setup.data.source (the input directory) is required")


def _huggingface_source(data: dict, path: str, values: dict, notices: list) -> None:
    """2.10's `type: huggingface`: `source` and `split` (both required, as in 2.10), and load_dataset's arguments
    that choose the files (name, data_dir, data_files, revision). The split's files are found at launch
    (transforms.io.hf_datasets) and read like a local directory's."""
    for key, what in (("source", "the dataset's name on the Hub, or its directory"), ("split", "e.g. train")):
        if not data.get(key):
            raise ConfigError(f"{path}: setup.data.{key} ({what}) is required for type huggingface")
    values["hf_dataset"], values["hf_split"] = str(data["source"]), str(data["split"])
    options = {}
    for key, value in data.items():
        if key in ("type", "source", "split"):
            continue
        if key in _HF_NO_EFFECT:
            notices.append(f"setup.data.{key}: accepted, no effect here (the split's files are read where they are, "
                           "without a copy)")
        elif key in ("top_level_as_subsets", "subsets"):
            raise ConfigError(f"{path}: setup.data.{key}: subsets are directories of a local source; they do not "
                              "apply to type huggingface")
        else:
            options[key] = value
    try:
        check_options(options)
    except ValueError as e:
        raise ConfigError(f"{path}: setup.data: {e}") from None
    if options:
        values["hf_options"] = options


def _tokenizer(processing: dict, path: str, values: dict) -> None:
    hf, custom = processing.get("huggingface_tokenizer"), processing.get("custom_tokenizer")
    params = processing.get("tokenizer_params") or {}
    if not isinstance(params, dict):
        raise ConfigError(f"{path}: processing.tokenizer_params must be a mapping")
    if hf and custom:
        raise ConfigError(f"{path}: processing.huggingface_tokenizer and custom_tokenizer are both given: choose one")
    if hf:
        values.update(tokenizer_type="HuggingFaceTokenizer", huggingface_tokenizer=hf)
        if params:  # AutoTokenizer.from_pretrained's arguments, as 2.10 hands them on
            values["tokenizer_params"] = params
        return
    if custom == "gpt2tokenizer":
        _only(params, ("vocab_file", "encoder_file"), "gpt2tokenizer", path)
        for key in ("vocab_file", "encoder_file"):
            if not params.get(key):
                raise ConfigError(f"{path}: processing.tokenizer_params.{key} is required for gpt2tokenizer")
        values.update(tokenizer_type="GPT2Tokenizer", vocab_file=params["vocab_file"],
                      encoder_file=params["encoder_file"])
        return
    if custom == "neoxtokenizer":
        _only(params, ("encoder_file",), "neoxtokenizer", path)
        if not params.get("encoder_file"):
            raise ConfigError(f"{path}: processing.tokenizer_params.encoder_file is required for neoxtokenizer")
        values.update(tokenizer_type="NeoXTokenizer", encoder_file=params["encoder_file"])
        return
    if custom:
        if ":" not in str(custom):
            raise ConfigError(f"{path}: processing.custom_tokenizer {custom!r}: expected gpt2tokenizer, "
                              "neoxtokenizer, or 'module:Class'")
        values.update(tokenizer_type="HuggingFaceTokenizer", custom_tokenizer=str(custom), tokenizer_params=params)
        return
    raise ConfigError(f"{path}: a tokenizer is required: processing.huggingface_tokenizer or custom_tokenizer "
                      "(gpt2tokenizer, neoxtokenizer)")


def _only(params: dict, allowed: tuple, name: str, path: str) -> None:
    extra = sorted(set(params) - set(allowed))
    if extra:
        raise ConfigError(f"{path}: processing.tokenizer_params {extra}: not supported for {name} "
                          f"(it takes {', '.join(allowed)})")


def _hook(processing: dict, path: str) -> tuple[str, dict, Optional[str]]:
    spec = processing.get("read_hook")
    if not spec:
        raise ConfigError(f"{path}: processing.read_hook is required (e.g. {HOOK_PREFIX}text_read_hook)")
    kwargs = processing.get("read_hook_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise ConfigError(f"{path}: processing.read_hook_kwargs must be a mapping")
    try:
        hook = parse_hook_spec(str(spec))  # a built-in by either of its names, a module, or a hook file
    except ValueError as e:
        raise ConfigError(f"{path}: {e}") from None
    name = REGION_HOOK if uses_regions(str(spec), kwargs) else hook.function
    if name == REGION_HOOK:
        try:
            check_hook_kwargs(load_hook(hook) if hook.is_builtin else None, kwargs)
        except ValueError as e:
            raise ConfigError(f"{path}: processing.read_hook_kwargs: {e}") from None
        digest = None if hook.source is None else hashlib.sha256(hook.source.encode("utf-8")).hexdigest()
        return name, kwargs, digest
    optional = SUPPORTED_HOOKS[name][1]
    required = REQUIRED_KWARGS[BUILTIN_HOOKS[name]]
    for key in required:
        if not kwargs.get(key):
            raise ConfigError(f"{path}: processing.read_hook_kwargs.{key} is required by {name}")
    unknown = sorted(set(kwargs) - set(required) - set(optional))
    if "image_key" in unknown:
        raise ConfigError(f"{path}: processing.read_hook_kwargs.image_key: multimodal data is not supported")
    if unknown:
        raise ConfigError(f"{path}: processing.read_hook_kwargs {unknown}: not read by {name} "
                          f"(it takes {', '.join(required + optional)})")
    return name, kwargs, None


def _mode(mode210: str, hook: str, dataset: dict, path: str) -> Mode:
    """Our mode for 2.10's terms: what a record is (the hook's and setup.mode's), VSL (dataset.use_vsl) and FIM
    (dataset.training_objective), found in the table of modes."""
    vsl = bool(dataset.get("use_vsl"))
    if hook == REGION_HOOK:
        if mode210 == "dpo":
            if vsl or dataset.get("training_objective") is not None:
                raise ConfigError(f"{path}: dataset.use_vsl and training_objective do not apply to setup.mode dpo")
            return find_mode(PREFERENCE)  # the regions' prompt, chosen and rejected turns make the pair
        if mode210 in ("finetuning", "nlg"):  # nlg: a finetuning of context and completion
            if dataset.get("training_objective") is not None:
                raise ConfigError(f"{path}: dataset.training_objective does not apply to finetuning")
            return find_mode(CONVERSATION, vsl=vsl)
        hook = "text_read_hook"  # pretraining: the regions' text is the document (transforms.io.hooks)
    modes = SUPPORTED_HOOKS[hook][0]
    if mode210 not in modes:
        raise ConfigError(f"{path}: processing.read_hook {hook} does not serve setup.mode {mode210} "
                          f"(it serves {', '.join(modes)})")
    objective = dataset.get("training_objective")
    fim_keys = [k for k in ("fim_rate", "spm_rate", "fim_prefix_tok", "fim_middle_tok", "fim_suffix_tok")
                if dataset.get(k) is not None]
    if objective is None and fim_keys and mode210 == "pretraining" and not vsl:
        # 2.10's own fim_aug_preprocessing.yaml gives every FIM setting but not the objective, and 2.10 then
        # writes plain LM rows: the settings say what the user wants.
        objective = "fim"
    if objective not in (None, "fim"):
        raise ConfigError(f"{path}: dataset.training_objective {objective!r} is not supported (supported: fim, or "
                          "none for plain next-token prediction)")
    if objective == "fim" and (mode210 != "pretraining" or vsl):
        raise ConfigError(f"{path}: dataset.training_objective fim applies to setup.mode pretraining without use_vsl")
    if vsl and mode210 in ("dpo", "nlg"):
        raise ConfigError(f"{path}: dataset.use_vsl does not apply to setup.mode {mode210}")
    if mode210 == "pretraining":
        return find_mode(TEXT, vsl=vsl, fim=objective == "fim")
    if mode210 == "dpo":
        return find_mode(PREFERENCE)
    return find_mode(CONVERSATION if hook == "chat_read_hook" else PAIR, vsl=vsl)


def _hook_keys(hook: str, kwargs: dict, path: str, values: dict, notices: list) -> None:
    if hook == REGION_HOOK:
        return  # the hook's `*_key` columns are read (Config.keys_tuple); its regions make the rows
    if hook == "text_read_hook":
        values["jsonl_key"] = kwargs["text_key"]
    elif hook in ("prompt_completion_text_read_hook", "nlg_read_hook"):
        values["prompt_key"] = kwargs.get("prompt_key") or kwargs.get("context_key")
        values["completion_key"] = kwargs["completion_key"]
    elif hook == "chat_read_hook":
        values.update(messages_key=kwargs["multi_turn_key"], role_key=kwargs["multi_turn_role_key"],
                      content_key=kwargs["multi_turn_content_key"])
        if "has_system_prompt" in kwargs:
            notices.append("read_hook_kwargs.has_system_prompt: accepted; a leading system message is always read "
                           "as the system turn")
    elif hook == "dpo_read_hook":
        values.update(chosen_key=kwargs["chosen_key"], rejected_key=kwargs["rejected_key"])
        if kwargs.get("prompt_key"):
            values["prompt_key"] = kwargs["prompt_key"]


def _dataset(mode: Mode, dataset: dict, path: str, values: dict, notices: list) -> None:
    if "sep_token" in dataset and mode.record == PAIR:
        if dataset["sep_token"] is not None:
            values["sep_token"] = dataset["sep_token"]
    template = dataset.get("chat_template")
    if template and mode.templated:
        values["chat_template"] = template  # 2.10 gives the template's text itself; a file path works too
    elif template:
        notices.append(f"dataset.chat_template: not read for {mode.name}: ignored")
    truncate = dataset.get("truncate_to_msl")
    if truncate:
        values["truncate"] = _truncation(truncate, notices)
    delimiter = dataset.get("response_delimiter", dataset.get("respose_delimiter"))
    if delimiter is not None:
        notices.append("dataset.response_delimiter: not needed here (prompt and responses are told apart by "
                       "rendering them): ignored")


def _truncation(truncate: Any, notices: list) -> str:
    """2.10's truncate_to_msl mapping -> our `truncate` (keep_start | keep_end)."""
    truncate = truncate if isinstance(truncate, dict) else {}
    unknown = sorted(set(truncate) - {"prompt_truncation_mode", "truncation_mode", "max_turn_length"})
    if unknown:
        notices.append(f"dataset.truncate_to_msl {unknown}: unknown keys, ignored")
    how = truncate.get("prompt_truncation_mode")
    if how is None and "truncation_mode" in truncate:
        # 2.10 reads only prompt_truncation_mode and falls back to keep_end; a shipped config spells it
        # truncation_mode. What it asks for is plain, so that is what it gets.
        how = truncate["truncation_mode"]
        notices.append(f"dataset.truncate_to_msl.truncation_mode: read as prompt_truncation_mode ({how}); 2.10 "
                       "ignores this spelling and keeps the end")
    if how not in ("keep_start", "keep_end"):
        notices.append(f"dataset.truncate_to_msl.prompt_truncation_mode {how!r}: not keep_start or keep_end; "
                       "keep_end, as 2.10")
        how = "keep_end"
    if "max_turn_length" in truncate:
        notices.append("dataset.truncate_to_msl.max_turn_length: no per-turn floor here: the prompt (user turns, "
                       "longest first) is cut before the answer (docs/guides/chat.md, docs/guides/modes.md)")
    return how


def raw_json(data: dict) -> str:
    """The config as JSON text: kept in the (hashable) Config and written to data_params.json."""
    return json.dumps(data, sort_keys=True, default=str)


def merge_sections(ours: dict, raw: dict) -> dict:
    """data_params.json's sections: ours (what the job did, read by verify and resume), and every 2.10 key
    that ours does not already hold, so that a 2.10 tool finds the config where 2.10 writes it. 2.10's
    `setup.mode` (pretraining, ...) is kept; `setup.dataset_processor` names this tool's mode."""
    out = {name: dict(body) for name, body in ours.items()}
    for name in _SECTIONS:
        for key, value in (raw.get(name) or {}).items():
            # 2.10's value where ours is not set: custom_tokenizer gpt2tokenizer is ours tokenizer_type
            if key == "mode" or out.setdefault(name, {}).get(key) is None:
                out[name][key] = value
    return out


def hook_name(spec: Optional[str]) -> Optional[str]:
    """A built-in hook's function name, whichever of its names the config uses; None for any other."""
    return BUILTIN_HOOKS[spec].__name__ if spec in BUILTIN_HOOKS else None


# The built-in hooks that strip each text (2.10's text_read_hook, chat_read_hook): the job strips them too.
_STRIPPING_HOOKS = ("text_read_hook", "chat_read_hook")


def hook_strips(spec: Optional[str]) -> bool:
    return hook_name(spec) in _STRIPPING_HOOKS


def uses_regions(spec: Optional[str], kwargs: Optional[dict] = None) -> bool:
    """Whether a config's read hook gives the rows its regions (REGION_HOOK) rather than one of our modes: a hook
    of the user's own, a built-in with no mode of ours (prompt_completion_chat_read_hook), and dpo_read_hook with
    another assistant_role than "assistant:" (our DPO mode splits transcripts at their "Assistant:" turns; another
    marker is 2.10's own rule, transforms.core.hooks210.dpo_read_hook: the prompt is one text up to it)."""
    if spec is None:
        return False
    name = hook_name(spec)
    role = (kwargs or {}).get("assistant_role")
    if name == "dpo_read_hook" and role is not None and str(role).strip().lower() != "assistant:":
        return True
    return name not in SUPPORTED_HOOKS
