"""The write plan: which of a pass's decisions are written, in which order, and in which lane. Pure.

Each decision that has something to carry out takes one lane:

- ``first``: an admitted SJ's own write; its launch writes over it, so it goes before the launches;
- ``rest``: every other write, carried out while the launches are under way;
- ``steering``: victim steering's bookkeeping (`Step.kind` ``steers``), carried out in the background;
- ``held``: a new run's record (``records-run``) while runs are being launched: it waits for them to pause.

Some decisions are not written at all: those that change nothing, a new SJ admitted at first sight (its
queued status is not written: its launch's outcome is), and the SJs whose steering writes or launch are
still under way (their decision is the one being carried out).
"""
from __future__ import annotations

from collections.abc import Iterable, Set
from dataclasses import dataclass
from datetime import datetime

from sj_operator.decide import Decided
from sj_operator.pacing import EVENT_DEFERRAL, event_wait

__all__ = ["Launches", "WritePlan", "joined", "plan_writes", "writes"]


@dataclass(frozen=True)
class Launches:
    """What the launches are doing, as the plan needs it: when they were last busy (monotonic seconds: now
    while one is under way, else when the last run was made; None: never) and the clock's reading."""
    busy_since: float | None
    clock: float


@dataclass(frozen=True)
class WritePlan:
    first: tuple[Decided, ...] = ()
    """The admitted SJs' own writes: before their launches."""
    rest: tuple[Decided, ...] = ()
    """Written while the launches are under way."""
    steering: tuple[Decided, ...] = ()
    """Carried out in the background."""
    held: tuple[Decided, ...] = ()
    """New runs' records that wait for the launches to pause."""
    due_in: float | None = None
    """Seconds until the first of ``held`` is due (None: nothing held)."""


def writes(d: Decided) -> bool:
    """Whether a decision has anything to carry out: a new status, an Event or an action."""
    return bool(d.step.events or d.step.actions) or (d.step.status is not d.observed.status
                                                     and d.step.status != d.observed.status)


def plan_writes(decided: Iterable[Decided], *, admitted: Set[str], busy: Set[str], launches: Launches,
                now: datetime) -> WritePlan:
    """The lanes of a pass's decisions. ``admitted``: the keys of the SJs admitted in this pass; ``busy``: the
    uids of the SJs whose steering writes or launch are under way; ``now``: the pass's time."""
    first: list[Decided] = []
    rest: list[Decided] = []
    steering: list[Decided] = []
    held: list[Decided] = []
    due: float | None = None
    for d in decided:
        kind, key = d.step.kind, d.observed.sj.key
        if not writes(d) or (busy and d.observed.sj.uid in busy) or (kind == "queues" and key in admitted):
            continue
        if kind == "steers":
            steering.append(d)
        elif kind == "records-run" and (wait := _record_wait(d, launches, now)) > 0:
            held.append(d)
            due = wait if due is None else min(due, wait)
        else:
            (first if key in admitted else rest).append(d)
    return WritePlan(tuple(first), tuple(rest), tuple(steering), tuple(held), due)


def _record_wait(d: Decided, launches: Launches, now: datetime) -> float:
    """Seconds a new run's record waits for the launches: while runs are being launched (one is under way,
    or the last was made less than `pacing.EVENT_QUIET` ago), a run is written into its SJ's status once the
    launches pause, at most `EVENT_DEFERRAL` seconds after its Job was made, as Events wait
    (`pacing.event_wait`). In a burst the API server serves the launches first; the run holds its room
    meanwhile (its decision is the record, so it counts as in flight)."""
    if launches.busy_since is None:
        return 0.0
    job, clock = d.observed.run.job, launches.clock
    age = max(0.0, (now - job.created).total_seconds()) if job is not None and job.created is not None else 0.0
    return event_wait(clock, clock - age, launches.busy_since, most=EVENT_DEFERRAL)


def joined(plans: Iterable[WritePlan]) -> WritePlan:
    """The plans of consecutive slices of a pass's decisions, as one."""
    plans = list(plans)
    if len(plans) == 1:
        return plans[0]
    dues = [p.due_in for p in plans if p.due_in is not None]
    return WritePlan(tuple(d for p in plans for d in p.first), tuple(d for p in plans for d in p.rest),
                     tuple(d for p in plans for d in p.steering), tuple(d for p in plans for d in p.held),
                     min(dues) if dues else None)
