"""Mutation testing of the core with mutmut: `make mutation`.

mutmut changes the code one small thing at a time (a `<` for a `<=`, a
constant, a dropped argument) and runs the tests that cover the changed
function; a mutant the tests do not notice "survives". The score of a module
is the share of its mutants that were caught (killed, or made a test time out).

It runs in a copy of the checkout (beside a link to ../shared, as the tests
expect), so nothing of mutmut's lands in the repository, and prints a score
per module, then every survivor, or with --show its diff. Survivors known to
be equivalent (no test can tell them apart: same behaviour) are listed in
scripts/mutation_equivalent.txt with a one-line reason each, and counted apart.

    python scripts/mutation.py [--modules pack,fim] [--show] [--keep] [--jobs N]
                               [--timeout-multiplier X] [--timeout-constant S]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EQUIVALENT = ROOT / "scripts" / "mutation_equivalent.txt"

# Module -> its source (a file, a package's directory, or a tuple of them) and the fast tests that speak for it
# (mutmut then runs, for each mutant, only those that cover it).
MODULES = {
    "pack": ("transforms/core/pack.py", ["tests/test_pack.py", "tests/test_pack_rules.py"]),
    "summarization": ("transforms/core/summarization.py", ["tests/test_summarization.py",
                                                           "tests/test_summarization_rules.py"]),
    "fim": ("transforms/core/fim.py", ["tests/test_fim.py", "tests/test_fim_rules.py"]),
    "stats": ("transforms/core/stats.py", ["tests/test_stats.py", "tests/test_stats_sections.py"]),
    "sharding": ("transforms/core/sharding.py", ["tests/test_sharding.py", "tests/test_shuffle_quality.py"]),
    "seeds": ("transforms/core/seeds.py", ["tests/test_sharding.py", "tests/test_shuffle_quality.py",
                                           "tests/test_pack.py", "tests/test_fim.py"]),
    "units": ("transforms/core/units.py", ["tests/test_work_units.py", "tests/test_dead_letters.py"]),
    "records": ("transforms/core/records.py", ["tests/test_work_units.py", "tests/test_readers.py",
                                               "tests/test_records.py", "tests/test_readers_edge.py",
                                               "tests/test_json_keys.py"]),
    "readers": ("transforms/io/readers", ["tests/test_readers.py", "tests/test_work_units.py",
                                          "tests/test_readers_edge.py", "tests/test_json_keys.py",
                                          "tests/test_fast_json.py"]),
    "read_corpus": (("transforms/io/read_corpus.py", "transforms/stages/read_corpus.py"),
                    ["tests/test_read_corpus.py", "tests/test_work_units.py", "tests/test_dead_letters.py"]),
    "vsl": ("transforms/core/vsl.py", ["tests/test_vsl_rules.py", "tests/test_vsl_chunks.py"]),
    "vsl_chunks": ("transforms/io/vsl_chunks.py", ["tests/test_vsl_chunks.py"]),
    "splits": ("transforms/core/splits.py", ["tests/test_splits_rules.py", "tests/test_config.py"]),
    "sampler": ("transforms/core/sampler.py", ["tests/test_sampler.py"]),
    "hf": ("transforms/core/hf.py", ["tests/test_map_dataset.py"]),
    "verify": ("transforms/core/verify.py", ["tests/test_verify_rows.py", "tests/test_verify_checks.py",
                                             "tests/test_vsl_tools.py", "tests/test_chat_tools.py"]),
    "chat_template": ("transforms/core/chat/template.py", ["tests/test_chat_render.py", "tests/test_chat_units.py"]),
    "chat_encode": ("transforms/core/chat/encode.py", ["tests/test_chat_encode.py", "tests/test_chat_rows.py",
                                                       "tests/test_chat_units.py", "tests/test_chat_batch.py",
                                                       "tests/test_chat_tool_calls.py"]),
    "chat_rows": ("transforms/core/chat/rows.py", ["tests/test_chat_rows.py", "tests/test_chat_units.py"]),
    "chat_dpo": ("transforms/core/chat/dpo.py", ["tests/test_dpo.py", "tests/test_chat_units.py"]),
    "chat_batch": ("transforms/core/chat/batch.py", ["tests/test_chat_batch.py"]),
    "hdf5_format": ("transforms/io/hdf5_format.py", ["tests/test_hdf5_format.py"]),
    "spill": ("transforms/io/spill.py", ["tests/test_spill_store.py", "tests/test_spill.py"]),
    # The write path's storage (transforms/io) and its Beam steps (transforms/stages): a module's two halves.
    "intermediate": (("transforms/io/intermediate.py", "transforms/stages/intermediate.py"),
                     ["tests/test_spill_store.py"]),
    "dead_letters": (("transforms/io/dead_letters.py", "transforms/stages/dead_letters.py"),
                     ["tests/test_dead_letter_sink.py", "tests/test_dead_letters.py"]),
    "manifest": (("transforms/io/manifest.py", "transforms/stages/manifest.py"), ["tests/test_manifest.py"]),
    "hdf5_sink": (("transforms/io/hdf5_sink.py", "transforms/stages/hdf5_sink.py"), ["tests/test_hdf5_sink.py"]),
    "detok": ("transforms/core/detok.py", ["tests/test_detok.py"]),
    "machine_cache": (("transforms/core/tokenizer/check_cache.py", "transforms/io/machine_cache.py"),
                      ["tests/test_machine_cache.py"]),
    "mixture": ("transforms/core/mixture.py", ["tests/test_mixture.py"]),
    "mixture_sampler": ("transforms/core/mixture_sampler.py", ["tests/test_map_mixture.py"]),
    # scaled_seconds is spoken for by the wall time's own tests.
    "estimate": ("transforms/core/estimate.py", ["tests/test_estimate.py", "tests/test_estimate_wall_time.py"]),
    "sample": ("transforms/io/sample.py", ["tests/test_estimate.py"]),
    "fast_ftfy": ("transforms/core/fast_ftfy.py", ["tests/test_fast_ftfy.py"]),
    "dedup": ("transforms/core/dedup.py", ["tests/test_dedup_core.py"]),
    # The dedup stage's files (its index for later jobs, its listing of removed records) and its steps: the pure
    # helpers are spoken for by plain calls; the Beam composites (ReadDedupIndex, DeduplicateDocuments: "no tests"
    # in dedup_stage) only by the job tests, in dedup_stage_jobs: hours (a surviving mutant of expand runs every
    # job of tests/test_dedup_job.py, ~100 s).
    "dedup_io": (("transforms/io/dedup_index.py", "transforms/io/listing.py"), ["tests/test_dedup_io.py"]),
    "dedup_stage": ("transforms/stages/dedup.py", ["tests/test_dedup_steps.py"]),
    "dedup_stage_jobs": ("transforms/stages/dedup.py", ["tests/test_dedup_steps.py", "tests/test_dedup_job.py"]),
    # What the stages that remove records share (dedup's, decontamination's, the filters' listings): the join's pure
    # steps, and its Beam composites (RemoveRecords, WriteListing, ListRecords) run in-process on a few batches.
    "removal_stage": ("transforms/stages/removal.py", ["tests/test_removal.py"]),
    # Decontamination (issue #47): its pure core, and the evaluation sets' reader.
    "decontam": ("transforms/core/decontam.py", ["tests/test_decontam_core.py", "tests/test_decontam_fast.py"]),
    "eval_sets": ("transforms/io/eval_sets.py", ["tests/test_eval_sets.py"]),
    "hooks210": ("transforms/core/hooks210.py", ["tests/test_hooks210.py", "tests/test_hook_loading.py"]),
    "regions": ("transforms/core/regions.py", ["tests/test_regions.py", "tests/test_hooks210.py"]),
    # The 2.10 config translation lives with the command line, outside transforms/: a file path works the same.
    "cerebras210": ("pipelines/cerebras210.py", ["tests/test_cerebras210_configs.py",
                                                 "tests/test_cerebras210_inputs.py"]),
}
DEFAULT = ("pack", "summarization", "fim", "stats", "sharding", "seeds", "units", "records", "readers", "read_corpus",
           "vsl", "vsl_chunks", "splits", "sampler", "hf")
CAUGHT = ("killed", "timeout", "segfault")
MISSED = ("survived", "no tests")  # a mutant no test even runs is missed too
_MODULE_OF = re.compile(r"^(.*)\.x[_ǁ]")


def _paths(source) -> tuple:
    return (source,) if isinstance(source, str) else tuple(source)


def _copy_checkout(work: Path) -> Path:
    """The checkout's files (tracked and new, not ignored) in work/<name>, with work/shared linked."""
    repo = work / ROOT.name
    names = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                           check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, names):
        src = ROOT / name
        if src.is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, repo / name)
    shared = ROOT.parent / "shared"
    if shared.exists():
        os.symlink(shared, work / "shared")
        # mutmut runs the tests from <repo>/mutants, whose parent must hold ../shared too.
        os.symlink(shared, repo / "shared")
    return repo


def _write_config(repo: Path, sources: list[str], tests: list[str], timeout_multiplier=None,
                  timeout_constant=None) -> None:
    lines = ["[mutmut]", "source_paths ="] + [f"    {s}" for s in sources]
    if timeout_multiplier is not None:
        lines += [f"timeout_multiplier = {timeout_multiplier}"]
    if timeout_constant is not None:
        lines += [f"timeout_constant = {timeout_constant}"]
    # Tests that start SDK worker processes hang in a forked mutant (see tests/conftest.py).
    lines += ["pytest_add_cli_args =", "    -m", "    not worker_processes"]
    lines += ["pytest_add_cli_args_test_selection ="] + [f"    {t}" for t in tests if (repo / t).exists()]
    lines += ["also_copy =", "    tests", "    pipelines", "    transforms", "    data", "    configs"]
    (repo / "setup.cfg").write_text("\n".join(lines) + "\n")


def _equivalent() -> dict:
    out = {}
    if EQUIVALENT.exists():
        for line in EQUIVALENT.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                name, _, reason = line.partition(" ")
                out[name] = reason.strip()
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modules", default=",".join(DEFAULT), help=f"of {', '.join(MODULES)}")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--show", action="store_true", help="print each survivor's diff")
    parser.add_argument("--keep", action="store_true", help="keep the working copy (its path is printed)")
    # A mutant that loops forever (a `while start > 0` made `>= 0`) runs until mutmut stops it: after (the seconds
    # of the tests covering it + constant) * multiplier of wall time, (...) * multiplier * 2 of CPU. With mutmut's
    # 15 and 1, and tests that run jobs, that is minutes a mutant, twice (timeouts are run again). The seconds are
    # the tests' own, without the module fixtures they share (the first test using one pays for it): the constant
    # must cover those (a job or two, ~10 s), or mutants no test kills time out and count as caught.
    parser.add_argument("--timeout-multiplier", type=float, default=None,
                        help="mutmut's timeout_multiplier (default 15)")
    parser.add_argument("--timeout-constant", type=float, default=None,
                        help="mutmut's timeout_constant in seconds (default 1)")
    args = parser.parse_args(argv)
    chosen = [m.strip() for m in args.modules.split(",") if m.strip()]
    unknown = [m for m in chosen if m not in MODULES]
    if unknown:
        parser.error(f"unknown modules {unknown}; choose from {', '.join(MODULES)}")
    mutmut = Path(sys.executable).with_name("mutmut")
    if not mutmut.exists():
        print("mutmut is not installed: pip install 'mutmut>=3.8'", file=sys.stderr)
        return 2
    sources = [path for m in chosen for path in _paths(MODULES[m][0])]
    tests = sorted({t for m in chosen for t in MODULES[m][1]})
    work = Path(tempfile.mkdtemp(prefix="mutation_"))
    try:
        repo = _copy_checkout(work)
        _write_config(repo, sources, tests, args.timeout_multiplier, args.timeout_constant)
        started = time.perf_counter()
        with open(work / "mutmut.log", "w") as log:
            proc = subprocess.run([str(mutmut), "run", "--max-children", str(args.jobs)], cwd=repo, stdout=log,
                                  stderr=subprocess.STDOUT)
        if proc.returncode:
            print(f"mutmut run failed ({proc.returncode}); its log: {work / 'mutmut.log'}", file=sys.stderr)
            args.keep = True
            return 1
        status = _status(mutmut, repo)
        timeouts = sorted(n for n, state in status.items() if state == "timeout")
        if timeouts:
            # mutmut's timer thread keeps the deadlines of finished children and signals their pids when
            # they fall due, so over thousands of forks a reused pid can kill an unrelated mutant as
            # "timeout" (equivalent mutants were). Run the timed-out mutants again, one at a time: a real hang
            # times out again, anything else gets its true verdict. In one run: each run first runs the tests
            # of its mutants unmutated, a minute with tests that run jobs.
            with open(work / "mutmut.log", "a") as log:
                subprocess.run([str(mutmut), "run", "--max-children", "1", *timeouts], cwd=repo, stdout=log,
                               stderr=subprocess.STDOUT)
            status = _status(mutmut, repo)
        equivalent = _equivalent()
        per = defaultdict(Counter)
        survivors = []
        for name, state in status.items():
            module = _MODULE_OF.match(name).group(1).rsplit(".", 1)[-1]
            if state in MISSED and name in equivalent:
                state = "equivalent"
            elif state in MISSED:
                state = "survived"
                survivors.append(name)
            per[module][state] += 1
        print(f"mutmut over {', '.join(chosen)} ({len(status)} mutants, {time.perf_counter() - started:.0f} s, "
              f"tests: {' '.join(tests)})")
        if timeouts:
            print(f"{len(timeouts)} timeouts run again alone; "
                  f"{sum(status[n] == 'timeout' for n in timeouts)} timed out again")
        print()
        print(f"{'module':<15} {'mutants':>8} {'caught':>7} {'survived':>9} {'equivalent':>11} {'other':>6} {'score':>7}")
        for module in sorted(per):
            c = per[module]
            caught = sum(c[s] for s in CAUGHT)
            other = sum(v for k, v in c.items() if k not in CAUGHT + ("survived", "equivalent"))
            counted = caught + c["survived"]
            score = caught / counted if counted else 1.0
            print(f"{module:<15} {sum(c.values()):>8} {caught:>7} {c['survived']:>9} {c['equivalent']:>11} "
                  f"{other:>6} {score:>7.1%}")
        print("\nscore = caught / (caught + survived), where survived counts the mutants no test runs; "
              "equivalent mutants (scripts/mutation_equivalent.txt) and 'other' (skipped, suspicious) are not "
              "counted")
        if survivors:
            print(f"\n{len(survivors)} survivors:")
            for name in survivors:
                if args.show:
                    print(subprocess.run([str(mutmut), "show", name], cwd=repo, capture_output=True,
                                         text=True).stdout)
                else:
                    print(f"  {name}")
        stale = sorted(n for n in equivalent if status.get(n) not in (None,) + MISSED)
        if stale:
            print(f"\nlisted as equivalent but caught now (remove from {EQUIVALENT.name}): {', '.join(stale)}")
        return 0
    finally:
        if args.keep:
            print(f"\nworking copy kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def _status(mutmut: Path, repo: Path) -> dict:
    results = subprocess.run([str(mutmut), "results", "--all", "true"], cwd=repo, capture_output=True,
                             text=True).stdout
    status = {}
    for line in results.splitlines():
        name, _, state = line.strip().rpartition(": ")
        if name:
            status[name] = state
    return status


if __name__ == "__main__":
    sys.exit(main())
