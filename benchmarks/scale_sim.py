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

The last line is for scripts:

    scale_sim: rows=N groups=G files=F peak_mb=M seconds=S

for the full scale: the largest peak of any step, and the sum of the steps' times.
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
    return dict(rows=rows, groups=groups, input_files=files, files_per_record=FULL["files_per_record"])


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


STEPS = {"metas": step_metas, "layout": step_layout, "route": step_route, "positions": step_positions,
         "stats": step_stats, "params": step_params, "manifest": step_manifest, "graph": step_graph}


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
    note = STEPS[name](s)
    queue.put((time.perf_counter() - started, _peak_rss_mb(), note))


def measure(name: str, s: dict) -> tuple[float, float, str]:
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
    parser.add_argument("--scales", default="0.01,0.1,1", help="fractions of the 500 B-token job")
    parser.add_argument("--steps", default=",".join(STEPS))
    args = parser.parse_args(argv)
    scales = [float(x) for x in args.scales.split(",")]
    steps = args.steps.split(",")
    print(f"{'scale':>6} {'step':<10} {'seconds':>8} {'peak MB':>8}  notes")
    last = None
    for scale in scales:
        s = _scaled(scale)
        peak, total = 0.0, 0.0
        for name in steps:
            seconds, mb, note = measure(name, s)
            peak, total = max(peak, mb), total + seconds
            print(f"{scale:>6} {name:<10} {seconds:>8.2f} {mb:>8.0f}  {note}", flush=True)
        layout_files = -(-s["rows"] // s["files_per_record"])
        last = f"scale_sim: rows={s['rows']} groups={s['groups']} files={layout_files} peak_mb={peak:.0f} " \
               f"seconds={total:.1f}"
        print(f"{scale:>6} {'(all)':<10} {total:>8.2f} {peak:>8.0f}  rows={s['rows']} groups={s['groups']}")
    print(last)
    return 0


if __name__ == "__main__":
    sys.exit(main())
