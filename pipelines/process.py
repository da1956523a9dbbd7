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
  here, and only here: main() is handed what they gave (a `HeadStart`). A
  usage error or --help ends the process here, as main() would have; a
  ConfigError is kept for main() to report; anything that goes wrong on the
  thread is left for plan_job to find and report, as without the head start.

Both entry points use it: the console script (`pipelines.command`) and
`python -m pipelines.create_hdf5_dataset`, whose first lines call `prepare`.
None of it changes what a job writes.
"""

import dataclasses
import gc
import logging
import os
import sys
import threading
from typing import Optional

__all__ = ["prepare", "started", "configure_logging", "HeadStart"]


@dataclasses.dataclass(frozen=True)
class HeadStart:
    """The command's arguments as its first lines read them, handed to main(), which does not parse them again."""

    argv: tuple  # the command's arguments
    loaded: Optional[tuple] = None  # what load_config made of the job's flags: (Config, Beam's arguments)
    error: Optional[Exception] = None  # or the ConfigError it raised instead, for main() to report
    thread: Optional[threading.Thread] = None  # building the job's tokenizer (none for flags that were refused)

    def load(self) -> tuple:
        """(Config, Beam's arguments), as load_config gave them here; or its ConfigError, raised."""
        if self.error is not None:
            raise self.error
        return self.loaded


def prepare(argv: Optional[list] = None) -> Optional[HeadStart]:
    """Before numpy and Beam are imported: `argv` the command's arguments (sys.argv[1:] when None).

    Returns what the head start made of them, for main(); None when it had nothing to do (a tool, no
    arguments, the estimate's --help), and main() reads the arguments itself.
    """
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    gc.disable()
    return _head_start(sys.argv[1:] if argv is None else argv)


def configure_logging() -> None:
    """The command's log format (before the head start, whose tokenizer may say why it passed over fastokens)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


def _head_start(argv: list) -> Optional[HeadStart]:
    from pipelines.config import TOOLS, ConfigError, load_config, split_estimate_args

    job_argv = argv
    if argv and argv[0] == "estimate":  # the job's flags after it, and the estimate's own
        try:
            job_argv = split_estimate_args(argv[1:])[0]
        except ConfigError:
            return None  # the estimate's main() says what is wrong
        if not job_argv or job_argv[0].startswith("-"):  # --help, or no mode: the estimate's main() answers
            return None
    if not job_argv or job_argv[0] in TOOLS:
        return None
    try:
        loaded = load_config(job_argv)
    except ConfigError as e:
        return HeadStart(tuple(argv), error=e)  # main() says what is wrong
    configure_logging()
    # Imported here, not on the thread: two threads importing the same modules at once is asking for trouble.
    from pipelines.job_tokenizer import warm

    thread = threading.Thread(target=_warm, args=(warm, loaded[0]), name="head-start", daemon=True)
    thread.start()
    return HeadStart(tuple(argv), loaded=loaded, thread=thread)


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

