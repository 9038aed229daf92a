"""The watch caches the operator keeps itself: every pod of the cluster, the runs' and adopted Jobs, the SJs,
the ResourceQuotas.

Pods are most of what the operator watches: a one-pod SJ's pod changes four or five times between its
Job and Running, and every other pod of the cluster counts against the nodes' room; each run's Job changes
several times more. Through kopf, each of those events costs a worker's round (its per-object memory, three
loggers, the handler's keyword arguments: about 190 µs of CPU, `make bench-events`) for an index handler
that keeps one slim view, and kopf watches every Job of the cluster to filter them itself. So these are
listed and watched here, with `Kube.list_raw` and `Kube.watch_raw` (Jobs with a label selector, so the API
server sends only theirs): each event is decoded once into its view and indexed at once. The SJs too: each
one changes a few times on its way to Running, and a burst brings thousands. The ResourceQuotas, which
a gang's launch reads (its sum against each quota of its namespace), instead of a list per launch.

`WatchCache.run` is the list-and-watch cycle. `PodCache` keeps what kopf's pod index kept, with the same
rules: the pods that hold resources (for the nodes' and namespaces' sums), each run's members, the
disrupted members remembered (`observed.remember_disrupted`), and the decision loop woken for a run
member's change or room freed. `ObjectCache` keeps Jobs, SJs or ResourceQuotas by namespace and name and
calls ``on_change`` on every change: the loop's wake-up, but not for the quotas (their usage moves with
every pod, and a gang they hold waits for its retry time). A cache's ``ready`` is set once its first
listing is in; the loop starts only then, as it does for kopf's indexes.
"""
from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from sj_operator.faults import Fault, describe
from sj_operator.kube import Gone, Kube, KubeError
from sj_operator.names import GROUP, PLURAL, VERSION
from sj_operator.observed import PodView, RunKey, pod_view
from sj_operator.settings import DEFAULT_SCHEDULERS

__all__ = ["BACKOFFS", "JOBS_PATH", "PODS_PATH", "RESOURCE_QUOTAS_PATH", "SJS_PATH", "ObjectCache", "PodCache",
           "WatchCache"]

log = logging.getLogger(__name__)
PODS_PATH = "/api/v1/pods"
JOBS_PATH = "/apis/batch/v1/jobs"
RESOURCE_QUOTAS_PATH = "/api/v1/resourcequotas"
SJS_PATH = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
BACKOFFS = (1.0, 2.0, 5.0, 10.0)
"""Seconds between attempts after a failed list or watch, the last one repeated (kopf's, as configured for
the other watches in `handlers.startup`)."""


@dataclass
class WatchCache(ABC):
    """The objects at ``path`` (with ``selector``, a label selector), kept by a list and a watch; what an
    object becomes and how it is indexed is the subclass's (`view`, `key`, `put`, `drop`)."""

    path: str = PODS_PATH
    selector: str | None = None
    on_change: Callable[[], None] = lambda: None
    """Wakes the decision loop."""
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the first listing is in the cache."""
    resource_version: str = ""
    """Where the watch continues from: the last event's or bookmark's, or the listing's."""
    kind: str = "Pod"
    """The kind of the objects, as faults name it."""
    on_fault: Callable[[Fault], None] = lambda fault: None
    """Told of an object whose view could not be made (it is skipped; the watch goes on)."""

    @abstractmethod
    def view(self, obj: dict[str, Any]) -> Any:
        """What the cache keeps of an object."""

    @abstractmethod
    def put(self, view: Any) -> None:
        """An object added or changed."""

    @abstractmethod
    def drop(self, view: Any) -> None:
        """An object gone (its last view)."""

    @abstractmethod
    def key(self, view: Any) -> Hashable:
        """Which object a view is of."""

    @abstractmethod
    def held(self) -> Mapping[Any, Any]:
        """Every view the cache holds, by `key`."""

    @abstractmethod
    def raw_key(self, obj: Mapping[str, Any]) -> Hashable:
        """`key` of the view an object would have, from its metadata alone (for one whose view fails)."""

    def replace(self, items: list[dict[str, Any]]) -> None:
        """A listing: the cache becomes exactly ``items`` (those not listed are gone; an unchanged object
        keeps its view; one whose view cannot be made is skipped)."""
        listed = {self.key(view): view for view in map(self._view, items) if view is not None}
        held = self.held()
        for key in [key for key in held if key not in listed]:
            self.drop(held[key])
        for view in listed.values():
            self.put(view)

    def apply(self, kind: str, obj: dict[str, Any]) -> None:
        """One watch event: ADDED, MODIFIED, DELETED or BOOKMARK, and the resourceVersion it brings. An object
        whose view cannot be made is gone from the cache (its last view is not kept as if it still held)."""
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            view = self._view(obj)
            if view is None:
                self._forget(obj)
            elif kind == "DELETED":
                self.drop(view)
            else:
                self.put(view)
        metadata = obj.get("metadata")
        version = metadata.get("resourceVersion") if isinstance(metadata, Mapping) else None
        if version:
            self.resource_version = str(version)

    def _view(self, obj: dict[str, Any]) -> Any:
        """`view`, or None (and the fault told) when it raises: one object never stops the watch."""
        try:
            return self.view(obj)
        except Exception as exc:
            metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
            metadata = metadata if isinstance(metadata, Mapping) else {}
            fault = Fault(self.kind, str(metadata.get("namespace") or ""), str(metadata.get("name") or ""),
                          "view", describe(exc))
            log.warning("%s: skipped %s", self, fault)
            log.debug("%s: the view of %s/%s failed", self, fault.namespace, fault.name, exc_info=exc)
            self.on_fault(fault)
            return None

    def _forget(self, obj: Mapping[str, Any]) -> None:
        try:
            key = self.raw_key(obj)
        except Exception:
            return
        held = self.held().get(key)
        if held is not None:
            self.drop(held)

    def __str__(self) -> str:
        return f"watch cache {self.path}" + (f"?labelSelector={self.selector}" if self.selector else "")

    async def run(self, kube: Kube, *, backoffs: Sequence[float] = BACKOFFS,
                  sleep: Callable[[float], Any] = asyncio.sleep) -> None:
        """Lists, then watches from the listing on, until cancelled: a watch the API server ends is
        continued from the last version seen; one too old to continue (410 Gone) lists again; a failed list
        or watch is logged and tried again after ``backoffs``, a second failure in a row by listing again.
        Never returns."""
        failures = 0
        listed = False
        while True:
            try:
                if not listed:
                    items, self.resource_version = await kube.list_raw(self.path, selector=self.selector)
                    self.replace(items)
                    listed, failures = True, 0
                    if not self.ready.is_set():
                        log.info("%s: %d listed; watching from version %s", self, len(items), self.resource_version)
                        self.ready.set()
                async for kind, obj in kube.watch_raw(self.path, self.resource_version, selector=self.selector):
                    self.apply(kind, obj)
                    failures = 0
            except Gone:
                log.info("%s: version %s is too old to watch from; listing again", self, self.resource_version)
                listed = False
                continue
            except KubeError as exc:
                delay = backoffs[min(failures, len(backoffs) - 1)]
                failures += 1
                log.warning("%s: %s failed (%s); again in %.0fs", self, "watching" if listed else "listing",
                            exc, delay)
                await sleep(delay)
                listed = listed and failures < 2


@dataclass
class PodCache(WatchCache):
    """The pod views by uid, with the two indexes the loop reads (`active`, `runs`). ``on_change``: a run
    member changed, or a pod stopped or went and freed room."""

    remember: Callable[[PodView], None] = lambda pod: None
    """Told of every view of a run member (`observed.remember_disrupted` keeps the disrupted ones)."""
    schedulers: frozenset[str] = DEFAULT_SCHEDULERS
    """The schedulers whose pending pods count toward the threshold (`observed.pod_view`)."""
    _pods: dict[str, PodView] = field(default_factory=dict)
    _runs: dict[RunKey, dict[str, PodView]] = field(default_factory=dict)
    _run_tuples: dict[RunKey, tuple[PodView, ...]] = field(default_factory=dict)
    """Each run's members as `runs` gives them: the same tuple, at the same place (a run whose only member changed
    keeps its place), until one of them changes, so that a pass finds the runs that changed by identity
    (`decide.changed_keys`)."""
    _stale: dict[RunKey, None] = field(default_factory=dict)
    """The runs whose members changed since `runs` last made their tuples, in the order they changed (a new run
    comes after the others)."""
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
        """Each run's members, by (namespace, Job name): a copy, in which an unchanged run's tuple is the one the
        last call gave."""
        tuples = self._run_tuples
        for key in self._stale:
            if members := self._runs.get(key):
                tuples[key] = tuple(members.values())
            else:
                tuples.pop(key, None)
        self._stale.clear()
        return dict(tuples)

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
            self._stale[(pod.namespace, pod.run)] = None
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

    def view(self, obj: dict[str, Any]) -> PodView:
        return pod_view(obj, self.schedulers)

    def key(self, view: PodView) -> str:
        return view.uid

    def raw_key(self, obj: Mapping[str, Any]) -> str:
        return str(obj["metadata"]["uid"])

    def held(self) -> Mapping[str, PodView]:
        return self._pods

    def _unindex(self, pod: PodView) -> None:
        if self._active.pop(pod.uid, None) is not None:
            self._active_tuple = None
        if pod.run is not None:
            key = (pod.namespace, pod.run)
            members = self._runs.get(key)
            if members is not None:
                members.pop(pod.uid, None)
                self._stale[key] = None
                if not members:
                    del self._runs[key]


class _Named(Protocol):
    @property
    def namespace(self) -> str: ...

    @property
    def name(self) -> str: ...


N = TypeVar("N", bound=_Named)


@dataclass
class ObjectCache(WatchCache, Generic[N]):
    """Objects (Jobs by default) as ``make`` makes them, by namespace and name.
    ``on_change``: one of them changed, came or went."""

    make: Callable[[dict[str, Any]], N] = field(kw_only=True)
    """The view of an object (`observed.job_view`, `observed.adopted_job`, `observed.sj_object`,
    `policy.tenancy.quota_view`)."""
    path: str = JOBS_PATH
    kind: str = "Job"
    _objects: dict[tuple[str, str], N] = field(default_factory=dict)

    def objects(self) -> dict[tuple[str, str], N]:
        """A copy: the cache goes on changing while a pass reads it."""
        return dict(self._objects)

    def in_namespace(self, namespace: str) -> list[N]:
        """The objects of one namespace: a walk over every object, for caches of few (ResourceQuotas)."""
        return [obj for (ns, _), obj in self._objects.items() if ns == namespace]

    def __len__(self) -> int:
        return len(self._objects)

    def view(self, obj: dict[str, Any]) -> N:
        return self.make(obj)

    def put(self, obj: N) -> None:
        key = self.key(obj)
        if self._objects.get(key) == obj:
            return
        self._objects[key] = obj
        self.on_change()

    def drop(self, obj: N) -> None:
        if self._objects.pop(self.key(obj), None) is not None:
            self.on_change()

    def key(self, view: N) -> tuple[str, str]:
        return (view.namespace, view.name)

    def raw_key(self, obj: Mapping[str, Any]) -> tuple[str, str]:
        metadata = obj["metadata"]
        return (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))

    def held(self) -> Mapping[tuple[str, str], N]:
        return self._objects

