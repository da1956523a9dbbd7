"""The fast ftfy equals ftfy.fix_text: the argument's parts one by one, then on generated and real text.

The parts (transforms/core/fast_ftfy.py's docstring): each step after fix_encoding is the identity on text
without its trigger characters; the translation steps equal ftfy's; the mojibake prefilter finds every
text BADNESS_RE matches. Then the whole against ftfy: every code point in context, mojibake of every kind,
the corpora here.
"""

from __future__ import annotations

import html
import json
import random
import re
import sys
import unicodedata

import ftfy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import SHARED, require_shared
from transforms.core import fast_ftfy
from transforms.core.fast_ftfy import fix_text

T = fast_ftfy._tables()
pytestmark = pytest.mark.skipif(not T.fast, reason=f"the fast path is off: {T.reason}")

# Pieces that exercise every ftfy fixer, mixed with plain ASCII that the fast path skips.
PIECES = [
    "plain ascii text ", "\n", "\r\n", "\r", "&amp;", "&lt;b&gt;", "&#39;", "&nbsp;", "<b>", "AT&T ", "\x1b[31m",
    "\x00", "\x07", "\x0b", "\x0c", "\x1f", "\x7f", "\t", "Ã©", "â€™", "Ã¢â‚¬Å“", "caf\u00e9", "cafe\u0301",
    "\ufb01", "\uff21", "\u2018q\u2019", "\u201cq\u201d", "\u2028", "\u2029", "\x85", "\x9d", "\ud83d", "日本語",
    "\u00a0", "Ã\u00a0", "\ufffd", "ﬁnal", "½", "x" * 50, " ", "Ã ", "Â ", "вЂ", "ï¼Œ", "，", "Привет", "«",
    "&#x201C;", "&NewLine;", "&amp;lt;", "＆ａｍｐ；", "Ｕﾀｰﾝ", "\u3000", "\ufeff", "\u206a", "I\u0307", "한국어",
]
ALL_CODE_POINTS = range(sys.maxunicode + 1)


def same(text: str, normalization="NFC") -> None:
    assert fix_text(text, normalization) == ftfy.fix_text(text, normalization=normalization), repr(text[:200])


# --- The argument's parts ---

@pytest.mark.parametrize("index", range(len(T.steps)))
def test_every_step_is_the_identity_without_its_trigger_characters(index):
    """Each step, on every code point it is not triggered by, between letters and at a line's ends."""
    chars, step = T.steps[index]
    others = [chr(cp) for cp in ALL_CODE_POINTS if chr(cp) not in chars]
    for i in range(0, len(others), 4096):
        text = "".join(f"a{c}b\n{c}" for c in others[i:i + 4096])
        assert step(text) == text


@pytest.mark.parametrize("name", ["fix_latin_ligatures", "fix_character_width", "remove_control_chars"])
def test_the_translation_steps_equal_ftfys(name):
    fixer = getattr(ftfy.fixes, name)
    ours = next(step for _, step in T.steps if step.__name__ == name)
    assert ours is not fixer
    text = _keys_text(name) + "".join(chr(cp) for cp in range(0x3000, 0x3100)) + "plain, 日本語 ＡＢＣ"
    assert ours(text) == fixer(text)


def _keys_text(name: str) -> str:
    table = {"fix_latin_ligatures": ftfy.chardata.LIGATURES, "fix_character_width": ftfy.chardata.WIDTH_MAP,
             "remove_control_chars": ftfy.chardata.CONTROL_CHARS}[name]
    return "".join(f"x{chr(k)}y " for k in table)


# Every character BADNESS_RE names, and what it puts around them: the alphabet in which its matches live.
def _named_chars(items) -> set:
    from re import _constants as c

    chars = set()
    for op, arg in items:
        if op is c.LITERAL:
            chars.add(arg)
        elif op is c.IN:
            for iop, iarg in arg:
                chars.update([iarg] if iop is c.LITERAL else range(iarg[0], iarg[1] + 1) if iop is c.RANGE else [])
        elif op is c.BRANCH:
            for branch in arg[1]:
                chars |= _named_chars(branch)
        elif op in (c.SUBPATTERN, c.MAX_REPEAT):
            chars |= _named_chars(arg[-1])
    return chars


def _bad_alphabet():
    from re import _parser

    return sorted({chr(cp) for cp in _named_chars(_parser.parse(T.badness.pattern, T.badness.flags))}
                  | set("aZ .,?!'\n\t0_"))


BAD_ALPHABET = _bad_alphabet()


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet=BAD_ALPHABET, max_size=12))
def test_the_mojibake_prefilter_finds_every_match(text):
    """_bad searches BADNESS_RE only near its prefilter's hits; it must answer what the whole search does."""
    assert fast_ftfy._bad(T, text) == (T.bad_re.search(text) is not None)


def test_the_mojibake_prefilter_on_every_alternative():
    """Each alternative of BADNESS_RE, matched by a string made from it, is found with text around it."""
    from re import _parser
    from re._constants import AT

    for branch in _parser.parse(T.badness.pattern, T.badness.flags)[0][1][1]:
        sample = _sample(branch)
        contexts = [sample, f"line\n{sample}\nmore", "Привет\n" * 3 + sample + " z"]
        if not any(op is AT for op, _ in branch):  # the `^` alternative matches at a line's start only
            contexts += [f"xy {sample} z", "Привет " * 3 + sample]
        for text in contexts:
            assert T.bad_re.search(text) is not None, (branch, text)
            assert fast_ftfy._bad(T, text), (branch, text)


def _sample(items) -> str:
    """A string the parsed items match: for each one, the first character it accepts."""
    from re import _constants as c

    out = []
    for op, arg in items:
        if op is c.LITERAL:
            out.append(chr(arg))
        elif op is c.ANY:
            out.append("x")
        elif op is c.IN:
            negate = any(iop is c.NEGATE for iop, _ in arg)
            pattern = re.compile(fast_ftfy._unparse([(op, arg)]))
            start = 0x20 if negate else 0
            out.append(next(chr(cp) for cp in range(start, 0x3000) if pattern.fullmatch(chr(cp))))
        elif op is c.MAX_REPEAT:
            out.append(_sample(arg[2]) * arg[0])
        elif op is c.SUBPATTERN:
            out.append(_sample(arg[-1]))
        elif op is c.AT:
            pass
        else:
            raise AssertionError(op)
    return "".join(out)


def test_the_prefilter_refuses_what_a_window_could_not_see():
    for pattern in (r"(?<=a)\u00e9", r"\u00e9(?=b)", r"\b\u00e9", r"\u00e9$", r"(x)\u00e9\1", r"[a-z]+"):
        with pytest.raises(fast_ftfy._Unsupported):
            fast_ftfy._prefilter(re.compile(pattern))


# --- The whole, against ftfy ---

def test_every_code_point_in_context():
    """Every code point, alone on a line, between letters, after mojibake-prone characters and before
    combining marks; in documents of many lines, so that the whole-document pass meets them together."""
    contexts = ("{c}", "a{c}b ", "Ã{c} x", "\u00e9{c}\u0301", "“{c}” ", "{c}\u00a0&amp;")
    cps = list(ALL_CODE_POINTS)
    for context in contexts:
        for i in range(0, len(cps), 2048):
            # 16 to a line: ftfy's own time is mostly per line, and a million lines would take it minutes.
            chunk = [context.format(c=chr(cp)) for cp in cps[i:i + 2048]]
            same("\n".join("".join(chunk[j:j + 16]) for j in range(0, len(chunk), 16)))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=40), st.sampled_from(["NFC", "NFKC", None]))
def test_equals_ftfy_on_adversarial_text(pieces, normalization):
    same("".join(pieces), normalization)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200), st.sampled_from(["NFC", "NFKC"]))
def test_equals_ftfy_on_random_unicode(text, normalization):
    same(text, normalization)


def test_a_less_than_sign_turns_html_unescaping_off_for_the_rest():
    text = "a &amp; b\n<p> c &amp; d\ne &amp; f\n"
    assert fix_text(text) == ftfy.fix_text(text) == "a & b\n<p> c &amp; d\ne &amp; f\n"


def test_a_segment_of_max_decode_length():
    """A line longer than ftfy's segment limit is cut where ftfy cuts it."""
    line = ("’quote’ Ã© " * (T.max_decode_length // 11 + 5))
    same(line + "\nnext line é\u0301\n")


def _real_lines():
    lines = []
    for name in ("multilingual_dev.jsonl", "en_small_pd.jsonl"):
        path = require_shared(SHARED / "corpora" / name)
        for doc in path.open(encoding="utf-8"):  # not splitlines: that also cuts at U+2028 inside a string
            lines.extend(json.loads(doc)["text"].splitlines(keepends=True))
    return lines


MOJIBAKE = {
    "latin-1": lambda s: s.encode("utf-8").decode("latin-1"),
    "cp1252": lambda s: s.encode("utf-8").decode("cp1252", "replace"),
    "sloppy-cp1252": lambda s: s.encode("utf-8").decode("sloppy-windows-1252"),
    "macroman": lambda s: s.encode("utf-8").decode("macroman"),
    "cp437": lambda s: s.encode("utf-8").decode("cp437"),
    "cp1251": lambda s: s.encode("utf-8").decode("cp1251", "replace"),
    "double": lambda s: s.encode("utf-8").decode("sloppy-windows-1252").encode("utf-8").decode("sloppy-windows-1252"),
    "entities": lambda s: html.escape(s).replace("é", "&eacute;").replace("’", "&#x2019;"),
    "c1": lambda s: s.replace("’", "\x92").replace("…", "\x85"),
    "surrogates": lambda s: s.replace("e", "\ud83d\ude00", 1).replace("o", "\udc00", 1),
    "ligatures": lambda s: s.replace("fi", "\ufb01").replace("fl", "\ufb02"),
    "fullwidth": lambda s: "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" and i % 3 == 0 else c
                                   for i, c in enumerate(s)),
    "line breaks": lambda s: s.replace("\n", "\r\n").replace(". ", ".\u2028", 1).replace(", ", ",\r", 1),
    "nfd": lambda s: unicodedata.normalize("NFD", s),
}


@pytest.mark.parametrize("kind", sorted(MOJIBAKE))
def test_generated_mojibake(kind):
    """Real lines in 50 languages broken each way ftfy repairs; documents of 40 lines, some fixed and some not."""
    import ftfy.bad_codecs  # noqa: F401 - registers sloppy-windows-1252

    rng = random.Random(kind)
    lines = _real_lines()
    rng.shuffle(lines)
    broken = MOJIBAKE[kind]
    for i in range(0, 4000, 40):
        doc = [broken(line) if rng.random() < 0.5 else line for line in lines[i:i + 40]]
        same("".join(doc))
        same("".join(doc), "NFKC")


@pytest.mark.parametrize("name", ["en_small_pd.jsonl", "code_small.jsonl", "multilingual_dev.jsonl"])
def test_equals_ftfy_on_real_corpora(name):
    path = require_shared(SHARED / "corpora" / name)
    for line in path.open(encoding="utf-8"):
        same(json.loads(line)["text"])


def test_an_unproven_ftfy_runs_ftfy_itself(monkeypatch):
    monkeypatch.setattr(ftfy, "__version__", "99.0")
    fast_ftfy._tables.cache_clear()
    try:
        assert not fast_ftfy.fast_path()
        assert fast_ftfy.ftfy_record() == {"version": "99.0", "fast_path": False,
                                           "why_not": "ftfy 99.0 is not one of 6.3.0, 6.3.1"}
        same("caf\u00e9 â€™ &amp;\n")
    finally:
        monkeypatch.undo()
        fast_ftfy._tables.cache_clear()
    assert fast_ftfy.ftfy_record() == {"version": ftfy.__version__, "fast_path": True}
