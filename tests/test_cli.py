"""The command line as a user meets it: clear one-line errors, Beam options, the packaging files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, h5_files, run_job

GPT2 = ROOT / "data" / "tokenizers" / "gpt2"
SAMPLE = ROOT / "data" / "sample"


def _gpt2_args(out) -> list[str]:
    return ["--output_dir", str(out), "--tokenizer_type", "GPT2Tokenizer",
            "--vocab_file", str(GPT2 / "vocab.bpe"), "--encoder_file", str(GPT2 / "encoder.json")]


def _cli(args: list[str], cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelines.create_hdf5_dataset", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=300)


def _with(args: list[str], **replace) -> list[str]:
    """args with the value of each --flag in `replace` swapped."""
    args = list(args)
    for flag, value in replace.items():
        args[args.index(f"--{flag}") + 1] = value
    return args


@pytest.mark.parametrize("edit, extra, message", [
    ({"input_dir": "/nonexistent/dir"}, [], "/nonexistent/dir"),
    ({"vocab_file": "/nope/vocab.bpe"}, [], "/nope/vocab.bpe"),
    ({}, ["--max_seq_length", "1"], "max_seq_length"),
    ({}, ["--pack_sequences", "maybe"], "pack_sequences"),
    ({}, ["--no_such_flag", "1"], "--no_such_flag"),
])
def test_user_errors_are_one_line_without_traceback(tmp_path, edit, extra, message):
    argv = _with(["LMData", "--input_dir", str(SAMPLE), *_gpt2_args(tmp_path / "out")], **edit) + extra
    proc = _cli(argv)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert message in lines[0]


def test_non_empty_output_dir_is_refused_unless_overwrite(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("user file")
    proc = _cli(["LMData", "--input_dir", str(SAMPLE), *_gpt2_args(out), "--runner", "FnApiRunner"])
    assert proc.returncode == 2 and "not empty" in proc.stderr
    params = run_job(["LMData", "--input_dir", str(SAMPLE), *_gpt2_args(out), "--max_seq_length", "256",
                      "--overwrite_output", "True"])
    assert (out / "keep.txt").read_text() == "user file"  # overwrite replaces only our own files
    assert params["post-process"]["n_examples"] > 0


def test_demo_corpus_end_to_end_with_yaml_and_beam_options(tmp_path):
    """The bundled sample through YAML + flags + a Beam option; files are exact-size and named by output_name."""
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("processing:\n  max_seq_length: 256\n  output_name: demo\n  files_per_record: 150\n"
                   "dataset:\n  use_ftfy: True\n  min_sequence_len: 20\n")
    out = tmp_path / "out"
    params = run_job(["LMData", "--params", str(cfg), "--input_dir", str(SAMPLE), *_gpt2_args(out),
                      "--files_per_record", "100", "--direct_num_workers", "1"])
    files = h5_files(out)
    assert all(Path(f).name.startswith("demo_") for f in files)
    sizes = list(params["files"].values())
    assert sizes[:-1] == [100] * (len(sizes) - 1) and 0 < sizes[-1] <= 100  # the flag beat the YAML
    assert params["processing"]["max_seq_length"] == 256 and params["dataset"]["min_sequence_len"] == 20
    assert params["setup"]["dataset_processor"] == "LMDataPreprocessor"
    assert not [p for p in out.iterdir() if p.name.startswith(".tmp") or p.suffix == ".partial"]


def test_the_command_ends_with_its_code_and_everything_flushed(tmp_path):
    """The command leaves without tearing the interpreter down (cli()): what it wrote must be whole, its
    summary must reach a pipe, and main()'s code must be the process's."""
    out = tmp_path / "out"
    proc = _cli(["LMData", "--input_dir", str(SAMPLE), *_gpt2_args(out), "--max_seq_length", "256",
                 "--runner", "FnApiRunner", "--max_bad_record_fraction", "0"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.rstrip().splitlines()[-1].startswith("Wrote ")
    params = json.loads((out / "data_params.json").read_text())
    assert sum(params["files"].values()) == params["post-process"]["n_examples"] > 0
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "a.jsonl").write_text('{"text": "a good line of text, long enough to keep"}\nnot json\n')
    proc = _cli(["LMData", "--input_dir", str(bad), *_gpt2_args(tmp_path / "out_bad"), "--max_seq_length", "256",
                 "--runner", "FnApiRunner", "--max_bad_record_fraction", "0", "--min_sequence_len", "2"])
    assert proc.returncode == 3 and "more than max_bad_record_fraction" in proc.stderr, proc.stderr


def test_the_console_script_starts_the_command_before_its_imports(tmp_path):
    """setup.py's console script is pipelines.command:cli, which settles the process before numpy and Beam
    load (OpenBLAS's threads, the garbage collector) and then runs the same command."""
    assert '"create_hdf5_dataset=pipelines.command:cli"' in (ROOT / "setup.py").read_text()
    probe = ("import gc, os, sys\n"
             "from pipelines import process\n"
             "process.prepare()\n"
             "assert 'apache_beam' not in sys.modules\n"
             "print(os.environ['OPENBLAS_NUM_THREADS'], gc.isenabled())\n"
             "process.started()\n"
             "print(gc.isenabled(), gc.get_freeze_count() > 0)\n")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.split() == ["1", "False", "True", "True"], out.stderr
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env={**env, "OPENBLAS_NUM_THREADS": "3"},
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.split()[0] == "3", out.stderr  # the user's own setting wins
    # The console script's way in: the job runs, its summary and code as from `python -m`.
    job = subprocess.run([sys.executable, "-c", "import sys; from pipelines.command import cli; sys.exit(cli())",
                          "LMData", "--input_dir", str(SAMPLE), *_gpt2_args(tmp_path / "out"),
                          "--max_seq_length", "256", "--runner", "FnApiRunner"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert job.returncode == 0 and job.stderr.rstrip().splitlines()[-1].startswith("Wrote "), job.stderr
    assert h5_files(tmp_path / "out")


def test_the_head_start_builds_the_tokenizer_plan_job_uses(tmp_path):
    """The command builds the job's tokenizer on a thread while it imports Beam; plan_job takes that one, and a
    head start that fails leaves the error to main(), reported as without it."""
    args = ["LMData", "--input_dir", str(SAMPLE), *_gpt2_args(tmp_path / "out")]
    probe = ("import json, sys\n"
             "from pipelines import process\n"
             "args = json.loads(sys.argv[1])\n"
             "head_start = process.prepare(args)\n"
             "head_start.thread.join()\n"
             "assert 'apache_beam' not in sys.modules\n"
             "from transforms.core.tokenizer import load, shared_tokenizer\n"
             "(built,) = load._SHARED.values()\n"
             "print(built._encoder.name, built._fingerprint is not None)\n"
             "from pipelines.plan import plan_job\n"
             "plan = plan_job(head_start.load()[0])\n"
             "print(shared_tokenizer(plan.tokenizer_files) is built)\n")
    out = subprocess.run([sys.executable, "-c", probe, json.dumps(args)], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.stdout.split() == ["fastokens", "True", "True"], out.stderr
    # No head start for a tool; settings main() will refuse start no tokenizer, their error is kept for main().
    none = ("import json, sys\nfrom pipelines import process\n"
            "heads = [process.prepare(a) for a in json.loads(sys.argv[1])]\n"
            "print([h if h is None else (h.thread, type(h.error).__name__) for h in heads])\n")
    refused = [["verify", str(tmp_path)], [], ["LMData", "--input_dir", "x"]]
    out = subprocess.run([sys.executable, "-c", none, json.dumps(refused)], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.stdout.strip() == "[None, None, (None, 'ConfigError')]", out.stderr
    # A head start that fails (no such vocabulary) says nothing; main() says it, once.
    proc = _cli(_with(args, vocab_file=str(tmp_path / "missing.bpe")))
    assert proc.returncode == 2 and proc.stderr.count("missing.bpe") == 1, proc.stderr


def test_main_goes_on_from_the_flags_the_head_start_parsed(tmp_path, monkeypatch, capsys):
    """The flags are parsed once: main() takes the head start's config, or reports its error, and parses nothing
    again (the job's, or the estimate's)."""
    from pipelines import create_hdf5_dataset as command
    from pipelines import estimate, job
    from pipelines.config import ConfigError, load_config
    from pipelines.process import HeadStart

    args = ("LMData", "--input_dir", str(SAMPLE), *_gpt2_args(tmp_path / "out"), "--runner", "FnApiRunner")
    loaded = load_config(list(args))

    def parse_again(argv):
        raise AssertionError(f"parsed again: {argv}")

    monkeypatch.setattr(command, "load_config", parse_again)
    monkeypatch.setattr(estimate, "load_config", parse_again)
    ran = []
    monkeypatch.setattr(job, "run", lambda config, beam_args: ran.append((config, beam_args)))  # main imports it
    assert command.main(head_start=HeadStart(args, loaded=loaded)) == 0
    assert len(ran) == 1 and ran[0][0] is loaded[0] and ran[0][1] == ["--runner", "FnApiRunner"]
    refused = ConfigError("output_dir: required")
    assert command.main(head_start=HeadStart(("LMData",), error=refused)) == 2
    assert capsys.readouterr().err == "create_hdf5_dataset: error: output_dir: required\n"
    assert command.main(head_start=HeadStart(("estimate", "LMData"), error=refused)) == 2
    assert capsys.readouterr().err == "create_hdf5_dataset estimate: error: output_dir: required\n"


def test_dockerfile_beam_version_matches_setup():
    setup = (ROOT / "setup.py").read_text()
    pinned = re.search(r'BEAM_VERSION = "([^"]+)"', setup).group(1)
    image = re.search(r"^FROM apache/beam_python3\.\d+_sdk:(\S+)", (ROOT / "Dockerfile").read_text(), re.M)
    assert image and image.group(1) == pinned
    assert 'ENTRYPOINT ["/opt/apache/beam/boot"]' in (ROOT / "Dockerfile").read_text()
    import apache_beam

    assert apache_beam.__version__ == pinned


def test_example_configs_load():
    from pipelines.config import load_config

    for mode, name in [("LMData", "lm_data.yaml"), ("Summarization", "summarization.yaml"), ("FIM", "fim.yaml"),
                       ("LMData_VSL", "lm_data_vsl.yaml"), ("Summarization_VSL", "summarization_vsl.yaml"),
                       ("Chat", "chat.yaml"), ("Chat_VSL", "chat.yaml"), ("DPO", "dpo.yaml"),
                       ("LMData", "lm_data_splits.yaml"), ("LMData", "lm_data_mixture.yaml")]:
        source = [] if "mixture" in name else ["--input_dir", "x"]  # a mixture names its own sources
        config, rest = load_config([mode, "--params", str(ROOT / "configs" / name), *source])
        assert config.mode == mode and rest == []
        if "mixture" not in name:
            splits = config
    assert [name for name, _, _ in splits.data_splits] == ["train", "validation", "test"]
    assert splits.context_splits == ((1024, 0.5), (2048, 0.5))


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme and "make demo" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_help_names_the_modes_and_the_tools():
    """A user finds verify, inspect and report from --help, and each answers its own --help."""
    out = _cli(["--help"])
    assert out.returncode == 0
    listed = re.search(r"\{([A-Za-z_,]+)\}", out.stdout).group(1).split(",")
    assert listed == ["LMData", "Summarization", "FIM", "LMData_VSL", "Summarization_VSL", "Chat", "Chat_VSL", "DPO",
                      "verify", "inspect", "report", "estimate"]
    for tool in ("verify", "inspect", "report", "estimate"):
        assert re.search(rf"^\s+{tool}\s+\S", out.stdout, re.M), f"{tool} has no line of help"
        sub = _cli([tool, "--help"])
        assert sub.returncode == 0 and f"create_hdf5_dataset {tool}" in sub.stdout


def test_a_dry_run_on_a_local_runner_checks_the_graph_and_writes_nothing(tmp_path, capsys, monkeypatch):
    """A local runner knows no dry run (it would run the job on files a dry run does not write)."""
    import tempfile

    from pipelines.create_hdf5_dataset import main

    # This process's temporary directory, watched alone (other test processes make their own pipelines).
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    out = tmp_path / "out"
    assert main(["LMData", "--input_dir", str(ROOT / "data" / "sample"), "--output_dir", str(out),
                 "--tokenizer_type", "GPT2Tokenizer", "--vocab_file", str(ROOT / "data/tokenizers/gpt2/vocab.bpe"),
                 "--encoder_file", str(ROOT / "data/tokenizers/gpt2/encoder.json"), "--dry_run", "True",
                 "--runner", "FnApiRunner"]) == 0
    assert "dry run: the job graph is valid" in capsys.readouterr().err
    assert not out.exists()
    assert not list(temp.glob("beam-pipeline-temp*"))  # the graph's pipeline never ran: its directory removed
