"""Sharing the event loop: long stretches of work give way to the loop's other tasks.

One asyncio loop carries the decision passes, kopf's watches, ``/metrics`` and ``/healthz``, the
admission webhook and the background lane. A pass over thousands of SJs that changed at once (a burst of
new SJs, checkpoint periods ending together) is seconds of plain Python; run in one stretch it holds
every other task for as long, and a health probe or a webhook call times out. So such work is done in
slices (``in_slices``), and between slices ``Pacer.breathe`` gives the loop a turn once the current
stretch has held it for ``budget`` seconds. ``watch_lag`` measures what is left: how late the loop wakes a
task that only sleeps; ``watch_gc`` times one cause no slicing helps, the garbage collector's pauses (a
full collection walks every container object the process holds: at 10,000 SJs, millions); and while the
loop is late, `HeldSampler` looks from a thread of its own at where the loop's thread is, so that a lag is
logged with the code that held it.
"""
from __future__ import annotations

import asyncio
import gc
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Protocol, TypeVar

__all__ = ["BATCH_WINDOW", "BEHIND_RECHECK", "EVENT_BEHIND_DEFERRAL", "EVENT_DEFERRAL", "EVENT_QUIET",
           "GC_PAUSE_LIMIT", "GC_THRESHOLDS", "HELD_AFTER", "HELD_PLACES", "HELD_SAMPLE", "HOLD_BUDGET", "LAG_WARNING",
           "PASS_SHARE", "SLICE", "HeldSampler", "LoopHolds", "Pacer", "Timer", "batch_window", "collector_paused",
           "event_wait", "in_slices", "paced", "place", "tune_gc", "watch_gc", "watch_lag"]

T = TypeVar("T")
R = TypeVar("R")
HOLD_BUDGET = 0.02
"""Seconds a stretch of work may hold the loop before it gives the other tasks a turn."""
SLICE = 128
"""Items (SJs) between two looks at the clock: a slice costs a few milliseconds at most."""
GC_THRESHOLDS = (10_000, 10, 100)
"""The garbage collector's thresholds for the operator's process (CPython's defaults are 700, 10, 10). Its
watch caches and a pass's caches are hundreds of thousands of objects that live for minutes, and a burst
allocates millions: with the defaults, a burst of 2,000 SJs made 105 full collections in four minutes,
each 0.25 to 1 s of a stopped loop (48 s in all). A full collection walks every container the process
holds, about 1.7 s at 10,000 SJs; a burst of 10,000 made 22 collections of the middle generation, so at
20 of those per full collection it still stopped the loop once, and at 100 a burst five times as big
makes none. Between bursts CPython makes a full collection only once a quarter as many objects as the
oldest generation holds have joined it since the last. Reference counting still frees at once everything
that is not part of a cycle; only cyclic garbage (13,000 objects in that full collection) waits longer."""
GC_PAUSE_LIMIT = 5.0
"""Seconds a pass may run with the collector paused (``collector_paused``): a quiet pass at 10,000 SJs takes
about 0.1 s and a burst's about a second; one that waits longer on the API server collects again."""
BATCH_WINDOW = (0.05, 1.0)
"""Seconds the loop lets watch events gather before a pass, at least and at most (``batch_window``)."""
PASS_SHARE = 0.25
"""The share of the loop's time passes take at most in a burst (``batch_window``): on a control plane's cores the
operator's CPU is CPU its API server does not get."""
EVENT_QUIET = 1.0
"""Seconds without a launch after which waiting Events, and new runs' records in their SJs' statuses, are
written (``event_wait``)."""
EVENT_DEFERRAL = 30.0
"""Seconds an Event waits for launches at most, from when it happened (a new run's record: from when its Job
was made) (``event_wait``)."""
EVENT_BEHIND_DEFERRAL = 300.0
"""Seconds an Event waits at most, from when it happened, while the control plane is behind on the runs in flight
(`write.ledger.Ledger.behind`) (``event_wait``)."""
BEHIND_RECHECK = 1.0
"""Seconds between two looks at whether the control plane is still behind, for an Event waiting for it."""
LAG_PERIOD = 0.5
"""Seconds ``watch_lag`` sleeps between two measurements."""
LAG_WARNING = 1.0
"""Seconds late from which the loop's lag is logged, with how much of it the garbage collector took
(`LoopHolds`): a second is when a health probe or a webhook call begins to feel it."""
HELD_AFTER = 0.25
"""Seconds overdue from which ``watch_lag``'s sleep counts as held, and `HeldSampler` looks at the loop's thread."""
HELD_SAMPLE = 0.1
"""Seconds between two looks of `HeldSampler` at whether the loop is held (and, while it is, at where)."""
HELD_PLACES = 3
"""The places a lag's warning names at most (the most sampled first)."""


@dataclass
class Pacer:
    """Gives the loop a turn when the work since the last turn has held it for ``budget`` seconds."""

    budget: float = HOLD_BUDGET
    clock: Callable[[], float] = time.perf_counter
    turns: int = 0
    """Turns given so far."""
    _since: float = field(init=False)

    def __post_init__(self) -> None:
        self._since = self.clock()

    async def breathe(self) -> None:
        if self.clock() - self._since >= self.budget:
            await asyncio.sleep(0)
            self.turns += 1
            self._since = self.clock()


async def in_slices(items: Sequence[T], work: Callable[[Sequence[T]], Iterable[R]], pacer: Pacer,
                    size: int = SLICE) -> list[R]:
    """``work`` over ``items`` a slice at a time (it returns each slice's results), the pacer asked
    between slices; the results in order, as one call over all of them would give."""
    if len(items) <= size:
        return list(work(items))
    results: list[R] = []
    for start in range(0, len(items), size):
        if start:
            await pacer.breathe()
        results.extend(work(items[start:start + size]))
    return results


async def paced(items: Iterable[T], pacer: Pacer | None, size: int = SLICE) -> AsyncIterator[T]:
    """``items`` one after another, the pacer (if any) asked every ``size`` of them: a loop over thousands that
    keeps state of its own across them (so that it is not a function of a slice, as `in_slices` needs)."""
    for i, item in enumerate(items):
        if pacer is not None and i and not i % size:
            await pacer.breathe()
        yield item


async def watch_lag(observe: Callable[[float], None], *, period: float = LAG_PERIOD,
                    clock: Callable[[], float] = time.monotonic,
                    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                    expect: Callable[[float], None] = lambda due: None) -> None:
    """Sleeps ``period`` seconds over and over, and ``observe``s how much later than asked it woke each
    time: how long the work before it held the loop (``expect`` is told, before each sleep, when it is due:
    `HeldSampler.expect`). Runs until cancelled."""
    while True:
        due = clock() + period
        expect(due)
        await sleep(period)
        observe(max(0.0, clock() - due))


def place(frame: FrameType | None, package: str = __package__ or "sj_operator", depth: int = 3) -> str:
    """Where a thread is, from its innermost ``frame``: the innermost ``depth`` of ``package``'s frames, innermost
    first (``path:line function``, the path from the package's directory), after the innermost frame of all
    when that one is elsewhere (a library the package called: where the time actually goes)."""
    if frame is None:
        return "nowhere (the thread has ended)"
    marker = f"/{package}/"
    ours: list[str] = []
    elsewhere: str | None = None
    innermost = True
    while frame is not None and len(ours) < depth:
        code = frame.f_code
        filename = code.co_filename
        at = filename.rfind(marker)
        if at >= 0:
            ours.append(f"{filename[at + 1:]}:{frame.f_lineno} {code.co_name}")
        elif innermost:
            elsewhere = f"{'/'.join(filename.rsplit('/', 2)[-2:])}:{frame.f_lineno} {code.co_name}"
        innermost = False
        frame = frame.f_back
    return " < ".join(([elsewhere] if elsewhere else []) + ours) or "outside the operator's code"


@dataclass
class HeldSampler:
    """Where the loop's thread was while the loop was held: a thread of its own looks every `HELD_SAMPLE` seconds
    whether ``watch_lag``'s sleep is `HELD_AFTER` overdue (`expect` is told when it is due), and while it is,
    counts the loop thread's `place`. The next lag's warning takes the counts (`taken`): a lag that collection
    does not explain then names the code that did not give the loop a turn, as a profiler would, without one.
    Costs nothing while the loop keeps time (a look at the clock every `HELD_SAMPLE` seconds)."""

    thread: int
    """The loop's thread (``threading.get_ident()`` in it)."""
    frames: Callable[[], dict[int, FrameType]] = sys._current_frames
    clock: Callable[[], float] = time.monotonic
    after: float = HELD_AFTER
    due: float | None = None
    """When the loop's watcher is due to wake next (`expect`); None before its first sleep."""
    samples: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)

    def expect(self, due: float) -> None:
        """``watch_lag``'s next wake is due at ``due`` (its clock, which must be this sampler's)."""
        self.due = due

    def sample(self) -> bool:
        """One look: the loop thread's place counted if the loop is held; whether it was."""
        due = self.due
        if due is None or self.clock() - due < self.after:
            return False
        where = place(self.frames().get(self.thread))
        with self._lock:
            self.samples[where] += 1
        return True

    def taken(self) -> Counter[str]:
        """The places counted since the last call, forgotten here."""
        with self._lock:
            samples, self.samples = self.samples, Counter()
        return samples

    def start(self, every: float = HELD_SAMPLE) -> Callable[[], None]:
        """Looks every ``every`` seconds from a daemon thread; returns the function that stops it."""
        def run() -> None:
            while not self._stop.wait(every):
                self.sample()
        threader = threading.Thread(target=run, name="held loop sampler", daemon=True)
        threader.start()

        def stop() -> None:
            self._stop.set()
            threader.join(timeout=1)
        return stop


def watch_gc(observe: Callable[[int, float, int], None], *,
             clock: Callable[[], float] = time.perf_counter) -> Callable[[], None]:
    """``observe(generation, seconds, collected)`` for every collection the garbage collector makes from now
    on (``collected``: the unreachable objects it found and freed, cyclic garbage that reference counting
    could not free); returns the function that stops it."""
    started = [0.0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = clock()
        else:
            observe(info["generation"], clock() - started[0], info["collected"])

    gc.callbacks.append(timed)
    return lambda: gc.callbacks.remove(timed)


@dataclass
class LoopHolds:
    """The garbage collector's time between two of ``watch_lag``'s measurements, so that a lag of `LAG_WARNING`
    or more is said with how much of it was collection, and which collection was the longest: a lag that
    collection does not explain is a stretch of work that did not give the loop a turn."""

    collecting: float = 0.0
    """Seconds of collection since the last measurement."""
    longest: tuple[int, float] | None = None
    """The longest of those collections: its generation and seconds."""

    def collection(self, generation: int, seconds: float) -> None:
        """One collection, of ``generation``, that took ``seconds``."""
        self.collecting += seconds
        if self.longest is None or seconds > self.longest[1]:
            self.longest = (generation, seconds)

    def lag(self, late: float, warn_at: float = LAG_WARNING, where: Counter[str] | None = None) -> str | None:
        """One measurement of the loop, ``late`` seconds late: what to log when that is ``warn_at`` or more (None
        otherwise), with the places the loop's thread was sampled in meanwhile (``where``: `HeldSampler.taken`);
        the collections counted so far are forgotten either way."""
        collecting, longest = self.collecting, self.longest
        self.collecting, self.longest = 0.0, None
        if late < warn_at:
            return None
        if longest is None:
            said = (f"the event loop was held {late:.1f}s, none of it by the garbage collector: a stretch of work "
                    f"that gave the loop no turn")
        else:
            said = (f"the event loop was held {late:.1f}s, {min(collecting, late):.1f}s of it by the garbage "
                    f"collector (the longest a collection of generation {longest[0]}: {longest[1]:.1f}s)")
        if where:
            total = sum(where.values())
            places = "; ".join(f"{n} in {p}" for p, n in where.most_common(HELD_PLACES))
            said += f"; sampled {total} time(s) while held: {places}"
        return said


def tune_gc() -> None:
    """Sets ``GC_THRESHOLDS`` for this process (the operator's entry point does, tests do not)."""
    gc.set_threshold(*GC_THRESHOLDS)


class Timer(Protocol):
    """A call scheduled for later (``asyncio.TimerHandle``)."""

    def cancel(self) -> None: ...


@contextmanager
def collector_paused(limit: float = GC_PAUSE_LIMIT, *,
                     call_later: Callable[[float, Callable[[], None]], Timer] | None = None) -> Iterator[None]:
    """No automatic garbage collection while the block runs (a decision pass), for ``limit`` seconds at
    most. What a pass builds (its view, its caches' new entries, its decisions) is hundreds of thousands of
    container objects that all live until it ends, so every collection during it walks them only to find
    them alive and move them a generation older, where the next, larger collections walk them again;
    reference counting frees them when the pass ends either way. Cyclic garbage made meanwhile (by the pass
    or by the tasks it gives turns to: kopf's watches) waits for the first collection after it, so a pass
    that waits on the API server longer than ``limit`` collects again from then on (``call_later``: the
    running loop's). Restores the collector as it found it."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    resume = (call_later or asyncio.get_running_loop().call_later)(limit, gc.enable)
    try:
        yield
    finally:
        resume.cancel()
        gc.enable()


def batch_window(last_pass: float, bounds: tuple[float, float] = BATCH_WINDOW, share: float = PASS_SHARE, *,
                 behind: bool = False) -> float:
    """How long the loop lets watch events gather before its next pass: long enough that passes as long as the
    last one take ``share`` of the loop's time, within ``bounds``. A quiet cluster gets a pass 50 ms after an
    event; in a burst, when every pass has hundreds of changed SJs to step again, the loop spends about a quarter
    of its time in passes (the rest of the core is left to the API server, on a small control plane the same
    cores; passes longer than a third of a second get the longest window and take more), and an SJ whose Job
    and pods change many times in a second is stepped once for all of them, not once per change. While the
    control plane is ``behind`` on the runs in flight (`write.ledger.Ledger.behind`), the longest window: what a
    pass sooner would act on waits for the control plane anyway (launches are paced by it, Events and new runs'
    records wait for it), and a pass cheaper than a third of a second would otherwise come as much sooner and
    take a quarter of a core the API server needs. The cost is at most a second more from an event to the pass
    that acts on it."""
    low, high = bounds
    if behind:
        return high
    return min(high, max(low, last_pass * (1 - share) / share))


def event_wait(now: float, happened: float, last_launch: float | None, *, behind: bool = False,
               quiet: float = EVENT_QUIET, most: float = EVENT_DEFERRAL,
               most_behind: float = EVENT_BEHIND_DEFERRAL) -> float:
    """Seconds an Event that ``happened`` (monotonic) should still wait before it is recorded; 0 when it goes
    now. Nothing waits for an Event, while every launch is work that waits for its Job: when runs are being
    launched (the last one less than ``quiet`` seconds ago), Events hold back and leave the API server to
    the launches; none waits more than ``most`` seconds after it happened. While the control plane is
    ``behind`` on the runs in flight (many of them with Jobs not taken up yet, or pods not looked at by the
    scheduler yet), they hold back too, at most ``most_behind`` seconds after they happened: its controllers'
    and scheduler's writes are what those runs wait for. In a burst of thousands of new SJs their Events are
    recorded after the burst's Jobs and pods instead of between them; on a quiet cluster an Event waits at most
    ``quiet`` seconds after the launch before it."""
    until = None if last_launch is None else min(last_launch + quiet, happened + most)
    if behind:
        until = happened + most_behind if until is None else max(until, happened + most_behind)
    return 0.0 if until is None else max(0.0, until - now)

