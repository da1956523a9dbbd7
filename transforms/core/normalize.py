"""Text normalisation applied to every document before tokenizing.

Order and rules follow the reference (SPEC §1a "Normalisation"): ftfy first,
then the wikitext detokenizer.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from typing import Optional

from transforms.core import fast_ftfy

__all__ = ["NormalizeConfig", "normalize_batch", "normalized_document", "normalize_text", "wikitext_detokenize"]


@dataclasses.dataclass(frozen=True)
class NormalizeConfig:
    use_ftfy: bool = False
    ftfy_normalizer: Optional[str] = "NFC"
    wikitext_detokenize: bool = False
    # Cerebras 2.10's text_read_hook and chat_read_hook strip each text before anything else sees it.
    strip: bool = False

    @property
    def is_identity(self) -> bool:
        return not self.use_ftfy and not self.wikitext_detokenize and not self.strip


_SLASH_QUOTE_DIGIT = re.compile(r"/' [0-9]/")
_PARENS = re.compile(r"\(\s*([^\)]*?)\s*\)")
_BRACKETS = re.compile(r"\[\s*([^\]]*?)\s*\]")
_BRACES = re.compile(r"{\s*([^}]*?)\s*}")
_DQUOTES = re.compile(r"\"\s*([^\"]*?)\s*\"")
_SQUOTES = re.compile(r"'\s*([^']*?)\s*'")

# Literal replacements in the reference's order; the order matters ("= = = ="
# must go before "= =").
_LITERALS_BEFORE = (
    ("s '", "s'"),
)
_LITERALS_NUMBERS = (
    (" @-@ ", "-"),
    (" @,@ ", ","),
    (" @.@ ", "."),
    (" : ", ": "),
    (" ; ", "; "),
    (" . ", ". "),
    (" ! ", "! "),
    (" ? ", "? "),
    (" , ", ", "),
)
_LITERALS_AFTER = (
    ("= = = =", "===="),
    ("= = =", "==="),
    ("= =", "=="),
    (" \u00b0 ", "\u00b0"),
    (" \n", "\n"),
    ("\n ", "\n"),
    (" N ", " 1 "),
    (" 's", "'s"),
)


def wikitext_detokenize(text: str) -> str:
    """Undo wikitext's tokenisation artefacts, exactly as the reference does.

    >>> wikitext_detokenize("a @-@ b ( c ) = = x")
    'a-b (c) == x'
    """
    for old, new in _LITERALS_BEFORE:
        text = text.replace(old, new)
    # Kept for exactness although it is the reference's typo: the pattern
    # matches literal slashes and the replacement is a constant string.
    text = _SLASH_QUOTE_DIGIT.sub("/'[0-9]/", text)
    for old, new in _LITERALS_NUMBERS:
        text = text.replace(old, new)
    text = _PARENS.sub(r"(\1)", text)
    text = _BRACKETS.sub(r"[\1]", text)
    text = _BRACES.sub(r"{\1}", text)
    text = _DQUOTES.sub(r'"\1"', text)
    text = _SQUOTES.sub(r"'\1'", text)
    for old, new in _LITERALS_AFTER:
        text = text.replace(old, new)
    return text


def normalize_text(text: str, config: NormalizeConfig) -> str:
    if config.strip:
        text = text.strip()
    if config.use_ftfy:
        # Equal to ftfy.fix_text, but ftfy only runs on the segments it could change.
        text = fast_ftfy.fix_text(text, config.ftfy_normalizer)
    if config.wikitext_detokenize:
        text = wikitext_detokenize(text)
    return text


def _utf8_len(text: str) -> int:
    # surrogatepass: a lone surrogate from JSON "\ud800" must not crash counting
    return len(text.encode("utf-8", errors="surrogatepass"))


def normalized_document(doc, config: NormalizeConfig):
    """(the document with normalized values, its sizes): characters and UTF-8 bytes before and after, and
    whether every value is empty after normalization (`docs_empty`)."""
    from transforms.core.records import Document

    raw_chars = sum(len(v) for v in doc.values)
    raw_bytes = sum(_utf8_len(v) for v in doc.values)
    chars, nbytes = raw_chars, raw_bytes
    if not config.is_identity:  # otherwise the normalized text is the raw text: count it once
        doc = Document(doc.index, tuple(normalize_text(v, config) for v in doc.values), doc.member)
        chars = sum(len(v) for v in doc.values)
        nbytes = sum(_utf8_len(v) for v in doc.values)
    # Empty documents are kept (LMData: a bare EOS, as in the reference), but counted.
    return doc, {"raw_chars": raw_chars, "raw_bytes": raw_bytes, "normalized_chars": chars,
                 "normalized_bytes": nbytes, "docs_empty": int(chars == 0)}


def normalize_batch(batch, config: NormalizeConfig):
    """DocBatch -> DocBatch with normalized values; counts chars/bytes before and after,
    and the documents whose every value is empty after normalization (`docs_empty`)."""
    from transforms.core.records import DocBatch

    source = batch.group.source
    totals: Counter = Counter({"docs_empty": 0, "raw_chars": 0, "raw_bytes": 0, "normalized_chars": 0,
                               "normalized_bytes": 0})
    docs = []
    for doc in batch.docs:
        doc, sizes = normalized_document(doc, config)
        totals.update(sizes)
        docs.append(doc)
    stats = batch.stats
    # Every input file gets a per-source entry, even one without any record.
    stats.sources.setdefault(source, Counter())
    for name, value in totals.items():
        stats.add(name, value, source)
    return DocBatch(batch.group, docs, stats, batch.progress_bytes)
