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

A Job whose SJ the API server forbids (a ResourceQuota ``count/scavengerjobs.scavenger.dev``, a policy)
stays suspended and gets a Warning ``AdoptionRefused`` Event naming the API server's message, once per
refusal in a row with that message. Any failed attempt holds the Job back before it is tried again, for a
wait that doubles per failure in a row (`policy.lifecycle.held_again`, as a launch its namespace refused
waits), so refused Jobs cost a pass nothing while they wait. A pass writes for at most
`ADOPTIONS_PER_PASS` Jobs, taking the namespaces in turns, so no tenant's Jobs make a pass long or keep
another tenant's Jobs waiting for long.

Every write is idempotent, so a pass that repeats one after a failover changes nothing.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from sj_operator.adoption import job_final_status, sj_for_job
from sj_operator.api import InvalidSpec, SpecLimits
from sj_operator.decide import ClusterView
from sj_operator.faults import Fault, describe
from sj_operator.kube import Forbidden, Invalid, Kube, KubeError, NotFound
from sj_operator.names import KIND
from sj_operator.observed import AdoptedJob, SJObject
from sj_operator.policy.lifecycle import Hold, LifecycleConfig, held_again, holds

log = logging.getLogger(__name__)

_ENDED = ("Succeeded", "Failed")
_NEVER = datetime.min.replace(tzinfo=UTC)

ADOPTIONS_PER_PASS = 32
"""Adopted Jobs a pass writes for at most (an SJ to create, a Job to end). The adopter takes them one at a
time inside the leader's pass, each a parse of the Job's spec and a request or two (tens of milliseconds on
a healthy API server): 32 add at most a second or so to a pass, and still adopt hundreds of Jobs a minute at
the default 5 s tick (more when the watches wake passes sooner). The others wait for the next passes: a
burst of thousands of labelled Jobs is adopted over minutes rather than holding up one pass for them all."""


MADE_GRACE = 60.0
"""Seconds a Job whose SJ this process made is not tried again while the SJ watch does not show it yet. A pass
right after the create may see the Job and not its SJ (the watch behind, a list under way); a create tried again
is refused, and at a namespace's quota of SJs with 403 before the API server finds the name taken, which would
tell the Job's owner its SJ was refused when it runs."""


class _CreateForbidden(Forbidden):
    """The API server forbade the Job's SJ itself (a ResourceQuota, a policy), not another of its writes."""


class Adopter:
    def __init__(self, kube: Kube, limits: SpecLimits, *, handles: Callable[[str], bool],
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 lifecycle: Callable[[], LifecycleConfig] = LifecycleConfig,
                 on_fault: Callable[[Fault], None] = lambda fault: None) -> None:
        self.kube, self.limits, self.handles, self.clock = kube, limits, handles, clock
        self.lifecycle, self.on_fault = lifecycle, on_fault
        self.held: dict[str, Hold] = {}
        """The Jobs whose last attempt failed, held back until their wait has passed, by Job uid."""
        self.told: dict[str, str] = {}
        """The API server's message of the refusal each Job was last told of (its ``AdoptionRefused`` Event),
        by Job uid: the same refusal again is not told again."""
        self.made: dict[str, float] = {}
        """When this process made each Job's SJ (monotonic seconds), by Job uid, until the SJ watch shows it or
        `MADE_GRACE` has passed."""

    async def reconcile(self, view: ClusterView, clock: float) -> None:
        """One pass over the adopted Jobs at ``clock`` (monotonic seconds, the controller's)."""
        # Ended Jobs stay labelled until deleted: the SJs are indexed only when some Job is still running.
        pending = [job for job in view.adopted if job.managed and not job.finished and self.handles(job.namespace)]
        sjs = {sj.key: sj for sj in view.sjs} if pending else {}
        due = [job for job in pending if _writes(job, sjs.get(job.key))]
        if self.made:  # an SJ made and not seen yet is not made again (the watch behind)
            self.made = {job.uid: self.made[job.uid] for job in due if job.uid in self.made
                         and job.key not in sjs and clock - self.made[job.uid] < MADE_GRACE}
            due = [job for job in due if job.uid not in self.made]
        if self.held or self.told:  # a Job gone, ended or with its SJ running starts over
            wanted = {job.uid for job in due}
            self.held = {uid: hold for uid, hold in self.held.items() if uid in wanted}
            self.told = {uid: told for uid, told in self.told.items() if uid in wanted}
        for job in in_turns((job for job in due if not holds(self.held.get(job.uid), clock)), ADOPTIONS_PER_PASS):
            try:
                await self._one(job, sjs.get(job.key))
            except KubeError as exc:
                wait = self._hold(job, clock)
                log.warning("adopted Job %s: %s; trying again in %ss", job.key, exc, int(wait.total_seconds()))
                if isinstance(exc, _CreateForbidden):  # no pass makes its SJ as things stand: its owner is told
                    await self._refused(job, exc.message or str(exc), wait)
            except Exception as exc:  # one Job's bug never stops the others' adoption, nor the pass
                self._hold(job, clock)
                self.on_fault(Fault("Job", job.namespace, job.name, "observe", describe(exc)))
                log.debug("adopted Job %s failed", job.key, exc_info=exc)
            else:
                self.held.pop(job.uid, None)
                self.told.pop(job.uid, None)
                if job.key not in sjs:
                    self.made[job.uid] = clock

    def _hold(self, job: AdoptedJob, clock: float) -> timedelta:
        """Holds the Job back after a failed attempt; the wait, which doubles per failure in a row."""
        self.held[job.uid], wait = held_again(self.held.get(job.uid), clock, self.lifecycle())
        return wait

    async def _refused(self, job: AdoptedJob, message: str, wait: timedelta) -> None:
        """Tells the Job's owner that the API server forbids its SJ (a Warning Event, which ``kubectl describe
        job`` shows), once per refusal in a row with that message: not again on each attempt."""
        if self.told.get(job.uid) == message:
            return
        self.told[job.uid] = message
        await self._event(job, "Warning", "AdoptionRefused",
                          f"cannot create its {KIND}: {message} (the Job stays suspended; trying again in "
                          f"{int(wait.total_seconds())}s, then less often)")

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
        except Forbidden as exc:
            raise _CreateForbidden(exc.status, exc.reason, exc.message) from exc
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


def _writes(job: AdoptedJob, sj: SJObject | None) -> bool:
    """Whether the Job has something to write (`Adopter._one`): its SJ to create, or its end (its SJ is not its
    own, or has ended). A Job whose SJ runs costs a pass nothing."""
    return sj is None or sj.job_owner != job.uid or sj.status.get("phase") in _ENDED


def in_turns(jobs: Iterable[AdoptedJob], count: int) -> list[AdoptedJob]:
    """The first ``count`` of ``jobs`` with the namespaces taking turns: each namespace's oldest Job, then each
    one's second oldest, and so on (within a turn, oldest first; the same age by key). A stable order: the Jobs
    left out keep their places for the next pass, and a tenant with thousands of Jobs to adopt takes one Job a
    turn, not the pass."""
    turns: Counter[str] = Counter()
    ranked: list[tuple[int, AdoptedJob]] = []
    for job in sorted(jobs, key=lambda job: (job.created or _NEVER, job.key)):
        ranked.append((turns[job.namespace], job))
        turns[job.namespace] += 1
    ranked.sort(key=lambda turn_job: turn_job[0])  # stable: oldest first within a turn
    return [job for _, job in ranked[:count]]


def _pods(spec: Mapping[str, Any]) -> int:
    parallelism = spec.get("parallelism")
    return parallelism if isinstance(parallelism, int) and parallelism > 0 else 1
