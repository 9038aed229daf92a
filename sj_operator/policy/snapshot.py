"""Immutable inputs of the policy core: resources, nodes, the SJ queue and the cluster snapshot.

Every resource amount is an ``int`` in milli-units, whatever the resource: ``cpu: 500m`` is 500,
``memory: 1Gi`` is 1073741824000 and ``nvidia.com/gpu: 1`` is 1000. One unit for all resources keeps
the arithmetic exact and uniform. A resource missing from a mapping counts as 0.

The dataclasses copy every mapping they receive into a read-only view, so a snapshot cannot change
under a decision made from it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from types import MappingProxyType
from typing import TypeAlias

from kubernetes.utils.quantity import parse_quantity

Resources: TypeAlias = Mapping[str, int]
"""Resource name to amount in milli-units."""

EMPTY: Resources = MappingProxyType({})
NO_LABELS: Mapping[str, str] = MappingProxyType({})


def _no_resources() -> Resources:
    return EMPTY


def _no_labels() -> Mapping[str, str]:
    return NO_LABELS


def freeze(res: Mapping[str, int] | None) -> Resources:
    """Return a read-only copy of ``res`` without zero entries; amounts must be ``int``."""
    if not res:
        return EMPTY
    frozen: dict[str, int] = {}
    for name, amount in res.items():
        if not isinstance(amount, int) or isinstance(amount, bool):
            raise TypeError(f"resource {name!r}: amount must be an int in milli-units, got {amount!r}")
        if amount:
            frozen[name] = amount
    return MappingProxyType(frozen)


def add(a: Resources, b: Resources) -> Resources:
    """Per-resource sum ``a + b``."""
    total = dict(a)
    for name, amount in b.items():
        total[name] = total.get(name, 0) + amount
    return freeze(total)


def sub(a: Resources, b: Resources) -> Resources:
    """Per-resource difference ``a - b``; amounts may become negative."""
    diff = dict(a)
    for name, amount in b.items():
        diff[name] = diff.get(name, 0) - amount
    return freeze(diff)


def total(resources: Iterable[Resources]) -> Resources:
    """Per-resource sum of many ``Resources``."""
    acc: dict[str, int] = {}
    for res in resources:
        for name, amount in res.items():
            acc[name] = acc.get(name, 0) + amount
    return freeze(acc)


def scale(res: Resources, n: int) -> Resources:
    """Every amount of ``res`` multiplied by ``n``."""
    return freeze({name: amount * n for name, amount in res.items()})


def fits(need: Resources, free: Resources) -> bool:
    """True when every positive amount of ``need`` is at most the same resource in ``free``."""
    return all(amount <= free.get(name, 0) for name, amount in need.items() if amount > 0)


def to_milli(quantity: str | int | float | Decimal) -> int:
    """Kubernetes quantity (``"500m"``, ``"1Gi"``, ``2``) in milli-units, rounded up like ``MilliValue``."""
    value: Decimal = parse_quantity(quantity)
    return math.ceil(value * 1000)


def parse_resources(quantities: Mapping[str, str | int | float | Decimal] | None) -> Resources:
    """A Kubernetes resource list (``{"cpu": "500m", "memory": "1Gi"}``) as milli-unit ``Resources``."""
    return freeze({name: to_milli(q) for name, q in (quantities or {}).items()})


def _nonnegative(res: Mapping[str, int] | None, what: str) -> Resources:
    frozen = freeze(res)
    negative = sorted(name for name, amount in frozen.items() if amount < 0)
    if negative:
        raise ValueError(f"{what}: negative amounts for {', '.join(negative)}")
    return frozen


def _labels(labels: Mapping[str, str] | None) -> Mapping[str, str]:
    return MappingProxyType(dict(labels)) if labels else NO_LABELS


def _aware(moment: datetime | None, what: str) -> None:
    if moment is not None and moment.utcoffset() is None:
        raise ValueError(f"{what} must be timezone-aware, got {moment!r}")


@dataclass(frozen=True)
class Taint:
    """A node taint; only ``NoSchedule`` and ``NoExecute`` keep pods off a node."""

    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class Toleration:
    """A pod toleration with Kubernetes semantics (``operator`` is ``Equal`` or ``Exists``)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


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
        object.__setattr__(self, "labels", _labels(self.labels))
        object.__setattr__(self, "taints", tuple(self.taints))

    @property
    def free(self) -> Resources:
        """Allocatable minus requested, per resource (negative when the node is overcommitted)."""
        return sub(self.allocatable, self.requested)


@dataclass(frozen=True)
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

    def __post_init__(self) -> None:
        if self.pods < 1:
            raise ValueError(f"{self.key}: pods must be at least 1, got {self.pods}")
        if self.interrupted_count < 0:
            raise ValueError(f"{self.key}: interrupted_count must not be negative")
        _aware(self.created, f"{self.key}: created")
        _aware(self.not_before, f"{self.key}: not_before")
        object.__setattr__(self, "request", _nonnegative(self.request, f"{self.key} request"))
        object.__setattr__(self, "node_selector", _labels(self.node_selector))
        object.__setattr__(self, "tolerations", tuple(self.tolerations))


@dataclass(frozen=True)
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
        object.__setattr__(self, "node_selector", _labels(self.node_selector))
        object.__setattr__(self, "tolerations", tuple(self.tolerations))

    @property
    def unscheduled_pods(self) -> int:
        """Pods of the run not yet counted in any node's ``requested``."""
        return max(0, self.pods - self.scheduled_pods)


@dataclass(frozen=True)
class ClusterSnapshot:
    """Everything one admission pass looks at, taken at one moment."""

    nodes: tuple[NodeView, ...] = ()
    cluster_requested: Resources = field(default_factory=_no_resources)
    """Sum of the requests of every non-terminated pod in the cluster, scheduled or not."""
    in_flight: tuple[InFlightRun, ...] = ()
    queue: tuple[QueuedSJ, ...] = ()

    def __post_init__(self) -> None:
        nodes = tuple(self.nodes)
        names = [node.name for node in nodes]
        if len(set(names)) != len(names):
            raise ValueError("node names must be unique")
        object.__setattr__(self, "nodes", nodes)
        object.__setattr__(self, "cluster_requested", _nonnegative(self.cluster_requested, "cluster_requested"))
        object.__setattr__(self, "in_flight", tuple(self.in_flight))
        object.__setattr__(self, "queue", tuple(self.queue))
