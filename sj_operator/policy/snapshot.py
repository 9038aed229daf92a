"""Immutable inputs of the policy core: the nodes, the SJ queue, the runs in flight, the snapshot.

Amounts are milli-unit ``int``s (:mod:`sj_operator.resources`). The dataclasses copy every mapping they
receive into a read-only view, so a snapshot cannot change under a decision made from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import TypeGuard

from gang.placement import Resources, Taint
from sj_operator.api.spec import Toleration
from sj_operator.resources import EMPTY, freeze, sub

NO_LABELS: Mapping[str, str] = MappingProxyType({})

__all__ = ["ClusterSnapshot", "InFlightRun", "NamespaceQuota", "NodeView", "QueuedSJ", "Resources", "Shape", "Taint",
           "Toleration", "frozen_labels"]


def _no_resources() -> Resources:
    return EMPTY


def _no_labels() -> Mapping[str, str]:
    return NO_LABELS


def _nonnegative(res: Mapping[str, int] | None, what: str) -> Resources:
    frozen = res if _frozen(res) else freeze(res)
    negative = sorted(name for name, amount in frozen.items() if amount < 0)
    if negative:
        raise ValueError(f"{what}: negative amounts for {', '.join(negative)}")
    return frozen


def _frozen(res: Mapping[str, int] | None) -> TypeGuard[Resources]:
    """Whether ``res`` is read-only and as `freeze` makes it (int amounts, none zero): then it is not copied again."""
    return isinstance(res, MappingProxyType) and all(
        isinstance(a, int) and not isinstance(a, bool) and a for a in res.values())


def frozen_labels(labels: Mapping[str, str] | None) -> Mapping[str, str]:
    """A read-only copy of ``labels`` (a read-only one, as this makes, is taken as it is)."""
    if isinstance(labels, MappingProxyType):
        return labels
    return MappingProxyType(dict(labels)) if labels else NO_LABELS


def _aware(moment: datetime | None, what: str) -> None:
    if moment is not None and moment.utcoffset() is None:
        raise ValueError(f"{what} must be timezone-aware, got {moment!r}")


@dataclass(frozen=True)
class NodeView:
    """What the policy needs to know about one node."""

    name: str
    allocatable: Resources
    requested: Resources = field(default_factory=_no_resources)
    """Sum of the requests of the non-terminated pods bound to this node."""
    labels: Mapping[str, str] = field(default_factory=_no_labels)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    """Cordoned: new pods are not placed here and its capacity is not counted."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "allocatable", _nonnegative(self.allocatable, f"node {self.name} allocatable"))
        object.__setattr__(self, "requested", _nonnegative(self.requested, f"node {self.name} requested"))
        object.__setattr__(self, "labels", frozen_labels(self.labels))
        object.__setattr__(self, "taints", tuple(self.taints))

    @property
    def free(self) -> Resources:
        """Allocatable minus requested, per resource (negative when the node is overcommitted)."""
        return sub(self.allocatable, self.requested)


@dataclass(frozen=True)
class Shape:
    """One configuration of an SJ as placement sees it."""

    pods: int
    request: Resources
    node_selector: Mapping[str, str] = field(default_factory=_no_labels)
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True, slots=True)
class QueuedSJ:
    """A ScavengerJob waiting for a run."""

    key: str
    """``namespace/name``."""
    created: datetime
    interrupted_count: int = 0
    pods: int = 1
    request: Resources = field(default_factory=_no_resources)
    """Per pod."""
    node_selector: Mapping[str, str] = field(default_factory=_no_labels)
    tolerations: tuple[Toleration, ...] = ()
    not_before: datetime | None = None
    """Backoff: the SJ is not admitted before this moment."""
    fallbacks: tuple[Shape, ...] = ()
    """Smaller configurations, tried in order once the SJ has waited ``fallback_after`` since
    ``waiting_from`` (configuration i + 1 is ``fallbacks[i]``)."""
    fallback_after: timedelta = timedelta(minutes=10)
    waiting_from: datetime | None = None
    """When it started waiting this time: its last interruption, else ``created``."""

    def __post_init__(self) -> None:
        if self.pods < 1:
            raise ValueError(f"{self.key}: pods must be at least 1, got {self.pods}")
        if self.interrupted_count < 0:
            raise ValueError(f"{self.key}: interrupted_count must not be negative")
        _aware(self.created, f"{self.key}: created")
        _aware(self.not_before, f"{self.key}: not_before")
        object.__setattr__(self, "request", _nonnegative(self.request, f"{self.key} request"))
        object.__setattr__(self, "node_selector", frozen_labels(self.node_selector))
        object.__setattr__(self, "tolerations", tuple(self.tolerations))


@dataclass(frozen=True, slots=True)
class InFlightRun:
    """A run already launched whose pods are not all visible as scheduled pods yet."""

    key: str
    pods: int
    request: Resources
    """Per pod."""
    scheduled_pods: int = 0
    node_selector: Mapping[str, str] = field(default_factory=_no_labels)
    tolerations: tuple[Toleration, ...] = ()

    def __post_init__(self) -> None:
        if self.pods < 1 or self.scheduled_pods < 0:
            raise ValueError(f"{self.key}: pods must be >= 1 and scheduled_pods >= 0")
        object.__setattr__(self, "request", _nonnegative(self.request, f"{self.key} request"))
        object.__setattr__(self, "node_selector", frozen_labels(self.node_selector))
        object.__setattr__(self, "tolerations", tuple(self.tolerations))

    @property
    def unscheduled_pods(self) -> int:
        """Pods of the run not yet counted in any node's ``requested``."""
        return max(0, self.pods - self.scheduled_pods)


@dataclass(frozen=True)
class NamespaceQuota:
    """What one namespace's SJ runs may request at once (a cap per resource; absent: none) and its fair-share
    weight: the tightest of every quota that applies to it (`policy.tenancy.effective_quotas`)."""

    hard: Resources = field(default_factory=_no_resources)
    """A cap of 0 is a cap (nothing of that resource), unlike a zero amount elsewhere: it is kept."""
    weight: int = 1
    capped_by: Mapping[str, str] = field(default_factory=_no_labels)
    """Per capped resource, the quota whose cap it is, as a message names it (``ScavengerClusterQuota
    tenants``)."""

    def __post_init__(self) -> None:
        if self.weight < 1:
            raise ValueError(f"weight must be at least 1, got {self.weight}")
        if any(amount < 0 for amount in self.hard.values()):
            raise ValueError("a cap must not be negative")
        object.__setattr__(self, "hard", MappingProxyType(dict(self.hard)))
        object.__setattr__(self, "capped_by", MappingProxyType(dict(self.capped_by)))


@dataclass(frozen=True)
class ClusterSnapshot:
    """Everything one admission pass looks at, taken at one moment."""

    nodes: tuple[NodeView, ...] = ()
    cluster_requested: Resources = field(default_factory=_no_resources)
    """Sum of the requests of every non-terminated pod in the cluster, scheduled or not, but those the scheduler
    found no node for and nominated none (`observed.PodView.unschedulable`) and those no scheduler it counts will
    place (`observed.PodView.unclaimed`)."""
    in_flight: tuple[InFlightRun, ...] = ()
    queue: tuple[QueuedSJ, ...] = ()
    quotas: Mapping[str, NamespaceQuota] = field(default_factory=dict)
    """The effective quota of each namespace some quota applies to (`policy.tenancy.effective_quotas`)."""
    default_quota: NamespaceQuota | None = None
    """What every other namespace gets (the operator's defaults); None: no cap and weight 1. With neither
    this nor any ``quotas``, one queue for all (no fair share, no caps)."""
    namespace_used: Mapping[str, Resources] = field(default_factory=dict)
    """What each namespace's SJ pods request now, scheduled or not (in-flight runs' unseen pods too): its pods in
    the scavenger band, whatever their labels (`memo.PodSums`)."""

    def __post_init__(self) -> None:
        nodes = tuple(self.nodes)
        names = [node.name for node in nodes]
        if len(set(names)) != len(names):
            raise ValueError("node names must be unique")
        object.__setattr__(self, "nodes", nodes)
        object.__setattr__(self, "cluster_requested", _nonnegative(self.cluster_requested, "cluster_requested"))
        object.__setattr__(self, "in_flight", tuple(self.in_flight))
        object.__setattr__(self, "queue", tuple(self.queue))
