"""The Event recorder's aggregation of victim steering's routine toggles (`write.events`), at an injected clock:
one Event per SJ and reason, made at once, its count written at most every `EVENT_SERIES_INTERVAL` seconds; every
other Event recorded each time."""
from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

import pytest

from sj_operator.kube import EventRef
from sj_operator.metrics import Metrics
from sj_operator.observed import SJObject
from sj_operator.pacing import EVENT_BEHIND_DEFERRAL
from sj_operator.policy.outcomes import Event
from sj_operator.write.events import EVENT_SERIES_INTERVAL, Recorder

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
PROTECTED = Event("Normal", "Protected", "running priority 1 of 3: run a-r1 is protected by a PodDisruptionBudget",
                  routine=True)
PERIOD_ENDED = Event("Normal", "Unprotected", "checkpoint period of 1m ended: run a-r1 is no longer protected",
                     routine=True)
NOT_ROUTINE = [
    Event("Normal", "Unprotected", "run a-r1 runs on a node being drained or removed: no protection, so the drain "
          "does not wait on it"),
    Event("Normal", "Unprotected", "run a-r1 was protected for 30m, the most a run may hold its budget in one period"),
    Event("Normal", "Unprotected", "run a-r1 has the least unsaved work on its node(s): left unprotected so that a "
          "preemption there loses the least"),
    Event("Warning", "NameTaken", "the run is not protected: PodDisruptionBudget ns/a-protect exists and is not this "
          "SJ's"),
]


class Sink:
    """The API server's Events: each one made (with its name) and each update, at the monotonic clock's time."""

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.made: list[dict[str, Any]] = []
        self.updated: list[tuple[float, str, int, datetime, str]] = []
        self.gone: set[str] = set()

    async def event(self, **kw: Any) -> EventRef:
        self.made.append({**kw, "when": self.clock[0]})
        return EventRef(f"{kw['name']}.{len(self.made)}", f"uid-{len(self.made)}")

    async def update_event(self, namespace: str, event: EventRef, *, count: int, last: datetime, message: str) -> bool:
        if event.name in self.gone:
            return False
        self.updated.append((self.clock[0], event.name, count, last, message))
        return True


def sj(name: str = "a") -> SJObject:
    return SJObject(namespace="ns", name=name, uid=f"u-{name}", generation=1, resource_version="1", created=NOW,
                    deleting=False)


def recorder(behind: Callable[[], bool] = lambda: False) -> tuple[Recorder, Sink, list[float]]:
    """A recorder at a monotonic clock the test moves (the wall clock moves with it)."""
    clock = [1000.0]
    sink = Sink(clock)
    rec = Recorder(sink, Metrics(), clock=lambda: NOW + timedelta(seconds=clock[0] - 1000.0),  # type: ignore[arg-type]
                   monotonic=lambda: clock[0], last_launch=lambda: None, behind=behind)
    return rec, sink, clock


async def settled(rec: Recorder) -> None:
    """What a pass does for the recorder (its due counts queued), then until the workers are done."""
    rec.flush_due()
    await rec.pool.idle()


@pytest.mark.parametrize(("toggles", "every"), [(2, 1.0), (10, 1.0), (100, 0.5), (30, 7.0), (6, 59.0), (4, 60.0),
                                                  (12, 25.0)])
def test_routine_toggles_are_one_event_whose_count_is_written_at_most_once_per_interval(toggles: int,
                                                                                        every: float) -> None:
    """``toggles`` routine Protected toggles of one SJ, ``every`` seconds apart, then a quiet minute: one Event made,
    its count written no more often than every interval, the last write carrying every toggle and the latest
    time; at most ceil(span / interval) updates, the span from the Event made to its last write."""
    rec, sink, clock = recorder()

    async def toggle() -> None:
        start = clock[0]
        for i in range(toggles):
            clock[0] = start + i * every
            rec.record(sj(), (PROTECTED,))
            await settled(rec)
        clock[0] += EVENT_SERIES_INTERVAL
        await settled(rec)
        assert rec.due_in() is None

    asyncio.run(toggle())
    assert len(sink.made) == 1 and sink.made[0]["count"] == 1 and sink.made[0]["reason"] == "Protected"
    writes = [sink.made[0]["when"], *(when for when, *_ in sink.updated)]
    assert all(b - a >= EVENT_SERIES_INTERVAL for a, b in pairwise(writes))
    assert len(sink.updated) <= math.ceil((writes[-1] - writes[0]) / EVENT_SERIES_INTERVAL)
    last_write = sink.updated[-1]
    assert last_write[2] == toggles and last_write[3] == NOW + timedelta(seconds=(toggles - 1) * every)
    assert rec.metrics.events_aggregated._value.get() == toggles - 1


def test_toggles_within_one_interval_are_one_create_and_one_update_at_its_end() -> None:
    rec, sink, clock = recorder()

    async def toggle() -> None:
        for _ in range(20):
            rec.record(sj(), (PROTECTED,))
            await settled(rec)
            clock[0] += 2.0
        assert sink.updated == [] and rec.due_in() == EVENT_SERIES_INTERVAL - 40.0
        clock[0] = 1000.0 + EVENT_SERIES_INTERVAL
        await settled(rec)

    asyncio.run(toggle())
    assert len(sink.made) == 1
    assert [(count, message) for _, _, count, _, message in sink.updated] == [(20, PROTECTED.message)]


def test_each_sj_and_reason_has_its_own_event() -> None:
    """A run's Protected and its period's Unprotected, on two SJs: four Events, each counted on its own."""
    rec, sink, clock = recorder()

    async def toggle() -> None:
        for _ in range(3):
            for name in ("a", "b"):
                rec.record(sj(name), (PROTECTED,))
                rec.record(sj(name), (PERIOD_ENDED,))
            await settled(rec)
            clock[0] += 30.0
        clock[0] += EVENT_SERIES_INTERVAL
        await settled(rec)

    asyncio.run(toggle())
    assert sorted((m["name"], m["reason"]) for m in sink.made) == [
        ("a", "Protected"), ("a", "Unprotected"), ("b", "Protected"), ("b", "Unprotected")]
    finals = {name: count for _, name, count, _, _ in sink.updated}
    assert sorted(finals.values()) == [3, 3, 3, 3]


def test_other_steering_events_are_recorded_each_time_beside_the_aggregated_ones() -> None:
    """A drain's, the protection's bound's, steering's exemption's Unprotected and a budget's name taken are not
    routine: each is an Event of its own, every time, while the routine Protected between them is counted."""
    rec, sink, clock = recorder()

    async def toggle() -> None:
        for _ in range(2):
            for ev in NOT_ROUTINE:
                rec.record(sj(), (PROTECTED,))
                await settled(rec)
                rec.record(sj(), (ev,))
                await settled(rec)
                clock[0] += 1.0
        clock[0] += EVENT_SERIES_INTERVAL
        await settled(rec)

    asyncio.run(toggle())
    assert [m["message"] for m in sink.made] == [PROTECTED.message, *(ev.message for ev in NOT_ROUTINE * 2)]
    assert all(m.get("count", 1) == 1 for m in sink.made)
    assert [count for _, _, count, _, _ in sink.updated] == [2 * len(NOT_ROUTINE)]


def test_an_aggregated_event_gone_from_the_api_server_is_made_again_with_the_counts_not_written() -> None:
    """The API server keeps Events about an hour: an update that finds none makes a new one."""
    rec, sink, clock = recorder()

    async def toggle() -> None:
        rec.record(sj(), (PROTECTED,))
        await settled(rec)
        sink.gone.add("a.1")
        for _ in range(3):
            clock[0] += 10.0
            rec.record(sj(), (PROTECTED,))
            await settled(rec)
        clock[0] += EVENT_SERIES_INTERVAL
        await settled(rec)

    asyncio.run(toggle())
    assert [(m["count"], m["first"]) for m in sink.made] == [(1, NOW), (3, NOW + timedelta(seconds=30))]
    assert sink.updated == []


def test_a_routine_toggle_past_the_backlog_is_dropped_and_counted_and_the_next_one_makes_its_event(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rec, sink, _ = recorder()
    monkeypatch.setattr("sj_operator.write.events.EVENT_BACKLOG", 0)
    rec.record(sj(), (PROTECTED,))
    assert rec.metrics.events_dropped._value.get() == 1 and rec.series == {}
    monkeypatch.setattr("sj_operator.write.events.EVENT_BACKLOG", 10)

    async def toggle() -> None:
        rec.record(sj(), (PROTECTED,))
        await settled(rec)

    asyncio.run(toggle())
    assert len(sink.made) == 1 and sink.made[0]["count"] == 1


def test_a_routine_event_not_recorded_begins_its_series_again_at_the_next_toggle() -> None:
    """An Event the API server refused (logged by `Kube.event`, which answers None) is not updated: the next
    toggle makes one."""
    rec, sink, clock = recorder()
    answers: list[str | None] = [None]
    made = sink.event

    async def refusing(**kw: Any) -> str | None:
        return answers.pop(0) if answers else await made(**kw)

    sink.event = refusing  # type: ignore[method-assign,assignment]

    async def toggle() -> None:
        rec.record(sj(), (PROTECTED,))
        await settled(rec)
        clock[0] += 1.0
        rec.record(sj(), (PROTECTED,))
        await settled(rec)

    asyncio.run(toggle())
    assert len(sink.made) == 1 and sink.made[0]["count"] == 1 and sink.updated == []


LAUNCHED = Event("Normal", "Launched", "launched run a-r1 (attempt 1, 1 pod)")


@pytest.mark.parametrize(("catches_up", "recheck"), [(True, 0.001), (True, 60.0), (False, 0.001)])
def test_events_wait_while_the_control_plane_is_behind_and_go_once_it_caught_up_or_five_minutes_passed(
        monkeypatch: pytest.MonkeyPatch, catches_up: bool, recheck: float) -> None:
    """An Event recorded while the control plane is behind on the runs launched is not written while it stays
    behind; it is once it caught up (seen by the worker looking again, or told by a pass: `caught_up`), or (it
    never does) five minutes after it happened, by the injected clock."""
    monkeypatch.setattr("sj_operator.write.events.BEHIND_RECHECK", recheck)  # how often the worker looks again
    behind = [True]
    rec, sink, clock = recorder(lambda: behind[0])

    async def turns(n: int = 50) -> None:
        for _ in range(n):
            await asyncio.sleep(0.001)

    async def go() -> None:
        rec.record(sj(), (LAUNCHED,))
        await turns()
        clock[0] += EVENT_BEHIND_DEFERRAL - 100  # (a worker waiting the 100 s left would outlast the test)
        await turns()
        assert sink.made == [], "behind: it waits"
        if catches_up:
            behind[0] = False
            rec.caught_up()  # what a pass that finds it so does
        else:
            clock[0] += 100
        await asyncio.wait_for(rec.pool.idle(), timeout=5)

    asyncio.run(go())
    assert [(m["reason"], m["at"]) for m in sink.made] == [("Launched", NOW)], "stamped when it happened"


def test_events_waiting_for_the_control_plane_go_while_half_the_backlog_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """From half of `EVENT_BACKLOG` steps waiting, the oldest no longer wait for the control plane, until fewer
    wait: a long burst does not fill the backlog until Events are dropped."""
    monkeypatch.setattr("sj_operator.write.events.EVENT_BACKLOG", 8)
    monkeypatch.setattr("sj_operator.write.events.BEHIND_RECHECK", 0.001)
    rec, sink, _ = recorder(lambda: True)

    async def turns() -> None:
        for _ in range(50):
            await asyncio.sleep(0.001)

    async def go() -> None:
        for i in range(3):
            rec.record(sj(f"s{i}"), (LAUNCHED,))
        await turns()
        assert sink.made == [], "3 of 8 waiting: they wait"
        for i in range(3, 6):
            rec.record(sj(f"s{i}"), (LAUNCHED,))
        await turns()

    asyncio.run(go())
    assert [m["name"] for m in sink.made] == ["s0", "s1", "s2"], "6 waiting: the oldest go until 3 wait"
    assert rec.metrics.events_dropped._value.get() == 0
