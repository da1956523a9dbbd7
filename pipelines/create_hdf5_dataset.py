"""create_hdf5_dataset: raw text corpora -> training-ready HDF5, as an Apache Beam pipeline.

    create_hdf5_dataset LMData --input_dir DIR --output_dir OUT \\
        --tokenizer_type GPT2Tokenizer --vocab_file vocab.bpe --encoder_file encoder.json \\
        [--params cfg.yaml] [reference flags] [Beam pipeline options]

The command, in layers: `main` parses flags and YAML (pipelines.config; or
takes what the process's head start parsed, pipelines.process) and reports
what the user must fix; `run` (pipelines.job) launches the job and waits for it;
`launch` checks everything that can be checked before a worker starts and
submits. Around them: `plan_job` turns the config, and what the chosen runner
decides (`runner_plan`, pipelines.runners), into the job's plan of plain
values, whole and read-only (pipelines.plan), `build` only wires stages (pipelines.graph), the output
directory is checked and claimed first (pipelines.output_dir), and the summary
line is said last (pipelines.summary).
"""

if __name__ == "__main__":
    # As `python -m`: settings only the process's first lines can make, before numpy and Beam load; the flags
    # parsed there are handed to main() (see the end of this file).
    from pipelines import process

    _head_start = process.prepare()

import atexit
import logging
import os
import sys
from typing import Optional

from pipelines import process
from pipelines.beam_notices import drop_errors_said_again
from pipelines.config import TOOLS, ConfigError, load_config
from pipelines.plan import UserError
from pipelines.summary import bad_share_problem

__all__ = ["main", "cli"]


def main(argv: Optional[list[str]] = None, *, head_start: Optional[process.HeadStart] = None) -> int:
    """The command on `argv` (sys.argv[1:] when None); returns its exit code.

    `head_start`: what the process's first lines made of the command's arguments (pipelines.process.prepare),
    its argv in place of `argv`: the flags it parsed are not parsed again.
    """
    argv = list(head_start.argv if head_start is not None else sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "estimate":
        from pipelines.estimate import main as estimate_main

        process.configure_logging()
        return estimate_main(argv[1:], head_start=head_start)
    if argv and argv[0] in TOOLS:
        from pipelines.tools import main as tools_main

        return tools_main(argv)
    # Beam is imported for a job only: the tools (verify, inspect, ...) start a second sooner without it.
    from pipelines.job import run
    from transforms.stages.mixture import MixtureError

    process.configure_logging()
    drop_errors_said_again(MixtureError)
    try:
        config, beam_args = head_start.load() if head_start is not None else load_config(argv)
        for notice in config.notices:
            print(f"create_hdf5_dataset: {config.params_file}: {notice}", file=sys.stderr)
        params = run(config, beam_args)
    except (ConfigError, UserError) as e:
        print(f"create_hdf5_dataset: error: {e}", file=sys.stderr)
        return 2
    problem = params and bad_share_problem(params, config.max_bad_record_fraction)
    if problem:
        print(f"create_hdf5_dataset: error: {problem}", file=sys.stderr)
        return 3
    return 0


def cli(head_start: Optional[process.HeadStart] = None) -> None:
    """The command: `main()`, then out of the process without tearing the interpreter down.

    `head_start`: what `process.prepare` made of the arguments, for main() to go on from.

    When main() returns, the job has ended: every file is committed by rename,
    data_params.json is written and the summary printed. What Python would do
    next is free the run's objects one by one, drop the tokenizers' caches and
    wake idle thread pools only to stop them: 0.4-0.7 s of a 5-6 s run on the
    bench corpus (benchmarks/bench.py), for nothing outside this process. So
    the exit handlers run, logging and the streams are flushed, and the process
    ends there. An exception (or argparse's exit) still ends it the usual way.
    """
    process.started()
    code = main(head_start=head_start)
    atexit._run_exitfuncs()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    cli(_head_start)
