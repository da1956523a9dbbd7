"""`ftfy.fix_text`, exactly, without running ftfy on text it provably leaves unchanged.

ftfy is pure Python (~3 MB/s per core) and most of a real corpus is plain
ASCII. On a segment of ASCII text every ftfy fixer is the identity unless
the segment holds one of:

- `&`: HTML entity unescaping (`&amp;`, `&#39;` ...);
- `\\r`: line-break normalisation;
- `\\x1b`: terminal escape removal;
- a control character ftfy removes (U+0000-U+0008, U+000B, U+000E-U+001F, U+007F).

Mojibake repair, C1 controls, ligatures, character width, quote uncurling,
surrogates and NFC/NFKC all need non-ASCII input. So a document without any
"dirty" character is returned as is, and otherwise `fix_text`'s own loop is
replayed (segments end after each newline or at max_decode_length; a `<`
turns HTML unescaping off for the rest of the text) with `fix_and_explain`
called only on the dirty segments. The result equals `ftfy.fix_text` (tested
against it on random and real text).
"""

from __future__ import annotations

import re
from typing import Optional

__all__ = ["fix_text"]

# Characters whose presence means ftfy may change the segment: anything outside printable
# ASCII plus tab, newline and form feed, and the ampersand.
_DIRTY = re.compile(r"[^\t\n\x0c\x20-\x25\x27-\x7e]")


def fix_text(text: str, normalization: Optional[str] = "NFC") -> str:
    if _DIRTY.search(text) is None:
        return text
    import ftfy

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
        if _DIRTY.search(segment) is None:
            out.append(segment)
        else:
            out.append(ftfy.fix_and_explain(segment, config)[0])
        pos = textbreak
    return "".join(out)
