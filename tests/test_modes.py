"""The table of modes: its traits, and that no other module names a mode.

A mode is named (a string literal equal to a mode's or Cerebras processor's
name, or one of the old mode constants) only in the table; everything else
asks the table for the mode's traits. Tests,
docs and benchmarks call the command with mode names, as users do, and are not
counted.
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import pytest

from transforms.core import modes
from transforms.core.features import DPO_FEATURES, KEY_PADDING_FEATURES, LM_FEATURES, VSL_FEATURES

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("pipelines", "transforms", "templates", "scripts")
# The table itself: everything else, the translation of Cerebras 2.10's configuration included, asks it.
ALLOWED = {"transforms/core/modes.py"}
NAMES = set(modes.MODE_NAMES) | {m.processor for m in modes.MODES}
CONSTANTS = {"LMDATA", "SUMMARIZATION", "FIM", "LMDATA_VSL", "SUMMARIZATION_VSL", "CHAT", "CHAT_VSL", "DPO",
             "VSL_MODES", "SUMMARIZATION_MODES", "CHAT_MODES", "CONVERSATION_MODES", "ONE_ROW_PER_RECORD",
             "PACKED_WINDOWS", "PROCESSOR_NAMES", "DPO_SIDES"}


def naming_a_mode(path: Path) -> list[str]:
    """Where a file's code names a mode: each string literal that is a mode's name and each mode constant."""
    found = []
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if tok.type == tokenize.STRING:
            try:
                value = ast.literal_eval(tok.string)
            except (ValueError, SyntaxError):
                continue
            if isinstance(value, str) and value in NAMES:
                found.append(f"line {tok.start[0]}: {tok.string}")
        elif tok.type == tokenize.NAME and tok.string in CONSTANTS:
            found.append(f"line {tok.start[0]}: {tok.string}")
    return found


def _product_files():
    for top in PRODUCT:
        for path in sorted((ROOT / top).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path


def test_the_counter_sees_literals_and_constants_not_prose(tmp_path):
    f = tmp_path / "x.py"
    f.write_text('"""LMData and DPO rows."""\n# FIM here\nA = "Chat_VSL"\nB = VSL_MODES\nC = "Chat is"\n'
                 'D = "VSLChatPreprocessor"\n')
    assert naming_a_mode(f) == ["line 3: \"Chat_VSL\"", "line 4: VSL_MODES", "line 6: \"VSLChatPreprocessor\""]


def test_no_module_names_a_mode_outside_the_table():
    naming = {name: hits for name, path in _product_files() if (hits := naming_a_mode(path))}
    outside = {name: hits[:3] for name, hits in naming.items() if name not in ALLOWED}
    assert not outside, f"these name a mode: ask transforms.core.modes for its traits instead: {outside}"
    assert set(naming) == ALLOWED  # the table names its modes


def test_the_table():
    assert modes.MODE_NAMES == ("LMData", "Summarization", "FIM", "LMData_VSL", "Summarization_VSL", "Chat",
                                "Chat_VSL", "DPO")
    assert modes.DEFAULT_MODE == "LMData"
    assert modes.names_where(vsl=True) == ("LMData_VSL", "Summarization_VSL", "Chat_VSL")
    assert modes.names_where(templated=True) == ("Chat", "Chat_VSL", "DPO")
    assert modes.names_where(trailing_eos_input=True) == ("Summarization", "FIM", "DPO")
    assert modes.names_where(one_row_per_record=True) == ("Chat", "DPO")
    assert modes.names_where(packed_windows=True) == ("LMData", "FIM")
    assert modes.names_where(record=modes.PAIR) == ("Summarization", "Summarization_VSL")
    assert [modes.mode(n).features for n in modes.MODE_NAMES] == [LM_FEATURES] * 3 + [VSL_FEATURES] * 2 + [
        LM_FEATURES, VSL_FEATURES, DPO_FEATURES]
    assert modes.mode("DPO").sides == ("chosen", "rejected") and modes.mode("Chat").sides == ("",)
    assert modes.mode("Chat").writes(KEY_PADDING_FEATURES) and not modes.mode("Chat_VSL").writes(KEY_PADDING_FEATURES)
    assert modes.mode("Chat_VSL").unit == "conversation" and modes.mode("LMData_VSL").unit == "document"
    # Every processor name is Cerebras' own, one per mode, and maps back.
    assert len({m.processor for m in modes.MODES}) == len(modes.MODES)
    for m in modes.MODES:
        assert modes.mode_of_processor(m.processor) is m and modes.mode_of_processor(m.name) is m
    assert modes.mode_of_processor("pretraining") is None and modes.mode_of_processor(None) is None


def test_a_mode_is_found_by_its_traits():
    assert modes.find_mode(modes.CONVERSATION, vsl=True).name == "Chat_VSL"
    assert modes.find_mode(modes.TEXT, fim=True).name == "FIM"
    assert modes.find_mode(modes.PREFERENCE).name == "DPO"
    with pytest.raises(KeyError, match="no mode reads a preference record with vsl=True"):
        modes.find_mode(modes.PREFERENCE, vsl=True)
    with pytest.raises(KeyError, match="unknown mode 'Chatt': one of LMData, Summarization"):
        modes.mode("Chatt")


def test_every_rows_key_has_a_stage():
    pytest.importorskip("apache_beam")
    from transforms.stages.rows import ROW_STAGES

    assert {m.rows for m in modes.MODES} == set(ROW_STAGES)


def test_the_command_line_offers_every_mode_of_the_table():
    from pipelines.config import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "mode")
    assert [c for c in sub.choices if c in modes.MODE_NAMES] == list(modes.MODE_NAMES)
