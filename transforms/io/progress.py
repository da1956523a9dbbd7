"""A progress bar over the job's work time, at the costs this run measures: its ETA holds whatever the settings.

Every packing group carries its share of the input's bytes on storage (a
file's shares add up to its size). Each costly stage does every byte once and
tells the bar, in that unit, how much it has finished (`done`; by fraction of
a group, `expect` / `settle`), and when a thread of it is at work (`begin` /
`end`, `working`, `working_through`):

    read       read and parse a group                      every mode
    normalize  ftfy and the detokenizer (a split: routing)  text modes
    tokenize   the tokenizer, on a thread pool             text modes
    chat       render, tokenize, lay out the rows          Chat, Chat_VSL, DPO
    pack       pack a group, or build its rows             text modes
    fim        FIM on a group's rows                       FIM
    encode     compress the rows, with their statistics    every mode: the last stage

The wall time is shared among the stages at work (two at once get half of it
each, and a stage's part is shared among its threads), so the seconds a stage
spent on the bytes it finished are its cost in this run: ftfy, the tokenizer
backend or the mode change the costs and the bar follows them, where a fixed
split of each group between stages cannot. A stage has its bytes left to do
at its cost so far; the bar stands at the time of the work finished over that
time plus the time left (`estimate`), and the ETA is the time left at the
pace of the run so far (wall time over time in the stages: time in none, such
as a gap between groups, counts in proportion).

Pack and encode start only once a whole group is tokenized, in a small job
half-way through. Until then their cost is a prior: this machine's time to
compress an int32 with the job's compressor (timed when the sink is built)
times a constant per token the tokenizer has produced so far (`ROWS_COST`;
the sink tells the rows' width); it weighs as much as `PRIOR_WEIGHT` of the
input's bytes of their own measured work, so it fades as they measure theirs.

The position never goes back (an estimate lower than what is shown leaves the
bar where it is) and stops a byte short of the total until encode has finished
every byte, so the bar reaches the total exactly once, when the last rows are
compressed. Elapsed time counts from the command's start; the pace from the
first stage at work.

One bar per process, made by the launcher and told by any DoFn in the same
process (the in-memory runner); elsewhere every call is a no-op (on Dataflow,
progress is the Beam counters). Drawn only where the launcher asks for it
(stderr a terminal, --display_pbar True). `estimate` and `WorkClock` are the
arithmetic: plain Python, with time passed in.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
import zlib
from collections import Counter
from typing import Callable, Iterable, Mapping, Optional

from transforms.core.units import shares  # noqa: F401 - the stages cut a group's share with it

__all__ = ["start", "row_width", "compressor", "begin", "end", "working", "working_through", "done", "expect",
           "settle", "advance", "count", "finish", "process_start_time", "shares", "StageTimes", "WorkClock",
           "estimate", "seconds_per_value", "FINAL", "FOLLOWING", "ROWS_COST", "PRIOR_WEIGHT"]

FINAL = "encode"  # the last stage: the bar is full when it has finished every byte
# The stages that follow a tokenizing stage and only start once a whole group is tokenized.
FOLLOWING = {"tokenize": ("pack", "encode"), "chat": ("encode",)}
# Their cost before they have measured their own, per token produced, in units of this machine's time to
# compress an int32 with the job's compressor (`seconds_per_value`, `compressor`): packing a group;
# compressing its rows with their statistics, per int32 of a row's position (3 features; VSL 5, DPO 6:
# `row_width`). Fitted with `make progress-eta` (2 cores), whose last column is this prior over the time
# pack and encode took.
ROWS_COST = {"pack": 0.9, "encode": 1.1}
# The prior weighs as much as a stage's own cost measured over this share of the input's bytes.
PRIOR_WEIGHT = 0.05


# ----------------------------------------------------------------------------------------- the arithmetic


@dataclasses.dataclass
class StageTimes:
    """What a stage has done so far."""

    done: int = 0  # input bytes it has finished
    done_seconds: float = 0.0  # the wall seconds of the work that finished them
    seconds: float = 0.0  # all the wall seconds it has had, work under way included
    startup_done: int = 0  # of `done` and `done_seconds`, those of each worker's first report: its start-up
    startup_seconds: float = 0.0

    def own(self) -> tuple[int, float]:
        """(bytes, seconds) its cost is measured over: past each worker's start-up, once there are any."""
        if self.done > self.startup_done:
            return self.done - self.startup_done, self.done_seconds - self.startup_seconds
        return self.done, self.done_seconds


def estimate(todo: int, stages: Mapping[str, StageTimes], elapsed: float, *,
             priors: Optional[Mapping[str, float]] = None, prior_bytes: float = 0.0) -> Optional[tuple[float, float]]:
    """(the fraction of the work's time done, the seconds left), or None while some stage's cost is unknown.

    `todo`: input bytes every stage has to finish; `stages`: what each has
    done; `elapsed`: wall seconds since work began; `priors`: seconds per byte
    for stages with a cost before their own (listed in `stages` or not: they
    are to come), weighing as much as `prior_bytes` of their own bytes.

    A stage's cost per byte is the seconds of its finished work over the
    bytes it finished, past each worker's first report (a tokenizer's first
    call builds its caches) once it has more; its time left is its bytes left
    at that cost (work under way counts as not done: it is when it is
    reported). The time left is that of all stages together, at the pace of
    the run so far: `elapsed` over the seconds the stages have had, so wall
    time in no stage counts in proportion.

    >>> est = estimate(100, {"tokenize": StageTimes(50, 5.0, 5.0), "encode": StageTimes(0, 0.0, 1.0)}, 6.0,
    ...                priors={"encode": 0.2})  # tokenize: 50 B in 5 s; encode: 100 B to do at 0.2 s each
    >>> [round(x, 3) for x in est]  # 5 s done, 5 + 20 s left, at 6 s of wall time for 6 s in the stages
    [0.167, 25.0]
    """
    priors = priors or {}
    spent = sum(s.seconds for s in stages.values())
    if spent <= 0 or elapsed <= 0:
        return None
    finished, left = 0.0, 0.0
    for name in sorted(set(stages) | set(priors)):
        s = stages.get(name) or StageTimes()
        prior, (own, own_seconds) = priors.get(name), s.own()
        if prior is not None:
            if s.done == s.startup_done:
                own, own_seconds = 0, 0.0  # its start-up alone says little: the prior stands
            cost = (prior * prior_bytes + own_seconds) / (prior_bytes + own) if prior_bytes + own else prior
        elif own:
            cost = own_seconds / own
        else:
            return None  # at work, with no cost yet
        finished += s.done_seconds
        left += max(0, todo - s.done) * cost
    if finished + left <= 0:
        return None
    return finished / (finished + left), left * elapsed / spent


class WorkClock:
    """The stages' work: bytes done, and wall time shared among the stages at work (no Beam, no terminal).

    Time is passed in (`now`, any monotonic clock). A worker (a thread) works
    for one stage at a time. At each call, the time since the previous one goes
    in equal parts to the stages that had a worker at work, and a stage's part
    in equal parts to its workers: when a worker reports bytes done, the time it
    had since its last report is the cost of those bytes, so work still under
    way on other workers does not count against them; a worker's first report
    of a stage carries its start-up (`StageTimes.own`).

    >>> c = WorkClock(100)
    >>> c.begin("w1", 0.0, "tokenize"); c.begin("w2", 1.0, "encode"); c.end("w1", 3.0, "tokenize", 10)
    >>> c.stages["tokenize"].done_seconds, c.stages["encode"].seconds  # 1 s alone, then 2 s shared
    (2.0, 1.0)
    """

    def __init__(self, total: int):
        self.total = total
        self.skipped = 0  # bytes needing no work (done by an earlier attempt)
        self.stages: dict[str, StageTimes] = {}
        self.tokens = 0  # produced so far by the tokenizing stage
        self.positions = 0  # of the rows they fill, where a stage says (padded rows); else the tokens
        self.first: Optional[float] = None  # when a stage first began
        self._working: dict = {}  # worker -> stage
        self._pending: Counter = Counter()  # worker -> seconds it had since it last reported bytes
        self._reported: set = set()  # (worker, stage) past its first report
        self._last: Optional[float] = None

    def _tick(self, now: float) -> None:
        if self._last is not None and now > self._last and self._working:
            workers: dict = {}
            for worker, stage in self._working.items():
                workers.setdefault(stage, []).append(worker)
            for stage, them in workers.items():
                share = (now - self._last) / len(workers)
                self.stages[stage].seconds += share
                for worker in them:
                    self._pending[worker] += share / len(them)
        if self._last is None or now > self._last:
            self._last = now

    def begin(self, worker, now: float, stage: str) -> None:
        """`worker` starts working for `stage` (leaving what it worked for)."""
        self.end(worker, now)
        self.stages.setdefault(stage, StageTimes())
        self._working[worker] = stage
        if self.first is None:
            self.first = now

    def done(self, worker, now: float, stage: str, nbytes: int) -> None:
        """`stage` finished `nbytes`, reported by `worker`: the work it did for the stage since its last report."""
        self._tick(now)
        s = self.stages.setdefault(stage, StageTimes())
        s.done += nbytes
        if nbytes > 0 and self._working.get(worker) == stage:
            seconds = self._pending.pop(worker, 0.0)
            s.done_seconds += seconds
            if (worker, stage) not in self._reported:
                self._reported.add((worker, stage))
                s.startup_done += nbytes
                s.startup_seconds += seconds

    def end(self, worker, now: float, stage: Optional[str] = None, nbytes: int = 0) -> None:
        """`worker` stops working, `stage` having finished `nbytes` with the work (which counts, bytes or not)."""
        if stage is not None:
            self.done(worker, now, stage, nbytes)
        self._tick(now)
        was = self._working.pop(worker, None)
        if was is not None:
            self.stages[was].done_seconds += self._pending.pop(worker, 0.0)

    @property
    def finished(self) -> int:
        """Bytes the last stage has finished (or that needed no work)."""
        return self.skipped + (self.stages[FINAL].done if FINAL in self.stages else 0)

    def estimate(self, now: float, rows_seconds_per_token: Optional[Mapping[str, float]] = None
                 ) -> Optional[tuple[float, float]]:
        """(the fraction of the bar, the seconds left) as of `now`, or None while unknown.

        `rows_seconds_per_token`: the priors of the stages after the tokenizing
        one (FOLLOWING), per token it has produced (per position of the rows
        they fill, where padded rows make those more).
        """
        self._tick(now)
        tokenizing = [name for name in FOLLOWING if name in self.stages and self.stages[name].done]
        if not self.total or not tokenizing or not self.tokens or self.first is None:
            return None  # the later stages' costs follow the tokens: nothing is known before
        todo = self.total - self.skipped
        priors = {}
        for name in tokenizing:
            for stage in FOLLOWING[name]:
                if rows_seconds_per_token and stage in rows_seconds_per_token:
                    priors[stage] = rows_seconds_per_token[stage] * (self.positions or self.tokens) / \
                        self.stages[name].done
        est = estimate(todo, self.stages, now - self.first, priors=priors, prior_bytes=PRIOR_WEIGHT * todo)
        if est is None:
            return None
        fraction, left = est
        return (self.skipped + todo * fraction) / self.total, left


def seconds_per_value(compress: Optional[Callable[[bytes], bytes]] = None, *, rows: int = 16, msl: int = 2048,
                      repeats: int = 5) -> float:
    """This machine's time to compress an int32 of token rows (the encoder's main cost) with `compress`
    (bytes -> bytes; default zlib at level 4): the best of `repeats` (a few ms in all)."""
    import numpy as np

    compress = compress or (lambda data: zlib.compress(data, 4))
    # Token ids a little like text's: a few frequent, many rare (they compress at nearly real rows' speed).
    ids = ((np.random.default_rng(0).zipf(1.2, size=(rows, msl + 1)) - 1) % 50257).astype(np.int32)
    data = np.stack([ids[:, :-1], np.ones((rows, msl), np.int32), ids[:, 1:]], axis=1)
    chunks = [row.tobytes() for row in data]
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        for chunk in chunks:
            compress(chunk)
        times.append(time.perf_counter() - started)
    return min(times) / data.size


# ------------------------------------------------------------------------------------------------ the bar

_lock = threading.Lock()
_bar = None
_clock: Optional[WorkClock] = None
_unit: Optional[float] = None  # seconds to compress an int32 with the job's compressor (timed when told it)
_features = 3  # int32 a row holds per position
_eta: Optional[tuple[float, float]] = None  # (seconds left, when estimated)
_counts: Counter = Counter()
_expected: dict = {}  # group -> [its bytes, {stage: bytes of them done}]
_overshoot = 0  # work finished past the total: a bug in the shares (tests check it stays 0)

# What the postfix shows, in this order, and how.
_SHOWN = (("documents", "docs", False), ("tokens", "tokens", True), ("sequences", "sequences", False),
          ("bad", "bad", False))


def process_start_time() -> float:
    """When this process started (time.time() scale): the command's start, imports included."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return _IMPORTED


_IMPORTED = time.time()


def _bar_class():
    from tqdm import tqdm

    class _Bar(tqdm):
        """tqdm whose elapsed time starts at the command's start and whose ETA is the work clock's."""

        def __init__(self, *args, command_started: float, **kwargs):
            self._command_started = command_started
            super().__init__(*args, **kwargs)

        @property
        def format_dict(self):
            d = super().format_dict
            now = self._time()
            d["elapsed"] = now - self._command_started
            eta = _eta
            d["rate"] = None
            if eta is not None and self.total and self.n < self.total:
                left = eta[0] - (time.perf_counter() - eta[1])
                # tqdm shows (total - n) / rate as the time left: the rate at which the bar ends on time.
                d["rate"] = (self.total - self.n) / max(left, 1e-3)
            return d

    return _Bar


def start(total: Optional[int], *, file, command_started: Optional[float] = None) -> None:
    """Draw a bar on `file` for `total` bytes of input (None: unknown, counts only)."""
    global _bar, _clock, _unit, _features, _eta, _overshoot
    with _lock:
        if _bar is not None:
            _bar.close()
        _counts.clear()
        _expected.clear()
        _overshoot = 0
        _eta = None
        _clock = WorkClock(total or 0)
        _unit, _features = None, 3
        _bar = _bar_class()(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="tokenizing",
                            file=file, dynamic_ncols=True, mininterval=0.2, miniters=0,
                            command_started=process_start_time() if command_started is None else command_started)


def row_width(features: int) -> None:
    """The rows hold `features` int32 a position (3; VSL 5; DPO 6): the encoder's prior follows.

    Told by the sink when the job graph is built (after the bar started).
    """
    global _features
    _features = features


def compressor(compress: Callable[[bytes], bytes]) -> None:
    """The job compresses its rows with `compress` (bytes -> bytes): timed now, the unit of the priors.

    Told by the sink when the job graph is built (after the bar started).
    """
    global _unit
    if _bar is not None:
        _unit = seconds_per_value(compress)


def _rows_cost() -> dict:
    """Seconds per token of the stages after the tokenizing one, before they have their own."""
    global _unit
    if _unit is None:  # not told the compressor: zlib's
        _unit = seconds_per_value()
    return {"pack": ROWS_COST["pack"] * _unit, "encode": ROWS_COST["encode"] * _unit * _features}


def _show() -> None:
    """Move the bar to the clock's estimate (under the lock): forwards only, the total only when all is done."""
    global _eta, _overshoot
    now = time.perf_counter()
    total = _bar.total
    finished = _clock.finished
    if total is None:
        target = finished
    elif finished >= total:
        _overshoot += finished - total
        target, _eta = total, None
    else:
        est = _clock.estimate(now, _rows_cost())
        if est is None:
            target = 0
        else:
            target, _eta = min(total - 1, int(total * est[0])), (est[1], now)
    if target > _bar.n:
        _bar.update(target - _bar.n)
        if _bar.n == total:
            _bar.refresh()  # drawn when it happens, not when the bar is closed
    elif _bar._time() - _bar.last_print_t >= _bar.mininterval:
        _bar.refresh()  # the ETA moved
        _bar.last_print_t = _bar._time()


def _call(method: str, *args) -> None:
    if _bar is None:
        return
    with _lock:
        if _bar is None:
            return
        getattr(_clock, method)(threading.get_ident(), time.perf_counter(), *args)
        _show()


def begin(stage: str) -> None:
    """The calling thread starts working for `stage`."""
    _call("begin", stage)


def end(stage: str, nbytes: int = 0) -> None:
    """The calling thread stops working for `stage`, which finished `nbytes` of the input with that work."""
    _call("end", stage, nbytes)


@contextlib.contextmanager
def working(stage: str, *, key: Optional[str] = None, nbytes: int = 0):
    """The calling thread works for `stage` in the block; then `nbytes` are done, or the rest of group `key`'s share."""
    begin(stage)
    try:
        yield
        if key is not None:
            settle(key, 1.0, stage=stage)
        elif nbytes:
            done(stage, nbytes)
    finally:
        end(stage)


def working_through(stage: str, items: Iterable, nbytes: Callable[[object], int]):
    """`items` (an iterator), the calling thread at work for `stage` while it makes each one; each `nbytes(item)` done.

    For a generator that is suspended while the work it hands on is done downstream (in the same thread).
    """
    items = iter(items)
    while True:
        begin(stage)
        try:
            item = next(items)
        except StopIteration:
            end(stage)
            return
        except BaseException:
            end(stage)
            raise
        end(stage, nbytes(item))
        yield item


def done(stage: str, nbytes: int) -> None:
    """`stage` finished `nbytes` of the input (the calling thread's work for it goes on)."""
    _call("done", stage, nbytes)


def expect(key: str, nbytes: int) -> None:
    """Group `key` holds `nbytes` of the input: the later stages say how much of it they did with `settle`."""
    if _bar is None:
        return
    with _lock:
        _expected[key] = [nbytes, Counter()]


def settle(key: str, fraction: float, *, stage: str = FINAL) -> None:
    """`stage` has done `fraction` of group `key`'s share (1: all of it; the last stage's 1 ends the group)."""
    if _bar is None:
        return
    with _lock:
        entry = _expected.get(key)
        if entry is None:
            return
        share, settled = entry
        target = share if fraction >= 1 else min(share, int(share * fraction))
        step = max(0, target - settled[stage])
        settled[stage] += step
        if fraction >= 1 and stage == FINAL:
            del _expected[key]
        _clock.done(threading.get_ident(), time.perf_counter(), stage, step)
        _show()


def advance(nbytes: int) -> None:
    """Input bytes that need no work (done by an earlier attempt, or after a file's last group)."""
    if _bar is None or nbytes <= 0:
        return
    with _lock:
        if _bar is None:
            return
        _clock.skipped += nbytes
        _show()


def count(name: str, n: int = 1) -> None:
    """Add to a counter shown beside the bar (documents, tokens, sequences, bad; positions: of the rows, not shown)."""
    if _bar is None or not n:
        return
    with _lock:
        if _bar is None:
            return
        _counts[name] += n
        if name == "tokens":
            _clock.tokens += n
        elif name == "positions":
            _clock.positions += n
        parts = []
        for key, label, scaled in _SHOWN:
            if _counts[key] or key in ("documents", "tokens", "sequences"):
                value = _counts[key]
                parts.append(f"{label} {_scaled(value) if scaled else f'{value:,}'}")
        _bar.set_postfix_str(" · ".join(parts), refresh=False)


def _scaled(n: int) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def finish() -> None:
    """Close the bar (at the end of the job, whether it succeeded or not)."""
    global _bar
    with _lock:
        if _bar is not None:
            _bar.close()
            _bar = None
