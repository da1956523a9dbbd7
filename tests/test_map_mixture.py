"""Mixtures at training time: H5MixtureDataset over real outputs, MixtureSampler's shares, resume and ranks.

Two outputs of the job at msl 128: "web", LMData packed from en_small_pd
(full rows, 128 loss-valid tokens each but the last), and "code", LMData
unpacked from code_small cut into paragraphs (one short document per row,
or a few rows for a long one: 78 loss-valid tokens per row on average,
from 9 to 128). Their rows differ in tokens, so shares of samples and of
tokens differ: a sampler that ignored `by` fails the token tests.

Bounds are the module docstring's (transforms/core/mixture_sampler.py):
draws of each component within d / 2 of k * p at block boundaries; a
component's tokens off its mean only by its partial cycle, drawn without
replacement (bounded at 6 standard deviations: a failure is structure, not
bad luck). Statistical tests use fixed seeds, so they are deterministic.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import shutil
import tracemalloc
import warnings
from collections import Counter
from itertools import islice
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.helpers import SHARED, read_rows, require_shared, run_job
from transforms.core.mixture_sampler import BLOCK, COVER_SHARE, MixtureSampler, sample_shares
from transforms.io.map_dataset import H5MapDataset, H5MixtureDataset, loss_tokens_per_row

TOKENIZER = ["--tokenizer_type", "GPT2Tokenizer", "--vocab_file", "data/tokenizers/gpt2/vocab.bpe",
             "--encoder_file", "data/tokenizers/gpt2/encoder.json", "--max_seq_length", "128"]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """name -> (output directory, data_params, loss-valid tokens of each row in index order)."""
    corpora = require_shared(SHARED / "corpora")
    root = tmp_path_factory.mktemp("mixture_outputs")
    (root / "web_in").mkdir()
    shutil.copy(corpora / "en_small_pd.jsonl", root / "web_in")
    (root / "code_in").mkdir()
    with open(root / "code_in" / "code.jsonl", "w") as f:  # short documents, one row each unpacked
        for line in (corpora / "code_small.jsonl").read_text().splitlines():
            for paragraph in json.loads(line)["text"].split("\n\n"):
                if paragraph.strip():
                    f.write(json.dumps({"text": paragraph}) + "\n")
    done = {}
    for name, extra in (("web", []), ("code", ["--pack_sequences", "False"])):
        out = root / name
        params = run_job(["LMData", "--input_dir", str(root / f"{name}_in"), "--output_dir", str(out),
                          *TOKENIZER, *extra])
        tokens = (read_rows(out)[:, 1, :] == 1).sum(axis=1)
        done[name] = out, params, tokens
    return done


def _mixture(outputs, web=0.7, code=0.3, **kwargs) -> H5MixtureDataset:
    return H5MixtureDataset({"web": (str(outputs["web"][0]), web), "code": (str(outputs["code"][0]), code)},
                            **kwargs)


# ---------------------------------------------------------------- the dataset


def test_rows_by_index_are_the_components_rows(outputs):
    ds = _mixture(outputs)
    web, code = read_rows(outputs["web"][0]), read_rows(outputs["code"][0])
    assert ds.sizes == (len(web), len(code)) and len(ds) == len(web) + len(code)
    assert ds.names == ("web", "code") and ds.features == ("input_ids", "attention_mask", "labels")
    for i in [0, 1, len(web) - 1, len(web), len(web) + 1, len(ds) - 1, -1, -len(ds)] + list(range(0, len(ds), 97)):
        k, j = ds.locate(i)
        want = (web, code)[k][j]
        assert (k, j) == ((0, i % len(ds)) if i % len(ds) < len(web) else (1, i % len(ds) - len(web)))
        got = ds[i]
        assert list(got) == list(ds.features)  # the row's features only: no "source" key for a model to trip on
        assert np.array_equal(np.stack(list(got.values())), want), i
    for bad in (len(ds), -len(ds) - 1):
        with pytest.raises(IndexError):
            ds[bad]


def test_tokens_per_row_from_data_params_and_counted_without(outputs, tmp_path):
    ds = _mixture(outputs, by="tokens")
    for (name, (out, params, tokens)), got in zip(outputs.items(), ds.tokens_per_row):
        post = params["post-process"]
        assert got == post["loss_valid_tokens"] / post["n_examples"] == tokens.sum() / len(tokens)
    # Without data_params.json (or with one describing other files) the rows are counted: the same number.
    bare = tmp_path / "bare"
    shutil.copytree(outputs["code"][0], bare)
    os.remove(bare / "data_params.json")
    assert loss_tokens_per_row(H5MapDataset(str(bare))) == ds.tokens_per_row[1]
    stale = tmp_path / "stale"
    shutil.copytree(outputs["code"][0], stale)
    params = json.loads((stale / "data_params.json").read_text())
    params["post-process"]["n_examples"] += 1
    params["post-process"]["loss_valid_tokens"] = 1
    (stale / "data_params.json").write_text(json.dumps(params))
    assert loss_tokens_per_row(H5MapDataset(str(stale))) == ds.tokens_per_row[1]


def test_to_hf_reads_each_component_as_its_own(outputs, tmp_path):
    ds = _mixture(outputs)
    row = ds[len(ds) - 3]
    assert all(np.array_equal(v, ds.components[1].to_hf(row)[k]) for k, v in ds.to_hf(row).items())
    # A component whose rows end with an untrained EOS input (FIM's, here by its data_params.json): to_hf must
    # be told the row's component rather than guess.
    fim = tmp_path / "fim"
    shutil.copytree(outputs["code"][0], fim)
    params = json.loads((fim / "data_params.json").read_text())
    params["setup"]["mode"] = "FIM"
    (fim / "data_params.json").write_text(json.dumps(params))
    mixed = H5MixtureDataset([(str(outputs["web"][0]), 1), (str(fim), 1)])
    with pytest.raises(ValueError, match="give to_hf the row's component"):
        mixed.to_hf(row)
    k, _ = mixed.locate(len(mixed) - 3)
    assert np.array_equal(mixed.to_hf(row, component=k)["labels"], mixed.components[1].to_hf(row)["labels"])


# ---------------------------------------------------------------- shares


def _token_sd(tokens: np.ndarray, first: int, count: int) -> float:
    """The sd of the tokens of draws [first, first + count) of a component: whole cycles add exactly their
    total; a partial cycle of r of its n rows is a draw without replacement, variance r s^2 (n - r) / (n - 1)."""
    n, var = len(tokens), float(tokens.var(ddof=1)) if len(tokens) > 1 else 0.0
    total, at, end = 0.0, first, first + count
    while at < end:
        cycle_end = (at // n + 1) * n
        r = min(end, cycle_end) - at
        total += r * var * (n - r) / (n - 1) if r < n else 0.0
        at += r
    return math.sqrt(total)


@pytest.mark.parametrize("web_weight", [0.7, 0.3])
def test_token_shares_follow_the_weights(outputs, web_weight):
    """Every block-boundary prefix of two epochs: the realized share of the loss-valid tokens is within the
    documented bound of each weight; the whole epoch within about 1e-4."""
    weights = (web_weight, 1 - web_weight)
    ds = _mixture(outputs, *weights, by="tokens")
    tokens = [outputs["web"][2], outputs["code"][2]]
    sampler = ds.sampler(seed=5)
    starts = ds._starts
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        got = np.array(list(sampler), dtype=np.int64)
        assert len(got) == sampler.epoch_length
        comp = (got >= starts[1]).astype(int)
        row_tokens = np.where(comp == 0, tokens[0][np.minimum(got, starts[1] - 1)],
                              tokens[1][np.maximum(got - starts[1], 0)])
        per = np.stack([np.cumsum(np.where(comp == c, row_tokens, 0)) for c in (0, 1)])
        draws = np.stack([np.cumsum(comp == c) for c in (0, 1)])
        worst = 0.0
        for k in list(range(BLOCK, len(got), BLOCK)) + [len(got)]:
            realized = per[:, k - 1] / per[:, k - 1].sum()
            # Counts within 1/2 of k * p (two components: d = 1), each worth at most a mean row; tokens off
            # only by the partial cycles (6 sd).
            slack = sum(0.5 * t.mean() + 6 * _token_sd(t, epoch * sampler.epoch_draws[c], int(draws[c, k - 1]))
                        for c, t in enumerate(tokens))
            bound = slack / per[:, k - 1].sum()
            assert np.all(np.abs(realized - weights) <= bound), (epoch, k, realized, bound)
            if k >= 2048:
                worst = max(worst, float(np.max(np.abs(realized - weights))))
        assert bound < 0.005  # the whole epoch's bound is tight: the test above is not vacuous
        assert worst < 0.01, worst  # measured 0.0016 to 0.0073 after 2048 rows (these seeds are fixed)


def test_by_samples_shares_samples_not_tokens(outputs):
    """The same weights by samples: the sample shares are the weights, the token shares are not (the code rows
    are shorter), so a sampler that ignored `by` fails one test or the other."""
    ds = _mixture(outputs, by="samples")
    sampler = ds.sampler(seed=2)
    got = np.array(list(sampler))
    code = got >= ds.sizes[0]
    assert abs(code.mean() - 0.3) <= 0.5 / len(got)
    tokens = outputs["code"][2][got[code] - ds.sizes[0]].sum()
    share = tokens / (tokens + outputs["web"][2][got[~code]].sum())
    assert 0.19 < share < 0.22  # 0.3 * 77.8 / (0.3 * 77.8 + 0.7 * 128.0) = 0.207
    by_tokens = _mixture(outputs, by="tokens").sampler(seed=2)
    assert by_tokens.probabilities[1] == pytest.approx(0.3 / 77.84 / (0.3 / 77.84 + 0.7 / 128.0), abs=1e-3)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_sample_shares_are_balanced_in_every_prefix(seed):
    """By samples with three drawn components (d = 2): at every block boundary each component's draws are within
    d / 2 = 1 of k * p, counted from the order itself; inside a block within the block's composition (d more)
    and its shuffle's bridge (3 sd of the block, ~1e-7). i.i.d. draws are off by sqrt(k p (1 - p)): 20 for the
    largest component at the epoch's end (k = 2000)."""
    sizes, weights = (1000, 700, 3000, 50), (5, 3, 2, 0)
    s = MixtureSampler(sizes, weights, seed=seed)
    p = np.array(sample_shares(weights))
    assert s.probabilities == pytest.approx(tuple(p), abs=2**-31) and s.probabilities[3] == 0
    edges = np.cumsum(sizes)
    comp = np.searchsorted(edges, np.array(list(s)), side="right")
    assert not np.any(comp == 3)  # weight 0: never drawn
    counts = np.stack([np.cumsum(comp == c) for c in range(4)])
    inside = 3 + 3 * np.sqrt(BLOCK * p * (1 - p))
    for k in range(1, len(comp) + 1):
        dev = np.abs(counts[:, k - 1] - k * p)
        if k % BLOCK == 0 or k == len(comp):
            assert np.all(dev <= 1 + k * 2**-31), (k, dev)
            assert s.draws_before(k) == tuple(counts[:, k - 1])
        assert np.all(dev <= inside), (k, dev)
    assert s.draws_before(0) == (0, 0, 0, 0) and s.draws_before(1000) == tuple(counts[:, 999])


def test_the_epoch_is_cerebras_mixture_epoch():
    """Cerebras 2.10's Mixture: T = max(n / w) over weights above 5%, int(T * w) samples each."""
    cases = [((1000, 500, 10000), (0.6, 0.38, 0.02)), ((4639, 6002), (0.7, 0.3)), ((10, 10, 10), (1, 1, 1)),
             ((300, 7000), (0.96, 0.04)), ((123, 456, 789, 1011), (0.1, 0.2, 0.3, 0.4))]
    for sizes, weights in cases:
        s = MixtureSampler(sizes, weights)
        w = np.array(weights) / sum(weights)
        total = max(n / x for n, x in zip(sizes, w) if x > COVER_SHARE)
        cerebras = [int(total * x) for x in w]
        assert abs(s.epoch_length - sum(cerebras)) <= len(sizes), (sizes, s.epoch_length, cerebras)
        assert all(abs(a - b) <= 1 for a, b in zip(s.epoch_draws, cerebras)), (s.epoch_draws, cerebras)
        covered = [c for c, x in enumerate(w) if x > COVER_SHARE]
        assert all(s.epoch_draws[c] >= sizes[c] for c in covered)
        assert any(s.epoch_draws[c] == sizes[c] for c in covered)  # the binding one: every row exactly once
        assert s.epoch_length == sum(s.epoch_draws)
    # A component of 4% does not lengthen the epoch to cover its 7000 rows (Cerebras: int(312.5 * 0.04) = 12):
    # it goes on through them next epoch.
    assert MixtureSampler((300, 7000), (0.96, 0.04)).epoch_draws == (300, 12)
    # num_samples: an epoch of that length, the shares as before.
    s = MixtureSampler((1000, 500), (0.6, 0.4), num_samples=777)
    assert s.epoch_length == 777 and s.epoch_draws == (466, 311) and len(list(s)) == 777


def test_a_weight_of_exactly_five_percent_does_not_lengthen_the_epoch():
    """Cerebras covers weights *above* 5%: at exactly 5% (19 : 1, a common mixture) the large component goes
    through its rows across epochs. Counting it as covered would make the epoch 199,991 draws instead of 105."""
    s = MixtureSampler([100, 10000], [19, 1])
    assert s.weights[1] / sum(s.weights) == COVER_SHARE  # exactly at the threshold, not a rounding away
    assert s.epoch_length == 105 and s.epoch_draws == (100, 5)
    got = list(s)
    assert len(got) == 105
    assert sorted(x for x in got if x < 100) == list(range(100))  # the covered component: every row once
    assert [x for x in got if x >= 100] == [2842, 6975, 9634, 2309, 2726]  # 5 rows of the other, in order
    # Just above the threshold (1 / 19 = 5.26%) it is covered: all its 10000 rows, and 179991 of the first's.
    above = MixtureSampler([100, 10000], [18, 1])
    assert above.epoch_length == 189991 and above.epoch_draws == (179991, 10000)
    # With three components the one at exactly 5% is left out too, and the epoch is the 45% one's 100 rows.
    three = MixtureSampler([100, 10000, 50], [9, 1, 10])
    assert three.epoch_length == 222 and three.epoch_draws == (100, 11, 111)
    # By tokens the 5% is of the weights as given (a token share), not of the sample shares (here 34%).
    tokens = MixtureSampler([100, 10000], [19, 1], by="tokens", tokens_per_row=[10.0, 1.0])
    assert tokens.probabilities[1] > 0.34
    assert tokens.epoch_length == 152 and tokens.epoch_draws == (100, 52)
    # No component above 5% (21 of 4.8% each): every one is covered, each row exactly once.
    even = MixtureSampler([10] * 21, [1] * 21)
    assert even.epoch_length == 210 and even.epoch_draws == (10,) * 21
    assert sorted(even) == list(range(210))


def test_epochs_at_their_limits():
    """The shortest and the longest epochs: one row; no draw at all; 2**63 - 1 positions, the most a length holds;
    one more refused, whether the doubling search or the bisection finds it."""
    one = MixtureSampler((1,), (1,))
    assert (one.epoch_length, one.epoch_draws, list(one)) == (1, (1,), [0])
    none = MixtureSampler((10, 10), (1, 1), num_samples=0)
    assert (none.epoch_length, none.epoch_draws, len(none), list(none)) == (0, (0, 0), 0, [])
    assert MixtureSampler((2**62, 2**62 - 1), (1, 1)).epoch_length == 2**63 - 1
    with pytest.raises(ValueError, match=r"^the mixture's epoch would exceed 2\*\*63 positions: give num_samples$"):
        MixtureSampler((2**62 + 1, 2**62 - 2), (1, 1))  # 2**63 + 2 positions: doubling passes 2**64
    with pytest.raises(ValueError, match=r"^the mixture's epoch would exceed 2\*\*63 - 1 positions: give "
                                         r"num_samples$"):
        MixtureSampler((3 * 2**61, 2**61 - 1), (3, 1))  # exactly 2**63 positions
    with pytest.raises(ValueError, match=r"^num_samples must be in \[0, 2\*\*63 - 1\], got 9223372036854775808$"):
        MixtureSampler((10, 10), (1, 1), num_samples=2**63)
    with pytest.raises(ValueError, match=r"^the components hold 9223372036854775808 rows; at most 2\*\*63 - 1 can "
                                         r"be indexed$"):
        MixtureSampler((2**62, 2**62), (1, 1))


def test_zero_weights_and_the_smallest_share():
    """A component of weight 0 is never drawn, with rows or without, by samples or by tokens (whatever its tokens
    per row); a share of exactly 2**-31 (one unit of the schedule) is drawn, once in 2**31 positions."""
    s = MixtureSampler((10, 10, 10), (1, 0, 0))  # a subtree of the schedule with no share at all
    assert s.epoch_draws == (10, 0, 0) and sorted(s) == list(range(10))
    assert MixtureSampler((10, 0), (1, 0)).epoch_draws == (10, 0)
    only = MixtureSampler((5, 7), (0, 1))  # one drawn component: the schedule is a single leaf
    assert sorted(only) == list(range(5, 12)) and [only.component_at(p) for p in range(7)] == [1] * 7
    tokens = MixtureSampler((10, 10), (1, 0), by="tokens", tokens_per_row=(5.0, 0.0))
    assert tokens.probabilities == (1.0, 0.0) and tokens.epoch_draws == (10, 0)
    assert sample_shares([1, 0], tokens_per_row=[1.0, 0.0]) == (1.0, 0.0)
    tiny = MixtureSampler((10, 10), (2**31 - 1, 1), num_samples=2**31)
    assert tiny.probabilities == (1 - 2**-31, 2**-31) and tiny.epoch_draws == (2**31 - 1, 1)


def test_rows_are_exact_beyond_float_precision():
    """Indices past 2**53 (a float's last exact integer) and slots near 2**62 are computed in integers: each slot's
    component and draw number are exactly the schedule's counts, N_c(t + 1) - N_c(t) and N_c(t)."""
    far = MixtureSampler((2**60, 10), (0, 1))
    assert sorted(far) == [2**60 + r for r in range(10)]
    s = MixtureSampler((10**6, 10**6, 10**6), (5, 3, 2), num_samples=2**62, seed=1)
    slots = np.arange(2**62 - 300, 2**62, dtype=np.uint64)
    comps, draws = s._tree.locate(slots)
    for t, c, j in zip(slots.tolist(), comps.tolist(), draws.tolist()):
        before, after = s._tree.counts(t), s._tree.counts(t + 1)
        assert [b - a for a, b in zip(before, after)] == [int(k == c) for k in range(3)] and before[c] == j, t
    assert s.draws_before(2**62) == (2305843009213693952, 1383505804669222912, 922337204544471040)
    assert s.draws_before(2**62 - 1) == (2305843009213693951, 1383505804669222912, 922337204544471040)
    # A component reached after one level of a deeper tree ([0] | [1, 2]): a position of component 0 alone.
    three = MixtureSampler((10, 10, 10), (1, 1, 1), seed=2)
    order = list(three)
    assert [three.component_at(p) for p in range(30)] == [i // 10 for i in order]


def test_the_last_partial_block_is_pinned():
    """The epoch's last block, shorter than BLOCK, is shuffled by keys of its own: pinned, as the whole blocks are
    (test_orders_are_pinned)."""
    assert list(MixtureSampler((30, 20), (0.6, 0.4), seed=3)) == [
        24, 47, 25, 20, 39, 3, 28, 6, 14, 48, 18, 0, 46, 42, 10, 38, 31, 44, 8, 2, 11, 35, 1, 30, 4, 49, 19, 33, 43,
        34, 5, 22, 9, 12, 37, 15, 23, 45, 36, 13, 26, 32, 29, 40, 7, 21, 27, 16, 17, 41]
    assert list(MixtureSampler((60, 40), (0.6, 0.4), seed=3))[64:] == [
        18, 81, 39, 36, 11, 76, 45, 97, 80, 12, 85, 44, 82, 99, 19, 6, 75, 61, 77, 5, 2, 17, 52, 32, 4, 70, 46, 27,
        28, 41, 53, 84, 98, 67, 49, 0]


def test_no_overflow_warnings():
    """The keys' arithmetic wraps on purpose: a training loop run with warnings as errors (python -W error) works
    through blocks, a partial block and random access."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = MixtureSampler((100, 37), (0.6, 0.4), seed=3)
        assert s.epoch_length == 166 and len(list(s)) == 166
        s.set_epoch(1)
        assert s.index_at(165) == 132 and s.draws_before(165) == (100, 65)


def test_each_component_cycles_through_its_rows_across_epochs():
    sizes, weights = (1000, 700, 300), (5, 3, 2)
    s = MixtureSampler(sizes, weights, seed=9)
    assert s.epoch_draws == (1166, 700, 466)  # component 1 binds (700 / 0.3 is the largest n / p)
    edges = np.concatenate([[0], np.cumsum(sizes)])
    seen = [Counter() for _ in sizes]
    for epoch in range(3):
        s.set_epoch(epoch)
        got = np.array(list(s))
        once = Counter(got[(got >= edges[1]) & (got < edges[2])].tolist())
        assert len(once) == sizes[1] and set(once.values()) == {1}  # the binding component: each row once
        for c in range(3):
            seen[c].update((got[(got >= edges[c]) & (got < edges[c + 1])] - edges[c]).tolist())
        for c in range(3):
            drawn = (epoch + 1) * s.epoch_draws[c]
            counts = [seen[c][r] for r in range(sizes[c])]
            # floor or ceil of draws / rows: no row twice before every row once
            assert set(counts) <= {drawn // sizes[c], -(-drawn // sizes[c])}, (epoch, c)


# ---------------------------------------------------------------- determinism, resume, ranks


def test_the_order_is_a_function_of_seed_and_epoch():
    def run(seed, epoch, **kw):
        s = MixtureSampler((1000, 700), (0.5, 0.5), seed=seed, **kw)
        s.set_epoch(epoch)
        return list(s)

    a = run(3, 1)
    assert a == run(3, 1)
    for other in (run(4, 1), run(3, 2), run(3, 0)):
        assert sum(x == y for x, y in zip(a, other)) < 20  # unrelated orders agree in a few positions at most
    s = MixtureSampler((1000, 700), (0.5, 0.5), seed=3)
    s.set_epoch(1)
    assert [s.index_at(p) for p in range(0, len(a), 11)] == a[::11]
    assert [s.component_at(p) for p in range(0, len(a), 37)] == [int(a[p] >= 1000) for p in range(0, len(a), 37)]


def test_orders_are_pinned():
    """A change of algorithm, key derivation or arithmetic changes these: it would silently reorder resumed runs."""
    s = MixtureSampler((4639, 6002), (0.7, 0.3), by="tokens", tokens_per_row=(128.0, 77.8), seed=0)
    assert list(islice(s, 12)) == PINNED_TOKENS
    s = MixtureSampler((10**9, 10**6, 5), (1, 2, 0), seed=7, rank=1, world_size=4)
    s.set_epoch(3)
    assert list(islice(s, 12)) == PINNED_LARGE


PINNED_TOKENS = [542, 4575, 10204, 2121, 1548, 9862, 8449, 6766, 7001, 1649, 4379, 1490]
PINNED_LARGE = [1000802762, 1000084910, 720004861, 307409729, 178310477, 240261113, 1000843170, 1000187043,
                1000524703, 1000692584, 934642972, 1000026252]


@pytest.mark.parametrize("world_size", [1, 3])
def test_resume_at_any_cut_equals_an_uninterrupted_run(world_size):
    settings = dict(sizes=(1000, 700, 300), weights=(0.5, 0.3, 0.2), by="tokens", tokens_per_row=(128.0, 40.5, 90.0),
                    seed=11, world_size=world_size, drop_last=False)
    for rank in range(world_size):
        s = MixtureSampler(**settings, rank=rank)
        epochs = []
        for epoch in range(2):
            s.set_epoch(epoch)
            epochs.append(list(s))
        n = len(epochs[0])
        for epoch, cut in [(0, 0), (0, 1), (0, BLOCK - 1), (0, BLOCK), (0, 1000 // world_size), (0, n - 1), (0, n),
                           (1, 0), (1, 517 // world_size)]:
            first = MixtureSampler(**settings, rank=rank)
            first.set_epoch(epoch)
            assert list(islice(iter(first), cut)) == epochs[epoch][:cut]
            state = json.loads(json.dumps(first.state_dict()))
            fresh = MixtureSampler(**settings, rank=rank)
            fresh.load_state_dict(state)
            fresh.set_epoch(epoch)  # what a training loop does after loading: keeps the position
            assert list(fresh) == epochs[epoch][cut:]  # empty when the saved run had finished the epoch
            fresh.set_epoch(epoch + 1)  # across the epoch boundary
            if epoch + 1 < len(epochs):
                assert list(fresh) == epochs[epoch + 1]


def test_a_state_from_other_settings_is_refused():
    base = dict(sizes=(100, 50), weights=(0.5, 0.5), seed=1)
    state = MixtureSampler(**base).state_dict()
    assert json.loads(json.dumps(state)) == state
    for field, value in [("weights", [0.6, 0.4]), ("sizes", [100, 51]), ("seed", 2), ("by", "tokens"),
                         ("num_samples", 10), ("world_size", 2), ("drop_last", 1), ("version", 2), ("taken", 10**6)]:
        bad = dict(state, **{field: value})
        with pytest.raises(ValueError, match=field):
            MixtureSampler(**base).load_state_dict(bad)


def test_a_state_holds_every_setting_by_name():
    s = MixtureSampler((4639, 6002), (0.7, 0.3), by="tokens", tokens_per_row=(128.0, 77.8), seed=5, rank=1,
                       world_size=2)
    assert s.state_dict() == {"version": 1, "sizes": [4639, 6002], "weights": [0.7, 0.3], "by": "tokens",
                              "tokens_per_row": [128.0, 77.8], "num_samples": None, "seed": 5, "rank": 1,
                              "world_size": 2, "drop_last": True, "epoch": 0, "taken": 0}
    for field, value in [("tokens_per_row", [128.0, 77.9]), ("rank", 0)]:
        with pytest.raises(ValueError, match=rf"^sampler state has {field}=.*, this sampler has {field}="):
            s.load_state_dict(dict(s.state_dict(), **{field: value}))
    assert repr(s) == ("MixtureSampler(by='tokens', sizes=[4639, 6002], sample shares [0.5865, 0.4135], epoch of "
                       "14514, rank 1 of 2)")
    assert repr(MixtureSampler((10, 20), (3, 1))) == ("MixtureSampler(by='samples', sizes=[10, 20], sample shares "
                                                      "[0.75, 0.25], epoch of 79, rank 0 of 1)")


def test_ranks_drop_the_last_positions_by_default():
    s = MixtureSampler((10, 7), (1, 1), world_size=3)  # an epoch of 19 positions
    assert s.epoch_length == 19 and len(s) == 6 and len(list(s)) == 6
    assert len(MixtureSampler((10, 7), (1, 1), world_size=3, rank=0, drop_last=False)) == 7
    # More ranks than positions, keeping them all: ranks 0 and 1 take one each, ranks 2 and 3 none.
    two = [MixtureSampler((1, 1), (1, 1), world_size=4, rank=r, drop_last=False) for r in range(4)]
    assert [len(s) for s in two] == [1, 1, 0, 0] and sorted(i for s in two for i in s) == [0, 1]


@pytest.mark.parametrize("world_size", [1, 2, 3, 8])
@pytest.mark.parametrize("drop_last", [True, False])
def test_ranks_take_disjoint_positions_that_cover_the_epoch(world_size, drop_last):
    sizes, weights = (600, 400), (0.5, 0.5)
    shares = []
    for rank in range(world_size):
        s = MixtureSampler(sizes, weights, seed=4, rank=rank, world_size=world_size, drop_last=drop_last)
        s.set_epoch(1)
        mine = list(s)
        assert len(mine) == len(s)
        # positions r, r + w, ... of the shared order
        assert mine[::13] == [s.index_at(rank + k * world_size) for k in range(0, len(mine), 13)]
        shares.append(mine)
        # Each rank's share of the components is the weight's: the blocks' shuffle keeps the schedule's
        # period from aliasing with the ranks' stride (without it, rank 0 of 2 would draw component 0 only).
        # 5 sd of a draw without replacement from balanced blocks.
        first = np.mean(np.array(mine) < sizes[0])
        assert abs(first - 0.5) < 5 * 0.5 / math.sqrt(len(mine)), (rank, first)
    whole = MixtureSampler(sizes, weights, seed=4)
    whole.set_epoch(1)
    order = list(whole)
    used = len(order) - len(order) % world_size if drop_last else len(order)
    positions = sorted(r + k * world_size for r in range(world_size) for k in range(len(shares[r])))
    assert positions == list(range(used))  # disjoint and covering
    assert sorted(i for share in shares for i in share) == sorted(order[:used])


# ---------------------------------------------------------------- refusals


def _h5(directory: Path, rows: np.ndarray) -> str:
    directory.mkdir()
    with h5py.File(directory / "x_00000.h5", "w") as f:
        f.create_dataset("data", data=rows)
        f.attrs["n_examples"] = len(rows)
    return str(directory)


def test_components_that_differ_are_refused(outputs, tmp_path):
    web = str(outputs["web"][0])
    short = _h5(tmp_path / "msl64", np.ones((4, 3, 64), np.int32))
    with pytest.raises(ValueError, match=r"one shape and features: 'web' has rows of \[3, 128\].*'short' has "
                                         r"\[3, 64\]"):
        H5MixtureDataset({"web": (web, 1), "short": (short, 1)})
    vsl = _h5(tmp_path / "vsl", np.ones((4, 5, 128), np.int32))
    with pytest.raises(ValueError, match="position_ids"):
        H5MixtureDataset({"web": (web, 1), "vsl": (vsl, 0)})  # a weight of 0 still joins the index: refused too
    inverted = tmp_path / "inverted"
    shutil.copytree(web, inverted)
    params = json.loads((inverted / "data_params.json").read_text())
    params["dataset"]["inverted_mask"] = True
    (inverted / "data_params.json").write_text(json.dumps(params))
    with pytest.raises(ValueError, match="mark the loss the same way: 'web' has a mask of 1 where trained, "
                                         "'inv' has an inverted mask"):
        H5MixtureDataset({"web": (web, 1), "inv": (str(inverted), 1)})
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="'none' .* has weight 1.0 but no rows"):
        H5MixtureDataset({"web": (web, 1), "none": (str(empty), 1)})
    assert len(H5MixtureDataset({"web": (web, 1), "none": (str(empty), 0)})) == len(H5MapDataset(web))


@pytest.mark.parametrize("components, message", [
    ({"a": ("x", -1)}, "'a': weight must be a finite number >= 0, got -1"),
    ({"a": ("x", float("nan"))}, "weight must be a finite number >= 0, got nan"),
    ({"a": ("x", float("inf"))}, "weight must be a finite number >= 0, got inf"),
    ({"a": ("x", "0.5")}, "weight must be a finite number >= 0, got '0.5'"),
    ({"a": ("x", True)}, "weight must be a finite number >= 0, got True"),
    ({"a": ("x", 0), "b": ("y", 0.0)}, r"at least one mixture weight must be > 0, got \[0.0, 0.0\]"),
    ({}, "at least one component"),
    ([("x", 1), ("x", 2)], "'x' is given twice"),
    ({"a": "x"}, "expected \\(out_dir, weight\\)"),
    ([{"data_dir": "x", "weight": 1, "data_subset": "0-0.5"}], "data_dir and weight only, not \\['data_subset'\\]"),
    ("x", "a mixture is"),
])
def test_bad_mixtures_are_refused(components, message):
    with pytest.raises(ValueError, match=message):
        H5MixtureDataset(components)


def test_a_bad_by_is_refused(outputs):
    with pytest.raises(ValueError, match="by must be 'samples' or 'tokens', got 'bytes'"):
        H5MixtureDataset({"web": (str(outputs["web"][0]), 1)}, by="bytes")
    # Cerebras' list form reads the same as ours.
    ds = H5MixtureDataset([{"data_dir": str(outputs["web"][0]), "weight": 2}])
    assert ds.names == (str(outputs["web"][0]),) and ds.weights == (2.0,)


@pytest.mark.parametrize("kwargs, message", [
    (dict(sizes=(10, 10), weights=(1,)), "1 weights for 2 components"),
    (dict(sizes=(10, 10), weights=(1, -1)), r"weights\[1\] must be finite and >= 0, got -1"),
    (dict(sizes=(10, 10), weights=(0, 0)), "at least one weight must be > 0"),
    (dict(sizes=(10, 0), weights=(1, 1)), "component 1 has weight 1.0 but no rows"),
    (dict(sizes=(10, -1), weights=(1, 0)), r"sizes\[1\] must be >= 0"),
    (dict(sizes=(10, 10), weights=(1, 1), by="tokens"), "by='tokens' needs tokens_per_row"),
    (dict(sizes=(10, 10), weights=(1, 1), by="tokens", tokens_per_row=(5.0, 0.0)),
     "component 1 has weight 1.0 but tokens_per_row 0.0"),
    (dict(sizes=(10, 10), weights=(1, 1), tokens_per_row=(5.0, 1.0)), "used only with by='tokens'"),
    (dict(sizes=(10, 10), weights=(1, 1), by="rows"), "by must be"),
    (dict(sizes=(10, 10), weights=(1, 1), rank=2, world_size=2), "rank must be in"),
    (dict(sizes=(10, 10), weights=(1, 1), num_samples=-1), "num_samples must be in"),
    (dict(sizes=(10, 10), weights=(1, 1e-12)), "below 2\\*\\*-31"),
    (dict(sizes=(10.0,), weights=(1,)), r"sizes\[0\] must be an int"),
])
def test_bad_sampler_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MixtureSampler(**kwargs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(sizes="ab", weights=(1,)), "sizes must be a sequence of ints, got 'ab'"),
    (dict(sizes=5, weights=(1,)), "sizes must be a sequence of ints, got 5"),
    (dict(sizes=(10,), weights="ab"), "weights must be a sequence of numbers, got 'ab'"),
    (dict(sizes=(10,), weights=5), "weights must be a sequence of numbers, got 5"),
    (dict(sizes=(10, 10), weights=(1, True)), r"weights\[1\] must be a number, got True"),
    (dict(sizes=(), weights=()), "a mixture needs at least one component"),
    (dict(sizes=(10,), weights=(1,), seed="x"), "seed must be an int, got 'x'"),
    (dict(sizes=(10,), weights=(1,), rank="x"), "rank must be an int, got 'x'"),
    (dict(sizes=(10,), weights=(1,), world_size="x"), "world_size must be an int, got 'x'"),
    (dict(sizes=(10,), weights=(1,), world_size=0), "world_size must be >= 1, got 0"),
    (dict(sizes=(10,), weights=(1,), num_samples="x"), "num_samples must be an int, got 'x'"),
    (dict(sizes=(10, 10), weights=(1, 1), by="tokens", tokens_per_row=(1, "x")),
     r"tokens_per_row\[1\] must be a number, got 'x'"),
    (dict(sizes=(10, 10), weights=(1, 1), by="tokens", tokens_per_row=(1.0,)),
     "tokens_per_row has 1 values for 2 components"),
    (dict(sizes=(10, 10), weights=(1, 1), by="tokens", tokens_per_row=(5.0, 0.0)),
     "component 1 has weight 1.0 but tokens_per_row 0.0: its rows carry no loss-valid tokens, so no number of them "
     "reaches a share of the tokens"),
    (dict(sizes=(10, 10), weights=(1, 1), by="tokens"),
     "by='tokens' needs tokens_per_row: each component's mean loss-valid tokens per row"),
    (dict(sizes=(10, 10), weights=(1, 1), tokens_per_row=(5.0, 1.0)), "tokens_per_row is used only with by='tokens'"),
    (dict(sizes=(10, 10), weights=(1000, 1e-9)),
     r"component 1's share 1e-12 is below 2\*\*-31: too small to schedule"),
])
def test_sampler_refusals_say_exactly_what_is_wrong(kwargs, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        MixtureSampler(**kwargs)


def test_shares_and_positions_are_checked_by_name():
    assert sample_shares([3, 1]) == (0.75, 0.25)
    assert sample_shares([1, 1], tokens_per_row=[128, 32]) == (0.2, 0.8)
    for call, message in [(lambda: sample_shares(["a"]), r"weights\[0\] must be a number, got 'a'"),
                          (lambda: sample_shares([1], tokens_per_row=["x"]),
                           r"tokens_per_row\[0\] must be a number, got 'x'"),
                          (lambda: sample_shares([1, 1], tokens_per_row=[1.0]),
                           "tokens_per_row has 1 values for 2 components")]:
        with pytest.raises(ValueError, match=f"^{message}$"):
            call()
    s = MixtureSampler((10, 10), (1, 1))  # an epoch of 20 positions
    for at in (s.index_at, s.component_at, s.draws_before):
        with pytest.raises(ValueError, match="^position must be an int, got 'x'$"):
            at("x")
        with pytest.raises(ValueError, match=r"^position must be in \[0, 20[)\]], got 21$"):
            at(21)
    for at in (s.index_at, s.component_at):  # the end itself is no position (draws_before it is the whole epoch)
        with pytest.raises(ValueError, match=r"^position must be in \[0, 20\), got 20$"):
            at(20)
    assert s.draws_before(20) == s.epoch_draws == (10, 10)


# ---------------------------------------------------------------- copies in other processes, memory


def test_copies_in_workers_read_and_continue_the_same(outputs):
    ds = _mixture(outputs, by="tokens")
    first = ds[len(ds) - 5]
    again = pickle.loads(pickle.dumps(ds))  # as a spawned DataLoader worker gets it
    assert not any(c._open for c in again.components) and again.tokens_per_row == ds.tokens_per_row
    assert all(np.array_equal(first[k], v) for k, v in again[len(ds) - 5].items())
    sampler = ds.sampler(seed=1, rank=1, world_size=2)
    head = list(islice(iter(sampler), 300))
    copy = pickle.loads(pickle.dumps(sampler))  # mid-epoch: the copy continues where the original stands
    rest = list(copy)
    assert len(head) + len(rest) == len(sampler) and rest == list(sampler)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child reads through handles of its own, never the parent's
        try:
            got = ds[len(ds) - 5]
            ok = all(np.array_equal(first[k], v) for k, v in got.items()) and ds.components[1]._pid == os.getpid()
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"
    ds.close()


def test_memory_does_not_grow_with_rows():
    tracemalloc.start()
    try:
        s = MixtureSampler((10**12, 10**11, 3 * 10**9), (0.5, 0.3, 0.2), by="tokens",
                           tokens_per_row=(2048.0, 300.0, 900.0), seed=1, rank=3, world_size=8)
        s.set_epoch(2)
        got = list(islice(s, 5000))
        s.load_state_dict(s.state_dict())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert s.epoch_length > 10**12 and len(set(got)) == 5000
    assert peak < 4 * 2**20  # a batch of positions and its ints; a permutation of the rows would be terabytes
