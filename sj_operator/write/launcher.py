"""The launcher: makes the runs of the SJs the admission admitted, in the background of the passes.

A pass queues its admitted SJs' launches and goes on; `LAUNCH_WORKERS` workers make their runs meanwhile,
so SJs created during a burst of launches are decided while the Jobs of the ones before them are still being
made. A worker takes the next launch only while the control plane keeps up with the runs already made
(`Ledger.backlog` under ``--launch-backlog``, 400 by default: Jobs the Job controller has not taken up, pods the
scheduler has not looked at); otherwise it waits, `LAUNCH_WAIT_MOST` seconds at most. A launch whose SJ was
deleted or its spec edited since its admission is dropped by the next pass or when a worker takes it, and the
SJ decided again.
The launches queued are taken in turn by namespace (`RoundRobin`), so one tenant's burst does not hold
another's launch behind it for the minutes it takes. In a burst of thousands the launches go at the pace the
Job controller and the scheduler take them up: what the operator would queue beyond it, they would hold in
their own queues, and every pod event of theirs is watched by the nodes' agents, which fall behind.

A launch asks the namespace gate first, then makes the run's objects, its Job last. Child names are
deterministic, so a launch repeated after a crash finds its Job and adopts it; only what the SJ controls is
found so: an object of a child's name that someone else made holds the SJ back (``NameTaken``), as a refusal
of the API server does. The state machine says what to record: the ``Launched`` Event (the run itself is
written into the status by a later pass, `lifecycle.launched`), or why no run was made.
"""
from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from gang.ssh import generate_gang_keys
from sj_operator.api import ScavengerJobSpec, ScavengerJobStatus
from sj_operator.builders.job import build_run_job
from sj_operator.builders.mpi import build_hostfile_configmap, build_mpi_secret, mpi_job_options
from sj_operator.builders.service import build_gang_service
from sj_operator.config import OperatorConfig
from sj_operator.decide import Observed, in_flight
from sj_operator.kube import Forbidden, Invalid, Kube, KubeError, NameTaken, check_owner
from sj_operator.metrics import Metrics
from sj_operator.names import ANNOTATION_LAUNCH, LABEL_PROTECTED, mpi_secret_name, run_job_name
from sj_operator.observed import SJObject, job_view
from sj_operator.policy.lifecycle import Run, Step, launch_refused, launched, refusal_reason
from sj_operator.policy.priority import launch_class
from sj_operator.write.gate import Gate, Refusal
from sj_operator.write.ledger import Launching, Ledger
from sj_operator.write.pool import Pool, RoundRobin

__all__ = ["LAUNCH_RECHECK", "LAUNCH_WAIT_MOST", "LAUNCH_WORKERS", "PACED_LOG_EVERY", "Candidate", "Launcher"]

log = logging.getLogger(__name__)
T = TypeVar("T")

LAUNCH_WORKERS = 24
"""Launches under way at once."""
LAUNCH_RECHECK = 0.25
"""Seconds between two looks at the control plane's backlog by a launch waiting for it."""
LAUNCH_WAIT_MOST = 60.0
"""Seconds a launch waits for the control plane at most: runs that stay behind (a scheduler that is down) slow
the launches to a trickle, never stop them."""
PACED_LOG_EVERY = 60.0
"""Seconds between two log lines saying that launches wait for the control plane."""

_NO_RUN = Run(job=None)


@dataclass(frozen=True)
class Candidate:
    """An SJ the policy may admit, with the status and version a launch writes over."""
    sj: SJObject
    spec: ScavengerJobSpec
    status: ScavengerJobStatus
    raw: Mapping[str, Any]
    rv: str


@dataclass(frozen=True)
class _Order:
    """An admitted SJ waiting for a launch worker, with the configuration chosen and when the pass admitted
    it."""
    candidate: Candidate
    config_index: int
    admitted_at: datetime


class _Refused(Exception):
    """The API server refused to create one of a run's objects (Forbidden or Invalid: a ResourceQuota on the
    kind, an admission policy on it that the pod's dry run could not see); the message names the object and
    gives the server's."""


class Launcher:
    def __init__(self, kube: Kube, config: OperatorConfig, *, ledger: Ledger, gate: Gate, metrics: Metrics,
                 clock: Callable[[], datetime], apply: Callable[[Observed, Step], Awaitable[bool]],
                 on_fault: Callable[[SJObject, Exception], None], wake: Callable[[], None],
                 current: Callable[[], Callable[[str, str], SJObject | None] | None] = lambda: None) -> None:
        """``current``: what looks up an SJ (by namespace and name) as the watch cache holds it now, which a queued
        launch is checked against when a worker takes it (`_changed`); None: not checked."""
        self.kube, self.config, self.ledger, self.gate, self.metrics = kube, config, ledger, gate, metrics
        self.clock, self._apply, self._on_fault, self._current, self._wake = clock, apply, on_fault, current, wake
        self.backlog_at, self.recheck, self.wait_most = config.launch_backlog, LAUNCH_RECHECK, LAUNCH_WAIT_MOST
        self._paced_logged: float | None = None
        self._queued: dict[str, _Order] = {}
        """By SJ uid: the launches queued that no worker has taken yet."""
        self.pool: Pool[_Order] = Pool("launches", LAUNCH_WORKERS, self._launch_queued, ready=self._paced,
                                        drained=wake, describe=lambda order: order.candidate.sj.key,
                                        queue=RoundRobin(lambda order: order.candidate.sj.namespace))

    def queue(self, now: datetime, admitted: Iterable[tuple[Candidate, int]]) -> None:
        """Queues the admitted SJs' launches (each with the configuration the admission chose); their room stays
        spoken for, and no pass decides them, until each launch is done."""
        orders = []
        for w, index in admitted:
            spec = w.spec.config(index)
            job_name = run_job_name(w.sj.name, w.status.attempt + 1)
            self.ledger.begin_launch(w.sj.uid, Launching(w.sj.key, (w.sj.namespace, job_name),
                                                         in_flight(w.sj, spec, 0)))
            orders.append(_Order(w, index, now))
        self._queued.update((order.candidate.sj.uid, order) for order in orders)
        self.pool.submit(orders)

    def drop(self) -> None:
        """Forgets the launches not begun yet."""
        self._queued.clear()
        for order in self.pool.drop():
            self.ledger.end_launch(order.candidate.sj.uid)

    def drop_changed(self, uids: Iterable[str]) -> None:
        """Drops the queued launches, among those of ``uids`` (SJs that changed or went), whose SJ changed since its
        admission (`_changed`) at once, rather than when a worker takes them (paced, minutes later): their room
        is free for the next pass, which decides them again."""
        queued = self._queued
        if not queued:
            return
        stale = {uid for uid in uids if (order := queued.get(uid)) is not None and self._changed(order.candidate.sj)}
        if not stale:
            return
        for order in self.pool.drop(lambda order: order.candidate.sj.uid in stale):
            del self._queued[order.candidate.sj.uid]
            self.ledger.end_launch(order.candidate.sj.uid)
        self.metrics.launches_dropped.inc(len(stale))

    async def _paced(self) -> bool:
        """Waits while the control plane is ``backlog_at`` (``--launch-backlog``; 0: never) runs behind, looked at
        every ``recheck`` seconds, ``wait_most`` seconds at most (the time waited is counted in
        ``scavenger_launch_paced_seconds_total``); always True (the worker goes on)."""
        monotonic = self.ledger.monotonic
        began = None
        while self.backlog_at and (backlog := self.ledger.backlog()) >= self.backlog_at and self.pool.queue:
            now = monotonic()
            if began is None:
                began = now
            if now - began >= self.wait_most:
                break
            if self._paced_logged is None or now - self._paced_logged >= PACED_LOG_EVERY:
                self._paced_logged = now
                log.info("launches wait for the control plane: %d runs made are not taken up by the Job controller "
                         "or looked at by the scheduler yet (launches go on below %d); %d launches queued",
                         backlog, self.backlog_at, len(self.pool.queue))
            await asyncio.sleep(self.recheck)
        if began is not None:
            self.metrics.launch_paced.inc(monotonic() - began)
        return True

    async def _launch_queued(self, order: _Order) -> None:
        w = order.candidate
        self._queued.pop(w.sj.uid, None)
        try:
            if self._changed(w.sj):
                self.metrics.launches_dropped.inc()
                self._wake()  # the next pass decides it again (`Ledger.take_ended`)
                return
            await self.launch(w, order.admitted_at, order.config_index)
        except Exception as exc:
            self._on_fault(w.sj, exc)
        finally:
            self.ledger.end_launch(w.sj.uid)

    def _changed(self, sj: SJObject) -> bool:
        """Whether the SJ changed since the pass that admitted it, as the watch cache holds it now: gone (or made
        again under its name), being deleted, or its spec edited (suspended, resized, another priority). Paced in a
        burst, a launch may be taken minutes after its admission: no run is made of what its owner took back."""
        lookup = self._current()
        if lookup is None:
            return False
        now = lookup(sj.namespace, sj.name)
        if now is not None and now.uid == sj.uid and not now.deleting and now.generation == sj.generation:
            return False
        what = ("gone" if now is None or now.uid != sj.uid else "being deleted" if now.deleting
                else f"its spec edited (generation {sj.generation} -> {now.generation})")
        log.info("launch of %s dropped: the SJ is %s since it was admitted; the next pass decides it again", sj.key,
                 what)
        return True

    async def launch(self, w: Candidate, now: datetime, config_index: int = 0) -> None:
        """Creates the next run of an admitted SJ (idempotent) in the configuration the admission chose,
        then records what the state machine says."""
        result = await self._create_run(w, now, config_index)
        if result is not None:
            observed = Observed(w.sj, w.rv, w.raw, w.status, w.spec, run=_NO_RUN)
            await self._apply(observed, result)

    async def _create_run(self, w: Candidate, now: datetime, config_index: int) -> Step | None:
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
        meta = job["metadata"]
        meta["annotations"] = {**meta.get("annotations", {}), ANNOTATION_LAUNCH: uuid.uuid4().hex}
        try:
            refusal = await self.gate.refusal(sj, spec, job)
            made_now = (self.gate.hold(sj, status, now, refusal) if refusal is not None
                        else await self._make(w, now, spec, job, job_name))
        except Invalid as exc:  # the run's pod itself is invalid (a dry run): it never will be otherwise
            return launch_refused(status, now, "InvalidRun", f"the API server rejected run {job_name}: {exc.message}")
        except KubeError as exc:
            log.warning("could not launch %s: %s (retried on a later pass)", sj.key, exc)
            return None
        if isinstance(made_now, Step):
            return made_now
        self.gate.release(sj.uid)
        # The start timeout counts from the Job's creation, not from the pass's start (which may be long
        # before it when API calls were retried).
        made_at = self.clock()
        made = job_view({**job, "metadata": {**job["metadata"], "creationTimestamp": made_at.isoformat()}})
        self.ledger.made((sj.namespace, job_name), in_flight(sj, spec, 0), made)
        if not made_now:
            # Another decider (or an earlier launch of this one) made it: its Event and count are that launch's,
            # and the run is recorded as any other.
            log.info("run %s of %s already exists: kept", job_name, sj.key)
            return Step(status)
        self.metrics.launched.inc()
        since = status.interrupted_timestamps[-1] if status.interrupted_timestamps else sj.created
        if since is not None:
            self.metrics.admission_wait.observe(max((made_at - since).total_seconds(), 0.0))
        return launched(status, made_at, job_name=job_name, priority_class_name=priority_class,
                        pods=spec.parallelism, config_index=config_index)

    async def _make(self, w: Candidate, now: datetime, spec: ScavengerJobSpec, job: Mapping[str, Any],
                    job_name: str) -> bool | Step:
        """Makes the run's objects, its Job last: whether the Job was made now, by this launch (False: another
        launch of this SJ made it; an attempt of this one that was stored though its answer was lost is this
        launch's, by the Job's `ANNOTATION_LAUNCH`).
        When the API server refuses one of them, or one of their names is held by an object the SJ does not
        control, the SJ is held back instead (`Gate.hold`), saying what refused or whose name it is."""
        try:
            await self._create_children(w.sj, spec, job_name)
            stored = await self._create(job, w.sj)
        except NameTaken as exc:
            return self.gate.hold(w.sj, w.status, now, Refusal(
                "NameTaken", f"{exc.message}: it is neither used nor deleted; the SJ waits until that name is free"))
        except _Refused as exc:
            return self.gate.hold(w.sj, w.status, now, Refusal(refusal_reason(str(exc)), str(exc)))
        if stored is None:
            return True
        annotations = stored.get("metadata", {}).get("annotations")
        mine = job["metadata"]["annotations"][ANNOTATION_LAUNCH]
        return isinstance(annotations, dict) and annotations.get(ANNOTATION_LAUNCH) == mine

    async def _create(self, body: Mapping[str, Any], sj: SJObject) -> dict[str, Any] | None:
        """Creates one of the SJ's objects (`Kube.create_child`): None when made, the stored object when the SJ
        made it before. Raises `NameTaken` when someone else's object has its name, and `_Refused` when the API
        server refuses it (Forbidden or Invalid: a ResourceQuota, a policy the dry run could not see)."""
        return await self._refused_as(body, self.kube.create_child(body, sj.uid))

    @staticmethod
    async def _refused_as(body: Mapping[str, Any], write: Awaitable[T], verb: str = "create") -> T:
        """``write`` (to ``verb``) of one of the SJ's objects, ``body``: `_Refused` when the API server refuses it."""
        try:
            return await write
        except (Forbidden, Invalid) as exc:
            meta = body["metadata"]
            raise _Refused(f"the API server refused to {verb} {body['kind']} {meta['namespace']}/{meta['name']} "
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
        # The SJ's own, from an earlier run, gets this run's hosts written over it.
        await self._refused_as(hostfile, self.kube.apply_child(hostfile, sj.uid, {"data": hostfile["data"]}),
                               "write")

    async def _missing_references(self, namespace: str, spec: ScavengerJobSpec) -> str | None:
        for i, volume in enumerate(spec.volumes):
            for kind, name in (("persistentVolumeClaim", volume.persistent_volume_claim and
                                volume.persistent_volume_claim.claim_name),
                               ("configMap", volume.config_map and volume.config_map.name),
                               ("secret", volume.secret and volume.secret.secret_name)):
                if name and not await self.kube.exists(kind, namespace, name):
                    return f'{kind} "{name}" (spec.volumes[{i}] "{volume.name}")'
        return None
