"""The steering lane: victim steering's bookkeeping, carried out in the background.

A running SJ whose step only toggles its protection or moves its running level (`Step.kind` ``steers``) is
written apart from the pass, so a pass goes on to launches and transitions at once. The two are served apart:

- a **toggle** (`SetProtection`: the label on the run's pods, its Event; no status write) is what steering is
  for: up to `STEERING_IN_FLIGHT` at a time, every pass topping them up;
- a **level write** (the status's ``runningPriority`` and period start, with its protection) is a record that
  may wait: it takes only the room the toggles leave over (none while a toggle due is left out), at most
  `LEVEL_WRITES_IN_FLIGHT` at a time, in a pool of its own, so it never queues in front of a toggle. One left
  out is decided again by a later pass (the level comes from the period start and the clock, never from the
  level stored).

While its writes are under way an SJ is held as decided: a pass neither decides it again nor writes it twice.

Routine toggles yield to starts: while `STEERING_YIELDS_AT` runs or more are starting (launched, their pods not
all running yet), the toggles a run's clock asks for (a level crossed, a period begun: `SetProtection.due`) wait.
Each is a write per pod, and every pod written wakes the Job controller for its Job, the disruption controller
and every watcher of pods; in a burst those are the very controllers starting the runs (measured with 2,000 SJs
on two cores: with steering 391 s to 99.5 % Running, against plain Jobs' 111 s). A run whose routine toggle
waits keeps the protection it has: a new run is protected late, and one whose period began stays protected
until the starts are fewer. The other toggles never wait: a drain's, the protection's bound and steering's
exemption take protection away so that nothing waits on a scavenger's budget; nor do the level writes, which
are status writes no controller of pods watches. Whether they wait is settled at the end of each pass, from the
runs that pass counted (`SteeringLane.starting`).

The SJs left out for room are decided again by the next passes, which top the toggles up. Those whose routine
toggle waits are not: at 10,000 SJs that would be thousands of decisions made again at every pass of a burst, each
to the same end. They are set aside (`steer` returns them): decided again once the starts are fewer (the lane asks
for a pass then) and at once when they change. A run waiting to be protected is not protected yet, so its clock
brings nothing that cannot wait with it (`set_aside_until`); one waiting to be unprotected is also decided again at
the first pass `SET_ASIDE` after the last look, so that the protection's bound is about that late at most (a pass
comes at least every tick). A drain's or an exemption's unprotect is never routine, so it never waits.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime, timedelta

from sj_operator.decide import Decided
from sj_operator.kube import in_background
from sj_operator.policy.lifecycle import FOREVER
from sj_operator.policy.outcomes import SetProtection
from sj_operator.write.pool import Pool

__all__ = ["LEVEL_WRITES_IN_FLIGHT", "SET_ASIDE", "STEERING_IN_FLIGHT", "STEERING_YIELDS_AT", "SteeringLane",
           "set_aside_until", "steering_order"]

log = logging.getLogger(__name__)

STEERING_IN_FLIGHT = 64
"""Running SJs whose protection toggles may be under way in the background at once; each pass tops them up, and
the loop is woken when half of them are done. The pass does not wait for them; the background lane's threads
(`kube.BACKGROUND_THREADS`) bound how many calls are in flight."""
LEVEL_WRITES_IN_FLIGHT = 4
"""Level writes (a running SJ's level and period start in its status) under way at once, taken only when every
toggle due is under way: a quarter of the background lane's connections (`kube.BACKGROUND_THREADS`), so the
toggles and the Events always have the rest."""

STEERING_YIELDS_AT = 64
"""Runs starting at once (launched, their pods not all running yet) from which routine toggles wait: as many as the
toggles under way at once (`STEERING_IN_FLIGHT`). A few runs restarting after a preemption are below it; a burst
of new SJs, or a drained node's runs starting again elsewhere, are above it."""

SET_ASIDE = timedelta(seconds=5)
"""How long an SJ whose routine toggle waits for the starts goes without being decided again, unless it changes or
the starts become fewer (the decision loop's default tick): at 10,000 SJs, a few passes of a burst at most."""


def set_aside_until(d: Decided, now: datetime) -> datetime:
    """Until when the SJ of ``d``, whose routine toggle waits for the starts, need not be decided again unless it
    changes or the starts become fewer: a protection it waits for, for ever (an unprotected run's clock brings no
    toggle that does not wait too; a drain or an exemption has it decided again); an unprotection, `SET_ASIDE`
    from ``now`` (its protection's bound does not wait)."""
    protects = all(a.protected for a in d.step.actions if isinstance(a, SetProtection))
    return FOREVER if protects else now + SET_ASIDE


def _toggles(d: Decided) -> bool:
    return bool(d.step.actions)


def _routine(d: Decided) -> bool:
    """A toggle the run's clock asked for (`SetProtection.due`), which waits while many runs start."""
    return any(isinstance(a, SetProtection) and a.due is not None for a in d.step.actions)


def _sj_key(d: Decided) -> str:
    return d.observed.sj.key


def steering_order(due: Iterable[Decided], *, toggles_room: int, levels_room: int,
                   starting: int = 0) -> list[Decided]:
    """Which of ``due`` to carry out now: the toggles first, as many as ``toggles_room``, but no routine one while
    ``starting`` runs are `STEERING_YIELDS_AT` or more; then, only when no toggle was left out, the level writes,
    as many as ``levels_room``. Pure."""
    due = list(due)
    if starting >= STEERING_YIELDS_AT:
        due = [d for d in due if not _routine(d)]
    toggles = [d for d in due if _toggles(d)]
    taken = toggles[:max(toggles_room, 0)]
    if len(taken) == len(toggles):
        taken += [d for d in due if not _toggles(d)][:max(levels_room, 0)]
    return taken


class SteeringLane:
    def __init__(self, apply: Callable[[Decided], Awaitable[object]], wake: Callable[[], None]) -> None:
        self._apply, self._wake = apply, wake
        self.under_way: dict[str, Decided] = {}
        """By SJ uid: the decisions being carried out."""
        self._leveling = 0
        """How many of ``under_way`` are level writes."""
        self._starting = 0
        """The runs starting as the last pass counted them (`starting`)."""
        self.pool: Pool[Decided] = Pool("steering", STEERING_IN_FLIGHT, self._steer_one, describe=_sj_key)
        self.levels: Pool[Decided] = Pool("steering-levels", LEVEL_WRITES_IN_FLIGHT, self._steer_one,
                                          describe=_sj_key)

    @property
    def tasks(self) -> tuple[asyncio.Task[None], ...]:
        """The workers of both pools."""
        return (*self.pool.tasks, *self.levels.tasks)

    @property
    def yielding(self) -> bool:
        """Whether routine toggles wait for the runs starting (`STEERING_YIELDS_AT`)."""
        return self._starting >= STEERING_YIELDS_AT

    def starting(self, runs: int) -> None:
        """Settles whether routine toggles wait, from the ``runs`` starting (launched, their pods not all running)
        as the pass just ended counted them; once they no longer wait, a pass is asked for, to decide again the
        SJs set aside meanwhile."""
        was, self._starting = self.yielding, runs
        if self.yielding == was:
            return
        if self.yielding:
            log.info("victim steering's routine toggles wait: %d runs are starting (from %d they yield to them)",
                     runs, STEERING_YIELDS_AT)
        else:
            log.info("victim steering's routine toggles go on: %d runs are starting", runs)
            self._wake()

    def steer(self, due: Iterable[Decided]) -> list[Decided]:
        """Carries out as many of ``due`` as there is room for, toggles first, no routine one while the lane yields
        (`steering_order`); an SJ under way already is left as it is (the plan leaves them out). The decisions whose
        routine toggle waits: to be set aside until the lane no longer yields."""
        under_way, toggling = self.under_way, len(self.under_way) - self._leveling
        due = [d for d in due if d.observed.sj.uid not in under_way]
        taken = steering_order(due, toggles_room=STEERING_IN_FLIGHT - toggling,
                               levels_room=LEVEL_WRITES_IN_FLIGHT - self._leveling, starting=self._starting)
        for d in taken:
            self.under_way[d.observed.sj.uid] = d
        toggles = [d for d in taken if _toggles(d)]
        self._leveling += len(taken) - len(toggles)
        self.pool.submit(toggles)
        self.levels.submit(d for d in taken if not _toggles(d))
        return [d for d in due if _routine(d)] if self.yielding else []

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
            if self.under_way.pop(d.observed.sj.uid, None) is not None and not _toggles(d):
                self._leveling -= 1
            if len(self.under_way) <= STEERING_IN_FLIGHT // 2:
                self._wake()
