"""The progress of a job running elsewhere, without an engine: the follower over made-up counters and clocks,
and Flink's REST answer as a small local server gives it (tests/test_engines.py runs it on Prism and Flink)."""

from __future__ import annotations

import io
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from types import SimpleNamespace

import pytest

from pipelines import job_progress as jp
from transforms.stages.hdf5_sink import PROGRESS_COUNTER, PROGRESS_NAMESPACE


class _Counters:
    """A MetricResults whose counter takes the given values, one per query."""

    def __init__(self, *values, fail_at=()):
        self.values, self.fail_at, self.calls = list(values), set(fail_at), 0

    def __call__(self, result):
        self.calls += 1
        if self.calls in self.fail_at:
            raise ConnectionError("the job service did not answer")
        value = self.values.pop(0) if len(self.values) > 1 else self.values[0]
        found = [SimpleNamespace(attempted=value, committed=None)]
        return SimpleNamespace(query=lambda f: {"counters": found})


def _follower(metrics, total, terminal=False, clock=None, out=None):
    return jp.JobProgress(object(), total, out or io.StringIO(), terminal=terminal, interval=3600, metrics=metrics,
                          clock=clock or (lambda: 0.0))


def test_the_bar_goes_forwards_and_reaches_the_total_once_at_the_end():
    follower = _follower(_Counters(0, 40, 30, 100, 250, 100), total=100)
    for _ in range(5):
        follower.poll()
    # 30 after 40 (a counter read from fewer workers) leaves it; 100 and 250 (a retried bundle counted twice)
    # stop a byte short while the job runs.
    assert follower.positions == [0, 40, 99]
    follower.finish(succeeded=True)
    assert follower.positions == [0, 40, 99, 100]
    follower.finish(succeeded=True)  # again: nothing
    assert follower.positions.count(100) == 1


def test_a_job_that_failed_never_shows_its_total():
    follower = _follower(_Counters(100), total=100)
    follower.poll()
    follower.finish(succeeded=False)
    assert follower.positions == [99]


def test_without_a_total_it_shows_the_bytes_counted():
    follower = _follower(_Counters(5, 9), total=None)
    follower.poll()
    follower.poll()
    follower.finish(succeeded=True)
    assert follower.positions == [5, 9]


def test_a_question_the_runner_does_not_answer_leaves_the_bar_and_is_counted():
    follower = _follower(_Counters(10, 20, fail_at={2}), total=100)
    follower.poll()
    follower.poll()
    follower.poll()
    assert follower.positions == [10, 20] and follower.queries_failed == 1


def test_a_job_not_running_yet_is_not_a_failure():
    def not_yet(result):
        raise LookupError("no Flink job yet")

    follower = _follower(not_yet, total=100)
    follower.poll()
    assert follower.positions == [] and follower.queries_failed == 0


def test_without_a_terminal_a_line_now_and_then():
    now = [0.0]
    out = io.StringIO()
    follower = jp.JobProgress(object(), 4 << 20, out, terminal=False, interval=3600, log_every=30,
                              metrics=_Counters(1 << 20, 2 << 20, 3 << 20), clock=lambda: now[0])
    for t in (10, 31, 45):
        now[0] = t
        follower.poll()
    assert out.getvalue().splitlines() == ["create_hdf5_dataset: 50% of the input (2.0 MiB of 4.0 MiB) encoded after 31 s"]


def test_on_a_terminal_a_bar_that_ends_at_the_total():
    out = io.StringIO()
    follower = _follower(_Counters(512, 1024), total=1024, terminal=True, out=out)
    follower.poll()
    follower.finish(succeeded=True)
    assert "1.00k/1.00k" in out.getvalue() and follower.positions == [512, 1024]


def test_the_thread_polls_until_finished():
    counters = _Counters(10, 20, 30)
    follower = jp.JobProgress(object(), 100, io.StringIO(), terminal=False, interval=0.01, metrics=counters)
    follower.start()
    deadline = threading.Event()
    while counters.calls < 3 and not deadline.wait(0.01):
        pass
    follower.finish(succeeded=True)
    assert follower.positions[-1] == 100 and 30 in follower.positions


# ---------------------------------------------------------------- Flink's REST API


def _accumulator(value: int) -> str:
    from google.protobuf import json_format

    from apache_beam.metrics import monitoring_infos
    from apache_beam.portability.api import beam_job_api_pb2

    infos = [monitoring_infos.int64_user_counter(PROGRESS_NAMESPACE, PROGRESS_COUNTER, value, ptransform=step)
             for step in ("EncodeRows/Encode", "other")]
    infos.append(monitoring_infos.int64_user_counter("read", "documents", 7, ptransform="ReadCorpus"))
    # As Beam's Flink runner writes it: the job API's whole answer, {"metrics": {"attempted": [...]}}.
    return json_format.MessageToJson(
        beam_job_api_pb2.GetJobMetricsResponse(metrics=beam_job_api_pb2.MetricResults(attempted=infos)))


@pytest.fixture
def flink_rest():
    """A server answering as Flink's REST API does for two jobs, ours (BeamApp-x-1) and another."""
    state = {"value": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/jobs/overview":
                body = {"jobs": [{"jid": "aa", "name": "BeamApp-x-1", "start-time": 5, "state": "RUNNING"},
                                 {"jid": "bb", "name": "BeamApp-other", "start-time": 9, "state": "RUNNING"}]}
            elif self.path == "/jobs/aa/accumulators":
                body = {"user-task-accumulators": [
                    {"name": "__metricscontainers", "type": "MetricsAccumulator", "value": _accumulator(state["value"])}]}
            elif self.path == "/jobs/bb/accumulators":
                body = {"user-task-accumulators": [
                    {"name": "__metricscontainers", "type": "MetricsAccumulator", "value": _accumulator(10 ** 6)}]}
            else:
                self.send_error(404)
                return
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}", state
    server.shutdown()


def test_flink_rest_metrics_read_our_jobs_counter_summed_over_steps(flink_rest):
    address, state = flink_rest
    state["value"] = 21
    metrics = jp.FlinkRestMetrics(address, "BeamApp-x-1_0a1b2c")
    assert jp.counted(metrics()) == 42  # two steps of 21: the other job's counter is not ours


def test_flink_rest_metrics_before_the_job_is_listed(flink_rest):
    address, _ = flink_rest
    with pytest.raises(LookupError):
        jp.FlinkRestMetrics(address, "BeamApp-y-2_0a1b2c")()
