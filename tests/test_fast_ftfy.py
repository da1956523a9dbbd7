"""The ftfy fast path equals ftfy.fix_text, on adversarial and real text."""

from __future__ import annotations

import json

import ftfy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import SHARED, require_shared
from transforms.core.fast_ftfy import fix_text

# Pieces that exercise every ftfy fixer, mixed with plain ASCII that the fast path skips.
PIECES = [
    "plain ascii text ", "\n", "\r\n", "\r", "&amp;", "&lt;b&gt;", "&#39;", "&nbsp;", "<b>", "AT&T ", "\x1b[31m",
    "\x00", "\x07", "\x0b", "\x0c", "\x1f", "\x7f", "\t", "Ã©", "â€™", "Ã¢â‚¬Å“", "caf\u00e9", "cafe\u0301",
    "\ufb01", "\uff21", "\u2018q\u2019", "\u201cq\u201d", "\u2028", "\u2029", "\x85", "\x9d", "\ud83d", "日本語",
    "\u00a0", "Ã\u00a0", "\ufffd", "ﬁnal", "½", "x" * 50, " ",
]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=40), st.sampled_from(["NFC", "NFKC", None]))
def test_equals_ftfy_on_adversarial_text(pieces, normalization):
    text = "".join(pieces)
    assert fix_text(text, normalization) == ftfy.fix_text(text, normalization=normalization)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200), st.sampled_from(["NFC", "NFKC"]))
def test_equals_ftfy_on_random_unicode(text, normalization):
    assert fix_text(text, normalization) == ftfy.fix_text(text, normalization=normalization)


def test_a_less_than_sign_turns_html_unescaping_off_for_the_rest():
    text = "a &amp; b\n<p> c &amp; d\ne &amp; f\n"
    assert fix_text(text) == ftfy.fix_text(text) == "a & b\n<p> c &amp; d\ne &amp; f\n"


@pytest.mark.parametrize("name", ["en_small_pd.jsonl", "code_small.jsonl"])
def test_equals_ftfy_on_real_corpora(name):
    path = require_shared(SHARED / "corpora" / name)
    for line in path.read_text().splitlines():
        text = json.loads(line)["text"]
        assert fix_text(text, "NFC") == ftfy.fix_text(text, normalization="NFC")
