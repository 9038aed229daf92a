"""The namespace gate: whether an SJ's namespace would take its run, asked before anything is made.

One pod of the run goes through every admission rule of the namespace as a dry run (its acceptance reused
for a while by runs of the same shape), and a gang's sum is checked against the namespace's ResourceQuotas.
An SJ its namespace refuses is held back: it waits, saying why, and is tried again after a delay that
doubles per refusal in a row. The gate owns that hold: it sets it, the launcher lifts it once a run is made,
and the admission leaves a held SJ out until its delay has passed.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sj_operator.api import ScavengerJobSpec, ScavengerJobStatus
from sj_operator.builders.job import admission_shape
from sj_operator.kube import Forbidden, Kube
from sj_operator.observed import SJObject
from sj_operator.policy.lifecycle import (
    Hold,
    LifecycleConfig,
    NamespaceRefusal,
    Step,
    held_again,
    holds,
    launch_forbidden,
    refusal_reason,
)
from sj_operator.policy.tenancy import ResourceQuotaView, quota_shortfall
from sj_operator.resources import resources_milli

__all__ = ["DRY_RUN_TTL", "Gate", "Hold", "Refusal"]

log = logging.getLogger("sj_operator.controller")

DRY_RUN_TTL = 30.0
"""Seconds a namespace's acceptance of a dry-run pod stands for the runs launched after it whose pods have
the same shape (`builders.job.admission_shape`: the same pod but for the names of the SJ and run): in a
burst, one dry run per shape and namespace rather than one per SJ. Not in a namespace with a
ResourceQuota (whose room changes with every pod), and a refusal is never reused; a rule added to the
namespace meanwhile is met by the next dry run, or by the Job's pods."""
_DRY_RUNS_KEPT = 1024
"""Accepted shapes remembered before the expired ones are dropped."""


class Refusal(NamedTuple):
    """Why the namespace refuses a run: the reason the SJ waits with, and the message."""
    reason: NamespaceRefusal
    message: str


class Gate:
    def __init__(self, kube: Kube, monotonic: Callable[[], float], lifecycle: Callable[[], LifecycleConfig],
                 resource_quotas: Callable[[str], Sequence[ResourceQuotaView]]) -> None:
        self.kube, self.monotonic, self.lifecycle, self.resource_quotas = kube, monotonic, lifecycle, resource_quotas
        self.held: dict[str, Hold] = {}
        """By SJ uid."""
        self.dry_runs: dict[tuple[str, str], float] = {}
        """When (monotonic seconds) the namespace last accepted a dry-run pod of each shape, by (namespace,
        shape)."""

    def holds(self, uid: str, clock: float) -> bool:
        """Whether the SJ is held back at ``clock`` (monotonic seconds)."""
        return holds(self.held.get(uid), clock)

    async def refusal(self, sj: SJObject, spec: ScavengerJobSpec, job: Mapping[str, Any]) -> Refusal | None:
        """Why the SJ's namespace would refuse the run's pods, before anything is made."""
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
                return Refusal(refusal_reason(exc.message),
                               f"namespace {sj.namespace} refuses this SJ's pods: {exc.message}")
        if not (tried or spec.is_gang):
            return None
        quotas = self.resource_quotas(sj.namespace)
        if tried and not quotas:  # a ResourceQuota's room changes with every pod: its verdict is never reused
            self._accepted(shape)
        if spec.is_gang:
            shortfall = quota_shortfall(quotas, resources_milli(spec.resources.requests),
                                        resources_milli(spec.resources.limits), spec.parallelism)
            if shortfall is not None:
                return Refusal("QuotaExceeded", f"namespace {sj.namespace} has no room for the whole gang: {shortfall}")
        return None

    def hold(self, sj: SJObject, status: ScavengerJobStatus, now: datetime, refusal: Refusal) -> Step:
        """The SJ waits, saying why; it is tried again after a delay that doubles per refusal in a row."""
        self.held[sj.uid], delay = held_again(self.held.get(sj.uid), self.monotonic(), self.lifecycle())
        log.info("%s waits: %s (trying again in %ss)", sj.key, refusal.message, delay.total_seconds())
        return launch_forbidden(status, now, refusal.reason,
                                f"{refusal.message} (trying again in {int(delay.total_seconds())}s)")

    def release(self, uid: str) -> None:
        """The SJ's run was made: its next refusal starts the delays over."""
        self.held.pop(uid, None)

    def _accepted(self, shape: tuple[str, str]) -> None:
        """Remembers that the namespace accepted a dry-run pod of this shape (expired entries dropped as the
        table grows)."""
        now = self.monotonic()
        if len(self.dry_runs) >= _DRY_RUNS_KEPT:
            self.dry_runs = {k: at for k, at in self.dry_runs.items() if now - at < DRY_RUN_TTL}
        self.dry_runs[shape] = now
