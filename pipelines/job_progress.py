"""The progress of a job that runs elsewhere (Prism, Flink, Spark, Dataflow), from the job's own Beam counters.

Where the SDK workers are other processes, transforms/io/progress.py (one
bar per process, told by the DoFns) sees nothing. So the last stage,
EncodeRows, counts in a Beam counter (PROGRESS_NAMESPACE / PROGRESS_COUNTER,
transforms/stages/hdf5_sink.py)
the input bytes on storage each block it compressed stands for: its group's
share (a file's shares add up to its size; a split job's parts share their
group's). The launcher asks the running job for that counter every
`interval` seconds and moves a bar over the input's bytes, or, without a
terminal, logs a line now and then. Prism and Dataflow answer the counter
while the job runs; Beam's Flink job server only at the end, so on Flink the
launcher asks the cluster's REST API (`FlinkRestMetrics`, from --flink_master).

The position is a byte short of the total until the job has succeeded, never
goes back, and reaches the total once, at the end (`position`): the counter is
"attempted", and a bundle that fails and runs again counts twice while it
runs. Without a known total (inputs whose sizes the launcher does not ask
for, in a bucket) it shows the bytes counted.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from typing import Callable, Optional

from transforms.stages.hdf5_sink import PROGRESS_COUNTER, PROGRESS_NAMESPACE

__all__ = ["position", "counted", "live_metrics", "FlinkRestMetrics", "JobProgress"]

POLL_SECONDS = 1.0  # how often the launcher asks the running job


def position(counted_bytes: int, total: Optional[int], shown: int, succeeded: bool) -> int:
    """Where the bar goes: forwards only, a byte short of `total` until the job has succeeded.

    >>> position(50, 100, 10, False), position(150, 100, 10, False), position(5, 100, 10, False)
    (50, 99, 10)
    >>> position(99, 100, 99, True), position(7, None, 3, False)
    (100, 7)
    """
    if total is None:
        return max(shown, counted_bytes)
    if succeeded:
        return total
    return max(shown, min(counted_bytes, total - 1))


def counted(metric_results) -> int:
    """The bytes counted so far, from a MetricResults: its counter summed over steps (attempted; committed when
    a runner gives only that)."""
    from apache_beam.metrics.metric import MetricsFilter

    query = metric_results.query(MetricsFilter().with_namespace(PROGRESS_NAMESPACE).with_name(PROGRESS_COUNTER))
    total = 0
    for result in query["counters"]:
        value = result.attempted if result.attempted is not None else result.committed
        total += int(value or 0)
    return total


def live_metrics(result):
    """The running job's metrics as of now.

    A portable runner's PipelineResult (Prism, Flink, Spark) keeps the first
    answer of metrics() for good, so the job service is asked again each time;
    other results (Dataflow's) ask their service on each query.
    """
    service, job_id = getattr(result, "_job_service", None), getattr(result, "_job_id", None)
    if service is None or job_id is None:
        return result.metrics()
    from apache_beam.portability.api import beam_job_api_pb2
    from apache_beam.runners.portability.portable_runner import PortableMetrics

    return PortableMetrics(service.GetJobMetrics(beam_job_api_pb2.GetJobMetricsRequest(job_id=job_id)))


class FlinkRestMetrics:
    """A Flink job's Beam metrics as of now, from the Flink cluster's REST API.

    Beam's Flink job server answers a job's metrics only once it has ended;
    while it runs, Flink serves them as the job's `__metricscontainers`
    accumulator (Beam's MonitoringInfos as JSON: the job API's GetJobMetricsResponse),
    updated as bundles finish. The Flink job is the one whose name begins the
    Beam job's id (`<job name>_<uuid>`).
    """

    ACCUMULATOR = "__metricscontainers"

    def __init__(self, rest_url: str, beam_job_id: str):
        self._rest = rest_url.rstrip("/")
        if "://" not in self._rest:
            self._rest = "http://" + self._rest
        self._beam_job_id = beam_job_id
        self._flink_job: Optional[str] = None

    def _get(self, path: str):
        with urllib.request.urlopen(self._rest + path, timeout=5) as r:
            return json.load(r)

    def __call__(self, result=None):
        from google.protobuf import json_format

        from apache_beam.portability.api import beam_job_api_pb2
        from apache_beam.runners.portability.portable_runner import PortableMetrics

        if self._flink_job is None:
            mine = [j for j in self._get("/jobs/overview")["jobs"]
                    if self._beam_job_id == j["name"] or self._beam_job_id.startswith(j["name"] + "_")]
            if not mine:
                raise LookupError(f"no Flink job for {self._beam_job_id} yet")
            self._flink_job = max(mine, key=lambda j: j.get("start-time", 0))["jid"]
        response = beam_job_api_pb2.GetJobMetricsResponse()
        for acc in self._get(f"/jobs/{self._flink_job}/accumulators").get("user-task-accumulators", []):
            if acc["name"] == self.ACCUMULATOR:
                json_format.Parse(acc["value"], response, ignore_unknown_fields=True)
        return PortableMetrics(response)


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


class JobProgress:
    """Follows a running job's counter on a thread: a tqdm bar on a terminal, else a line every `log_every` s.

    `positions` holds every position drawn (what a test checks: forwards only, the total once, at the end).
    """

    def __init__(self, result, total: Optional[int], file, *, terminal: bool, interval: Optional[float] = None,
                 log_every: float = 30.0, metrics: Callable = live_metrics, clock: Callable = time.monotonic):
        self._result, self._total, self._file = result, total, file
        self._interval = POLL_SECONDS if interval is None else interval
        self._log_every, self._metrics, self._clock = log_every, metrics, clock
        self._started = clock()
        self._last_log = self._started
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._bar = None
        if terminal:
            from tqdm import tqdm

            self._bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="encoded", file=file,
                             dynamic_ncols=True, mininterval=0.2)
        self.shown = 0
        self.positions: list[int] = []
        self.queries_failed = 0

    def start(self) -> "JobProgress":
        self._thread = threading.Thread(target=self._loop, name="job-progress", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self.poll()

    def poll(self) -> None:
        """Ask the job once and move the bar (a failed question leaves it where it is)."""
        try:
            n = counted(self._metrics(self._result))
        except LookupError:  # the job is not running yet where its counters are read
            return
        except Exception:  # noqa: BLE001 - the runner may not answer for a moment: progress is best effort
            self.queries_failed += 1
            return
        self._move(position(n, self._total, self.shown, succeeded=False))

    def _move(self, to: int) -> None:
        if to > self.shown or not self.positions:
            self.positions.append(to)
            if self._bar is not None:
                self._bar.update(to - self.shown)
            self.shown = to
        now = self._clock()
        if self._bar is None and now - self._last_log >= self._log_every:
            self._last_log = now
            done = f"{self.shown / self._total:.0%} of the input ({_mib(self.shown)} of {_mib(self._total)})" \
                if self._total else _mib(self.shown)
            print(f"create_hdf5_dataset: {done} encoded after {now - self._started:.0f} s", file=self._file,
                  flush=True)

    def finish(self, succeeded: bool) -> None:
        """Stop following; a job that succeeded puts the bar at its total (once). Called again: nothing."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if succeeded:
            try:
                n = counted(self._metrics(self._result))
            except Exception:  # noqa: BLE001
                n = self.shown
            self._move(position(n, self._total, self.shown, succeeded=True))
        if self._bar is not None:
            self._bar.close()
