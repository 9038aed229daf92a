"""The decision loop: one pass decides (``decide``), then carries the decisions out (``write``).

A pass (`Controller._pass`) reads the watch cache with this process's own writes on top, runs the pure state
machine for every SJ, asks the pure admission policy which waiting SJs start now, says why the others wait,
and plans the writes (`write.plan`): the admitted SJs' own writes first, then their launches queued for the
launcher, strays removed, and the rest written meanwhile; victim steering's bookkeeping and the Events go
out in the background.

Status writes carry the resourceVersion the decision was based on, so a decision made on a stale
cache fails with Conflict instead of applying twice; the loop then simply runs again on fresher data.
Child names are deterministic, so a launch repeated after a crash finds its Job and adopts it; only what the
SJ controls (its controller ownerReference) is found so, reused, patched or deleted: an object of a child's
name that someone else made holds the SJ back (``NameTaken``), as a refusal of the API server does, with a
doubling delay. Restarting the operator at any moment therefore converges without duplicates.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from sj_operator.adopter import Adopter
from sj_operator.api import InvalidSpec
from sj_operator.config import OperatorConfig
from sj_operator.decide import ClusterView, Decided, Observed, exemptions, nodes_being_drained, running_exemptions
from sj_operator.explain import Explainer
from sj_operator.faults import CONDITION, Fault
from sj_operator.gauges import Gauges
from sj_operator.kube import Kube, in_background
from sj_operator.memo import PassMemo, forget_uids
from sj_operator.metrics import Metrics
from sj_operator.observed import NodeInfo, SJObject
from sj_operator.pacing import HOLD_BUDGET, Pacer, Timer, in_slices, paced
from sj_operator.policy.admission import AdmissionPass, PolicyConfig
from sj_operator.policy.lifecycle import Event, LifecycleConfig
from sj_operator.policy.snapshot import InFlightRun
from sj_operator.policy.tenancy import QuotaDefaults, ResourceQuotaView
from sj_operator.quarantine import Quarantine
from sj_operator.write.endpoints import Slices
from sj_operator.write.events import Recorder
from sj_operator.write.gate import Gate, Hold
from sj_operator.write.launcher import Candidate, Launcher
from sj_operator.write.ledger import Launching, Ledger
from sj_operator.write.plan import Launches, WritePlan, joined, plan_writes, writes
from sj_operator.write.pool import Pool, concurrently, idle
from sj_operator.write.steering import SteeringLane, set_aside_until
from sj_operator.write.writer import Writer

__all__ = ["ClusterView", "Controller", "utcnow"]

log = logging.getLogger("sj_operator.controller")
Clock = Callable[[], datetime]
API_CONCURRENCY = 24
"""SJs whose writes are in flight at once; the client has `kube.API_THREADS` threads, some left for the
leader election and the webhook."""


def utcnow() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


@dataclass(frozen=True)
class _FaultReport:
    sj: SJObject
    fault: Fault


@dataclass
class _Kept:
    """What a pass keeps for the next one, so that it looks only at the SJs that changed (`Controller._pass`)."""

    complete: bool = False
    """The last pass ended: what it kept holds (else the next pass looks at every SJ)."""
    decided: dict[str, Decided] = field(default_factory=dict)
    """Each SJ's decision as the last pass that looked at it held it (steering's kept), by uid."""
    writing: set[str] = field(default_factory=set)
    """The SJs whose last decision had something to write (written or not: looked at again), except those in
    ``deferred``."""
    deferred: set[str] = field(default_factory=set)
    """The SJs whose routine protection toggle waits for the runs starting (`write.steering`): looked at again
    once the steering lane no longer yields, when they change, and (an unprotection) at the first pass
    `write.steering.SET_ASIDE` after each look."""
    faulted: set[str] = field(default_factory=set)
    """The SJs a step of the last pass could not handle (tried again)."""
    busy: set[str] = field(default_factory=set)
    """The SJs being steered when the last pass ended."""
    exempt: frozenset[str] = frozenset()
    """Steering's exemptions at the last pass (by key)."""
    nodes: tuple[NodeInfo, ...] = ()
    draining: frozenset[str] = frozenset()
    """The nodes being drained among ``nodes``."""
    drained: frozenset[str] = frozenset()
    """The nodes being drained at the last pass."""
    admission: AdmissionPass | None = None


_NO_ADMISSION = AdmissionPass([], {})


@dataclass
class Controller:
    kube: Kube
    config: OperatorConfig
    clock: Clock = utcnow
    monotonic: Callable[[], float] = time.monotonic
    metrics: Metrics = field(default_factory=Metrics)
    wake: Callable[[], None] = lambda: None
    """Asks for another pass (the loop's wake-up): called when background writes are done."""
    call_later: Callable[[float, Callable[[], None]], Timer] | None = None
    """Schedules a call in so many seconds (None: the running loop's ``call_later``)."""
    hold_budget: float = HOLD_BUDGET
    """Seconds a pass's work may hold the event loop before it gives the other tasks a turn."""
    resource_quotas: Callable[[str], Sequence[ResourceQuotaView]] = lambda namespace: ()
    """A namespace's ResourceQuotas, which a gang's launch is checked against: the operator's watch cache of
    them (`handlers.startup`); none anywhere unless told."""
    current_sj: Callable[[str, str], SJObject | None] | None = None
    """The SJ (by namespace and name) as the watch cache holds it now: a queued launch whose SJ was deleted or its
    spec edited since the pass that admitted it is dropped (`write.launcher.Launcher`); None: not checked."""
    incremental: bool = True
    """A pass looks only at the SJs that changed, whose clock came or whose reason may have changed (`_pass`);
    False: every pass looks at every SJ (what the tests compare the incremental passes with)."""

    memo: PassMemo = field(init=False)
    adopter: Adopter = field(init=False)
    quarantine: Quarantine = field(init=False)
    """The SJs a step of the pass could not handle (`quarantine.py`): skipped, counted, told on the SJ."""
    ledger: Ledger = field(init=False)
    gate: Gate = field(init=False)
    recorder: Recorder = field(init=False)
    slices: Slices = field(init=False)
    """The gangs' EndpointSlices (`write.endpoints`)."""
    writer: Writer = field(init=False)
    steering_lane: SteeringLane = field(init=False)
    launcher: Launcher = field(init=False)
    explainer: Explainer = field(init=False)
    gauges: Gauges = field(init=False)
    _faults: Pool[_FaultReport] = field(init=False)
    _kept: _Kept = field(init=False, default_factory=_Kept)
    _wake_timer: tuple[float, Timer] | None = None
    """The pass asked for when the records of new runs held back for launches are due: when (monotonic) and
    its timer."""

    def __post_init__(self) -> None:
        wake = lambda: self.wake()  # noqa: E731  # whatever ``wake`` is when it is called
        self.memo = PassMemo(self.config.spec_limits)
        self.quarantine = Quarantine(report=self._report_fault)
        self.adopter = Adopter(self.kube, self.config.spec_limits, handles=self.handles, clock=self.clock,
                               lifecycle=lambda: self.lifecycle_config, on_fault=self.metrics.skipped_object)
        self.ledger = Ledger(self.monotonic)
        self.gate = Gate(self.kube, self.monotonic, lambda: self.lifecycle_config,
                         lambda namespace: self.resource_quotas(namespace))
        self.recorder = Recorder(self.kube, self.metrics, self.clock, self.monotonic,
                                 lambda: self.ledger.last_launch, lambda: self.ledger.behind)
        self.slices = Slices(self.kube, self.handles)
        self.writer = Writer(self.kube, self.ledger, self.recorder, self.metrics, self.clock, self.handles,
                             self.slices)
        self.steering_lane = SteeringLane(lambda d: self.writer.apply(d.observed, d.step), wake)
        self.launcher = Launcher(self.kube, self.config, ledger=self.ledger, gate=self.gate, metrics=self.metrics,
                                 clock=self.clock, apply=lambda o, step: self.writer.apply(o, step),
                                 on_fault=lambda sj, exc: self.quarantine.fault(sj, "launch", exc), wake=wake,
                                 current=lambda: self.current_sj)
        self.explainer = Explainer(self.monotonic, lambda sj, exc: self.quarantine.fault(sj, "explain", exc))
        self.gauges = Gauges(self.metrics, self.memo, self.hold_budget)
        self._faults = Pool("faults", API_CONCURRENCY, self._write_fault, describe=lambda report: report.sj.key)

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

    @property
    def held(self) -> dict[str, Hold]:
        """SJs (by uid) their namespace held back (`write.gate`)."""
        return self.gate.held

    @property
    def steering(self) -> dict[str, Decided]:
        """SJs (by uid) whose steering writes are under way (`write.steering`)."""
        return self.steering_lane.under_way

    @property
    def launching(self) -> dict[str, Launching]:
        """SJs (by uid) whose launch is queued or under way (`write.launcher`)."""
        return self.ledger.launching

    @property
    def unhurried(self) -> bool:
        """Whether the next pass may wait for the longest window (`pacing.batch_window`): the control plane is behind
        on the runs in flight (`Ledger.behind`: what a sooner pass would act on waits for it) and no steering write
        is under way (a drain's unprotections are handed to the steering lane by passes, as its room frees)."""
        return self.ledger.behind and not self.steering_lane.under_way

    def handles(self, namespace: str) -> bool:
        return not self.config.namespaces or namespace in self.config.namespaces

    # --- one pass --------------------------------------------------------------------
    async def reconcile(self, view: ClusterView) -> None:
        started = time.perf_counter()
        decided, gone, launching = await self._pass(view)
        await self.adopter.reconcile(view, self.monotonic())
        self.metrics.reconcile.observe(time.perf_counter() - started)
        await self.gauges.report(view, decided, launching, gone=gone)
        self.steering_lane.starting(self.gauges.starting)

    async def _pass(self, view: ClusterView) -> tuple[list[Decided], set[str] | None, set[str]]:
        """One pass; the decisions it made or looked at again, the SJs no longer decided (None: the decisions
        are every SJ's), and the keys of the SJs being launched (for the gauges). Only the SJs that changed, whose
        clock came or whose reason may have changed are looked at (`_decide`, `_admission_changes`): every other
        SJ's decision is the one the last pass made, and it has nothing to write. Thousands of SJs that changed at
        once are seconds of work: done in slices, giving the loop's other tasks (watches, probes, the webhook,
        the background lane) a turn between them."""
        now, pacer, kept, work = self.clock(), Pacer(self.hold_budget), self._kept, self.memo.work
        # 1. The view with the runs this process made and the protection labels it wrote that the watch does not
        #    show yet.
        view = self.ledger.with_labels(self.ledger.with_launched(view))
        self._forget_gone(view)
        # 2. The SJs that changed or whose clock came observed and decided; those whose steering writes are under
        #    way keep that decision. A pass after a drain began or ended looks at every SJ.
        if kept.nodes is not view.nodes and kept.nodes != view.nodes:
            kept.nodes, kept.draining = view.nodes, nodes_being_drained(view)
        full = not self.incremental or not kept.complete or kept.draining != kept.drained
        kept.complete, kept.drained = False, kept.draining  # a pass that does not end leaves the next one full
        decided, gone = await self._decide(view, now, pacer, full=full)
        full = full or gone is None
        gone = gone or set()
        # 2b. The gangs' members, as this pass sees them, to their EndpointSlices (in the background).
        await in_slices(decided, lambda part: (self.slices.publish(part),), pacer)
        decided = self.steering_lane.holding(decided)
        if full:
            kept.decided = {}
        for uid in gone:
            kept.decided.pop(uid, None)
        async for d in paced(decided, pacer):
            kept.decided[d.observed.sj.uid] = d
        # 3. The runs in flight, whose room is spoken for.
        runs = await self.ledger.in_flight(decided, lambda sj, exc: self.quarantine.fault(sj, "admission", exc),
                                           gone=None if full else gone, position=None if full else work.position,
                                           layout=work.layout, pacer=pacer)
        self.ledger.add_launched(view, runs)
        if not self.ledger.behind:
            self.recorder.caught_up()  # the Events waiting for the control plane go now
        # 4. Admission, on the statuses about to be written: a waiting SJ's reason (Admitted=False) goes out
        #    in the same write as its transition, and only the admitted ones are written twice.
        admission = self._admission(view, decided, gone, tuple(runs.values()), now, full=full)
        await pacer.breathe()
        # 5. Why the others wait (looked at for the SJs decided and those whose reason may have changed); the SJs
        #    handled again lose their fault condition.
        more = [] if full else self._admission_changes(decided, admission)
        kept.admission = admission
        if waiting := admission.waiting:
            decided = await in_slices(decided, lambda part: self.explainer.explain(part, waiting, now), pacer)
        if more:
            decided = await self._explained_again(decided, more, admission, now, pacer)
        decided = await in_slices(decided, lambda part: [self._recovered(d) for d in part], pacer)
        writing = await in_slices(decided, lambda part: [d for d in part if writes(d)], pacer)
        kept.writing = {d.observed.sj.uid for d in writing}
        # 6. The plan: which writes go first, which wait, which take the steering lane (the plan leaves out
        #    the decisions with nothing to write).
        plan = await self._plan(writing, admission, now, pacer)
        # 7. Steering's bookkeeping goes out in the background; while many runs are starting, the SJs whose
        #    routine toggle waits for them are set aside (looked at again when they change, every few seconds,
        #    and once the toggles go on). A pass is asked for when held records are due.
        self._steer(plan.steering, decided, None if full else gone)
        if plan.due_in is not None:
            self._wake_in(plan.due_in)
        # 8. The admitted SJs' own writes (a launch writes over them), then the strays removed.
        applied = await self._write(plan.first)
        await self.writer.delete_strays(view, work.known())
        # 9. Their launches queued for the launcher; the pass writes the rest meanwhile: in a burst a launch
        #    does not wait behind hundreds of other SJs' transitions and reasons, nor the next pass behind it.
        self._queue_launches(decided, admission, applied, now)
        await self._write(plan.rest)
        # 10. The aggregated Events' counts that are due go out; a pass is asked for when the next ones are (the
        #     steering lane's toggles, counted after this, wake the loop when they are done).
        self.recorder.flush_due()
        if (due := self.recorder.due_in()) is not None:
            self._wake_in(due)
        kept.faulted = set(self.quarantine.faults)
        kept.busy = set(self.steering_lane.under_way)
        kept.complete = True
        return decided, None if full else gone, {entry.key for entry in self.ledger.launching.values()}

    def _steer(self, steering: Sequence[Decided], decided: list[Decided], gone: set[str] | None) -> None:
        """Steering's bookkeeping (``steering``) to the steering lane. The SJs whose routine toggle waits are set
        aside (`_Kept.deferred`) until `write.steering.set_aside_until` from now (not from the pass's start: a pass
        of a burst may take seconds); those ``decided`` in this pass, and those ``gone``, no longer are (``gone``
        None: this pass decided every SJ)."""
        kept = self._kept
        if gone is None:
            kept.deferred = set()
        else:
            kept.deferred.difference_update(gone)
            kept.deferred.difference_update(d.observed.sj.uid for d in decided)
        if steering and (deferred := self.steering_lane.steer(steering)):
            now, work = self.clock(), self.memo.work
            for d in deferred:
                uid = d.observed.sj.uid
                kept.writing.discard(uid)
                kept.deferred.add(uid)
                work.wake(uid, set_aside_until(d, now))

    def _forget_gone(self, view: ClusterView) -> None:
        """Forgets what the tables hold of SJs gone, once they hold many more than there are SJs."""
        self.quarantine.begin_pass()
        self.memo.forget_gone(view.sjs)
        self.slices.forget(view.jobs)
        tables: tuple[dict[str, Any], ...] = (self.gate.held, self.explainer.written, self.explainer.settled,
                                              self.gauges.reported, self.writer.budgets, self.writer.refused,
                                              self.recorder.series)
        if sum(map(len, tables)) > 4 * len(view.sjs) + 1000 or (self.gate.held and len(self.gate.held) > len(view.sjs)):
            forget_uids(tables, view.sjs)
            self.quarantine.forget({sj.uid for sj in view.sjs})

    def _looked_at(self, now: datetime) -> set[str]:
        """The SJs a pass looks at whether or not they changed: those whose decision cannot be reused or whose
        clock came, those the last pass wrote or found a fault in, those being steered (and those that were), those
        whose launch was done or dropped since (`Ledger.take_ended`), those held out of the queue by a fault, those
        this process wrote (read through `Ledger.fresh`), and those whose routine toggle was set aside once steering
        no longer yields. Not those whose launch is queued or under way (unless they changed), whose decision no pass
        writes: a paced burst keeps thousands queued for minutes."""
        kept, work = self._kept, self.memo.work
        looked = work.due(now).union(work.every, kept.writing, kept.faulted, kept.busy, self.steering_lane.under_way,
                                     self.quarantine.held, self.ledger.written,
                                     () if self.steering_lane.yielding else kept.deferred)
        looked.difference_update(self.ledger.launching)
        return looked.union(self.ledger.take_ended())

    async def _decide(self, view: ClusterView, now: datetime, pacer: Pacer, *,
                      full: bool) -> tuple[list[Decided], set[str] | None]:
        """``memo.PassMemo.observe`` and ``memo.PassMemo.decide`` over the SJs that changed or whose clock came
        (``full``: every SJ), an SJ that breaks a step quarantined. The decisions in the view's order, and the
        SJs no longer decided (None: the pass looked at every SJ)."""
        quarantine, memo, work, kept = self.quarantine, self.memo, self.memo.work, self._kept
        handles = self.handles if self.config.namespaces else None
        if full:
            work.reset()
            self.ledger.take_ended()  # a full pass decides them all
        changed, vanished = work.changes(view)
        self.launcher.drop_changed(changed | vanished)  # a queued launch whose SJ was deleted or edited goes now
        sjs = view.sjs if full else work.in_order(changed | self._looked_at(now))

        async def observe(sjs: Sequence[SJObject]) -> list[Observed]:
            parts = await in_slices(sjs, lambda part: (memo.observe(
                view, handles=handles, fresh=self.ledger.fresh, sjs=part, fresher=self.ledger.written,
                on_fault=quarantine.fault),), pacer)
            return [o for part in parts for o in part.sjs]

        observed_sjs = await observe(sjs)
        cfg, draining = self.lifecycle_config, kept.draining
        try:
            exempt = (exemptions(observed_sjs, now, cfg) if full else
                      running_exemptions(work.running.values(), now, cfg))
        except Exception:
            if not full:
                return await self._decide(view, now, pacer, full=True)
            observed_sjs = quarantine.isolated("decide", observed_sjs, lambda part: exemptions(part, now, cfg),
                                               lambda o: o.sj)
            exempt = exemptions(observed_sjs, now, cfg)
        exempt |= self.writer.unprotectable()  # their budget's name is someone else's: left unprotected meanwhile
        if not full and exempt != kept.exempt:  # the SJs steering exempts, or no longer does, are decided again
            looked = {sj.uid for sj in sjs}
            observed_sjs += await observe(work.in_order(uid for key in exempt ^ kept.exempt
                                                        if (uid := work.uids.get(key)) is not None
                                                        and uid not in looked))
            observed_sjs.sort(key=lambda o: work.position(o.sj.uid))
            sjs = [*sjs, *(o.sj for o in observed_sjs if o.sj.uid not in looked)]
        kept.exempt = exempt
        decided = await in_slices(observed_sjs, lambda observed: memo.decide(
            observed, now, cfg, draining=draining, exempt=exempt,
            on_error=lambda o, exc: quarantine.fault(o.sj, "decide", exc)), pacer)
        for o in observed_sjs:
            work.wake(o.sj.uid, memo.reusable_until(o.sj.uid))
        seen = {o.sj.uid for o in observed_sjs}
        for sj in sjs:
            if sj.uid not in seen:
                work.forget(sj.uid)  # not observed (deleting, not handled, or it raised): looked at when it changes
        if full:
            return decided, None
        looked = {d.observed.sj.uid for d in decided}
        return decided, {sj.uid for sj in sjs if sj.uid not in looked} | vanished

    async def _plan(self, decided: list[Decided], admission: AdmissionPass, now: datetime,
                    pacer: Pacer) -> WritePlan:
        """`write.plan.plan_writes` over the pass's decisions, in slices."""
        admitted = {a.key for a in admission.admitted}
        busy = self.steering_lane.under_way.keys() | self.ledger.launching.keys()
        launches = Launches(self.ledger.launches_busy_since(), self.monotonic())
        return joined(await in_slices(decided, lambda part: (plan_writes(
            part, admitted=admitted, busy=busy, launches=launches, now=now),), pacer))

    async def _write(self, decided: Sequence[Decided]) -> dict[str, bool]:
        """Writes the decisions, `API_CONCURRENCY` SJs at a time (SJs are independent of each other); whether
        each went through, by SJ key."""
        results = await concurrently((self._apply_isolated(d) for d in decided), API_CONCURRENCY, self.hold_budget)
        return {d.observed.sj.key: ok for d, ok in zip(decided, results, strict=True)}

    async def _apply_isolated(self, d: Decided) -> bool:
        """`Writer.apply`, a fault of the SJ when it raises anything but the API's refusals (which it handles)."""
        try:
            return await self.writer.apply(d.observed, d.step)
        except Exception as exc:
            self.quarantine.fault(d.observed.sj, "write", exc)
            return False

    def _queue_launches(self, decided: list[Decided], admission: AdmissionPass, applied: dict[str, bool],
                        now: datetime) -> None:
        """Queues the launches of the admitted SJs whose own write (if any) went through."""
        if not admission.admitted:
            return
        by_key = {d.observed.sj.key: d for d in decided}
        self.launcher.queue(now, ((w, a.config_index) for a in admission.admitted if applied.get(a.key, True)
                                  and (w := self._candidate(by_key[a.key])) is not None))

    def _candidate(self, d: Decided) -> Candidate | None:
        """After its decision was written, a waiting SJ with the status and version a launch writes over."""
        o, result = d.observed, d.step
        assert not isinstance(o.spec, InvalidSpec)
        if result.status == o.status:
            return Candidate(o.sj, o.spec, o.status, o.raw_status, o.resource_version)
        if result.kind == "queues":  # never written as queued: the launch's outcome goes over the status as stored
            return Candidate(o.sj, o.spec, result.status, o.raw_status, o.resource_version)
        if (mine := self.ledger.written.get(o.sj.uid)) is not None:
            # Queued in this very pass: launched on top of the status just written.
            return Candidate(o.sj, o.spec, result.status, mine.status, mine.resource_version)
        return None

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

    def _admission(self, view: ClusterView, decided: list[Decided], gone: Iterable[str],
                   runs: tuple[InFlightRun, ...], now: datetime, *, full: bool) -> AdmissionPass:
        """Which waiting SJs start now, and why the others wait. The queue is kept from pass to pass
        (`memo.PassMemo.queue`): ``decided``, the SJs decided in this pass (``full``: every SJ), and ``gone``,
        those no longer decided, change it. SJs backing off after a wasted run are in the queue, which holds
        their room; SJs their namespace refused wait out their retry delay without holding room for the others
        (their reason is already written), as do SJs after a start timeout."""
        clock = self.monotonic()
        gate = self.gate
        steering = self.steering_lane.under_way
        quarantine = self.quarantine
        waiting = self.memo.candidates(decided, gone, every=full)
        held_out = {uid for uid in gate.held if uid in waiting and gate.holds(uid, clock)} if gate.held else set()
        held_out.update(uid for uid in steering if uid in waiting)
        for uid in list(quarantine.held):
            if uid in waiting and uid not in held_out and quarantine.holds(waiting[uid].observed.sj):
                held_out.add(uid)
        queue = self.memo.queue(frozenset(held_out), now, on_fault=quarantine.fault)
        if not queue:
            return _NO_ADMISSION
        started = time.perf_counter()
        config = self.policy_config
        try:
            admission = self.memo.admission(view, queue, runs, now, config)
        except Exception:
            sjs = {d.observed.sj.key: d.observed.sj for d in waiting.values()}
            queue = tuple(quarantine.isolated("admission", queue, lambda part: self.memo.admission(
                view, tuple(part), runs, now, config), lambda entry: sjs[entry.key]))
            admission = self.memo.admission(view, queue, runs, now, config)
        log.debug("admission over %d waiting SJ(s), %d node(s): %d admitted in %.1f ms", len(queue),
                  len(view.nodes), len(admission.admitted), (time.perf_counter() - started) * 1000)
        return admission

    def _admission_changes(self, decided: list[Decided], admission: AdmissionPass) -> list[Decided]:
        """The SJs not among ``decided`` that the admission now admits or did, those whose reason to wait went
        since the last pass, those whose reason came or changed unless the explainer would pass over them as
        they are (`Explainer.moved`), and those whose reason's numbers may be written again (`Explainer.due`),
        each with the decision the last pass made for it (in no order). The other SJs' reasons are as they
        were: the explainer would leave them so."""
        kept, work = self._kept, self.memo.work
        keys: set[str] = set()
        last = kept.admission
        if admission is not last:
            before = {} if last is None else last.waiting
            keys.update(a.key for a in admission.admitted)
            if last is not None:
                keys.update(a.key for a in last.admitted)
            keys.update(before.keys() - admission.waiting.keys())
        more = {uid for key in keys if (uid := work.uids.get(key)) is not None}
        if admission is not last:
            more.update(self.explainer.moved(admission.waiting, {} if last is None else last.waiting, work.uids,
                                             kept.decided))
        more.update(self.explainer.due(self.monotonic()))
        if more:
            more.difference_update(d.observed.sj.uid for d in decided)
        return [kept.decided[uid] for uid in more if uid in kept.decided]

    async def _explained_again(self, decided: list[Decided], more: list[Decided], admission: AdmissionPass,
                               now: datetime, pacer: Pacer) -> list[Decided]:
        """``decided`` with those of ``more`` (`_admission_changes`) that the explainer gives something to write
        and those admitted, in the view's order. The others have nothing to write, as at the last pass (else
        they would be among ``decided``): the rest of the pass has nothing to do for them."""
        admitted = {a.key for a in admission.admitted}
        if waiting := admission.waiting:
            explained = await in_slices(more, lambda part: self.explainer.explain(part, waiting, now), pacer)
            more = [e for e, d in zip(explained, more, strict=True) if e is not d or d.observed.sj.key in admitted]
        else:
            more = [d for d in more if d.observed.sj.key in admitted]
        if not more:
            return decided
        position = self.memo.work.position
        return sorted([*decided, *more], key=lambda d: position(d.observed.sj.uid))

    # --- faults ----------------------------------------------------------------------
    def _recovered(self, d: Decided) -> Decided:
        """An SJ handled in this pass that a fault had marked loses its ``Reconciled=False`` condition (in the
        write its decision makes anyway, or one of its own). Its step then writes more than steering's
        fields: it no longer takes the steering lane."""
        status = d.step.status
        if d.observed.sj.uid in self.quarantine.faults or not any(c.type == CONDITION for c in status.conditions):
            return d
        self.quarantine.forget_report(d.observed.sj.uid)
        kept = tuple(c for c in status.conditions if c.type != CONDITION)
        kind = None if d.step.kind == "steers" else d.step.kind
        return replace(d, step=replace(d.step, status=status.model_copy(update={"conditions": kept}), kind=kind))

    def _report_fault(self, sj: SJObject, fault: Fault, exc: BaseException) -> None:
        """A new fault of an SJ: logged with its traceback, counted, an Event, and ``Reconciled=False`` with
        the cause on the SJ (written in the background: the pass goes on)."""
        log.error("skipping %s", fault, exc_info=exc)
        self.metrics.skipped_object(fault)
        self.recorder.record(sj, (Event("Warning", fault.reason, fault.message),))
        self._faults.submit((_FaultReport(sj, fault),))

    async def _write_fault(self, report: _FaultReport) -> None:
        """One fault's condition; whatever goes wrong with it is logged and reported again later, and the
        pool's worker goes on to the next report."""
        in_background()
        try:
            written = await self.writer.write_fault(report.sj, report.fault)
        except Exception:
            log.exception("could not write the fault of %s", report.sj.key)
            written = False
        if not written:
            self.quarantine.forget_report(report.sj.uid)

    # --- the background lanes ----------------------------------------------------------
    async def launches_done(self) -> None:
        """Waits until no launch is queued or under way."""
        await self.launcher.pool.idle()

    def drop_launches(self) -> None:
        """Forgets the launches not begun yet (this process no longer decides: another replica leads)."""
        self.launcher.drop()
        self.ledger.not_leading()

    async def settle(self) -> None:
        """Waits until no launch is queued or under way and the background lanes are idle: no steering write
        under way, no Event left to record (the Events waiting for launches are recorded at once)."""
        async with self.recorder.flushing():
            await idle(lambda: (*self.launcher.pool.tasks, *self.steering_lane.tasks,
                                *self.recorder.pool.tasks, *self._faults.tasks, *self.slices.pool.tasks))
