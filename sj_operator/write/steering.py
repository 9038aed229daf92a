"""The steering lane: victim steering's bookkeeping, carried out in the background.

A running SJ whose step only moves its running level or toggles its protection (`Step.kind` ``steers``) is
written apart from the pass, so a pass goes on to launches and transitions at once. Up to
`STEERING_IN_FLIGHT` SJs are carried out at a time, protection changes first; those left out are decided
again by the next passes. While its writes are under way an SJ is held as decided: a pass neither decides
it again nor writes it twice.
"""
from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable

from sj_operator.decide import Decided
from sj_operator.kube import in_background
from sj_operator.write.pool import Pool

__all__ = ["STEERING_IN_FLIGHT", "SteeringLane"]

log = logging.getLogger(__name__)

STEERING_IN_FLIGHT = 64
"""Running SJs whose steering writes (running level, protection) may be under way in the background at once;
each pass tops them up, and the loop is woken when half of them are done. The pass does not wait for them;
the background lane's threads (`kube.BACKGROUND_THREADS`) bound how many calls are in flight."""


def _protection_first(d: Decided) -> bool:
    """Protection changes first, then what only moves the running level."""
    return not d.step.actions


class SteeringLane:
    def __init__(self, apply: Callable[[Decided], Awaitable[object]], wake: Callable[[], None]) -> None:
        self._apply, self._wake = apply, wake
        self.under_way: dict[str, Decided] = {}
        """By SJ uid: the decisions being carried out."""
        self.pool: Pool[Decided] = Pool("steering", STEERING_IN_FLIGHT, self._steer_one)

    def steer(self, due: Iterable[Decided]) -> None:
        """Carries out as many of ``due`` as there is room for, protection changes first."""
        room = max(STEERING_IN_FLIGHT - len(self.under_way), 0)
        taken = sorted(due, key=_protection_first)[:room]
        for d in taken:
            self.under_way[d.observed.sj.uid] = d
        self.pool.submit(taken)

    def holding(self, decided: list[Decided]) -> list[Decided]:
        """``decided`` with the SJs under way kept as they were decided when their writes began."""
        under_way = self.under_way
        return [under_way.get(d.observed.sj.uid, d) for d in decided] if under_way else decided

    async def _steer_one(self, d: Decided) -> None:
        in_background()
        try:
            await self._apply(d)
        except Exception:
            log.exception("steering writes of %s failed; deciding again", d.observed.sj.key)
        finally:
            self.under_way.pop(d.observed.sj.uid, None)
            if len(self.under_way) <= STEERING_IN_FLIGHT // 2:
                self._wake()
