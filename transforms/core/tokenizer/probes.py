"""Texts every fast encoder must encode exactly as `tokenizers` does before it is used.

Each covers a layer where encoders have been seen to differ: contractions and
digit runs (the regex), whitespace runs and their last space, Unicode that
normal forms change, scripts without spaces, emoji joiners, code indentation,
and the empty and all-space texts.
"""

__all__ = ["PROBES"]

PROBES = (
    "Hello world, this is a test. It's 2024: 12345 items cost $3.50 -- ok? Yes!",
    "Spaces  double   triple\tand tabs\nnew line\n\n  indented line \u00a0nbsp x\r\ny\u3000z\u2028",
    "\u00dcn\u00efc\u00f6d\u00e9 fa\u00e7ade e\u0301 \u4e2d\u6587 \u65e5\u672c\u8a9e \ud55c\uad6d\uc5b4 "
    "\U0001f600\U0001f468\u200d\U0001f469 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u1e9b\u0323 \ufb01 x",
    "def f(x):\n    return x ** 2  # comment\n\n\t\tclass A: pass  \n",
    "I'M you're THEY'LL it'd we've 1234567 \u0661\u0662\u0663 \u2163 x\u0300\u0301",
    "",
    " ",
    "   leading and trailing   ",
)
