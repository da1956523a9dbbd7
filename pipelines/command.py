"""The create_hdf5_dataset command's own process: what only its first lines can set.

A job on the bench corpus takes about 5 s, half of it start-up: importing
Beam and numpy, building the tokenizer and the job graph. Two settings of the
process shorten that and must be made before those imports:

- OpenBLAS, numpy's BLAS, starts a thread per core when numpy loads, and
  those threads spin on the cores the start-up needs. The job never calls
  BLAS: one thread, unless the user set OPENBLAS_NUM_THREADS.
- Python's cyclic garbage collector walks every object it tracks, again and
  again while the imports make about 180,000 of them (functions, classes,
  Beam's graph), and finds nothing to free (0.1-0.2 s). It is off until the
  imports are done (`prepare`); then they are frozen out of every later
  collection and it is on again for the job (`started`).

Both entry points use it: the console script (`cli` here) and
`python -m pipelines.create_hdf5_dataset`, whose first lines call `prepare`.
Neither changes what a job writes.
"""

import gc
import os

__all__ = ["prepare", "started", "cli"]


def prepare() -> None:
    """Before numpy and Beam are imported."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    gc.disable()


def started() -> None:
    """The imports are done: what they made stays out of later collections, and collection is on again.

    Only for a process that ends with the job (`create_hdf5_dataset.cli`): a
    frozen object is never collected, even when it is garbage.
    """
    gc.freeze()
    gc.enable()


def cli() -> None:
    """The console script."""
    prepare()
    from pipelines.create_hdf5_dataset import cli as run_command

    run_command()
