"""One bad object never stops the loop: what is skipped, why, and whether the loop itself still moves.

Any object the operator watches may hold any value the API server accepts. A view that cannot be made,
or an SJ whose observation, decision, admission or explanation raises, is a fault of that one object:
it is skipped, counted (``scavenger_skipped_objects_total``, by kind and reason), logged by name and,
for an SJ, reported on the SJ itself (its ``Reconciled`` condition and an Event); every other object
goes on. What no object can cause, the loop itself making no progress, is the `Watchdog`'s: ``/healthz``
fails once no pass has completed for longer than its timeout, so the replica is restarted.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

__all__ = ["CONDITION", "REASONS", "Fault", "Stage", "Watchdog", "culprits", "describe"]

Stage = Literal["view", "observe", "decide", "admission", "explain", "write", "launch"]
REASONS: dict[Stage, str] = {
    "view": "ViewFailed",
    "observe": "ObserveFailed",
    "decide": "DecideFailed",
    "admission": "AdmissionFailed",
    "explain": "ExplainFailed",
    "write": "WriteFailed",
    "launch": "LaunchFailed",
}
"""The ``reason`` of the metric, the condition and the Event, by the stage that raised."""
CONDITION = "Reconciled"
"""The SJ condition a fault sets to False (and removes once the SJ is handled again)."""
_MESSAGE_MOST = 400


@dataclass(frozen=True)
class Fault:
    """One object skipped by one stage of the loop."""

    kind: str
    """``Pod``, ``Job``, ``ScavengerJob``, ``ResourceQuota``, ``Node``, ``ScavengerQuota``."""
    namespace: str
    name: str
    stage: Stage
    error: str
    """`describe` of what was raised."""

    @property
    def reason(self) -> str:
        return REASONS[self.stage]

    @property
    def message(self) -> str:
        return f"the operator skips this object: its {self.stage} step failed ({self.error})"

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {where or '(unnamed)'}: {self.reason}: {self.error}"


def describe(exc: BaseException) -> str:
    """What was raised, in one bounded line (an exception's text may quote the hostile value itself)."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= _MESSAGE_MOST else text[:_MESSAGE_MOST - 1] + "…"


T = TypeVar("T")


def culprits(items: Sequence[T], fails: Callable[[Sequence[T]], bool]) -> list[T]:
    """The items that make ``fails`` true on their own, found by halving (group testing): about
    ``2 k log2(n)`` calls for ``k`` culprits among ``n``. An item found only together with others (when
    ``fails(items)`` holds but no half fails) is not named: the caller skips the whole call instead."""
    if not items or not fails(items):
        return []
    found: list[T] = []
    pending: list[Sequence[T]] = [items]
    while pending:
        group = pending.pop()
        if len(group) == 1:
            found.append(group[0])
            continue
        middle = len(group) // 2
        for half in (group[:middle], group[middle:]):
            if fails(half):
                pending.append(half)
    return found


@dataclass
class Watchdog:
    """Whether the decision loop still completes passes: ``stalled`` says why not once none has completed
    for ``timeout`` seconds (of ``clock``) since the loop started."""

    timeout: float
    clock: Callable[[], float] = time.monotonic
    last: float | None = None
    """When the loop last completed a pass (or started); None before it starts."""

    def progressed(self) -> None:
        self.last = self.clock()

    def stalled(self) -> str | None:
        if self.last is None:
            return None
        age = self.clock() - self.last
        if age <= self.timeout:
            return None
        return f"the decision loop has completed no pass for {age:.0f}s (more than {self.timeout:.0f}s)"
