"""Every reason the job counts for a record left out is defined once, in transforms/core/reasons.py, and
verify refuses a data_params.json that counts another."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from transforms.core import reasons
from transforms.core.verify import OURS, DatasetSpec, check_stats

ROOT = Path(__file__).resolve().parents[1]
# Where the code names a reason: a refusal's first argument, a (reason, detail) pair returned by a check, a
# reason assigned by name.
_RAISED = re.compile(r"""(?:ChatError|RegionError)\(\s*["']([a-z_]+)["']""")
_RETURNED = re.compile(r"""return\s+["']([a-z_]+)["'],\s*\(?f?["']""")  # return "reason", "detail"
_ASSIGNED = re.compile(r"""\breason\s*=\s*["']([a-z_]+)["']""")
# A reason counted by the constant that names it: stats.add(f"dropped.{NOT_IN_MIXTURE}", ...).
_COUNTED = re.compile(r"""["'](?:dropped|bad)\.\{([A-Z_]+)\}""")


def _module_of(path: Path):
    import importlib

    return importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))


def _named_in_code() -> dict:
    found = {}
    for top in ("transforms", "pipelines"):
        for path in sorted((ROOT / top).rglob("*.py")):
            text = path.read_text()
            for pattern in (_RAISED, _RETURNED, _ASSIGNED):
                for m in pattern.finditer(text):
                    found.setdefault(m.group(1), f"{path.relative_to(ROOT)}:{text[:m.start()].count(chr(10)) + 1}")
            for m in _COUNTED.finditer(text):  # the constant's value, where the module defines or imports it
                value = getattr(_module_of(path), m.group(1))
                found.setdefault(value, f"{path.relative_to(ROOT)}:{text[:m.start()].count(chr(10)) + 1}")
    return found


def test_every_reason_the_code_names_is_defined():
    named = _named_in_code()
    # The scan finds each form (it must not silently find nothing): raised, returned, assigned.
    assert {"too_long", "unpaired_turns", "hook_raised", "system_not_rendered", "bad_loss_weight",
            "not_in_mixture"} <= set(named)
    undefined = {name: where for name, where in named.items() if not reasons.known(name)}
    assert not undefined, f"reasons not in transforms/core/reasons.py: {undefined}"


def test_the_row_builders_count_the_defined_names():
    from transforms.core import pack, summarization, vsl
    from transforms.core.chat import batch

    counted = {pack.DROP_MIN_LEN, pack.DROP_REMAINDER, pack.DROP_SHORT_SEQ, pack.DROP_SINGLE_TOKEN,
               summarization.DROP_TOO_LONG, summarization.DROP_TOO_SHORT, vsl.DROP_NOT_FOLDED, batch.DROP_TOO_SHORT}
    assert counted == {"shorter_than_min_sequence_len", "remainder_not_written", "cut_by_short_seq_prob",
                       "no_token_to_predict", "too_long", "longer_than_max_seq_length"}
    assert all(reasons.known(name) for name in counted)


def test_each_reason_once_with_what_it_means():
    names = [r.name for r in reasons.REASONS]
    assert len(names) == len(set(names))
    assert all(r.kind in (reasons.BAD, reasons.DROPPED, reasons.BOTH) and r.what for r in reasons.REASONS)
    assert reasons.describe("blank_line") == ("blank_line: an empty line of a .txt file read a record per line "
                                              "(txt_lines)")
    assert reasons.describe("made_up") == "made_up"


def _params(dropped: dict, bad: dict) -> dict:
    n_dropped, n_bad = sum(dropped.values()), sum(bad.values())
    return {"setup": {"mode": "LMData"}, "features": ["input_ids", "attention_mask", "labels"], "post-process": {},
            "input": {"documents_read": 10 + n_dropped + n_bad, "good": 10 + n_dropped, "used": 10,
                      "dropped": n_dropped, "dropped_by_reason": dropped, "bad": n_bad, "bad_by_reason": bad}}


@pytest.mark.parametrize("dropped, bad, expected", [
    ({"blank_line": 2}, {"json_decode": 1}, []),
    ({"filtered_by_mood": 2}, {}, ["input.dropped_by_reason counts 'filtered_by_mood', a reason this tool does "
                                   "not define (transforms.core.reasons)"]),
    ({}, {"cosmic_ray": 1}, ["input.bad_by_reason counts 'cosmic_ray', a reason this tool does not define "
                             "(transforms.core.reasons)"]),
])
def test_verify_refuses_a_reason_it_does_not_define(dropped, bad, expected):
    spec = DatasetSpec("LMData", OURS, False)
    problems, _ = check_stats(_params(dropped, bad), {}, spec, file_rows={})
    assert [p for p in problems if "reason this tool" in p] == expected
