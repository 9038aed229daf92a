"""Every pod of the cluster, as slim views, kept by a list and a watch of the cache's own.

Pods are most of what the operator watches: a one-pod SJ's pod changes four or five times between its
Job and Running, and every other pod of the cluster counts against the nodes' room. Through kopf, each of
those events costs a worker's round (its per-object memory, three loggers, the handler's keyword
arguments: about three quarters of a pod event's cost, measured in a 2,000-SJ burst), for an index
handler that keeps one slim view. So pods are listed and watched here, with `Kube.list_raw` and
`Kube.watch_raw`: each event is decoded once into a `PodView` and indexed at once.

`PodCache` keeps what kopf's pod index kept, with the same rules: the pods that hold resources (for the
nodes' and namespaces' sums), each run's members, the disrupted members remembered
(`observed.remember_disrupted`), and the decision loop woken for a run member's change or room freed. Its
``ready`` is set once the first listing is in; the loop starts only then, as it does for kopf's indexes.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sj_operator.kube import Gone, Kube, KubeError
from sj_operator.observed import PodView, RunKey, pod_view

__all__ = ["BACKOFFS", "PODS_PATH", "PodCache"]

log = logging.getLogger(__name__)
PODS_PATH = "/api/v1/pods"
BACKOFFS = (1.0, 2.0, 5.0, 10.0)
"""Seconds between attempts after a failed list or watch, the last one repeated (kopf's, as configured for
the other watches in `handlers.startup`)."""


@dataclass
class PodCache:
    """The pod views by uid, with the two indexes the loop reads (`active`, `runs`)."""

    on_change: Callable[[], None] = lambda: None
    """Wakes the decision loop: a run member changed, or a pod stopped or went and freed room."""
    remember: Callable[[PodView], None] = lambda pod: None
    """Told of every view of a run member (`observed.remember_disrupted` keeps the disrupted ones)."""
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the first listing is in the cache."""
    resource_version: str = ""
    """Where the watch continues from: the last event's or bookmark's, or the listing's."""
    _pods: dict[str, PodView] = field(default_factory=dict)
    _runs: dict[RunKey, dict[str, PodView]] = field(default_factory=dict)
    _active: dict[str, PodView] = field(default_factory=dict)
    _active_tuple: tuple[PodView, ...] | None = None

    # --- what the loop reads ------------------------------------------------------------------
    def active(self) -> tuple[PodView, ...]:
        """The pods that hold resources; the same tuple until one of them changes (`memo.PodSums` skips
        its walk over an unchanged one)."""
        if self._active_tuple is None:
            self._active_tuple = tuple(self._active.values())
        return self._active_tuple

    def runs(self) -> dict[RunKey, tuple[PodView, ...]]:
        """Each run's members, by (namespace, Job name)."""
        return {key: tuple(members.values()) for key, members in self._runs.items()}

    def __len__(self) -> int:
        return len(self._pods)

    # --- what the watch tells -------------------------------------------------------------------
    def put(self, pod: PodView) -> None:
        """A pod added or changed."""
        old = self._pods.get(pod.uid)
        if old is not None:
            if old == pod:
                return
            self._unindex(old)
        self._pods[pod.uid] = pod
        if pod.holds_resources:
            self._active[pod.uid] = pod
            self._active_tuple = None
        if pod.run is not None:
            self._runs.setdefault((pod.namespace, pod.run), {})[pod.uid] = pod
            self.remember(pod)
            self.on_change()
        elif pod.terminal or pod.deleting:
            self.on_change()  # room may have been freed

    def drop(self, pod: PodView) -> None:
        """A pod gone (its last view)."""
        old = self._pods.pop(pod.uid, None)
        if old is not None:
            self._unindex(old)
        if pod.run is not None:
            self.remember(pod)
        if pod.run is not None or (old is not None and old.holds_resources):
            self.on_change()

    def replace(self, pods: Iterable[PodView]) -> None:
        """A listing: the cache becomes exactly ``pods`` (those not listed are gone; an unchanged pod keeps
        its view)."""
        listed = {pod.uid: pod for pod in pods}
        for uid in [uid for uid in self._pods if uid not in listed]:
            self.drop(self._pods[uid])
        for pod in listed.values():
            self.put(pod)

    def apply(self, kind: str, obj: dict[str, Any]) -> None:
        """One watch event (ADDED, MODIFIED, DELETED or BOOKMARK) and the resourceVersion it brings."""
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind in ("ADDED", "MODIFIED"):
            self.put(pod_view(obj))
        elif kind == "DELETED":
            self.drop(pod_view(obj))
        if version:
            self.resource_version = str(version)

    def _unindex(self, pod: PodView) -> None:
        if self._active.pop(pod.uid, None) is not None:
            self._active_tuple = None
        if pod.run is not None:
            members = self._runs.get((pod.namespace, pod.run))
            if members is not None:
                members.pop(pod.uid, None)
                if not members:
                    del self._runs[(pod.namespace, pod.run)]

    # --- keeping it -----------------------------------------------------------------------------
    async def run(self, kube: Kube, *, path: str = PODS_PATH, backoffs: Sequence[float] = BACKOFFS,
                  sleep: Callable[[float], Any] = asyncio.sleep) -> None:
        """Lists, then watches from the listing on, until cancelled: a watch the API server ends is
        continued from the last version seen; one too old to continue (410 Gone) lists again; a failed list
        or watch is logged and tried again after ``backoffs``, then listed again. Never returns."""
        failures = 0
        listed = False
        while True:
            try:
                if not listed:
                    items, self.resource_version = await kube.list_raw(path)
                    self.replace(pod_view(item) for item in items)
                    listed, failures = True, 0
                    if not self.ready.is_set():
                        log.info("pod cache: %d pods listed; watching from version %s", len(items),
                                 self.resource_version)
                        self.ready.set()
                async for kind, obj in kube.watch_raw(path, self.resource_version):
                    self.apply(kind, obj)
                    failures = 0
            except Gone:
                log.info("pod cache: version %s is too old to watch from; listing again", self.resource_version)
                listed = False
                continue
            except KubeError as exc:
                delay = backoffs[min(failures, len(backoffs) - 1)]
                failures += 1
                log.warning("pod cache: %s failed (%s); again in %.0fs", "watching" if listed else "listing",
                            exc, delay)
                await sleep(delay)
                listed = listed and failures < 2  # a second failure in a row lists again
