"""The table of modes: what each mode reads, what its rows hold, and who builds them.

Every part of the tool that behaves differently by mode (the settings, the
plan, the graph, the writer's statistics, `verify`, `inspect`, `report`, the
estimate, the readers of a written dataset) asks a mode's traits here instead
of naming modes, so a new mode is one entry below, its row builder (a pure
module in the core) and its rows stage (registered under `Mode.rows` in
`transforms.stages.rows`). `tests/test_modes.py` keeps mode names out of the
rest of the code.

The traits are facts about the rows a mode writes, not flags of one feature:
`record` says what one input record is, `vsl` whether rows hold several
documents side by side (position ids and attention spans), `fim` whether rows
are rearranged around a middle, `loss` where a sequence's trained positions lie.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from transforms.core.features import DPO_FEATURES, KEY_PADDING_FEATURES, LM_FEATURES, VSL_FEATURES

__all__ = ["Mode", "MODES", "MODE_NAMES", "TEXT", "PAIR", "CONVERSATION", "PREFERENCE", "mode", "find_mode",
           "mode_of_processor", "names_where", "DEFAULT_MODE"]

# What one input record is.
TEXT = "text"  # one text (a document) per record, its key `jsonl_key`
PAIR = "pair"  # a prompt and a completion
CONVERSATION = "conversation"  # a list of messages, rendered by a chat template
PREFERENCE = "preference"  # a prompt and two responses, chosen and rejected, rendered by a chat template

# Where a sequence's trained positions lie (what `verify` checks of each row).
PREFIX = "prefix"  # every real position but the last label's: a packed window (LMData, FIM)
RUN = "run"  # one run, the completion (Summarization)
SEGMENTS = "segments"  # per document side by side (VSL), each as its mode's record says
TURNS = "turns"  # the assistant turns of a conversation
RESPONSE = "response"  # one run per side, the response (DPO)


@dataclasses.dataclass(frozen=True)
class Mode:
    name: str  # as the command line and data_params.json's `setup.mode` spell it
    processor: str  # Cerebras' `dataset_processor` of the same rows
    record: str  # TEXT | PAIR | CONVERSATION | PREFERENCE
    rows: str  # the key of its rows stage in transforms.stages.rows
    loss: str  # PREFIX | RUN | SEGMENTS | TURNS | RESPONSE
    features: tuple = LM_FEATURES  # what data[:, i, :] holds, in order
    vsl: bool = False
    fim: bool = False
    # A sequence's real inputs end one position after its last trained one: an EOS read as input whose label is
    # not trained (Summarization's completion + EOS, FIM's packed prefix, DPO's response).
    trailing_eos_input: bool = False
    # Other feature lists a row of this mode may hold (Chat from a read hook whose regions mask attention).
    other_features: tuple = ()

    @property
    def templated(self) -> bool:
        """Rendered by a chat template: the record's text and its tokens are made together."""
        return self.record in (CONVERSATION, PREFERENCE)

    @property
    def sides(self) -> tuple:
        """The sequences one row holds: a preference pair's chosen and rejected (3 features each), else one."""
        return ("chosen", "rejected") if self.record == PREFERENCE else ("",)

    @property
    def one_row_per_record(self) -> bool:
        """Each record that fits makes one padded row of its own."""
        return self.templated and not self.vsl

    @property
    def packed_windows(self) -> bool:
        """Rows are windows of max_seq_length over the documents' concatenated tokens."""
        return self.record == TEXT and not self.vsl

    @property
    def unit(self) -> str:
        """What one segment of a row is called in messages."""
        return "conversation" if self.record == CONVERSATION else "document"

    def writes(self, features: tuple) -> bool:
        """Whether rows of these features are this mode's."""
        return tuple(features) == self.features or tuple(features) in self.other_features


MODES: tuple[Mode, ...] = (
    Mode("LMData", "LMDataPreprocessor", TEXT, rows="windows", loss=PREFIX),
    Mode("Summarization", "SummarizationPreprocessor", PAIR, rows="pairs", loss=RUN, trailing_eos_input=True),
    Mode("FIM", "FIMDataPreprocessor", TEXT, rows="fim", loss=PREFIX, fim=True, trailing_eos_input=True),
    Mode("LMData_VSL", "VSLLMDataPreprocessor", TEXT, rows="vsl", loss=SEGMENTS, features=VSL_FEATURES, vsl=True),
    Mode("Summarization_VSL", "VSLSummarizationPreprocessor", PAIR, rows="vsl", loss=SEGMENTS,
         features=VSL_FEATURES, vsl=True),
    Mode("Chat", "ChatPreprocessor", CONVERSATION, rows="chat", loss=TURNS, other_features=(KEY_PADDING_FEATURES,)),
    Mode("Chat_VSL", "VSLChatPreprocessor", CONVERSATION, rows="chat", loss=SEGMENTS, features=VSL_FEATURES,
         vsl=True),
    Mode("DPO", "DPOPreprocessor", PREFERENCE, rows="chat", loss=RESPONSE, features=DPO_FEATURES,
         trailing_eos_input=True),
)
MODE_NAMES = tuple(m.name for m in MODES)
DEFAULT_MODE = MODES[0].name
_BY_NAME = {m.name: m for m in MODES}
_BY_PROCESSOR = {m.processor: m for m in MODES}


def mode(name: str) -> Mode:
    """The mode of this name (KeyError naming the modes for another)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown mode {name!r}: one of {', '.join(MODE_NAMES)}") from None


def mode_of_processor(processor: Optional[str]) -> Optional[Mode]:
    """The mode of a Cerebras `dataset_processor` name, or of a mode's own name; None for another."""
    return _BY_PROCESSOR.get(processor) or _BY_NAME.get(processor)


def find_mode(record: str, *, vsl: bool = False, fim: bool = False) -> Mode:
    """The one mode of these traits (how a configuration written in other terms, such as Cerebras 2.10's, finds
    its mode)."""
    found = [m for m in MODES if m.record == record and m.vsl == vsl and m.fim == fim]
    if len(found) != 1:
        raise KeyError(f"no mode reads a {record} record with vsl={vsl}, fim={fim}")
    return found[0]


def names_where(**traits) -> tuple:
    """The names of the modes whose traits (attributes or properties) have these values, in table order."""
    return tuple(m.name for m in MODES if all(getattr(m, k) == v for k, v in traits.items()))
