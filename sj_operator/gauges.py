"""The gauges after a pass: SJs by phase and why the waiting ones wait; the capacity in use."""
from __future__ import annotations

from collections.abc import Iterable, Set
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


@dataclass(frozen=True, slots=True)
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
        self._counted: dict[str, tuple[str | None, str | None]] = {}
        """By SJ uid: what it counts as without the launches (its phase or Starting, and why it waits; the
        pairs are shared, `_COUNTS`)."""
        self._phases: dict[str, int] = {}
        self._pending: dict[str, int] = {}
        self._starting = 0
        """What ``starting`` says."""
        self._capacity: tuple[tuple[NodeInfo, ...], Resources] = ((), EMPTY)
        """The nodes last seen and what they can schedule."""

    @property
    def starting(self) -> int:
        """The SJs the last report counted as Starting (launched, their pods not all running), the launches then
        queued or under way included (each once)."""
        return self._starting

    async def report(self, view: ClusterView, decided: list[Decided], launching: Set[str], *,
                     gone: Iterable[str] | None = None) -> None:
        """``launching``: the keys of the SJs whose launch is queued or under way (counted as Starting).
        ``gone``: the SJs no longer decided, when ``decided`` are only the SJs decided in this pass (the others
        count as they did); None: ``decided`` is every SJ."""
        if gone is None:
            self._counted, self._phases, self._pending = {}, {}, {}
            gone = ()
        for uid in gone:
            self._uncount(uid)
        pacer = Pacer(self.hold_budget)
        for start in range(0, len(decided), SLICE):
            if start:
                await pacer.breathe()
            for d in decided[start:start + SLICE]:
                self._count(d)
        phases, pending = self._phases, self._pending
        if launching:  # its run is not in its status yet
            phases, pending = dict(phases), dict(pending)
            uids = self.memo.work.uids
            for key in launching:
                counted = self._counted.get(uids.get(key, ""))
                if counted is not None:
                    _move(phases, counted[0], -1)
                    _move(pending, counted[1], -1)
                    _move(phases, "Starting", 1)
        self._starting = phases.get("Starting", 0)
        if self._capacity[0] != view.nodes:
            self._capacity = (view.nodes, total(n.allocatable for n in view.nodes if n.ready and not n.unschedulable))
        schedulable = self._capacity[1]
        self.memo.sums.update(view.active_pods)
        requested = self.memo.sums.cluster
        used = {r: requested.get(r, 0) / amount for r, amount in schedulable.items() if amount > 0 and r != "pods"}
        self.metrics.set_state(dict(pending), dict(phases), used, reasons=(*WAIT_REASONS, "Queued"),
                               phase_names=(p.value for p in Phase))
        self.metrics.last_pass.set_to_current_time()

    def _count(self, d: Decided) -> None:
        """Counts the SJ as its decision says (the launches aside)."""
        st, sj = d.step.status, d.observed.sj
        uid = sj.uid
        labels = self.reported.get(uid)
        if labels is None or labels.status is not st:
            labels = self.reported[uid] = _reported(st)
        phase: str | None = labels.phase
        why = labels.waits_for
        if d.observed.run.job is not None and _unrecorded(d, phase):
            phase, why = "Starting", None
        before = self._counted.get(uid)
        if before is not None:
            if before[0] == phase and before[1] == why:
                return
            self._uncount(uid)
        self._counted[uid] = _COUNTS.setdefault((phase, why), (phase, why))
        if phase is not None:
            self._phases[phase] = self._phases.get(phase, 0) + 1
        if why is not None:
            self._pending[why] = self._pending.get(why, 0) + 1

    def _uncount(self, uid: str) -> None:
        counted = self._counted.pop(uid, None)
        if counted is not None:
            _move(self._phases, counted[0], -1)
            _move(self._pending, counted[1], -1)


_COUNTS: dict[tuple[str | None, str | None], tuple[str | None, str | None]] = {}
"""Every (phase, why it waits) pair counted, shared by the SJs that count as it (a few phases and reasons)."""


def _move(counts: dict[str, int], name: str | None, by: int) -> None:
    """Counts ``by`` more (or fewer) under ``name`` (None: not counted); a count back to 0 is dropped."""
    if name is None:
        return
    value = counts.get(name, 0) + by
    if value:
        counts[name] = value
    else:
        del counts[name]
