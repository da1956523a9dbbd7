"""Our deduplication against its peers, side by side on one planted corpus: `make bench-dedup` (issue #46).

1. A planted corpus, made at run time from a bench corpus (never copied into the repository) into a temporary
   directory of .jsonl files: `--docs` documents, of which 75 % are distinct documents of the corpus (seeded
   sample), 10 % exact copies of some of them, 10 % near copies (one or two words replaced in place, whitespace and
   punctuation kept, of documents of at least 200 words: word 5-gram Jaccard about 0.9 and above; `--near-jaccard
   0.85-0.95` replaces as many words as a Jaccard drawn from that range needs, to probe the threshold) and 5 % near
   misses (enough words replaced for a word 5-gram Jaccard of 0.45 to 0.65 with their original; in markup-heavy
   documents the Jaccard of other shingles, e.g. ours, can still reach 0.8). Everything is
   shuffled and cut into files of 1,000 lines, so which record of a family has the smallest identity is chance.
2. Our job (LMData, GPT-2, `--runner FnApiRunner`) without `--dedup` and with `--dedup near`, each in a child
   process timed from its start to its exit (interpreter and imports included): wall seconds, CPU seconds (user +
   system of the process and the children it waited for, from wait4) and peak RSS. Goal: the job with dedup at
   >= 0.6x the job without (wall time; CPU shown too).
3. The peers on the same files, each in a child process timed the same way (this script with `--peer`):
   - datatrove's MinHash pipeline (PyPI `datatrove`): its four stages MinhashDedupSignature, MinhashDedupBuckets,
     MinhashDedupCluster and MinhashDedupFilter, each a LocalPipelineExecutor with workers=1 (in process), one task
     each except the buckets stage (one per bucket: datatrove requires it), its default MinhashConfig (word
     5-grams after its text normalization and spaCy's English word splitting, 14 buckets x 8 hashes, 64-bit
     xxhash), JsonlReader in and JsonlWriter out (uncompressed, as the other peer writes), the removed documents
     through the filter's exclusion_writer.
   - datasketch's MinHashLSH with the settings of Cerebras Model Zoo's data_dedup
     (src/cerebras/modelzoo/data_preparation/data_preprocessing/data_dedup/: to_hash.py, generate_duplicate_pairs.py,
     dedup.py): ftfy.fix_text(normalization="NFC"), lowercased, ASCII punctuation removed, whitespace runs made one
     space; shingles are *character* 6-grams of that string (window_size=6; nltk.ngrams over a string); MinHash with
     128 permutations (datasketch's default SHA-1 hash and seed); LSH at Jaccard 0.8 with datasketch's optimal
     bands x rows for it (9 x 13, false positives and negatives weighted 0.5 each, as data_dedup computes them);
     every bucket collision is a duplicate (no verification: each record is joined to every earlier one sharing a
     band, the same components as data_dedup's pairs with each bucket's first); connected components; one kept
     (data_dedup keeps the first node of its networkit component; here the smallest identity, as ours). Hashing is
     run in one process (data_dedup spreads it over a process pool): CPU seconds are what counts.
4. Per tool: throughput per core (documents and MB of text per CPU second; per wall second too), and against the
   planted truth: a family (an original and its exact and near copies) should keep exactly one record. Removals
   are scored without regard to which member a tool keeps: in a family of n, up to n - 1 removals are right and
   the n-th is wrong (the content is lost); a removed near miss or other unplanted record is wrong (the bench
   corpus may hold duplicates of its own: they show as "other"). Agreement of ours with each peer: the Jaccard of
   the removed (file, line) sets, as removed and after mapping each tool's removals in a planted family onto the
   same members (so that keep rules do not count).

Multilingual mode (issue #46: shingles must work for text without spaces): a corpus whose records carry a `lang`
label (and `script`), e.g. `--corpus ../shared/corpora/bench/multilingual_natural.jsonl.zst` (55 languages), is
planted the same way with three differences. (a) The distinct documents are drawn evenly over the languages
(round robin, as far as a language has documents), and so are the copies and near misses. (b) A "word" is a
whole sentence in Chinese, Japanese or Thai, so near copies are not made by word replacement: an edit of the
same size in every script replaces a share of the *letters* (str.isalpha) in place, in spans of 3 consecutive
letters, each by a letter of the same Unicode class (script, and case where the script has it: Latin stays
Latin, kana stays kana) drawn from the language's own letter frequencies; whitespace, punctuation, digits and
combining marks stay. Near copies: 1 or 2 % of the letters (character 5-gram Jaccard about 0.95 and 0.9;
`--near-jaccard LO-HI` then means a character 5-gram Jaccard drawn from LO-HI); near misses: enough letters
(10 to 20 %) for a character 5-gram Jaccard of 0.45 to 0.65. Near copies and misses are made of documents of
at least 400 letters. (c) The report adds, per language and per script group (the corpus's `script`, Han,
kana and Hangul grouped as CJK), the measured Jaccards of the planted pairs (character 5-grams, our shingles:
runs of whole tokens of the job's tokenizer holding dedup_shingle characters (transforms.core.dedup.shingle_hashes), and \\w+ word 5-grams), the largest token
5-gram Jaccard between unrelated documents of the language, and each tool's recall on the near and exact
families and its removed near misses and other (unplanted) records. `--tokenizer` gives our job (and the token
Jaccards) another tokenizer, e.g. a multilingual Hugging Face one (a local directory or hub name).

Unless `--no-startup`, each command is also timed on one short document, and throughput is shown net of
start-up, which weighs heavily on a few thousand documents. Shared machines are noisy: `--repeat` runs every
command that many times and shows medians.

    python benchmarks/dedup_bench.py [--corpus ../shared/corpora/bench/en_natural.jsonl.zst] [--docs 4000]
                                     [--near-jaccard 0.85-0.95] [--repeat 3] [--peers datatrove,datasketch]
                                     [--no-startup] [--keep] [--tokenizer gpt2|HF_DIR_OR_NAME]
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import math
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import unicodedata
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = ROOT.parent / "shared" / "corpora" / "bench" / "en_natural.jsonl.zst"
GPT2 = ROOT / "data" / "tokenizers" / "gpt2"
PEERS = ("datatrove", "datasketch")
PEER_NAMES = {"datatrove": "datatrove MinHash (4 stages)", "datasketch": "datasketch LSH (Cerebras settings)"}
SHARES = {"exact": 0.10, "near": 0.10, "miss": 0.05}  # of --docs; the rest are distinct documents of the corpus
NEAR_MIN_WORDS = 200  # near copies and near misses are made of documents at least this long (in \w+ words)
DOCS_PER_FILE = 1000
RATIO_TARGET = 0.6  # the job with --dedup near against the job without (throughput)
PEER_TARGET = ("datatrove", 3.0)  # our dedup's throughput per core against datatrove's
WORD = re.compile(r"\w+")
ALPHA = re.compile(r"[A-Za-z]{2,}")
# Multilingual mode (a corpus with `lang` labels): edits by letters, the same size in every script.
SPAN = 3  # letters replaced in a row
NEAR_SHARES = (0.01, 0.02)  # of a near copy's letters (as the English mode's one or two words)
MISS_CHAR_JACCARD = (0.45, 0.65)  # character 5-gram Jaccard of a near miss with its original
NEAR_MIN_LETTERS = 400  # near copies and near misses are made of documents at least this long (in letters)
UNRELATED_PAIRS = 5  # pairs of unrelated documents per language whose token 5-gram Jaccard is measured
CJK_SCRIPTS = {"Han (Simplified)", "Han (Traditional)", "Japanese (Han+Kana)", "Hangul"}

LAUNCHER = r"""
import os, subprocess, sys, time
start = time.perf_counter()
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(child.pid, 0)
print(time.perf_counter() - start, usage.ru_utime + usage.ru_stime, usage.ru_maxrss)
sys.exit(os.waitstatus_to_exitcode(status))
"""


# ---------------------------------------------------------------------------------------------------------- corpus
def read_corpus(corpus: Path) -> list[str]:
    return read_labelled(corpus)[0]


def read_labelled(corpus: Path) -> tuple[list[str], list[tuple[str, str]] | None]:
    """The texts and, when every record has a `lang` label, each one's (lang, script group); else None."""
    import zstandard

    opener = (lambda p: zstandard.ZstdDecompressor().stream_reader(open(p, "rb"))) \
        if corpus.suffix == ".zst" else (lambda p: open(p, "rb"))
    texts, labels = [], []
    with opener(corpus) as raw:
        for line in io.BufferedReader(raw, 1 << 20):
            if line.strip():
                row = json.loads(line)
                texts.append(row["text"])
                labels.append((row["lang"], script_group(row.get("script"), row["text"])) if "lang" in row else None)
    return texts, (labels if labels and all(labels) else None)


def script_group(script: str | None, text: str) -> str:
    """The corpus's script label, Han, kana and Hangul grouped as CJK; without a label, the Unicode class of
    most of the text's letters."""
    if not script:
        counts = Counter(letter_class(ch).split(" ")[0] for ch in text if ch.isalpha())
        script = counts.most_common(1)[0][0].title() if counts else "none"
        return "CJK" if script in ("Cjk", "Hiragana", "Katakana", "Hangul") else script
    return "CJK" if script in CJK_SCRIPTS else script


def letter_class(ch: str) -> str:
    """A letter's Unicode class for replacements: its script (the first word of its name: LATIN, CYRILLIC, CJK,
    HIRAGANA, THAI, DEVANAGARI...) and, where the script has case, CAPITAL."""
    name = unicodedata.name(ch, "?")
    return name.split(" ")[0] + (" CAPITAL" if " CAPITAL " in name else "")


def letter_pools(texts: list[str]) -> dict:
    """{letter class: (letters, cumulative weights)} of these texts, for drawing replacement letters."""
    counts = defaultdict(Counter)
    for text in texts:
        for ch in text:
            if ch.isalpha():
                counts[letter_class(ch)][ch] += 1
    pools = {}
    for cls, counter in counts.items():
        letters = sorted(counter)
        total, cum = 0, []
        for ch in letters:
            total += counter[ch]
            cum.append(total)
        pools[cls] = (letters, cum)
    return pools


def letters_for(target: float) -> float:
    """The share of letters to replace, in spans of SPAN, for about `target` character 5-gram Jaccard: each span
    breaks SPAN + 4 of the 5-grams, so a share s keeps about exp(-s (SPAN + 4) / SPAN) of them, k, and the
    Jaccard is k / (2 - k)."""
    return -math.log(2 * target / (1 + target)) * SPAN / (SPAN + 4)


def replace_letters(text: str, share: float, pools: dict, rng: random.Random) -> str:
    """About `share` of the text's letters replaced in place, in spans of SPAN letters (at least one span), each
    letter by another of its class from `pools`; everything that is not a letter stays."""
    pos = [i for i, ch in enumerate(text) if ch.isalpha()]
    blocks = len(pos) // SPAN
    if not blocks:
        return text
    chars = list(text)
    for b in rng.sample(range(blocks), min(blocks, max(1, round(share * len(pos) / SPAN)))):
        for i in pos[b * SPAN:(b + 1) * SPAN]:
            letters, cum = pools.get(letter_class(chars[i]), ((), ()))
            if len(letters) < 2:
                continue
            new = chars[i]
            while new == chars[i]:
                new = rng.choices(letters, cum_weights=cum)[0]
            chars[i] = new
    return "".join(chars)


def char_jaccard(a: str, b: str, n: int = 5) -> float:
    x = {a[i:i + n] for i in range(max(1, len(a) - n + 1))}
    y = {b[i:i + n] for i in range(max(1, len(b) - n + 1))}
    return len(x & y) / len(x | y) if x | y else 1.0


_CHARS: dict = {}


def token_jaccard(tokenizer, a: str, b: str, n: int = None) -> float:
    """The Jaccard of our shingles as the job makes them (transforms.core.dedup: from every token on, the
    shortest run of whole tokens of the job's tokenizer holding n characters: the job's dedup_shingle)."""
    import numpy as np

    if n is None:
        flags = DEDUP_FLAGS
        n = int(flags[flags.index("--dedup_shingle") + 1]) if "--dedup_shingle" in flags else 12

    from transforms.core.dedup import shingle_hashes, token_chars
    from transforms.core.detok import token_pieces

    if id(tokenizer) not in _CHARS:
        _CHARS[id(tokenizer)] = token_chars(token_pieces(tokenizer))
    x, y = (shingle_hashes(ids, n, _CHARS[id(tokenizer)]) for ids in tokenizer.encode_batch([a, b]))
    union = len(np.union1d(x, y))
    return len(np.intersect1d(x, y)) / union if union else 1.0


def word_jaccard(a: str, b: str, n: int = 5) -> float:
    """The reference measure of the planted pairs: Jaccard of lowercased \\w+ word n-grams."""
    def grams(text):
        words = WORD.findall(text.lower())
        return {tuple(words[i:i + n]) for i in range(max(1, len(words) - n + 1))}
    x, y = grams(a), grams(b)
    return len(x & y) / len(x | y) if x | y else 1.0


def replace_words(text: str, count: int, vocab: list[str], rng: random.Random) -> str:
    """`count` words (runs of 2+ ASCII letters) replaced in place by other words of the corpus: the whitespace and
    punctuation around them stay."""
    spans = [m.span() for m in ALPHA.finditer(text)]
    chosen = sorted(rng.sample(spans, min(count, len(spans))))
    out, last = [], 0
    for start, end in chosen:
        old = text[start:end].lower()
        new = rng.choice(vocab)
        while new.lower() == old:
            new = rng.choice(vocab)
        out += [text[last:start], new]
        last = end
    return "".join(out) + text[last:]


def words_for(text: str, target: float) -> int:
    """How many scattered word replacements leave about `target` word 5-gram Jaccard: k replacements of n words
    keep about (1 - k/n)^5 of the 5-grams, s, and the Jaccard is s / (2 - s)."""
    return max(1, round((1 - (2 * target / (1 + target)) ** (1 / 5)) * len(WORD.findall(text))))


def plant(texts: list[str], docs: int, seed: int, out_dir: Path, near_jaccard: tuple | None = None) -> dict:
    """The planted corpus in out_dir, and its truth: {"records": [(file, line, role, family)], ...}."""
    rng = random.Random(seed)
    n_copies = {kind: round(docs * share) for kind, share in SHARES.items()}
    n_src = docs - sum(n_copies.values())
    if n_src > len(texts):
        raise SystemExit(f"--docs {docs} needs {n_src} distinct documents; the corpus has {len(texts)} "
                         f"(at most {int(len(texts) / (1 - sum(SHARES.values())))} documents)")
    src = rng.sample(range(len(texts)), n_src)
    long_src = [i for i in src if len(WORD.findall(texts[i])) >= NEAR_MIN_WORDS]
    vocab = sorted({w for i in src[:500] for w in ALPHA.findall(texts[i]) if 3 <= len(w) <= 12})
    records = [(texts[i], "original", i) for i in src]  # (text, role, family: the original's corpus index)
    jaccards = {"near": [], "miss": []}
    for _ in range(n_copies["exact"]):
        i = rng.choice(src)
        records.append((texts[i], "exact", i))
    for _ in range(n_copies["near"]):
        i = rng.choice(long_src)
        count = words_for(texts[i], rng.uniform(*near_jaccard)) if near_jaccard else rng.choice((1, 2))
        copy = replace_words(texts[i], count, vocab, rng)
        jaccards["near"].append(word_jaccard(texts[i], copy))
        records.append((copy, "near", i))
    for k in range(n_copies["miss"]):
        i = rng.choice(long_src)
        miss = replace_words(texts[i], max(3, words_for(texts[i], rng.uniform(0.45, 0.65))), vocab, rng)
        jaccards["miss"].append(word_jaccard(texts[i], miss))
        records.append((miss, "miss", -1 - k))  # a family of its own: it must be kept
    rng.shuffle(records)
    out_dir.mkdir(parents=True)
    truth = []
    for f in range(math.ceil(len(records) / DOCS_PER_FILE)):
        name = f"part-{f:03d}.jsonl"
        chunk = records[f * DOCS_PER_FILE:(f + 1) * DOCS_PER_FILE]
        with open(out_dir / name, "w", encoding="utf-8") as dst:
            for line, (text, role, family) in enumerate(chunk, 1):
                dst.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
                truth.append((name, line, role, family))
    return {"records": truth, "jaccards": jaccards, "n_copies": n_copies,
            "bytes": sum(len(t.encode("utf-8")) for t, _, _ in records)}


def plant_multilingual(texts: list[str], labels: list[tuple[str, str]], docs: int, seed: int, out_dir: Path,
                       tokenizer, near_jaccard: tuple | None = None) -> dict:
    """`plant` for a corpus with language labels (see the module's docstring): the truth's records, and per
    record its (lang, script group) in "labels", the measured Jaccards of each planted pair in "pairs"."""
    rng = random.Random(seed)
    n_copies = {kind: round(docs * share) for kind, share in SHARES.items()}
    n_src = docs - sum(n_copies.values())
    if n_src > len(texts):
        raise SystemExit(f"--docs {docs} needs {n_src} distinct documents; the corpus has {len(texts)}")
    by_lang = defaultdict(list)
    for i, (lang, _) in enumerate(labels):
        by_lang[lang].append(i)
    langs = sorted(by_lang)
    rng.shuffle(langs)
    for lang in langs:
        rng.shuffle(by_lang[lang])
    src, taken = [], defaultdict(int)  # round robin over the languages, as far as each has documents
    while len(src) < n_src:
        for lang in langs:
            if taken[lang] < len(by_lang[lang]) and len(src) < n_src:
                src.append(by_lang[lang][taken[lang]])
                taken[lang] += 1
    src_of = defaultdict(list)
    for i in src:
        src_of[labels[i][0]].append(i)
    long_of = {lang: [i for i in ids if sum(ch.isalpha() for ch in texts[i]) >= NEAR_MIN_LETTERS]
               for lang, ids in src_of.items()}
    pools = {lang: letter_pools([texts[i] for i in ids]) for lang, ids in src_of.items()}
    records = [(texts[i], "original", i, i) for i in src]  # (text, role, family, source)
    pairs = []  # (kind, lang, group, char J, token J, word J)

    def measure(kind, i, other):
        lang, group = labels[i]
        pairs.append((kind, lang, group, char_jaccard(texts[i], other), token_jaccard(tokenizer, texts[i], other),
                      word_jaccard(texts[i], other)))

    def cycle(pool):  # languages in turn, forever
        while True:
            yield from [lang for lang in langs if pool.get(lang)]

    langs_src = cycle(src_of)
    for _ in range(n_copies["exact"]):
        i = rng.choice(src_of[next(langs_src)])
        records.append((texts[i], "exact", i, i))
    langs_long = cycle(long_of)
    if n_copies["near"] + n_copies["miss"] and not any(long_of.values()):
        raise SystemExit(f"no document of at least {NEAR_MIN_LETTERS} letters to make near copies of")
    for _ in range(n_copies["near"]):
        i = rng.choice(long_of[next(langs_long)])
        share = letters_for(rng.uniform(*near_jaccard)) if near_jaccard else rng.choice(NEAR_SHARES)
        copy = replace_letters(texts[i], share, pools[labels[i][0]], rng)
        measure("near", i, copy)
        records.append((copy, "near", i, i))
    for k in range(n_copies["miss"]):
        i = rng.choice(long_of[next(langs_long)])
        miss = replace_letters(texts[i], letters_for(rng.uniform(*MISS_CHAR_JACCARD)), pools[labels[i][0]], rng)
        measure("miss", i, miss)
        records.append((miss, "miss", -1 - k, i))
    for lang in langs:  # how near unrelated documents of one language look (e.g. shingles of a few characters)
        ids = src_of.get(lang, [])
        for _ in range(min(UNRELATED_PAIRS, len(ids) * (len(ids) - 1) // 2)):
            a, b = rng.sample(ids, 2)
            measure("unrelated", a, texts[b])
    rng.shuffle(records)
    out_dir.mkdir(parents=True)
    truth, record_labels = [], {}
    for f in range(math.ceil(len(records) / DOCS_PER_FILE)):
        name = f"part-{f:03d}.jsonl"
        chunk = records[f * DOCS_PER_FILE:(f + 1) * DOCS_PER_FILE]
        with open(out_dir / name, "w", encoding="utf-8") as dst:
            for line, (text, role, family, source) in enumerate(chunk, 1):
                dst.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
                truth.append((name, line, role, family))
                record_labels[(name, line)] = labels[source]
    return {"records": truth, "jaccards": {kind: [p[3] for p in pairs if p[0] == kind] for kind in ("near", "miss")},
            "n_copies": n_copies, "bytes": sum(len(r[0].encode("utf-8")) for r in records), "pairs": pairs,
            "labels": record_labels}


# ------------------------------------------------------------------------------------------------------- scoring
def score(removed: set, truth: dict) -> dict:
    """Removals against the planted families, whichever member a tool keeps (see the module's docstring)."""
    family_of = {(f, l): fam for f, l, _, fam in truth["records"]}
    role_of = {(f, l): role for f, l, role, _ in truth["records"]}
    members = defaultdict(list)
    for f, l, _, fam in truth["records"]:
        members[fam].append((f, l))
    hit = defaultdict(int)
    unknown = 0
    for key in removed:
        if key in family_of:
            hit[family_of[key]] += 1
        else:
            unknown += 1  # a record the job does not know (should not happen)
    expected = sum(len(m) - 1 for m in members.values())
    tp = sum(min(hit[fam], len(m) - 1) for fam, m in members.items())
    lost = sum(1 for fam, m in members.items() if len(m) > 1 and hit[fam] >= len(m))
    kinds = {fam: {role_of[k] for k in m} for fam, m in members.items() if len(m) > 1}
    resolved = {kind: [hit[fam] == len(members[fam]) - 1 for fam, roles in kinds.items()
                       if ("near" in roles) == (kind == "near")] for kind in ("exact", "near")}
    return {
        "removed": len(removed),
        "precision": tp / len(removed) if removed else 1.0,
        "recall": tp / expected if expected else 1.0,
        "exact_families": sum(resolved["exact"]) / max(1, len(resolved["exact"])),
        "near_families": sum(resolved["near"]) / max(1, len(resolved["near"])),
        "misses_removed": sum(1 for k in removed if role_of.get(k) == "miss"),
        "families_lost": lost,
        "other_removed": sum(1 for k in removed if role_of.get(k) == "original" and len(members[family_of[k]]) == 1)
        + unknown,
    }


def score_groups(removed: set, truth: dict, key) -> dict:
    """Per group of records (key(label) of each record's (lang, script group)): [right, expected] removals in
    the families with near copies and in those with exact copies only, [removed, planted] near misses and
    [removed, present] other records (unplanted singletons), and families lost."""
    label_of = truth["labels"]
    members = defaultdict(list)
    for f, l, role, fam in truth["records"]:
        members[fam].append(((f, l), role))
    out = defaultdict(lambda: {"near": [0, 0], "exact": [0, 0], "miss": [0, 0], "other": [0, 0], "lost": 0})
    for fam, m in members.items():
        group = key(label_of[m[0][0]])
        hit = sum(1 for k, _ in m if k in removed)
        roles = {role for _, role in m}
        if len(m) > 1:
            kind = "near" if "near" in roles else "exact"
            out[group][kind][0] += min(hit, len(m) - 1)
            out[group][kind][1] += len(m) - 1
            out[group]["lost"] += hit >= len(m)
        else:
            kind = "miss" if "miss" in roles else "other"
            out[group][kind][0] += hit
            out[group][kind][1] += 1
    return dict(out)


def canonical(removed: set, truth: dict) -> set:
    """The removals with those in each planted family moved onto its members of largest identity (as if every
    tool kept the smallest), so that two tools' sets compare the duplicates found, not the copies kept."""
    family_of = {(f, l): fam for f, l, _, fam in truth["records"]}
    members = defaultdict(list)
    for f, l, _, fam in truth["records"]:
        members[fam].append((f, l))
    hit = defaultdict(int)
    out = set()
    for key in removed:
        fam = family_of.get(key)
        if fam is None or len(members[fam]) == 1:
            out.add(key)
        else:
            hit[fam] += 1
    for fam, n in hit.items():
        out.update(sorted(members[fam])[len(members[fam]) - n:])
    return out


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


# --------------------------------------------------------------------------------------------------------- runs
def timed(cmd: list[str], stderr_path: Path) -> dict:
    """Wall seconds, CPU seconds and peak RSS of a command, taken by a small launcher (a child of this process
    would carry this process's peak RSS across fork and exec)."""
    with open(stderr_path, "w") as err:
        proc = subprocess.run([sys.executable, "-c", LAUNCHER, *cmd], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=err, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:6])} ... failed (exit {proc.returncode}):\n"
                         f"{stderr_path.read_text(errors='replace')[-3000:]}")
    wall, cpu, rss = proc.stdout.split()
    return {"wall": float(wall), "cpu": float(cpu), "rss_mb": int(rss) / 1024}


def tokenizer_args(tokenizer: str) -> list[str]:
    """The job's tokenizer flags: `gpt2` (the repository's GPT-2 files) or a Hugging Face tokenizer (a local
    directory or a hub name), e.g. a multilingual one."""
    if tokenizer == "gpt2":
        return ["--tokenizer_type", "GPT2Tokenizer",
                "--vocab_file", str(GPT2 / "vocab.bpe"), "--encoder_file", str(GPT2 / "encoder.json")]
    return ["--tokenizer_type", "HuggingFaceTokenizer", "--huggingface_tokenizer", tokenizer]


def load_tokenizer(tokenizer: str):
    """The job's tokenizer in this process (as the job builds it from `tokenizer_args`), for token Jaccards."""
    from transforms.core.tokenizer import shared_tokenizer
    from transforms.io.tokenizer_files import read_tokenizer_files

    if tokenizer == "gpt2":
        files = read_tokenizer_files("GPT2Tokenizer", vocab_file=str(GPT2 / "vocab.bpe"),
                                     encoder_file=str(GPT2 / "encoder.json"))
    else:
        files = read_tokenizer_files("HuggingFaceTokenizer", huggingface_tokenizer=tokenizer)
    return shared_tokenizer(files)


DEDUP_FLAGS: list = []  # --dedup-flags: more of the job's dedup settings (e.g. --dedup_shingle 10)


def job_command(input_dir: Path, out: Path, dedup: bool, msl: int, tokenizer: str = "gpt2") -> list[str]:
    return [sys.executable, "-m", "pipelines.create_hdf5_dataset", "LMData", "--input_dir", str(input_dir),
            "--output_dir", str(out), *tokenizer_args(tokenizer),
            "--max_seq_length", str(msl), "--display_pbar", "False", "--runner", "FnApiRunner",
            *(["--dedup", "near", *DEDUP_FLAGS] if dedup else [])]


def run_job(input_dir: Path, work: Path, dedup: bool, msl: int, tag: str, tokenizer: str = "gpt2") -> dict:
    out = work / f"out_{tag}"
    result = timed(job_command(input_dir, out, dedup, msl, tokenizer), work / f"stderr_{tag}.txt")
    params = json.loads((out / "data_params.json").read_text())
    removed = set()
    if dedup:
        for path in sorted((out / "dedup").glob("*.jsonl")) if (out / "dedup").exists() else []:
            for line in path.read_text().splitlines():
                row = json.loads(line)
                removed.add((row["file"], int(row["line"])))
        result["section"] = params.get("dedup", {})
    result["removed"] = removed
    result["stages"] = params.get("run", {}).get("stage_seconds", {})
    shutil.rmtree(out)
    return result


def run_peer(peer: str, input_dir: Path, work: Path, tag: str) -> dict:
    out = work / f"peer_{tag}"
    result = timed([sys.executable, str(Path(__file__).resolve()), "--peer", peer, "--peer-input", str(input_dir),
                    "--peer-output", str(out)], work / f"stderr_{tag}.txt")
    info = json.loads((out / "info.json").read_text())
    result["removed"] = {tuple(x) for x in info.pop("removed")}
    result["stages"] = info.pop("stages")
    result["info"] = info
    shutil.rmtree(out)
    return result


# ---------------------------------------------------------------------------------------------------------- peers
def peer_datatrove(input_dir: Path, out: Path) -> dict:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (MinhashConfig, MinhashDedupBuckets, MinhashDedupCluster,
                                                  MinhashDedupFilter, MinhashDedupSignature)
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter

    config = MinhashConfig()  # its defaults: 5-grams, 14 buckets x 8 hashes, 64-bit xxhash
    logs = out / "logs"

    def reader():
        return JsonlReader(str(input_dir), glob_pattern="*.jsonl", compression=None)

    stages = {
        "signatures": LocalPipelineExecutor(
            [reader(), MinhashDedupSignature(output_folder=str(out / "signatures"), config=config)],
            tasks=1, workers=1, logging_dir=str(logs / "1")),
        "buckets": LocalPipelineExecutor(
            [MinhashDedupBuckets(input_folder=str(out / "signatures"), output_folder=str(out / "buckets"),
                                 config=config)],
            tasks=config.num_buckets, workers=1, logging_dir=str(logs / "2")),
        "cluster": LocalPipelineExecutor(
            [MinhashDedupCluster(input_folder=str(out / "buckets"), output_folder=str(out / "remove_ids"),
                                 config=config)],
            tasks=1, workers=1, logging_dir=str(logs / "3")),
        "filter": LocalPipelineExecutor(
            [reader(),
             MinhashDedupFilter(input_folder=str(out / "remove_ids"),
                                exclusion_writer=JsonlWriter(str(out / "removed"), compression=None)),
             JsonlWriter(str(out / "deduplicated"), compression=None)],
            tasks=1, workers=1, logging_dir=str(logs / "4")),
    }
    seconds = {}
    for name, executor in stages.items():
        start = time.perf_counter()
        executor.run()
        seconds[name] = time.perf_counter() - start
    removed = []
    for path in sorted((out / "removed").glob("*.jsonl")):
        for line in open(path, encoding="utf-8"):
            doc_id = json.loads(line)["id"]  # JsonlReader's default: "<file>/<0-based line>"
            name, index = doc_id.rsplit("/", 1)
            removed.append((name, int(index) + 1))
    return {"removed": removed, "stages": seconds,
            "settings": f"{config.n_grams}-gram words, {config.num_buckets} x {config.hashes_per_bucket}, "
                        f"{config.hash_config.precision}-bit {config.hash_config.hash_fc}"}


def peer_datasketch(input_dir: Path, out: Path) -> dict:
    import string

    import ftfy
    from datasketch import MinHash, MinHashLSH

    punctuation = str.maketrans("", "", string.punctuation)
    spaces = re.compile(r"\s+")
    width, num_perm, threshold = 6, 128, 0.8  # data_dedup's window_size, MinHash(num_perm=128), jaccard_threshold
    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    parent: dict = {}

    def find(x):
        while parent.get(x, x) != x:
            parent[x] = parent.get(parent[x], parent[x])
            x = parent[x]
        return x

    seconds = defaultdict(float)
    keys = []
    files = sorted(input_dir.glob("*.jsonl"))
    for path in files:
        for line_no, line in enumerate(open(path, encoding="utf-8"), 1):
            t0 = time.perf_counter()
            text = ftfy.fix_text(json.loads(line)["text"], normalization="NFC")
            t1 = time.perf_counter()
            s = spaces.sub(" ", text.lower().translate(punctuation).strip())
            m = MinHash(num_perm=num_perm)
            m.update_batch([s[i:i + width].encode("utf8") for i in range(len(s) - width + 1)])
            t2 = time.perf_counter()
            key = (path.name, line_no)
            for other in lsh.query(m):  # every bucket collision is a duplicate pair, as in data_dedup
                a, b = find(key), find(other)
                if a != b:
                    parent[max(a, b)] = min(a, b)  # the root is the smallest identity
            lsh.insert(key, m)
            keys.append(key)
            t3 = time.perf_counter()
            seconds["ftfy"] += t1 - t0
            seconds["minhash"] += t2 - t1
            seconds["lsh"] += t3 - t2
    removed = {k for k in keys if find(k) != k}
    start = time.perf_counter()
    (out / "deduplicated").mkdir(parents=True)
    with open(out / "deduplicated" / "kept.jsonl", "w", encoding="utf-8") as dst:
        for path in files:
            for line_no, line in enumerate(open(path, encoding="utf-8"), 1):
                if (path.name, line_no) not in removed:
                    dst.write(line)
    seconds["write"] = time.perf_counter() - start
    return {"removed": sorted(removed), "stages": dict(seconds),
            "settings": f"char {width}-grams, {num_perm} perms, LSH {lsh.b} bands x {lsh.r} rows at {threshold}"}


def peer_main(peer: str, input_dir: Path, out: Path) -> int:
    out.mkdir(parents=True)
    info = {"datatrove": peer_datatrove, "datasketch": peer_datasketch}[peer](input_dir, out)
    (out / "info.json").write_text(json.dumps(info))
    return 0


# ---------------------------------------------------------------------------------------------------------- main
def print_multilingual(truth: dict, removed: dict, names: dict) -> None:
    """The multilingual mode's tables: the planted pairs' measured Jaccards and each tool's results, per language
    and per script group."""
    group_of = dict(truth["labels"].values())  # lang -> script group
    pairs = truth["pairs"]

    def med(values):
        return f"{statistics.median(values):.2f}" if values else "-"

    def top(values, least=False):
        return f"{(min if least else max)(values):.2f}" if values else "-"

    def rows(by):  # languages by script group, then name
        return sorted({by(label) for label in truth["labels"].values()},
                      key=lambda k: (group_of[k], k) if by is LANG else (k,))

    for title, by, col in (("language", LANG, 0), ("script group", GROUP, 1)):
        print(f"\nplanted pairs per {title}: median Jaccard of the near copies and the near misses with their "
              f"originals, as character 5-grams / our shingles / \\w+ word 5-grams; 'near tok min': the "
              f"smallest token 5-gram Jaccard of a near copy, 'miss tok max' and 'unrel tok max': the largest of a "
              f"near miss and of two unrelated documents of the language (our threshold is 0.8)")
        print(f"{title:<22}{'docs':>6}{'near':>5}{'near char/tok/word':>20}{'near tok min':>13}{'miss':>5}"
              f"{'miss char/tok/word':>20}{'miss tok max':>13}{'unrel tok max':>14}")
        counts = Counter(by(label) for label in truth["labels"].values())
        for key in rows(by):
            def sel(kind, j):
                return [p[j] for p in pairs if p[0] == kind and p[1 + col] == key]
            near = "/".join(med(sel("near", j)) for j in (3, 4, 5))
            miss = "/".join(med(sel("miss", j)) for j in (3, 4, 5))
            label = f"{key} ({group_of[key]})" if by is LANG else key
            print(f"{label:<22}{counts[key]:>6}{len(sel('near', 3)):>5}{near:>20}{top(sel('near', 4), True):>13}"
                  f"{len(sel('miss', 3)):>5}{miss:>20}{top(sel('miss', 4)):>13}{top(sel('unrelated', 4)):>14}")
        tools = list(removed)
        scores = {t: score_groups(removed[t], truth, by) for t in tools}
        print(f"\nper {title}, each tool: near = right removals / expected in the families with near copies, "
              f"exact = the same in the families of exact copies only, miss = near misses removed / planted, "
              f"other = other records removed / present (all of them wrong)")
        print(f"{'':<22}" + "".join(f"{names[t][:34]:<36}" for t in tools))
        print(f"{title:<22}" + f"{'near':>8}{'exact':>8}{'miss':>8}{'other':>8}    " * len(tools))
        for key in rows(by):
            label = f"{key} ({group_of[key]})" if by is LANG else key
            cells = []
            for t in tools:
                g = scores[t].get(key, {"near": [0, 0], "exact": [0, 0], "miss": [0, 0], "other": [0, 0]})
                cells.append("".join(f"{f'{g[k][0]}/{g[k][1]}' if g[k][1] else '-':>8}"
                                     for k in ("near", "exact", "miss", "other")) + "    ")
            print(f"{label:<22}" + "".join(cells))
        totals = {t: {k: [sum(g[k][i] for g in scores[t].values()) for i in (0, 1)]
                      for k in ("near", "exact", "miss", "other")} for t in tools}
        print(f"{'all':<22}" + "".join("".join(f"{f'{totals[t][k][0]}/{totals[t][k][1]}':>8}"
                                               for k in ("near", "exact", "miss", "other")) + "    " for t in tools))


def LANG(label):  # noqa: N802 (a keying of the multilingual tables)
    return label[0]


def GROUP(label):  # noqa: N802
    return label[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--docs", type=int, default=4000, help="documents in the planted corpus")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--near-jaccard", metavar="LO-HI",
                        help="near copies with as many words replaced as a word 5-gram Jaccard drawn from LO-HI needs "
                             "(e.g. 0.85-0.95, around the threshold) instead of one or two words")
    parser.add_argument("--msl", type=int, default=2048)
    parser.add_argument("--repeat", type=int, default=3, help="runs of every command (medians shown)")
    parser.add_argument("--peers", default=",".join(PEERS))
    parser.add_argument("--no-startup", dest="startup", action="store_false",
                        help="do not time the commands on one short document")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--dedup-flags", default="", help="more dedup flags of our job, e.g. '--dedup_shingle 10'")
    parser.add_argument("--tokenizer", default="gpt2",
                        help="our job's tokenizer (and that of the token Jaccards): gpt2 (data/tokenizers/gpt2) or a "
                             "Hugging Face tokenizer, a local directory or hub name (e.g. a multilingual one)")
    parser.add_argument("--peer", choices=PEERS, help=argparse.SUPPRESS)  # run one peer (in the child)
    parser.add_argument("--peer-input", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--peer-output", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    DEDUP_FLAGS.extend(args.dedup_flags.split())
    if args.peer:
        return peer_main(args.peer, args.peer_input, args.peer_output)
    if not args.corpus.exists():
        print(f"corpus {args.corpus} not found (it lives in ../shared/corpora/bench)", file=sys.stderr)
        return 2
    peers = [p for p in args.peers.split(",") if p]
    for p in peers:
        if p not in PEERS:
            raise SystemExit(f"unknown peer {p!r} (one of {', '.join(PEERS)})")
    needs = {"datatrove": ("datatrove", "spacy", "xxhash"), "datasketch": ("datasketch",)}
    missing = [m for p in peers for m in needs[p] if importlib.util.find_spec(m) is None]
    if missing:
        raise SystemExit(f"missing {', '.join(missing)}: pip install -e '.[bench]'")

    work = Path(tempfile.mkdtemp(prefix="dedup_bench_"))
    try:
        near_jaccard = tuple(float(x) for x in args.near_jaccard.split("-")) if args.near_jaccard else None
        texts, labels = read_labelled(args.corpus)
        if labels is None:
            truth = plant(texts, args.docs, args.seed, work / "input", near_jaccard)
        else:  # multilingual: letter edits, reported per language and script
            truth = plant_multilingual(texts, labels, args.docs, args.seed, work / "input",
                                       load_tokenizer(args.tokenizer), near_jaccard)
        del texts
        input_dir = work / "input"
        n_docs, mb = len(truth["records"]), truth["bytes"] / 1e6
        tools = ["without", "ours", *peers]
        names = {"without": "our job without --dedup", "ours": "our job --dedup near", **PEER_NAMES}
        runs = {t: [] for t in tools}
        for r in range(max(1, args.repeat)):
            runs["without"].append(run_job(input_dir, work, False, args.msl, f"without{r}", args.tokenizer))
            runs["ours"].append(run_job(input_dir, work, True, args.msl, f"ours{r}", args.tokenizer))
            for p in peers:
                runs[p].append(run_peer(p, input_dir, work, f"{p}{r}"))
        startup = {}
        if args.startup:
            tiny = work / "tiny"
            tiny.mkdir()
            (tiny / "part-000.jsonl").write_text(json.dumps({"text": "A short document. " * 20}) + "\n")
            startup["without"] = run_job(tiny, work, False, args.msl, "startup_without", args.tokenizer)
            startup["ours"] = run_job(tiny, work, True, args.msl, "startup_ours", args.tokenizer)
            for p in peers:
                startup[p] = run_peer(p, tiny, work, f"startup_{p}")

        def med(tool, key):
            return statistics.median(x[key] for x in runs[tool])

        j = truth["jaccards"]
        if labels is None:
            print(f"\nplanted corpus from {args.corpus.name}: {n_docs} documents, {mb:.1f} MB of text, "
                  f"{math.ceil(n_docs / DOCS_PER_FILE)} files; {truth['n_copies']['exact']} exact copies, "
                  f"{truth['n_copies']['near']} near copies (word 5-gram Jaccard min {min(j['near'], default=0):.2f}, "
                  f"median {statistics.median(j['near'] or [0]):.2f}), {truth['n_copies']['miss']} near misses "
                  f"(Jaccard {min(j['miss'], default=0):.2f}-{max(j['miss'], default=0):.2f}); "
                  f"{os.cpu_count()} cores, {len(runs['ours'])} runs each (medians)\n")
        else:
            langs = sorted({lang for lang, _ in truth["labels"].values()})
            print(f"\nplanted multilingual corpus from {args.corpus.name}: {n_docs} documents in {len(langs)} "
                  f"languages, {mb:.1f} MB of text, {math.ceil(n_docs / DOCS_PER_FILE)} files; "
                  f"{truth['n_copies']['exact']} exact copies, {truth['n_copies']['near']} near copies (letters "
                  f"replaced in spans of {SPAN}; character 5-gram Jaccard min {min(j['near'], default=0):.2f}, "
                  f"median {statistics.median(j['near'] or [0]):.2f}), {truth['n_copies']['miss']} near misses "
                  f"(character 5-gram Jaccard {min(j['miss'], default=0):.2f}-{max(j['miss'], default=0):.2f}); "
                  f"our tokenizer {args.tokenizer}; {os.cpu_count()} cores, {len(runs['ours'])} runs each "
                  f"(medians)\n")
        print(f"{'tool':<38}{'wall s':>8}{'CPU s':>8}{'RSS MB':>8}{'docs/s':>8}{'docs/CPU-s':>11}{'MB/CPU-s':>10}"
              f"{'net docs/CPU-s':>16}  stages (s, last run)")
        per_core = {}
        for t in tools:
            wall, cpu = med(t, "wall"), med(t, "cpu")
            rss = max(x["rss_mb"] for x in runs[t])
            # net of start-up, where the rest is large enough to mean something (a tenth of the run at least)
            net = f"{n_docs / (cpu - startup[t]['cpu']):>16.0f}" \
                if t in startup and cpu - startup[t]["cpu"] > 0.1 * cpu else f"{'-':>16}"
            per_core[t] = n_docs / cpu
            stages = " ".join(f"{k} {v:.1f}" for k, v in runs[t][-1]["stages"].items())
            print(f"{names[t]:<38}{wall:>8.1f}{cpu:>8.1f}{rss:>8.0f}{n_docs / wall:>8.0f}{n_docs / cpu:>11.0f}"
                  f"{mb / cpu:>10.2f}{net}  {stages}")
        extra_cpu = med("ours", "cpu") - med("without", "cpu")
        if extra_cpu > 0:
            per_core["dedup"] = n_docs / extra_cpu
            print(f"{'our dedup alone (with - without)':<38}{med('ours', 'wall') - med('without', 'wall'):>8.1f}"
                  f"{extra_cpu:>8.1f}{'':>8}{'':>8}{n_docs / extra_cpu:>11.0f}{mb / extra_cpu:>10.2f}")
        if startup:
            print("start-up (one short document): " + ", ".join(
                f"{names[t]} {s['wall']:.1f} s wall, {s['cpu']:.1f} CPU-s" for t, s in startup.items()))
        for p in peers:
            print(f"{names[p]}: {runs[p][-1]['info'].get('settings', '')}")

        print("\nagainst the planted truth (a family keeps one record, whichever; removals beyond that, of near "
              "misses or of other documents are wrong):")
        print(f"{'tool':<38}{'removed':>8}{'precision':>10}{'recall':>8}{'exact fam.':>11}{'near fam.':>10}"
              f"{'misses rm':>10}{'fam. lost':>10}{'other rm':>9}")
        for t in ["ours", *peers]:
            s = score(runs[t][-1]["removed"], truth)
            print(f"{names[t]:<38}{s['removed']:>8}{s['precision']:>10.3f}{s['recall']:>8.3f}"
                  f"{s['exact_families']:>11.1%}{s['near_families']:>10.1%}{s['misses_removed']:>10}"
                  f"{s['families_lost']:>10}{s['other_removed']:>9}")
        changed = [t for t in ["ours", *peers] if any(r["removed"] != runs[t][0]["removed"] for r in runs[t])]
        if changed:
            print(f"removed sets differ between runs of: {', '.join(changed)} (the last run is scored)")
        section = runs["ours"][-1].get("section", {})
        if section:
            print(f"our data_params.json dedup section: documents_removed {section.get('documents_removed')}")

        if labels is not None:
            print_multilingual(truth, {t: runs[t][-1]["removed"] for t in ["ours", *peers]}, names)

        ours = runs["ours"][-1]["removed"]
        print("\nagreement with ours (Jaccard of the removed (file, line) sets; keep-rule free: each tool's removals "
              "in a planted family moved onto the same members):")
        for p in peers:
            theirs = runs[p][-1]["removed"]
            print(f"  {names[p]:<38}{jaccard(ours, theirs):>7.3f}  keep-rule free "
                  f"{jaccard(canonical(ours, truth), canonical(theirs, truth)):.3f}  "
                  f"(only ours {len(ours - theirs)}, only theirs {len(theirs - ours)}, both {len(ours & theirs)})")

        print("\ntargets (on this machine, this run; they never make the run fail):")
        ratio_wall = med("without", "wall") / med("ours", "wall")
        ratio_cpu = med("without", "cpu") / med("ours", "cpu")
        print(f"  --dedup near at {ratio_wall:.2f}x the job without it (wall; {ratio_cpu:.2f}x in CPU time), "
              f"target >= {RATIO_TARGET}x: {'met' if ratio_wall >= RATIO_TARGET else 'not met'}")
        peer, least = PEER_TARGET
        if peer in peers:
            for what in ("dedup", "ours"):
                if what not in per_core:
                    continue
                x = per_core[what] / per_core[peer]
                label = "our dedup alone" if what == "dedup" else "our whole job with --dedup near"
                print(f"  {label} at {x:.2f}x {peer}'s documents per CPU second, target >= {least:g}x: "
                      f"{'met' if x >= least else 'not met'}")
    finally:
        if args.keep:
            print(f"\nwork directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
