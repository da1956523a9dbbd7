"""The create_hdf5_dataset command's own process: what only its first lines can set.

A job on the bench corpus takes about 5 s, half of it start-up: importing
Beam and numpy, building the tokenizer and the job graph. Three things
shorten that and must happen before those imports:

- OpenBLAS, numpy's BLAS, starts a thread per core when numpy loads, and
  those threads spin on the cores the start-up needs. The job never calls
  BLAS: one thread, unless the user set OPENBLAS_NUM_THREADS.
- Python's cyclic garbage collector walks every object it tracks, again and
  again while the imports make about 180,000 of them (functions, classes,
  Beam's graph), and finds nothing to free (0.1-0.2 s). It is off until the
  imports are done (`prepare`); then they are frozen out of every later
  collection and it is on again for the job (`started`).
- Importing Beam holds the GIL on one core for most of a second. The job's
  tokenizer, which needs no Beam, is built meanwhile on a thread
  (`pipelines.job_tokenizer.warm`; fastokens loads without the GIL), and
  `plan_job` finds it in the process's cache. The flags are parsed for it
  here first: a usage error or --help ends the process here, as main()
  would have; anything else that goes wrong on that thread is left for
  main() to find and report, as without the head start.

Both entry points use it: the console script (`pipelines.command`) and
`python -m pipelines.create_hdf5_dataset`, whose first lines call `prepare`.
None of it changes what a job writes.
"""

import gc
import logging
import os
import sys
import threading
from typing import Optional

__all__ = ["prepare", "started", "configure_logging"]


def prepare(argv: Optional[list] = None) -> Optional[threading.Thread]:
    """Before numpy and Beam are imported: `argv` the command's arguments (sys.argv[1:] when None).

    Returns the head start's thread, if there is one (tests wait for it).
    """
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    gc.disable()
    return _head_start(sys.argv[1:] if argv is None else argv)


def configure_logging() -> None:
    """The command's log format (before the head start, whose tokenizer may say why it passed over fastokens)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


def _head_start(argv: list) -> Optional[threading.Thread]:
    from pipelines.config import TOOLS, ConfigError, load_config

    if argv and argv[0] == "estimate":  # the job's flags after it, and the estimate's own
        from pipelines.estimate import job_arguments

        try:
            argv = job_arguments(argv[1:])
        except ConfigError:
            return None
        if not argv or argv[0].startswith("-"):  # --help, or no mode: the estimate's main() answers
            return None
    if not argv or argv[0] in TOOLS:
        return None
    try:
        config, _ = load_config(argv)
    except ConfigError:
        return None  # main() says what is wrong
    configure_logging()
    # Imported here, not on the thread: two threads importing the same modules at once is asking for trouble.
    from pipelines.job_tokenizer import warm

    thread = threading.Thread(target=_warm, args=(warm, config), name="head-start", daemon=True)
    thread.start()
    return thread


def _warm(warm, config) -> None:
    try:
        warm(config)
    except Exception:  # noqa: BLE001 - plan_job builds it again and reports what is wrong
        pass


def started() -> None:
    """The imports are done: what they made stays out of later collections, and collection is on again.

    Only for a process that ends with the job (`create_hdf5_dataset.cli`): a
    frozen object is never collected, even when it is garbage.
    """
    gc.freeze()
    gc.enable()

