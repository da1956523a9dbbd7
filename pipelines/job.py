"""A job: launched (`launch`: everything checked that can be before a worker starts, the output directory
claimed, the graph built and submitted) and waited for (`run`: the summary line said, data_params.json
returned). The command around it is pipelines.create_hdf5_dataset; `estimate` runs a job on its sample here.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
import time
from typing import Optional

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, TestOptions

from pipelines.config import Config
from pipelines.graph import build
from pipelines.job_progress import JobProgress
from pipelines.output_dir import HOOK_FILE, check_output_dir, claim_output_dir, read_params
from pipelines.plan import JobPlan, UserError, plan_job
from pipelines.runners import beam_options, check_graph_size, is_local_runner, metrics_source, runner_plan
from pipelines.summary import summary_line
from transforms.core import fast_ftfy
from transforms.io import fs, progress
from transforms.io.hooks import hook_source
from transforms.io.manifest import PARAMS_FILE
from transforms.io.read_corpus import write_input_manifest
from transforms.io.tokenizer_files import write_staged
from transforms.stages.mixture import MixtureError

__all__ = ["run", "launch", "Launched"]


@dataclasses.dataclass
class Launched:
    """A job submitted (on a local runner: run already), for run() to wait for and clean up after."""

    result: object  # the runner's PipelineResult
    dry_run: bool
    local: bool
    storage_dir: Optional[str]
    started: float
    progress: Optional[JobProgress] = None  # a job running elsewhere: followed by its Beam counters


def launch(config: Config, beam_args: list[str], plan_changes: Optional[dict] = None) -> Launched:
    """Check everything, claim the output directory, build the job and submit it (without waiting).

    With Beam's --dry_run True the job graph is built and validated, and nothing is written or submitted.
    `plan_changes` replaces JobPlan fields that have no flag (tests: how work is shared out).
    """
    options = beam_options(beam_args)
    runner = runner_plan(config, options, beam_args)
    plan = None
    try:
        plan = plan_job(config, runner, plan_changes)
        if plan.storage_dir != runner.storage_dir:  # plan_changes named another: the runner's scratch is unused
            _remove_scratch(config, runner.storage_dir)
        return _submit(config, options, plan)
    except BaseException:
        # No Launched to clean up after: the scratch space runner_plan made is removed here, whether the plan or
        # the output directory was refused or the job failed (a local runner runs the whole job in _submit).
        _remove_scratch(config, runner.storage_dir if plan is None else plan.storage_dir)
        raise


def _submit(config: Config, options: PipelineOptions, plan: JobPlan) -> Launched:
    """The job planned: the output directory claimed, the tokenizer staged, the graph built, run or submitted."""
    dry_run = bool(options.view_as(TestOptions).dry_run)
    local, storage = is_local_runner(options), plan.storage_dir
    if not dry_run:
        check_output_dir(config, plan)
        fs.makedirs(config.output_dir)
        claim_output_dir(config)
        if plan.hook is not None:  # as 2.10 does: what read the records, beside what they became
            fs.write_text_atomic(fs.join(config.output_dir, HOOK_FILE), hook_source(plan.hook))
    if (config.display_pbar and sys.stderr.isatty() and local and not dry_run
            and options.view_as(DirectOptions).direct_running_mode != "multi_processing"):
        # The bar follows the input's bytes tokenized, in this process (the in-memory runner's workers).
        sizes = [f.size for f in plan.files]
        progress.start(None if None in sizes else sum(sizes), file=sys.stderr)
    if not dry_run:
        # DoFns carry a reference to the tokenizer files, staged where every worker can read them.
        write_staged(plan.tokenizer_files)
        # The job graph names this file instead of holding the list: its size must not grow with the input.
        write_input_manifest(plan.input_manifest, plan.files)
    if config.use_ftfy and not fast_ftfy.fast_path():
        print(f"create_hdf5_dataset: {fast_ftfy.ftfy_record()['why_not']}, which the exact fast path was not "
              "checked against: ftfy itself runs (about 3 MB/s per core)", file=sys.stderr)
    started = time.time()
    pipeline = beam.Pipeline(options=options)
    try:
        build(pipeline, plan)
        if not local:
            check_graph_size(pipeline)
        if dry_run and local:
            # A local runner knows no dry run: it would run the job (on files a dry run does not write). The graph
            # is built and turned into the portable form every runner reads: that is what can be checked here.
            pipeline.to_runner_api()
            result = None
        else:
            result = pipeline.run()
    finally:
        # Beam removes a pipeline's temporary directory when the pipeline runs, not when it is never run (a local
        # dry run, a graph refused, a build that failed): it would be left in the machine's temporary directory.
        shutil.rmtree(pipeline.local_tempdir, ignore_errors=True)
    job_id = getattr(result, "job_id", lambda: None)()
    follower = None
    if dry_run:
        print("create_hdf5_dataset: dry run: the job graph is valid; nothing was written or submitted",
              file=sys.stderr)
    elif not local:
        if job_id:
            print(f"create_hdf5_dataset: submitted job {job_id}", file=sys.stderr)
        # The workers are other processes: the bar follows the job's own counters.
        sizes = [f.size for f in plan.files]
        follower = JobProgress(result, None if None in sizes else sum(sizes), sys.stderr,
                               terminal=bool(config.display_pbar) and sys.stderr.isatty(),
                               metrics=metrics_source(options, result)).start()
    return Launched(result, dry_run, local, storage, started, follower)


def _remove_scratch(config: Config, storage_dir: Optional[str]) -> None:
    """Packed groups kept on this machine for a job that writes elsewhere (a bucket): scratch space, not part of
    the output, and of no use to a later run (each run makes its own)."""
    if storage_dir and fs.is_local(storage_dir) and not fs.is_local(config.output_dir):
        fs.remove_tree(storage_dir)


def run(config: Config, beam_args: list[str], plan_changes: Optional[dict] = None) -> Optional[dict]:
    """Launch the job and wait for it; returns data_params.json (None for a dry run)."""
    launched, succeeded = None, False
    try:
        try:
            launched = launch(config, beam_args, plan_changes)  # a local runner runs the job here
            if launched.dry_run:
                return None
            launched.result.wait_until_finish()
        except MixtureError as e:  # a setting no source count could satisfy: said as what to change
            raise UserError(str(e).split(" [while running")[0]) from None
        succeeded = True
    finally:
        if launched is not None and launched.progress is not None:
            launched.progress.finish(succeeded)
        progress.finish()
        if launched is not None:
            _remove_scratch(config, launched.storage_dir)
    params = read_params(config.output_dir)
    if params is None:
        raise RuntimeError(f"the job finished without writing {fs.join(config.output_dir, PARAMS_FILE)}")
    print(summary_line(params, config.output_dir, time.time() - launched.started), file=sys.stderr)
    return params
