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
half-way through (a one-group job: at the end). Until then their cost is a
prior, per position of the rows to come (a token the tokenizer has produced;
in the chat modes, a position of the rows laid out, padding included): this
machine's time to compress a position of rows of the job's width with the
job's compressor, the way the encoder does (a VSL row's token rows by the
codec's stream, its counting rows from pieces), timed when the sink is built
(`seconds_per_position`), times a constant (`ROWS_COST`). It weighs as much as
`PRIOR_WEIGHT` of the input's bytes of their own measured work, so it fades
as they measure theirs.

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
from collections import Counter
from typing import Callable, Iterable, Mapping, Optional

from transforms.core.units import shares  # noqa: F401 - the stages cut a group's share with it

__all__ = ["start", "row_width", "compressor", "begin", "end", "working", "working_through", "done", "expect",
           "settle", "advance", "count", "finish", "process_start_time", "shares", "StageTimes", "WorkClock",
           "estimate", "seconds_per_position", "FINAL", "FOLLOWING", "ROWS_COST", "PRIOR_WEIGHT"]

FINAL = "encode"  # the last stage: the bar is full when it has finished every byte
# The stages that follow a tokenizing stage and only start once a whole group is tokenized.
FOLLOWING = {"tokenize": ("pack", "encode"), "chat": ("encode",)}
# Their cost before they have measured their own, per position of the rows to come, in units of this
# machine's time to compress one position of the job's rows on one thread as the encoder does
# (`seconds_per_position`: the job's compressor and row width, told by the sink). Encode builds the rows,
# counts them (statistics, detokenized sizes) and compresses them on its threads: on the bench corpus
# (2 cores, 2026-11-24) its wall time per position, less its start-up, was 0.72-0.88 of that unit in every
# mode (per int32 of a row, the unit before, VSL rows cost 1.0-1.2 and the others 0.73-0.88). Pack lays the
# tokens out in rows (two block copies a row, or segment offsets): 0.01-0.02. `make progress-eta` shows
# this prior over the time pack and encode took, setting by setting.
ROWS_COST = {"pack": 0.02, "encode": 0.8}
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
        self.positions = 0  # of the rows they fill, where a stage says (chat modes, padding included); else the tokens
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

    def estimate(self, now: float, rows_seconds_per_position: Optional[Mapping[str, float]] = None
                 ) -> Optional[tuple[float, float]]:
        """(the fraction of the bar, the seconds left) as of `now`, or None while unknown.

        `rows_seconds_per_position`: the priors of the stages after the
        tokenizing one (FOLLOWING), per position of the rows to come: the
        positions the tokenizing stage has said its rows hold (the chat modes:
        padding included), else the tokens it has produced, over the bytes it
        has done.
        """
        self._tick(now)
        tokenizing = [name for name in FOLLOWING if name in self.stages and self.stages[name].done]
        if not self.total or not tokenizing or not self.tokens or self.first is None:
            return None  # the later stages' costs follow the tokens: nothing is known before
        todo = self.total - self.skipped
        priors = {}
        for name in tokenizing:
            for stage in FOLLOWING[name]:
                if rows_seconds_per_position and stage in rows_seconds_per_position:
                    priors[stage] = rows_seconds_per_position[stage] * (self.positions or self.tokens) / \
                        self.stages[name].done
        est = estimate(todo, self.stages, now - self.first, priors=priors, prior_bytes=PRIOR_WEIGHT * todo)
        if est is None:
            return None
        fraction, left = est
        return (self.skipped + todo * fraction) / self.total, left


def seconds_per_position(codec=None, features: int = 3, *, rows: int = 8, msl: int = 2048,
                         repeats: int = 5) -> float:
    """This machine's time to compress one position of token rows `features` int32 wide (3; VSL 5, DPO 6) with
    `codec` (a transforms.io.compressors.Codec or a zlib level; default zlib at level 4), on one thread, the
    way the encoder compresses them: the best of `repeats` over `rows` rows (a few ms in all).

    A VSL row's token rows go through the codec's stream and its counting rows (attention spans, position
    ids) are pieces deflated once per process (transforms.io.vsl_chunks): per position that costs about
    twice a 3-feature row, not 5/3 of it. A DPO row is two sides of different tokens.
    """
    import numpy as np

    from transforms.io.compressors import as_codec
    from transforms.io.vsl_chunks import compress_vsl_row

    codec = as_codec(4 if codec is None else codec)
    rng = np.random.default_rng(0)

    def tokens():  # [rows, 3, msl]: ids a little like text's (a few frequent, many rare), as real rows compress
        ids = ((rng.zipf(1.2, size=(rows, msl + 1)) - 1) % 50257).astype(np.int32)
        return np.stack([ids[:, :-1], np.ones((rows, msl), np.int32), ids[:, 1:]], axis=1)

    data, segments = tokens(), None
    if features == 6:
        data = np.concatenate([data, tokens()], axis=1)
    elif features == 5:  # documents of a few hundred positions, back to back, the row's end padding
        lengths = []
        for n in (700, 400, 300, 500, 100):
            if sum(lengths) + n <= msl:
                lengths.append(n)
        lengths = lengths or [msl]
        spans, positions = np.zeros((2, rows, msl), np.int32)
        at = 0
        for n in lengths:
            spans[:, at:at + n], positions[:, at:at + n] = np.arange(n)[::-1], np.arange(n)
            at += n
        data = np.concatenate([data, spans[:, None], positions[:, None]], axis=1)
        segments = lengths
    elif features != 3:
        data = np.concatenate([data] + [data[:, :1]] * (features - 3), axis=1)[:, :features]
    compress = codec.compress()
    if segments is None:
        chunks = [np.ascontiguousarray(row).tobytes() for row in data]
        work = lambda: [compress(chunk) for chunk in chunks]  # noqa: E731
    else:
        work = lambda: [compress_vsl_row(row, segments, codec) for row in data]  # noqa: E731
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times) / (rows * msl)


# ------------------------------------------------------------------------------------------------ the bar

_lock = threading.Lock()
_bar = None
_clock: Optional[WorkClock] = None
_unit: Optional[float] = None  # seconds to compress a position of the job's rows (timed when told them)
_codec = None  # the job's compressor (None: zlib at level 4)
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
    global _bar, _clock, _unit, _codec, _features, _eta, _overshoot
    with _lock:
        if _bar is not None:
            _bar.close()
        _counts.clear()
        _expected.clear()
        _overshoot = 0
        _eta = None
        _clock = WorkClock(total or 0)
        _unit, _codec, _features = None, None, 3
        _bar = _bar_class()(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="tokenizing",
                            file=file, dynamic_ncols=True, mininterval=0.2, miniters=0,
                            command_started=process_start_time() if command_started is None else command_started)


def row_width(features: int) -> None:
    """The rows hold `features` int32 a position (3; VSL 5; DPO 6): the unit of the priors is timed now, on rows
    that wide with the job's compressor (`compressor`).

    Told by the sink when the job graph is built (after the bar started).
    """
    global _features, _unit
    _features = features
    if _bar is not None:
        _unit = seconds_per_position(_codec, _features)


def compressor(codec) -> None:
    """The job compresses its rows with `codec` (a transforms.io.compressors.Codec, or a zlib level): timed on
    rows of the job's width (`row_width`, told next), the unit of the priors.

    Told by the sink when the job graph is built (after the bar started).
    """
    global _codec, _unit
    _codec, _unit = codec, None


def _rows_cost() -> dict:
    """Seconds per position of the rows to come of the stages after the tokenizing one, before they have their
    own."""
    global _unit
    if _unit is None:  # not told the row width (nor, maybe, the compressor: then zlib's)
        _unit = seconds_per_position(_codec, _features)
    return {stage: cost * _unit for stage, cost in ROWS_COST.items()}


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
