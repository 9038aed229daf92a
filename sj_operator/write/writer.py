"""The status and action writer: carries one SJ's step out against the API server.

A step's new status is merge-patched with the resourceVersion the decision was based on, so a decision made
on a stale cache fails with Conflict instead of applying twice (the loop then decides again on fresher
data); then its Events are queued for the recorder and its actions run: a run deleted, a run's protection
toggled (its PodDisruptionBudget applied first when it may be missing; the label on each pod that does not carry
it yet, kept by the ledger until the watch shows it). Children are only ever touched when the SJ controls them
(its controller ownerReference), and deleted only as the very object found.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, NamedTuple

from sj_operator.api import InvalidSpec, Phase, ScavengerJobSpec, ScavengerJobStatus
from sj_operator.builders.budget import protection_budget
from sj_operator.decide import ClusterView, Observed, OwnedRun, Strays
from sj_operator.faults import CONDITION, Fault
from sj_operator.kube import Conflict, Forbidden, Invalid, Kube, KubeError, NameTaken, NotFound
from sj_operator.metrics import Metrics
from sj_operator.names import LABEL_PROTECTED
from sj_operator.observed import JobView, SJObject
from sj_operator.policy.lifecycle import DeleteRun, Event, SetProtection, Step, lost_work
from sj_operator.write.endpoints import Slices
from sj_operator.write.events import Recorder
from sj_operator.write.ledger import Ledger

__all__ = ["BUDGET_REFRESH", "Writer"]

log = logging.getLogger(__name__)

PROTECTION_RETRY = 60.0
"""Seconds an SJ whose toggle the API server forbade or rejected (a quota on budgets, a policy on pod labels) is
left unprotected before the toggle is tried again: a refused toggle is not retried at every pass."""
BUDGET_REFRESH = 600.0
"""Seconds after this process applied an SJ's PodDisruptionBudget in which protecting a run again does not apply
it again (only the pods' label is toggled): the budget's content is fixed per SJ, and an apply costs two
calls once it exists (create, then patch). Past it, the budget is applied again, in case it was deleted. An SJ
whose budget's name was someone else's is left unprotected for as long (`Writer.unprotectable`), then tried
again."""


class Budget(NamedTuple):
    """When this process last applied an SJ's PodDisruptionBudget (monotonic seconds), and for how many pods."""
    at: float
    pods: int


def _run_size(o: Observed) -> int:
    """The pods of the SJ's current run: its gang (a running SJ's observed spec is already the configuration
    the run was launched in, `decide.observe_one`), never fewer than the pods seen."""
    return max(len(o.run.pods), o.spec.parallelism if isinstance(o.spec, ScavengerJobSpec) else 1)


class Writer:
    def __init__(self, kube: Kube, ledger: Ledger, recorder: Recorder, metrics: Metrics,
                 clock: Callable[[], datetime], handles: Callable[[str], bool], slices: Slices) -> None:
        self.kube, self.ledger, self.recorder, self.metrics, self.slices = kube, ledger, recorder, metrics, slices
        self.clock, self.handles = clock, handles
        self.budgets: dict[str, Budget] = {}
        """By SJ uid."""
        self.refused: dict[str, tuple[str, float]] = {}
        """By SJ uid: the SJs whose budget's name is someone else's object, by key, and until when (monotonic) they
        are left unprotected."""
        self._strays = Strays()
        """The strays, kept from pass to pass (`decide.Strays`)."""

    async def apply(self, o: Observed, result: Step) -> bool:
        """Writes the new status (if any), then records Events and runs actions. False on conflict."""
        if result.status != o.status:
            if not await self._write_status(o.sj, o.resource_version, o.raw_status, result.status):
                return False
            self._count(o, result.status)
        toggles = any(isinstance(action, SetProtection) for action in result.actions)
        if not toggles:
            self.recorder.record(o.sj, result.events)
        toggled = True
        for action in result.actions:
            if isinstance(action, DeleteRun):
                await self.delete_run(o.sj.namespace, action.job_name, action.reason, sj_uid=o.sj.uid,
                                      job=o.run.job)
            elif isinstance(action, SetProtection):
                toggled = await self._set_protection(o, action) and toggled
        if toggles and toggled:
            self.recorder.record(o.sj, result.events)  # a toggle's Event says what its pods now carry
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
            self.ledger.stale(sj.uid)
            return False
        except NotFound:
            return False
        except KubeError as exc:
            log.error("could not write the status of %s: %s", sj.key, exc)
            return False
        self.ledger.wrote(sj.uid, body)
        return True

    def _count(self, o: Observed, after: ScavengerJobStatus) -> None:
        """Counters for what a written status records: an interruption, a start timeout, a finish (launches are
        counted as they are made)."""
        before, m = o.status, self.metrics
        if after.start_timeouts > before.start_timeouts:
            m.start_timeouts.inc()
        if after.interrupted_count > before.interrupted_count:
            m.interruptions.labels(after.last_interruption_reason or "Deleted").inc()
            if not isinstance(o.spec, InvalidSpec) and after.interrupted_timestamps:
                lost = lost_work(after.running_timestamps, after.interrupted_timestamps, o.spec.duration)[-1]
                m.lost_work.inc(lost.total_seconds())
        if after.phase in (Phase.SUCCEEDED, Phase.FAILED) and before.phase != after.phase:
            m.finished.labels(after.phase.value).inc()

    async def write_fault(self, sj: SJObject, fault: Fault) -> bool:
        """Writes ``Reconciled=False`` with the fault's cause on the SJ; False when it could not."""
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
            return False
        return True

    # --- runs ------------------------------------------------------------------------
    async def delete_run(self, namespace: str, job_name: str, reason: str, *, sj_uid: str,
                         job: JobView | None = None) -> None:
        """Deletes a run of the SJ of ``sj_uid``: its Job and a gang's Service and EndpointSlice, each only when
        that SJ controls it and only the very object found (its uid as the precondition). ``job``: the run's Job
        as the view shows it, when it does (else it is read first). A slice is looked for when this process
        wrote one for the run or the run had a Service (a run of one pod has neither)."""
        log.info("deleting run %s/%s: %s", namespace, job_name, reason)
        self.ledger.deleted((namespace, job_name))
        sliced = self.slices.deleted((namespace, job_name))
        if job is not None and job.name == job_name and job.owner == sj_uid and job.uid:
            await self.kube.delete_child("Job", namespace, job_name, job.uid)
        else:
            await self.kube.delete_owned("Job", namespace, job_name, sj_uid)
        if await self.kube.delete_owned("Service", namespace, job_name, sj_uid) or sliced:
            await self.kube.delete_owned("EndpointSlice", namespace, job_name, sj_uid)

    async def delete_strays(self, view: ClusterView, known: frozenset[OwnedRun]) -> None:
        """Runs an SJ controls that it no longer points at, or whose SJ is gone (e.g. left by a launch whose SJ
        then changed), are removed (`decide.stray_runs`); a Job no SJ controls is never touched."""
        for job in self._strays.update(view.jobs, known, frozenset(self.ledger.launched)):
            if job.owner is not None and self.handles(job.namespace):
                await self.delete_run(job.namespace, job.name, "its ScavengerJob no longer refers to this run",
                                      sj_uid=job.owner, job=job)

    def unprotectable(self) -> frozenset[str]:
        """The SJs (by key) whose budget could not be applied (its name is someone else's object) less than
        `BUDGET_REFRESH` ago: victim steering leaves them unprotected meanwhile, as it does the runs it exempts,
        rather than toggle their label over and over."""
        if not self.refused:
            return frozenset()
        now = self.ledger.monotonic()
        for uid in [uid for uid, (_, until) in self.refused.items() if until <= now]:
            del self.refused[uid]
        return frozenset(key for key, _ in self.refused.values())

    async def _set_protection(self, o: Observed, action: SetProtection) -> bool:
        """Toggles the label the SJ's PodDisruptionBudget selects on every pod of the run that does not carry it
        yet (each label written is kept by the ledger until the watch shows it: a pass in between does not toggle
        it again); the budget is applied first when it may be missing or counts another number of pods (a
        fallback's run). A routine toggle's lateness is measured once its pods are labelled. False when the
        budget or a label is refused: the SJ is then left unprotected for a while (`refused`: its budget's name
        taken, `BUDGET_REFRESH`; the API server forbade or rejected the write, `PROTECTION_RETRY`), not toggled at
        every pass. Another error (after `kube`'s retries) is raised: the steering lane logs it and a later pass
        tries again."""
        now, pods, applied = self.ledger.monotonic(), _run_size(o), self.budgets.get(o.sj.uid)
        if action.protected and (applied is None or applied.pods != pods or now - applied.at > BUDGET_REFRESH):
            try:
                await self._apply_budget(protection_budget(o.sj.namespace, o.sj.name, o.sj.uid, pods), o.sj.uid)
            except NameTaken as exc:
                # Someone else's budget of its name: neither patched nor taken, and the run is not protected.
                log.warning("%s is not protected: %s", o.sj.key, exc.message)
                self.refused[o.sj.uid] = (o.sj.key, now + BUDGET_REFRESH)
                self.recorder.record(o.sj, (Event("Warning", "NameTaken", f"the run is not protected: {exc.message}"),))
                return False
            except (Forbidden, Invalid) as exc:
                self._refuse_protection(o, f"its PodDisruptionBudget could not be applied: {exc}")
                return False
            self.budgets[o.sj.uid] = Budget(now, pods)
        value, run, labelled = "true" if action.protected else "false", (o.sj.namespace, action.job_name), False
        for pod in o.run.pods:
            if not pod.terminal and pod.protected != action.protected:
                try:
                    await self.kube.label_pod(o.sj.namespace, pod.name, {LABEL_PROTECTED: value})
                except (Forbidden, Invalid) as exc:
                    self._refuse_protection(o, f"pod {pod.name} could not be labelled: {exc}")
                    return False
                self.ledger.label(run, pod.uid, action.protected)
                labelled = True
        if labelled and action.due is not None:
            late = (self.clock() - action.due).total_seconds()
            self.metrics.toggle_lateness.labels("protect" if action.protected else "unprotect").observe(max(late, 0.0))
        return True

    def _refuse_protection(self, o: Observed, why: str) -> None:
        """The API server forbade or rejected a toggle's write: the SJ is left unprotected for `PROTECTION_RETRY`
        seconds (as `unprotectable` says), with a warning and an Event, instead of the toggle at every pass."""
        log.warning("%s is not protected for %.0f s: %s", o.sj.key, PROTECTION_RETRY, why)
        self.refused[o.sj.uid] = (o.sj.key, self.ledger.monotonic() + PROTECTION_RETRY)
        self.recorder.record(o.sj, (Event("Warning", "ProtectionFailed", f"the run is not protected: {why}"),))

    async def _apply_budget(self, pdb: Mapping[str, Any], sj_uid: str) -> None:
        """Creates the SJ's budget, or patches the one it controls (as read: Conflict when it changed since)."""
        await self.kube.apply_child(pdb, sj_uid, {"metadata": {"labels": pdb["metadata"]["labels"]},
                                                  "spec": pdb["spec"]})
