"""Why a waiting SJ waits: its ``Admitted=False`` condition, written when the reason changes.

The admission says why each SJ it left waiting waits (a reason and a message with the numbers). The
condition is written when the reason or the words change; when only the numbers move it is refreshed at
most every `WHY_REFRESH` seconds. An SJ whose decision and reason are the very ones its condition was last
found to say is passed over without a look (at scale, thousands wait for the same reason at every pass). A pass
that looks only at what changed asks `Explainer.moved` which SJs' new reasons need a look at all, and
`Explainer.due` whose numbers may be written now.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from sj_operator.api import ScavengerJobStatus
from sj_operator.decide import Decided
from sj_operator.observed import SJObject
from sj_operator.policy.admission import Waiting
from sj_operator.policy.conditions import admitted_condition, wait_changed
from sj_operator.policy.lifecycle import waiting_for_room

__all__ = ["WHY_REFRESH", "Explainer", "Settled"]

WHY_REFRESH = 120.0
"""Seconds between writes of a waiting SJ's Admitted message when only its numbers moved."""


@dataclass(frozen=True, slots=True)
class Settled:
    """A waiting SJ with nothing to write about why it waits: the decision and the admission's reason it was
    last found with, and what its condition says."""
    decided: Decided
    why: Waiting
    reason: str
    message: str | None
    """The condition's message when it is exactly the reason's; None when only the numbers differ."""
    until: float
    """With ``message`` None: until when (monotonic seconds) the numbers may stay unwritten."""


def _says(status: ScavengerJobStatus, why: Waiting) -> bool:
    """The SJ's Admitted condition gives exactly this reason and message."""
    cond = admitted_condition(status.conditions)
    return cond is not None and (cond.status, cond.reason, cond.message) == ("False", why.reason, why.message)


class Explainer:
    def __init__(self, monotonic: Callable[[], float], on_fault: Callable[[SJObject, Exception], None]) -> None:
        self.monotonic, self._on_fault = monotonic, on_fault
        self.written: dict[str, float] = {}
        """When this process last wrote each waiting SJ's reason (monotonic seconds), by uid."""
        self.settled: dict[str, Settled] = {}
        """By uid."""
        self._refreshes: list[tuple[float, str]] = []
        """A heap of when the numbers of a settled SJ may be written (``Settled.until``), by uid."""

    def due(self, clock: float) -> set[str]:
        """The SJs (uids) whose numbers may be written at ``clock`` (monotonic seconds): `explain` looks at
        them again even when neither their decision nor their reason changed."""
        due: set[str] = set()
        heap = self._refreshes
        while heap and heap[0][0] <= clock:
            until, uid = heapq.heappop(heap)
            settled = self.settled.get(uid)
            if settled is not None and settled.message is None and settled.until == until:
                due.add(uid)
        if len(heap) > 2 * len(self.settled) + 1000:
            self._refreshes = [(s.until, uid) for uid, s in self.settled.items() if s.message is None]
            heapq.heapify(self._refreshes)
        return due

    def explain(self, decided: Iterable[Decided], waiting: Mapping[str, Waiting], now: datetime) -> list[Decided]:
        """Each of ``decided`` the admission left ``waiting`` says why, when that changed."""
        settled_of, clock, out = self.settled.get, self.monotonic(), []
        for d in decided:
            why = waiting.get(d.observed.sj.key)
            if why is not None:
                settled = settled_of(d.observed.sj.uid)
                if settled is None or settled.decided is not d or settled.why is not why or (
                        settled.message is None and clock >= settled.until):
                    if (settled is not None and settled.decided is d and settled.reason == why.reason
                            and (settled.message == why.message if settled.message is not None
                                 else clock < settled.until)):
                        # `_explained`'s first case, inlined and without a new `Settled` (its ``why`` only
                        # saves this look): at scale thousands of reasons move only their numbers at once.
                        out.append(d)
                        continue
                    try:
                        d = self._explained(d, why, now)
                    except Exception as exc:
                        self._on_fault(d.observed.sj, exc)
            out.append(d)
        return out

    def moved(self, waiting: Mapping[str, Waiting], before: Mapping[str, Waiting], uids: Mapping[str, str],
              decided: Mapping[str, Decided]) -> set[str]:
        """The SJs (uids, by key in ``uids``) whose reason in ``waiting`` differs from ``before``'s and that
        `explain` would not pass over, given their decision in ``decided``: all but those whose condition
        says the same reason and either this very message or numbers that may not be written yet. At scale
        an admission pass moves the numbers of thousands of reasons at once, and nothing is written for
        them; this finds that in one loop."""
        clock, settled_of, out = self.monotonic(), self.settled.get, set()
        for key, why in waiting.items():
            was = before.get(key)
            if was is not None and was.message == why.message and was.reason == why.reason:
                continue
            uid = uids.get(key)
            if uid is None:
                continue
            settled = settled_of(uid)
            if (settled is not None and settled.decided is decided.get(uid) and settled.reason == why.reason
                    and (settled.message == why.message if settled.message is not None else clock < settled.until)):
                continue
            out.add(uid)
        return out

    def _explained(self, d: Decided, why: Waiting, now: datetime) -> Decided:
        """A waiting SJ that was not admitted says why in its Admitted condition, when that changed (the
        numbers alone refresh at most every `WHY_REFRESH` seconds)."""
        status, uid = d.step.status, d.observed.sj.uid
        settled = self.settled.get(uid)
        if settled is not None and settled.decided is d and settled.reason == why.reason and (
                settled.message == why.message if settled.message is not None else self.monotonic() < settled.until):
            self.settled[uid] = Settled(d, why, settled.reason, settled.message, settled.until)
            return d
        written = self.written.get(uid)
        if not wait_changed(status.conditions, why.reason, why.message, refresh=WHY_REFRESH,
                            since_written=None if written is None else self.monotonic() - written):
            # Nothing to write: the condition says just this, or only its numbers moved since it was
            # written (then they are written once `WHY_REFRESH` has passed).
            exact = _says(status, why)
            settled = self.settled[uid] = Settled(d, why, why.reason, why.message if exact else None,
                                                  0.0 if exact or written is None else written + WHY_REFRESH)
            if settled.message is None:
                heapq.heappush(self._refreshes, (settled.until, uid))
            return d
        self.written[uid] = self.monotonic()
        return replace(d, step=replace(d.step, status=waiting_for_room(status, now, why.reason, why.message)))
