"""Markers and fixtures shared by the suite."""

import atexit
import fnmatch
import os
import shutil
import tempfile

import pytest

_SESSION_CACHE = None
_SESSION_TMP = None
_SHARED_CACHE_ENV = "CREATE_HDF5_DATASET_TEST_CACHE"

# What code under test makes in the temporary directory and must remove: Beam's directory of each pipeline
# (removed only when the pipeline runs) and ours (mkdtemp(prefix="create_hdf5_dataset_...")).
_LEFT_BEHIND = ("beam-pipeline-temp*", "create_hdf5_dataset_*")


def pytest_configure(config):
    # mutmut runs each mutant in a process forked after the tests ran once; gRPC, which the Beam SDK
    # workers talk through, does not survive a fork, so these tests would hang there. scripts/mutation.py
    # leaves them out; the whole suite runs them.
    config.addinivalue_line("markers", "worker_processes: starts Beam SDK worker processes (not in mutation runs)")
    config.addinivalue_line("markers", "engines: runs jobs on real Beam engines (Prism, Flink, Spark)")
    config.addinivalue_line("markers", "engine_matrix: the whole real-engine matrix (make test-runners, not make test)")
    # The machine's temporary directory is shared (other users, other runs of the suite): each test process
    # (pytest-xdist's workers, each its own session) has one of its own, inherited by the processes its tests
    # start, so that what a test leaves there is found and named (_no_temporary_directory_left), and removed.
    # pytest's own tmp_path directories stay where they were, for a look after a failure.
    global _SESSION_CACHE, _SESSION_TMP
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
    _SESSION_TMP = tempfile.mkdtemp(prefix="create_hdf5_dataset-test-tmp-")
    os.environ["TMPDIR"] = tempfile.tempdir = _SESSION_TMP
    # Registered first, so it runs last at exit: after Beam's own exit handlers (a job server it started removes
    # its directory in there) have found their directories where they left them.
    atexit.register(shutil.rmtree, _SESSION_TMP, ignore_errors=True)
    # Go keeps its build cache under XDG_CACHE_HOME too: Prism's build (scripts/engines.py, in a fresh clone's
    # .runners/) is to find the user's, warm, not compile Beam's Go SDK again for two minutes in an empty one.
    os.environ.setdefault("GOCACHE", os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "go-build"))
    # The encoders' load checks keep their results in the user's cache directory
    # (transforms/core/tokenizer/machine_cache.py): the suite keeps its own, so that
    # it neither reads what an earlier run left nor leaves anything in the user's home.
    # Set here, not in a fixture, so that worker processes inherit it. pytest-xdist's workers share the one their
    # controller made (they start from its environment, and it outlives them), as the processes of one machine
    # share a user's: each tokenizer's check runs once a run, not once per worker.
    shared = os.environ.get(_SHARED_CACHE_ENV) if os.environ.get("PYTEST_XDIST_WORKER") else None
    _SESSION_CACHE = shared if shared and os.path.isdir(shared) else tempfile.mkdtemp(
        prefix="create_hdf5_dataset-test-cache-")
    os.environ["XDG_CACHE_HOME"] = os.environ[_SHARED_CACHE_ENV] = _SESSION_CACHE


# The files whose tests take longest (summed, measured on make test's two workers), first: pytest-xdist hands
# whole files (--dist loadfile) to its workers in the order they are collected, so a long file collected last
# keeps one worker busy while the other has nothing left. The rest keep their order, as each file its tests'.
_LONGEST_FIRST = ("test_engines.py", "test_docs.py", "test_read_hooks.py", "test_tiktoken_backend.py",
                  "test_fast_encoder.py", "test_every_job_verifies.py", "test_estimate.py",
                  "test_cerebras210_configs.py", "test_bad_input.py", "test_dedup_job.py", "test_shuffle_resume.py",
                  "test_fast_ftfy.py", "test_gcs.py", "test_tokenizer.py", "test_estimate_jobs.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest as collected


def pytest_unconfigure(config):
    """The session's temporary directory goes (the cache and pytest-xdist's workers' directories too), but for
    what Beam's job servers still hold: their own exit handlers remove it, then the one registered above."""
    if not _SESSION_TMP:
        return
    for name in os.listdir(_SESSION_TMP):
        if not fnmatch.fnmatch(name, "beam-temp*"):
            path = os.path.join(_SESSION_TMP, name)
            shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.remove(path)


def _left_behind() -> set:
    try:
        names = os.listdir(_SESSION_TMP)
    except OSError:
        return set()
    return {n for n in names if any(fnmatch.fnmatch(n, pattern) for pattern in _LEFT_BEHIND)}


def _remove(names) -> None:
    for name in names:
        shutil.rmtree(os.path.join(_SESSION_TMP, name), ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _no_temporary_directory_left_at_the_end():
    """What a module's or the session's fixtures left (a test's own is named by _no_temporary_directory_left)."""
    yield
    left = _left_behind()
    _remove(left)
    assert not left, f"left in the temporary directory by this test process: {', '.join(sorted(left))}"


@pytest.fixture(autouse=True)
def _no_temporary_directory_left():
    """A test fails that leaves a Beam pipeline's or our temporary directory behind (a user's run would too)."""
    before = _left_behind()
    yield
    left = _left_behind() - before
    _remove(left)  # said once, by the test that left it
    assert not left, f"left in the temporary directory: {', '.join(sorted(left))}"


@pytest.fixture
def fresh_load_checks(monkeypatch, tmp_path):
    """A new process on a new machine, as far as the encoders' load checks go: for a test that replaces a check."""
    from transforms.core.tokenizer import backends, fast

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg_cache"))
    # Restored afterwards: what the replaced check gave must not outlive the test in this process.
    monkeypatch.setattr(backends, "_CORES", backends.OrderedDict())
    monkeypatch.setattr(backends, "_TABLES", backends._TABLES.fresh())
    monkeypatch.setattr(fast, "_CHECKS", fast._CHECKS.fresh())
