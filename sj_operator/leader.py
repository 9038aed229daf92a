"""One active replica: a coordination.k8s.io Lease decides who runs the decision loop.

Like client-go's leader election, expiry is judged by when *this* process last saw
the Lease record change (a monotonic clock), not by the holder's timestamps, so
clock skew between replicas cannot make two leaders. Every replica keeps its
watch caches warm; only the leader decides and writes. Deterministic names and
resourceVersion-checked status writes keep even a brief overlap harmless.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from sj_operator.kube import Conflict, Kube, KubeError, NotFound

log = logging.getLogger("sj_operator.leader")


class CachesIncomplete(RuntimeError):
    """The watch caches were not complete in time: this process must not lead, and asks to be restarted."""


async def campaign_once_ready(ready: asyncio.Event, campaign: Callable[[], Awaitable[None]], timeout: float, *,
                              wait_for: Callable[[Awaitable[bool], float], Awaitable[bool]] = asyncio.wait_for,
                              ) -> None:
    """Runs ``campaign`` (the elector's loop) once ``ready`` is set: a replica competes for the Lease only
    with complete watch caches, so one that never completes them cannot hold the Lease and decide nothing
    while a healthy peer waits. Raises `CachesIncomplete` if ``ready`` is not set within ``timeout``
    seconds: the task ends, and with it the process's health (``/healthz``)."""
    try:
        await wait_for(ready.wait(), timeout)
    except TimeoutError:
        log.error("the watch caches are not complete %gs after start; not campaigning for the Lease, and "
                  "reporting unhealthy so that the process is restarted", timeout)
        raise CachesIncomplete(f"watch caches not complete after {timeout:g}s") from None
    await campaign()


def _micro(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    def __init__(self, kube: Kube, *, name: str, namespace: str, identity: str,
                 lease_seconds: int = 15, renew_every: float = 2.0,
                 on_change: Callable[[], None] | None = None) -> None:
        self.kube, self.name, self.namespace, self.identity = kube, name, namespace, identity
        self.lease_seconds, self.renew_every = lease_seconds, renew_every
        self.on_change = on_change
        self.leading = False
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._renewed_at = 0.0

    def _set_leading(self, leading: bool) -> None:
        if leading != self.leading:
            self.leading = leading
            log.info("%s %s the lease %s/%s", self.identity, "holds" if leading else "does not hold",
                     self.namespace, self.name)
            if self.on_change is not None:
                self.on_change()

    def _body(self, *, acquire: bool, transitions: int, rv: str | None) -> dict[str, Any]:
        now = _micro(datetime.now(UTC))
        spec: dict[str, Any] = {"holderIdentity": self.identity, "leaseDurationSeconds": self.lease_seconds,
                                "renewTime": now, "leaseTransitions": transitions}
        if acquire:
            spec["acquireTime"] = now
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if rv:
            meta["resourceVersion"] = rv
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}

    async def try_once(self) -> bool:
        try:
            lease = await self.kube.read_lease(self.namespace, self.name)
        except NotFound:
            try:
                await self.kube.create_lease(self.namespace, self._body(acquire=True, transitions=0, rv=None))
                self._renewed_at = time.monotonic()
                return True
            except Conflict:
                return False
        spec = lease.spec
        record = (spec.holder_identity, spec.renew_time, spec.lease_transitions)
        if record != self._observed:
            self._observed, self._observed_at = record, time.monotonic()
        holder = spec.holder_identity
        expired = time.monotonic() - self._observed_at > (spec.lease_duration_seconds or self.lease_seconds)
        if holder and holder != self.identity and not expired:
            return False
        transitions = (spec.lease_transitions or 0) + (0 if holder == self.identity else 1)
        try:
            await self.kube.replace_lease(self.namespace, self.name,
                                          self._body(acquire=holder != self.identity, transitions=transitions,
                                                     rv=lease.metadata.resource_version))
        except Conflict:
            return False
        self._renewed_at = time.monotonic()
        return True

    async def run(self) -> None:
        while True:
            try:
                leading = await self.try_once()
            except KubeError as exc:
                log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
                # Could not renew: step down once the lease may have expired for the others.
                leading = self.leading and time.monotonic() - self._renewed_at < self.lease_seconds * 2 / 3
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("lease %s/%s: unexpected error", self.namespace, self.name)
                leading = False
            self._set_leading(leading)
            await asyncio.sleep(self.renew_every)

    async def release(self) -> None:
        """Gives the lease up at shutdown so another replica takes over at once."""
        if not self.leading:
            return
        self.leading = False
        try:
            await self.kube.patch_lease(self.namespace, self.name,
                                        {"spec": {"holderIdentity": None, "leaseDurationSeconds": 1}})
        except KubeError as exc:
            log.warning("could not release lease %s/%s: %s", self.namespace, self.name, exc)
