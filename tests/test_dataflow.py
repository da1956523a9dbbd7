"""Dataflow without a cloud: the job graph is built and validated offline, everything sent to workers unpickles.

`--dry_run True` makes DataflowRunner do everything but submit: apply its
overrides, stage the SDK dependencies (the sdist of setup.py), snapshot the
portable pipeline proto and build the v1b3 Job request. Beam validates the
project ID and bucket names even then, hence "my-project" and "gs://my-bucket".
Input and tokenizer are real local files: plan_job discovers the inputs and
reads the tokenizer while the graph is built. (The Dockerfile's Beam version
is checked against setup.py in test_cli.py.)
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import textwrap

import pytest

pytest.importorskip("apache_beam.runners.dataflow.internal.apiclient",
                    reason="the GCP extras are not installed: pip install -e '.[gcp]'")

import apache_beam as beam  # noqa: E402
from apache_beam.portability.api import beam_runner_api_pb2  # noqa: E402
from apache_beam.runners.runner import PipelineState  # noqa: E402

from pipelines.config import MODES, load_config  # noqa: E402
from pipelines.job import launch  # noqa: E402
from pipelines.graph import build  # noqa: E402
from pipelines.plan import plan_job  # noqa: E402
from transforms.io.tokenizer_files import write_staged  # noqa: E402
from pipelines.runners import beam_options, runner_plan  # noqa: E402
from tests.helpers import ROOT  # noqa: E402

GPT2 = ROOT / "data" / "tokenizers" / "gpt2"
SAMPLE = ROOT / "data" / "sample"
DOCS = ROOT / "docs" / "dataflow.md"
METADATA = ROOT / "templates" / "metadata.json"
DATAFLOW = ["--runner", "DataflowRunner", "--dry_run", "True", "--no_auth", "--project", "my-project",
            "--region", "us-central1", "--temp_location", "gs://my-bucket/tmp"]
IMAGE = "us-central1-docker.pkg.dev/my-project/beam/create-hdf5-dataset:test"
OUR_STAGES = ("ReadCorpus", "TokenizeDocuments", "WriteHdf5Shards", "WriteDatasetParams")


def _argv(out, tokenizer_dir=GPT2) -> list[str]:
    return ["LMData", "--input_dir", str(SAMPLE), "--output_dir", str(out), "--tokenizer_type", "GPT2Tokenizer",
            "--vocab_file", str(tokenizer_dir / "vocab.bpe"), "--encoder_file", str(tokenizer_dir / "encoder.json"),
            "--max_seq_length", "256"]


def _pipeline(argv: list[str]) -> beam.Pipeline:
    """The pipeline exactly as main() builds it, not run."""
    config, beam_args = load_config(argv)
    options = beam_options(beam_args)
    plan = plan_job(config, runner_plan(config, options, beam_args))
    p = beam.Pipeline(options=options)
    build(p, plan)
    return p


def _dry_run(argv: list[str]):
    result = _pipeline(argv).run()
    assert result.state == PipelineState.DONE
    return result.job


def _environment(proto: beam_runner_api_pb2.Pipeline):
    (env,) = proto.components.environments.values()
    assert env.urn == "beam:env:docker:v1"
    image = beam_runner_api_pb2.DockerPayload.FromString(env.payload).container_image
    staged = {}
    for dep in env.dependencies:
        name = beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(dep.role_payload).staged_name
        staged[name] = beam_runner_api_pb2.ArtifactFilePayload.FromString(dep.type_payload).path
    return image, staged


def _check_graph(job, stages: tuple = OUR_STAGES) -> None:
    from apache_beam.runners.dataflow.internal import apiclient

    assert job.proto.type_ == apiclient.dataflow.JobType.JOB_TYPE_BATCH
    proto = job.proto_pipeline
    names = {t.unique_name for t in proto.components.transforms.values()}
    assert set(stages) <= names, sorted(names)
    assert all(pc.is_bounded == beam_runner_api_pb2.IsBounded.BOUNDED
               for pc in proto.components.pcollections.values())
    # Every transform's inputs are produced by some transform: the graph is connected and complete.
    produced = {pc for t in proto.components.transforms.values() for pc in t.outputs.values()}
    for t in proto.components.transforms.values():
        assert set(t.inputs.values()) <= produced, t.unique_name


def test_dry_run_with_setup_file_stages_our_packages(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # --setup_file ./setup.py, as the docs say
    job = _dry_run(_argv(tmp_path / "out") + DATAFLOW + ["--setup_file", "./setup.py"])
    _check_graph(job)
    image, staged = _environment(job.proto_pipeline)
    assert image.endswith(f"_sdk:{beam.__version__}"), image  # Beam's stock image, same version as here
    assert "workflow.tar.gz" in staged, staged  # the sdist of setup.py, installed on every worker
    with tarfile.open(staged["workflow.tar.gz"]) as tar:
        members = {m.name.split("/", 1)[1] for m in tar.getmembers() if "/" in m.name}
    for module in ("pipelines/create_hdf5_dataset.py", "pipelines/config.py", "transforms/io/fs.py",
                   "transforms/io/hdf5_sink.py", "transforms/stages/hdf5_sink.py",
                   "transforms/core/tokenizer/__init__.py", "transforms/core/tokenizer/backends.py",
                   "transforms/core/tokenizer/exact.py"):
        assert module in members, f"{module} missing from the staged package"


def test_dry_run_with_custom_container_stages_nothing(tmp_path):
    job = _dry_run(_argv(tmp_path / "out") + DATAFLOW + ["--sdk_container_image", IMAGE,
                                                         "--machine_type", "n2-standard-4",
                                                         "--max_num_workers", "100"])
    _check_graph(job)
    image, staged = _environment(job.proto_pipeline)
    assert image == IMAGE
    assert "workflow.tar.gz" not in staged  # the image already holds the package


_WORKER = textwrap.dedent("""
    import json, sys
    from apache_beam.internal import pickler
    from apache_beam.portability import common_urns, python_urns
    from apache_beam.portability.api import beam_runner_api_pb2 as pb
    from apache_beam.transforms.core import CallableWrapperDoFn

    proto = pb.Pipeline.FromString(open(sys.argv[1], "rb").read())
    ours = []
    for t in proto.components.transforms.values():
        fn = None
        if t.spec.urn == common_urns.primitives.PAR_DO.urn:
            payload = pb.ParDoPayload.FromString(t.spec.payload)
            if payload.do_fn.urn == python_urns.PICKLED_DOFN_INFO:
                fn = pickler.loads(payload.do_fn.payload)[0]
        elif t.spec.urn == common_urns.composites.COMBINE_PER_KEY.urn:
            fn = pickler.loads(pb.CombinePayload.FromString(t.spec.payload).combine_fn.payload)
        if fn is None:
            continue
        if isinstance(fn, CallableWrapperDoFn):  # beam.Map / FlatMap of a function
            target = fn._fn
            name = getattr(target, "__module__", None), getattr(target, "__qualname__", repr(target))
        else:
            target = fn
            name = type(fn).__module__, type(fn).__qualname__
        if (name[0] or "").split(".")[0] in ("transforms", "pipelines"):
            if target is fn and hasattr(fn, "setup"):
                fn.setup()  # e.g. builds the tokenizer from the files carried in the pickle
            ours.append(".".join(name))
    print(json.dumps(sorted(ours)))
""")


def test_everything_sent_to_workers_unpickles_in_a_fresh_process(tmp_path):
    """p.to_runner_api() pickles every DoFn and CombineFn; a new interpreter, elsewhere, loads and sets up ours.

    The tokenizer files are deleted before the worker starts: a DoFn must carry
    what it needs, or read it from where the job staged it (under the output
    directory, a bucket on Dataflow), as a Dataflow worker cannot see the
    launching machine's files.
    """
    tok = tmp_path / "tok"
    shutil.copytree(GPT2, tok)
    argv = _argv(tmp_path / "out", tok) + DATAFLOW + ["--sdk_container_image", IMAGE]
    p = _pipeline(argv)
    config, beam_args = load_config(argv)
    staged = plan_job(config, runner_plan(config, beam_options(beam_args), beam_args)).tokenizer_files
    (tmp_path / "out" / ".tmp").mkdir(parents=True)  # as the job stages it, once it has claimed the directory
    write_staged(staged)
    proto_file = tmp_path / "pipeline.pb"
    proto_file.write_bytes(p.to_runner_api().SerializeToString())
    shutil.rmtree(p.local_tempdir, ignore_errors=True)  # Beam removes it only when a pipeline runs
    shutil.rmtree(tok)
    worker_dir = tmp_path / "worker"
    worker_dir.mkdir()
    proc = subprocess.run([sys.executable, "-c", _WORKER, str(proto_file)], cwd=worker_dir,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(worker_dir),
                               "TMPDIR": str(worker_dir)},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    for fn in ("transforms.stages.read_corpus._ReadUnitFn", "transforms.stages.hdf5_sink._WriteShardFn"):
        assert fn in loaded, loaded
    assert any(name.startswith("transforms.stages.tokenize.") for name in loaded), loaded


def test_the_job_graph_does_not_grow_with_the_inputs(tmp_path):
    """Dataflow refuses job graphs over 10 MB: the input list travels in a manifest, not in the graph.

    Launched exactly as the command does (a dry run writes nothing, submits nothing).
    """
    def graph_bytes(n_files: int) -> int:
        listing = tmp_path / "inputs.txt"  # one name: the flags, and so the recorded settings, stay the same
        listing.write_text("".join(f"gs://my-bucket/corpus/part-{i:06d}.jsonl.zst\n" for i in range(n_files)))
        argv = _argv(tmp_path / "out")
        argv[argv.index("--input_dir"):argv.index("--input_dir") + 2] = ["--metadata_files", str(listing)]
        config, beam_args = load_config(argv + DATAFLOW + ["--sdk_container_image", IMAGE])
        launched = launch(config, beam_args)
        assert launched.dry_run and not (tmp_path / "out").exists()
        return len(launched.result.job.proto_pipeline.SerializeToString())

    small, large = graph_bytes(1), graph_bytes(100_000)
    assert large < 1 << 20, large
    # Pickles differ by a few bytes between any two builds (the start time is recorded); a list
    # of 100 000 paths would add megabytes.
    assert abs(large - small) < 1024, (small, large)


def _doc_commands(text: str) -> list[str]:
    """The `create_hdf5_dataset ...` commands of the fenced bash blocks, continuation lines joined."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for command in re.sub(r"\\\n\s*", " ", block).splitlines():
            command = command.strip()
            if command.startswith("create_hdf5_dataset "):
                commands.append(command)
    return commands


def test_documented_dataflow_commands_are_accepted(tmp_path, monkeypatch):
    """Every create_hdf5_dataset command in docs/dataflow.md parses: our flags and Beam's, nothing unknown."""
    monkeypatch.setenv("PROJECT", "my-project")
    monkeypatch.setenv("REGION", "us-central1")
    monkeypatch.setenv("BUCKET", "my-bucket")
    monkeypatch.setenv("IMAGE", IMAGE)
    monkeypatch.setenv("TAG", "test")
    commands = _doc_commands(DOCS.read_text())
    assert len(commands) >= 2, "docs/dataflow.md lost its launch commands"
    for command in commands:
        expanded = re.sub(r"\$\{?(\w+)\}?", lambda m: os.environ.get(m.group(1), m.group(0)), command)
        words = shlex.split(expanded)[1:]
        config, beam_args = load_config(words)
        options = beam_options(beam_args)
        assert options.get_all_options()["runner"] == "DataflowRunner", command
        assert config.output_dir.startswith("gs://"), command
        # A launch reads from the bucket; the offline check (--dry_run) may list a local input.
        assert config.input_dir.startswith("gs://") or "--dry_run" in words, command


def _our_flags(mode: str) -> set:
    import argparse

    from pipelines.config import build_parser

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return {o[2:] for action in sub.choices[mode]._actions for o in action.option_strings if o.startswith("--")}


def test_flex_template_metadata_is_a_valid_spec_of_our_flags():
    """metadata.json parses as Dataflow's TemplateMetadata; every parameter is a flag; the regexes validate."""
    from google.cloud.dataflow_v1beta3 import TemplateMetadata

    text = METADATA.read_text()
    TemplateMetadata.from_json(text)  # unknown fields or wrong types raise
    spec = json.loads(text)
    flags = set().union(*(_our_flags(mode) for mode in MODES)) | {"mode"}
    names = [p["name"] for p in spec["parameters"]]
    assert len(names) == len(set(names))
    by_name = {p["name"]: p for p in spec["parameters"]}
    for p in spec["parameters"]:
        assert p["name"] in flags, p["name"]
        for pattern in p.get("regexes", []):
            re.compile(pattern)
        for option in p.get("enumOptions", []):
            assert all(re.fullmatch(r, option["value"]) for r in p.get("regexes", [])), (p["name"], option)

    def ok(name, value):
        return all(re.fullmatch(r, value) for r in by_name[name]["regexes"])

    assert not by_name["output_dir"]["isOptional"] and not by_name["tokenizer_type"]["isOptional"]
    assert ok("output_dir", "gs://my-bucket/datasets/out") and not ok("output_dir", "/local/out")
    assert not ok("output_dir", "gs://B/out") and not ok("input_dir", "s3://bucket/in")
    assert ok("encoder_file", "gs://my-bucket/tok/tokenizer.json") and not ok("encoder_file", "gs://my-bucket/tok/")
    assert ok("metadata_files", "gs://my-bucket/a.txt,gs://other-bucket/b.txt")
    assert not ok("metadata_files", "gs://my-bucket/a.txt,/local/b.txt")
    assert ok("tokenizer_type", "NeoXTokenizer") and not ok("tokenizer_type", "neox")
    assert ok("max_seq_length", "2048") and not ok("max_seq_length", "1") and not ok("max_seq_length", "2k")
    assert ok("short_seq_prob", "0.1") and ok("short_seq_prob", "1") and not ok("short_seq_prob", "1.5")
    assert ok("pack_sequences", "False") and not ok("pack_sequences", "maybe")
    assert ok("huggingface_tokenizer", "gs://my-bucket/tok") and ok("huggingface_tokenizer", "org/name")
    assert [o["value"] for o in by_name["mode"]["enumOptions"]] == list(MODES)
    assert ok("position_ids_dtype", "int16") and not ok("position_ids_dtype", "float32")


def _launcher():
    import importlib.util

    spec = importlib.util.spec_from_file_location("flex_launcher", ROOT / "templates" / "launcher.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_flex_launcher_moves_mode_first_and_defaults_to_dataflow():
    launcher = _launcher()
    assert launcher.to_argv(["--input_dir=gs://b/in", "--mode=FIM", "--seed=3"]) == [
        "FIM", "--input_dir=gs://b/in", "--seed=3", "--runner", "DataflowRunner"]
    assert launcher.to_argv(["--runner=DirectRunner", "--mode", "Summarization"]) == [
        "Summarization", "--runner=DirectRunner"]
    assert launcher.to_argv([])[0] == "LMData"


def test_flex_launcher_dry_run_builds_the_job_and_writes_nothing(tmp_path):
    """Parameters as the Flex Template launcher passes them (--name=value) through templates/launcher.py."""
    out = tmp_path / "out"
    args = ["--mode=LMData", f"--input_dir={SAMPLE}", f"--output_dir={out}", "--tokenizer_type=GPT2Tokenizer",
            f"--vocab_file={GPT2 / 'vocab.bpe'}", f"--encoder_file={GPT2 / 'encoder.json'}",
            "--max_seq_length=256", "--pack_sequences=True", f"--sdk_container_image={IMAGE}",
            "--project=my-project", "--region=us-central1", "--temp_location=gs://my-bucket/tmp",
            "--dry_run=True", "--no_auth"]
    launcher = _launcher()
    result = launcher.submit(launcher.to_argv(args))
    assert result.state == PipelineState.DONE
    _check_graph(result.job)
    assert not out.exists()
    assert launcher.main(args[:1] + args[2:]) == 2  # no input_dir nor metadata_files: a one-line error


def test_a_split_job_graph_hardly_grows_with_its_outputs(tmp_path, monkeypatch):
    """A split job's outputs share one set of transforms (each stage takes its settings for the output at hand):
    an output adds its settings to the graph, not a subgraph. A graph over the limit is still a one-line error at
    launch, never a rejected submission."""
    import tempfile

    from pipelines import runners
    from pipelines.plan import UserError

    # Dataflow's dry run rebuilds the pipeline it would submit and never runs it, so Beam never removes that
    # pipeline's temporary directory: this test's go under tmp_path, not the machine's temporary directory.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def argv(splits: int) -> list[str]:
        return _argv(tmp_path / "out") + ["--data_splits", ",".join(f"s{i}=1/{splits}" for i in range(splits))]

    def graph(splits: int) -> int:
        config, beam_args = load_config(argv(splits) + DATAFLOW + ["--sdk_container_image", IMAGE])
        launched = launch(config, beam_args)
        assert launched.dry_run and not (tmp_path / "out").exists()
        _check_graph(launched.result.job, stages=("ReadCorpus", "RouteDocuments", "TokenizeDocuments",
                                                  "WriteHdf5Shards", "WriteSplitParams"))
        return len(launched.result.job.proto_pipeline.SerializeToString())

    two, sixty = graph(2), graph(60)
    per_output = (sixty - two) / 58
    assert per_output < 2 << 10, per_output  # thousands of outputs fit in Dataflow's 10 MB
    monkeypatch.setattr(runners, "GRAPH_LIMIT_BYTES", two - 1)
    config, beam_args = load_config(argv(2) + DATAFLOW)
    with pytest.raises(UserError, match=r"the job graph is 0.\d MiB, over the 0.\d MiB a distributed runner"):
        launch(config, beam_args)
