"""What a job will give, from a sample: totals with 95 % intervals (`create_hdf5_dataset estimate`).

Two designs, by what a file allows:

- **Lines drawn by byte** (a plain `.jsonl`, a `.txt` read a line a record):
  a uniform byte offset picks the line it falls in, so a line of b bytes
  (with its newline) is drawn with probability b / B, B the file's size. With
  n draws (with replacement), Hansen-Hurwitz: the total of any per-line value
  x is estimated by B * mean(x_i / b_i), unbiased, with the variance of that
  mean. Each file is a stratum: estimates and variances add up.
- **Records kept by a coin** (compressed streams, Parquet: no random access):
  the file is read whole (only the kept records are normalized and
  tokenized), and a record of s characters is kept when a keyed hash of its
  place falls below p = min(1, f * s / m), m the mean size of the records
  read so far: in proportion to its size, as a drawn line is, since a few
  long documents hold most of the tokens. As every record's size is known,
  the total is the ratio form size_total * sum(x_i / p_i) / sum(s_i / p_i)
  (`by_poisson`), with the variance of the residuals x_i - R * s_i. On a
  file of books, one p for all records made intervals that held the truth
  far less often than they said (a few long books make the error), and
  sizes in the probabilities without the ratio made intervals that held but
  were several times wider (tests/test_estimate.py holds the calibration).

The interval is the estimate +- t * standard error, t Student's 97.5 %
quantile at the draws' degrees of freedom (normal for the coin). Everything
the job computes from documents in proportion (tokens, loss-valid tokens,
rows) is estimated as the token total times the ratio the sample's own job
measured, with the token total's relative interval. Bytes on disk, where the
sample job's rows can be told apart by document, are a per-document value
like the tokens (`attribute`, `share_ratio`): its bytes per row weighed a
document by its bytes twice over (drawn by them, counted by its rows).
"""

from __future__ import annotations

import dataclasses
import math
from statistics import NormalDist
from typing import Iterable, Optional, Sequence

import numpy as np

__all__ = ["Interval", "Stratum", "student_t", "by_bytes", "by_coin", "by_poisson", "share_ratio", "combine",
           "scaled", "scaled_seconds", "split_share", "attribute", "effective_count", "mean_spread", "SourcePrediction",
           "MixturePrediction", "predict_mixture", "partial_counts"]

_Z = NormalDist().inv_cdf(0.975)


def student_t(df: float, p: float = 0.975) -> float:
    """Student's t quantile (Cornish-Fisher expansion about the normal: within 0.3 % for df >= 4, 0.8 % at 3)."""
    z = NormalDist().inv_cdf(p) if p != 0.975 else _Z
    if df <= 0 or math.isinf(df):
        return z
    df = max(df, 1.0)
    return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3))


@dataclasses.dataclass(frozen=True)
class Stratum:
    """One file's (or source's) estimate of a total: value, variance and degrees of freedom."""

    value: float
    variance: float
    df: float  # inf: the normal quantile applies


@dataclasses.dataclass(frozen=True)
class Interval:
    value: float
    half_width: float

    @property
    def low(self) -> float:
        return max(0.0, self.value - self.half_width)

    @property
    def high(self) -> float:
        return self.value + self.half_width

    @property
    def relative(self) -> float:
        return self.half_width / self.value if self.value else 0.0


def by_bytes(total_bytes: int, line_bytes: Sequence[int], values: Sequence[float]) -> Stratum:
    """Hansen-Hurwitz: lines drawn with probability proportional to their bytes, n draws with replacement."""
    b = np.asarray(line_bytes, dtype=np.float64)
    if not len(b):
        return Stratum(0.0, 0.0, math.inf)
    y = total_bytes * np.asarray(values, dtype=np.float64) / b
    n = len(y)
    variance = float(y.var(ddof=1)) / n if n > 1 else float(y[0]) ** 2  # one draw: as wide as the value
    return Stratum(float(y.mean()), variance, n - 1 if n > 1 else 1)


def by_coin(values: Sequence[float], fraction: float) -> Stratum:
    """Horvitz-Thompson: every record kept with probability `fraction`, independently."""
    x = np.asarray(values, dtype=np.float64)
    if fraction >= 1:
        return Stratum(float(x.sum()), 0.0, math.inf)
    return Stratum(float(x.sum()) / fraction, (1 - fraction) / fraction**2 * float((x * x).sum()), math.inf)


def by_poisson(values: Sequence[float], probabilities: Sequence[float], sizes: Optional[Sequence[float]] = None,
               size_total: Optional[float] = None) -> Stratum:
    """Records each kept with its own probability p_i (Poisson sampling).

    Without sizes: Horvitz-Thompson, sum(x / p), variance sum((1 - p) / p^2 * x^2). With every record's size
    known (`size_total`, the file read whole): the ratio form size_total * sum(x / p) / sum(size / p), whose
    error is that of the residuals x - R * size (linearized: the same sum over them, scaled by size_total
    over its estimate). n - 1 degrees of freedom: a small file keeps few records.
    """
    x = np.asarray(values, dtype=np.float64)
    p = np.asarray(probabilities, dtype=np.float64)
    if not len(x):
        return Stratum(0.0, 0.0, math.inf)
    df = max(len(x) - 1, 1)
    weight = (1 - p) / p**2
    if sizes is None or size_total is None:
        return Stratum(float((x / p).sum()), float((weight * x * x).sum()), df)
    b = np.asarray(sizes, dtype=np.float64)
    estimated = float((b / p).sum())
    if estimated <= 0:
        return Stratum(float((x / p).sum()), float((weight * x * x).sum()), df)
    ratio = float((x / p).sum()) / estimated
    residuals = x - ratio * b
    scale = size_total / estimated
    return Stratum(size_total * ratio, scale**2 * float((weight * residuals**2).sum()) * len(x) / df, df)


def share_ratio(total_bytes: int, line_bytes: Sequence[int], tokens: Sequence[float],
                values: Sequence[float]) -> Stratum:
    """A value known only for the first k of n lines drawn by byte (what the job on the sample holds: its bytes
    on disk), as a file's total: its Hansen-Hurwitz total over those k, in ratio to the tokens' total over all n,
    Y_k * T_n / T_k (Y_k itself when k = n). With a, z the draws' total * value / bytes and total * tokens /
    bytes and R = Y_k / T_k, its error is linearly mean_k(a - R (1 - k / n) z) + R (n - k) / n mean_rest(z),
    two means over disjoint draws: their variances add, and the degrees of freedom are Welch's."""
    b = np.asarray(line_bytes, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    n, k = len(b), len(y)
    if not k:
        return Stratum(0.0, 0.0, math.inf)
    if not 0 < k <= n:
        raise ValueError(f"values for {k} of {n} draws: the first k <= n")
    z = total_bytes * np.asarray(tokens, dtype=np.float64) / b
    share_tokens = float(z[:k].mean())
    if share_tokens <= 0:  # no token in the share: nothing to take the ratio to
        return by_bytes(total_bytes, b[:k], y)
    a = total_bytes * y / b[:k]
    ratio = float(a.mean()) / share_tokens
    u = a - ratio * (1 - k / n) * z[:k]
    # One value says nothing of its spread: as wide as the estimate (as `by_bytes` with one draw).
    parts = [(float(u.var(ddof=1)) / k if k > 1 else (ratio * float(z.mean())) ** 2, max(k - 1, 1))]
    if n > k:
        rest = z[k:] if n - k > 1 else z
        parts.append((ratio**2 * ((n - k) / n) ** 2 * float(rest.var(ddof=1)) / (n - k), max(len(rest) - 1, 1)))
    variance = sum(v for v, _ in parts)
    denominator = sum(v**2 / df for v, df in parts if v > 0)
    return Stratum(ratio * float(z.mean()), variance, variance**2 / denominator if denominator else math.inf)


def combine(strata: Iterable[Stratum]) -> Interval:
    """The sum of independent strata, with a 95 % interval (Welch-Satterthwaite degrees of freedom)."""
    strata = list(strata)
    value = sum(s.value for s in strata)
    variance = sum(s.variance for s in strata)
    if variance <= 0:
        return Interval(value, 0.0)
    finite = [s for s in strata if s.variance > 0]
    denominator = sum(s.variance**2 / s.df for s in finite if not math.isinf(s.df))
    df = variance**2 / denominator if denominator else math.inf
    return Interval(value, student_t(df) * math.sqrt(variance))


def split_share(total: Interval, fraction: float, squares: float) -> Interval:
    """What a split's output holds of an estimated total, its documents drawn by a keyed hash with probability
    `fraction` each, blind to their size: fraction * total, whose error is the total's, scaled, plus the draw's
    own, fraction * (1 - fraction) * sum(x^2) over the documents (`squares`, itself estimated: the documents
    count for a count, sum of tokens^2 for tokens). Independent of the sample's own draws: normal quantiles."""
    se_total = total.half_width / _Z if total.half_width else 0.0
    variance = (fraction * se_total) ** 2 + fraction * (1 - fraction) * max(squares, 0.0)
    return Interval(fraction * total.value, _Z * math.sqrt(variance))


def scaled(total: Interval, ratio: float) -> Interval:
    """A quantity in proportion to `total` (the ratio measured on the sample), with its relative interval."""
    return Interval(total.value * ratio, total.half_width * ratio)


def attribute(doc_tokens: Sequence[int], starts: Sequence[int], lengths: Sequence[int],
              costs: Sequence[float]) -> np.ndarray:
    """Each document's share of its rows' costs (bytes on disk): documents back to back as one stream of
    tokens, row i a window of it (`transforms.core.pack`: its inputs the `lengths[i] - 1` tokens from
    `starts[i]`), its cost spread evenly over its inputs. A token in no row's inputs costs nothing."""
    t = np.asarray(doc_tokens, dtype=np.int64)
    s = np.asarray(starts, dtype=np.float64)
    if not len(s):
        return np.zeros(len(t))
    ends = s + np.asarray(lengths, dtype=np.float64) - 1
    order = np.argsort(s, kind="stable")
    s, ends, c = s[order], ends[order], np.asarray(costs, dtype=np.float64)[order]
    # The cumulative cost at every row's first and past its last input: piecewise linear over the stream.
    xs = np.column_stack([s, ends]).ravel()
    cs = np.column_stack([np.concatenate([[0.0], np.cumsum(c)[:-1]]), np.cumsum(c)]).ravel()
    edges = np.concatenate([[0], np.cumsum(t)]).astype(np.float64)
    cumulative = np.interp(edges, xs, cs)
    return np.diff(cumulative)


def scaled_seconds(fixed: float, sample: float, share: float) -> float:
    """A job's stage seconds from its sample job's (`sample`, on `share` of the data): what any job pays (`fixed`:
    the job of one record's seconds, the encoders' and writers' first use) once, the rest scaled to the whole."""
    return fixed + max(sample - fixed, 0.0) / max(share, 1e-12)


def effective_count(weights: Sequence[float]) -> float:
    """Kish's effective number of independent values in a mean weighted by `weights`: (sum w)^2 / sum w^2; a
    mean over one document of many rows and several of few counts little more than that one."""
    w = np.asarray(weights, dtype=np.float64)
    squares = float((w * w).sum())
    return float(w.sum()) ** 2 / squares if squares > 0 else 0.0


def mean_spread(values: Sequence[float], n: float) -> float:
    """The relative 95% half-width of the mean of `values` as if they were n independent ones (n at least 2):
    t(n - 1) * sd / sqrt(n) / mean."""
    x = np.asarray(values, dtype=np.float64)
    if len(x) < 2 or not float(x.mean()):
        return 0.0
    n = max(2.0, float(n))
    return student_t(n - 1) * float(x.std(ddof=1)) / math.sqrt(n) / float(x.mean())


# ------------------------------------------------------------------- mixtures


@dataclasses.dataclass(frozen=True)
class SourcePrediction:
    """A mixture source as the job will take it: its tokens and documents available, its target, the tokens and
    documents it will give (copies included) and the documents taken more than once."""

    name: str
    available: Interval  # tokens
    documents: Interval  # documents available (good, as the reader passes them)
    target: Interval  # tokens the plan asks of it
    taken: Interval  # tokens it gives: the target, within one document
    taken_documents: Interval  # documents it gives, copies included
    repeats: Interval  # of which copies beyond the first


@dataclasses.dataclass(frozen=True)
class MixturePrediction:
    sources: tuple  # SourcePrediction, in the spec's order
    tokens: Interval  # all sources' taken tokens: the output's documents' tokens
    documents: Interval  # documents used, copies included
    kept: Interval  # records that make a row of their own (Chat, DPO), copies included
    limited_by: Optional[str]  # without total_tokens: the source whose max_repeats sets the total
    shortfall: float  # share of the simulated availabilities under which the plan cannot be made


def predict_mixture(spec, tokens: Sequence[Interval], documents: Sequence[Interval], kept: Sequence[Interval],
                    seed: int = 0, draws: int = 2000, lengths: Optional[Sequence] = None) -> MixturePrediction:
    """A mixture's output from its sources' estimated availabilities (tokens, documents, kept records per source).

    The plan (`transforms.core.mixture.targets`) is the job's own, made at the estimates; its error is
    propagated by simulation: `draws` sets of availabilities, each source's tokens, documents and kept records
    drawn independently from normals matching its intervals (the sources are independent strata; independence
    within a source overstates the spread of a ratio such as documents per token, so the intervals err wide),
    each run through the plan. A source gives its target within one document (the plan's exact threshold), so
    a taken total's interval adds a mean document per source to the simulated spread. Seeded: the same
    prediction for the same sample.

    A source taken c + r times (r a fraction) gives every document c times and, once more, the documents its
    keyed hash puts first until their tokens reach r of its own: how many that is, is the job's draw, as a
    split's is (`split_share`). With `lengths` (per source, the token counts of its sampled documents and how
    many of its documents each stands for, or None), each simulated availability draws those documents in a
    random order until they hold the remainder (`partial_counts`): a source of a few long documents among many
    short ones fills a remainder with a number of documents far from r times its documents as often as not.
    Without it, r times its documents.
    """
    from transforms.core.mixture import targets

    n = len(spec.sources)
    a = np.array([t.value for t in tokens], dtype=np.float64)
    d = np.array([x.value for x in documents], dtype=np.float64)
    k = np.array([x.value for x in kept], dtype=np.float64)
    wanted, _, limited_by = targets(spec, [max(1, int(round(x))) for x in a])
    want = np.array(wanted, dtype=np.float64)
    per_doc = a / np.where(d > 0, d, np.inf)  # mean tokens of a document (none without documents)

    def taken_docs(want, a, d, partial):
        """Documents taken (copies included) and of them repeats; `partial`: the remainder's documents."""
        whole = np.floor(want / np.where(a > 0, a, np.inf))
        return whole * d + partial, np.maximum(whole - 1, 0) * d + np.where(whole >= 1, partial, 0.0)

    rng = np.random.default_rng([seed, 0x6D6978])  # "mix"
    samples = [None] * n  # per source with `lengths`: its documents' tokens, their weights, their mean
    for i in range(n):
        if lengths is not None and lengths[i] is not None and len(lengths[i][0]):
            t, m = (np.asarray(x, dtype=np.float64) for x in lengths[i])
            samples[i] = (t, m, float((t * m).sum() / m.sum()))

    def remainders(copies: np.ndarray, d: np.ndarray, i: int) -> np.ndarray:
        """Source i's remainder documents, per row of `copies` and `d` (documents available): r of d, or drawn."""
        partial = (copies - np.floor(copies)) * d
        if samples[i] is None:
            return partial
        t, m, mean = samples[i]
        return partial_counts(rng, t, m, partial * mean)  # the remainder in the sample's units: r d mean tokens

    copies0 = want / np.where(a > 0, a, np.inf)  # none of a source without tokens
    # The point: the mean of the draw at the estimates (r of d where no lengths are given).
    partial0 = np.array([float(np.mean(remainders(np.full(draws, copies0[i]), np.full(draws, d[i]), i)))
                         for i in range(n)])
    docs, reps = taken_docs(want, a, d, partial0)
    rows = copies0 * k

    sd = [np.array([i.half_width / _Z for i in x], dtype=np.float64) for x in (tokens, documents, kept)]
    runs = []
    failed = 0
    for _ in range(draws):
        a_, d_, k_ = (np.maximum(v + s * rng.standard_normal(n), 1e-9) for v, s in zip((a, d, k), sd))
        try:
            w = np.array(targets(spec, [max(1, int(round(x))) for x in a_])[0], dtype=np.float64)
        except ValueError:  # a source cannot give its budget or share at these availabilities
            failed += 1
            continue
        runs.append((w, a_, d_, k_))
    sim = {name: [] for name in ("want", "docs", "reps", "rows")}
    if runs:
        w, a_, d_, k_ = (np.array(x) for x in zip(*runs))
        partial = np.column_stack([remainders(w[:, i] / a_[:, i], d_[:, i], i) for i in range(n)])
        for j in range(len(runs)):
            dd, rr = taken_docs(w[j], a_[j], d_[j], partial[j])
            sim["want"].append(w[j])
            sim["docs"].append(dd)
            sim["reps"].append(rr)
            sim["rows"].append(w[j] / a_[j] * k_[j])

    def interval(value: np.ndarray, key: str, source: Optional[int] = None, slack: float = 0.0) -> Interval:
        """`value` (per source, or its sum) with the 2.5-97.5 % range of the simulated ones around it."""
        point = float(value[source] if source is not None else value.sum())
        if not sim[key]:
            return Interval(point, slack)
        arr = np.array(sim[key])
        got = arr[:, source] if source is not None else arr.sum(axis=1)
        low, high = np.quantile(got, [0.025, 0.975])
        return Interval(point, max(point - low, high - point, 0.0) + slack)

    sources = tuple(
        SourcePrediction(s.name, tokens[i], documents[i], interval(want, "want", i),
                         interval(want, "want", i, slack=per_doc[i]), interval(docs, "docs", i, slack=1.0),
                         interval(reps, "reps", i))
        for i, s in enumerate(spec.sources))
    return MixturePrediction(sources, interval(want, "want", slack=float(per_doc.sum())),
                             interval(docs, "docs", slack=float(n)), interval(rows, "rows", slack=float(n)),
                             limited_by, failed / draws)


def partial_counts(rng, sizes: Sequence[float], weights: Sequence[float], remainders: Sequence[float],
                   simulate_up_to: int = 200) -> np.ndarray:
    """Per remainder, how many documents a random order takes until their tokens come nearest it (the mixture's
    cut: `transforms.core.mixture.refine_plan`), documents of `sizes` tokens (at least one each) drawn with
    probability in proportion to `weights` (how many each stands for). Simulated, a draw per remainder, where
    that takes at most `simulate_up_to` documents on average: a draw takes up to as many of the smallest
    documents as the remainder holds, or ten times the mean count, and one that still falls short counts the
    mean (the documents are drawn a column at a time, so that a draw's first documents do not depend on how many
    it may take). Beyond, the renewal count's normal limit: mean R / mu, variance R * sigma^2 / mu^3."""
    t = np.asarray(sizes, dtype=np.float64)
    p = np.asarray(weights, dtype=np.float64)
    p = p / p.sum()
    r = np.asarray(remainders, dtype=np.float64)
    mean = float((t * p).sum())
    if not len(r) or mean <= 0:
        return np.zeros(len(r))
    variance = float((p * (t - mean) ** 2).sum())
    expected = r / mean
    if expected.max() > simulate_up_to:
        spread = np.sqrt(np.maximum(r, 0) * variance / mean**3)
        return np.maximum(expected + spread * rng.standard_normal(len(r)), 0.0)
    smallest = float(t[(t > 0) & (p > 0)].min())
    width = int(min(math.ceil(r.max() / smallest) + 1, math.ceil(10 * expected.max()) + 100))
    cumulative = np.cumsum(t[rng.choice(len(t), size=(width, len(r)), p=p)].T, axis=1)
    before = (cumulative < r[:, None]).sum(axis=1)  # documents whose tokens stay below the remainder
    # The tokens before each document and after it, past the last drawn one infinitely many.
    bounds = np.hstack([np.zeros((len(r), 1)), cumulative, np.full((len(r), 1), np.inf)])
    rows = np.arange(len(r))
    over, under = bounds[rows, before + 1] - r, r - bounds[rows, before]
    # The cut nearest the remainder: the document that crosses it, unless stopping before it is nearer.
    return np.where(before < width, np.where(over > under, before, before + 1), expected)
