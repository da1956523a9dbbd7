"""`ftfy.fix_text`, exactly, at the speed of a few C-level scans on text ftfy leaves unchanged, in any script.

ftfy is pure Python: about 3 MB/s per core, in every script. Most of that is
`fix_and_explain`'s per-line loop and its mojibake detector (`is_bad`, a
regex of 37 alternatives tried at every character: 7 MB/s alone). Yet on
real text it changes few lines. This module returns what `ftfy.fix_text`
returns, and calls ftfy only where it could change something.

What ftfy does (6.3; `fix_text` and `fix_and_explain`): the text is cut
into segments, each ending after a newline (or after `max_decode_length`
characters); the first segment holding a `<` turns HTML unescaping off for
itself and every later one. Each segment then goes through one pass of

    unescape_html, fix_encoding, fix_c1_controls, fix_latin_ligatures,
    fix_character_width, uncurl_quotes, fix_line_breaks, fix_surrogates,
    remove_terminal_escapes, remove_control_chars, normalize (NFC)

again and again until a pass changes nothing.

Why each step is the identity on text without its trigger (the proof; the
triggers are taken from the installed ftfy's own tables and regexes, see
`_Tables`):

- unescape_html is `HTML_ENTITY_RE.sub`: the identity where that regex does
  not match.
- fix_encoding returns its input unless `is_bad` (`BADNESS_RE.search`)
  matches. BADNESS_RE tries its 37 alternatives at every character (7
  MB/s), so it is only tried in windows around the hits of a prefilter
  (`_prefilter`, built from the parsed regex): each alternative from its
  rarest character on, with the characters before it checked behind it.
  Every match of an alternative holds a match of that suffix, and the
  suffixes start with uncommon characters, so the scan runs in C. BADNESS_RE
  has no lookaround; its one anchor, `^`, is searched in MULTILINE mode,
  which matches at every segment's start (and more: a superset only ever
  costs a call to ftfy, never a wrong result).
- fix_c1_controls, uncurl_quotes, fix_surrogates, remove_terminal_escapes:
  a substitution (or a search first) by their own regexes.
- fix_latin_ligatures, fix_character_width, remove_control_chars:
  `str.translate` by their tables: the identity without the tables' keys.
- fix_line_breaks replaces `\\r`, U+2028, U+2029 and U+0085 only.
- normalize: the identity where `unicodedata.is_normalized` says so.

So a text in which no trigger occurs is returned as it is, after a few C
scans. A text with triggers but no mojibake (curly quotes, fullwidth
punctuation, one line not in NFC...) goes through one pass over the whole
document, unescaping up to the segment with the first `<`: every step works
character by character, or by patterns that never span a newline, a newline
is a normalization boundary, and no step removes one, so the document's
newlines keep the segments apart and one pass over the document is one
pass over each segment. If the result holds no trigger, entity or mojibake
and is normalized, ftfy's second pass would change nothing and the result
is final. Anything else (mojibake, a segment of `max_decode_length`, a pass
that leaves a trigger) goes segment by segment, calling
`ftfy.fix_and_explain` on the segments that have a trigger.

The translation steps run as substitutions at their tables' keys (the same
string; `_translating`, checked against ftfy's own function on every key
when the tables are built): str.translate looks up every character.

The argument covers ftfy's code as of `PROVEN_VERSIONS`. Under any other
version `fix_text` is ftfy's own (slow, still exact) and `fast_path()` says
so; the job records which ran (`ftfy_record`).
"""

from __future__ import annotations

import functools
import unicodedata
from typing import Optional

__all__ = ["PROVEN_VERSIONS", "fast_path", "fix_text", "ftfy_record"]

# The ftfy releases whose fix_text / fix_and_explain this module's argument was checked against (6.3.0 and
# 6.3.1 differ only in how their source is formatted).
PROVEN_VERSIONS = ("6.3.0", "6.3.1")

# Where the prefilter starts an alternative: at its item whose characters cost least. Letters are common
# in some script or other; ASCII is never chosen where anything else will do.
_COST_ASCII, _COST_LETTER, _COST_OTHER = 1_000_000, 30, 1


class _Unsupported(Exception):
    """Something in ftfy that the argument does not cover (a regex construct, a step that is not a table)."""


def _char_set(items) -> Optional[frozenset]:
    """The characters an IN item list accepts, or None when unbounded (a category or a negation)."""
    from re import _constants as c

    chars = set()
    for op, arg in items:
        if op is c.LITERAL:
            chars.add(arg)
        elif op is c.RANGE:
            chars.update(range(arg[0], arg[1] + 1))
        else:  # CATEGORY (\s, \w ...), NEGATE, ...: too many characters to be a useful requirement
            return None
    return frozenset(chars)


def _cost(chars: Optional[frozenset]) -> float:
    if chars is None:
        return float("inf")
    return sum(_COST_ASCII if cp < 128 else _COST_LETTER if unicodedata.category(chr(cp))[0] == "L"
               else _COST_OTHER for cp in chars)


def _item_chars(op, arg) -> Optional[frozenset]:
    """The characters one parsed item matches, if it is one character of a bounded set."""
    from re import _constants as c

    if op is c.LITERAL:
        return frozenset((arg,))
    if op is c.IN:
        return _char_set(arg)
    return None


def _unparse(items) -> str:
    """Regex source for parsed items (the few kinds BADNESS_RE is made of)."""
    from re import _constants as c

    categories = _categories()
    out = []
    for op, arg in items:
        if op is c.LITERAL:
            out.append(_char(arg))
        elif op is c.ANY:
            out.append(".")
        elif op is c.IN:
            parts = []
            for iop, iarg in arg:
                if iop is c.NEGATE:
                    parts.append("^")
                elif iop is c.LITERAL:
                    parts.append(_char(iarg))
                elif iop is c.RANGE:
                    parts.append(f"{_char(iarg[0])}-{_char(iarg[1])}")
                elif iop is c.CATEGORY and iarg in categories:
                    parts.append(categories[iarg])
                else:
                    raise _Unsupported(f"{iop} {iarg}")
            out.append("[" + "".join(parts) + "]")
        elif op is c.MAX_REPEAT:
            low, high, sub = arg
            bound = "" if high is c.MAXREPEAT else str(high)
            out.append(f"(?:{_unparse(sub)}){{{low},{bound}}}")
        elif op is c.SUBPATTERN:
            out.append(f"(?:{_unparse(arg[-1])})")
        elif op is c.BRANCH:
            out.append("(?:" + "|".join(_unparse(branch) for branch in arg[1]) + ")")
        else:  # lookarounds, anchors, backreferences...: a window around a match of the rest might not see them
            raise _Unsupported(str(op))
    return "".join(out)


def _prefilter(pattern) -> str:
    """A pattern whose matches lead to every match of `pattern`: each alternative from its rarest character on.

    A match of an alternative holds a match of its suffix that starts at that character. The suffixes start
    at uncommon characters (never ASCII where the alternative has anything else), so the scan for them runs
    at C speed, where `pattern` itself tries all its alternatives at every character.
    """
    from re import _constants as c
    from re import _parser

    parsed = _parser.parse(pattern.pattern, pattern.flags)
    branches = parsed[0][1][1] if len(parsed) == 1 and parsed[0][0] is c.BRANCH else [parsed]
    rests: dict = {}  # first character -> the rest of each suffix that starts with it
    for branch in branches:
        costs = [_cost(_item_chars(op, arg)) for op, arg in branch]
        k = min(range(len(costs)), key=costs.__getitem__)
        if costs[k] == float("inf"):
            raise _Unsupported("an alternative without a bounded character")
        for op, arg in branch[:k]:  # cut off: only a start-of-line anchor may be
            if op is c.AT and arg not in (c.AT_BEGINNING, c.AT_BEGINNING_LINE):
                raise _Unsupported(f"anchor {arg}")
        _unparse([item for item in branch[:k] if item[0] is not c.AT])  # refuses what a window could not see
        # The single characters just before it are checked behind it, so that a hit is nearly always a match.
        before = k
        while before > 0 and branch[before - 1][0] in (c.LITERAL, c.IN, c.ANY):
            before -= 1
        behind = _unparse(branch[before:k])
        rest = _unparse(branch[k + 1:])
        for cp in _item_chars(*branch[k]):
            rests.setdefault(cp, []).append(f"(?<={behind}{_char(cp)}){rest}" if behind else rest)
    # One alternative per first character, each a literal: only then does Python's regex engine scan for
    # the first characters in C before trying an alternative (not for alternatives that start with a class).
    return "|".join(f"{_char(cp)}(?:{'|'.join(sorted(set(r)))})" for cp, r in sorted(rests.items()))


def _char(cp: int) -> str:
    return f"\\U{cp:08x}"


def _categories():
    from re import _constants as c

    return {c.CATEGORY_SPACE: "\\s", c.CATEGORY_WORD: "\\w", c.CATEGORY_DIGIT: "\\d"}


def _char_class(chars) -> str:
    return "[" + "".join(map(_char, sorted(chars))) + "]"


def _class_chars(pattern: str) -> frozenset:
    """The characters of a pattern that is one character class (or one character)."""
    from re import _constants as c
    from re import _parser

    parsed = _parser.parse(pattern)
    chars = _item_chars(*parsed[0]) if len(parsed) == 1 else None
    if chars is not None:
        return chars
    raise _Unsupported(f"not a character class: {pattern!r}")


class _Tables:
    """ftfy's own tables and regexes, and the scans built from them (once per process)."""

    def __init__(self):
        import ftfy

        self.version = ftfy.__version__
        self.ftfy = ftfy
        self.fast, self.reason = False, f"ftfy {self.version} is not one of {', '.join(PROVEN_VERSIONS)}"
        if self.version not in PROVEN_VERSIONS:
            return
        try:
            self._build()
        except _Unsupported as e:  # a proven version cannot get here; a patched one could
            self.reason = f"ftfy {self.version}: {e}"
            return
        self.fast, self.reason = True, ""

    def _build(self):
        import re

        import ftfy
        from ftfy import chardata, fixes
        from ftfy.badness import BADNESS_RE

        self.max_decode_length = ftfy.TextFixerConfig().max_decode_length
        self.entity = chardata.HTML_ENTITY_RE
        self.unescape_html = fixes.unescape_html

        def keys(table):
            return frozenset(k for k, v in table.items() if v != chr(k))

        quotes = _class_chars(chardata.SINGLE_QUOTE_RE.pattern) | _class_chars(chardata.DOUBLE_QUOTE_RE.pattern)
        # The steps after fix_encoding, in fix_and_explain's order, each with the characters it cannot act
        # without (a terminal escape sequence: its first character, ESC).
        steps = [
            (_class_chars(chardata.C1_CONTROL_RE.pattern), fixes.fix_c1_controls),
            (keys(chardata.LIGATURES), _translating(chardata.LIGATURES, fixes.fix_latin_ligatures)),
            (keys(chardata.WIDTH_MAP), _translating(chardata.WIDTH_MAP, fixes.fix_character_width)),
            (quotes, fixes.uncurl_quotes),
            (frozenset(map(ord, "\r\u2028\u2029\x85")), fixes.fix_line_breaks),
            (_class_chars(fixes.SURROGATE_RE.pattern), fixes.fix_surrogates),
            (frozenset((0x1B,)), fixes.remove_terminal_escapes),
            (keys(chardata.CONTROL_CHARS), _translating(chardata.CONTROL_CHARS, fixes.remove_control_chars)),
        ]
        if not fixes.ANSI_RE.pattern.startswith("\033"):
            raise _Unsupported("a terminal escape that does not start with ESC")
        self.steps = [(frozenset(map(chr, chars)), fixer) for chars, fixer in steps]
        # Any of them, in one scan.
        self.trigger = re.compile(_char_class(frozenset().union(*(chars for chars, _ in steps))))
        # The mojibake detector, searched in MULTILINE mode (its `^` at every segment's start) and only in
        # windows around the characters each of its matches must contain.
        self.badness = BADNESS_RE  # ftfy's own
        self.bad_re = re.compile(BADNESS_RE.pattern, BADNESS_RE.flags | re.MULTILINE)
        self.bad_prefilter = re.compile(_prefilter(BADNESS_RE), BADNESS_RE.flags)
        self.bad_width = _max_width(BADNESS_RE)
        self.combining = re.compile(_char_class(_combining_hint()))


def _translating(table: dict, fixer):
    """`text.translate(table)` (what `fixer` is), by a substitution at the table's keys only.

    The same string, since translate maps each character on its own; but translate looks every character
    of the text up in the dictionary (about 30 MB/s on text that is not ASCII), and a substitution only
    the few that are keys. Checked against `fixer` itself on every key, once.
    """
    import re

    pattern = re.compile(_char_class(k for k, v in table.items() if v != chr(k)))

    def replacement(match):
        value = table[ord(match.group())]
        return "" if value is None else chr(value) if isinstance(value, int) else value

    def translate(text: str) -> str:
        return pattern.sub(replacement, text)

    translate.__name__ = fixer.__name__

    every_key = "".join(f"a{chr(k)}\n" for k in table)
    if translate(every_key) != fixer(every_key):
        raise _Unsupported(f"{fixer.__name__} is not a translation by its table")
    return translate


def _combining_hint() -> frozenset:
    """Characters after which a normalization quick check may have to normalize to answer: combining marks,
    the second characters of canonical pairs, Hangul's medial and final jamo. Only a hint for choosing how to
    ask (the Basic Multilingual Plane is enough for that; 40 ms to build)."""
    chars = set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3))
    for cp in range(0x10000):
        c = chr(cp)
        if unicodedata.combining(c):
            chars.add(cp)
        parts = unicodedata.decomposition(c).split()
        if len(parts) == 2 and not parts[0].startswith("<"):
            chars.add(int(parts[1], 16))
    return frozenset(chars)


def _max_width(pattern) -> int:
    from re import _parser

    width = _parser.parse(pattern.pattern, pattern.flags).getwidth()[1]
    if width > 64:
        raise _Unsupported(f"matches up to {width} characters long")
    return width


@functools.lru_cache(maxsize=None)
def _tables() -> _Tables:
    return _Tables()


def fast_path() -> bool:
    """Whether the installed ftfy is one this module's argument covers (else fix_text is ftfy's own)."""
    return _tables().fast


def ftfy_record() -> dict:
    """What data_params.json says of ftfy: its version, and whether the exact fast path ran (or why not)."""
    t = _tables()
    return {"version": t.version, "fast_path": t.fast, **({"why_not": t.reason} if t.reason else {})}


def _bad(t: _Tables, text: str) -> bool:
    """Whether BADNESS_RE (MULTILINE) matches in `text`, searched only near characters every match holds."""
    width = t.bad_width
    lo = hi = -1  # the window being grown: every match holding one of its required characters lies in it
    for m in t.bad_prefilter.finditer(text):
        # A match holding a character of this one's span [s, e) lies in [s - width + 1, e - 1 + width).
        s, e = m.span()
        if s - width + 1 > hi:  # this one's window does not overlap: search the last one
            if hi > 0 and t.bad_re.search(text, lo, hi) is not None:
                return True
            lo = max(0, s - width + 1)
        hi = max(hi, e - 1 + width)
    return hi > 0 and t.bad_re.search(text, lo, hi) is not None


def _normalized(normalization: Optional[str], text: str) -> bool:
    return normalization is None or unicodedata.is_normalized(normalization, text)


def _normal(t: _Tables, normalization: Optional[str], text: str) -> str:
    """`text` normalized: the same object when it already is.

    On text whose quick check cannot settle it (combining marks: Tamil and Bengali vowel signs, Hangul jamo)
    is_normalized normalizes the whole text and throws the result away, so there the text is normalized
    outright; elsewhere the quick check answers at C speed. The hint only picks the cheaper question.
    """
    if normalization is None:
        return text
    if t.combining.search(text) is None and unicodedata.is_normalized(normalization, text):
        return text
    out = unicodedata.normalize(normalization, text)
    return text if out == text else out


def _unescape_end(text: str) -> int:
    """Where HTML unescaping stops: at the segment holding the first "<" (for a text of short segments)."""
    lt = text.find("<")
    return len(text) if lt < 0 else text.rfind("\n", 0, lt) + 1


def fix_text(text: str, normalization: Optional[str] = "NFC") -> str:
    """`ftfy.fix_text(text, normalization=normalization)`, exactly."""
    t = _tables()
    if not t.fast:
        return t.ftfy.fix_text(text, normalization=normalization)
    if len(text) > t.max_decode_length or _bad(t, text):
        return _by_segments(t, text, normalization)
    cut = _unescape_end(text) if "&" in text else 0
    # One pass of fix_and_explain over the whole document; on most documents nothing acts, and this is three
    # C scans and a normalization check.
    fixed = text
    if cut > 0 and t.entity.search(text, 0, cut) is not None:
        fixed = t.unescape_html(text[:cut]) + text[cut:]
        if _bad(t, fixed):  # fix_encoding sees the unescaped text
            return _by_segments(t, text, normalization)
    found = set(t.trigger.findall(fixed))
    for chars, step in t.steps:
        if not found.isdisjoint(chars):
            fixed = step(fixed)
            found = set(t.trigger.findall(fixed))  # what it made (a width form may become anything)
    stepped = fixed
    fixed = _normal(t, normalization, fixed)
    if fixed == text:
        return text
    # ftfy's second pass over each changed segment changes nothing when nothing could act on it any more: no
    # trigger (`found` holds the last step's result's, unless normalizing changed it since), no entity (anywhere:
    # unescaping may be off there, but finding out is not worth it), no mojibake; and normalized it is
    # (normalizing twice is normalizing once).
    triggered = t.trigger.search(fixed) is not None if fixed is not stepped else bool(found)
    if not triggered and t.entity.search(fixed) is None and not _bad(t, fixed):
        return fixed
    return _by_segments(t, text, normalization)


def _segment_clean(t: _Tables, segment: str, unescape: bool, normalization: Optional[str]) -> bool:
    """Whether fix_and_explain's first pass leaves `segment` as it is (then it returns it). Alone, a
    segment's `^` is its start, so the MULTILINE search over it is fix_encoding's own."""
    return (t.trigger.search(segment) is None and not (unescape and t.entity.search(segment) is not None)
            and not _bad(t, segment) and _normalized(normalization, segment))


def _by_segments(t: _Tables, text: str, normalization: Optional[str]) -> str:
    """ftfy.fix_text's own loop, with fix_and_explain called only on the segments it could change."""
    ftfy = t.ftfy
    config = ftfy.TextFixerConfig(explain=False, normalization=normalization)
    out = []
    pos, n = 0, len(text)
    while pos < n:
        textbreak = text.find("\n", pos) + 1
        if textbreak == 0:
            textbreak = n
        if textbreak - pos > config.max_decode_length:
            textbreak = pos + config.max_decode_length
        segment = text[pos:textbreak]
        if config.unescape_html == "auto" and "<" in segment:
            config = config._replace(unescape_html=False)
        if _segment_clean(t, segment, config.unescape_html == "auto", normalization):
            out.append(segment)
        else:
            out.append(ftfy.fix_and_explain(segment, config)[0])
        pos = textbreak
    return "".join(out)
