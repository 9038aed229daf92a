"""The queue: who is first, how long each SJ has waited, and when the head is starving.

Most interrupted first ("finish what we started"), then oldest, then by key, so the order is total
and stable from pass to pass.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sj_operator.policy.snapshot import QueuedSJ
from sj_operator.settings import DEFAULT_STARVATION_AFTER, DEFAULT_THRESHOLD, check_threshold


@dataclass(frozen=True)
class PolicyConfig:
    """Tunables of the admission policy."""

    threshold: float = DEFAULT_THRESHOLD
    """Fraction of schedulable allocatable, per resource, that all requests together may reach."""
    starvation_after: timedelta = DEFAULT_STARVATION_AFTER
    """Wait after which the head of the queue stops backfill behind it."""

    def __post_init__(self) -> None:
        try:
            check_threshold(self.threshold)
        except ValueError as exc:
            raise ValueError(f"threshold {exc}") from None
        if self.starvation_after < timedelta(0):
            raise ValueError("starvation_after must not be negative")


DEFAULT_POLICY = PolicyConfig()


def queue_order(queue: Iterable[QueuedSJ]) -> list[QueuedSJ]:
    """Most interrupted first ("finish what we started"), then oldest, then by key."""
    return sorted(queue, key=lambda sj: (-sj.interrupted_count, sj.created, sj.key))


def waiting_since(sj: QueuedSJ) -> datetime:
    """When the SJ started waiting: ``created``, or ``not_before`` when that is later."""
    if sj.not_before is not None and sj.not_before > sj.created:
        return sj.not_before
    return sj.created


def is_starving(sj: QueuedSJ, now: datetime, config: PolicyConfig) -> bool:
    """True when the SJ has waited longer than ``config.starvation_after``."""
    return now - waiting_since(sj) > config.starvation_after
