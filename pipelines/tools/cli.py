"""The tools' command line: `create_hdf5_dataset verify|inspect|report OUT ...` (also `python -m pipelines.tools`).

Each tool owns its flags (`add_parser`) and its run (`run`); this module only
dispatches, and turns usage errors and a closed pipe into exit statuses.
"""

from __future__ import annotations

import argparse
import os
import sys

from pipelines.tools import inspect_rows, report, verify
from pipelines.tools.common import UsageError

__all__ = ["main"]

_TOOLS = {"verify": verify, "inspect": inspect_rows, "report": report}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="create_hdf5_dataset", description="Check, inspect or report on an output "
                                "directory of create_hdf5_dataset (or of the reference).")
    sub = p.add_subparsers(dest="tool", required=True)
    for tool in _TOOLS.values():
        tool.add_parser(sub)
    return p


def main(argv: list[str]) -> int:
    """Run a tool; argv[0] is the tool's name. Returns the exit status."""
    try:
        return _main(argv)
    except BrokenPipeError:
        # `inspect ... | head`: the reader left; not an error, and no traceback at exit.
        sys.stdout = open(os.devnull, "w")
        return 0


def _main(argv: list[str]) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # argparse: usage errors (2) and --help (0)
        return int(e.code or 0)
    try:
        return _TOOLS[args.tool].run(args)
    except UsageError as e:
        print(f"create_hdf5_dataset {args.tool}: error: {e}", file=sys.stderr)
        return 2
