"""The create_hdf5_dataset console script: the process is prepared before the command's imports.

What only a process's first lines can set is in `pipelines.process`; here it
runs before `pipelines.create_hdf5_dataset` (and with it numpy and Beam) is
imported, and hands the command the flags it parsed.
"""

from pipelines import process

__all__ = ["cli", "preprocess_data"]


def cli() -> None:
    head_start = process.prepare()
    from pipelines.create_hdf5_dataset import cli as run_command

    run_command(head_start)


def preprocess_data() -> None:
    """Cerebras 2.10's command: `preprocess_data --config cfg.yaml`, the same job as
    `create_hdf5_dataset --config cfg.yaml` (further flags and Beam options may follow)."""
    import sys

    argv = sys.argv[1:]
    if not argv or not (argv[0] == "--config" or argv[0].startswith("--config=")):
        print("usage: preprocess_data --config cfg.yaml [flags] [Beam options]\n"
              "preprocess_data: error: --config is required (a Cerebras 2.10 preprocess_data config)",
              file=sys.stderr)
        raise SystemExit(2)
    cli()
