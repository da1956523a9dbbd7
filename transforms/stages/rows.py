"""The rows stage of each mode, by the key its entry in the table of modes gives (`Mode.rows`).

Tokens in, rows out: TokenBatch (templated modes: EncodedBatch) -> RowBlock, or WindowBlock whose [n, F, msl]
rows are built a batch at a time when they are encoded. A new row layout is a pure builder in the core, its
stage, and one line here; the graph only asks `build_rows`.

`plan` is anything with the mode's settings as attributes (pack, summarization, vsl, fim, chat, seed,
tokenizer_files): the job's plan, or one whose settings are per output (PerPart).
"""

from __future__ import annotations

from transforms.core.modes import PAIR, Mode
from transforms.stages.chat import BuildChatRows
from transforms.stages.fim import ApplyFim
from transforms.stages.pack import PackSequences
from transforms.stages.summarize import BuildSummarizationRows
from transforms.stages.vsl import PackDocumentsVsl

__all__ = ["build_rows", "ROW_STAGES"]


def _windows(mode: Mode, plan, tokens):
    # Windows over the token stream: full [n, 3, msl] rows are only built, a batch at a time, to encode them.
    return tokens | "PackSequences" >> PackSequences(plan.pack, seed=plan.seed, windows_only=True)


def _pairs(mode: Mode, plan, tokens):
    return tokens | "BuildSummarizationRows" >> BuildSummarizationRows(plan.summarization)


def _vsl(mode: Mode, plan, tokens):
    # Segments and where they go; the [n, 5, msl] rows are only built, a batch at a time, to encode them.
    return tokens | "PackDocumentsVsl" >> PackDocumentsVsl(plan.vsl, seed=plan.seed, summarization=mode.record == PAIR)


def _fim(mode: Mode, plan, tokens):
    return (tokens
            | "PackSequences" >> PackSequences(plan.pack, seed=plan.seed)
            | "ApplyFim" >> ApplyFim(plan.fim, tokenizer_files=plan.tokenizer_files, seed=plan.seed))


def _chat(mode: Mode, plan, tokens):
    return tokens | "BuildChatRows" >> BuildChatRows(plan.chat)


ROW_STAGES = {"windows": _windows, "pairs": _pairs, "vsl": _vsl, "fim": _fim, "chat": _chat}


def build_rows(mode: Mode, plan, tokens):
    """The mode's rows from its tokens, under the stage labels its builder gives."""
    return ROW_STAGES[mode.rows](mode, plan, tokens)
