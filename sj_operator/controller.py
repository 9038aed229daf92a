"""The decision loop's write side: one pass decides (``decide``), then carries the decisions out.

A pass:
  1. observes the watch cache (SJs, their runs' Jobs and pods, nodes, all pods) and runs the pure
     state machine for every SJ (``decide.observe`` and ``decide.decide``);
  2. writes each SJ's new status, Events and actions, SJs concurrently (``_apply``);
  3. removes runs no SJ points at;
  4. asks the pure admission policy which waiting SJs start now, and launches them.

Status writes carry the resourceVersion the decision was based on, so a decision made on a stale
cache fails with Conflict instead of applying twice; the loop then simply runs again on fresher data.
Child names are deterministic, so a launch repeated after a crash finds its Job and adopts it; only what the
SJ controls (its controller ownerReference) is found so, reused, patched or deleted: an object of a child's
name that someone else made holds the SJ back (``NameTaken``), as a refusal of the API server does, with a
doubling delay. Restarting the operator at any moment therefore converges without duplicates.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from gang.ssh import generate_gang_keys
from sj_operator.adopter import Adopter
from sj_operator.api import InvalidSpec, Phase, ScavengerJobSpec, ScavengerJobStatus
from sj_operator.builders.budget import protection_budget
from sj_operator.builders.job import admission_shape, build_run_job
from sj_operator.builders.mpi import build_hostfile_configmap, build_mpi_secret, mpi_job_options
from sj_operator.builders.service import build_gang_service
from sj_operator.config import OperatorConfig
from sj_operator.decide import (
    ClusterView,
    Decided,
    Observation,
    Observed,
    OwnedRun,
    exemptions,
    in_flight,
    nodes_being_drained,
    stray_runs,
)
from sj_operator.faults import CONDITION, Fault
from sj_operator.kube import (
    Conflict,
    Forbidden,
    Invalid,
    Kube,
    KubeError,
    NameTaken,
    NotFound,
    check_owner,
    in_background,
)
from sj_operator.memo import PassMemo, forget_uids
from sj_operator.metrics import Metrics
from sj_operator.names import API_VERSION, KIND, LABEL_PROTECTED, mpi_secret_name, run_job_name
from sj_operator.observed import JobView, NodeInfo, SJObject, job_view
from sj_operator.pacing import EVENT_DEFERRAL, HOLD_BUDGET, SLICE, Pacer, Timer, event_wait, in_slices
from sj_operator.policy.admission import AdmissionPass, PolicyConfig, Waiting
from sj_operator.policy.conditions import WAIT_REASONS, admitted_condition, wait_changed
from sj_operator.policy.lifecycle import (
    WAITING,
    DeleteRun,
    Event,
    LifecycleConfig,
    NamespaceRefusal,
    Run,
    SetProtection,
    Step,
    launch_forbidden,
    launch_refused,
    launched,
    lost_work,
    refusal_reason,
    retry_delay,
    waiting_for_room,
)
from sj_operator.policy.priority import launch_class
from sj_operator.policy.snapshot import InFlightRun
from sj_operator.policy.tenancy import QuotaDefaults, ResourceQuotaView, quota_shortfall
from sj_operator.quarantine import Quarantine
from sj_operator.resources import EMPTY, Resources, resources_milli, total

__all__ = ["ClusterView", "Controller", "utcnow"]

log = logging.getLogger("sj_operator.controller")
Clock = Callable[[], datetime]
T = TypeVar("T")
API_CONCURRENCY = 24
"""SJs whose writes are in flight at once; the client has `kube.API_THREADS` threads, some left for the
leader election and the webhook."""
WRITTEN_TTL = 30.0
"""Seconds a status this process wrote is preferred over a watch that has not shown it yet."""
LAUNCHED_TTL = 60.0
"""Seconds a launch is counted as in flight (and its Job stands in the view) before the watch shows its run
Starting."""
WHY_REFRESH = 120.0
"""Seconds between writes of a waiting SJ's Admitted message when only its numbers moved."""
STEERING_IN_FLIGHT = 64
"""Running SJs whose steering writes (running level, protection) may be under way in the background at once;
each pass tops them up, and the loop is woken when half of them are done. The pass does not wait for them;
the background lane's threads (`kube.BACKGROUND_THREADS`) bound how many calls are in flight."""
EVENT_BACKLOG = 20_000
"""Steps whose Events may wait to be recorded; beyond it, new ones are dropped and counted
(``scavenger_events_dropped_total``), as client-go's recorder drops on overflow."""
STEERING_REASONS = frozenset({"Protected", "Unprotected"})
"""Events of victim steering's toggles: while one waits to be recorded, the SJ's next toggle replaces it (the
newer state is the one that holds; the message says how many were replaced), so a recorder that falls behind
a checkpoint period's toggles does not fill the backlog with states already gone."""
EVENT_WORKERS = 4
"""Events recorded at once, each worker one step's Events after another."""
LAUNCH_WORKERS = 24
"""Launches under way at once (`Controller._launch`): a pass queues its admitted SJs' launches and goes on; these
workers make their runs meanwhile, so SJs created during a burst of launches are decided while the Jobs of
the ones before them are still being made."""
DRY_RUN_TTL = 30.0
"""Seconds a namespace's acceptance of a dry-run pod stands for the runs launched after it whose pods have
the same shape (`builders.job.admission_shape`: the same pod but for the names of the SJ and run): in a
burst, one dry run per shape and namespace rather than one per SJ. Not in a namespace with a
ResourceQuota (whose room changes with every pod), and a refusal is never reused; a rule added to the
namespace meanwhile is met by the next dry run, or by the Job's pods."""
BUDGET_REFRESH = 600.0
"""Seconds after this process applied an SJ's PodDisruptionBudget in which protecting a run again does not apply
it again (only the pods' label is toggled): the budget's content is fixed per SJ, and an apply costs two
calls once it exists (create, then patch). Past it, the budget is applied again, in case it was deleted."""


_NO_RUN = Run(job=None)


class _Refused(Exception):
    """The API server refused to create one of a run's objects (Forbidden or Invalid: a ResourceQuota on the
    kind, an admission policy on it that the pod's dry run could not see); the message names the object and
    gives the server's."""


def _writes(d: Decided) -> bool:
    """Whether a decision has anything to carry out: a new status, an Event or an action."""
    return bool(d.step.events or d.step.actions) or (d.step.status is not d.observed.status
                                                     and d.step.status != d.observed.status)


def _gauge_labels(status: ScavengerJobStatus) -> tuple[str | None, str | None]:
    """An SJ's phase in the gauges and, while it waits, why (``Queued`` when no reason is written)."""
    if status.phase is None:
        return None, None
    if status.phase not in (Phase.PENDING, Phase.INTERRUPTED, Phase.SUSPENDED):
        return status.phase.value, None
    cond = admitted_condition(status.conditions)
    return status.phase.value, cond.reason if cond is not None and cond.status == "False" and cond.reason else "Queued"


def _unrecorded(d: Decided, phase: str | None) -> bool:
    """An SJ whose next run exists and is not in its status yet (`lifecycle.launched`)."""
    job = d.observed.run.job
    return (job is not None and not d.step.waiting and not job.deleting
            and phase in (None, Phase.PENDING.value, Phase.INTERRUPTED.value))


_STEERING_FIELDS = ("running_priority", "priority_start_over_timestamp", "protected")


def _steering(d: Decided) -> bool:
    """A running SJ that stays running, with nothing to write but its running level or its protection:
    victim steering's bookkeeping, carried out in the background."""
    before, after, running = d.observed.status, d.step.status, Phase.RUNNING
    return (before.phase is running and after.phase is running
            and all(isinstance(a, SetProtection) for a in d.step.actions)
            and after.model_copy(update={f: getattr(before, f) for f in _STEERING_FIELDS}) == before)


def _run_size(o: Observed) -> int:
    """The pods of the SJ's current run: its gang (a running SJ's observed spec is already the configuration
    the run was launched in, `decide.observe_one`), never fewer than the pods seen."""
    return max(len(o.run.pods), o.spec.parallelism if isinstance(o.spec, ScavengerJobSpec) else 1)


def _records_run(d: Decided) -> bool:
    """A decision that only writes a waiting SJ's new run into its status (`lifecycle._record`: Starting or
    Running, with its Event), and nothing else: no interruption, no end, no action."""
    before, after = d.observed.status, d.step.status
    return (not d.step.actions and d.observed.run.job is not None
            and (before.phase is None or before.phase in WAITING)
            and after.phase in (Phase.STARTING, Phase.RUNNING) and after.attempt == before.attempt + 1)


def _steering_order(d: Decided) -> bool:
    """Protection changes first, then what only moves the running level."""
    return not d.step.actions


def _first_sight(d: Decided) -> bool:
    """A new SJ whose only decision is to queue it: when admitted in the same pass, that status is not
    written (the launch's outcome is)."""
    return d.observed.status.phase is None and not d.step.actions and d.step.waiting


def _says(status: ScavengerJobStatus, why: Waiting) -> bool:
    """The SJ's Admitted condition gives exactly this reason and message."""
    cond = admitted_condition(status.conditions)
    return cond is not None and (cond.status, cond.reason, cond.message) == ("False", why.reason, why.message)


async def _idle(tasks: Callable[[], Iterable[asyncio.Task[None]]]) -> None:
    """Waits until every task of ``tasks()`` is done, asked again after each wait (workers started meanwhile
    are waited for too)."""
    while pending := [t for t in tasks() if not t.done()]:
        await asyncio.wait(pending)


def utcnow() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


@dataclass
class _Written:
    """A status this process wrote, used until the watch shows it (read-your-writes)."""
    resource_version: str
    status: dict[str, Any]
    at: float


@dataclass(frozen=True)
class _Waiting:
    """An SJ the policy may admit, with the status and version a launch writes over."""
    sj: SJObject
    spec: ScavengerJobSpec
    status: ScavengerJobStatus
    raw: Mapping[str, Any]
    rv: str


@dataclass(slots=True)
class _Unrecorded:
    """One step's Events waiting to be recorded: its SJ's namespace, name and uid (not the object: a backlog
    of Events must not keep old versions of the SJs alive), the Events, when they happened, and how many
    earlier steering steps of the SJ they replaced while waiting."""
    sj: tuple[str, str, str]
    events: tuple[Event, ...]
    at: datetime
    queued: float
    """When it was queued (monotonic seconds): how long it has waited for launches (`pacing.event_wait`)."""
    replaced: int = 0


@dataclass
class _Launched:
    run: InFlightRun
    """As launched: no pod scheduled yet."""
    at: float
    job: JobView
    """The Job as made, standing in for it until the watch shows it."""


@dataclass
class _Launching:
    """An admitted SJ whose launch is queued or under way: its key (for the gauges) and its run as it will be
    launched (its room is spoken for until the launch is done)."""
    key: str
    run_key: tuple[str, str]
    run: InFlightRun


@dataclass
class Controller:
    kube: Kube
    config: OperatorConfig
    clock: Clock = utcnow
    monotonic: Callable[[], float] = time.monotonic
    written: dict[str, _Written] = field(default_factory=dict)
    launched: dict[tuple[str, str], _Launched] = field(default_factory=dict)
    metrics: Metrics = field(default_factory=Metrics)
    memo: PassMemo = field(init=False)
    adopter: Adopter = field(init=False)
    held: dict[str, tuple[float, int]] = field(default_factory=dict)
    """SJs (by uid) whose namespace refused their pods: when to try again, and how many refusals in a row."""
    why_written: dict[str, float] = field(default_factory=dict)
    """When this process last wrote each waiting SJ's reason (monotonic seconds), by uid."""
    why_settled: dict[str, tuple[Decided, Waiting, str, str | None, float]] = field(default_factory=dict)
    """Waiting SJs with nothing to write about why they wait, by uid: the decision, the admission's reason
    it was last found with, that reason's name, and the message the condition gives, or (None) until when
    (monotonic) only its numbers may move unwritten."""
    dry_runs: dict[tuple[str, str], float] = field(default_factory=dict)
    """When (monotonic seconds) the namespace last accepted a dry-run pod of each shape, by (namespace, shape)."""
    budgets: dict[str, tuple[float, int]] = field(default_factory=dict)
    """When this process last applied each SJ's PodDisruptionBudget (monotonic seconds) and for how many pods,
    by uid."""
    reported: dict[str, tuple[ScavengerJobStatus, str | None, str | None]] = field(default_factory=dict)
    """Each SJ's status as last reported in the gauges, with its phase and why it waits, by uid."""
    wake: Callable[[], None] = lambda: None
    """Asks for another pass (the loop's wake-up): called when background writes are done."""
    steering: dict[str, Decided] = field(default_factory=dict)
    """SJs (by uid) whose steering decision the background lane is carrying out: a pass leaves them as decided
    until their writes are done."""
    _steering_tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _event_queue: deque[_Unrecorded] = field(default_factory=deque)
    """Steps' Events waiting to be recorded, in order."""
    _steering_unrecorded: dict[str, _Unrecorded] = field(default_factory=dict)
    """By SJ uid: its waiting step of steering Events only (`STEERING_REASONS`), which a newer one replaces."""
    _event_workers: list[asyncio.Task[None]] = field(default_factory=list)
    launching: dict[str, _Launching] = field(default_factory=dict)
    """SJs (by uid) whose launch is queued or under way: no pass decides them until it is done."""
    _launch_queue: deque[tuple[_Waiting, int, datetime]] = field(default_factory=deque)
    """Admitted SJs waiting for a launch worker, in the order admitted, with the configuration chosen and when
    the pass admitted them."""
    _launch_workers: list[asyncio.Task[None]] = field(default_factory=list)
    _last_launch: float | None = None
    """When (monotonic) this process last made a run: Events wait while runs are being launched."""
    _in_flight_made: dict[str, tuple[ScavengerJobSpec, int, InFlightRun]] = field(default_factory=dict)
    """By SJ uid: the last pass's entry for its Starting run in flight (`_in_flight`), with the spec and the
    scheduled pods it was made for."""
    _flushing: bool = False
    """While `settle` waits: Events are recorded at once, whatever is being launched."""
    _held_events: set[asyncio.Future[None]] = field(default_factory=set)
    """Event workers waiting for launches: `settle` lets them go."""
    call_later: Callable[[float, Callable[[], None]], Timer] | None = None
    """Schedules a call in so many seconds (None: the running loop's ``call_later``)."""
    _wake_timer: tuple[float, Timer] | None = None
    """The pass asked for when the records of new runs held back for launches are due (`_hold_records`):
    when (monotonic) and its timer."""
    _drop_warned: float = 0.0
    _capacity: tuple[tuple[NodeInfo, ...], Resources] = ((), EMPTY)
    hold_budget: float = HOLD_BUDGET
    """Seconds a pass's work may hold the event loop before it gives the other tasks a turn."""
    resource_quotas: Callable[[str], Sequence[ResourceQuotaView]] = lambda namespace: ()
    """A namespace's ResourceQuotas, which a gang's launch is checked against: the operator's watch cache of
    them (`handlers.startup`); none anywhere unless told."""

    quarantine: Quarantine = field(init=False)
    """The SJs a step of the pass could not handle (`quarantine.py`): skipped, counted, told on the SJ."""
    _fault_tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.memo = PassMemo(self.config.spec_limits)
        self.quarantine = Quarantine(report=self._report_fault)
        self.adopter = Adopter(self.kube, self.config.spec_limits, handles=self.handles, clock=self.clock,
                               on_fault=self.metrics.skipped_object)

    @property
    def lifecycle_config(self) -> LifecycleConfig:
        c = self.config
        return LifecycleConfig(start_timeout=c.start_timeout, retry_backoff=c.retry_backoff,
                               max_retry_backoff=c.max_retry_backoff, protect_level=c.protect_level,
                               max_protection=c.max_protection, thrash_backoff=c.thrash_backoff,
                               max_thrash_backoff=c.max_thrash_backoff)

    @property
    def policy_config(self) -> PolicyConfig:
        return PolicyConfig(threshold=self.config.threshold, starvation_after=self.config.starvation_after,
                            aging_step=self.config.aging_step, pools=self.config.pools,
                            quota_defaults=QuotaDefaults(hard=self.config.default_namespace_quota,
                                                         weight=self.config.default_namespace_weight))

    def handles(self, namespace: str) -> bool:
        return not self.config.namespaces or namespace in self.config.namespaces

    # --- reading -------------------------------------------------------------------
    def fresh(self, sj: SJObject) -> tuple[str, Mapping[str, Any]]:
        """The SJ's resourceVersion and raw status, preferring what this process just wrote."""
        mine = self.written.get(sj.uid)
        if mine is not None:
            if sj.resource_version == mine.resource_version or self.monotonic() - mine.at > WRITTEN_TTL:
                del self.written[sj.uid]
            else:
                return mine.resource_version, mine.status
        return sj.resource_version, sj.status

    # --- one pass --------------------------------------------------------------------
    async def reconcile(self, view: ClusterView) -> None:
        started = time.perf_counter()
        decided, launching = await self._pass(view)
        await self.adopter.reconcile(view)
        self.metrics.reconcile.observe(time.perf_counter() - started)
        await self._report(view, decided, launching)

    async def _pass(self, view: ClusterView) -> tuple[list[Decided], set[str]]:
        now = self.clock()
        view = self._with_launched(view)
        # Thousands of SJs that changed at once are seconds of work: done in slices, giving the loop's other
        # tasks (watches, probes, the webhook, the background lane) a turn between them.
        pacer = Pacer(self.hold_budget)
        quarantine = self.quarantine
        quarantine.begin_pass()
        self.memo.forget_gone(view.sjs)
        tables: tuple[dict[str, Any], ...] = (self.held, self.why_written, self.why_settled, self.reported,
                                              self.budgets)
        if sum(map(len, tables)) > 4 * len(view.sjs) + 1000 or (self.held and len(self.held) > len(view.sjs)):
            forget_uids(tables, view.sjs)
            quarantine.forget({sj.uid for sj in view.sjs})
        handles = self.handles if self.config.namespaces else None
        parts = await in_slices(view.sjs, lambda sjs: (self.memo.observe(
            view, handles=handles, fresh=self.fresh, sjs=sjs, fresher=self.written, on_fault=quarantine.fault),),
                                pacer)
        observation = Observation(tuple(o for part in parts for o in part.sjs),
                                  frozenset().union(*(part.known_runs for part in parts)))
        held = self.steering
        cfg, draining = self.lifecycle_config, nodes_being_drained(view)
        observed_sjs: Sequence[Observed] = observation.sjs
        try:
            exempt = exemptions(observed_sjs, now, cfg)
        except Exception:
            observed_sjs = quarantine.isolated("decide", observed_sjs, lambda part: exemptions(part, now, cfg),
                                               lambda o: o.sj)
            exempt = exemptions(observed_sjs, now, cfg)
        decided = await in_slices(observed_sjs, lambda observed: self.memo.decide(
            observed, now, cfg, draining=draining, exempt=exempt,
            on_error=lambda o, exc: quarantine.fault(o.sj, "decide", exc)), pacer)
        if held:  # SJs whose steering writes are under way keep the decision being carried out
            decided = [held.get(d.observed.sj.uid, d) for d in decided]
        runs = self._in_flight(decided)
        self._add_launched(view, runs)
        # Admission is decided on the statuses about to be written, so a waiting SJ's reason (Admitted=False)
        # goes out in the same write as its transition, and only the admitted ones are written twice.
        admitted = self._admission(view, decided, tuple(runs.values()), now)
        await pacer.breathe()
        if admitted.waiting:
            waiting = admitted.waiting
            decided = await in_slices(decided, lambda part: self._explain(part, waiting, now), pacer)
        decided = [self._recovered(d) for d in decided]
        # SJs are independent of each other: their writes go out concurrently; an SJ with nothing to
        # write costs no task.
        # A new SJ admitted at first sight is not written as queued: its launch writes nothing (a later pass
        # records the run), a refused launch writes its outcome.
        at_once = {a.key for a in admitted.admitted}
        launching = self.launching
        writing = await in_slices(decided, lambda part: [
            d for d in part if _writes(d) and not (at_once and _first_sight(d) and d.observed.sj.key in at_once)
            and not (held and d.observed.sj.uid in held) and not (launching and d.observed.sj.uid in launching)],
            pacer)
        # Steering's bookkeeping goes out in the background: the pass goes on to launches and transitions.
        steering: list[Decided] = []
        foreground: list[Decided] = []
        for d in writing:
            (steering if _steering(d) else foreground).append(d)
        if steering:
            self._steer(steering)
            writing = foreground
        writing = self._hold_records(writing, now)
        # The admitted SJs' own writes go first (a launch writes over them); then their launches are queued for
        # the launch workers, and the pass writes the rest meanwhile: in a burst a launch does not wait behind
        # hundreds of other SJs' transitions and reasons, nor the next pass behind the launches.
        by_key = {d.observed.sj.key: d for d in decided} if admitted.admitted else {}
        admitted_ids = {id(by_key[a.key]) for a in admitted.admitted}
        first = [d for d in writing if id(d) in admitted_ids] if admitted_ids else []
        rest = [d for d in writing if id(d) not in admitted_ids] if first else writing
        applied = dict(zip((id(d) for d in first),
                           await self._concurrently(self._apply_isolated(d) for d in first), strict=True))
        await self._delete_strays(view, observation.known_runs)
        self._launch(now, ((w, a.config_index) for a in admitted.admitted if applied.get(id(d := by_key[a.key]), True)
                     and (w := self._waiting(d)) is not None))
        await self._concurrently(self._apply_isolated(d) for d in rest)
        return decided, {entry.key for entry in self.launching.values()}

    def _hold_records(self, writing: list[Decided], now: datetime) -> list[Decided]:
        """``writing`` but for the new runs whose records wait for launches: while runs are being launched (one is
        under way, or the last was made less than `pacing.EVENT_QUIET` ago), a run is written into its SJ's
        status (Starting or Running, `lifecycle._record`) once the launches pause, at most `EVENT_DEFERRAL`
        seconds after its Job was made, as Events wait (`pacing.event_wait`). In a burst the API server serves
        the launches first; the run holds its room meanwhile (its decision is the record, so it counts as in
        flight), and the gauges count it as Starting. A pass is asked for when the first record is due."""
        clock = self.monotonic()
        busy = clock if self.launching else self._last_launch
        if busy is None:
            return writing
        kept: list[Decided] = []
        due: float | None = None
        for d in writing:
            if _records_run(d):
                job = d.observed.run.job
                assert job is not None
                age = max(0.0, (now - job.created).total_seconds()) if job.created is not None else 0.0
                wait = event_wait(clock, clock - age, busy, most=EVENT_DEFERRAL)
                if wait > 0:
                    due = wait if due is None else min(due, wait)
                    continue
            kept.append(d)
        if due is not None:
            self._wake_in(due)
        return kept

    def _wake_in(self, seconds: float) -> None:
        """Asks for a pass in ``seconds`` (unless one is asked for sooner already)."""
        now = self.monotonic()
        at = now + seconds
        if self._wake_timer is not None:
            earlier, timer = self._wake_timer
            if now < earlier <= at:
                return
            timer.cancel()
        call_later = self.call_later or asyncio.get_running_loop().call_later
        self._wake_timer = (at, call_later(seconds, self.wake))

    async def _report(self, view: ClusterView, decided: list[Decided], launching: set[str]) -> None:
        """The gauges after a pass: SJs by phase and why the waiting ones wait; capacity in use."""
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
                if labels is None or labels[0] is not st:
                    labels = reported[uid] = (st, *_gauge_labels(st))
                if (d.observed.run.job is not None and _unrecorded(d, labels[1])) or (
                        launching and d.observed.sj.key in launching):
                    phases["Starting"] = phases.get("Starting", 0) + 1  # its run is not in its status yet
                    continue
                if labels[1] is None:
                    continue
                phases[labels[1]] = phases.get(labels[1], 0) + 1
                if labels[2] is not None:
                    pending[labels[2]] = pending.get(labels[2], 0) + 1
        if self._capacity[0] != view.nodes:
            self._capacity = (view.nodes, total(n.allocatable for n in view.nodes if n.ready and not n.unschedulable))
        schedulable = self._capacity[1]
        self.memo.sums.update(view.active_pods)
        requested = self.memo.sums.cluster
        used = {r: requested.get(r, 0) / amount for r, amount in schedulable.items() if amount > 0 and r != "pods"}
        self.metrics.set_state(pending, phases, used, reasons=(*WAIT_REASONS, "Queued"),
                               phase_names=(p.value for p in Phase))
        self.metrics.last_pass.set_to_current_time()

    def _count(self, o: Observed, after: ScavengerJobStatus) -> None:
        """Counters for what a written status records: an interruption, a finish (launches are counted as
        they are made: `_launched`)."""
        before, m = o.status, self.metrics
        if after.interrupted_count > before.interrupted_count:
            m.interruptions.labels(after.last_interruption_reason or "Deleted").inc()
            if not isinstance(o.spec, InvalidSpec) and after.interrupted_timestamps:
                lost = lost_work(after.running_timestamps, after.interrupted_timestamps, o.spec.duration)[-1]
                m.lost_work.inc(lost.total_seconds())
        if after.phase in (Phase.SUCCEEDED, Phase.FAILED) and before.phase != after.phase:
            m.finished.labels(after.phase.value).inc()

    def _in_flight(self, decided: list[Decided]) -> dict[tuple[str, str], InFlightRun]:
        """Runs that are Starting and not fully scheduled: their pods' room is spoken for. A run's entry is
        the last pass's while its spec and scheduled pods are (in a burst, a pass has hundreds of them)."""
        runs: dict[tuple[str, str], InFlightRun] = {}
        made, kept = self._in_flight_made, {}
        starting = Phase.STARTING
        for d in decided:
            st = d.step.status
            if st.phase is not starting or not st.job_name or isinstance((o := d.observed).spec, InvalidSpec):
                continue
            scheduled = sum(1 for p in o.run.pods if p.node)
            if scheduled < o.spec.parallelism:
                last = made.get(o.sj.uid)
                try:
                    run = (last[2] if last is not None and last[0] is o.spec and last[1] == scheduled
                           else in_flight(o.sj, o.spec, scheduled))
                except Exception as exc:
                    self.quarantine.fault(o.sj, "admission", exc)
                    continue
                kept[o.sj.uid] = (o.spec, scheduled, run)
                runs[(o.sj.namespace, st.job_name)] = run
        self._in_flight_made = kept
        return runs

    def _waiting(self, d: Decided) -> _Waiting | None:
        """After its decision was written, a waiting SJ with the status and version a launch writes over."""
        o, result = d.observed, d.step
        assert not isinstance(o.spec, InvalidSpec)
        if result.status == o.status:
            return _Waiting(o.sj, o.spec, o.status, o.raw_status, o.resource_version)
        if _first_sight(d):  # never written as queued: the launch's outcome goes over the status as stored
            return _Waiting(o.sj, o.spec, result.status, o.raw_status, o.resource_version)
        if (mine := self.written.get(o.sj.uid)) is not None:
            # Queued in this very pass: launched on top of the status just written.
            return _Waiting(o.sj, o.spec, result.status, mine.status, mine.resource_version)
        return None

    def _explain(self, decided: Iterable[Decided], waiting: Mapping[str, Waiting], now: datetime) -> list[Decided]:
        """``_explained`` for each of ``decided`` the admission left ``waiting``; an SJ whose decision and reason
        are the very ones its condition was last found to say is passed over without a look."""
        settled_of, clock, out = self.why_settled.get, self.monotonic(), []
        for d in decided:
            why = waiting.get(d.observed.sj.key)
            if why is not None:
                settled = settled_of(d.observed.sj.uid)
                if settled is None or settled[0] is not d or settled[1] is not why or (
                        settled[3] is None and clock >= settled[4]):
                    try:
                        d = self._explained(d, why, now)
                    except Exception as exc:
                        self.quarantine.fault(d.observed.sj, "explain", exc)
            out.append(d)
        return out

    def _explained(self, d: Decided, why: Waiting, now: datetime) -> Decided:
        """A waiting SJ that was not admitted says why in its Admitted condition, when that changed (the
        numbers alone refresh at most every `WHY_REFRESH` seconds)."""
        status, uid = d.step.status, d.observed.sj.uid
        settled = self.why_settled.get(uid)
        if settled is not None and settled[0] is d and settled[2] == why.reason and (
                settled[3] == why.message if settled[3] is not None else self.monotonic() < settled[4]):
            self.why_settled[uid] = (d, why, *settled[2:])
            return d
        written = self.why_written.get(uid)
        if not wait_changed(status.conditions, why.reason, why.message, refresh=WHY_REFRESH,
                            since_written=None if written is None else self.monotonic() - written):
            # Nothing to write: the condition says just this, or only its numbers moved since it was
            # written (then they are written once `WHY_REFRESH` has passed).
            exact = _says(status, why)
            self.why_settled[uid] = (d, why, why.reason, why.message if exact else None,
                                     0.0 if exact or written is None else written + WHY_REFRESH)
            return d
        self.why_written[uid] = self.monotonic()
        return replace(d, step=replace(d.step, status=waiting_for_room(status, now, why.reason, why.message)))

    def _recovered(self, d: Decided) -> Decided:
        """An SJ handled in this pass that a fault had marked loses its ``Reconciled=False`` condition (in the
        write its decision makes anyway, or one of its own)."""
        status = d.step.status
        if d.observed.sj.uid in self.quarantine.faults or not any(c.type == CONDITION for c in status.conditions):
            return d
        self.quarantine.forget_report(d.observed.sj.uid)
        kept = tuple(c for c in status.conditions if c.type != CONDITION)
        return replace(d, step=replace(d.step, status=status.model_copy(update={"conditions": kept})))

    def _report_fault(self, sj: SJObject, fault: Fault, exc: BaseException) -> None:
        """A new fault of an SJ: logged with its traceback, counted, an Event, and ``Reconciled=False`` with
        the cause on the SJ (written in the background: the pass goes on)."""
        log.error("skipping %s", fault, exc_info=exc)
        self.metrics.skipped_object(fault)
        self._record(sj, (Event("Warning", fault.reason, fault.message),))
        task = asyncio.create_task(self._write_fault(sj, fault), name=f"fault {sj.key}")
        self._fault_tasks.add(task)
        task.add_done_callback(self._fault_tasks.discard)

    async def _write_fault(self, sj: SJObject, fault: Fault) -> None:
        in_background()
        raw = sj.status.get("conditions")
        listed = raw if isinstance(raw, list) else []
        kept = [c for c in listed if isinstance(c, Mapping) and c.get("type") != CONDITION]
        condition = {"type": CONDITION, "status": "False", "reason": fault.reason, "message": fault.message,
                     "lastTransitionTime": self.clock().isoformat().replace("+00:00", "Z"),
                     "observedGeneration": sj.generation}
        try:
            await self.kube.patch_sj_status(sj.namespace, sj.name, {"conditions": [*kept, condition]}, None)
        except KubeError as exc:
            log.warning("could not write the fault of %s: %s", sj.key, exc)
            self.quarantine.forget_report(sj.uid)

    async def _apply_isolated(self, d: Decided) -> bool:
        """`_apply`, a fault of the SJ when it raises anything but the API's refusals (which it handles)."""
        try:
            return await self._apply(d.observed, d.step)
        except Exception as exc:
            self.quarantine.fault(d.observed.sj, "write", exc)
            return False

    def _with_launched(self, view: ClusterView) -> ClusterView:
        """The view with the Jobs this process made that the watch does not show yet (read-your-writes: a
        launch writes no status, so its Job is what says the SJ has a run)."""
        unseen = {key: entry.job for key, entry in self.launched.items()
                  if key not in view.jobs and self.monotonic() - entry.at <= LAUNCHED_TTL}
        return replace(view, jobs={**view.jobs, **unseen}) if unseen else view

    def _add_launched(self, view: ClusterView, runs: dict[tuple[str, str], InFlightRun]) -> None:
        """Runs this process launched that the cache does not show as Starting yet, and those being launched."""
        for launching in self.launching.values():
            runs.setdefault(launching.run_key, launching.run)
        now = self.monotonic()
        for key, entry in list(self.launched.items()):
            if now - entry.at > LAUNCHED_TTL:
                del self.launched[key]
                continue
            if key not in runs:
                scheduled = sum(1 for p in view.run_pods.get(key, ()) if p.node)
                if scheduled < entry.run.pods:
                    runs[key] = (entry.run if scheduled == entry.run.scheduled_pods
                                 else replace(entry.run, scheduled_pods=scheduled))

    async def _apply(self, o: Observed, result: Step) -> bool:
        """Writes the new status (if any), then records Events and runs actions. False on conflict."""
        if result.status != o.status:
            if not await self._write_status(o.sj, o.resource_version, o.raw_status, result.status):
                return False
            self._count(o, result.status)
        self._record(o.sj, result.events)
        for action in result.actions:
            if isinstance(action, DeleteRun):
                await self.delete_run(o.sj.namespace, action.job_name, action.reason, sj_uid=o.sj.uid,
                                      job=o.run.job)
            elif isinstance(action, SetProtection):
                await self._set_protection(o, action)
        return True

    async def _write_status(self, sj: SJObject, rv: str, raw: Mapping[str, Any],
                            after: ScavengerJobStatus) -> bool:
        """Merge-patches the fields that differ from the stored status (None clears a field)."""
        new = after.to_patch()
        known = set(after.to_patch(nulls=True))
        patch = {k: v for k, v in new.items() if raw.get(k) != v}
        patch.update({k: None for k in raw if k in known and k not in new})
        if not patch:
            return True
        try:
            body = await self.kube.patch_sj_status(sj.namespace, sj.name, patch, rv)
        except Conflict:
            log.debug("%s changed since it was read; deciding again", sj.key)
            self.written.pop(sj.uid, None)
            return False
        except NotFound:
            return False
        except KubeError as exc:
            log.error("could not write the status of %s: %s", sj.key, exc)
            return False
        self.written[sj.uid] = _Written(body["metadata"]["resourceVersion"], dict(body.get("status") or {}),
                                        self.monotonic())
        return True

    async def _concurrently(self, coros: Iterable[Awaitable[T]]) -> list[T]:
        """Runs API-bound steps concurrently, at most `API_CONCURRENCY` at a time; their results in order.

        A few workers take the steps one after another (not a task per step: thousands of tasks started in
        one turn of the loop would hold it). Steps that did not wait for the API (nothing to patch) give
        the loop a turn: the workers may all resume in one turn of the loop, so each has its share of
        `hold_budget`."""
        steps = list(coros)
        results: list[T | None] = [None] * len(steps)
        queue = iter(enumerate(steps))
        workers = min(API_CONCURRENCY, len(steps))

        async def worker() -> None:
            pacer = Pacer(self.hold_budget / workers)
            for i, step in queue:
                results[i] = await step
                await pacer.breathe()

        if steps:
            await asyncio.gather(*(worker() for _ in range(workers)))
        return results  # type: ignore[return-value]  # every step has run

    # --- the background lane: steering's writes and Events --------------------------------
    def _steer(self, due: list[Decided]) -> None:
        """Carries out steering decisions in the background, up to `STEERING_IN_FLIGHT` SJs at once, protection
        changes first (the SJs left out are decided again by the next passes). Each SJ is held as decided
        until its writes are done."""
        room = STEERING_IN_FLIGHT - len(self.steering)
        for d in sorted(due, key=_steering_order)[:max(room, 0)]:
            self.steering[d.observed.sj.uid] = d
            task = asyncio.create_task(self._steer_one(d), name=f"steering {d.observed.sj.key}")
            self._steering_tasks.add(task)
            task.add_done_callback(self._steering_tasks.discard)

    async def _steer_one(self, d: Decided) -> None:
        in_background()
        try:
            await self._apply(d.observed, d.step)
        except Exception:
            log.exception("steering writes of %s failed; deciding again", d.observed.sj.key)
        finally:
            self.steering.pop(d.observed.sj.uid, None)
            if len(self.steering) <= STEERING_IN_FLIGHT // 2:
                self.wake()

    def _record(self, sj: SJObject, events: Iterable[Event]) -> None:
        """Logs the Events and queues them for the background lane, stamped now (so they keep their order
        whenever they are recorded). Recording never holds up a decision: past `EVENT_BACKLOG` Events
        waiting, new ones are dropped and counted."""
        events = tuple(events)
        if not events:
            return
        for ev in events:
            log.info("%s: %s: %s", sj.key, ev.reason, ev.message)
        steering = all(ev.reason in STEERING_REASONS for ev in events)
        if not steering:
            # Another step's Events come after the waiting toggle: a later toggle does not jump over them.
            self._steering_unrecorded.pop(sj.uid, None)
        elif (waiting := self._steering_unrecorded.get(sj.uid)) is not None:
            waiting.replaced += 1
            waiting.events, waiting.at, waiting.queued = events, datetime.now(UTC), self.monotonic()
            self.metrics.events_replaced.inc()
            return
        if len(self._event_queue) >= EVENT_BACKLOG:
            self.metrics.events_dropped.inc(len(events))
            if self.monotonic() >= self._drop_warned:
                self._drop_warned = self.monotonic() + 60
                log.warning("Events are dropped: %d are waiting to be recorded (scavenger_events_dropped_total)",
                            len(self._event_queue))
            return
        entry = _Unrecorded((sj.namespace, sj.name, sj.uid), events, datetime.now(UTC), self.monotonic())
        self._event_queue.append(entry)
        if steering:
            self._steering_unrecorded[sj.uid] = entry
        self._event_workers = [t for t in self._event_workers if not t.done()]
        if len(self._event_workers) < EVENT_WORKERS:
            self._event_workers.append(asyncio.create_task(self._post_events(), name="events"))

    async def _post_events(self) -> None:
        """Records queued Events until none is left (a step's Events one after another), each once no run has
        been launched for a moment or it has waited long enough (`pacing.event_wait`)."""
        in_background()
        queue = self._event_queue
        while queue:
            while not self._flushing and (
                    wait := event_wait(self.monotonic(), queue[0].queued, self._last_launch)) > 0:
                held = asyncio.get_running_loop().create_future()
                self._held_events.add(held)
                try:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(held, timeout=wait)
                finally:
                    self._held_events.discard(held)
                if not queue:
                    return
            entry = queue.popleft()
            (namespace, name, uid), at = entry.sj, entry.at
            if self._steering_unrecorded.get(uid) is entry:
                del self._steering_unrecorded[uid]
            note = f" ({entry.replaced} earlier protection change(s) not recorded)" if entry.replaced else ""
            for ev in entry.events:
                await self.kube.event(namespace=namespace, name=name, uid=uid, kind=KIND,
                                      api_version=API_VERSION, type_=ev.type, reason=ev.reason,
                                      message=ev.message + note, at=at)

    async def settle(self) -> None:
        """Waits until no launch is queued or under way and the background lane is idle: no steering write under
        way, no Event left to record (the Events waiting for launches are recorded at once)."""
        self._flushing = True
        for held in self._held_events:
            if not held.done():
                held.set_result(None)
        try:
            await _idle(lambda: (*self._launch_workers, *self._steering_tasks, *self._event_workers,
                                 *self._fault_tasks))
        finally:
            self._flushing = False

    # --- runs ------------------------------------------------------------------------
    async def delete_run(self, namespace: str, job_name: str, reason: str, *, sj_uid: str,
                         job: JobView | None = None) -> None:
        """Deletes a run of the SJ of ``sj_uid``: its Job and its gang's Service, each only when that SJ controls
        it and only the very object found (its uid as the precondition). ``job``: the run's Job as the view
        shows it, when it does (else it is read first)."""
        log.info("deleting run %s/%s: %s", namespace, job_name, reason)
        self.launched.pop((namespace, job_name), None)
        if job is not None and job.name == job_name and job.owner == sj_uid and job.uid:
            await self.kube.delete_child("Job", namespace, job_name, job.uid)
        else:
            await self.kube.delete_owned("Job", namespace, job_name, sj_uid)
        await self.kube.delete_owned("Service", namespace, job_name, sj_uid)

    async def _delete_strays(self, view: ClusterView, known: frozenset[OwnedRun]) -> None:
        """Runs an SJ controls that it no longer points at, or whose SJ is gone (e.g. left by a launch whose SJ
        then changed), are removed (`decide.stray_runs`); a Job no SJ controls is never touched."""
        for job in stray_runs(view.jobs, known, keep=self.launched):
            if job.owner is not None and self.handles(job.namespace):
                await self.delete_run(job.namespace, job.name, "its ScavengerJob no longer refers to this run",
                                      sj_uid=job.owner, job=job)

    async def _set_protection(self, o: Observed, action: SetProtection) -> None:
        """Toggles the label the SJ's PodDisruptionBudget selects on every pod of the run; the budget is applied
        first when it may be missing or counts another number of pods (a fallback's run)."""
        now, pods, applied = self.monotonic(), _run_size(o), self.budgets.get(o.sj.uid)
        if action.protected and (applied is None or applied[1] != pods or now - applied[0] > BUDGET_REFRESH):
            try:
                await self._apply_budget(protection_budget(o.sj.namespace, o.sj.name, o.sj.uid, pods), o.sj.uid)
            except NameTaken as exc:
                # Someone else's budget of its name: neither patched nor taken, and the run is not protected.
                log.warning("%s is not protected: %s", o.sj.key, exc.message)
                self._record(o.sj, (Event("Warning", "NameTaken", f"the run is not protected: {exc.message}"),))
                return
            self.budgets[o.sj.uid] = (now, pods)
        value = "true" if action.protected else "false"
        for pod in o.run.pods:
            if not pod.terminal and pod.protected != action.protected:
                await self.kube.label_pod(o.sj.namespace, pod.name, {LABEL_PROTECTED: value})

    async def _apply_budget(self, pdb: Mapping[str, Any], sj_uid: str) -> None:
        """Creates the SJ's budget, or patches the one it controls (as read: Conflict when it changed since)."""
        existing = await self.kube.create_child(pdb, sj_uid)
        if existing is not None:
            meta = pdb["metadata"]
            await self.kube.patch_child("PodDisruptionBudget", meta["namespace"], meta["name"],
                                        {"metadata": {"labels": meta["labels"]}, "spec": pdb["spec"]},
                                        existing["metadata"]["resourceVersion"])

    # --- admission ---------------------------------------------------------------------
    def _admission(self, view: ClusterView, decided: list[Decided], runs: tuple[InFlightRun, ...],
                   now: datetime) -> AdmissionPass:
        """Which waiting SJs start now, and why the others wait. SJs their namespace refused wait out their
        retry delay without holding room for the others (their reason is already written)."""
        clock = self.monotonic()
        held = self.held
        steering = self.steering
        quarantine = self.quarantine
        faulted = quarantine.held
        queue = self.memo.queue(((o.sj, o.spec, d.step.status) for d in decided
                                 if d.step.waiting and not isinstance((o := d.observed).spec, InvalidSpec)
                                 and (not held or held.get(o.sj.uid, (0.0, 0))[0] <= clock)
                                 and (not steering or o.sj.uid not in steering)
                                 and (not faulted or not quarantine.holds(o.sj))), now, on_fault=quarantine.fault)
        if not queue:
            return AdmissionPass([], {})
        started = time.perf_counter()
        config = self.policy_config
        try:
            admission = self.memo.admission(view, queue, runs, now, config)
        except Exception:
            sjs = {d.observed.sj.key: d.observed.sj for d in decided}
            queue = tuple(quarantine.isolated("admission", queue, lambda part: self.memo.admission(
                view, tuple(part), runs, now, config), lambda entry: sjs[entry.key]))
            admission = self.memo.admission(view, queue, runs, now, config)
        log.debug("admission over %d waiting SJ(s), %d node(s): %d admitted in %.1f ms", len(queue),
                  len(view.nodes), len(admission.admitted), (time.perf_counter() - started) * 1000)
        return admission

    def _launch(self, now: datetime, admitted: Iterable[tuple[_Waiting, int]]) -> None:
        """Queues the admitted SJs' launches (each with the configuration the admission chose) for the launch
        workers; their room stays spoken for, and no pass decides them, until each launch is done."""
        queue = self._launch_queue
        for w, index in admitted:
            spec = w.spec.config(index)
            job_name = run_job_name(w.sj.name, w.status.attempt + 1)
            self.launching[w.sj.uid] = _Launching(w.sj.key, (w.sj.namespace, job_name), in_flight(w.sj, spec, 0))
            queue.append((w, index, now))
        self._launch_workers = [t for t in self._launch_workers if not t.done()]
        for _ in range(min(LAUNCH_WORKERS - len(self._launch_workers), len(queue))):
            self._launch_workers.append(asyncio.create_task(self._launch_queued(), name="launches"))

    async def _launch_queued(self) -> None:
        """Launches queued SJs until none is left; then wakes the loop (a launch retried later is decided
        again)."""
        queue = self._launch_queue
        while queue:
            w, index, now = queue.popleft()
            try:
                await self.launch(w, now, index)
            except Exception as exc:
                self.quarantine.fault(w.sj, "launch", exc)
            finally:
                self.launching.pop(w.sj.uid, None)
        self.wake()

    async def launches_done(self) -> None:
        """Waits until no launch is queued or under way."""
        await _idle(lambda: self._launch_workers)

    def drop_launches(self) -> None:
        """Forgets the launches not begun yet (this process no longer decides: another replica leads)."""
        for w, _, _ in self._launch_queue:
            self.launching.pop(w.sj.uid, None)
        self._launch_queue.clear()

    async def launch(self, w: _Waiting, now: datetime, config_index: int = 0) -> None:
        """Creates the next run of an admitted SJ (idempotent) in the configuration the admission chose,
        then records what the state machine says: its Event (the run itself is written into the status
        by a later pass, `lifecycle.launched`), or why no run was made."""
        result = await self._create_run(w, now, config_index)
        if result is not None:
            observed = Observed(w.sj, w.rv, w.raw, w.status, w.spec, run=_NO_RUN)
            await self._apply(observed, result)

    async def _create_run(self, w: _Waiting, now: datetime, config_index: int) -> Step | None:
        """The run's objects, then the transition to record; None when it is retried on a later pass."""
        sj, spec, status = w.sj, w.spec.config(config_index), w.status
        job_name = run_job_name(sj.name, status.attempt + 1)
        missing = await self._missing_references(sj.namespace, spec)
        if missing:
            return launch_refused(status, now, "MissingReference", f"{missing} not found; no run was created")
        priority_class = launch_class(status.interrupted_count)
        try:
            job = build_run_job(sj_name=sj.name, namespace=sj.namespace, sj_uid=sj.uid, spec=spec,
                                status_interrupted_count=status.interrupted_count, attempt=status.attempt + 1,
                                priority_class_name=priority_class, extra_pod_labels={LABEL_PROTECTED: "false"},
                                mpi=mpi_job_options(sj_name=sj.name, mpi=spec.mpi) if spec.mpi else None,
                                config_index=config_index, cluster_domain=self.config.cluster_domain)
        except ValueError as exc:
            return launch_refused(status, now, "InvalidSpec", f"invalid spec: {exc}")
        try:
            refusal = await self._namespace_refusal(sj, spec, job)
            made_now = (self._hold(w, now, *refusal) if refusal is not None
                        else await self._make(w, now, spec, job, job_name))
        except Invalid as exc:  # the run's pod itself is invalid (a dry run): it never will be otherwise
            return launch_refused(status, now, "InvalidRun", f"the API server rejected run {job_name}: {exc.message}")
        except KubeError as exc:
            log.warning("could not launch %s: %s (retried on a later pass)", sj.key, exc)
            return None
        if isinstance(made_now, Step):
            return made_now
        self.held.pop(sj.uid, None)
        # The start timeout counts from the Job's creation, not from the pass's start (which may be long
        # before it when API calls were retried).
        made_at = self.clock()
        made = job_view({**job, "metadata": {**job["metadata"], "creationTimestamp": made_at.isoformat()}})
        self._last_launch = self.monotonic()
        self.launched[(sj.namespace, job_name)] = _Launched(in_flight(sj, spec, 0), self.monotonic(), made)
        if not made_now:
            # Another decider (or an earlier try of this one whose answer was lost) made it: its Event and
            # count are that launch's, and the run is recorded as any other.
            log.info("run %s of %s already exists: kept", job_name, sj.key)
            return Step(status)
        self.metrics.launched.inc()
        since = status.interrupted_timestamps[-1] if status.interrupted_timestamps else sj.created
        if since is not None:
            self.metrics.admission_wait.observe(max((made_at - since).total_seconds(), 0.0))
        return launched(status, made_at, job_name=job_name, priority_class_name=priority_class,
                        pods=spec.parallelism, config_index=config_index)

    async def _make(self, w: _Waiting, now: datetime, spec: ScavengerJobSpec, job: Mapping[str, Any],
                    job_name: str) -> bool | Step:
        """Makes the run's objects, its Job last: whether the Job was made now (False: this SJ made it before).
        When the API server refuses one of them, or one of their names is held by an object the SJ does not
        control, the SJ is held back instead (`_hold`), saying what refused or whose name it is."""
        try:
            await self._create_children(w.sj, spec, job_name)
            return await self._create(job, w.sj) is None
        except NameTaken as exc:
            return self._hold(w, now, "NameTaken", f"{exc.message}: it is neither used nor deleted; the SJ waits "
                                                   "until that name is free")
        except _Refused as exc:
            return self._hold(w, now, refusal_reason(str(exc)), str(exc))

    async def _namespace_refusal(self, sj: SJObject, spec: ScavengerJobSpec,
                                 job: Mapping[str, Any]) -> tuple[NamespaceRefusal, str] | None:
        """Why the SJ's namespace would refuse the run's pods, before anything is made: one pod goes through
        every admission rule as a dry run; a gang's sum is checked against the namespace's quotas."""
        template = job["spec"]["template"]
        shape = (sj.namespace, admission_shape(template["spec"]))
        accepted = self.dry_runs.get(shape)
        tried = accepted is None or self.monotonic() - accepted >= DRY_RUN_TTL
        if tried:
            pod = {"apiVersion": "v1", "kind": "Pod", "spec": template["spec"],
                   "metadata": {**template["metadata"], "generateName": f"{job['metadata']['name']}-",
                                "namespace": sj.namespace}}
            try:
                await self.kube.dry_run_pod(pod)
            except Forbidden as exc:
                if "cannot create resource" in exc.message:  # the operator's own RBAC, not the namespace's rules
                    log.warning("cannot try %s's pods as a dry run (%s); launching without it", sj.key, exc.message)
                    return None
                return refusal_reason(exc.message), f"namespace {sj.namespace} refuses this SJ's pods: {exc.message}"
        if not (tried or spec.is_gang):
            return None
        quotas = self.resource_quotas(sj.namespace)
        if tried and not quotas:  # a ResourceQuota's room changes with every pod: its verdict is never reused
            self._accepted(shape)
        if spec.is_gang:
            shortfall = quota_shortfall(quotas, resources_milli(spec.resources.requests),
                                        resources_milli(spec.resources.limits), spec.parallelism)
            if shortfall is not None:
                return "QuotaExceeded", f"namespace {sj.namespace} has no room for the whole gang: {shortfall}"
        return None

    def _accepted(self, shape: tuple[str, str]) -> None:
        """Remembers that the namespace accepted a dry-run pod of this shape (expired entries dropped as the
        table grows)."""
        now = self.monotonic()
        if len(self.dry_runs) >= 1024:
            self.dry_runs = {k: at for k, at in self.dry_runs.items() if now - at < DRY_RUN_TTL}
        self.dry_runs[shape] = now

    def _hold(self, w: _Waiting, now: datetime, reason: NamespaceRefusal, message: str) -> Step:
        """The SJ waits, saying why; it is tried again after a delay that doubles per refusal in a row."""
        refusals = self.held.get(w.sj.uid, (0.0, 0))[1] + 1
        delay = retry_delay(refusals, self.lifecycle_config)
        self.held[w.sj.uid] = (self.monotonic() + delay.total_seconds(), refusals)
        log.info("%s waits: %s (trying again in %ss)", w.sj.key, message, delay.total_seconds())
        return launch_forbidden(w.status, now, reason, f"{message} (trying again in {int(delay.total_seconds())}s)")

    async def _create(self, body: Mapping[str, Any], sj: SJObject) -> dict[str, Any] | None:
        """Creates one of the SJ's objects (`Kube.create_child`): None when made, the stored object when the SJ
        made it before. Raises `NameTaken` when someone else's object has its name, and `_Refused` when the API
        server refuses it (Forbidden or Invalid: a ResourceQuota, a policy the dry run could not see)."""
        try:
            return await self.kube.create_child(body, sj.uid)
        except (Forbidden, Invalid) as exc:
            meta = body["metadata"]
            raise _Refused(f"the API server refused to create {body['kind']} {meta['namespace']}/{meta['name']} "
                          f"({exc.status} {exc.reason}): {exc.message}") from exc

    async def _create_children(self, sj: SJObject, spec: ScavengerJobSpec, job_name: str) -> None:
        """What a run needs before its Job: MPI objects, the gang's Service. (The protection budget is made
        when the run is first protected: most runs never are, and it saves a write per SJ.)"""
        if spec.mpi is not None:
            await self._ensure_mpi_objects(sj, spec, job_name)
        if spec.is_gang:
            await self._create(build_gang_service(job_name=job_name, namespace=sj.namespace, sj_name=sj.name,
                                                  sj_uid=sj.uid), sj)

    async def _ensure_mpi_objects(self, sj: SJObject, spec: ScavengerJobSpec, job_name: str) -> None:
        """The SJ's ssh Secret (generated once, reused by every run) and the hostfile of this run; a Secret or
        ConfigMap of their names that the SJ does not control is neither used nor changed (`NameTaken`)."""
        assert spec.mpi is not None
        secret = await self.kube.read_child("Secret", sj.namespace, mpi_secret_name(sj.name))
        if secret is not None:
            check_owner(secret, sj.uid)
        else:
            await self._create(build_mpi_secret(sj_name=sj.name, namespace=sj.namespace, sj_uid=sj.uid,
                                                keys=generate_gang_keys(), cluster_domain=self.config.cluster_domain),
                               sj)
        hostfile = build_hostfile_configmap(
            sj_name=sj.name, namespace=sj.namespace, sj_uid=sj.uid, job_name=job_name,
            parallelism=spec.parallelism, slots_per_worker=spec.mpi.slots_per_worker,
            implementation=spec.mpi.implementation, cluster_domain=self.config.cluster_domain)
        existing = await self._create(hostfile, sj)
        if existing is not None:  # the SJ's own, from an earlier run: this run's hosts written over it
            meta = hostfile["metadata"]
            await self.kube.patch_child("ConfigMap", meta["namespace"], meta["name"], {"data": hostfile["data"]},
                                        existing["metadata"]["resourceVersion"])

    async def _missing_references(self, namespace: str, spec: ScavengerJobSpec) -> str | None:
        for i, volume in enumerate(spec.volumes):
            for kind, name in (("persistentVolumeClaim", volume.persistent_volume_claim and
                                volume.persistent_volume_claim.claim_name),
                               ("configMap", volume.config_map and volume.config_map.name),
                               ("secret", volume.secret and volume.secret.secret_name)):
                if name and not await self.kube.exists(kind, namespace, name):
                    return f'{kind} "{name}" (spec.volumes[{i}] "{volume.name}")'
        return None

