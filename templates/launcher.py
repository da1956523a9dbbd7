"""Flex Template entry point (FLEX_TEMPLATE_PYTHON_PY_FILE): submit the job, do not wait for it.

The Flex Template launcher runs this file with every template parameter as
`--name=value`, followed by the Dataflow options it adds itself (--runner,
--project, --region, --temp_location, --sdk_container_image, ...). Our
command line wants the mode as its first, positional, argument: the `mode`
parameter is moved there. Then the job is checked and built exactly as
`create_hdf5_dataset` does it, and submitted without waiting: the dataset is
finalized by the job itself (data_params.json is written last, by a worker).
"""

from __future__ import annotations

import logging
import sys
from typing import Optional

from transforms.core.modes import DEFAULT_MODE


def to_argv(args: list[str]) -> list[str]:
    """`--mode=X` / `--mode X` anywhere becomes the leading positional X (LMData when absent).

    Without a --runner, DataflowRunner: a template always runs on Dataflow.
    """
    mode, rest, i = DEFAULT_MODE, [], 0
    while i < len(args):
        a = args[i]
        if a.startswith("--mode="):
            mode = a.split("=", 1)[1]
        elif a == "--mode" and i + 1 < len(args):
            mode = args[i + 1]
            i += 1
        else:
            rest.append(a)
        i += 1
    if not any(a == "--runner" or a.startswith("--runner=") for a in rest):
        rest += ["--runner", "DataflowRunner"]
    return [mode] + rest


def submit(argv: list[str]):
    """Check the configuration and the output directory, build the graph and submit it; returns the PipelineResult.

    With --dry_run True nothing is written and nothing submitted: the job is only built and validated.
    """
    from pipelines import job
    from pipelines.config import load_config

    config, beam_args = load_config(argv)
    return job.launch(config, beam_args).result


def main(args: Optional[list[str]] = None) -> int:
    from pipelines.config import ConfigError
    from pipelines.plan import UserError

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        submit(to_argv(list(sys.argv[1:] if args is None else args)))
    except (ConfigError, UserError) as e:
        print(f"create_hdf5_dataset: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
