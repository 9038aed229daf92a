"""The operator's tunables, once: their defaults and the ranges they must lie in.

``config.OperatorConfig`` (flags and environment) and the pure core's own configurations
(``policy.queue.PolicyConfig``, ``policy.lifecycle.LifecycleConfig``) take their defaults from here and
check values with the same functions, so a value one accepts the other accepts too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Final

MIN_KUBERNETES_VERSION: Final = "1.32"
"""The oldest Kubernetes the operator supports (the chart's ``kubeVersion``). 1.32 is the first release
where every Job field the operator relies on is on by default: ``spec.managedBy`` (beta in 1.32), which
keeps the built-in Job controller off an adopted Job; ``successPolicy`` (beta in 1.31), which ends an MPI
run when its launcher succeeds; ``podFailurePolicy`` with the pods' ``DisruptionTarget`` condition (GA in
1.31); ``podReplacementPolicy`` (beta in 1.29). The chart's ValidatingAdmissionPolicies need 1.30."""

DEFAULT_THRESHOLD: Final = 0.70
"""Share of schedulable allocatable, per resource, that all requests together may reach."""
DEFAULT_START_TIMEOUT: Final = timedelta(seconds=60)
DEFAULT_RETRY_BACKOFF: Final = timedelta(seconds=10)
DEFAULT_MAX_RETRY_BACKOFF: Final = timedelta(minutes=10)
DEFAULT_TICK: Final = timedelta(seconds=5)
DEFAULT_CACHE_TIMEOUT: Final = timedelta(minutes=10)
"""How long the watch caches may take to fill at start before the process reports itself unhealthy."""
DEFAULT_STALL_TIMEOUT: Final = timedelta(minutes=5)
"""How long the decision loop may go without completing a pass before ``/healthz`` fails."""
DEFAULT_PROTECT_LEVEL: Final = 1
DEFAULT_LAUNCH_BACKLOG: Final = 400
"""Runs under way to their pods (`write.ledger.Ledger.backlog`) from which a new launch waits for the control
plane (`write.launcher`, ``--launch-backlog``): at 5,000 new SJs on a two-core control plane, 400 kept the Job
controller's first sync of a new Job at p50 14 s (88 s unpaced) while launching at 29 a second (21 a second at
128): the Job controller and the scheduler are never idle for want of work, and the rest of a burst waits in the
operator's queue instead of in theirs, where it is relisted, retried and watched by every node agent."""
DEFAULT_STARVATION_AFTER: Final = timedelta(minutes=10)
DEFAULT_MAX_PROTECTION: Final = timedelta(minutes=30)
"""The longest a run keeps its protection (PodDisruptionBudget) within one checkpoint period."""
DEFAULT_THRASH_BACKOFF: Final = timedelta(seconds=30)
"""Wait before the next run after a wasted one; doubles with each wasted run in a row."""
DEFAULT_MAX_THRASH_BACKOFF: Final = timedelta(minutes=10)
DEFAULT_AGING_STEP: Final = timedelta(hours=1)
"""A waiting SJ moves up one interruption's worth in the queue per this much waiting..."""
DEFAULT_AGING_CAP: Final = 10
"""...at most this many."""
DEFAULT_MAX_TERMINATION_GRACE: Final = 300
"""The most seconds an SJ may hold its room after being told to give it back (its grace period)."""
DEFAULT_SCHEDULER: Final = "default-scheduler"
"""The scheduler of a pod that names none: the one whose preemption makes room from the band's pods."""
DEFAULT_SCHEDULERS: Final = frozenset({DEFAULT_SCHEDULER})
"""The schedulers whose pending pods count toward the threshold unless others are configured (``--schedulers``)."""
DEFAULT_MIN_DURATION: Final = timedelta(seconds=10)
"""The shortest ``spec.duration`` accepted: shorter periods make checkpointing the main work."""


def check_threshold(value: float) -> float:
    """0 admits only SJs that request nothing (scavenging paused); 1 lets requests reach all of it."""
    if not 0 <= value <= 1:
        raise ValueError(f"must be within [0, 1], got {value:g}")
    return value


def check_positive(value: timedelta) -> timedelta:
    if value <= timedelta(0):
        raise ValueError("must be a positive duration")
    return value


def check_backoff_cap(cap: timedelta, first: timedelta) -> timedelta:
    if cap < first:
        raise ValueError(f"must not be below the retry backoff ({first.total_seconds():g}s)")
    return cap


def check_non_negative(value: int) -> int:
    """A count or number of seconds: zero or more."""
    if value < 0:
        raise ValueError(f"must not be negative, got {value}")
    return value


DEFAULT_POOL: Final = "default"
"""The nodes in no configured pool; it keeps the cluster's threshold."""


@dataclass(frozen=True)
class Pool:
    """A named group of nodes with its own admission threshold (an overflow or burst pool).

    A node belongs to the first configured pool whose ``node_selector`` its labels match, else to the
    default pool, which keeps ``PolicyConfig.threshold``."""

    name: str
    node_selector: tuple[tuple[str, str], ...]
    threshold: float

    def __post_init__(self) -> None:
        if not self.node_selector:
            raise ValueError(f"pool {self.name}: needs a node selector")
        if self.name == DEFAULT_POOL:
            raise ValueError(f"pool {self.name}: the name is taken by the default pool")
        try:
            check_threshold(self.threshold)
        except ValueError as exc:
            raise ValueError(f"pool {self.name}: threshold {exc}") from None

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(key) == value for key, value in self.node_selector)


def check_pool_names(pools: tuple[Pool, ...]) -> tuple[Pool, ...]:
    names = [pool.name for pool in pools]
    if len(set(names)) != len(names):
        raise ValueError("pool names must be unique")
    return pools


def parse_pools(text: str) -> tuple[Pool, ...]:
    """``NAME:KEY=VALUE[,KEY=VALUE...]:THRESHOLD`` entries separated by ``;``, e.g.
    ``burst:scavenger.dev/pool=burst:1.0``."""
    pools = []
    for entry in filter(None, (part.strip() for part in text.split(";"))):
        parts = entry.split(":")
        if len(parts) != 3:
            raise ValueError(f"{entry!r} is not NAME:KEY=VALUE[,KEY=VALUE]:THRESHOLD")
        name, selector, threshold = (part.strip() for part in parts)
        pairs = [pair.partition("=") for pair in selector.split(",") if pair.strip()]
        if not name or any(not key.strip() or not sep for key, sep, _ in pairs):
            raise ValueError(f"{entry!r} is not NAME:KEY=VALUE[,KEY=VALUE]:THRESHOLD")
        try:
            share = float(threshold)
        except ValueError:
            raise ValueError(f"pool {name}: threshold {threshold!r} is not a number") from None
        try:
            pools.append(Pool(name, tuple((key.strip(), value.strip()) for key, _, value in pairs), share))
        except ValueError as exc:
            raise ValueError(f"{exc} (in {entry!r})") from None
    return check_pool_names(tuple(pools))
