# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DEMO_OUT ?= demo_output

.PHONY: demo test docs fuzz test-runners runners prism-cache flink-cluster flink-cluster-stop spark-job-server spark-job-server-stop bench-runners test-torch install bench bench-ftfy bench-estimate bench-compress bench-read bench-dedup bench-langid bench-filters vsl-pack-bench scale-sim split-bench read-rates progress-eta mutation clean

$(VENV)/.installed: setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[gcp,test,report,huggingface,docs]"
	touch $@

install: $(VENV)/.installed

demo: install
	$(PY) -m pipelines.create_hdf5_dataset LMData \
	    --input_dir data/sample --output_dir $(DEMO_OUT) --overwrite_output True \
	    --tokenizer_type GPT2Tokenizer \
	    --vocab_file data/tokenizers/gpt2/vocab.bpe --encoder_file data/tokenizers/gpt2/encoder.json \
	    --max_seq_length 1024 --files_per_record 100 --use_ftfy True
	@echo "Output: $(abspath $(DEMO_OUT)) (data_params.json holds the statistics)"

# Real engines (tests/test_engines.py): a smoke on Prism and a Flink cluster here; the whole matrix in test-runners.
# They are set up on first use into .runners/ (kept); without Go or Java they skip, unless REQUIRE_RUNNERS=1.
# Two test processes (the CI machine's cores), each taking whole test files: module fixtures (an emulator, a Flink
# cluster) are started once, in one process.
test: install docs
	$(PY) -m pytest -q -o faulthandler_timeout=600 -m "not engine_matrix" -n 2 --dist loadfile --durations=40 tests

# The documentation site (docs/, Sphinx + MyST) into docs/_build/html, strict: a broken link or anchor, a page in
# no table of contents, or a setting the reference cannot describe fails. tests/test_docs.py runs its commands.
docs: install
	$(PY) -m sphinx -E -W --keep-going -q -b html docs docs/_build/html

# Whole jobs of every mode on hostile input, longer than make test's few examples (tests/test_fuzz_jobs.py).
FUZZ_EXAMPLES ?= 60
fuzz: install
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest -q tests/test_fuzz_jobs.py tests/test_bad_input.py -k fuzz

test-runners: install
	$(PY) -m pytest -q -m engines tests/test_engines.py

# Prism (go install), Beam's Flink and Spark job servers (Maven) into .runners/.
runners: install
	$(PY) scripts/engines.py setup all

# Prism where `--runner DirectRunner` finds it (~/.apache_beam/cache/prism/bin), as after Beam's first download.
prism-cache: install
	$(PY) scripts/engines.py prism-cache

# A standalone Flink cluster (JobManager, TaskManager, Beam's job server, SDK worker pool); prints the job's flags.
flink-cluster: install
	$(PY) scripts/engines.py flink start

flink-cluster-stop: install
	$(PY) scripts/engines.py flink stop

spark-job-server: install
	$(PY) scripts/engines.py spark start

spark-job-server-stop: install
	$(PY) scripts/engines.py spark stop

# The bench corpus on FnApiRunner, Prism and Flink in one run: start-up apart from data time.
bench-runners: install
	$(PY) benchmarks/runners.py $(BENCH_RUNNERS_ARGS)

clean:
	rm -rf $(VENV) $(DEMO_OUT)

# The English bench corpus, then the multilingual one (55 languages) with GPT-2 and Qwen2.5's tokenizer, ftfy off
# and on; both read from ../shared/corpora/bench, never copied here. BENCH_ML_ARGS="--repeat 1" and so on.
BENCH_ML_CORPUS ?= ../shared/corpora/bench/multilingual_natural.jsonl.zst
bench: install
	$(PY) benchmarks/bench.py $(BENCH_ARGS)
	$(PY) benchmarks/bench.py --corpus $(BENCH_ML_CORPUS) --configs ftfy_off,ftfy_on,qwen_off,qwen_on,mixture $(BENCH_ML_ARGS)
	$(PY) benchmarks/vsl_packing.py
	$(MAKE) --no-print-directory bench-ftfy
	$(MAKE) --no-print-directory bench-estimate

# ftfy.fix_text against transforms.core.fast_ftfy per script, one core, outputs compared.
# BENCH_FTFY_ARGS="--limit-docs 2000" for a quick look.
# The estimate's 95% intervals over 40 seeded 1% samples of each bench corpus and of 1 GB made from them, and its
# time against the job's (on the small corpora start-up dominates both; the 1 GB row shows the share at scale).
BENCH_ESTIMATE_ARGS ?= --large-gb 1
bench-estimate: install
	$(PY) benchmarks/estimate_calibration.py $(BENCH_ESTIMATE_ARGS)

bench-ftfy: install
	$(PY) benchmarks/ftfy_rates.py --corpus $(BENCH_ML_CORPUS) $(BENCH_FTFY_ARGS)

# --dedup near against datatrove's MinHash pipeline and datasketch's MinHashLSH with Cerebras' settings, on one
# planted corpus (exact copies, near copies, near misses) made from the English bench corpus in a temp directory:
# throughput per core, the job with against without --dedup, precision and recall, agreement of the removed sets.
# The peers come from the bench extra, installed here only. BENCH_DEDUP_ARGS="--docs 500 --repeat 1" for a quick look.
bench-dedup: install
	$(PY) -m pip install --quiet -e ".[bench]"
	$(PY) benchmarks/dedup_bench.py $(BENCH_DEDUP_ARGS)

# Language identification against the multilingual bench corpus' labels: per language, in all, its speed per core,
# and datatrove's LanguageFilter's decisions with the same model (the bench extra, installed here only).
bench-langid: install
	$(PY) -m pip install --quiet -e ".[bench]"
	$(PY) benchmarks/langid_accuracy.py --corpus $(BENCH_ML_CORPUS) $(BENCH_LANGID_ARGS)

# The quality filters against datatrove's on the English bench corpus: CPU per MB on one core, decisions agreeing.
bench-filters: install
	$(PY) -m pip install --quiet -e ".[bench]"
	$(PY) benchmarks/filters_bench.py $(BENCH_FILTERS_ARGS)

# VSL packing time at 1x, 10x and 100x the bench corpus's documents (n log n), and its fill against the bounds.
vsl-pack-bench: install
	$(PY) benchmarks/vsl_packing.py

# Scale on one machine: the steps that meet every group, file or source, at the size of a 500 B-token job.
scale-sim: install
	$(PY) benchmarks/scale_sim.py

# Real local runs: 5 000 small inputs; one large file split into work units (byte-identical output).
split-bench: install
	$(PY) benchmarks/split_work.py

# Per-core read rates and the cost of handing a group on (inputs to docs/dataflow.md's cost model).
read-rates: install
	taskset -c 0 $(PY) benchmarks/read_rates.py

# The progress bar's ETA against the time really left, in a pseudo-terminal, on the bench corpus.
progress-eta: install
	$(PY) benchmarks/progress_eta.py

# Mutation testing of the core (not in CI: about 30 minutes on 2 cores for all of it). MUTATION_ARGS="--modules pack --show"
# Each --compressor on real rows, one thread: speed and size against zlib level 4.
bench-compress: install
	$(PY) benchmarks/compressors.py $(BENCH_COMPRESS_ARGS)

# Random access by sample on one core: H5MapDataset[i] against the floor (inflating the chunks alone).
bench-read: install
	$(PY) benchmarks/read_rows.py $(BENCH_READ_ARGS)

# A torch DataLoader over H5MapDataset with ResumableSampler and worker processes. Not in CI: the torch wheel
# is several GB.
test-torch: install
	$(PY) -m pip install --quiet -e ".[torch]"
	$(PY) -m pytest -q tests/test_torch_loader.py

mutation: install
	$(PY) -m pip install --quiet "mutmut>=3.8"
	$(PY) scripts/mutation.py $(MUTATION_ARGS)
