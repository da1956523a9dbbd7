"""Every command starts with its own output: nothing on stderr that a library logged while being imported.

Apache Beam logs "apitools not found, ..." on import wherever `google-apitools` is missing (an install
without the gcp extra); `pipelines/beam_notices.py` drops exactly that record. The tests hide apitools
from a child process to be that install, and check first that Beam does log the notice there.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import ROOT

# Run first in a child: `import apitools` then raises ImportError, as where the package is not installed.
WITHOUT_APITOOLS = "import sys; sys.modules['apitools'] = None; "
NOTICE = "apitools not found"


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=300)


def _main_without_apitools(module: str, *args: str) -> subprocess.CompletedProcess:
    code = WITHOUT_APITOOLS + f"import runpy; runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
    return _run(["-c", code, *args])


def test_help_prints_the_usage_first_and_nothing_on_stderr():
    proc = _run(["-m", "pipelines.create_hdf5_dataset", "--help"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: create_hdf5_dataset"), proc.stdout[:200]
    assert proc.stderr == ""  # no "WARNING:root:apitools not found ...", no other line that is not the tool's


@pytest.mark.parametrize("tool", ["verify", "inspect", "report"])
def test_each_tool_help_prints_its_usage_first_and_nothing_on_stderr(tool):
    proc = _run(["-m", "pipelines.create_hdf5_dataset", tool, "--help"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: create_hdf5_dataset {tool}"), proc.stdout[:200]
    assert proc.stderr == ""


def test_python_m_pipelines_tools_dispatches_like_the_main_command():
    proc = _run(["-m", "pipelines.tools", "verify", "--help"])
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout == _run(["-m", "pipelines.create_hdf5_dataset", "verify", "--help"]).stdout
    missing = _run(["-m", "pipelines.tools", "verify", str(ROOT / "no-such-dir")])
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        f"create_hdf5_dataset verify: error: no such directory: {ROOT / 'no-such-dir'}"]


def test_help_is_quiet_where_apitools_is_missing():
    beam_alone = _run(["-c", WITHOUT_APITOOLS + "import apache_beam"])
    assert NOTICE in beam_alone.stderr  # the setting does provoke Beam's notice
    proc = _main_without_apitools("pipelines.create_hdf5_dataset", "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: create_hdf5_dataset"), proc.stdout[:200]
    assert proc.stderr == ""


def test_only_beams_notice_is_dropped():
    code = WITHOUT_APITOOLS + (
        "import logging, pipelines, apache_beam; "
        f"logging.warning({NOTICE + ' (logged elsewhere: kept)'!r}); "
        "logging.getLogger('apache_beam.io').warning('a Beam warning: kept')")
    proc = _run(["-c", code])
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [f"WARNING:root:{NOTICE} (logged elsewhere: kept)",
                                        "WARNING:apache_beam.io:a Beam warning: kept"]
