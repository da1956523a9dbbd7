"""Drop the one notice Apache Beam logs on import that is never about the user's job.

Importing `apache_beam` imports its BigQuery modules (`apache_beam.io`
re-exports them), and `apache_beam/io/gcp/internal/clients/bigquery/__init__.py`
calls `logging.warning("apitools not found, and bigquery client libraries are
not available ...")` when `google-apitools` cannot be imported: in any
environment installed without the `gcp` extra (`pip install .`). This project
never uses BigQuery, and apitools is a deprecated client that Beam is moving
off; it is not worth installing to silence a notice. Unfiltered, the notice
would be the first line of every command, `--help` included.

So a filter on the root logger (the notice is logged there) drops records
that match all three: the root logger, that module's path, that message.
Every other record passes, Beam's included. `pipelines/__init__.py` installs
it, before anything in `pipelines` imports Beam.
"""

from __future__ import annotations

import logging
import os

__all__ = ["drop_apitools_notice"]

_NOTICE = "apitools not found, and bigquery client libraries are not available"
_SOURCE = os.path.join("apache_beam", "io", "gcp", "internal", "clients", "bigquery", "__init__.py")


class _ApitoolsNoticeFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name == "root" and record.pathname.endswith(_SOURCE)
                    and isinstance(record.msg, str) and record.msg.startswith(_NOTICE))


def drop_apitools_notice() -> None:
    """Install the filter on the root logger, once per process."""
    root = logging.getLogger()
    if not any(isinstance(f, _ApitoolsNoticeFilter) for f in root.filters):
        root.addFilter(_ApitoolsNoticeFilter())


class _SaidAgainFilter(logging.Filter):
    """Drops Beam's log of an error the command says itself, cleanly, as it ends (a mixture no source can fill)."""

    def __init__(self, types: tuple):
        super().__init__()
        self._types = types

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, self._types)


def drop_errors_said_again(*types: type) -> None:
    """Beam's DoFn runner logs an exception with its traceback before re-raising it; for these types the command
    prints the one line that says what to change (pipelines.job.run), so the log is dropped."""
    logger = logging.getLogger("apache_beam.runners.common")
    if not any(isinstance(f, _SaidAgainFilter) for f in logger.filters):
        logger.addFilter(_SaidAgainFilter(types))
