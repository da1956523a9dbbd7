"""Which runner runs the job, and what follows from it: Beam's options, where packed rows wait, threads per
process, where a running job's counters are read, and the graph size a distributed runner accepts.

Without --runner the job runs in this process on Beam's FnApiRunner. A local
runner keeps packed groups on this machine's disk; a distributed one
(Dataflow, Flink, Spark) in the output's bucket, or in its own shuffle.
"""

import argparse
import tempfile
import time
from typing import Optional

import apache_beam as beam
from apache_beam.options.pipeline_options import DebugOptions, DirectOptions, PipelineOptions, StandardOptions

from pipelines.config import Config
from pipelines.job_progress import FlinkRestMetrics, live_metrics
from pipelines.plan import RunnerPlan, UserError
from transforms.core.threads import machine_cpus
from transforms.io import fs
from transforms.io.intermediate import MIXTURE_PLAN, load_mixture_plan
from transforms.io.read_corpus import FAN_OUT_BYTES

__all__ = ["beam_options", "runner_plan", "is_local_runner", "process_cpus", "metrics_source", "check_graph_size",
           "DEFAULT_RUNNER", "LOCAL_RUNNERS", "GRAPH_LIMIT_BYTES"]

DEFAULT_RUNNER = "FnApiRunner"
LOCAL_RUNNERS = ("DirectRunner", "FnApiRunner", "SwitchingDirectRunner", "BundleBasedDirectRunner")


def beam_options(beam_args: list[str]) -> PipelineOptions:
    """Beam options, refusing any argument neither we nor Beam know (Beam would only log and drop it)."""
    parser = argparse.ArgumentParser(add_help=False)
    seen = set()

    def add_all(cls):
        for sub in cls.__subclasses__():
            if sub not in seen:
                seen.add(sub)
                try:
                    sub._add_argparse_args(parser)
                except argparse.ArgumentError:
                    pass  # an option declared by two classes
                add_all(sub)

    add_all(PipelineOptions)
    _, unknown = parser.parse_known_args(beam_args)
    if unknown:
        raise UserError(f"unrecognized arguments: {' '.join(unknown)}")
    options = PipelineOptions(beam_args)
    if not options.view_as(StandardOptions).runner:
        # A bare DirectRunner first tries to download and start Prism; the in-process
        # FnApiRunner is what runs locally anyway, and the fastest here (benchmarks/bench.py).
        options.view_as(StandardOptions).runner = DEFAULT_RUNNER
    return options


def _runner_name(options: PipelineOptions) -> str:
    runner = options.get_all_options().get("runner") or "DirectRunner"
    runner = runner if isinstance(runner, str) else type(runner).__name__
    return runner.split(".")[-1]


def is_local_runner(options: PipelineOptions) -> bool:
    return _runner_name(options) in LOCAL_RUNNERS


def process_cpus(options: PipelineOptions) -> Optional[int]:
    """Cores one SDK process gets, when the runner shares a machine among several; None: all of them.

    Dataflow starts one Python SDK process per vCPU (unless the experiment
    no_use_multiple_sdk_containers is set); the DirectRunner's multi_processing
    mode starts direct_num_workers processes on this machine.
    """
    if _runner_name(options) == "DataflowRunner":
        experiments = options.view_as(DebugOptions).experiments or []
        return None if "no_use_multiple_sdk_containers" in experiments else 1
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode == "multi_processing":
        workers = direct.direct_num_workers or machine_cpus()
        return max(1, machine_cpus() // workers)
    return None


def _storage_dir(config: Config, local_runner: bool) -> Optional[str]:
    """Where packed groups wait for the writers (None: in the runner's GroupByKey).

    Locally: on this machine's disk, so memory does not grow with the input.
    On a distributed runner: in the output's bucket, so the rows cross the
    service's shuffle at most once (the layout's side input is a barrier, and
    what crosses it is written out by the service) and an interrupted job can
    resume.
    """
    strategy, output_dir = config.shuffle_strategy, fs.absolute(config.output_dir)
    if strategy == "runner":
        return None
    if not local_runner:
        if not fs.is_local(output_dir):
            return fs.join(output_dir, fs.TMP_DIR, "groups")
        if strategy == "disk":
            raise UserError("shuffle_strategy disk keeps packed groups under output_dir, which remote workers "
                            "can only share when it is a bucket (gs://...): use auto or runner")
        return None
    if fs.is_local(output_dir):
        return fs.join(output_dir, fs.TMP_DIR, "groups")
    return tempfile.mkdtemp(prefix="create_hdf5_dataset_groups_")


def runner_plan(config: Config, options: PipelineOptions, beam_args: list[str]) -> RunnerPlan:
    """What the chosen runner decides of the job's plan: where packed rows wait, how work is shared out, threads
    per process, where the tokenizer is staged for the workers, and the run's record in data_params.json.

    Groups of a large file read in order are handed to other workers only on a
    distributed runner: locally every core already works on one group
    (the tokenizer's threads), and a local runner would hold the handed-on
    text in memory.
    """
    local = is_local_runner(options)
    storage, scratch = _storage_dir(config, local), fs.join(fs.absolute(config.output_dir), fs.TMP_DIR)
    kept = None
    if config.mixture_spec is not None and config.resume_from_checkpoint and storage:
        kept = load_mixture_plan(fs.join(scratch, MIXTURE_PLAN))
    run = {"started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "beam_version": beam.__version__,
           "beam_options": beam_args, "shuffle_strategy": "disk" if storage else "runner"}
    return RunnerPlan(storage_dir=storage, fan_out_bytes=None if local else FAN_OUT_BYTES,
                      process_cpus=process_cpus(options), mixture_plan=kept, stage_dir=scratch, run=run)


def metrics_source(options: PipelineOptions, result):
    """Where a running job's counters are read: Flink's REST API when a Flink master is named (Beam's Flink job
    server answers only once the job has ended), else the runner's own answer."""
    master = options.get_all_options().get("flink_master")
    job_id = getattr(result, "_job_id", None)
    if master and master not in ("[auto]", "[local]", "[collection]") and job_id:
        return FlinkRestMetrics(master, job_id)
    return live_metrics


# Dataflow refuses a job whose graph is over 10 MB; the request holds more than the pipeline, so keep a margin.
GRAPH_LIMIT_BYTES = 9 << 20


def check_graph_size(pipeline: beam.Pipeline) -> None:
    """Refuse, before submitting, a graph the service would refuse (it does not grow with the inputs, and a
    split job's outputs share their transforms, but settings are part of it)."""
    size = len(pipeline.to_runner_api().SerializeToString())
    if size > GRAPH_LIMIT_BYTES:
        raise UserError(f"the job graph is {size / 2**20:.1f} MiB, over the {GRAPH_LIMIT_BYTES / 2**20:.1f} MiB a "
                        "distributed runner such as Dataflow accepts")
