"""Markers and fixtures shared by the suite."""

import os
import shutil
import tempfile

import pytest

_SESSION_CACHE = None


def pytest_configure(config):
    # mutmut runs each mutant in a process forked after the tests ran once; gRPC, which the Beam SDK
    # workers talk through, does not survive a fork, so these tests would hang there. scripts/mutation.py
    # leaves them out; the whole suite runs them.
    config.addinivalue_line("markers", "worker_processes: starts Beam SDK worker processes (not in mutation runs)")
    config.addinivalue_line("markers", "engines: runs jobs on real Beam engines (Prism, Flink, Spark)")
    config.addinivalue_line("markers", "engine_matrix: the whole real-engine matrix (make test-runners, not make test)")
    # The encoders' load checks keep their results in the user's cache directory
    # (transforms/core/tokenizer/machine_cache.py): the suite keeps its own, so that
    # it neither reads what an earlier run left nor leaves anything in the user's home.
    # Set here, not in a fixture, so that worker processes inherit it.
    global _SESSION_CACHE
    _SESSION_CACHE = tempfile.mkdtemp(prefix="create_hdf5_dataset-test-cache-")
    os.environ["XDG_CACHE_HOME"] = _SESSION_CACHE


def pytest_unconfigure(config):
    if _SESSION_CACHE:
        shutil.rmtree(_SESSION_CACHE, ignore_errors=True)


@pytest.fixture
def fresh_load_checks(monkeypatch, tmp_path):
    """A new process on a new machine, as far as the encoders' load checks go: for a test that replaces a check."""
    from transforms.core.tokenizer import backends, fast

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg_cache"))
    # Restored afterwards: what the replaced check gave must not outlive the test in this process.
    monkeypatch.setattr(backends, "_CORES", backends.OrderedDict())
    monkeypatch.setattr(backends, "_TABLES", backends._TABLES.fresh())
    monkeypatch.setattr(fast, "_CHECKS", fast._CHECKS.fresh())
