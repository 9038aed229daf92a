"""What a decision pass remembers between passes, so its cost follows what changed.

The watch cache hands the loop immutable views, replaced only when the object changed, so "the same
object as last pass" means "unchanged". On that:

* a spec is parsed once per generation, a status once per resourceVersion, and a waiting SJ's queue
  entry is made once per version; SJs alike (made from one template, queued together) share one parsed spec,
  status and queue shape (`Recent`: the last `ALIKE_KEPT` parsed, by content), all immutable; SJs that differ
  in some field share the nested models equal by content (resources, tolerations, conditions...:
  ``api.frozen.shared``), so only what is their own is kept for each;
* an SJ whose object, status and run are the ones of the last pass is observed as it was then; when the
  state machine found nothing to do for it, that quiet result is kept until time alone could change it
  (``lifecycle.quiet_until``: a backoff's end, a running SJ's next level or period), so a queue of
  thousands and runs between two levels cost no state machine step per pass; a new run's record, which the
  controller may hold back while runs are launched, is kept with the moments it first stamped until its
  start timeout could come (``lifecycle.recorded_until``);
* what the active pods request, per node, per namespace and in all, is kept up to date by the pods that
  changed (``PodSums``), and the admission's node views are rebuilt only for nodes whose pods or
  object changed;
* the admission pass is reused while its inputs are the same objects and no SJ's clock has ticked
  (``admission.settled_until``); when it is not, which nodes each selector and set of tolerations may use
  is kept while no node's labels, taints or schedulability changed (``admission.Eligibility``);
* each namespace's effective quota (``tenancy.effective_quotas``) is kept while no quota, namespace label
  or default changed;
* which SJs a pass looks at at all (``Worklist``): those whose object is new or was replaced, whose current
  run's Job or pods changed, whose decision's clock came (a heap of the moments the quiet decisions above
  hold until), and those the controller names (written, faulted, steered, launched: `controller.Controller`);
  every other SJ keeps what the last pass made of it, at no cost. The view is compared with the last one at
  C speed (a tuple of the same objects compares without calling their ``__eq__``), and the pass keeps
  what whole-cluster steps read of every SJ up to date by the SJs it looks at: the admission queue
  (``candidates``, ``queue``: in a stable order, an entry made again only for an SJ that changed), the runs
  the SJs point at (strays), the running SJs (steering's exemptions);
* while the nodes are the same objects, only the nodes whose pods' sums moved have their views rebuilt.

Entries of SJs that no longer exist are dropped once the caches have grown past the cluster's SJs.
"""
from __future__ import annotations

import heapq
import json
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import compress
from operator import is_not
from typing import Any, Generic, TypeVar, cast

from sj_operator.api import (
    InvalidSpec,
    Phase,
    ScavengerJobSpec,
    ScavengerJobStatus,
    SpecLimits,
    parse_spec,
    parse_status,
)
from sj_operator.decide import (
    ClusterView,
    Decided,
    Observation,
    Observed,
    OwnedRun,
    QueueShape,
    RunKey,
    changed_keys,
    decide,
    exemptions,
    observe_one,
    on_draining,
    queue_shape,
    queued,
    quota_table,
    run_keys,
)
from sj_operator.faults import Stage
from sj_operator.observed import JobView, NodeInfo, PodView, SJObject
from sj_operator.policy.admission import AdmissionPass, Eligibility, PolicyConfig, decide_pass, settled_until
from sj_operator.policy.lifecycle import FOREVER, LifecycleConfig, quiet_until, recorded_until
from sj_operator.policy.queue import queue_order
from sj_operator.policy.snapshot import ClusterSnapshot, InFlightRun, NodeView, QueuedSJ, Resources, Taint
from sj_operator.policy.tenancy import EffectiveQuotas
from sj_operator.resources import freeze

T = TypeVar("T")
OnFault = Callable[[SJObject, Stage, Exception], None]
"""Told of an SJ a step of the pass could not handle: the SJ, the step, what it raised."""


@dataclass(slots=True)
class _Seen:
    """One SJ as the last pass observed it, and its quiet decision while that holds."""

    sj: SJObject
    resource_version: str
    job: JobView | None
    pods: tuple[PodView, ...]
    observed: Observed
    known: tuple[RunKey, ...]
    owned: tuple[OwnedRun, ...]
    """``known`` with the SJ's uid: what the stray choice is given (`decide.stray_runs`)."""
    decided: Decided | None = None
    until: datetime | None = None
    flags: tuple[bool, bool] = (False, False)
    """The steering exemption and the drain the quiet decision was made with."""


@dataclass
class PodSums:
    """What the active pods request (milli-units): per node, per namespace (its pods in the scavenger band only)
    and in all (``cluster``: what the threshold counts, so without the pods the scheduler found no node for and
    nominated none, `PodView.unschedulable`, and the pods no scheduler it counts will place, `PodView.unclaimed`).

    A namespace's sum is what its caps and fair share weigh, so it counts the pods by ``PodView.band``, which the
    namespace cannot change, not by their SJ label, which it can: a run's pod whose label was taken off still
    counts, and a pod of another workload labelled like an SJ's does not.

    ``update`` takes the pods a watch cache shows now and counts only the pods that changed since the
    last call (a pod view is immutable: an unchanged pod is the same object). ``node_versions`` moves
    for a node whenever its sum does."""

    nodes: dict[str, dict[str, int]] = field(default_factory=dict)
    namespaces: dict[str, dict[str, int]] = field(default_factory=dict)
    cluster: dict[str, int] = field(default_factory=dict)
    node_versions: dict[str, int] = field(default_factory=dict)
    version: int = 0
    """Moves whenever any sum does."""
    moved: set[str] = field(default_factory=set)
    """The nodes whose sums moved since `PassMemo.node_views` last looked."""
    _pods: dict[str, PodView] = field(default_factory=dict)
    _last: tuple[PodView, ...] | None = None

    def update(self, pods: tuple[PodView, ...]) -> None:
        # The same pods in a new tuple (a view made anew from the same cache) are found at C speed.
        if pods is self._last or (self._last is not None and len(pods) == len(self._last) and pods == self._last):
            self._last = pods
            return
        self._last = pods
        changed = False
        for pod in pods:
            old = self._pods.get(pod.uid)
            if old is pod:
                continue
            if old is not None:
                self._count(old, -1)
            self._count(pod, 1)
            self._pods[pod.uid] = pod
            changed = True
        if len(self._pods) != len(pods):
            present = {pod.uid for pod in pods}
            for uid in [uid for uid in self._pods if uid not in present]:
                self._count(self._pods.pop(uid), -1)
                changed = True
        if changed:
            self.version += 1

    def _count(self, pod: PodView, sign: int) -> None:
        if not (pod.unschedulable or pod.unclaimed):
            _add(self.cluster, pod.requests, sign)
        if pod.node:
            _add(self.nodes.setdefault(pod.node, {}), pod.requests, sign)
            self.node_versions[pod.node] = self.node_versions.get(pod.node, 0) + 1
            self.moved.add(pod.node)
        if pod.band:
            _add(self.namespaces.setdefault(pod.namespace, {}), pod.requests, sign)


def _add(into: dict[str, int], amounts: Mapping[str, int], sign: int) -> None:
    """Adds (``sign`` 1) or takes away (-1) ``amounts``; a resource whose sum is back to 0 is dropped."""
    for resource, amount in amounts.items():
        value = into.get(resource, 0) + sign * amount
        if value:
            into[resource] = value
        else:
            into.pop(resource, None)


@dataclass
class Worklist:
    """Which SJs a pass must look at; every other SJ keeps what the last pass made of it.

    `changes` compares the view with the last pass's: the SJs whose object is new or was replaced, those whose
    current run's Job or pods changed (by the index `PassMemo.observe` keeps of each SJ's current run), and
    those gone. ``due`` pops the SJs whose decision's clock came, from a heap of the moments their quiet
    decisions hold until (``quiet_until``, ``recorded_until``); an SJ whose decision cannot be reused at all is
    in ``every`` (looked at in every pass). Comparing the view's tuples and mappings with the last pass's runs at
    C speed when nothing changed: a tuple compares the same objects without calling their ``__eq__``.

    Beside these it keeps what whole-cluster steps read of every observed SJ: the runs the SJs point at
    (``known``, for the strays) and the running SJs (victim steering's exemptions)."""

    _sjs: tuple[SJObject, ...] = ()
    _position: dict[int, int] = field(default_factory=dict)
    """By the ``id`` of each SJ object of ``_sjs`` (which keeps them alive): its index in the view."""
    layout: int = 0
    """Moves whenever the SJs are indexed anew (their order in the view may have changed, e.g. after a relisting);
    not when SJs are replaced in place, which keeps the order of the others."""
    objects: dict[str, SJObject] = field(default_factory=dict)
    """The view's SJs by uid."""
    uids: dict[str, str] = field(default_factory=dict)
    """The view's SJs' uids by key."""
    _jobs: Mapping[RunKey, JobView] = field(default_factory=dict)
    _run_pods: Mapping[RunKey, tuple[PodView, ...]] = field(default_factory=dict)
    _on_run: dict[RunKey, tuple[str, ...]] = field(default_factory=dict)
    """The SJs (uids) whose current run (the first of their ``run_keys``) is the key (nearly always one)."""
    _owned: dict[str, tuple[OwnedRun, ...]] = field(default_factory=dict)
    _known: set[OwnedRun] = field(default_factory=set)
    _frozen: frozenset[OwnedRun] | None = None
    running: dict[str, Observed] = field(default_factory=dict)
    """The observed SJs that are Running with a valid spec, by uid."""
    every: set[str] = field(default_factory=set)
    """The SJs whose decision is made afresh at every pass."""
    _deadlines: list[tuple[datetime, str]] = field(default_factory=list)
    _until: dict[str, datetime] = field(default_factory=dict)
    """Each SJ's deadline; an entry of the heap that is not its SJ's is stale."""

    def reset(self) -> None:
        """Forgets every SJ: the next `changes` finds them all new (a pass that looks at every SJ)."""
        self._sjs, self._position, self.objects, self.uids = (), {}, {}, {}
        self.layout += 1
        self._jobs, self._run_pods, self._on_run = {}, {}, {}
        self._owned, self._known, self._frozen, self.running = {}, set(), None, {}
        self.every, self._deadlines, self._until = set(), [], {}

    def changes(self, view: ClusterView) -> tuple[set[str], set[str]]:
        """The uids of the SJs that are new, were replaced or whose current run changed since the last call;
        and those no longer in the view."""
        changed: set[str] = set()
        gone: set[str] = set()
        sjs, last = view.sjs, self._sjs
        if sjs is not last and not (len(sjs) == len(last) and sjs == last) and not self._replaced(sjs, changed):
            position = dict(zip(map(id, sjs), range(len(sjs)), strict=True))
            before = self._position
            for i in before.keys() - position.keys():
                old = last[before[i]]
                if self.objects.get(old.uid) is old:
                    del self.objects[old.uid]
                    if self.uids.get(old.key) == old.uid:
                        del self.uids[old.key]
                    gone.add(old.uid)
            for i in position.keys() - before.keys():
                sj = sjs[position[i]]
                self.objects[sj.uid] = sj
                self.uids[sj.key] = sj.uid
                changed.add(sj.uid)
            gone -= changed
            self._sjs, self._position = sjs, position
            self.layout += 1
        # Copies: a mapping the view was given may be changed in place afterwards.
        if view.jobs != self._jobs:
            changed.update(self._moved(view.jobs, self._jobs))
            self._jobs = dict(view.jobs)
        if view.run_pods != self._run_pods:
            changed.update(self._moved(view.run_pods, self._run_pods))
            self._run_pods = dict(view.run_pods)
        for uid in gone:
            self.forget(uid)
        return changed, gone

    def _replaced(self, sjs: tuple[SJObject, ...], changed: set[str]) -> bool:
        """When ``sjs`` are the last view's SJs with some of them replaced in place (a watch event each: the
        same uid at the same index), takes them (their uids added to ``changed``) without indexing every SJ
        again; False otherwise."""
        last = self._sjs
        if len(sjs) != len(last):
            return False
        moved = list(compress(range(len(sjs)), map(is_not, sjs, last)))
        if len(moved) > 64 or any(sjs[i].uid != last[i].uid or sjs[i].key != last[i].key for i in moved):
            return False
        position, objects = self._position, self.objects
        for i in moved:
            del position[id(last[i])]
            position[id(sj := sjs[i])] = i
            objects[sj.uid] = sj
            changed.add(sj.uid)
        self._sjs = sjs
        return True

    def _moved(self, mapping: Mapping[RunKey, Any], last: Mapping[RunKey, Any]) -> set[str]:
        """The SJs whose current run's entry differs between the two mappings."""
        on_run = self._on_run
        return {uid for key in changed_keys(mapping, last) for uid in on_run.get(key, ())}

    def in_order(self, uids: Iterable[str]) -> list[SJObject]:
        """The SJs of ``uids`` that are in the view, in its order."""
        objects, position = self.objects, self._position
        return sorted((sj for uid in uids if (sj := objects.get(uid)) is not None),
                      key=lambda sj: position[id(sj)])

    def position(self, uid: str) -> int:
        """Where the SJ is in the view (-1: not in it)."""
        sj = self.objects.get(uid)
        return -1 if sj is None else self._position[id(sj)]

    def index(self, uid: str, run: RunKey | None, owned: tuple[OwnedRun, ...], observed: Observed | None) -> None:
        """What the SJ was observed as (``observed`` None: it was not: deleting, not handled, or it raised)."""
        owned_before = self._owned.get(uid, ())
        if (before := owned_before[0][1] if owned_before else None) != run:  # its current run is the first owned
            if before is not None:
                if on := tuple(other for other in self._on_run[before] if other != uid):
                    self._on_run[before] = on
                else:
                    del self._on_run[before]
            if run is not None:
                self._on_run[run] = (*self._on_run.get(run, ()), uid)
        if owned_before != owned:
            self._known.difference_update(self._owned.pop(uid, ()))
            if owned:
                self._owned[uid] = owned
                self._known.update(owned)
            self._frozen = None
        if observed is not None and observed.status.phase is Phase.RUNNING and not isinstance(observed.spec,
                                                                                             InvalidSpec):
            self.running[uid] = observed
        else:
            self.running.pop(uid, None)

    def forget(self, uid: str) -> None:
        """An SJ gone, or not observed: nothing of it is kept."""
        self.index(uid, None, (), None)
        self.every.discard(uid)
        self._until.pop(uid, None)

    def known(self) -> frozenset[OwnedRun]:
        """Every run an observed SJ points at, with that SJ's uid (`decide.Observation.known_runs`)."""
        if self._frozen is None:
            self._frozen = frozenset(self._known)
        return self._frozen

    def wake(self, uid: str, until: datetime | None) -> None:
        """The SJ's decision holds until ``until`` (exclusive; None: it is made afresh at every pass)."""
        if until is None:
            self.every.add(uid)
            self._until.pop(uid, None)
            return
        self.every.discard(uid)
        if self._until.get(uid) != until:
            self._until[uid] = until
            if until < FOREVER:
                heapq.heappush(self._deadlines, (until, uid))

    def due(self, now: datetime) -> set[str]:
        """The SJs whose decision's clock came (``now`` at or past its deadline)."""
        due: set[str] = set()
        heap, until = self._deadlines, self._until
        while heap and heap[0][0] <= now:
            moment, uid = heapq.heappop(heap)
            if until.get(uid) == moment:
                del until[uid]
                due.add(uid)
        if len(heap) > 2 * len(until) + 1000:  # mostly stale entries: made anew from the deadlines
            self._deadlines = [(moment, uid) for uid, moment in until.items() if moment < FOREVER]
            heapq.heapify(self._deadlines)
        return due


@dataclass
class _Admitted:
    inputs: tuple[Any, ...]
    until: datetime
    result: AdmissionPass


@dataclass
class _Order:
    """The queue in ``queue_order``, the same until time moves an SJ (``settled_until``) or the queue changes."""
    queue: tuple[QueuedSJ, ...]
    config: PolicyConfig
    ordered: list[QueuedSJ]
    until: datetime


@dataclass
class PassMemo:
    limits: SpecLimits
    sums: PodSums = field(default_factory=PodSums)
    _specs: dict[str, tuple[int, ScavengerJobSpec | InvalidSpec]] = field(default_factory=dict)
    _spec_contents: Recent[ScavengerJobSpec | InvalidSpec] = field(default_factory=lambda: Recent(ALIKE_KEPT))
    """The specs parsed last, by their content (`as_content`): SJs of one template share one."""
    _shapes: dict[int, tuple[ScavengerJobSpec, QueueShape]] = field(default_factory=dict)
    """What a queue entry takes from a parsed spec, by the spec's id (the spec kept beside it, so the id stays
    its own): SJs that share a spec share it."""
    _statuses: dict[str, tuple[str, ScavengerJobStatus]] = field(default_factory=dict)
    _status_contents: Recent[ScavengerJobStatus] = field(default_factory=lambda: Recent(ALIKE_KEPT))
    """The statuses parsed last, by their content (`as_content`)."""
    _queue: dict[str, tuple[ScavengerJobStatus, SJObject, QueuedSJ]] = field(default_factory=dict)
    _seen: dict[str, _Seen] = field(default_factory=dict)
    _node_views: dict[str, tuple[NodeInfo, int, NodeView]] = field(default_factory=dict)
    _last_nodes: tuple[NodeView, ...] = ()
    _node_infos: tuple[NodeInfo, ...] = ()
    """The nodes ``_last_nodes`` was made from, and the index of each by name."""
    _node_index: dict[str, int] = field(default_factory=dict)
    _admitted: _Admitted | None = None
    _order: _Order | None = None
    _eligibility: Eligibility = field(default_factory=Eligibility)
    _quotas: tuple[tuple[Any, ...], EffectiveQuotas] | None = None
    work: Worklist = field(default_factory=Worklist)
    """Which SJs a pass looks at (`controller.Controller._pass`); `observe` keeps its index of runs."""
    _waiting: dict[str, Decided] = field(default_factory=dict)
    """The admission queue's candidates (`requeue`), by uid: SJs in the queue (`Step.in_queue`: waiting, or
    backing off after a wasted run) with a valid spec."""
    _entries: dict[str, QueuedSJ] = field(default_factory=dict)
    """The queue entries of the candidates that are not held out of it, by uid, in a stable order."""
    _held_out: frozenset[str] = frozenset()
    _queue_kept: tuple[QueuedSJ, ...] | None = None
    _stale: dict[str, None] = field(default_factory=dict)
    """The candidates whose entry is to be made again, in the order they were decided."""
    _undated: set[str] = field(default_factory=set)
    _failed: set[str] = field(default_factory=set)

    # --- parsing -------------------------------------------------------------------------
    def spec_of(self, sj: SJObject) -> ScavengerJobSpec | InvalidSpec:
        """The parsed spec (or why it is invalid), once per generation; SJs whose specs are alike (as SJs made
        from one template are) share one parsed spec, which is immutable."""
        cached = self._specs.get(sj.uid)
        if cached is not None and cached[0] == sj.generation:
            return cached[1]
        parsed = self._spec_contents.parsed(sj.spec, self._parse_spec)
        self._specs[sj.uid] = (sj.generation, parsed)
        return parsed

    def _parse_spec(self, raw: Any) -> ScavengerJobSpec | InvalidSpec:
        try:
            return parse_spec(raw, self.limits)
        except InvalidSpec as exc:
            return exc

    def status_of(self, sj: SJObject, resource_version: str, raw: Mapping[str, Any]) -> ScavengerJobStatus:
        """The parsed status, once per version of the SJ; SJs whose statuses are alike (SJs waiting for the same
        reason since the same second) share one, which is immutable."""
        cached = self._statuses.get(sj.uid)
        if cached is not None and cached[0] == resource_version:
            return cached[1]
        status = self._status_contents.parsed(raw, parse_status)
        self._statuses[sj.uid] = (resource_version, status)
        return status

    def queued(self, sj: SJObject, spec: ScavengerJobSpec, status: ScavengerJobStatus, now: datetime) -> QueuedSJ:
        """A waiting SJ as the admission policy sees it, once per version of the SJ (its object and the
        status parsed for it)."""
        cached = self._queue.get(sj.uid)
        if cached is not None and cached[0] is status and cached[1] is sj and sj.created is not None:
            return cached[2]
        shape = self._shapes.get(id(spec))
        if shape is None or shape[0] is not spec:
            shape = self._shapes[id(spec)] = (spec, queue_shape(spec))
        entry = queued(sj, spec, status, now, shape[1])
        self._queue[sj.uid] = (status, sj, entry)
        return entry

    def candidates(self, decided: Iterable[Decided], gone: Iterable[str] = (), *,
                   every: bool = False) -> Mapping[str, Decided]:
        """The admission queue's candidates, kept from pass to pass: the decisions in the queue (`Step.in_queue`:
        waiting, or backing off after a wasted run, whose room the queue holds) with a valid spec, by uid.
        ``decided``: the SJs decided in this pass (each one a candidate or not any more); ``gone``: SJs no longer
        decided; ``every``: ``decided`` is every SJ there is (the others are dropped)."""
        waiting, stale = self._waiting, self._stale
        if every:
            for uid in waiting.keys() - {d.observed.sj.uid for d in decided}:
                self._drop_candidate(uid)
        for uid in gone:
            self._drop_candidate(uid)
        for d in decided:
            uid = d.observed.sj.uid
            if not d.step.in_queue or isinstance(d.observed.spec, InvalidSpec):
                self._drop_candidate(uid)
                continue
            before = waiting.get(uid)
            waiting[uid] = d
            if (before is None or before.observed.sj is not d.observed.sj or before.step.status is not d.step.status
                    or before.observed.spec is not d.observed.spec):
                stale[uid] = None
        return waiting

    def _drop_candidate(self, uid: str) -> None:
        """A running SJ must not keep alive the version it last waited in."""
        if self._waiting.pop(uid, None) is not None:
            self._stale.pop(uid, None)
            self._undated.discard(uid)
            self._failed.discard(uid)
            self._queue.pop(uid, None)
            if self._entries.pop(uid, None) is not None:
                self._queue_kept = None

    def queue(self, held_out: frozenset[str], now: datetime, *,
              on_fault: OnFault | None = None) -> tuple[QueuedSJ, ...]:
        """The admission queue: ``queued`` for each candidate (`candidates`) but those ``held_out``, made
        again only for the candidates that changed, came back or have no creation time (their entry moves
        with ``now``), in a stable order (the same tuple while none did). A candidate whose entry cannot be
        made is told to ``on_fault`` and left out (raised without one); it is tried again at the next call."""
        waiting, entries = self._waiting, self._entries
        redo = dict.fromkeys([*self._stale, *sorted((self._held_out - held_out) | self._undated | self._failed)])
        self._stale.clear()
        for uid in redo:
            d = waiting.get(uid)
            if d is None or uid in held_out:
                if entries.pop(uid, None) is not None:
                    self._queue_kept = None
                continue
            o = d.observed
            try:
                entry = self.queued(o.sj, cast(ScavengerJobSpec, o.spec), d.step.status, now)
            except Exception as exc:
                if entries.pop(uid, None) is not None:
                    self._queue_kept = None
                self._failed.add(uid)
                if on_fault is None:
                    raise
                on_fault(o.sj, "admission", exc)
                continue
            self._failed.discard(uid)
            if o.sj.created is None:
                self._undated.add(uid)
            else:
                self._undated.discard(uid)
            if entries.get(uid) is not entry:
                entries[uid] = entry
                self._queue_kept = None
        if self._queue_kept is None or held_out != self._held_out:
            self._queue_kept = (tuple(entries.values()) if not held_out else
                                tuple(entry for uid, entry in entries.items() if uid not in held_out))
        self._held_out = held_out
        return self._queue_kept

    # --- one pass ------------------------------------------------------------------------
    def observe(self, view: ClusterView, *, handles: Callable[[str], bool] | None,
                fresh: Callable[[SJObject], tuple[str, Mapping[str, Any]]],
                sjs: Iterable[SJObject] | None = None, fresher: Container[str] | None = None,
                on_fault: OnFault | None = None) -> Observation:
        """Each handled SJ with its status, spec and current run (`decide.observe_one`), reusing what the last
        pass observed of each SJ that did not change;
        ``sjs``: only these of the view's SJs (a slice of a pass); ``handles``: None for every namespace;
        ``fresher``: when given, ``fresh`` is asked only about the uids in it (the others are read as
        the view has them). An SJ that cannot be observed is told to ``on_fault`` and left out (raised
        without one)."""
        observed: list[Observed] = []
        known: set[OwnedRun] = set()
        jobs, run_pods, seen_of, index = view.jobs, view.run_pods, self._seen.get, self.work.index
        for sj in view.sjs if sjs is None else sjs:
            if sj.deleting or (handles is not None and not handles(sj.namespace)):
                index(sj.uid, None, (), None)
                continue
            rv, raw = fresh(sj) if fresher is None or sj.uid in fresher else (sj.resource_version, sj.status)
            seen = seen_of(sj.uid)
            if seen is not None and seen.sj is sj and seen.resource_version == rv:
                run = seen.known[0] if seen.known else None
                job = jobs.get(run) if run is not None else None
                pods = run_pods.get(run, ()) if run is not None else ()
                if (job is seen.job or job == seen.job) and (pods is seen.pods or pods == seen.pods):
                    observed.append(seen.observed)
                    known.update(seen.owned)
                    index(sj.uid, run, seen.owned, seen.observed)
                    continue
            try:
                status = self.status_of(sj, rv, raw)
                keys = run_keys(sj, status)
                one = observe_one(sj, rv, raw, status, self.spec_of(sj), view, keys[0] if keys else None)
            except Exception as exc:
                index(sj.uid, None, (), None)
                if on_fault is None:
                    raise
                on_fault(sj, "observe", exc)
                continue
            owned = tuple((sj.uid, key) for key in keys)
            # As the view shows them: a Job of the run's name that the SJ does not control is no run of it,
            # but the same Job in the next view keeps the SJ as observed.
            self._seen[sj.uid] = _Seen(sj, rv, jobs.get(keys[0]) if keys else None,
                                       run_pods.get(keys[0], ()) if keys else (), one, keys, owned)
            observed.append(one)
            known.update(owned)
            index(sj.uid, keys[0] if keys else None, owned, one)
        return Observation(tuple(observed), frozenset(known))

    def reusable_until(self, uid: str) -> datetime | None:
        """Until when (exclusive) the SJ's last decision is reused while it is observed as it was and steering
        and drains treat it as they did (`decide`); None when it is made afresh at every pass."""
        seen = self._seen.get(uid)
        return seen.until if seen is not None and seen.decided is not None else None

    def decide(self, observed: Sequence[Observed], now: datetime, cfg: LifecycleConfig, *,
               on_error: Callable[[Observed, Exception], None], draining: frozenset[str],
               exempt: frozenset[str] | None = None) -> list[Decided]:
        """``decide.decide``, reusing each quiet decision (and each new run's record) while its SJ is observed
        as it was, its ``quiet_until`` (``recorded_until``) has not come and steering and drains treat it as
        they did; the others are decided afresh. Steering itself is worked out over all running SJs at every
        pass (``exempt``: worked out by the caller when ``observed`` is a slice of them)."""
        # Steering looks at every running SJ, reused or not; a reused decision was made with the same
        # exemption and drain as now.
        if exempt is None:
            exempt = exemptions(observed, now, cfg)
        slots: list[Decided | None] = []  # the reused decision, or None where it is decided afresh
        pending: list[Observed] = []
        seen_of = self._seen.get
        plain = not exempt and not draining  # then every SJ's flags are (False, False)
        for o in observed:
            seen = seen_of(o.sj.uid)
            if (seen is not None and seen.observed is o and seen.decided is not None and seen.until is not None
                    and now < seen.until
                    and (not any(seen.flags) if plain
                         else seen.flags == (o.sj.key in exempt, on_draining(o, draining)))):
                slots.append(seen.decided)
            else:
                slots.append(None)
                pending.append(o)
        if not pending:
            return cast(list[Decided], slots)
        fresh = {d.observed.sj.uid: d
                 for d in decide(pending, now, cfg, on_error=on_error, draining=draining, exempt=exempt)}
        for d in fresh.values():
            o = d.observed
            seen = seen_of(o.sj.uid)
            if seen is None or seen.observed is not o:
                continue
            quiet = not (d.step.events or d.step.actions) and d.step.status == o.status
            seen.until = (quiet_until(o.spec, o.status, now, run=o.run, cfg=cfg, sj_name=o.sj.name) if quiet
                          else recorded_until(o.spec, o.status, d.step, run=o.run, cfg=cfg, sj_name=o.sj.name))
            seen.decided = d if seen.until is not None else None
            seen.flags = (o.sj.key in exempt, on_draining(o, draining))
        # None left: its decision failed (reported through on_error).
        return [one for o, slot in zip(observed, slots, strict=True)
                if (one := slot if slot is not None else fresh.get(o.sj.uid)) is not None]

    def admission(self, view: ClusterView, queue: tuple[QueuedSJ, ...], runs: tuple[InFlightRun, ...],
                  now: datetime, config: PolicyConfig) -> AdmissionPass:
        """``decide_pass`` over the snapshot of ``view``, reused while its inputs are unchanged and no
        SJ's clock has ticked since (``settled_until``)."""
        self.sums.update(view.active_pods)
        nodes = self.node_views(view)
        # By value: a pod replaced without a change of its requests or node (most pod events) changes nothing.
        quotas = self.quotas(view, config)
        fair = bool(quotas.namespaces) or quotas.default is not None
        inputs = (queue, nodes, dict(self.sums.cluster), runs, quotas,
                  {ns: dict(used) for ns, used in self.sums.namespaces.items()} if fair else None, config)
        last = self._admitted
        if last is not None and now < last.until and last.inputs == inputs:
            return last.result
        order = self._order
        if order is None or not (now < order.until and order.queue == queue and order.config == config):
            order = self._order = _Order(queue, config, queue_order(queue, now, config),
                                         settled_until(queue, now, config))
        snapshot = ClusterSnapshot(nodes=nodes, cluster_requested=self.sums.cluster, in_flight=runs, queue=queue,
                                   quotas=quotas.namespaces, default_quota=quotas.default,
                                   namespace_used=self._namespace_used(runs) if fair else {})
        result = decide_pass(snapshot, now, config, ordered=order.ordered, eligibility=self._eligibility)
        self._admitted = _Admitted(inputs, order.until, result)
        return result

    def quotas(self, view: ClusterView, config: PolicyConfig) -> EffectiveQuotas:
        """``decide.quota_table``, worked out again only when a quota, a namespace's labels or the defaults
        changed (the same object is returned while none did)."""
        key = (view.quotas, view.cluster_quotas, view.namespaces, config.quota_defaults)
        if self._quotas is None or self._quotas[0] != key:
            self._quotas = (key, quota_table(view, config.quota_defaults))
        return self._quotas[1]

    def node_views(self, view: ClusterView) -> tuple[NodeView, ...]:
        """The nodes with what their pods request (a NotReady node takes nothing new), from the running
        sums: a node's view is rebuilt only when its object or its pods changed, and while the nodes are the
        same objects only the nodes whose sums moved are looked at (the same tuple is returned while none
        did)."""
        self.sums.update(view.active_pods)
        moved, nodes = self.sums.moved, view.nodes
        if nodes is self._node_infos or (len(nodes) == len(self._node_infos) == len(self._node_index)
                                          and nodes == self._node_infos):
            if moved:
                built = list(self._last_nodes)
                for name in moved:
                    if (index := self._node_index.get(name)) is not None:
                        built[index] = self._node_view(nodes[index])
                moved.clear()
                if (fresh := tuple(built)) != self._last_nodes:
                    self._last_nodes = fresh
            self._node_infos = nodes
            return self._last_nodes
        moved.clear()
        built = [self._node_view(n) for n in nodes]
        self._node_infos, self._node_index = nodes, {n.name: index for index, n in enumerate(nodes)}
        fresh = tuple(built)
        if fresh != self._last_nodes:
            self._last_nodes = fresh
        cache = self._node_views
        if len(cache) > 2 * len(fresh) + 100:
            self._node_views = {name: entry for name, entry in cache.items() if name in self._node_index}
        return self._last_nodes

    def _node_view(self, n: NodeInfo) -> NodeView:
        """One node's view, rebuilt only when its object or its pods changed."""
        version = self.sums.node_versions.get(n.name, 0)
        cached = self._node_views.get(n.name)
        if cached is not None and cached[0] is n and cached[1] == version:
            return cached[2]
        node = NodeView(name=n.name, allocatable=n.allocatable, requested=self.sums.nodes.get(n.name, {}),
                        labels=n.labels, taints=tuple(Taint(k, v, e) for k, v, e in n.taints),
                        unschedulable=n.unschedulable or not n.ready)
        self._node_views[n.name] = (n, version, node)
        return node

    def _namespace_used(self, runs: tuple[InFlightRun, ...]) -> dict[str, Resources]:
        """What each namespace's pods in the scavenger band request, scheduled or not, and the unscheduled pods of
        launched runs (counted twice while they are pending: conservative, like the threshold), from the running
        sums."""
        used = {ns: dict(amounts) for ns, amounts in self.sums.namespaces.items()}
        for run in runs:
            _add(used.setdefault(run.key.split("/", 1)[0], {}),
                 {r: a * run.unscheduled_pods for r, a in run.request.items()}, 1)
        return {ns: freeze(amounts) for ns, amounts in used.items()}

    def forget_gone(self, sjs: tuple[SJObject, ...]) -> None:
        tables: tuple[dict[str, Any], ...] = (self._specs, self._statuses, self._queue, self._seen)
        if sum(map(len, tables)) > 8 * len(sjs) + 1000:
            forget_uids(tables, sjs)
        if len(self._shapes) > len(self._specs) + 1000:  # the queue shapes of specs no SJ has any more
            alive = {id(parsed) for _, parsed in self._specs.values()}
            self._shapes = {i: shape for i, shape in self._shapes.items() if i in alive}


ALIKE_MOST_BYTES = 16 * 1024
"""Specs and statuses larger than this, as JSON, are not shared: parsed for their SJ alone, never kept beyond it."""
ALIKE_KEPT = 1024
"""Specs, and statuses, parsed last that an SJ alike may share: SJs alike (made from one template, queued
together) come together, and SJs that are all different cost no more than this many entries."""


class Recent(Generic[T]):
    """The ``size`` values put or found last, by key (the one left longest is dropped first)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._values: dict[str, T] = {}

    def get(self, key: str) -> T | None:
        """The value put for ``key``, which moves to the end (the last one dropped)."""
        values = self._values
        value = values.pop(key, None)
        if value is not None:
            values[key] = value
        return value

    def put(self, key: str, value: T) -> None:
        values = self._values
        values.pop(key, None)
        values[key] = value
        if len(values) > self.size:
            del values[next(iter(values))]

    def __len__(self) -> int:
        return len(self._values)

    def parsed(self, raw: Any, parse: Callable[[Any], T]) -> T:
        """``parse(raw)``, or what it gave for a raw value alike (`as_content`) among the last kept."""
        content = as_content(raw)
        if content is None:
            return parse(raw)
        value = self.get(content)
        if value is None:
            value = parse(raw)
            self.put(content, value)
        return value


def as_content(raw: object) -> str | None:
    """A raw spec or status as canonical JSON (keys sorted), to find one alike already parsed; None when it is
    larger than `ALIKE_MOST_BYTES` (what is kept for SJs alike stays small, whatever a tenant writes) or has no
    such form (keys of mixed types, a value that is not JSON's): then it is parsed on its own. As the watch
    brings them, keys are strings (JSON's); keys of one other type would read as their strings."""
    try:
        content = json.dumps(raw, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None
    return content if len(content) <= ALIKE_MOST_BYTES else None


def forget_uids(tables: tuple[dict[str, Any], ...], sjs: tuple[SJObject, ...]) -> None:
    """Drops from each table (keyed by SJ uid) the entries of SJs that are no longer in ``sjs``."""
    alive = {sj.uid for sj in sjs}
    for table in tables:
        for uid in table.keys() - alive:
            del table[uid]
