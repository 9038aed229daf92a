"""The in-flight ledger: what this process wrote or launched that the watch does not show yet.

A pass decides on the watch cache, which lags behind this process's own writes. The ledger holds them until
the watch catches up (read-your-writes): the statuses written (a later pass builds on them, not on the
stale copy), the pods' protection labels written (the label is a run's protection: a later pass must not
toggle it again), the runs launched (their Jobs stand in the view, their pods' room is spoken for) and the
launches queued or under way. It is also where the launcher says when it last made a run, which the Event
recorder and the record hold-back read (in a burst the API server serves the launches first).
"""
from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sj_operator.api import InvalidSpec, Phase, ScavengerJobSpec
from sj_operator.decide import ClusterView, Decided, in_flight
from sj_operator.observed import JobView, PodView, SJObject
from sj_operator.pacing import Pacer, paced
from sj_operator.policy.lifecycle import WAITING, next_run
from sj_operator.policy.snapshot import InFlightRun

__all__ = ["BEHIND_AT", "LAUNCHED_TTL", "WRITTEN_TTL", "Labelled", "Launched", "Launching", "Ledger", "Written"]

WRITTEN_TTL = 30.0
"""Seconds a status (or a pod's protection label) this process wrote is preferred over a watch that has not shown
it yet."""
LAUNCHED_TTL = 60.0
"""Seconds a launch is counted as in flight (and its Job stands in the view) before the watch shows its run
Starting."""

RunKey = tuple[str, str]
"""A run by its namespace and Job name."""


@dataclass(frozen=True)
class Written:
    """A status this process wrote, used until the watch shows it (read-your-writes)."""
    resource_version: str
    status: Mapping[str, Any]
    at: float


@dataclass(frozen=True)
class Labelled:
    """A pod's protection label this process wrote, used until the watch shows it."""
    protected: bool
    at: float


@dataclass(frozen=True)
class Launched:
    """A run this process made, until the watch shows it Starting."""
    run: InFlightRun
    """As launched: no pod scheduled yet."""
    at: float
    job: JobView
    """The Job as made, standing in for it until the watch shows it."""


BEHIND_AT = 16
"""Runs under way to their pods (`Ledger.behind`) from which the control plane counts as behind on them and Events
wait: a burst's hundreds, or a drained node's runs starting again elsewhere; not a few runs starting, nor a few
whose pods cannot be made (a namespace's policy refusing them), which would hold every SJ's Events back."""


@dataclass(frozen=True)
class Launching:
    """An admitted SJ whose launch is queued or under way: its key (for the gauges) and its run as it will be
    launched (its room is spoken for until the launch is done)."""
    key: str
    run_key: RunKey
    run: InFlightRun


@dataclass(frozen=True)
class _Starting:
    """The last pass's entry for an SJ's Starting run in flight, with the spec and the scheduled pods it was
    made for: reused while they are the same (in a burst, a pass has hundreds of them)."""
    spec: ScavengerJobSpec
    scheduled: int
    run: InFlightRun
    key: RunKey
    behind: bool = False
    """Its Job not taken up by the Job controller yet, or its pods not all looked at by the scheduler yet
    (`Ledger.behind`)."""


@dataclass
class Ledger:
    monotonic: Callable[[], float]
    written: dict[str, Written] = field(default_factory=dict)
    """By SJ uid."""
    labelled: dict[RunKey, dict[str, Labelled]] = field(default_factory=dict)
    """By run, by pod uid: the protection labels written that the watch may not show yet."""
    launched: dict[RunKey, Launched] = field(default_factory=dict)
    launching: dict[str, Launching] = field(default_factory=dict)
    """By SJ uid: no pass decides them until their launch is done."""
    ended: set[str] = field(default_factory=set)
    """The SJs (uids) whose launch was done or dropped since a pass last took them (`take_ended`): looked at again
    then, not at every pass while queued (a paced burst keeps thousands queued for minutes)."""
    last_launch: float | None = None
    """When (monotonic) this process last made a run: Events and new runs' records wait while runs are being
    launched."""
    _starting: dict[str, _Starting] = field(default_factory=dict)
    """By SJ uid."""
    _behind: dict[str, RunKey] = field(default_factory=dict)
    """The SJs (uids) of ``_starting`` whose entry is `_Starting.behind`, and its run."""
    _made_before_view: int = 0
    """Runs made before the view of the pass under way (`with_launched`) and since the last `in_flight`: `backlog`
    counts them until a pass has looked at them."""
    _made_after_view: int = 0
    """Runs made since that view."""
    _in_flight: tuple[int | None, dict[RunKey, InFlightRun]] | None = None
    """The runs in flight `in_flight` last found, in order, with the layout of the SJs they were ordered by: sorted
    again only when an SJ came or the layout moved; otherwise the entries that changed or went are changed in
    place (a pass of a burst neither sorts thousands of them again nor walks them)."""
    _scheduled: dict[RunKey, tuple[tuple[PodView, ...], int]] = field(default_factory=dict)
    """The pods of each launched run as last seen, and how many of them are scheduled."""
    _version: int = 0
    """Moves whenever ``launched`` does (through `made`, `deleted` and the launches past their time)."""
    _expiries: list[tuple[float, RunKey]] = field(default_factory=list)
    """A heap of when each launch was made (an entry whose launch was made again since is stale)."""
    _unseen: tuple[int, dict[RunKey, JobView], dict[RunKey, JobView]] | None = None
    """What `with_launched` last found: for ``_version``, the view's Jobs and the launched Jobs unseen."""
    _added: tuple[int, frozenset[RunKey], dict[RunKey, tuple[PodView, ...]], dict[RunKey, InFlightRun]] | None = None
    """What `add_launched` last found: for ``_version``, the runs it was given, the runs' pods, and the runs it
    added."""

    # --- statuses ---------------------------------------------------------------------
    def fresh(self, sj: SJObject) -> tuple[str, Mapping[str, Any]]:
        """The SJ's resourceVersion and raw status, preferring what this process just wrote."""
        mine = self.written.get(sj.uid)
        if mine is not None:
            if sj.resource_version == mine.resource_version or self.monotonic() - mine.at > WRITTEN_TTL:
                del self.written[sj.uid]
            else:
                return mine.resource_version, mine.status
        return sj.resource_version, sj.status

    def wrote(self, uid: str, stored: Mapping[str, Any]) -> None:
        """The SJ's status was written; ``stored`` is the API server's answer."""
        self.written[uid] = Written(stored["metadata"]["resourceVersion"], dict(stored.get("status") or {}),
                                    self.monotonic())

    def stale(self, uid: str) -> None:
        """A write of the SJ's status conflicted: what this process wrote last is not the SJ's any more."""
        self.written.pop(uid, None)

    # --- pods' protection labels --------------------------------------------------------
    def label(self, run: RunKey, pod_uid: str, protected: bool) -> None:
        """The pod's protection label was written."""
        self.labelled.setdefault(run, {})[pod_uid] = Labelled(protected, self.monotonic())

    def with_labels(self, view: ClusterView) -> ClusterView:
        """The view with the protection labels this process wrote that the watch does not show yet, each for
        at most `WRITTEN_TTL` (a label someone else changed meanwhile shows after it). A label the watch shows, or
        whose pod is gone, is forgotten; the view is the same object while no label waits."""
        if not self.labelled:
            return view
        now, shown = self.monotonic(), {}
        for key in list(self.labelled):
            waiting = self.labelled[key]
            pods = view.run_pods.get(key, ())
            present = {pod.uid for pod in pods}
            for uid in [uid for uid, entry in waiting.items() if uid not in present or now - entry.at > WRITTEN_TTL]:
                del waiting[uid]
            out = []
            for pod in pods:
                entry = waiting.get(pod.uid)
                if entry is not None and pod.protected == entry.protected:
                    del waiting[pod.uid]  # the watch shows it
                    entry = None
                out.append(pod if entry is None else replace(pod, protected=entry.protected))
            if waiting:
                shown[key] = tuple(out)
            else:
                del self.labelled[key]
        return replace(view, run_pods={**view.run_pods, **shown}) if shown else view

    # --- launches ---------------------------------------------------------------------
    def begin_launch(self, uid: str, launching: Launching) -> None:
        self.launching[uid] = launching

    def end_launch(self, uid: str) -> None:
        self.launching.pop(uid, None)
        self.ended.add(uid)

    def take_ended(self) -> set[str]:
        """The SJs whose launch was done or dropped since the last call."""
        ended, self.ended = self.ended, set()
        return ended

    def made(self, key: RunKey, run: InFlightRun, job: JobView) -> None:
        """This process made a run: it stands in the view, its room spoken for, until the watch shows it."""
        self.last_launch = now = self.monotonic()
        self._made_after_view += 1
        self.launched[key] = Launched(run, now, job)
        heapq.heappush(self._expiries, (now, key))
        self._version += 1

    def deleted(self, key: RunKey) -> None:
        if self.launched.pop(key, None) is not None:
            self._version += 1
        self._scheduled.pop(key, None)

    def launches_busy_since(self) -> float | None:
        """Now while a launch is under way, else when the last run was made (None: never)."""
        return self.monotonic() if self.launching else self.last_launch

    @property
    def behind(self) -> bool:
        """Whether the control plane is behind on the runs in flight, as the last pass found them: `BEHIND_AT` runs
        or more under way to their pods, each a launch under way, a run made that the watch does not show yet, a
        run whose Job the Job controller has not taken up yet, or one whose pods the scheduler has not all looked
        at yet. Not behind: pods the scheduler found no room for (its decision is made), nor pods the Job
        controller took the Job up and could not make (a namespace's policy refusing them: no backlog, and a
        tenant's runs that never start must not hold every SJ's Events). Events wait for it
        (`pacing.event_wait`)."""
        if len(self._behind) >= BEHIND_AT:
            return True
        unseen = () if self._unseen is None else self._unseen[2].keys()
        if len(self._behind) + len(self.launching) + len(unseen) < BEHIND_AT:
            return False
        runs = {*self._behind.values(), *(launching.run_key for launching in self.launching.values()), *unseen}
        return len(runs) >= BEHIND_AT  # (each once: a run launched is also an SJ's run in flight)

    def backlog(self) -> int:
        """Runs under way to their pods that the control plane has not reached: those the last pass found with
        their Job not taken up by the Job controller or their pods not all looked at by the scheduler (as for
        `behind`), and those made since the view it was built on. A launch waits while there are ``--launch-backlog``
        of them (`write.launcher`)."""
        return len(self._behind) + self._made_before_view + self._made_after_view

    def not_leading(self) -> None:
        """Another replica decides: what the last pass found behind, and the runs made since, are no longer looked
        at again (a replica that leads again launches at once)."""
        self._behind = {}
        self._made_before_view = self._made_after_view = 0
        self._unseen = None

    # --- the view ---------------------------------------------------------------------
    def with_launched(self, view: ClusterView) -> ClusterView:
        """The view with the Jobs this process made that the watch does not show yet (a launch writes no
        status, so its Job is what says the SJ has a run)."""
        # In the view: counted once a pass's `in_flight` has them.
        self._made_before_view, self._made_after_view = self._made_before_view + self._made_after_view, 0
        self._expire(self.monotonic())
        kept = self._unseen
        if kept is None or not (kept[0] == self._version and view.jobs == kept[1]):
            # The same launches and Jobs: the same Jobs unseen (no walk over every launch).
            unseen = {key: entry.job for key, entry in self.launched.items() if key not in view.jobs}
            kept = self._unseen = (self._version, dict(view.jobs), unseen)
        unseen = kept[2]
        return replace(view, jobs={**view.jobs, **unseen}) if unseen else view

    def _expire(self, now: float) -> None:
        """Forgets the launches counted longer than `LAUNCHED_TTL` at ``now`` (a heap of when each was made),
        and takes them out of what `with_launched` and `add_launched` last found."""
        heap = self._expiries
        while heap and now - heap[0][0] > LAUNCHED_TTL:
            at, key = heapq.heappop(heap)
            entry = self.launched.get(key)
            if entry is not None and entry.at == at:
                del self.launched[key]
                self._scheduled.pop(key, None)
                if self._unseen is not None:
                    self._unseen[2].pop(key, None)
                if self._added is not None:
                    self._added[3].pop(key, None)

    async def in_flight(self, decided: list[Decided], on_fault: Callable[[SJObject, Exception], None], *,
                        gone: Iterable[str] | None = None,
                        position: Callable[[str], int] | None = None, layout: int | None = None,
                        pacer: Pacer | None = None) -> dict[RunKey, InFlightRun]:
        """Runs that are Starting and not fully scheduled, and new runs not written into their SJs' statuses yet
        (`lifecycle.record_from`: a cluster behind may take minutes to reach a new run): their pods'
        room is spoken for. A run's entry is
        the last pass's while its spec and scheduled pods are. ``gone``: the SJs no longer decided, when
        ``decided`` are only the SJs decided in this pass (the others keep their runs), then in the order of
        ``position`` (of an SJ uid; ``layout`` moves whenever the positions may have changed otherwise than by SJs
        coming and going); None: ``decided`` is every SJ, in its order. ``pacer`` is asked every `pacing.SLICE` SJs (a
        full pass's are 10,000 at that size): a pass whose new entries are not all made yet leaves the last ones in
        place meanwhile, for `behind`."""
        before = self._starting
        full = gone is None
        made, behind = ({}, {}) if full else (self._starting, self._behind)
        removed: list[RunKey] = []
        updated: list[str] = []
        came = False

        def drop(uid: str) -> None:
            behind.pop(uid, None)
            if (entry := made.pop(uid, None)) is not None:
                removed.append(entry.key)

        for uid in gone or ():
            drop(uid)
        async for d in paced(decided, pacer):
            uid = d.observed.sj.uid
            last = before.get(uid)
            entry = _in_flight_entry(d, last, on_fault)
            if entry is None:
                drop(uid)
                continue
            made[uid] = entry
            if entry.behind:
                behind[uid] = entry.key
            else:
                behind.pop(uid, None)
            if entry is not last:
                if last is not None and last.key == entry.key:
                    updated.append(uid)
                else:
                    came = True
        if full:
            self._starting, self._behind = made, behind
        self._made_before_view = 0  # the runs made before this pass's view are among those it found behind
        return dict(self._in_order(made, position, layout, again=full or came, removed=removed, updated=updated))

    def _in_order(self, made: dict[str, _Starting], position: Callable[[str], int] | None, layout: int | None, *,
                  again: bool, removed: list[RunKey], updated: list[str]) -> dict[RunKey, InFlightRun]:
        """The runs in flight in the view's order (``made``'s with ``position`` None), sorted ``again`` or when the
        layout moved; otherwise the last ones less those ``removed`` and with the entries of the SJs ``updated``
        changed in place."""
        kept = self._in_flight
        if again or kept is None or kept[0] != layout:
            order = made if position is None else sorted(made, key=position)
            self._in_flight = kept = (layout, {made[uid].key: made[uid].run for uid in order})
            return kept[1]
        runs = kept[1]
        for key in removed:
            runs.pop(key, None)
        for uid in updated:
            runs[made[uid].key] = made[uid].run
        return runs

    def add_launched(self, view: ClusterView, runs: dict[RunKey, InFlightRun]) -> None:
        """Adds to ``runs`` those this process launched that the cache does not show as Starting yet, and those
        being launched; forgets the launches past `LAUNCHED_TTL`."""
        for launching in self.launching.values():
            runs.setdefault(launching.run_key, launching.run)
        self._expire(self.monotonic())
        kept = self._added
        if kept is not None and kept[0] == self._version and runs.keys() == kept[1] and view.run_pods == kept[2]:
            # The same launches, runs and pods: the same runs added (no walk over every launch).
            runs.update(kept[3])
            return
        before = set(runs)
        for key, entry in self.launched.items():
            if key not in runs:
                pods = view.run_pods.get(key, ())
                counted = self._scheduled.get(key)
                if counted is None or counted[0] is not pods:  # the same pods: the same count, not walked again
                    counted = self._scheduled[key] = (pods, sum(1 for p in pods if p.node))
                scheduled = counted[1]
                if scheduled < entry.run.pods:
                    runs[key] = (entry.run if scheduled == entry.run.scheduled_pods
                                 else replace(entry.run, scheduled_pods=scheduled))
        self._added = (self._version, frozenset(before), dict(view.run_pods),
                       {key: run for key, run in runs.items() if key not in before})


def _in_flight_entry(d: Decided, last: _Starting | None,
                     on_fault: Callable[[SJObject, Exception], None]) -> _Starting | None:
    """The decided SJ's run in flight (`Ledger.in_flight`): ``last`` while its spec, scheduled pods and name are
    the same; None when it has none (no run, an invalid spec, every pod scheduled, or its room could not be
    worked out: ``on_fault``)."""
    st, o = d.step.status, d.observed
    starting = st.phase is Phase.STARTING
    job_name = st.job_name if starting else _unrecorded_run(d)
    if not job_name or isinstance(o.spec, InvalidSpec):
        return None
    spec = o.spec if starting or o.run.job is None else o.spec.launched_config(o.run.job.config_index)
    scheduled = sum(1 for p in o.run.pods if p.node)
    if scheduled >= spec.parallelism:
        return None
    key = (o.sj.namespace, job_name)
    live = [p for p in o.run.pods if not p.deleting]
    # Behind: the Job controller has not taken the Job up (pods it took it up and did not make, it could not), or
    # the scheduler has not looked at every pod made. Not what no controller of the control plane is to take up: a Job
    # suspended (a queueing controller's), pods gated or of a scheduler not counted (`PodView.unclaimed`), which may
    # wait for good and must neither hold Events nor pace every tenant's launches.
    job = o.run.job
    behind = ((len(live) < spec.parallelism and (job is None or (job.started is None and not job.suspended)))
              or any(p.placed is None and not p.unclaimed for p in live))
    same = last is not None and last.spec is spec and last.scheduled == scheduled
    if same and last is not None and last.key == key and last.behind == behind:
        return last
    try:
        run = last.run if same and last is not None else in_flight(o.sj, spec, scheduled)
    except Exception as exc:
        on_fault(o.sj, exc)
        return None
    return _Starting(spec, scheduled, run, key, behind)


def _unrecorded_run(d: Decided) -> str | None:
    """The name of a waiting SJ's next run (`lifecycle.next_run`) when its step leaves it out of the SJ's status
    (`lifecycle.record_from`)."""
    st = d.step.status
    if d.step.waiting or not (st.phase is None or st.phase in WAITING):
        return None
    job = next_run(d.observed.run, st, d.observed.sj.name)
    return None if job is None else job.name
