"""The Event recorder: the SJs' Events, recorded in the background, never holding up a decision.

Each step's Events are logged and queued, stamped with the time they happened (the injected clock), so they
keep their order whenever they are recorded. A few workers record them, one step's Events after another,
each once no run has been launched for a moment (`pacing.event_wait`: in a burst the API server serves the
launches first). Past `EVENT_BACKLOG` steps waiting, new ones are dropped and counted, as client-go's
recorder drops on overflow; an SJ's waiting protection toggle is replaced by its next one.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from sj_operator.kube import Kube, in_background
from sj_operator.metrics import Metrics
from sj_operator.names import API_VERSION, KIND
from sj_operator.observed import SJObject
from sj_operator.pacing import event_wait
from sj_operator.policy.lifecycle import Event
from sj_operator.write.pool import Pool

__all__ = ["EVENT_BACKLOG", "EVENT_WORKERS", "STEERING_REASONS", "Recorder"]

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


@dataclass(frozen=True)
class Involved:
    """The SJ an Event is about: its namespace, name and uid (not the object: a backlog of Events must not keep
    old versions of the SJs alive)."""
    namespace: str
    name: str
    uid: str


@dataclass(slots=True)
class Unrecorded:
    """One step's Events waiting to be recorded, when they happened, and how many earlier steering steps of
    the SJ they replaced while waiting."""
    sj: Involved
    events: tuple[Event, ...]
    at: datetime
    queued: float
    """When it was queued (monotonic seconds): how long it has waited for launches (`pacing.event_wait`)."""
    replaced: int = 0


class Recorder:
    def __init__(self, kube: Kube, metrics: Metrics, clock: Callable[[], datetime], monotonic: Callable[[], float],
                 last_launch: Callable[[], float | None]) -> None:
        self.kube, self.metrics, self.clock, self.monotonic = kube, metrics, clock, monotonic
        self.last_launch = last_launch
        """When (monotonic) a run was last made (the ledger's): Events wait while runs are being launched."""
        self.pool: Pool[Unrecorded] = Pool("events", EVENT_WORKERS, self._post, ready=self._quiet)
        self.steering_unrecorded: dict[str, Unrecorded] = {}
        """By SJ uid: its waiting step of steering Events only (`STEERING_REASONS`), which a newer one
        replaces."""
        self._flushing = False
        self._held: set[asyncio.Future[None]] = set()
        """Workers waiting for launches: `flushing` lets them go."""
        self._drop_warned = 0.0

    def record(self, sj: SJObject, events: Iterable[Event]) -> None:
        """Logs the Events and queues them, stamped now."""
        events = tuple(events)
        if not events:
            return
        for ev in events:
            log.info("%s: %s: %s", sj.key, ev.reason, ev.message)
        steering = all(ev.reason in STEERING_REASONS for ev in events)
        if not steering:
            # Another step's Events come after the waiting toggle: a later toggle does not jump over them.
            self.steering_unrecorded.pop(sj.uid, None)
        elif (waiting := self.steering_unrecorded.get(sj.uid)) is not None:
            waiting.replaced += 1
            waiting.events, waiting.at, waiting.queued = events, self.clock(), self.monotonic()
            self.metrics.events_replaced.inc()
            return
        queue = self.pool.queue
        if len(queue) >= EVENT_BACKLOG:
            self.metrics.events_dropped.inc(len(events))
            if self.monotonic() >= self._drop_warned:
                self._drop_warned = self.monotonic() + DROP_WARNING_EVERY
                log.warning("Events are dropped: %d are waiting to be recorded (scavenger_events_dropped_total)",
                            len(queue))
            return
        entry = Unrecorded(Involved(sj.namespace, sj.name, sj.uid), events, self.clock(), self.monotonic())
        if steering:
            self.steering_unrecorded[sj.uid] = entry
        self.pool.submit((entry,))

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

    async def _quiet(self) -> bool:
        """Waits until the next Event may go: no run launched for a moment, or it has waited long enough;
        False when the queue was emptied meanwhile."""
        in_background()
        queue = self.pool.queue
        while not self._flushing and (wait := event_wait(self.monotonic(), queue[0].queued, self.last_launch())) > 0:
            held = asyncio.get_running_loop().create_future()
            self._held.add(held)
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(held, timeout=wait)
            finally:
                self._held.discard(held)
            if not queue:
                return False
        return True

    async def _post(self, entry: Unrecorded) -> None:
        sj = entry.sj
        if self.steering_unrecorded.get(sj.uid) is entry:
            del self.steering_unrecorded[sj.uid]
        note = f" ({entry.replaced} earlier protection change(s) not recorded)" if entry.replaced else ""
        for ev in entry.events:
            await self.kube.event(namespace=sj.namespace, name=sj.name, uid=sj.uid, kind=KIND,
                                  api_version=API_VERSION, type_=ev.type, reason=ev.reason,
                                  message=ev.message + note, at=entry.at)
