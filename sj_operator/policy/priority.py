"""Running priority of a ScavengerJob and the PriorityClass band its pods launch in.

Pod priority is immutable, so progress is tracked as a *running level*: how far the SJ is inside its
current checkpoint period of length ``duration``, cut into ``levels`` steps. Runs at or past a level
are protected (by a PodDisruptionBudget the adapter toggles), so the least-progressed SJ is the
preemption victim. At each period boundary the SJ has checkpointed and the level starts over at 0.

All functions are pure; the caller passes ``now``. Time arithmetic is done in whole microseconds,
so boundaries are exact.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise
from types import MappingProxyType

_MICROSECOND = timedelta(microseconds=1)

PRIORITY_BAND: Mapping[str, int] = MappingProxyType(
    {
        "scavenger-band-0": -1000,
        "scavenger-band-1": -999,
        "scavenger-band-2": -998,
        "scavenger-band-3": -997,
    }
)
"""PriorityClass name to value, lowest first. Every value is below all other workloads and below the
cluster-autoscaler's expendable cutoff (-10), so SJ pods never trigger a scale-up nor block a
scale-down."""

PREEMPTION_POLICY = "Never"
"""SJ pods never preempt anything, whatever their band."""

DEFAULT_LAUNCH_STEPS: tuple[int, ...] = (0, 3, 6, 10)
"""Interruption counts from which an SJ launches one band higher."""



def _elapsed_periods(now: datetime, period_start: datetime, duration: timedelta) -> tuple[int, int, int]:
    """Whole periods elapsed, microseconds into the current one, and the period in microseconds."""
    period = duration // _MICROSECOND
    if period <= 0:
        raise ValueError(f"duration must be positive, got {duration}")
    elapsed = max(0, (now - period_start) // _MICROSECOND)
    whole, into = divmod(elapsed, period)
    return whole, into, period


def current_period_start(now: datetime, period_start: datetime, duration: timedelta) -> datetime:
    """``period_start`` advanced by the whole ``duration``s that have elapsed by ``now``.

    At exactly one duration the period has advanced. Before ``period_start`` it is unchanged.
    """
    whole, _, _ = _elapsed_periods(now, period_start, duration)
    return period_start + whole * duration


def running_level(now: datetime, period_start: datetime, duration: timedelta, levels: int) -> int:
    """``floor(progress x levels)`` in ``0 .. levels-1``, progress being the fraction of the current period
    elapsed (``((now - period_start) mod duration) / duration``); 0 before ``period_start``."""
    if levels < 1:
        raise ValueError(f"levels must be at least 1, got {levels}")
    _, into, period = _elapsed_periods(now, period_start, duration)
    return into * levels // period


@dataclass(frozen=True, slots=True)
class RunClock:
    """Where a run stands in its checkpoint periods at one moment: what the state machine records and
    protects by, and what victim steering weighs."""

    period_start: datetime
    """When its current checkpoint period began (`current_period_start`)."""
    level: int
    """Its running level in that period (`running_level`)."""
    protected: bool
    """Whether that level is protected (`is_protected`)."""


def run_clock(now: datetime, period_start: datetime, duration: timedelta, levels: int,
              protect_from_level: int) -> RunClock:
    """A run's `RunClock` at ``now``, its periods counted from ``period_start``."""
    level = running_level(now, period_start, duration, levels)
    return RunClock(current_period_start(now, period_start, duration), level, is_protected(level, protect_from_level))


def is_protected(level: int, protect_from_level: int) -> bool:
    """True when a run at ``level`` is protected from preemption.

    ``protect_from_level >= levels`` therefore never protects, and 0 always does.
    """
    if level < 0:
        raise ValueError(f"level must not be negative, got {level}")
    return level >= protect_from_level


DRAIN_TAINTS = frozenset({"ToBeDeletedByClusterAutoscaler", "node.kubernetes.io/unschedulable"})
"""Taints that mark a node on its way out: the cluster autoscaler's scale-down, a drain."""


def draining_nodes(nodes: Iterable[tuple[str, bool, Iterable[str]]]) -> frozenset[str]:
    """The nodes being drained or removed, from ``(name, unschedulable, taint keys)``: cordoned
    (``kubectl drain`` cordons first) or tainted for deletion by the cluster autoscaler. Pods there
    get no protection, so a drain or a scale-down never waits on a scavenger budget."""
    return frozenset(name for name, unschedulable, taints in nodes
                     if unschedulable or any(key in DRAIN_TAINTS for key in taints))


def protection_begins(now: datetime, period_start: datetime, duration: timedelta, levels: int,
                      protect_from_level: int) -> datetime:
    """When protection begins in the period current at ``now``: when its level reaches ``protect_from_level`` of
    ``levels`` (the period's start for level 0)."""
    return current_period_start(now, period_start, duration) + duration * protect_from_level / levels


def protection_expired(now: datetime, period_start: datetime, duration: timedelta, levels: int,
                       protect_from_level: int, max_protection: timedelta) -> bool:
    """True once a run has been protected for ``max_protection`` in its current period (protection
    begins at ``protect_from_level`` of ``levels``): no budget is held longer than that bound."""
    return now - protection_begins(now, period_start, duration, levels, protect_from_level) >= max_protection


def steady_until(now: datetime, period_start: datetime, duration: timedelta, levels: int, protect_from_level: int,
                 max_protection: timedelta) -> datetime | None:
    """The first moment after ``now`` at which the current period's start, ``running_level`` or
    ``protection_expired`` can change (an exclusive bound: all three are the same at every moment before
    it); None before ``period_start``, where this is not worked out."""
    if now < period_start:
        return None
    whole, into, period = _elapsed_periods(now, period_start, duration)
    current = period_start + whole * duration
    level = into * levels // period
    # The smallest offset into the period whose level is above this one: the next level, or the next
    # period when this is the last level.
    until = current + (-(-(level + 1) * period // levels)) * _MICROSECOND
    expires = current + duration * protect_from_level / levels + max_protection
    return expires if now < expires < until else until


@dataclass(frozen=True)
class RunProgress:
    """A running SJ as victim steering sees it."""

    key: str
    nodes: frozenset[str]
    """Nodes its pods run on."""
    unsaved: timedelta
    """Work since its last checkpoint boundary: now - start of its current period."""
    protected_by_level: bool


def steering_exemptions(runs: Iterable[RunProgress]) -> frozenset[str]:
    """Runs left unprotected although their level asks for protection.

    The scheduler first picks the node whose preemption violates the fewest budgets, so
    while some run anywhere is unprotected, protection already steers it there: nothing
    is exempted. When every SJ run is protected, budgets no longer tell nodes or pods
    apart and the scheduler falls back to evicting the youngest pod of the node it picks,
    whatever that loses. Then, on each node, the run with the least unsaved work (ties:
    the key, for stability) stays unprotected, so a preemption on any node costs the
    least work there. A gang exempted on one node is unprotected on all of its nodes.
    """
    runs = list(runs)
    if any(not run.protected_by_level for run in runs):
        return frozenset()
    by_node: dict[str, list[RunProgress]] = {}
    for run in runs:
        for node in run.nodes:
            by_node.setdefault(node, []).append(run)
    exempt: set[str] = set()
    for node in sorted(by_node):
        on_node = by_node[node]
        if any(r.key in exempt for r in on_node):
            continue
        exempt.add(min(on_node, key=lambda r: (r.unsaved, r.key)).key)
    return frozenset(exempt)


def launch_class(interrupted_count: int, steps: Sequence[int] = DEFAULT_LAUNCH_STEPS) -> str:
    """PriorityClass for a new run: one band up for each entry of ``steps`` reached after the first.

    With the default steps: 0-2 interruptions band-0, 3-5 band-1, 6-9 band-2, 10 or more band-3.
    """
    if interrupted_count < 0:
        raise ValueError(f"interrupted_count must not be negative, got {interrupted_count}")
    if not steps or len(steps) > len(PRIORITY_BAND):
        raise ValueError(f"steps must have 1 to {len(PRIORITY_BAND)} entries, got {len(steps)}")
    if any(lower >= upper for lower, upper in pairwise(steps)):
        raise ValueError(f"steps must be strictly increasing, got {tuple(steps)}")
    reached = sum(1 for step in steps if interrupted_count >= step)
    return list(PRIORITY_BAND)[max(0, reached - 1)]
