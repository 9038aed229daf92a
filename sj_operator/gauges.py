"""The gauges after a pass: SJs by phase and why the waiting ones wait; the capacity in use."""
from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass

from sj_operator.api import Phase, ScavengerJobStatus
from sj_operator.decide import ClusterView, Decided
from sj_operator.memo import PassMemo
from sj_operator.metrics import Metrics
from sj_operator.observed import NodeInfo
from sj_operator.pacing import SLICE, Pacer
from sj_operator.policy.conditions import WAIT_REASONS, admitted_condition
from sj_operator.resources import EMPTY, Resources, total

__all__ = ["Gauges"]


@dataclass(frozen=True)
class Reported:
    """An SJ's status as last reported, with its phase and why it waits."""
    status: ScavengerJobStatus
    phase: str | None
    waits_for: str | None


def _reported(status: ScavengerJobStatus) -> Reported:
    """An SJ's phase in the gauges and, while it waits, why (``Queued`` when no reason is written)."""
    if status.phase is None:
        return Reported(status, None, None)
    if status.phase not in (Phase.PENDING, Phase.INTERRUPTED, Phase.SUSPENDED):
        return Reported(status, status.phase.value, None)
    cond = admitted_condition(status.conditions)
    why = cond.reason if cond is not None and cond.status == "False" and cond.reason else "Queued"
    return Reported(status, status.phase.value, why)


def _unrecorded(d: Decided, phase: str | None) -> bool:
    """An SJ whose next run exists and is not in its status yet (`lifecycle.launched`)."""
    job = d.observed.run.job
    return (job is not None and not d.step.waiting and not job.deleting
            and phase in (None, Phase.PENDING.value, Phase.INTERRUPTED.value))


class Gauges:
    def __init__(self, metrics: Metrics, memo: PassMemo, hold_budget: float) -> None:
        self.metrics, self.memo, self.hold_budget = metrics, memo, hold_budget
        self.reported: dict[str, Reported] = {}
        """By SJ uid."""
        self._capacity: tuple[tuple[NodeInfo, ...], Resources] = ((), EMPTY)
        """The nodes last seen and what they can schedule."""

    async def report(self, view: ClusterView, decided: list[Decided], launching: Set[str]) -> None:
        """``launching``: the keys of the SJs whose launch is queued or under way (counted as Starting)."""
        phases: dict[str, int] = {}
        pending: dict[str, int] = {}
        reported = self.reported
        pacer = Pacer(self.hold_budget)
        for start in range(0, len(decided), SLICE):
            if start:
                await pacer.breathe()
            for d in decided[start:start + SLICE]:
                st, uid = d.step.status, d.observed.sj.uid
                labels = reported.get(uid)
                if labels is None or labels.status is not st:
                    labels = reported[uid] = _reported(st)
                if (d.observed.run.job is not None and _unrecorded(d, labels.phase)) or (
                        launching and d.observed.sj.key in launching):
                    phases["Starting"] = phases.get("Starting", 0) + 1  # its run is not in its status yet
                    continue
                if labels.phase is None:
                    continue
                phases[labels.phase] = phases.get(labels.phase, 0) + 1
                if labels.waits_for is not None:
                    pending[labels.waits_for] = pending.get(labels.waits_for, 0) + 1
        if self._capacity[0] != view.nodes:
            self._capacity = (view.nodes, total(n.allocatable for n in view.nodes if n.ready and not n.unschedulable))
        schedulable = self._capacity[1]
        self.memo.sums.update(view.active_pods)
        requested = self.memo.sums.cluster
        used = {r: requested.get(r, 0) / amount for r, amount in schedulable.items() if amount > 0 and r != "pods"}
        self.metrics.set_state(pending, phases, used, reasons=(*WAIT_REASONS, "Queued"),
                               phase_names=(p.value for p in Phase))
        self.metrics.last_pass.set_to_current_time()
