"""Sharing the event loop (``sj_operator.pacing``): work in slices gives the loop a turn once it has held
it for the budget, with the results one call would give; ``watch_lag`` measures how late the loop wakes."""
from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from types import FrameType

import pytest

from sj_operator.pacing import HeldSampler, LoopHolds, Pacer, in_slices, paced, place, watch_gc, watch_lag


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("held", "budget", "turns"), [
    (0.019, 0.02, 0),  # under the budget: no turn, no cost but a look at the clock
    (0.02, 0.02, 1),
    (5.0, 0.02, 1),    # one turn however long the stretch was
    (0.0, 0.0, 1),     # budget 0: a turn at every breath
])
def test_the_pacer_gives_a_turn_once_the_stretch_has_held_the_loop_for_its_budget(held, budget, turns):
    clock = Clock()
    pacer = Pacer(budget, clock=clock)
    clock.now += held
    asyncio.run(pacer.breathe())
    assert pacer.turns == turns


def test_after_a_turn_the_next_stretch_is_measured_from_the_turn():
    clock = Clock()
    pacer = Pacer(0.02, clock=clock)

    async def stretches() -> None:
        clock.now = 0.03
        await pacer.breathe()
        clock.now = 0.04  # 10 ms since the turn
        await pacer.breathe()

    asyncio.run(stretches())
    assert pacer.turns == 1


@pytest.mark.parametrize(("items", "size", "calls"), [(0, 3, 1), (3, 3, 1), (4, 3, 2), (10, 3, 4), (10, 1, 10)])
def test_work_in_slices_gives_what_one_call_gives_and_the_loop_runs_between_slices(items, size, calls):
    seen: list[Sequence[int]] = []
    others: list[int] = []

    def work(part: Sequence[int]) -> list[int]:
        seen.append(part)
        return [2 * i for i in part]

    async def both() -> list[int]:
        async def other() -> None:  # another task on the loop, counting its turns
            while True:
                others.append(len(seen))
                await asyncio.sleep(0)

        task = asyncio.create_task(other())
        await asyncio.sleep(0)
        others.clear()
        try:
            return await in_slices(list(range(items)), work, Pacer(0.0), size=size)
        finally:
            task.cancel()

    assert asyncio.run(both()) == [2 * i for i in range(items)]
    assert len(seen) == calls
    # The other task ran between each two slices, and not during a slice.
    assert sorted(set(others)) == list(range(1, calls))


def test_the_loop_lag_is_how_much_later_than_asked_the_sleeper_woke():
    clock = Clock()
    late = [0.0, 0.25, 3.0]
    observed: list[float] = []

    class Done(Exception):
        pass

    async def sleep(seconds: float) -> None:
        if not late:
            raise Done
        clock.now += seconds + late.pop(0)

    async def run() -> None:
        with pytest.raises(Done):
            await watch_lag(observed.append, period=0.5, clock=clock, sleep=sleep, expect=expected.append)

    expected: list[float] = []
    asyncio.run(run())
    assert observed == [0.0, 0.25, 3.0]
    # Told before each sleep when it is due: the sampler's measure of a held loop.
    assert expected == [0.5, 1.0, 1.75, 5.25]


@pytest.mark.parametrize(("collections", "late", "said"), [
    ([], 0.3, None),
    ([(0, 0.2)], 0.9, None),
    ([], 1.5, "the event loop was held 1.5s, none of it by the garbage collector: a stretch of work that gave the "
              "loop no turn"),
    ([(0, 0.01), (2, 3.3), (1, 0.2)], 3.6, "the event loop was held 3.6s, 3.5s of it by the garbage collector (the "
                                           "longest a collection of generation 2: 3.3s)"),
    # Collections counted since the last look, some of them before the lag began: never more than the lag.
    ([(1, 0.8), (1, 0.7)], 1.2, "the event loop was held 1.2s, 1.2s of it by the garbage collector (the longest a "
                                "collection of generation 1: 0.8s)"),
])
def test_a_lag_of_a_second_or_more_is_said_with_the_collectors_share_of_it(
        collections: list[tuple[int, float]], late: float, said: str | None) -> None:
    holds = LoopHolds()
    for generation, seconds in collections:
        holds.collection(generation, seconds)
    assert holds.lag(late) == said
    # What was counted is forgotten at each look: the next lag is its own.
    assert holds.lag(1.0) == ("the event loop was held 1.0s, none of it by the garbage collector: a stretch of work "
                              "that gave the loop no turn")


def test_every_collection_of_the_garbage_collector_is_timed_and_counted_until_stopped():
    import gc

    seen: list[tuple[int, float, int]] = []
    stop = watch_gc(lambda generation, seconds, collected: seen.append((generation, seconds, collected)))
    try:
        gc.collect(2)  # whatever earlier tests left
        seen.clear()
        for _ in range(10):  # cyclic garbage: only the collector frees it
            cycle: list[object] = []
            cycle.append(cycle)
        del cycle
        gc.collect(2)
    finally:
        stop()
    assert [(g, c) for g, _, c in seen] == [(2, 10)] and seen[0][1] >= 0
    before = len(seen)
    gc.collect(2)
    assert len(seen) == before, "stopped"


def test_the_operator_process_collects_garbage_less_often_than_cpythons_defaults():
    import gc

    from sj_operator.pacing import GC_THRESHOLDS, tune_gc

    before = gc.get_threshold()
    try:
        tune_gc()
        assert gc.get_threshold() == GC_THRESHOLDS
    finally:
        gc.set_threshold(*before)
    young, middle, old = GC_THRESHOLDS
    assert young > 700 and young * middle * old > 700 * 10 * 10


class Timers:
    """``call_later`` for ``collector_paused``: keeps what was scheduled; the test says when time is up."""

    def __init__(self) -> None:
        self.scheduled: list[tuple[float, Callable[[], None]]] = []
        self.cancelled = 0

    def __call__(self, delay: float, callback: Callable[[], None]) -> Timers:
        self.scheduled.append((delay, callback))
        return self

    def cancel(self) -> None:
        self.cancelled += 1


def test_no_collection_runs_while_the_collector_is_paused_and_it_is_restored_as_it_was():
    import gc

    from sj_operator.pacing import GC_PAUSE_LIMIT, collector_paused

    assert gc.isenabled()
    timers = Timers()
    seen: list[tuple[int, float]] = []
    stop = watch_gc(lambda generation, seconds, _: seen.append((generation, seconds)))
    try:
        with collector_paused(call_later=timers):
            assert not gc.isenabled()
            keep = [[i] for i in range(5 * gc.get_threshold()[0])]  # enough new containers for a collection
            assert seen == [], "no automatic collection while paused"
        assert gc.isenabled() and [d for d, _ in timers.scheduled] == [GC_PAUSE_LIMIT] and timers.cancelled == 1
        del keep
        with pytest.raises(RuntimeError), collector_paused(call_later=timers):
            raise RuntimeError("the pass failed")
        assert gc.isenabled() and timers.cancelled == 2, "enabled again after a pass that raised"
        gc.disable()
        try:
            with collector_paused(call_later=timers):
                pass
            assert not gc.isenabled() and len(timers.scheduled) == 2, "left disabled when it was disabled before"
        finally:
            gc.enable()
    finally:
        stop()


def test_a_pass_longer_than_the_limit_collects_again_from_then_on():
    import gc

    from sj_operator.pacing import collector_paused

    timers = Timers()
    with collector_paused(limit=3.0, call_later=timers):
        assert not gc.isenabled()
        [(delay, time_is_up)] = timers.scheduled
        assert delay == 3.0
        time_is_up()  # the pass still waits on the API server
        assert gc.isenabled(), "collecting again after the limit"
    assert gc.isenabled()


def test_the_limit_is_kept_by_the_running_loop():
    import gc

    from sj_operator.pacing import collector_paused

    async def go() -> None:
        loop = asyncio.get_running_loop()
        handles: list[asyncio.TimerHandle] = []
        schedule = loop.call_later

        def call_later(delay: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
            handles.append(schedule(delay, callback))
            return handles[-1]

        loop.call_later = call_later  # type: ignore[method-assign]
        with collector_paused(limit=60):
            assert not gc.isenabled()
            [timer] = handles
            assert timer.when() - loop.time() == pytest.approx(60, abs=1)
        assert gc.isenabled() and timer.cancelled()

    asyncio.run(go())


@pytest.mark.parametrize(("last_pass", "window"), [
    (0.0, 0.05),    # the first pass, or a quiet one: events still gather for 50 ms
    (0.01, 0.05),
    (0.02, 0.06),   # a pass of 20 ms and 60 ms of waiting: a quarter of the loop's time
    (0.1, 0.3),     # a burst: three times as long as the last pass took
    (0.333, 0.999),
    (0.4, 1.0),     # never more than a second
    (4.0, 1.0),
])
def test_the_loop_waits_for_passes_to_take_a_quarter_of_its_time_within_bounds(last_pass, window):
    from sj_operator.pacing import batch_window

    assert batch_window(last_pass) == pytest.approx(window)


def test_a_passes_share_of_the_loop_sets_the_window():
    from sj_operator.pacing import batch_window

    assert batch_window(0.1, share=0.5) == pytest.approx(0.1)  # half: as long as the pass took
    assert batch_window(0.1, share=1.0) == pytest.approx(0.05)  # all of it: the least window


@pytest.mark.parametrize("last_pass", [0.0, 0.02, 0.1, 4.0])
def test_while_the_control_plane_is_behind_the_loop_waits_the_longest_window(last_pass):
    from sj_operator.pacing import BATCH_WINDOW, batch_window

    assert batch_window(last_pass, behind=True) == BATCH_WINDOW[1]
    assert batch_window(last_pass, (0.05, 2.5), behind=True) == 2.5
    assert batch_window(last_pass, behind=False) == batch_window(last_pass)


@pytest.mark.parametrize(("now", "happened", "last_launch", "wait"), [
    (10.0, 9.0, None, 0.0),     # nothing launched since the start: at once
    (10.0, 9.0, 5.0, 0.0),      # the last launch 5 s ago: the launches are over
    (10.0, 9.9, 9.8, 0.8),      # a launch 0.2 s ago: until a second after it
    (10.0, 9.9, 10.0, 1.0),     # a launch just now
    (40.0, 10.5, 40.0, 0.5),    # launches for 30 s on end: until 30 s after it happened
    (41.0, 10.5, 41.0, 0.0),    # ... and no longer
])
def test_events_wait_while_runs_are_launched_for_at_most_thirty_seconds(now, happened, last_launch, wait):
    from sj_operator.pacing import event_wait

    assert event_wait(now, happened, last_launch) == pytest.approx(wait)


@pytest.mark.parametrize(("now", "happened", "last_launch", "wait"), [
    (10.0, 9.0, None, 299.0),     # nothing launched by this process yet (a new leader), its runs' pods still made
    (10.0, 9.0, 5.0, 299.0),      # the launches are over; their pods are not all made or scheduled yet
    (10.0, 9.9, 10.0, 299.9),     # a launch just now too: the longer of the two
    (308.0, 9.0, None, 1.0),      # behind for five minutes on end: until five minutes after it happened
    (309.0, 9.0, 309.0, 0.0),     # ... and no longer, whatever is launched
])
def test_events_wait_while_the_control_plane_is_behind_for_at_most_five_minutes(now, happened, last_launch, wait):
    from sj_operator.pacing import event_wait

    assert event_wait(now, happened, last_launch, behind=True) == pytest.approx(wait)
    assert event_wait(now, happened, last_launch, behind=False) <= wait, "behind never waits less"


def _holding_the_loop() -> FrameType:
    """A frame of the operator's package's tests' own (``tests/unit``), as if it held the loop."""
    return sys._getframe()


def _in_a_library(frame_of: Callable[[], FrameType]) -> FrameType:
    return frame_of()


@pytest.mark.parametrize(("due", "now", "sampled"), [
    (None, 100.0, False),   # the watcher has not slept yet
    (100.0, 99.0, False),   # not due yet
    (100.0, 100.2, False),  # late, but less than HELD_AFTER: a loop that keeps time
    (100.0, 100.25, True),
    (100.0, 104.0, True),
])
def test_the_loop_threads_place_is_counted_only_while_the_loop_is_held(
        due: float | None, now: float, sampled: bool) -> None:
    frame = _holding_the_loop()
    sampler = HeldSampler(7, frames=lambda: {7: frame, 8: sys._getframe()}, clock=lambda: now)
    if due is not None:
        sampler.expect(due)
    assert sampler.sample() is sampled
    assert sampler.taken() == (Counter({place(frame): 1}) if sampled else Counter())
    assert sampler.taken() == Counter(), "taken once"


def test_a_place_names_the_innermost_frames_of_the_package_after_the_library_frame_it_is_in() -> None:
    frame = _holding_the_loop()
    line = frame.f_lineno
    assert place(frame, package="unit", depth=1) == f"unit/test_pacing.py:{line} _holding_the_loop"
    # Called through a frame of another package: that (innermost) frame first, then the package's ones.
    inner = _in_a_library(_holding_the_loop)
    assert place(inner, package="unit", depth=2).startswith(f"unit/test_pacing.py:{line} _holding_the_loop < "
                                                            f"unit/test_pacing.py:")
    assert place(inner, package="no_such_package", depth=2) == f"unit/test_pacing.py:{line} _holding_the_loop"
    assert place(None) == "nowhere (the thread has ended)"


def test_a_lags_warning_names_the_most_sampled_places_while_the_loop_was_held() -> None:
    where = Counter({"a.py:1 f": 1, "b.py:2 g": 7, "c.py:3 h": 3, "d.py:4 i": 2})
    assert LoopHolds().lag(1.5, where=where) == (
        "the event loop was held 1.5s, none of it by the garbage collector: a stretch of work that gave the loop no "
        "turn; sampled 13 time(s) while held: 7 in b.py:2 g; 3 in c.py:3 h; 2 in d.py:4 i")
    assert LoopHolds().lag(0.5, where=where) is None


def test_the_sampler_thread_counts_the_loop_threads_place_while_held_and_stops() -> None:
    sampler = HeldSampler(threading.get_ident())
    stop = sampler.start(every=0.001)
    try:
        # Overdue only once started (a look while `start` waits for the thread would find this thread there), and
        # no longer before stopping: at most one look already under way sees this thread leave its spin.
        sampler.expect(sampler.clock() - 10)  # long overdue: every look samples
        give_up = time.monotonic() + 10  # a sampler that looks elsewhere fails below rather than hanging here
        while sum(sampler.samples.values()) < 3 and time.monotonic() < give_up:
            _ = [n * n for n in range(1000)]  # this thread stands for the held loop
        sampler.due = None
    finally:
        stop()
    taken = sampler.taken()
    spinning = sum(n for p, n in taken.items() if p.startswith("unit/test_pacing.py:"))
    assert spinning >= 3 and sum(taken.values()) - spinning <= 1, taken
    assert not any(t.name == "held loop sampler" for t in threading.enumerate())


def test_paced_items_come_in_order_with_the_pacer_asked_between_each_two_slices() -> None:
    class Counting(Pacer):
        async def breathe(self) -> None:
            asked.append(len(seen))

    asked: list[int] = []
    seen: list[int] = []

    async def walk(pacer: Pacer | None) -> None:
        async for item in paced(range(10), pacer, size=4):
            seen.append(item)

    asyncio.run(walk(Counting()))
    assert seen == list(range(10)) and asked == [4, 8]
    seen.clear()
    asyncio.run(walk(None))
    assert seen == list(range(10))
