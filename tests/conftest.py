"""Markers shared by the suite."""


def pytest_configure(config):
    # mutmut runs each mutant in a process forked after the tests ran once; gRPC, which the Beam SDK
    # workers talk through, does not survive a fork, so these tests would hang there. scripts/mutation.py
    # leaves them out; the whole suite runs them.
    config.addinivalue_line("markers", "worker_processes: starts Beam SDK worker processes (not in mutation runs)")
