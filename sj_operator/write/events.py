"""The Event recorder: the SJs' Events, recorded in the background, never holding up a decision.

Each step's Events are logged and queued, stamped with the time they happened (the injected clock), so they
keep their order whenever they are recorded. A few workers record them, one step's Events after another,
each once no run has been launched for a moment and the control plane is not behind on the pods of the runs
launched (`pacing.event_wait`, `Ledger.behind`: in a burst the API server serves the launches and their pods
first; an Event waits 5 minutes at most). Past `EVENT_BACKLOG` steps waiting, new ones are dropped and
counted, as client-go's recorder drops on overflow; an SJ's waiting protection toggle is replaced by its next
one.

Victim steering's routine toggles (`Event.routine`: a run's ``Protected``, a period's ``Unprotected``) recur
every checkpoint period of every running SJ. They are aggregated as client-go aggregates repeated Events (its
recorder's correlator counts an Event seen again into the one it made, and the events library's series count
repeated ones and write the count at most every so often): each SJ has one Event per such reason (a `Series`),
made at its first occurrence; later ones are counted into it, and its ``count``, ``lastTimestamp`` and message
(the latest one's) are written no more often than every `EVENT_SERIES_INTERVAL` seconds. The other Events
(a drain's, the protection's bound, steering's exemption, a budget's name taken) are recorded each time. Counts
not written yet when the process stops are lost, as client-go's are; a new leader begins its own series.
"""
from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from sj_operator.kube import EventRef, Kube, KubeError, in_background
from sj_operator.metrics import Metrics
from sj_operator.names import API_VERSION, KIND
from sj_operator.observed import SJObject
from sj_operator.pacing import BEHIND_RECHECK, event_wait
from sj_operator.policy.lifecycle import Event
from sj_operator.write.pool import Pool

__all__ = ["EVENT_BACKLOG", "EVENT_SERIES_INTERVAL", "EVENT_WORKERS", "STEERING_REASONS", "Recorder", "Series"]

log = logging.getLogger("sj_operator.controller")

EVENT_BACKLOG = 20_000
"""Steps whose Events may wait to be recorded; beyond it, new ones are dropped and counted
(``scavenger_events_dropped_total``), as client-go's recorder drops on overflow."""
STEERING_REASONS = frozenset({"Protected", "Unprotected"})
"""Events of victim steering's toggles: while one waits to be recorded, the SJ's next toggle replaces it (the
newer state is the one that holds; the message says how many were replaced), so a recorder that falls behind
a checkpoint period's toggles does not fill the backlog with states already gone."""
EVENT_WORKERS = 4
"""Events recorded at once, each worker one step's Events after another."""
DROP_WARNING_EVERY = 60.0
"""Seconds between two warnings that Events are dropped."""
EVENT_SERIES_INTERVAL = 60.0
"""Seconds between two writes of one SJ's aggregated routine steering Event (`Series`): its first occurrence is
recorded at once, the later ones counted, and the count written at most this often (the last counts of a series
are written this long after the previous write at the latest, by a pass the loop is asked for)."""


@dataclass(frozen=True)
class Involved:
    """The SJ an Event is about: its namespace, name and uid (not the object: a backlog of Events must not keep
    old versions of the SJs alive)."""
    namespace: str
    name: str
    uid: str


@dataclass(slots=True, eq=False)
class Series:
    """One SJ's Event of a routine steering reason (`Event.routine`): how often it occurred, and what of that the
    API server holds."""
    sj: Involved
    type: str
    reason: str
    message: str
    """The latest occurrence's."""
    first: datetime
    last: datetime
    """When it first and last occurred (the injected clock)."""
    count: int = 1
    written: int = 0
    """The count the API server holds."""
    ref: EventRef | None = None
    """The Event's name and uid, once made."""
    written_at: float = 0.0
    """When (monotonic) its count was last written."""
    busy: bool = False
    """A write of it is queued or under way (it writes the count it finds when it goes)."""
    scheduled: bool = False
    """It waits in the recorder's heap for its next write."""


@dataclass(slots=True)
class Unrecorded:
    """One step's Events waiting to be recorded, when they happened, and how many earlier steering steps of
    the SJ they replaced while waiting; or a write of a `Series`."""
    sj: Involved
    events: tuple[Event, ...]
    at: datetime
    queued: float
    """When it was queued (monotonic seconds): how long it has waited for launches (`pacing.event_wait`)."""
    replaced: int = 0
    series: Series | None = None


class Recorder:
    def __init__(self, kube: Kube, metrics: Metrics, clock: Callable[[], datetime], monotonic: Callable[[], float],
                 last_launch: Callable[[], float | None], behind: Callable[[], bool] = lambda: False) -> None:
        self.kube, self.metrics, self.clock, self.monotonic = kube, metrics, clock, monotonic
        self.last_launch = last_launch
        """When (monotonic) a run was last made (the ledger's): Events wait while runs are being launched."""
        self.behind = behind
        """Whether the control plane is behind on the runs launched (`Ledger.behind`): Events wait for it too."""
        self._waiting: deque[Unrecorded] = deque()
        self.pool: Pool[Unrecorded] = Pool("events", EVENT_WORKERS, self._post, ready=self._quiet,
                                           describe=lambda u: f"{u.sj.namespace}/{u.sj.name}", queue=self._waiting)
        self.steering_unrecorded: dict[str, Unrecorded] = {}
        """By SJ uid: its waiting step of steering Events only (`STEERING_REASONS`), which a newer one
        replaces."""
        self.series: dict[str, dict[str, Series]] = {}
        """By SJ uid, by reason: its aggregated routine steering Events."""
        self._due: list[tuple[float, int, Series]] = []
        """A heap of when each series with counts not written yet may be written next."""
        self._tickets = itertools.count()
        self._flushing = False
        self._held: set[asyncio.Future[None]] = set()
        """Workers waiting for launches or the control plane: `flushing` lets them go."""
        self._held_behind: set[asyncio.Future[None]] = set()
        """Those of them waiting while the control plane is behind: `caught_up` lets them look again."""
        self._drop_warned = 0.0

    def record(self, sj: SJObject, events: Iterable[Event]) -> None:
        """Logs the Events and queues them, stamped now; routine steering Events are counted into their series."""
        events = tuple(events)
        if not events:
            return
        for ev in events:
            log.info("%s: %s: %s", sj.key, ev.reason, ev.message)
        if all(ev.routine for ev in events):
            self.steering_unrecorded.pop(sj.uid, None)  # a later toggle does not jump over it
            for ev in events:
                self._occurred(sj, ev)
            return
        steering = all(ev.reason in STEERING_REASONS for ev in events)
        if not steering:
            # Another step's Events come after the waiting toggle: a later toggle does not jump over them.
            self.steering_unrecorded.pop(sj.uid, None)
        elif (waiting := self.steering_unrecorded.get(sj.uid)) is not None:
            waiting.replaced += 1
            waiting.events, waiting.at, waiting.queued = events, self.clock(), self.monotonic()
            self.metrics.events_replaced.inc()
            return
        entry = Unrecorded(Involved(sj.namespace, sj.name, sj.uid), events, self.clock(), self.monotonic())
        if self._queue(entry, dropped=len(events)) and steering:
            self.steering_unrecorded[sj.uid] = entry

    def _queue(self, entry: Unrecorded, *, dropped: int) -> bool:
        """Queues ``entry`` unless `EVENT_BACKLOG` steps wait already (then ``dropped`` Events are counted)."""
        queue = self._waiting
        if len(queue) >= EVENT_BACKLOG:
            if dropped:
                self.metrics.events_dropped.inc(dropped)
                if self.monotonic() >= self._drop_warned:
                    self._drop_warned = self.monotonic() + DROP_WARNING_EVERY
                    log.warning("Events are dropped: %d are waiting to be recorded (scavenger_events_dropped_total)",
                                len(queue))
            return False
        self.pool.submit((entry,))
        return True

    # --- routine steering Events, aggregated ----------------------------------------------------------------
    def _occurred(self, sj: SJObject, ev: Event) -> None:
        """A routine steering Event: its SJ's series of that reason made (its Event queued), or counted."""
        at = self.clock()
        series = self.series.get(sj.uid, {}).get(ev.reason)
        if series is None:
            self._begin(Series(Involved(sj.namespace, sj.name, sj.uid), ev.type, ev.reason, ev.message, at, at))
            return
        series.count += 1
        series.last, series.message = at, ev.message
        self.metrics.events_aggregated.inc()
        self._write_when_due(series)

    def _begin(self, series: Series) -> None:
        """A new series: its Event queued (dropped and counted past the backlog: the next occurrence begins it)."""
        if self._queue(Unrecorded(series.sj, (), series.first, self.monotonic(), series=series), dropped=series.count):
            series.busy = True
            self.series.setdefault(series.sj.uid, {})[series.reason] = series

    def _write_when_due(self, series: Series) -> None:
        """Queues the write of the series' counts now if its last write was `EVENT_SERIES_INTERVAL` ago, else
        schedules it then (`flush_due`); nothing while a write of it is queued or under way (it takes the count
        it finds, and asks again after) or nothing is left to write."""
        if series.busy or series.scheduled or series.ref is None or series.count == series.written:
            return
        due = series.written_at + EVENT_SERIES_INTERVAL
        if self.monotonic() < due:
            series.scheduled = True
            heapq.heappush(self._due, (due, next(self._tickets), series))
        elif self._queue(Unrecorded(series.sj, (), series.last, self.monotonic(), series=series), dropped=0):
            series.busy = True
        else:  # the backlog is full: nothing is lost, the count is written later
            series.written_at = self.monotonic()
            self._write_when_due(series)

    def flush_due(self) -> None:
        """Queues the writes of the series whose next write is due."""
        heap, now = self._due, self.monotonic()
        while heap and heap[0][0] <= now:
            _, _, series = heapq.heappop(heap)
            series.scheduled = False
            if self.series.get(series.sj.uid, {}).get(series.reason) is series:
                self._write_when_due(series)

    def due_in(self) -> float | None:
        """Seconds until the next series write is due (None: none waits)."""
        return max(0.0, self._due[0][0] - self.monotonic()) if self._due else None

    async def _write_series(self, series: Series) -> None:
        """Makes the series' Event with the count so far, or writes its count, last time and latest message."""
        count, last, message, sj = series.count, series.last, series.message, series.sj
        try:
            if series.ref is None:
                series.ref = await self.kube.event(
                    namespace=sj.namespace, name=sj.name, uid=sj.uid, kind=KIND, api_version=API_VERSION,
                    type_=series.type, reason=series.reason, message=message, at=last, first=series.first,
                    count=count, named=True)
                if series.ref is None:  # not recorded (logged): the next occurrence begins a new series
                    self._forget(series)
                    return
            elif not await self.kube.update_event(sj.namespace, series.ref, count=count, last=last,
                                                  message=message):
                # Gone (the API server keeps Events about an hour), or another of its name: what was not written
                # begins a new one.
                self._forget(series)
                # (with what occurred while the patch was under way too)
                self._begin(Series(sj, series.type, series.reason, series.message, series.last, series.last,
                                   series.count - series.written))
                return
        except KubeError as exc:
            log.warning("could not update event %s of %s/%s: %s", series.reason, sj.namespace, sj.name, exc)
            count = series.written  # written again after the interval
        finally:
            series.busy = False
        series.written, series.written_at = count, self.monotonic()
        self._write_when_due(series)

    def _forget(self, series: Series) -> None:
        mine = self.series.get(series.sj.uid)
        if mine is not None and mine.get(series.reason) is series:
            del mine[series.reason]
            if not mine:
                del self.series[series.sj.uid]

    @contextlib.asynccontextmanager
    async def flushing(self) -> AsyncIterator[None]:
        """While inside: Events are recorded at once, whatever is being launched (the ones waiting are let
        go)."""
        self._flushing = True
        for held in self._held:
            if not held.done():
                held.set_result(None)
        try:
            yield
        finally:
            self._flushing = False

    def caught_up(self) -> None:
        """The control plane is no longer behind (`Ledger.behind`): the workers waiting for it look again now (those
        waiting only for launches to pause wait on)."""
        for held in self._held_behind:
            if not held.done():
                held.set_result(None)

    async def _quiet(self) -> bool:
        """Waits until the next Event may go: no run launched for a moment, or it has waited long enough;
        False when the queue was emptied meanwhile."""
        in_background()
        queue = self._waiting
        while not self._flushing:
            # (not past half the backlog: the Events waiting for the control plane are not dropped for it)
            behind = len(queue) < EVENT_BACKLOG // 2 and self.behind()
            wait = event_wait(self.monotonic(), queue[0].queued, self.last_launch(), behind=behind)
            if wait <= 0:
                break
            held = asyncio.get_running_loop().create_future()
            self._held.add(held)
            if behind:
                self._held_behind.add(held)
            try:
                with contextlib.suppress(TimeoutError):
                    # (while behind, looked at again every moment too: a pass says when it caught up, `caught_up`,
                    # but a launch that ended without a pass after it does not)
                    await asyncio.wait_for(held, timeout=min(wait, BEHIND_RECHECK) if behind else wait)
            finally:
                self._held.discard(held)
                self._held_behind.discard(held)
            if not queue:
                return False
        return True

    async def _post(self, entry: Unrecorded) -> None:
        if entry.series is not None:
            await self._write_series(entry.series)
            return
        sj = entry.sj
        if self.steering_unrecorded.get(sj.uid) is entry:
            del self.steering_unrecorded[sj.uid]
        note = f" ({entry.replaced} earlier protection change(s) not recorded)" if entry.replaced else ""
        for ev in entry.events:
            await self.kube.event(namespace=sj.namespace, name=sj.name, uid=sj.uid, kind=KIND,
                                  api_version=API_VERSION, type_=ev.type, reason=ev.reason,
                                  message=ev.message + note, at=entry.at)
