"""Why a record has no row: every reason the job counts, defined once, with what it means.

A record the job cannot read as its mode needs is *bad*: a dead letter
(OUT/dead_letter/, its raw bytes and where it was), counted in
data_params.json's `input.bad_by_reason`. A record read well but left out by
a rule (a setting, a length) is *dropped*, counted in `input.dropped_by_reason`.
Some reasons are both: a conversation's template can fail when the reader
checks it (bad) or when its tokens are laid out (dropped).

The readers, the row builders, the chat and read-hook code raise or count
these names; `verify` refuses a data_params.json that counts a reason not
listed here, and `tests/test_reasons.py` checks that every reason the code
raises is listed. A new stage that removes records (deduplication, a filter)
adds its reasons here.
"""

from __future__ import annotations

import dataclasses

__all__ = ["Reason", "REASONS", "BAD", "DROPPED", "BOTH", "describe", "known",
           "JSON_DECODE", "BLANK_LINE", "MISSING_KEY", "NOT_A_STRING", "NULL_TEXT", "INVALID_UTF8",
           "TRUNCATED_STREAM", "UNREADABLE_FILE", "TOO_LONG", "TOO_DEEP", "SHORTER_THAN_MIN_SEQUENCE_LEN",
           "NO_TOKEN_TO_PREDICT", "REMAINDER_NOT_WRITTEN", "CUT_BY_SHORT_SEQ_PROB", "LONGER_THAN_MAX_SEQ_LENGTH",
           "NOT_IN_MIXTURE", "DUPLICATE_EXACT", "DUPLICATE_NEAR", "CONTAMINATED",
           "LANGUAGE"]

BAD, DROPPED, BOTH = "bad", "dropped", "bad or dropped"


@dataclasses.dataclass(frozen=True)
class Reason:
    name: str  # as counted in data_params.json and written in a dead letter's `reason`
    kind: str  # BAD | DROPPED | BOTH
    what: str  # what it means, and the setting that decides it where one does


# The reader's: the bytes or the JSON.
JSON_DECODE = "json_decode"
BLANK_LINE = "blank_line"
MISSING_KEY = "missing_key"
NOT_A_STRING = "not_a_string"
NULL_TEXT = "null_text"
INVALID_UTF8 = "invalid_utf8"
TRUNCATED_STREAM = "truncated_stream"
UNREADABLE_FILE = "unreadable_file"
TOO_LONG = "too_long"
TOO_DEEP = "too_deep"
# The row builders'.
SHORTER_THAN_MIN_SEQUENCE_LEN = "shorter_than_min_sequence_len"
NO_TOKEN_TO_PREDICT = "no_token_to_predict"
REMAINDER_NOT_WRITTEN = "remainder_not_written"
CUT_BY_SHORT_SEQ_PROB = "cut_by_short_seq_prob"
LONGER_THAN_MAX_SEQ_LENGTH = "longer_than_max_seq_length"
# Selection.
NOT_IN_MIXTURE = "not_in_mixture"
DUPLICATE_EXACT = "duplicate_exact"
DUPLICATE_NEAR = "duplicate_near"
CONTAMINATED = "contaminated"
LANGUAGE = "language"

REASONS: tuple[Reason, ...] = (
    # Reading.
    Reason(JSON_DECODE, BAD, "the line is not valid JSON"),
    Reason(BLANK_LINE, DROPPED, "an empty line of a .txt file read a record per line (txt_lines)"),
    Reason(MISSING_KEY, BAD, "the record lacks a key the mode reads (jsonl_key, prompt_key, messages_key, ...)"),
    Reason(NOT_A_STRING, BOTH, "a value the mode reads as text is not a string"),
    Reason(NULL_TEXT, BAD, "a value the mode reads as text is null"),
    Reason(INVALID_UTF8, BAD, "the bytes are not UTF-8"),
    Reason(TRUNCATED_STREAM, BAD, "the file ends inside a compressed stream or an archive member"),
    Reason(UNREADABLE_FILE, BAD, "the file cannot be opened or read as its extension says"),
    Reason(TOO_LONG, BOTH, "longer than a limit: a record over max_record_mb (never loaded), or a pair or "
           "conversation over max_seq_length that truncate does not cut"),
    Reason(TOO_DEEP, BAD, "JSON nested deeper than 256 levels"),
    # Making rows.
    Reason(SHORTER_THAN_MIN_SEQUENCE_LEN, DROPPED, "fewer tokens than min_sequence_len"),
    Reason(NO_TOKEN_TO_PREDICT, DROPPED, "a single token: no position to train"),
    Reason(REMAINDER_NOT_WRITTEN, DROPPED, "the tokens after the last full row, with write_remainder False"),
    Reason(CUT_BY_SHORT_SEQ_PROB, DROPPED, "tokens cut off a row shortened by short_seq_prob"),
    Reason(LONGER_THAN_MAX_SEQ_LENGTH, DROPPED, "over max_seq_length + 1 tokens, with fold_long_doc False"),
    # Selecting.
    Reason(NOT_IN_MIXTURE, DROPPED, "a document a mixture's draw did not take (its source's budget is met "
           "without it)"),
    Reason(DUPLICATE_EXACT, DROPPED, "the same token ids as a record kept (dedup); listed in OUT/dedup/ with it"),
    Reason(DUPLICATE_NEAR, DROPPED, "a near duplicate of a record kept (dedup near: estimated Jaccard of their "
           "shingles at least dedup_threshold); listed in OUT/dedup/ with it"),
    Reason(CONTAMINATED, DROPPED, "holds an n-gram of an evaluation set (decontaminate: decontaminate_ngram units "
           "after case folding and without punctuation, one found in at most decontaminate_max_docs training "
           "records); listed in OUT/filtered/decontaminate/ with the evaluation item"),
    # The quality filters' rules (transforms.core.quality; --quality_filters), named as datatrove names them.
    Reason("gopher_short_doc", DROPPED, "gopher_quality: fewer non-symbol words than min_doc_words"),
    Reason("gopher_long_doc", DROPPED, "gopher_quality: more non-symbol words than max_doc_words"),
    Reason("gopher_below_avg_threshold", DROPPED, "gopher_quality: mean word length below min_avg_word_length"),
    Reason("gopher_above_avg_threshold", DROPPED, "gopher_quality: mean word length above max_avg_word_length"),
    Reason("gopher_too_many_hashes", DROPPED, "gopher_quality: more '#' per word than max_symbol_word_ratio"),
    Reason("gopher_too_many_ellipsis", DROPPED, "gopher_quality: more ellipses per word than "
           "max_symbol_word_ratio"),
    Reason("gopher_too_many_bullets", DROPPED, "gopher_quality: more lines starting with a bullet than "
           "max_bullet_lines_ratio"),
    Reason("gopher_too_many_end_ellipsis", DROPPED, "gopher_quality: more lines ending with an ellipsis than "
           "max_ellipsis_lines_ratio"),
    Reason("gopher_below_alpha_threshold", DROPPED, "gopher_quality: fewer words holding a letter than "
           "max_non_alpha_words_ratio"),
    Reason("gopher_enough_stop_words", DROPPED, "gopher_quality: fewer of its stop words than min_stop_words"),
    Reason("gopher_repetition_empty", DROPPED, "gopher_repetition: the text is empty (datatrove's 'empty')"),
    Reason("dup_para_frac", DROPPED, "gopher_repetition: more paragraphs repeating an earlier one than "
           "dup_para_frac"),
    Reason("dup_para_char_frac", DROPPED, "gopher_repetition: more characters in repeated paragraphs than "
           "dup_para_char_frac"),
    Reason("dup_line_frac", DROPPED, "gopher_repetition: more lines repeating an earlier one than dup_line_frac"),
    Reason("dup_line_char_frac", DROPPED, "gopher_repetition: more characters in repeated lines than "
           "dup_line_char_frac"),
    *(Reason(f"top_{n}_gram", DROPPED, f"gopher_repetition: its most frequent {n}-word n-gram holds more of the "
             "text than top_n_grams allows") for n in range(2, 11)),
    *(Reason(f"duplicated_{n}_n_grams", DROPPED, f"gopher_repetition: its repeated {n}-word n-grams hold more of "
             "the text than dup_n_grams allows") for n in range(2, 11)),
    Reason("lorem_ipsum", DROPPED, "c4_quality: a line it keeps holds \"lorem ipsum\" (filter_lorem_ipsum)"),
    Reason("curly_bracket", DROPPED, "c4_quality: a line it keeps holds a curly bracket (filter_curly_bracket)"),
    Reason("too_few_sentences", DROPPED, "c4_quality: fewer sentences in the lines it keeps than min_num_sentences"),
    Reason("c4_empty", DROPPED, "c4_quality: no text left once its rules cut the lines they refuse"),
    Reason("fineweb_empty", DROPPED, "fineweb_quality: no line that is not blank (datatrove's 'empty')"),
    Reason("line_punct_ratio", DROPPED, "fineweb_quality: fewer lines ending a sentence than line_punct_thr"),
    Reason("short_line_ratio", DROPPED, "fineweb_quality: more lines of at most short_line_length characters than "
           "short_line_thr"),
    Reason("char_dup_ratio", DROPPED, "fineweb_quality: more characters in lines repeating an earlier one than "
           "char_duplicates_ratio"),
    Reason("list_ratio", DROPPED, "fineweb_quality: more newlines per word than new_line_ratio"),
    Reason(LANGUAGE, DROPPED, "not in one of the languages asked for (languages: none of them scores above "
           "language_threshold, by fastText's lid.176 as datatrove asks it); listed in OUT/filtered/language/ with "
           "its language and score"),
    # Conversations and preference pairs (the chat template's rendering and its loss mask).
    Reason("no_messages", BOTH, "the conversation holds no message"),
    Reason("not_a_conversation", BOTH, "the conversation is not a list of messages"),
    Reason("unknown_role", BOTH, "a message's role is missing or not one the template knows"),
    Reason("empty_content", BOTH, "a message other than the system's is empty and calls no tool"),
    Reason("no_assistant_turn", BOTH, "no assistant message to train on"),
    Reason("special_token_in_content", BOTH, "a message's text holds a special token of the template"),
    Reason("template_error", BOTH, "the chat template raised an error rendering the conversation"),
    Reason("content_not_found", BOTH, "a message's text is not where the template's rendering should hold it"),
    Reason("system_not_rendered", BOTH, "the template does not write the system prompt (Mistral's, when the "
           "conversation ends with the assistant's turn)"),
    Reason("content_rewritten", BOTH, "the template writes a message's text other than it is"),
    Reason("tools_not_rendered", BOTH, "the template leaves out the record's tools or tool calls"),
    Reason("not_a_tool_call", BOTH, "a message's tool calls are malformed (not a list, no function name, not JSON)"),
    Reason("not_a_tool_list", BOTH, "the record's tools are not a list of function schemas"),
    Reason("tool_call_not_located", BOTH, "a tool call's text cannot be located in the rendering"),
    Reason("prompts_differ", BOTH, "a preference pair's chosen and rejected conversations start differently"),
    Reason("identical_responses", BOTH, "a preference pair's chosen and rejected responses are the same"),
    Reason("prompt_not_a_prefix", BOTH, "the prompt's rendering is not the start of the whole conversation's"),
    Reason("prompt_not_a_token_prefix", BOTH, "a token spans the end of the prompt"),
    Reason("attention_mask_not_written", BOTH, "a read hook's region masks attention and the rows cannot say so "
           "(pretraining rows; Chat without key_padding_mask)"),
    Reason("bad_loss_weight", BOTH, "a read hook's region has a loss weight other than 0 or 1"),
    # A Cerebras 2.10 read hook's regions.
    Reason("hook_raised", BAD, "the read hook raised an exception on the record"),
    Reason("not_a_preference", BAD, "the hook's turns are not a prompt, then a chosen and a rejected response"),
    Reason("untrained_region", BAD, "a region with a loss weight other than 1, which pretraining rows cannot hold"),
    Reason("empty_array", BAD, "the read hook returned no turns, or every part is dropped (semantic_drop_mask)"),
    Reason("empty_region", BAD, "a turn or part is empty or null"),
    Reason("image_region", BAD, "a region is an image: multimodal rows are not written yet"),
    Reason("mask_length", BAD, "a semantic mask has another number of entries than the turn has parts"),
    Reason("mixed_shapes", BAD, "a preference pair gives one side as text, the other as a list of messages"),
    Reason("no_assistant_marker", BAD, "a transcript has no assistant turn marker to split at"),
    Reason("not_a_semantic_array", BAD, "the hook's output is not a list of semantic regions"),
    Reason("not_single_turn", BAD, "a preference pair's conversations are not one prompt and one response each"),
    Reason("region_not_text", BAD, "a text region's part is not a string"),
    Reason("unknown_region_type", BAD, "a turn's type (its role) is missing or not one a read hook may give"),
    Reason("unpaired_turns", BAD, "after the system message, the turns are not pairs of user and assistant"),
)
_BY_NAME = {r.name: r for r in REASONS}
assert len(_BY_NAME) == len(REASONS), "a reason is listed twice"


def known(name: str) -> bool:
    return name in _BY_NAME


def describe(name: str) -> str:
    """`name`: what it means (the name alone for one not listed)."""
    reason = _BY_NAME.get(name)
    return f"{name}: {reason.what}" if reason is not None else name
