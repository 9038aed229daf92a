"""The decision loop: one pass reads the watch cache, decides, and carries the decisions out.

A pass:
  1. takes an immutable view of the cache (SJs, their runs' Jobs and pods, nodes, all pods);
  2. runs the pure state machine (`lifecycle.step`) for every SJ;
  3. builds a `ClusterSnapshot` and asks the pure admission policy (`policy.admission.decide`)
     which waiting SJs start now;
  4. carries out the status writes, deletions, launches and Events through `kube.Kube`.

Status writes carry the resourceVersion the decision was based on, so a decision
made on a stale cache fails with Conflict instead of applying twice; the loop then
simply runs again on fresher data. Child names are deterministic, so a launch
repeated after a crash finds its Job and adopts it. Restarting the operator at any
moment therefore converges without duplicates.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

from gang import mpi
from sj_operator.api.model import (
    API_VERSION,
    KIND,
    InvalidSpec,
    Phase,
    ScavengerJobSpec,
    ScavengerJobStatus,
    parse_spec,
    parse_status,
)
from sj_operator.builders import build_gang_service, build_run_job, run_job_name, sj_label_value
from sj_operator.config import OperatorConfig
from sj_operator.kube import Conflict, Invalid, Kube, KubeError, NotFound
from sj_operator.lifecycle import WAITING, DeleteRun, LifecycleConfig, Run, SetProtection, Step, set_conditions, step
from sj_operator.observed import LABEL_PROTECTED, LABEL_SJ, JobView, NodeInfo, PodView, SJObject, resources_milli
from sj_operator.policy.admission import PolicyConfig, decide
from sj_operator.policy.priority import (
    RunProgress,
    current_period_start,
    is_protected,
    launch_class,
    running_level,
    steering_exemptions,
)
from sj_operator.policy.snapshot import ClusterSnapshot, InFlightRun, NodeView, QueuedSJ, Taint, Toleration

log = logging.getLogger("sj_operator.controller")
Clock = Callable[[], datetime]
T = TypeVar("T")
API_CONCURRENCY = 8  # the blocking client runs in worker threads; more would only queue there


def utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)


@dataclass(frozen=True)
class ClusterView:
    """What the watches show at one moment (the handlers keep it current)."""
    sjs: tuple[SJObject, ...]
    jobs: Mapping[tuple[str, str], JobView]
    run_pods: Mapping[tuple[str, str], tuple[PodView, ...]]
    active_pods: tuple[PodView, ...]
    """Every non-terminated pod in the cluster, scheduled or not."""
    nodes: tuple[NodeInfo, ...]


@dataclass
class _Written:
    """A status this process wrote, used until the watch shows it (read-your-writes)."""
    resource_version: str
    status: dict[str, Any]
    at: float


@dataclass(frozen=True)
class _Waiting:
    sj: SJObject
    spec: ScavengerJobSpec
    status: ScavengerJobStatus
    raw: Mapping[str, Any]
    rv: str


@dataclass
class _Launched:
    run: InFlightRun
    """As launched: no pod scheduled yet."""
    at: float


@dataclass
class Controller:
    kube: Kube
    config: OperatorConfig
    clock: Clock = utcnow
    written: dict[str, _Written] = field(default_factory=dict)
    launched: dict[tuple[str, str], _Launched] = field(default_factory=dict)
    _specs: dict[tuple[str, int], ScavengerJobSpec | InvalidSpec] = field(default_factory=dict)

    @property
    def lifecycle_config(self) -> LifecycleConfig:
        c = self.config
        return LifecycleConfig(start_timeout=c.start_timeout, retry_backoff=c.retry_backoff,
                               max_retry_backoff=c.max_retry_backoff, protect_level=c.protect_level)

    @property
    def policy_config(self) -> PolicyConfig:
        return PolicyConfig(threshold=self.config.threshold, starvation_after=self.config.starvation_after)

    def handles(self, namespace: str) -> bool:
        return not self.config.namespaces or namespace in self.config.namespaces

    # --- reading -------------------------------------------------------------------
    def spec_of(self, sj: SJObject) -> ScavengerJobSpec | InvalidSpec:
        key = (sj.uid, sj.generation)
        parsed = self._specs.get(key)
        if parsed is None:
            try:
                parsed = parse_spec(sj.spec)
            except InvalidSpec as exc:
                parsed = exc
            if len(self._specs) > 50_000:
                self._specs.clear()
            self._specs[key] = parsed
        return parsed

    def fresh(self, sj: SJObject) -> tuple[str, dict[str, Any]]:
        """The SJ's resourceVersion and raw status, preferring what this process just wrote."""
        mine = self.written.get(sj.uid)
        if mine is not None:
            if sj.resource_version == mine.resource_version or time.monotonic() - mine.at > 30:
                del self.written[sj.uid]
            else:
                return mine.resource_version, mine.status
        return sj.resource_version, dict(sj.status)

    # --- one pass --------------------------------------------------------------------
    async def reconcile(self, view: ClusterView) -> None:
        now = self.clock()
        cfg = self.lifecycle_config
        waiting: list[_Waiting] = []
        in_flight: dict[tuple[str, str], InFlightRun] = {}
        known_runs: set[tuple[str, str]] = set()

        observed: list[tuple[SJObject, str, dict[str, Any], ScavengerJobStatus,
                             ScavengerJobSpec | InvalidSpec, Run]] = []
        for sj in view.sjs:
            if sj.deleting or not self.handles(sj.namespace):
                continue
            rv, raw_status = self.fresh(sj)
            status = parse_status(raw_status)
            spec = self.spec_of(sj)
            current = status.job_name
            if status.phase is None or status.phase in WAITING:
                current = run_job_name(sj.name, status.attempt + 1)
            if current:
                known_runs.add((sj.namespace, current))
            if status.job_name:
                known_runs.add((sj.namespace, status.job_name))
            run = Run(job=view.jobs.get((sj.namespace, current or "")),
                      pods=view.run_pods.get((sj.namespace, current or ""), ()))
            observed.append((sj, rv, raw_status, status, spec, run))
        exempt = steering_exemptions(_progress(sj, status, spec, run, now, cfg.protect_level)
                                     for sj, _, _, status, spec, run in observed
                                     if status.phase == Phase.RUNNING and not isinstance(spec, InvalidSpec))

        decided = []
        for sj, rv, raw_status, status, spec, run in observed:
            try:
                result = step(spec, status, run, now, cfg, sj_name=sj.name, exempt=sj.key in exempt)
            except Exception:  # a bug in one SJ's decision must not stop the others
                log.exception("reconciling %s failed", sj.key)
                continue
            decided.append((sj, rv, raw_status, status, spec, run, result))
        # SJs are independent of each other: their writes go out concurrently.
        applied = await self._concurrently(self._apply(sj, rv, raw, status, result, run)
                                           for sj, rv, raw, status, _, run, result in decided)
        for (sj, rv, raw_status, status, spec, run, result), ok in zip(decided, applied):
            if not ok or isinstance(spec, InvalidSpec):
                continue
            phase = result.status.phase
            if phase == Phase.STARTING and result.status.job_name:
                expected = spec.parallelism
                seen = sum(1 for p in run.pods if p.node)
                if seen < expected:
                    in_flight[(sj.namespace, result.status.job_name)] = _in_flight(sj, spec, seen)
            if not result.waiting:
                continue
            if result.status == status:
                waiting.append(_Waiting(sj, spec, status, raw_status, rv))
            elif (mine := self.written.get(sj.uid)) is not None:
                # Queued in this very pass: admissible now, on top of the status just written.
                waiting.append(_Waiting(sj, spec, result.status, mine.status, mine.resource_version))

        await self._delete_strays(view, known_runs)

        # Runs this process launched that the cache does not show as Starting yet.
        for key, entry in list(self.launched.items()):
            if time.monotonic() - entry.at > 60:
                del self.launched[key]
                continue
            if key not in in_flight:
                seen = sum(1 for p in view.run_pods.get(key, ()) if p.node)
                if seen < entry.run.pods:
                    in_flight[key] = replace(entry.run, scheduled_pods=seen)
        if waiting:
            await self._admit(view, waiting, tuple(in_flight.values()), now)

    async def _apply(self, sj: SJObject, rv: str, raw: Mapping[str, Any], before: ScavengerJobStatus, result: Step,
                     run: Run) -> bool:
        """Writes the new status (if any), then records Events and runs actions. False on conflict."""
        if result.status != before:
            if not await self._write_status(sj, rv, raw, result.status):
                return False
        for ev in result.events:
            log.info("%s: %s: %s", sj.key, ev.reason, ev.message)
            await self._event(sj, ev.type, ev.reason, ev.message)
        for action in result.actions:
            if isinstance(action, DeleteRun):
                await self.delete_run(sj.namespace, action.job_name, action.reason)
            elif isinstance(action, SetProtection):
                await self._set_protection(sj, action, run)
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
                                        time.monotonic())
        return True

    async def _event(self, sj: SJObject, type_: str, reason: str, message: str) -> None:
        await self.kube.event(namespace=sj.namespace, name=sj.name, uid=sj.uid, kind=KIND, api_version=API_VERSION,
                              type_=type_, reason=reason, message=message)

    async def _concurrently(self, coros: Iterable[Awaitable[T]]) -> list[T]:
        """Runs API-bound steps concurrently, at most `API_CONCURRENCY` at a time, in order."""
        gate = asyncio.Semaphore(API_CONCURRENCY)

        async def gated(coro: Awaitable[T]) -> T:
            async with gate:
                return await coro

        return list(await asyncio.gather(*(gated(c) for c in coros)))

    # --- runs ------------------------------------------------------------------------
    async def delete_run(self, namespace: str, job_name: str, reason: str) -> None:
        log.info("deleting run %s/%s: %s", namespace, job_name, reason)
        self.launched.pop((namespace, job_name), None)
        await self.kube.delete_job(namespace, job_name)
        await self.kube.delete_service(namespace, job_name)

    async def _delete_strays(self, view: ClusterView, known: set[tuple[str, str]]) -> None:
        """Runs no SJ status points at (e.g. left by a launch whose SJ then changed) are removed."""
        for key, job in view.jobs.items():
            if key in known or job.deleting or not self.handles(job.namespace):
                continue
            if key in self.launched:
                continue
            await self.delete_run(job.namespace, job.name, "no ScavengerJob refers to this run")

    async def _set_protection(self, sj: SJObject, action: SetProtection, run: Run) -> None:
        """Toggles the label the SJ's PodDisruptionBudget selects on every pod of the run."""
        if action.protected:
            await self.kube.apply_pdb(protection_budget(sj.namespace, sj.name, sj.uid))
        value = "true" if action.protected else "false"
        for pod in run.pods:
            if not pod.terminal and pod.protected != action.protected:
                await self.kube.label_pod(sj.namespace, pod.name, {LABEL_PROTECTED: value})

    # --- admission ---------------------------------------------------------------------
    async def _admit(self, view: ClusterView, waiting: list[_Waiting], in_flight: tuple[InFlightRun, ...],
                     now: datetime) -> None:
        by_key = {w.sj.key: w for w in waiting}
        queue = tuple(_queued(w.sj, w.spec, w.status) for w in waiting)
        snapshot = ClusterSnapshot(nodes=_node_views(view), cluster_requested=_sum(p.requests for p in view.active_pods),
                                   in_flight=in_flight, queue=queue)
        started = time.perf_counter()
        admissions = decide(snapshot, now, self.policy_config)
        log.debug("admission pass over %d waiting SJ(s), %d node(s): %d admitted in %.1f ms", len(queue),
                  len(snapshot.nodes), len(admissions), (time.perf_counter() - started) * 1000)
        await self._concurrently(self.launch(by_key[a.key], now) for a in admissions)

    async def launch(self, w: _Waiting, now: datetime) -> None:
        """Creates the next run of an admitted SJ (idempotent), then records it in the status."""
        sj, spec, status = w.sj, w.spec, w.status
        attempt = status.attempt + 1
        job_name = run_job_name(sj.name, attempt)
        missing = await self._missing_references(sj.namespace, spec)
        if missing:
            await self._record(w, now, Phase.FAILED, "MissingReference", f"{missing} not found; no run was created",
                               finished_timestamp=now)
            return
        priority_class = launch_class(status.interrupted_count)
        try:
            job = build_run_job(sj_name=sj.name, namespace=sj.namespace, sj_uid=sj.uid, spec=spec,
                                status_interrupted_count=status.interrupted_count, attempt=attempt,
                                priority_class_name=priority_class, extra_pod_labels={LABEL_PROTECTED: "false"},
                                mpi=mpi.mpi_job_options(sj_name=sj.name, mpi=spec.mpi) if spec.mpi else None)
        except InvalidSpec as exc:
            await self._record(w, now, Phase.FAILED, "InvalidSpec", f"invalid spec: {exc}", finished_timestamp=now)
            return
        try:
            if spec.mpi is not None:
                await self._ensure_mpi_objects(sj, spec, job_name)
            if spec.is_gang:
                await self.kube.create_or_keep(lambda: self.kube.create_service(
                    build_gang_service(job_name=job_name, namespace=sj.namespace, sj_name=sj.name, sj_uid=sj.uid)))
            await self.kube.apply_pdb(protection_budget(sj.namespace, sj.name, sj.uid))
            await self.kube.create_or_keep(lambda: self.kube.create_job(job))
        except Invalid as exc:
            await self._record(w, now, Phase.FAILED, "InvalidRun",
                               f"the API server rejected run {job_name}: {exc.message}", finished_timestamp=now)
            return
        except KubeError as exc:
            log.warning("could not launch %s: %s (retried on a later pass)", sj.key, exc)
            return
        self.launched[(sj.namespace, job_name)] = _Launched(_in_flight(sj, spec, 0), time.monotonic())
        await self._record(w, now, Phase.STARTING, "Launched",
                           f"run {job_name} launched ({spec.parallelism} pod(s), priority class {priority_class})",
                           event_type="Normal", attempt=attempt, job_name=job_name, launched_timestamp=now,
                           priority_class_name=priority_class, not_before=None)

    async def _record(self, w: _Waiting, now: datetime, phase: Phase, reason: str, message: str, *,
                      event_type: str = "Warning", **changes: Any) -> None:
        """Writes a transition decided at launch time (status, conditions), then its Event."""
        status = w.status.model_copy(update={
            "phase": phase, "message": message,
            "conditions": set_conditions(w.status.conditions, phase, reason, message, now), **changes})
        if await self._write_status(w.sj, w.rv, w.raw, status):
            log.info("%s: %s: %s", w.sj.key, reason, message)
            await self._event(w.sj, event_type, reason, message)

    async def _ensure_mpi_objects(self, sj: SJObject, spec: ScavengerJobSpec, job_name: str) -> None:
        """The SJ's ssh Secret (generated once, reused by every run) and the hostfile of this run."""
        assert spec.mpi is not None
        name = mpi.mpi_secret_name(sj.name)
        if not await self.kube.exists("secret", sj.namespace, name):
            private_key, public_key = mpi.generate_ssh_keypair()
            await self.kube.create_secret_unless_exists(mpi.build_mpi_secret(
                sj_name=sj.name, namespace=sj.namespace, sj_uid=sj.uid, private_key=private_key,
                public_key=public_key))
        await self.kube.apply_config_map(mpi.build_hostfile_configmap(
            sj_name=sj.name, namespace=sj.namespace, sj_uid=sj.uid, job_name=job_name,
            parallelism=spec.parallelism, slots_per_worker=spec.mpi.slots_per_worker,
            implementation=spec.mpi.implementation))

    async def _missing_references(self, namespace: str, spec: ScavengerJobSpec) -> str | None:
        for i, volume in enumerate(spec.volumes):
            for kind, name in (("persistentVolumeClaim", volume.persistent_volume_claim and
                                volume.persistent_volume_claim.claim_name),
                               ("configMap", volume.config_map and volume.config_map.name),
                               ("secret", volume.secret and volume.secret.secret_name)):
                if name and not await self.kube.exists(kind, namespace, name):
                    return f'{kind} "{name}" (spec.volumes[{i}] "{volume.name}")'
        return None


def protection_budget(namespace: str, sj_name: str, sj_uid: str) -> dict[str, Any]:
    """The PodDisruptionBudget that protects an SJ's run while its pods carry protected=true."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": f"{sj_name}-protect",
            "namespace": namespace,
            "labels": {LABEL_SJ: sj_label_value(sj_name), "app.kubernetes.io/managed-by": "scavenger"},
            "ownerReferences": [{"apiVersion": API_VERSION, "kind": KIND, "name": sj_name, "uid": sj_uid,
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {
            "maxUnavailable": 0,
            "selector": {"matchLabels": {LABEL_SJ: sj_label_value(sj_name), LABEL_PROTECTED: "true"}},
        },
    }


def _progress(sj: SJObject, status: ScavengerJobStatus, spec: ScavengerJobSpec, run: Run, now: datetime,
              protect_level: int) -> RunProgress:
    start = status.priority_start_over_timestamp or now
    level = running_level(now, start, spec.duration, spec.priority_levels)
    return RunProgress(key=sj.key, nodes=frozenset(p.node for p in run.pods if p.node and not p.terminal),
                       unsaved=now - current_period_start(now, start, spec.duration),
                       protected_by_level=is_protected(level, protect_level))


def _milli(spec: ScavengerJobSpec) -> dict[str, int]:
    req = resources_milli(spec.effective_resources.requests)
    req["pods"] = 1000
    return req


def _tolerations(spec: ScavengerJobSpec) -> tuple[Toleration, ...]:
    return tuple(Toleration(key=t.key or "", operator=t.operator or "Equal", value=t.value or "",
                            effect=t.effect or "") for t in spec.tolerations)


def _queued(sj: SJObject, spec: ScavengerJobSpec, status: ScavengerJobStatus) -> QueuedSJ:
    return QueuedSJ(key=sj.key, created=sj.created or datetime.now(timezone.utc),
                    interrupted_count=status.interrupted_count, pods=spec.parallelism, request=_milli(spec),
                    node_selector=dict(spec.node_selector), tolerations=_tolerations(spec),
                    not_before=status.not_before)


def _in_flight(sj: SJObject, spec: ScavengerJobSpec, seen: int) -> InFlightRun:
    return InFlightRun(key=sj.key, pods=spec.parallelism, request=_milli(spec),
                       scheduled_pods=seen, node_selector=dict(spec.node_selector), tolerations=_tolerations(spec))


def _sum(items: Iterable[Mapping[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for res in items:
        for name, value in res.items():
            out[name] = out.get(name, 0) + value
    return out


def _node_views(view: ClusterView) -> tuple[NodeView, ...]:
    per_node: dict[str, list[Mapping[str, int]]] = {}
    for pod in view.active_pods:
        if pod.node:
            per_node.setdefault(pod.node, []).append(pod.requests)
    return tuple(
        NodeView(name=n.name, allocatable=n.allocatable, requested=_sum(per_node.get(n.name, ())),
                 labels=n.labels, taints=tuple(Taint(k, v, e) for k, v, e in n.taints),
                 unschedulable=n.unschedulable or not n.ready)
        for n in view.nodes
    )
