"""The steps whose size depends on the corpus, driven at the 500 B-token scale on one machine: `make scale-sim`.

What cannot run here (a 2 TB Dataflow job) is simulated with the real code
and synthetic sizes: 500 B GPT-2 tokens at msl 2048 are ~244 M rows, packed
in ~30 000 groups (20 000 input files of ~100 MB of .jsonl.zst, a third of
them two groups), written as ~4 900 files of 50 000 rows, shuffled. Every
step that meets all groups, files or sources on one worker runs here in a
fresh process, which reports its time and its peak resident memory
(interpreter included), at 1/100, 1/10 and full scale, so growth is visible:

- metas:     the (sort key, name, rows) triples of every group gathered (the layout's input)
- layout:    Layout.create: range counts recomputed from the triples (O(rows) time, O(groups + ranges) memory),
             and the size of the pickled layout every worker reads as a side input
- route:     groups routed to the files they reach (a sample of 2 000; per group, what a worker does,
             and the total over all workers: shuffled, a group reaches nearly every file)
- positions: one writer's candidates ordered (FileRows on the pieces of one file; chunks are 1 byte
             stand-ins: the real ones, ~135 MB per file of 50 000 rows at msl 2048, come on top)
- stats:     every group's statistics merged (MergeStats), 20 000 sources
- params:    data_params.json built from the merged statistics and every file's result
- manifest:  the input list written and read back by a worker
- graph:     the Dataflow job graph of a job over every input file (dry run)

Deduplication (issue #46, `--dedup near`) of a 2 TB job of 1 B documents (at a fraction of it: fewer
documents and a smaller largest duplicate group), with a stated duplicate distribution (DUP_SHARE, ZIPF,
EXACT_SHARE below):

- dedup_shuffle: the stage's own functions run in memory on real documents (GPT-2 ids of the bench corpus) and
                 on near-duplicate chains planted on them; every element that crosses a shuffle encoded with the
                 coders Beam gives the stage, its mean size times its count at scale: bytes per shuffle and in
                 total, against the text; CPU-hours (MinHash timed per MB of text, coding, the steps' Python)
- dedup_rounds:  star rounds (star_round) to their fixed point on the largest component and on a sample of the
                 distribution shaped as LSH bucket stars in chains: the rounds needed, at most ROUNDS
- dedup_family:  GroupExact's largest group (the largest exact family, as decoded from the shuffle), then _family
- dedup_bucket:  GroupBuckets' largest group (a bucket of the largest component's heads), then bucket_edges
- dedup_join:    GroupHeads' largest group (its head's and every member's signature), then _verify
- dedup_star:    a star round's largest group (the largest component's root and its neighbours), then large_star

The last line is for scripts:

    scale_sim: rows=N groups=G files=F peak_mb=M seconds=S [dedup_peak_mb=M dedup_seconds=S dedup_shuffle_tb=T
               dedup_cpu_h=H dedup_rounds=R]

for the full scale: the largest peak of any step, and the sum of the steps' times (the dedup steps' apart,
when they ran; their fields only when the steps that give them ran).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FULL = dict(tokens=500e9, msl=2048, groups=30_000, input_files=20_000, files_per_record=50_000)
SOURCES_PER_GROUP_COUNTERS = 6  # counters per source in a group's Stats (read, good, used, tokens, ...)


def _scaled(scale: float) -> dict:
    rows = int(FULL["tokens"] / FULL["msl"] * scale)
    groups = max(2, int(FULL["groups"] * scale))
    files = max(1, int(FULL["input_files"] * scale))
    return dict(rows=rows, groups=groups, input_files=files, files_per_record=FULL["files_per_record"], scale=scale)


def _group_rows(s: dict) -> np.ndarray:
    """Rows per group: uneven (a file's last slice is shorter), summing to the total."""
    rng = np.random.default_rng(0)
    weights = rng.uniform(0.3, 1.0, s["groups"])
    rows = np.floor(weights / weights.sum() * s["rows"]).astype(np.int64)
    rows[: s["rows"] - int(rows.sum())] += 1
    return rows


def _metas(s: dict) -> list:
    rows = _group_rows(s)
    metas, g = [], 0
    for f in range(s["input_files"]):
        slices = 1 + (f < s["groups"] - s["input_files"])  # the first files hold two groups
        for k in range(slices):
            if g < len(rows):
                metas.append(((f, k), f"corpus/part-{f:06d}.jsonl.zst#{k}", int(rows[g])))
                g += 1
    return metas


def _layout(s: dict, metas: list):
    from transforms.core.sharding import Layout

    return Layout.create(metas, shuffle_seed=0, files_per_record=s["files_per_record"], num_output_files=None)


# ---------------------------------------------------------------- steps (each returns notes to print)


def step_metas(s: dict) -> str:
    from apache_beam.transforms.combiners import ToListCombineFn

    metas = _metas(s)
    fn = ToListCombineFn()
    bundles = [metas[i:i + 64] for i in range(0, len(metas), 64)]  # partial lists from many bundles
    accumulators = []
    for bundle in bundles:
        acc = fn.create_accumulator()
        for m in bundle:
            acc = fn.add_input(acc, m)
        accumulators.append(pickle.loads(pickle.dumps(acc)))  # as they cross to the merging worker
    merged = fn.extract_output(fn.merge_accumulators(accumulators))
    assert len(merged) == len(metas)
    return f"{len(merged)} triples, {len(pickle.dumps(merged)) / 2**20:.1f} MB pickled"


def step_layout(s: dict) -> str:
    metas = _metas(s)
    layout = _layout(s, metas)
    assert layout.files.total == s["rows"]
    return (f"{layout.files.num_files} files, 2^{layout.range_bits} key ranges, "
            f"side input {len(pickle.dumps(layout)) / 2**20:.1f} MB")


ROUTE_SAMPLE = 2000  # groups routed by the route step; the rest is extrapolated


def step_route(s: dict) -> str:
    layout = _layout(s, _metas(s))
    sample = np.unique(np.linspace(0, layout.num_groups - 1, min(ROUTE_SAMPLE, layout.num_groups)).astype(int))
    pieces, started = 0, time.perf_counter()
    for g in sample.tolist():
        pieces += len(layout.route(g))
    per_group = (time.perf_counter() - started) / len(sample)
    total_pieces = pieces / len(sample) * layout.num_groups
    return (f"{per_group * 1000:.1f} ms per group ({len(sample)} routed): {per_group * layout.num_groups:.1f} "
            f"CPU-s over all workers; {total_pieces / 1e6:.1f} M pieces into GroupByFile")


def _file_pieces(layout, file_index: int) -> list:
    """The pieces one writer receives: every row whose key range overlaps the file, as route sends them.

    Found with one vectorized pass over all rows' keys instead of routing
    every group (the route step times that); 1-byte stand-ins for the chunks.
    """
    from transforms.core.encoded import EncodedRows
    from transforms.core.sharding import _keys
    from transforms.io.hdf5_sink import _inline_piece

    lo, hi = layout.files.starts[file_index], layout.files.starts[file_index + 1]
    first = int(np.searchsorted(layout.range_starts, lo, side="right")) - 1
    last = int(np.searchsorted(layout.range_starts, hi - 1, side="right")) - 1
    counts = np.diff(layout.group_starts)
    pieces = []
    for g in range(layout.num_groups):
        rows = np.arange(counts[g])
        r = layout._ranges(_keys(layout.group_seeds[g], rows))
        mine = rows[(r >= first) & (r <= last)]
        if len(mine):
            stand_in = EncodedRows(np.zeros(len(mine), np.uint8), np.arange(len(mine) + 1, dtype=np.int64))
            pieces.append(_inline_piece(g, mine, stand_in))
    return pieces


def step_positions(s: dict) -> str:
    from transforms.io.hdf5_sink import FileRows

    layout = _layout(s, _metas(s))
    index = layout.files.num_files // 2
    pieces = _file_pieces(layout, index)
    started = time.perf_counter()
    rows = FileRows(pieces, layout, index)
    assert len(rows) == layout.files.size(index)
    batch = rows.batch(0, min(1024, len(rows)))
    assert len(batch) == min(1024, len(rows))
    seconds = time.perf_counter() - started
    candidates = sum(len(p[1]) // 4 for p in pieces)
    return f"file {index}: {len(pieces)} pieces, {candidates} candidate rows, ordered in {seconds:.2f}s"


def _group_stats(g: int, source: str):
    from transforms.core.stats import Stats

    stats = Stats()
    for name in ("docs_read", "docs_good", "docs_used", "tokens", "h5.num_sequences", "h5.num_tokens")[
            :SOURCES_PER_GROUP_COUNTERS]:
        stats.add(name, 1000 + g, source)
    return stats


def step_stats(s: dict) -> str:
    from transforms.stages.manifest import MergeStats

    metas = _metas(s)
    fn = MergeStats()
    accumulators = []
    for i in range(0, len(metas), 64):  # lifted: partial sums per bundle, then one merge
        acc = fn.create_accumulator()
        for (f, _), name, _ in metas[i:i + 64]:
            acc = fn.add_input(acc, _group_stats(f, name.split("#")[0]))
        accumulators.append(pickle.loads(pickle.dumps(acc)))
    merged = fn.extract_output(fn.merge_accumulators(accumulators))
    return f"{len(merged.sources)} sources, {len(pickle.dumps(merged)) / 2**20:.1f} MB pickled"


def step_params(s: dict) -> str:
    import json

    from transforms.core.stats import Stats
    from transforms.io.hdf5_sink import ShardResult
    from transforms.io.manifest import build_params

    layout = _layout(s, _metas(s))
    shards = [ShardResult(i, f"examples_{i:05d}.h5", layout.files.size(i), {"write": 1.0})
              for i in range(layout.files.num_files)]
    stats = Stats()
    per_file = s["rows"] // s["input_files"]
    for f in range(s["input_files"]):
        source = f"gs://bucket/corpus/part-{f:06d}.jsonl.zst"
        for name, value in (("docs_read", 500), ("docs_good", 500), ("docs_used", 500)):
            stats.add(name, value, source)
    stats.add("h5.num_sequences", per_file * s["input_files"] + s["rows"] % s["input_files"])
    sections = {"setup": {}, "processing": {}, "dataset": {}}
    params = build_params(shards, stats, sections, eos_id=0, pad_id=0, vocab_size=50257, extra={})
    return f"data_params.json {len(json.dumps(params, indent=4)) / 2**20:.1f} MB"


def step_manifest(s: dict) -> str:
    from transforms.core.records import InputFile
    from transforms.io.read_corpus import read_input_manifest, write_input_manifest

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "inputs.jsonl")
        files = [InputFile(i, f"gs://bucket/corpus/part-{i:06d}.jsonl.zst", f"corpus/part-{i:06d}.jsonl.zst",
                           100 << 20) for i in range(s["input_files"])]
        write_input_manifest(path, files)
        size = os.path.getsize(path)
        assert sum(1 for _ in read_input_manifest(path)) == len(files)
    return f"{len(files)} files, {size / 2**20:.1f} MB"


def step_graph(s: dict) -> str:
    try:
        import apache_beam.runners.dataflow.internal.apiclient  # noqa: F401 - the [gcp] extra
    except ImportError:
        return "skipped: apache-beam[gcp] is not installed"
    from pipelines.config import load_config
    from pipelines.job import launch

    gpt2 = ROOT / "data" / "tokenizers" / "gpt2"
    with tempfile.TemporaryDirectory() as tmp:
        listing = os.path.join(tmp, "inputs.txt")
        with open(listing, "w") as f:
            f.writelines(f"gs://bucket/corpus/part-{i:06d}.jsonl.zst\n" for i in range(s["input_files"]))
        config, beam_args = load_config([
            "LMData", "--metadata_files", listing, "--output_dir", os.path.join(tmp, "out"),
            "--tokenizer_type", "GPT2Tokenizer", "--vocab_file", str(gpt2 / "vocab.bpe"),
            "--encoder_file", str(gpt2 / "encoder.json"), "--shuffle", "True",
            "--runner", "DataflowRunner", "--dry_run", "True", "--no_auth", "--project", "my-project",
            "--region", "us-central1", "--temp_location", "gs://my-bucket/tmp",
            "--sdk_container_image", "us-central1-docker.pkg.dev/my-project/beam/create-hdf5-dataset:sim"])
        import contextlib
        import io

        with contextlib.redirect_stderr(io.StringIO()):
            launched = launch(config, beam_args)
        size = len(launched.result.job.proto_pipeline.SerializeToString())
    return f"job graph {size / 2**10:.0f} KB for {s['input_files']} input files (Dataflow's limit: 10 MB)"


# ---------------------------------------------------------------- deduplication (issue #46), --dedup near
#
# A 2 TB job of 1 B documents (2 000 bytes of text each, ~700 B GPT-2 tokens) in 20 000 input files. Its
# duplicates, assumed (the stated distribution, see DUP_SHARE, ZIPF, EXACT_SHARE): 30 % of the documents lie in
# duplicate groups (connected components of size >= 2), the number of components of size k falls as k^-2 for
# 2 <= k <= the largest, 1 M documents, and 40 % of the records removed are exact copies. At a fraction of the
# job the documents, files and the largest component shrink with it. The groups a worker holds and the rounds'
# largest component are taken at the largest size in nodes of the near graph (1 M; its 1 M records hold ~600 k
# exact families): an upper bound.

DEDUP_FULL = dict(documents=1e9, text_bytes=2e12, input_files=20_000, largest=1_000_000)
DUP_SHARE = 0.30  # documents in a duplicate component of size >= 2 (Fetterly et al. 2003: 29.2 % of web pages)
ZIPF = 2.0  # components of size k: proportional to k ** -ZIPF, up to the largest (a power law, as Fetterly et al.
# found; the exponent is assumed: at 2 every decade of sizes holds as many documents, the tail is heavy)
EXACT_SHARE = 0.40  # of the removed records, exact copies (issue #46: "up to ~40 % of a web crawl's duplicates")
DOCS_PER_FILE = 50_000  # a record's index in its file ranges over this (100 MB of text per file)
DEDUP_CORPUS = ROOT.parent / "shared" / "corpora" / "bench" / "en_natural.jsonl.zst"
DEDUP_SAMPLE = 600  # real documents fingerprinted, coded and timed
PLANTED = dict(clusters=40, versions=8, edit=0.01, copies=5)  # near-duplicate chains planted on real documents
COMPONENT_SAMPLE = 3000  # components drawn from the distribution for the rounds
PATH = 200_000  # the longest bare path whose rounds are counted too (the worst shape, for the margin)
LINK = 10  # members of each of two consecutive versions in the bucket that links them (rounds' shape)
GPT2_EOS = 50256


def _dedup_scaled(s: dict) -> dict:
    f = s["scale"]
    return dict(documents=DEDUP_FULL["documents"] * f, text_bytes=DEDUP_FULL["text_bytes"] * f,
                input_files=max(1, int(DEDUP_FULL["input_files"] * f)),
                largest=max(1000, int(DEDUP_FULL["largest"] * f)))


def _distribution(d: dict) -> dict:
    """Expected counts of the duplicate distribution: components by size, the records the stage meets."""
    k = np.arange(2, d["largest"] + 1, dtype=np.float64)
    w = k ** -ZIPF
    docs_in = DUP_SHARE * d["documents"]
    n = w * (docs_in / (k * w).sum())  # expected components of each size
    components = float(n.sum())
    removed = docs_in - components
    exact = EXACT_SHARE * removed  # exact copies (their family's head stays in the near graph)
    near_nodes = docs_in - exact  # the near graph's nodes: family heads of the duplicate components
    return dict(k=k, n=n, docs_in=docs_in, components=components, removed=removed, exact=exact,
                families=d["documents"] - exact, near_nodes=near_nodes, labels=near_nodes - components,
                over_100k=float(n[k >= 100_000].sum()))


def _near_count(k):
    """Near-graph nodes (exact families) of a component of k records."""
    return np.maximum(1, k - np.round(EXACT_SHARE * (k - 1))).astype(np.int64)


def _sample_texts(limit: int) -> list:
    import io
    import json

    import zstandard

    texts = []
    with open(DEDUP_CORPUS, "rb") as f:
        for line in io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(f), encoding="utf-8"):
            texts.append(json.loads(line)["text"])
            if len(texts) == limit:
                break
    return texts


def _gpt2_ids(texts: list) -> list:
    from tokenizers import ByteLevelBPETokenizer

    gpt2 = ROOT / "data" / "tokenizers" / "gpt2"
    tok = ByteLevelBPETokenizer(str(gpt2 / "encoder.json"), str(gpt2 / "vocab.bpe"))
    return [np.array(e.ids + [GPT2_EOS], dtype=np.int32) for e in tok.encode_batch(texts)]


def _relpath(f: int) -> str:
    return f"crawl/CC-MAIN-2024-10/part-{f:05d}.jsonl.zst"


def _random_node(rng, files: int) -> tuple:
    """A node as node_of makes it, of a record of a random file, packing group and line."""
    from transforms.core.dedup import node_of
    from transforms.core.records import GroupId

    f = int(rng.integers(files))
    group = GroupId(f, int(rng.integers(0, 4)), "gs://bucket/" + _relpath(f), _relpath(f))
    return node_of(group, "", int(rng.integers(DOCS_PER_FILE)))


def _smallest_node() -> tuple:
    """A node of this job smaller than every _random_node: a bucket's head, a component's root."""
    from transforms.core.dedup import node_of
    from transforms.core.records import GroupId

    return node_of(GroupId(0, 0, "", ""), "", 0)


def _kv_coder():
    """What a GroupByKey of untyped pairs encodes: the deterministic coder of Any for keys, Any's for values."""
    from apache_beam import coders, typehints

    value = coders.registry.get_coder(typehints.Any)
    return coders.TupleCoder([value.as_deterministic_coder("dedup"), value]), value


def _group(pairs) -> list:
    out: dict = {}
    for k, v in pairs:
        out.setdefault(k, []).append(v)
    return list(out.items())


def _cogroup(**tagged) -> tuple[list, list]:
    """CoGroupByKey in memory, as Beam does it: (key, (tag, value)) through one shuffle, then lists per tag."""
    wire, out = [], {}
    for tag, pairs in tagged.items():
        for k, v in pairs:
            wire.append((k, (tag, v)))
            out.setdefault(k, {t: [] for t in tagged})[tag].append(v)
    return list(out.items()), wire


def _planted_batches(ids: list, rng, files: int):
    """TokenBatches as the tokenizer makes them (flat stream, per-record views, origins) of the sample and of
    PLANTED chains: each version a copy of the one before with a share of its tokens replaced, and exact
    copies of random versions; the documents shuffled over batches of random files."""
    from transforms.core.records import GroupId, Origins, TokenBatch

    docs = list(ids)
    bases = [a for a in ids if len(a) >= 200][:PLANTED["clusters"]]
    for c, base in enumerate(bases):
        version = base.copy()
        versions = [version]
        for _ in range(PLANTED["versions"] - 1):
            version = version.copy()
            at = rng.choice(len(version) - 1, max(1, int(PLANTED["edit"] * len(version))), replace=False)
            version[at] = rng.integers(0, GPT2_EOS, len(at))
            versions.append(version)
        for j in rng.integers(0, len(versions), PLANTED["copies"]).tolist():
            versions.append(versions[j].copy())
        docs += versions[1:]  # the first version is the sample's own document
    order = rng.permutation(len(docs))
    batches = []
    for start in range(0, len(order), 32):
        chunk = [docs[i] for i in order[start:start + 32]]
        f = int(rng.integers(files))
        flat = np.concatenate(chunk).astype(np.int32)
        ends = np.cumsum([len(a) for a in chunk]).tolist()
        tokens = [(flat[a:b],) for a, b in zip([0] + ends[:-1], ends)]
        index = np.sort(rng.choice(DOCS_PER_FILE, len(chunk), replace=False)).astype(np.int64)
        group = GroupId(f, int(rng.integers(0, 4)), "gs://bucket/" + _relpath(f), _relpath(f))
        batches.append(TokenBatch(group, tokens, flat=flat, origins=Origins(index)))
    return batches, len(bases) * (PLANTED["versions"] + PLANTED["copies"])


def _mini_stage(batches, cfg):
    """The stage's steps in memory, with its own functions (groupings as dicts): every element that crosses a
    shuffle, by shuffle, and the near graph's edges per round."""
    from apache_beam import pvalue

    from transforms.core import dedup as dd
    from transforms.stages import dedup as st

    import inspect

    from transforms.core.tokenizer.load import GPT2, TokenizerFiles

    gpt2 = ROOT / "data" / "tokenizers" / "gpt2"
    files = TokenizerFiles(GPT2, encoder_json=(gpt2 / "encoder.json").read_text(),
                           merges=(gpt2 / "vocab.bpe").read_text(), name="gpt2")
    needs_files = "tokenizer_files" in inspect.signature(st._Fingerprint.__init__).parameters
    fp = st._Fingerprint(cfg, False, files) if needs_files else st._Fingerprint(cfg, False)
    fp.setup()
    keys, sigs = [], []
    started = time.process_time()
    for batch in batches:
        for out in fp.process(batch):
            (sigs if isinstance(out, pvalue.TaggedOutput) else keys).append(out.value if isinstance(
                out, pvalue.TaggedOutput) else out)
    fingerprint_cpu = time.process_time() - started
    started = time.process_time()
    wire = {"GroupExact": keys}
    bands, copies = [], []
    for item in _group(keys):
        for out in st._family(item):
            (copies if isinstance(out, pvalue.TaggedOutput) else bands).append(
                out.value if isinstance(out, pvalue.TaggedOutput) else out)
    wire["GroupBuckets"] = bands
    pre = [e for kv in _group(bands) for e in dd.bucket_edges(kv[1])]
    asks = [a for e in pre for a in st._asks(e)]
    wire["DistinctAsks"] = [(a, None) for a in asks]
    asks = sorted(set(asks))
    joined, wire["JoinCandidateSignatures"] = _cogroup(sigs=sigs, head=asks)
    sent, candidate = [], []
    for item in joined:
        for out in st._send_signature(item):
            (candidate if isinstance(out, pvalue.TaggedOutput) else sent).append(
                out.value if isinstance(out, pvalue.TaggedOutput) else out)
    wire["GroupHeads"] = sent
    edges = [e for item in _group(sent) for e in st._verify(item, cfg.threshold)]
    verified = len(edges)
    rounds, changed = [], 0
    for r in range(dd.ROUNDS):
        ends = [x for e in edges for x in st._both_ends(e)]
        large = [e for n, nbrs in _group(ends) for e in dd.large_star(n, nbrs)]
        down = [(max(e), min(e)) for e in large]
        after = [e for n, nbrs in _group(down) for e in dd.small_star(n, nbrs)]
        rounds.append((ends, down))
        changed += sorted(set(after)) != sorted(set(edges))
        edges = after
    wire["StarRounds"] = [x for ends, down in rounds for x in ends + down]
    ends = [x for e in edges for x in ((e[0], ("down", e[1])), (e[1], ("up", e[0])))]
    wire["GroupEnds"] = ends
    labels = [x for item in _group(ends) for x in st._labels(item)]
    joined, wire["JoinRemovedSignatures"] = _cogroup(sigs=candidate,
                                                     kept=[a for label in labels for a in st._kept_asks(label)])
    wire["GroupKept"] = [x for item in joined for x in st._kept_signature(item)]
    near = [x for item in _group(wire["GroupKept"]) for x in st._similarity_to_kept(item)]
    joined, wire["JoinFamilies"] = _cogroup(near=near, copies=copies)
    removals = [x for item in joined for x in st._removals(item)]
    # (as the stage's ByBatch and ByFile key them: the batch's (member, index); the record's own file)
    by_batch = [(dd.batch_key_of(r[0]), (r[0][3], r[0][4], r[1])) for r in removals]
    _, wire["JoinBatches"] = _cogroup(batch=[], removed=by_batch)  # the batches themselves: per token, below
    joined, wire["JoinOwnLines"] = _cogroup(units=[], removed=[(r[0][1], r) for r in removals])
    own = [x for item in joined for x in st._own_lines(item)]
    joined, wire["JoinKeptLines"] = _cogroup(units=[], removed=own)
    records = [x for item in joined for x in st._kept_lines(item, None)]
    wire["GroupByFile"] = records
    wire["GroupSizes"] = [(r[2], 1) for r in removals]
    stage_cpu = time.process_time() - started
    return dict(wire=wire, fingerprint_cpu=fingerprint_cpu, stage_cpu=stage_cpu, candidates_pre=len(pre),
                candidates=len(candidate), asks=len(asks), sent=len(sent), verified=verified, changed=changed, removals=removals,
                copies=len(copies), labels=len(labels), families=len(bands) // cfg.bands,
                round_elements=[len(e) + len(d) for e, d in rounds])


def step_dedup_shuffle(s: dict):
    """Coded bytes of every element the stage shuffles, times their counts at 1 B documents; MinHash CPU."""
    from transforms.core.dedup import NEAR, DedupConfig

    d = _dedup_scaled(s)
    dist = _distribution(d)
    rng = np.random.default_rng(0)
    cfg = DedupConfig(NEAR)
    texts = _sample_texts(DEDUP_SAMPLE)
    ids = _gpt2_ids(texts)
    text_bytes = sum(len(t.encode("utf-8")) for t in texts)
    sample_tokens = sum(len(a) for a in ids)
    batches, planted = _planted_batches(ids, rng, DEDUP_FULL["input_files"])
    run = _mini_stage(batches, cfg)
    # MinHash over the sample alone: CPU-s per MB of text (exact key, shingles, signature, bands)
    sample_docs = sum(len(b.tokens) for b in batches)
    mb_sampled = text_bytes / 1e6 * sum(len(b.flat) for b in batches) / sample_tokens
    minhash_s_per_mb = run["fingerprint_cpu"] / mb_sampled

    kv, value = _kv_coder()
    sizes = {}
    for name, elements in run["wire"].items():
        if elements:
            started = time.process_time()
            encoded = [kv.encode(e) for e in elements]
            for b in encoded:
                kv.decode(b)
            sizes[name] = (sum(map(len, encoded)) / len(elements), (time.process_time() - started) / len(elements))
    batch_bytes = sum(len(value.encode(("batch", b))) for b in batches)
    bytes_per_token = batch_bytes / sum(len(b.flat) for b in batches)
    from transforms.stages import dedup as st

    spilled = None  # what crosses JoinBatches per batch when the batches wait in storage (gs:// output, Dataflow)
    if hasattr(st, "_keyed"):
        with tempfile.TemporaryDirectory() as tmp:
            spilled = sum(len(kv.encode(st._keyed(b, tmp))) for b in batches) / len(batches)
    groups = d["text_bytes"] / (64 << 20)  # one batch per 64 MiB packing group

    # counts at scale: per record, per family, per near-graph node (planted ratios), per label, per removal
    near_sample = planted - run["copies"]  # planted nodes of the near graph (families), sample duplicates aside
    per_node = lambda x: x / near_sample * dist["near_nodes"]  # noqa: E731
    docs, tokens = d["documents"], d["text_bytes"] / (text_bytes / sample_tokens)
    counts = {
        "GroupExact": docs,
        "GroupBuckets": dist["families"] * cfg.bands,
        "DistinctAsks": per_node(2 * run["candidates_pre"]),
        "JoinCandidateSignatures": docs + per_node(run["asks"]),
        "GroupHeads": per_node(run["sent"]),
        "StarRounds": per_node(sum(run["round_elements"])),
        "GroupEnds": per_node(len(run["wire"]["GroupEnds"])),
        "JoinRemovedSignatures": per_node(run["candidates"]) + 2 * dist["labels"],
        "GroupKept": dist["labels"] + dist["components"],  # (at most: a component of exact copies asks none)
        "JoinFamilies": dist["labels"] + dist["exact"],
        "JoinBatches": dist["removed"],
        "JoinOwnLines": dist["removed"],
        "JoinKeptLines": dist["removed"],
        "GroupByFile": dist["removed"],
        "GroupSizes": dist["removed"],
    }
    # a CoGroupByKey's elements from its two sides have two sizes: weigh them as the sample's wire has them
    two_sided = {"JoinCandidateSignatures": docs, "JoinRemovedSignatures": per_node(run["candidates"])}
    sig_bearing = {*two_sided, "GroupHeads", "GroupKept"}
    rows, total, cpu_code = [], 0.0, 0.0
    for name, count in counts.items():
        elements = run["wire"][name]
        if name in two_sided:
            sig_side = [e for e in elements if e[1][0] == "sigs"]
            other = [e for e in elements if e[1][0] != "sigs"]
            sig_b = sum(len(kv.encode(e)) for e in sig_side) / len(sig_side)
            other_b = sum(len(kv.encode(e)) for e in other) / max(1, len(other))
            volume = two_sided[name] * sig_b + (count - two_sided[name]) * other_b
            mean = volume / count
        else:
            mean = sizes[name][0]
            volume = count * mean
        if name == "JoinBatches":
            volume += tokens * bytes_per_token if spilled is None else groups * spilled
        cpu_code += count * sizes[name][1]
        rows.append((name, count, mean, volume))
        total += volume
    minhash_cpu = minhash_s_per_mb * d["text_bytes"] / 1e6
    stage_cpu = run["stage_cpu"] / sample_docs * docs  # the steps' own Python, in memory, per record
    lines = [f"{name:<22} {count / 1e6:>10.1f} M x {mean:>6.0f} B = {volume / 1e9:>9.1f} GB"
             for name, count, mean, volume in rows]
    cpu_h = (minhash_cpu + cpu_code + stage_cpu) / 3600
    sig_total = sum(v for n, _, _, v in rows if n in sig_bearing)
    note = (f"defaults: {cfg.shingle}-shingles, {cfg.bands} x {cfg.rows} values, threshold {cfg.threshold}; "
            f"{docs / 1e6:.0f} M docs, {d['text_bytes'] / 1e9:.0f} GB text, {tokens / 1e9:.0f} B tokens; "
            f"{dist['components'] / 1e6:.2f} M components ({dist['over_100k']:.0f} of >= 100 k), "
            f"{dist['removed'] / 1e6:.0f} M removed ({dist['exact'] / 1e6:.0f} M exact); "
            f"sample: {sample_docs} records ({planted} planted), {run['candidates_pre']} candidate pairs "
            f"(of {run['candidates']} records), {run['verified']} verified edges, {run['changed']} rounds changed\n"
            + "\n".join("           " + x for x in lines)
            + f"\n           total {total / 1e12:.2f} TB shuffled = {total / d['text_bytes']:.2f} x the text "
              f"({sig_total / 1e12:.2f} TB of it carrying signatures, all of them in one join, the candidates' in "
              f"three; batches "
              + (f"{bytes_per_token:.2f} B/token" if spilled is None else
                 f"wait in storage, {spilled:.0f} B each crosses: in the runner they would be {bytes_per_token:.2f} "
                 f"B/token, {tokens * bytes_per_token / 1e12:.2f} TB more")
              + "); "
              f"CPU: MinHash {minhash_s_per_mb:.3f} s/MB = {minhash_cpu / 3600:.0f} vCPU-h, coding "
              f"{cpu_code / 3600:.0f} vCPU-h, steps {stage_cpu / 3600:.0f} vCPU-h: {cpu_h:.0f} vCPU-h")
    return note, dict(dedup_shuffle_tb=round(total / 1e12, 2), dedup_cpu_h=round(cpu_h))


def _component_edges(labels: np.ndarray, rng) -> list:
    """One component's verified edges, shaped as the stage makes them: sqrt(n) versions in a chain, each
    version an LSH bucket's star (its members to its smallest), and for each pair of consecutive versions a
    bucket holding LINK members of each (a star to the smallest of them)."""
    n = len(labels)
    if n < 2:
        return []
    versions = np.array_split(labels, max(1, int(round(n ** 0.5))))
    edges = []
    for v in versions:
        head = int(v.min())
        edges += [(int(x), head) for x in v.tolist() if x != head]
    for a, b in zip(versions, versions[1:]):
        pick = np.unique(np.concatenate([rng.choice(a, min(len(a), LINK), replace=False),
                                         rng.choice(b, min(len(b), LINK), replace=False)]))
        head = int(pick[0])
        edges += [(int(x), head) for x in pick[1:].tolist()]
    return edges


def _rounds(edges: list) -> tuple[int, list]:
    """Star rounds (transforms.core.dedup.star_round) to the fixed point: the rounds that changed the edges."""
    from transforms.core.dedup import star_round

    edges = sorted({(max(u, v), min(u, v)) for u, v in edges if u != v})
    changed = 0
    while True:
        after = star_round(edges)
        if after == edges:
            return changed, edges
        changed, edges = changed + 1, after


def step_dedup_rounds(s: dict):
    """Star rounds on the largest component and on a sample of the distribution, in memory (node ids)."""
    from transforms.core.dedup import ROUNDS, union_find

    d = _dedup_scaled(s)
    dist = _distribution(d)
    rng = np.random.default_rng(1)
    sizes = rng.choice(dist["k"].astype(np.int64), COMPONENT_SAMPLE, p=dist["n"] / dist["n"].sum())
    nodes = _near_count(sizes)
    labels = rng.permutation(int(nodes.sum())) * 7 + 3  # random identities: order unrelated to similarity
    edges, at = [], 0
    for n in nodes.tolist():
        edges += _component_edges(labels[at:at + n], rng)
        at += n
    started = time.perf_counter()
    sample_rounds, fixed = _rounds(edges)
    sample_s = time.perf_counter() - started
    found = {u: m for u, m in fixed}
    reference = union_find(edges)
    assert all(found.get(u, u) == m for u, m in reference.items()), "star rounds disagree with union-find"
    largest = d["largest"]
    big = rng.permutation(largest) * 7 + 3
    big_edges = _component_edges(big, rng)
    started = time.perf_counter()
    big_rounds, big_fixed = _rounds(big_edges)
    big_s = time.perf_counter() - started
    assert len(big_fixed) == largest - 1 and all(m == int(big.min()) for _, m in big_fixed)
    rounds = max(sample_rounds, big_rounds)
    assert rounds <= ROUNDS, f"{rounds} star rounds needed, the stage runs {ROUNDS}"
    # The margin: a bare path (each record like the next only) in random order, the rounds' worst shape.
    n = min(largest, PATH)
    path = rng.permutation(n).tolist()
    path_rounds, _ = _rounds(list(zip(path[1:], path[:-1])))
    return (f"sample of {COMPONENT_SAMPLE} components ({int(nodes.sum())} nodes, largest {int(nodes.max())}, "
            f"{len(edges)} edges): {sample_rounds} rounds changed ({sample_s:.1f}s), = union-find; largest "
            f"component {largest} nodes in {int(round(largest ** 0.5))} chained versions, {len(big_edges)} edges: "
            f"{big_rounds} rounds changed ({big_s:.1f}s); a bare path of {n}: {path_rounds}; the stage runs "
            f"{ROUNDS}"), dict(dedup_rounds=rounds)


def _decoded(values):
    """Values as a worker gets them out of a shuffle: encoded, then decoded one by one."""
    _, value = _kv_coder()
    for v in values:
        yield value.decode(value.encode(v))


def _real_signatures(count: int) -> tuple[list, object]:
    """Signatures made by the core's functions, of random token ids (the tokenizer stays out of the peak)."""
    from transforms.core import dedup as dd

    cfg, rng = dd.DedupConfig(dd.NEAR), np.random.default_rng(6)
    perms = (getattr(dd, "sketch_keys", None) or getattr(dd, "permutations"))(cfg.hashes, cfg.seed)
    return [dd.fingerprint((rng.integers(0, GPT2_EOS, 700),), cfg, perms)[1] for _ in range(count)], cfg


def _nodes(m: int, rng):
    for _ in range(m):
        yield _random_node(rng, DEDUP_FULL["input_files"])


def step_dedup_family(s: dict):
    """GroupExact's largest group: the largest exact family's (node, band keys), then _family over it."""
    from transforms.core.dedup import band_keys
    from transforms.stages.dedup import _family

    m, rng = _dedup_scaled(s)["largest"], np.random.default_rng(2)
    sigs, cfg = _real_signatures(1)
    bands = [band_keys(x, cfg.bands, cfg.rows).tobytes() for x in sigs]
    members = list(_decoded((node, bands[0]) for node in _nodes(m, rng)))  # one family: one content
    out = sum(1 for _ in _family((b"k" * 16, members)))
    return f"family of {m} records: {out} outputs (copies and the head's {cfg.bands} bands)"


def step_dedup_bucket(s: dict):
    """GroupBuckets' largest group: one bucket of every head of the largest component, then bucket_edges."""
    from transforms.core.dedup import bucket_edges

    m, rng = _dedup_scaled(s)["largest"], np.random.default_rng(3)
    heads = list(_decoded(_nodes(m, rng)))
    edges = bucket_edges(heads)
    return f"bucket of {m} heads: {len(edges)} candidate edges"


def step_dedup_join(s: dict):
    """GroupHeads' largest group (GroupKept's is its like): the head of the largest component's bucket with its
    own and every member's (node, signature), as GroupByKey lists them, then _verify."""
    from transforms.stages.dedup import _verify

    m, rng = _dedup_scaled(s)["largest"], np.random.default_rng(4)
    sigs, cfg = _real_signatures(1)
    from transforms.core.dedup import verification_values

    raw = verification_values(sigs[0]).tobytes()  # the members are near copies of the head: every one verifies
    head = _smallest_node()
    members = list(_decoded([(head, raw)])) + list(_decoded((node, raw) for node in _nodes(m - 1, rng)))
    edges = sum(1 for _ in _verify((head, members), cfg.threshold))
    return f"head with {m - 1} members' signatures: {edges} verified edges"


def step_dedup_star(s: dict):
    """A star round's largest group: the largest component's smallest node and all its neighbours (large-star;
    the labels' GroupEnds holds as many), then large_star."""
    from transforms.core.dedup import large_star

    m, rng = _dedup_scaled(s)["largest"], np.random.default_rng(5)
    root = _smallest_node()
    neighbours = list(_decoded(_nodes(m - 1, rng)))
    edges = large_star(root, neighbours)
    return f"root with {m - 1} neighbours: {len(edges)} edges out"


DEDUP_STEPS = {"dedup_shuffle": step_dedup_shuffle, "dedup_rounds": step_dedup_rounds,
               "dedup_family": step_dedup_family, "dedup_bucket": step_dedup_bucket,
               "dedup_join": step_dedup_join, "dedup_star": step_dedup_star}

STEPS = {"metas": step_metas, "layout": step_layout, "route": step_route, "positions": step_positions,
         "stats": step_stats, "params": step_params, "manifest": step_manifest, "graph": step_graph}
ALL_STEPS = {**STEPS, **DEDUP_STEPS}


# ---------------------------------------------------------------- measuring


def _peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _child(name: str, s: dict, queue) -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # the peak so far is the parent's; count this step's from here
    except OSError:
        pass
    started = time.perf_counter()
    out = ALL_STEPS[name](s)
    note, fields = out if isinstance(out, tuple) else (out, {})
    queue.put((time.perf_counter() - started, _peak_rss_mb(), note, fields))


def measure(name: str, s: dict) -> tuple[float, float, str, dict]:
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(name, s, queue))
    proc.start()
    import queue as queues

    while True:
        try:
            result = queue.get(timeout=1)
            break
        except queues.Empty:
            if not proc.is_alive():
                raise RuntimeError(f"step {name} died with exit code {proc.exitcode}") from None
    proc.join()
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scales", default="0.01,0.1,1", help="fractions of the 500 B-token job (and the dedup one)")
    parser.add_argument("--steps", default=",".join(ALL_STEPS))
    args = parser.parse_args(argv)
    scales = [float(x) for x in args.scales.split(",")]
    steps = args.steps.split(",")
    print(f"{'scale':>6} {'step':<13} {'seconds':>8} {'peak MB':>8}  notes")
    last = None
    for scale in scales:
        s = _scaled(scale)
        peak, total, dedup_peak, dedup_total, extra = 0.0, 0.0, 0.0, 0.0, {}
        for name in steps:
            seconds, mb, note, fields = measure(name, s)
            if name in DEDUP_STEPS:
                dedup_peak, dedup_total = max(dedup_peak, mb), dedup_total + seconds
            else:
                peak, total = max(peak, mb), total + seconds
            extra.update(fields)
            print(f"{scale:>6} {name:<13} {seconds:>8.2f} {mb:>8.0f}  {note}", flush=True)
        layout_files = -(-s["rows"] // s["files_per_record"])
        last = f"scale_sim: rows={s['rows']} groups={s['groups']} files={layout_files} peak_mb={peak:.0f} " \
               f"seconds={total:.1f}"
        if any(name in DEDUP_STEPS for name in steps):
            last += f" dedup_peak_mb={dedup_peak:.0f} dedup_seconds={dedup_total:.1f}" + "".join(
                f" {k}={v}" for k, v in extra.items())
        print(f"{scale:>6} {'(all)':<13} {total + dedup_total:>8.2f} {max(peak, dedup_peak):>8.0f}  "
              f"rows={s['rows']} groups={s['groups']}")
    print(last)
    return 0


if __name__ == "__main__":
    sys.exit(main())
