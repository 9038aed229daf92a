"""What the state machine reads of a run and what it decides: the actions, Events and new status."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sj_operator.api import ScavengerJobStatus
from sj_operator.observed import JobView, PodView


@dataclass(frozen=True)
class Run:
    """What the cluster shows of one run: its Job (None if not seen) and its pods."""
    job: JobView | None
    pods: tuple[PodView, ...] = ()

    @property
    def holds_resources(self) -> bool:
        return any(p.holds_resources for p in self.pods)


@dataclass(frozen=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True)
class DeleteRun:
    job_name: str
    reason: str


@dataclass(frozen=True)
class SetProtection:
    job_name: str
    protected: bool


Action = DeleteRun | SetProtection


@dataclass(frozen=True)
class Step:
    status: ScavengerJobStatus
    actions: tuple[Action, ...] = ()
    events: tuple[Event, ...] = ()
    waiting: bool = False
    """The SJ waits for admission (and its backoff, if any, has passed)."""
