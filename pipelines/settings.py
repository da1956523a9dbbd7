"""The settings table: every setting's name, YAML section, type, default, modes and help, and the modes.

Apart from the loading (pipelines.config) so that what reads the table alone (Cerebras 2.10's translation,
the documentation's settings reference) does not import the loader, and the loader can import the translation.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["ConfigError", "Setting", "SETTINGS", "MODES", "VSL_MODES", "SUMMARIZATION_MODES", "CHAT_MODES",
           "CONVERSATION_MODES"]

LMDATA, SUMMARIZATION, FIM = "LMData", "Summarization", "FIM"
LMDATA_VSL, SUMMARIZATION_VSL = "LMData_VSL", "Summarization_VSL"
CHAT, CHAT_VSL, DPO = "Chat", "Chat_VSL", "DPO"
MODES = (LMDATA, SUMMARIZATION, FIM, LMDATA_VSL, SUMMARIZATION_VSL, CHAT, CHAT_VSL, DPO)
VSL_MODES = (LMDATA_VSL, SUMMARIZATION_VSL, CHAT_VSL)
SUMMARIZATION_MODES = (SUMMARIZATION, SUMMARIZATION_VSL)  # one prompt/completion record per row segment
CONVERSATION_MODES = (CHAT, CHAT_VSL)  # one conversation (a list of messages) per record
CHAT_MODES = CONVERSATION_MODES + (DPO,)  # rendered with a chat template
TOKENIZER_TYPES = ("GPT2Tokenizer", "NeoXTokenizer", "HuggingFaceTokenizer")
TOKENIZER_BACKENDS = ("auto", "fastokens", "tiktoken", "tokenizers")  # transforms.core.tokenizer.BACKENDS
COMPRESSORS = ("libdeflate", "zlib", "isal", "zlib-ng")  # transforms.io.compressors.COMPRESSORS
PROCESSOR_NAMES = {
    LMDATA: "LMDataPreprocessor",
    SUMMARIZATION: "SummarizationPreprocessor",
    FIM: "FIMDataPreprocessor",
    LMDATA_VSL: "VSLLMDataPreprocessor",
    SUMMARIZATION_VSL: "VSLSummarizationPreprocessor",
    CHAT: "ChatPreprocessor",
    CHAT_VSL: "VSLChatPreprocessor",
    DPO: "DPOPreprocessor",
}
INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


class ConfigError(ValueError):
    """A setting is missing, unknown, out of range or contradicts another."""


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    section: str  # setup | processing | dataset
    type: str  # str | int | float | bool | list | keys | normalizer | dtype
    default: Any
    modes: tuple = MODES
    cli: bool = True  # False: YAML only, as in the reference
    help: str = ""


def _s(name, section, type_, default, help_="", modes=MODES, cli=True):
    return Setting(name, section, type_, default, tuple(modes), cli, help_)


_LM_FIM = (LMDATA, FIM, LMDATA_VSL)  # modes that read one text per record

# Every setting of SPEC §1g, with COMPAT.md's documented defaults, plus ours.
SETTINGS: tuple[Setting, ...] = (
    # setup
    _s("input_dir", "setup", "str", None, "directory searched recursively for input files"),
    _s("metadata_files", "setup", "list", None, "comma-separated files, each listing input paths"),
    _s("output_dir", "setup", "str", "./data_dir/", "where the .h5 files and data_params.json go"),
    _s("data_splits", "setup", "splits", None,
       "split the documents by a keyed hash of their content: train=0.98,validation=0.01,test=0.01 "
       "(YAML: also Cerebras' {name: {split_fraction: f}}); each split is a dataset under output_dir/<split>"),
    _s("context_splits", "setup", "context", None,
       "write each document at one of several max sequence lengths: 2K=0.5,8K=0.5 (YAML: also "
       "{MSL_List: [2K, 8K], split_fractions: [1, 1]}); each is a dataset under .../msl_<M>"),
    _s("top_level_as_subsets", "setup", "bool", False,
       "every top-level directory of input_dir is its own subset: a dataset (or set of splits) under "
       "output_dir/<directory>"),
    _s("subsets", "setup", "list", None, "comma-separated top-level directories of input_dir: each a subset"),
    _s("mixture", "setup", "mixture", None,
       "read several sources and take each by its share of the output's tokens: a list of {source: a directory, "
       "glob or metadata file, weight: W | tokens: N (k/M/B/T), max_repeats: R (default 1: no document twice), "
       "name: N} (command line: JSON); instead of input_dir. Which documents, and how many times each, is drawn "
       "by a keyed hash of their tokens (a chat record's as its template renders them): exact to half a "
       "document, whatever the order or the workers"),
    _s("processes", "setup", "int", 0,
       "worker processes for the local runner (0: Beam's default); recorded for compatibility"),
    _s("txt_lines", "setup", "bool", False,
       "a .txt file is one record per line (Cerebras 2.10's reading: universal newlines; a blank line is counted "
       "as dropped, blank_line) instead of one document per file; default True for a 2.10 config or hf_dataset"),
    _s("hf_dataset", "setup", "str", None,
       "read a Hugging Face dataset instead of input_dir: its name on the Hub, or a directory laid out as one. "
       "The files of hf_split are found at launch (pip install 'create-hdf5-dataset[huggingface]') and read as "
       "input files: .parquet, .jsonl, .json.gz, .jsonl.zst, .txt"),
    _s("hf_split", "setup", "str", None, "the split of hf_dataset to read: train, validation, ... (a+b: both)"),
    _s("hf_options", "setup", "mapping", None,
       "hf_dataset's other load_dataset arguments, a mapping (command line: a JSON object): name (its config), "
       "data_dir, data_files, revision"),
    # processing
    _s("tokenizer_type", "processing", "str", None, "GPT2Tokenizer | NeoXTokenizer | HuggingFaceTokenizer"),
    _s("huggingface_tokenizer", "processing", "str", None, "hub name or local directory"),
    _s("custom_tokenizer", "processing", "str", None,
       "with tokenizer_type HuggingFaceTokenizer: 'module:Class' (Cerebras 2.10's custom tokenizer): the class, "
       "built with tokenizer_params, wraps a Hugging Face fast tokenizer, whose files the job then uses"),
    _s("tokenizer_params", "processing", "mapping", None,
       "keyword arguments of the custom tokenizer, or of AutoTokenizer.from_pretrained for huggingface_tokenizer "
       "(YAML mapping, or JSON on the command line)"),
    _s("vocab_file", "processing", "str", None, "GPT-2 vocab.bpe (merges)"),
    _s("encoder_file", "processing", "str", None, "GPT-2 encoder.json, or NeoX tokenizer.json"),
    _s("eos_id", "processing", "int", None, "override the EOS id (also sets pad)"),
    _s("pad_id", "processing", "int", None, "override the pad id"),
    _s("tokenizer_backend", "processing", "str", "auto",
       "who encodes: auto (the fastest that gives exactly the ids of tokenizers: fastokens, else tiktoken, else "
       "tokenizers), fastokens, tiktoken (an error where it is not exact) or tokenizers; the output is the same"),
    _s("tokenizer_cross_check", "processing", "float", 1 / 64,
       "share of the texts fastokens encodes that are encoded again by the exact backend and compared "
       "(drawn by a hash of each text and --seed; a difference switches the worker to the exact backend)"),
    _s("max_seq_length", "processing", "int", 2048, "tokens per row"),
    _s("short_seq_prob", "processing", "float", 0.0, "probability of truncating a row to a random length"),
    _s("output_name", "processing", "str", "examples", "prefix of the .h5 file names"),
    _s("files_per_record", "processing", "int", 50000, "maximum sequences per .h5 file"),
    _s("write_in_batch", "processing", "bool", True, "accepted for compatibility; rows are always written in batches"),
    _s("write_remainder", "processing", "bool", True, "write the final partial packed sequence as a padded row"),
    _s("resume_from_checkpoint", "processing", "bool", False, "finish an interrupted run in output_dir"),
    _s("display_pbar", "processing", "bool", True, "show a progress bar on a terminal"),
    _s("seed", "processing", "int", 0, "seed for short_seq_prob and FIM draws"),
    _s("total_tokens", "processing", "str", None,
       "a mixture's total tokens (k/M/B/T suffixes): the weighted sources share what the budgets leave; "
       "without it, the largest mixture no source runs out of within its max_repeats"),
    _s("mixture_seed", "processing", "int", 0, "key of the hash that draws a mixture's documents"),
    _s("split_seed", "processing", "int", 0, "key of the hash that draws each document's split"),
    _s("max_chunk_size", "processing", "int", 64, "KiB of text per tokenizer batch", cli=False),
    _s("shuffle", "processing", "bool", False, "globally shuffle the output sequences"),
    _s("shuffle_seed", "processing", "int", 0, "seed of the global shuffle"),
    _s("shuffle_strategy", "processing", "str", "auto",
       "where packed rows wait for the writers: disk (files: on local disk for a local runner, under "
       "output_dir/.tmp for a distributed one; bounded memory, resumable), runner (the runner's GroupByKey), "
       "auto (disk, unless a distributed runner writes to a local output_dir)"),
    _s("split_text_to_tokenize", "processing", "bool", False, "tokenize long texts in pieces", modes=_LM_FIM),
    _s("chunk_len_to_split", "processing", "int", 2000, "characters per piece", modes=_LM_FIM),
    _s("remove_bos_in_chunks", "processing", "bool", False, "drop the BOS of every piece but the first",
       modes=_LM_FIM),
    _s("num_output_files", "processing", "int", None,
       "write exactly N files of sizes differing by at most one (instead of files_per_record)"),
    _s("packing_group_mb", "processing", "int", 64,
       "a larger input file is packed in independent slices of this many MiB of text"),
    _s("overwrite_output", "processing", "bool", False, "allow a non-empty output_dir (its .h5 files are replaced)"),
    _s("gzip_level", "processing", "int", 4,
       "gzip level of the HDF5 chunks, 0-9 (4: the reference's; 1 writes faster, files ~13%% larger)"),
    _s("compressor", "processing", "str", "libdeflate",
       "who deflates the chunks, all readable by any HDF5 gzip filter: libdeflate (2.4x zlib, same size, the "
       "same bytes on any CPU), zlib (the reference's bytes), isal (6x zlib, files ~3%% larger; bytes may "
       "differ between CPU generations) or zlib-ng"),
    _s("max_record_mb", "processing", "int", 256,
       "a record (JSON line or .txt file) larger than this is dead-lettered as too_long, never loaded"),
    _s("max_bad_record_fraction", "processing", "float", None,
       "exit non-zero when bad records exceed this share of the records read (default: no limit)"),
    _s("fim_rate", "processing", "float", 0.9, "probability that a segment is FIM-transformed", modes=(FIM,)),
    _s("spm_rate", "processing", "float", 0.5, "probability that a FIM segment uses SPM", modes=(FIM,)),
    _s("fim_prefix_tok", "processing", "str", None, "FIM prefix sentinel token", modes=(FIM,)),
    _s("fim_middle_tok", "processing", "str", None, "FIM middle sentinel token", modes=(FIM,)),
    _s("fim_suffix_tok", "processing", "str", None, "FIM suffix sentinel token", modes=(FIM,)),
    # dataset
    _s("use_ftfy", "dataset", "bool", False, "fix text with ftfy"),
    _s("ftfy_normalizer", "dataset", "normalizer", "NFC", "NFC | NFKC | None"),
    _s("wikitext_detokenize", "dataset", "bool", False, "undo wikitext tokenisation"),
    _s("pack_sequences", "dataset", "bool", True, "pack documents into full rows"),
    _s("min_sequence_len", "dataset", "int", 10, "drop windows shorter than this many tokens"),
    _s("inverted_mask", "dataset", "bool", False, "1 marks positions excluded from the loss", cli=False),
    _s("input_ids_dtype", "dataset", "dtype", "int32", "every id must fit this dtype", cli=False),
    _s("input_mask_dtype", "dataset", "dtype", "int32", "the mask must fit this dtype", cli=False),
    _s("keys", "dataset", "keys", None, "comma-separated record keys", cli=False),
    _s("jsonl_key", "dataset", "str", None, "record key holding the text (default text)", modes=_LM_FIM),
    _s("prompt_key", "dataset", "str", None, "record key of the prompt (DPO: optional, see chosen_key)",
       modes=SUMMARIZATION_MODES + (DPO,)),
    _s("completion_key", "dataset", "str", None, "record key of the completion", modes=SUMMARIZATION_MODES),
    _s("sep_token", "dataset", "str", None, "token placed between prompt and completion",
       modes=SUMMARIZATION_MODES),
    _s("fold_long_doc", "dataset", "bool", True,
       "cut a document longer than max_seq_length + 1 tokens into windows of max_seq_length + 1 tokens with "
       "stride max_seq_length (False: drop it)", modes=(LMDATA_VSL,)),
    _s("position_ids_dtype", "dataset", "dtype", "int32",
       "position ids and attention spans must fit this dtype; files are always int32", modes=VSL_MODES),
    _s("chat_template", "processing", "str", None,
       "the chat template: a .jinja file, or chatml; default: the Hugging Face tokenizer's own", modes=CHAT_MODES),
    _s("messages_key", "dataset", "str", "messages",
       "record key of the conversation, a list of messages (ShareGPT: conversations)", modes=CONVERSATION_MODES),
    _s("tools_key", "dataset", "str", "tools",
       "record key of the tools a conversation may call (a list of function schemas, handed to the template as "
       "`tools`); a record without it has none", modes=CONVERSATION_MODES),
    _s("role_key", "dataset", "str", "role", "key of a message's role (ShareGPT: from)", modes=CHAT_MODES),
    _s("content_key", "dataset", "str", "content", "key of a message's text (ShareGPT: value)", modes=CHAT_MODES),
    _s("train_on_all_assistant_turns", "dataset", "bool", True,
       "train on every assistant turn (False: only the last one)", modes=CONVERSATION_MODES),
    _s("chat_loss_span", "dataset", "str", "turn",
       "what an assistant turn trains: turn (its content with the whitespace around it, its end-of-turn token and "
       "the whitespace after; a row ends with its last trained token) or content (Cerebras 2.10's: the content and "
       "the end-of-turn token right after it; the template's text after the last turn stays, untrained; the default "
       "for a 2.10 config)", modes=CONVERSATION_MODES),
    _s("key_padding_mask", "dataset", "bool", False,
       "Chat rows from a read hook's regions get a fourth feature, key_padding_mask: 1 where an input position "
       "is not attended (a region whose semantic_attention_mask is false, and padding), as Cerebras 2.10 writes "
       "it for multimodal rows; without it a record that masks attention is refused", modes=(CHAT,)),
    _s("truncate", "dataset", "str", None,
       "a conversation (or Summarization pair) too long for a row: dropped (default), or cut: keep_start | "
       "keep_end of each turn (of the prompt; then the completion's end)",
       modes=CONVERSATION_MODES + SUMMARIZATION_MODES),
    _s("chosen_key", "dataset", "str", "chosen",
       "record key of the chosen response (a string, or a list of messages ending with it)", modes=(DPO,)),
    _s("rejected_key", "dataset", "str", "rejected",
       "record key of the rejected response (a string, or a list of messages ending with it)", modes=(DPO,)),
    _s("max_prompt_length", "dataset", "int", 512,
       "prompt tokens kept (its end) when a pair does not fit max_seq_length", modes=(DPO,)),
)
