"""Runs adopted Jobs: creates each one's SJ, and ends the Job as its SJ ended.

The adoption webhook has suspended every Job labelled ``scavenger.dev/scavenge: "true"`` and made the
operator its manager (:mod:`sj_operator.adoption`). On every pass the leader:

- creates the SJ of each such Job that has none and has not finished. The SJ has the Job's name and
  is owned by it, so deleting the Job deletes the SJ. An SJ deleted on its own is made again.
- when the SJ has ended, writes the Job's final status (``Complete`` or ``Failed``, with the SJ's
  message) and posts an Event on the Job.
- ends a Job as ``Failed``, with the reason, when its SJ cannot be made. That happens when the
  operator's limits were tightened after the Job was admitted, or when an SJ of that name exists that
  is not this Job's.

Every write is idempotent, so a pass that repeats one after a failover changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from sj_operator.adoption import job_final_status, sj_for_job
from sj_operator.api import InvalidSpec, SpecLimits
from sj_operator.decide import ClusterView
from sj_operator.faults import Fault, describe
from sj_operator.kube import Invalid, Kube, KubeError, NotFound
from sj_operator.names import KIND
from sj_operator.observed import AdoptedJob, SJObject

log = logging.getLogger(__name__)

_ENDED = ("Succeeded", "Failed")


class Adopter:
    def __init__(self, kube: Kube, limits: SpecLimits, *, handles: Callable[[str], bool],
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 on_fault: Callable[[Fault], None] = lambda fault: None) -> None:
        self.kube, self.limits, self.handles, self.clock = kube, limits, handles, clock
        self.on_fault = on_fault

    async def reconcile(self, view: ClusterView) -> None:
        # Ended Jobs stay labelled until deleted: the SJs are indexed only when some Job is still running.
        pending = [job for job in view.adopted if job.managed and not job.finished and self.handles(job.namespace)]
        if not pending:
            return
        sjs = {sj.key: sj for sj in view.sjs}
        for job in pending:
            try:
                await self._one(job, sjs.get(job.key))
            except KubeError as exc:
                log.warning("adopted Job %s: %s; retrying on the next pass", job.key, exc)
            except Exception as exc:  # one Job's bug never stops the others' adoption, nor the pass
                self.on_fault(Fault("Job", job.namespace, job.name, "observe", describe(exc)))
                log.debug("adopted Job %s failed", job.key, exc_info=exc)

    async def _one(self, job: AdoptedJob, sj: SJObject | None) -> None:
        if sj is None:
            await self._create(job)
        elif sj.job_owner != job.uid:
            await self._end(job, succeeded=False, message=f"a {KIND} named {job.name} exists and does not run this "
                                                          "Job; rename one of them")
        elif sj.status.get("phase") in _ENDED:
            phase = sj.status["phase"]
            message = f"{KIND} {sj.name} {phase.lower()}: {sj.status.get('message') or phase}"
            await self._end(job, succeeded=phase == "Succeeded", message=message,
                            pods=_pods(sj.spec))

    async def _create(self, job: AdoptedJob) -> None:
        try:
            manifest = sj_for_job(job.body, self.limits)
            created = await self.kube.create_sj(manifest)
        except (InvalidSpec, Invalid) as exc:
            await self._end(job, succeeded=False, message=f"cannot run as a {KIND}: {exc}")
            return
        except NotFound:  # the namespace is going away
            return
        if created:
            log.info("adopted Job %s: %s %s runs it", job.key, KIND, job.name)
            await self._event(job, "Normal", "Adopted", f"suspended and run by {KIND} {job.name}")

    async def _end(self, job: AdoptedJob, *, succeeded: bool, message: str, pods: int = 1) -> None:
        status = job_final_status(succeeded=succeeded, message=message, started=job.created or self.clock(),
                                  now=self.clock(), pods=pods)
        await self.kube.patch_job_status(job.namespace, job.name, status)
        log.info("adopted Job %s %s: %s", job.key, "complete" if succeeded else "failed", message)
        await self._event(job, "Normal" if succeeded else "Warning", "Completed" if succeeded else "Failed", message)

    async def _event(self, job: AdoptedJob, type_: str, reason: str, message: str) -> None:
        await self.kube.event(namespace=job.namespace, name=job.name, uid=job.uid, kind="Job",
                              api_version="batch/v1", type_=type_, reason=reason, message=message)


def _pods(spec: Mapping[str, Any]) -> int:
    parallelism = spec.get("parallelism")
    return parallelism if isinstance(parallelism, int) and parallelism > 0 else 1
