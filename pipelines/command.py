"""The create_hdf5_dataset console script: the process is prepared before the command's imports.

What only a process's first lines can set is in `pipelines.process`; here it
runs before `pipelines.create_hdf5_dataset` (and with it numpy and Beam) is
imported.
"""

from pipelines import process

__all__ = ["cli"]


def cli() -> None:
    process.prepare()
    from pipelines.create_hdf5_dataset import cli as run_command

    run_command()
