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


# --- The pieces at their edges (issue #51: what mutation testing showed no test pinned) ---

@pytest.fixture
def fresh():
    """The tables built afresh, as a new worker builds them (fix_text uses them too), not this process's copy."""
    fast_ftfy._tables.cache_clear()
    try:
        yield fast_ftfy._tables()
    finally:
        fast_ftfy._tables.cache_clear()


def test_tables_built_afresh_make_fix_text_ftfys(fresh):
    assert fresh.fast and fresh.reason == "" and fresh.badness is ftfy.badness.BADNESS_RE
    # Plain ASCII (tabs, newlines and form feeds too) holds no trigger: such text takes no step at all.
    assert fresh.trigger.search("".join(map(chr, range(32, 127))) + "\t\n\x0c") is None
    # Each step's trigger, an entity, mojibake on a later line, a decomposed accent: ftfy's result, by hand.
    cases = {
        "\x1b[31mred\x1b[0m \ufb01 \uff21 \u2018q\u2019 \u201cq\u201d a\r\nb \x00": "red fi A 'q' \"q\" a\nb ",
        "AT&amp;T\nnext line caf\u00c3\u00a9\ncafe\u0301 \ud83d": "AT&T\nnext line caf\u00e9\ncaf\u00e9 \ufffd",
    }
    for text, want in cases.items():
        assert fix_text(text) == ftfy.fix_text(text) == want
    # Every alternative of the mojibake detector is found, on a line of its own too (its `^` at a line's start).
    for branch in _parser_branches(fresh.badness):
        sample = _sample(branch)
        for text in (sample, f"line\n{sample}\nmore"):
            assert fast_ftfy._bad(fresh, text), (branch, text)


def _parser_branches(pattern):
    from re import _parser

    return _parser.parse(pattern.pattern, pattern.flags)[0][1][1]


def test_an_unproven_table_is_reported_with_what_is_wrong(monkeypatch):
    monkeypatch.setattr(ftfy.fixes, "ANSI_RE", re.compile(r"\[([0-9;]*)m"))  # not starting with ESC
    tables = fast_ftfy._Tables()
    assert not tables.fast
    assert tables.reason == f"ftfy {ftfy.__version__}: a terminal escape that does not start with ESC"


def _starts(prefilter_of: str, text: str) -> list:
    """Where the prefilter of the pattern `prefilter_of` has hits in `text`."""
    return [m.start() for m in re.finditer(fast_ftfy._prefilter(re.compile(prefilter_of)), text)]


def test_the_prefilter_starts_at_the_rarest_character_and_checks_the_ones_before_behind_it():
    # ASCII costs most, then letters, then anything else: "aéb" is scanned for é (preceded by a, followed
    # by b): only the é at 4 ("aéb" at 3).
    assert _starts("a\u00e9b", "\u00e9b a\u00e9b a\u00e9") == [4]
    # A letter and a quotation mark: the mark (after é), at 2.
    assert _starts("\u00e9\u2019", "\u2019\u00e9\u2019") == [2]
    # U+0080 is not ASCII: a control costs less than the letter before it.
    assert _starts("\u00e9\x80", "\x80\u00e9\x80") == [2]
    # A range: each of its characters starts the scan, nothing around it (ß before, ã after).
    assert _starts("[\u00e0-\u00e2]", "\u00df\u00e0\u00e1\u00e2\u00e3") == [1, 2, 3]
    # Alternatives with one first character, and another: "éa", "éb" and "àc" at 0, 3 and 9; not "éc", "àa".
    assert _starts("\u00e9a|\u00e9b|\u00e0c", "\u00e9a \u00e9b \u00e9c \u00e0c \u00e0a") == [0, 3, 9]


@pytest.mark.parametrize("pattern, probes", [
    ("a.c", ["abc", "a\u00e9c", "ac", "XX\u00e9XX"]),
    ("[^a-c\\d]", ["a", "b", "d", "5", "X"]),
    ("[\\s][\\d]", [" 5", "\t0", "X5", " X", "55"]),
    ("a{2,3}", ["a", "aa", "aaa", "aaaa"]),
    ("a{2,}", ["a", "aa", "aaaaa"]),
    ("(a|bc)d", ["ad", "bcd", "bd", "d"]),
    ("x(?:ab|c)y", ["xaby", "xcy", "xay", "xy", "xabcy"]),
])
def test_unparsed_items_match_what_the_pattern_matches(pattern, probes):
    from re import _parser

    source = fast_ftfy._unparse(_parser.parse(pattern))
    assert [bool(re.fullmatch(source, p)) for p in probes] == [bool(re.fullmatch(pattern, p)) for p in probes]


def test_what_the_argument_does_not_cover_is_refused_by_name():
    from re import _parser

    def refusal(fn, *args) -> str:
        with pytest.raises(fast_ftfy._Unsupported) as e:
            fn(*args)
        return str(e.value)

    assert refusal(fast_ftfy._unparse, _parser.parse("[\\D]")) == "CATEGORY CATEGORY_NOT_DIGIT"
    assert refusal(fast_ftfy._unparse, _parser.parse("(?=a)")) == "ASSERT"
    assert refusal(fast_ftfy._prefilter, re.compile("[a-z]+")) == "an alternative without a bounded character"
    assert refusal(fast_ftfy._prefilter, re.compile("\\b\u00e9")) == "anchor AT_BOUNDARY"
    assert refusal(fast_ftfy._class_chars, "ab") == "not a character class: 'ab'"
    # Windows around the prefilter's hits reach 64 characters either way: a match may be that long, not longer.
    assert fast_ftfy._max_width(re.compile("a{64}")) == 64
    assert refusal(fast_ftfy._max_width, re.compile("a{65}")) == "matches up to 65 characters long"

    def not_a_translation(text):
        return text

    assert refusal(fast_ftfy._translating, {ord("a"): "b"}, not_a_translation) == (
        "not_a_translation is not a translation by its table")


def test_a_translation_by_substitution():
    table = {ord("a"): None, ord("b"): ord("c"), ord("d"): "ee", ord("x"): "x"}

    def translate(text):
        return text.translate(table)

    ours = fast_ftfy._translating(table, translate)
    assert ours.__name__ == "translate"
    assert ours("abd xa!") == "cee x!"  # removed, mapped to a code point, to a string; unchanged


def test_the_normalization_hint():
    """Combining marks, the second characters of canonical pairs, Hangul's medial and final jamo; no ASCII."""
    hint = fast_ftfy._combining_hint()
    assert not [cp for cp in hint if cp < 128]
    assert {0x0301, 0x0BBE, 0x1161, 0x1175, 0x11A8, 0x11C2} <= hint  # acute; Tamil AA (of U+0BCA); jamo ends
    assert not {0x1160, 0x1176, 0x11A7, 0x11C3} & hint  # just outside the jamo ranges


def test_normalizing_asks_the_cheaper_question_and_keeps_the_text(monkeypatch):
    import types

    calls = []

    def normalize(form, text):
        calls.append(text)
        return unicodedata.normalize(form, text)

    monkeypatch.setattr(fast_ftfy, "unicodedata", types.SimpleNamespace(is_normalized=unicodedata.is_normalized,
                                                                        normalize=normalize))
    text = "plain, 日本語"
    assert fast_ftfy._normal(T, "NFC", text) is text and calls == []  # the quick check answers
    # A combining mark: normalized outright (the quick check would normalize too, to answer "maybe"); the
    # result is equal, so the text itself comes back.
    text = "x\u0301"
    assert fast_ftfy._normal(T, "NFC", text) is text and calls == [text]


@pytest.mark.parametrize("text, want", [
    ("<b>&amp;</b>", "<b>&amp;</b>"),  # "<" in the first segment: no unescaping at all
    ("x &amp;\n<p>", "x &\n<p>"),  # an entity just before the newline ending the last segment unescaped
    ("a &amp;\nb &amp;\n<p> &amp;", "a &\nb &\n<p> &amp;"),  # every segment before the one with "<"
])
def test_html_unescaping_stops_at_the_segment_with_the_first_less_than_sign(text, want):
    assert fix_text(text) == ftfy.fix_text(text) == want


def test_ftfy_runs_only_on_the_segments_it_could_change(monkeypatch):
    """The point of the module: ftfy's own (slow) loop only where a segment has something to fix."""
    calls = []
    fix_and_explain = ftfy.fix_and_explain

    def spy(text, config=None):
        calls.append(text)
        return fix_and_explain(text, config)

    monkeypatch.setattr(ftfy, "fix_and_explain", spy)
    # Nothing to fix; what one pass over the whole text fixes (curly quotes, an entity, at the very start too,
    # a decomposed accent; entities on every line before the one with "<", which the pass unescapes up to
    # that line's start, not just up to the first newline): no call.
    for text, want in (("plain line\nanother line\n", "plain line\nanother line\n"),
                       ("\u2018q\u2019 one\ntwo\n", "'q' one\ntwo\n"), ("AT&amp;T\nplain\n", "AT&T\nplain\n"),
                       ("&amp; x\n", "& x\n"), ("cafe\u0301\nplain\n", "caf\u00e9\nplain\n"),
                       ("a &amp;\nb &amp;\n<p>\n", "a &\nb &\n<p>\n")):
        assert fix_text(text) == want and calls == [], text
    # A text of exactly max_decode_length characters is one segment: the one pass does it too.
    length = T.max_decode_length
    assert fix_text("\u2018q\u2019" + "x" * (length - 3)) == "'q'" + "x" * (length - 3) and calls == []
    # Mojibake: ftfy on its segments, and on the one with an entity before the first "<" (not on the clean
    # one between them, nor on the entity after "<", which stays escaped).
    assert fix_text("a &amp; b\nplain\ncaf\u00c3\u00a9\n<p> &amp;\n") == "a & b\nplain\ncaf\u00e9\n<p> &amp;\n"
    assert calls == ["a &amp; b\n", "caf\u00c3\u00a9\n"]


def test_the_mojibake_search_in_windows_far_apart():
    """Each window is searched on its own: a match in either, or in neither, of two windows far apart."""
    hit = "\u012a\u00c3 "  # a hit of the prefilter (Ã and a space, after a letter) that BADNESS_RE does not match
    bad = "\u00c3\u00a9"  # é as mojibake: a match
    gap = " " * 20  # windows reach 7 characters either side of a hit
    for text, want in ((bad + gap + hit, True), (hit + gap + bad, True), (hit + gap + hit, False)):
        assert len(T.bad_prefilter.findall(text)) == 2 and (T.bad_re.search(text) is not None) == want
        assert fast_ftfy._bad(T, text) == want, text


def test_unescaping_that_makes_mojibake():
    # "&Atilde;&copy;" unescapes to "Ã©", mojibake for é, which ftfy's fix_encoding sees in the same pass.
    text = "caf&Atilde;&copy; cafe\u0301\n"
    assert fix_text(text) == ftfy.fix_text(text) == "caf\u00e9 caf\u00e9\n"
    assert fix_text(text, None) == ftfy.fix_text(text, normalization=None) == "caf\u00e9 cafe\u0301\n"


def test_segments_after_a_line_longer_than_max_decode_length():
    """The rest of a line cut at max_decode_length is a segment of its own, up to its newline: the next
    segment, unescaped, is not taken with the one holding "<" (which would turn unescaping off for both)."""
    line = "x" * (T.max_decode_length + 10) + "\n"
    assert fix_text(line + "&amp; x\n<p> &amp;\n") == line + "& x\n<p> &amp;\n"


def test_an_unproven_ftfy_normalizes_as_asked(monkeypatch):
    monkeypatch.setattr(ftfy, "__version__", "99.0")
    fast_ftfy._tables.cache_clear()
    try:
        assert not fast_ftfy.fast_path()
        assert fix_text("cafe\u0301") == "caf\u00e9"  # NFC by default
        assert fix_text("cafe\u0301", None) == "cafe\u0301"
    finally:
        monkeypatch.undo()
        fast_ftfy._tables.cache_clear()


def test_the_prefilter_checks_behind_a_character_only_what_comes_before_it():
    # "àb" starts at its rarest character, à: nothing before it to check, so no lookbehind. "xé" starts at é,
    # with the x before it checked behind it.
    assert fast_ftfy._prefilter(re.compile("\u00e0b|x\u00e9")) == (
        "\\U000000e0(?:\\U00000062)|\\U000000e9(?:(?<=\\U00000078\\U000000e9))")


def test_categories_in_a_class_are_written_back_as_themselves():
    from re import _parser

    assert fast_ftfy._unparse(_parser.parse("[\\w][\\s][\\d]")) == "[\\w][\\s][\\d]"


def test_a_translation_is_checked_once_on_every_key_of_its_table():
    """When the tables are built: the fixer itself, on each key between a letter and a newline, and on nothing
    else (a translation maps each character on its own; what the fixer does elsewhere the identity test checks)."""
    table = {ord("b"): "c", ord("d"): None}
    seen = []

    def fixer(text):
        seen.append(text)
        return text.translate(table)

    assert fast_ftfy._translating(table, fixer)("abcd") == "acc"
    assert seen == ["ab\nad\n"]


def _windows_for(pattern: str):
    """_bad's tables for a small pattern, made as _Tables makes them for BADNESS_RE: its window arithmetic in sight."""
    import types

    compiled = re.compile(pattern)
    return types.SimpleNamespace(bad_re=re.compile(pattern, re.MULTILINE),
                                 bad_prefilter=re.compile(fast_ftfy._prefilter(compiled)),
                                 bad_width=fast_ftfy._max_width(compiled))


@pytest.mark.parametrize("pattern, text, hits", [
    # A match may start width - 1 characters before its hit (é, the "a" before it checked behind it): at the
    # text's very start (the window [0, 3)), and after it ([1, 4)).
    ("a\u00e9", "a\u00e9", [(1, 2)]),
    ("a\u00e9", "xa\u00e9", [(2, 3)]),
    # A match may end width - 1 characters after its hit's end: "é123" starts in the hit of "^é" (`^` dropped,
    # so it ends just after é), which took the é where "é123"'s own hit would have been. Width 4: [0, 5).
    ("^\u00e9|\u00e9123", "x\u00e9123", [(1, 2)]),
    # The smallest window, [0, 1): one character at the text's start, alone and as the first of two windows
    # (the second, [3, 4), holds no match: that é is not at a line's start).
    ("\u00e9", "\u00e9", [(0, 1)]),
    ("^\u00e9", "\u00e9 x\u00e9", [(0, 1), (3, 4)]),
])
def test_the_mojibake_windows_reach_as_far_as_a_match_can(pattern, text, hits):
    t = _windows_for(pattern)
    assert [m.span() for m in t.bad_prefilter.finditer(text)] == hits
    assert t.bad_re.search(text) is not None
    assert fast_ftfy._bad(t, text)


def test_ftfy_gets_the_config_its_own_fix_text_gives_each_segment(monkeypatch):
    """Where ftfy is called, it is called as ftfy.fix_text calls it: without explanations (fix_text's own choice)
    and, from the segment with the first "<" on, with unescaping False (as fix_text sets it)."""
    calls = []
    fix_and_explain = ftfy.fix_and_explain

    def spy(text, config=None):
        calls.append((text, config))
        return fix_and_explain(text, config)

    monkeypatch.setattr(ftfy, "fix_and_explain", spy)
    text = "a &amp; b\nplain\ncaf\u00c3\u00a9\n<p> &amp;\ncaf\u00c3\u00a9\n"
    for normalization in ("NFC", "NFKC", None):
        calls.clear()
        assert ftfy.fix_text(text, normalization=normalization) == "a & b\nplain\ncaf\u00e9\n<p> &amp;\ncaf\u00e9\n"
        ftfys = calls[:]
        assert [config.unescape_html for _, config in ftfys] == ["auto", "auto", "auto", False, False]
        calls.clear()
        assert fix_text(text, normalization) == "a & b\nplain\ncaf\u00e9\n<p> &amp;\ncaf\u00e9\n"
        # Not on the clean "plain" line, nor on "<p> &amp;" (kept escaped): on the others, with ftfy's config.
        assert calls == [ftfys[0], ftfys[2], ftfys[4]]


def test_after_its_one_pass_fix_text_finds_no_trigger_left():
    """Why fix_text's check for a trigger left after its one pass never finds one under a proven ftfy (its mutants
    are listed as equivalent in scripts/mutation_equivalent.txt): the steps leave only the C1 controls that
    fix_c1_controls keeps, which BADNESS_RE matches, so a text holding one went to ftfy before the pass; the only
    characters they make out of several are astral (surrogate pairs joined), and no trigger is astral; and
    normalizing makes no trigger: no other character decomposes to one, and none is composed."""
    triggers = set(T.trigger.findall("".join(map(chr, ALL_CODE_POINTS))))
    text = "".join(f"a{c}b\n" for c in sorted(triggers))
    for _, step in T.steps:
        text = step(text)
    left = set(T.trigger.findall(text))
    assert left == set("\x81\x8d\x8f\x90\x9d") and all(T.bad_re.search(c) for c in left)
    assert max(map(ord, triggers)) < 0x10000
    assert all(unicodedata.normalize("NFD", c) == c for c in triggers)
    others = (chr(cp) for cp in ALL_CODE_POINTS if chr(cp) not in triggers)
    assert not [c for c in others if triggers & set(unicodedata.normalize("NFD", c) + unicodedata.normalize("NFKD", c))]
