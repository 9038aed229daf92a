"""The queue: who is first, how long each SJ has waited, and when the head is starving.

Most interrupted first ("finish what we started"), then oldest, then by key, so the order is total
and stable from pass to pass.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sj_operator.policy.snapshot import QueuedSJ
from sj_operator.policy.tenancy import NO_DEFAULTS, QuotaDefaults
from sj_operator.settings import (
    DEFAULT_AGING_CAP,
    DEFAULT_AGING_STEP,
    DEFAULT_STARVATION_AFTER,
    DEFAULT_THRESHOLD,
    Pool,
    check_pool_names,
    check_threshold,
)


@dataclass(frozen=True)
class PolicyConfig:
    """Tunables of the admission policy."""

    threshold: float = DEFAULT_THRESHOLD
    """Fraction of schedulable allocatable, per resource, that all requests together may reach."""
    starvation_after: timedelta = DEFAULT_STARVATION_AFTER
    """Wait after which the head of the queue stops backfill behind it."""
    aging_step: timedelta = DEFAULT_AGING_STEP
    """A waiting SJ ranks as if interrupted once more per this much waiting..."""
    aging_cap: int = DEFAULT_AGING_CAP
    """...at most this many times."""
    pools: tuple[Pool, ...] = ()
    """Node pools with their own threshold; the nodes in none of them form the default pool."""
    quota_defaults: QuotaDefaults = NO_DEFAULTS
    """The cap and weight of a namespace that no ScavengerClusterQuota selects (`policy.tenancy`)."""

    def __post_init__(self) -> None:
        try:
            check_threshold(self.threshold)
        except ValueError as exc:
            raise ValueError(f"threshold {exc}") from None
        if self.starvation_after < timedelta(0):
            raise ValueError("starvation_after must not be negative")
        if self.aging_step <= timedelta(0) or self.aging_cap < 0:
            raise ValueError("aging_step must be positive and aging_cap not negative")
        check_pool_names(self.pools)


DEFAULT_POLICY = PolicyConfig()


def queue_order(queue: Iterable[QueuedSJ], now: datetime | None = None,
                config: PolicyConfig = DEFAULT_POLICY) -> list[QueuedSJ]:
    """Most interrupted first ("finish what we started"), then oldest, then by key. With ``now``, waiting
    counts too: an SJ ranks as if interrupted once more per ``aging_step`` it has waited (at most
    ``aging_cap`` more), so no SJ starves behind a stream of much-interrupted ones."""
    if now is None:
        return sorted(queue, key=lambda sj: (-sj.interrupted_count, sj.created, sj.key))
    step, cap = config.aging_step, config.aging_cap

    def rank(sj: QueuedSJ) -> tuple[int, datetime, str]:
        waited = max(now - waiting_again_since(sj), timedelta(0))
        return -sj.interrupted_count - min(waited // step, cap), sj.created, sj.key

    return sorted(queue, key=rank)


def waiting_again_since(sj: QueuedSJ) -> datetime:
    """When the SJ's current wait began: its last interruption (else its creation), or its backoff's end."""
    start = sj.waiting_from or sj.created
    return sj.not_before if sj.not_before is not None and sj.not_before > start else start


def waiting_since(sj: QueuedSJ) -> datetime:
    """When the SJ started waiting: ``created``, or ``not_before`` when that is later."""
    if sj.not_before is not None and sj.not_before > sj.created:
        return sj.not_before
    return sj.created


def is_starving(sj: QueuedSJ, now: datetime, config: PolicyConfig) -> bool:
    """True when the SJ has waited longer than ``config.starvation_after``."""
    return now - waiting_since(sj) > config.starvation_after
