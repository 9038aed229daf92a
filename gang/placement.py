"""Whole-gang placement: put every pod of a gang on free node capacity at once, or none of them.

The pods of a gang are identical, so a node's contribution is just how many of them it can hold:
``capacity = min over requested resources of floor(free / request)``. The gang fits exactly when the
capacities of the eligible nodes add up to at least the gang size, so feasibility is never misjudged;
the heuristic only chooses *which* nodes, and never puts more on a node than its capacity.

Heuristic ("first fit, split largest-first"), deterministic, over nodes in name order:

1. Put all remaining pods on the *first* node that can hold them all. Done.
2. If no node can, fill the node with the *largest* capacity (the first of equals) and repeat with the
   pods left.

A single pod therefore goes to the first node with room (first fit packs low-named nodes and keeps
whole nodes free for big gangs), and a gang lands on one node whenever any node holds it. A gang that
must be split uses the fewest nodes possible, which matters because disrupting any one of its nodes
cancels the whole run. First fit also makes a whole admission pass cheap: free capacity only shrinks
during a pass, so the search for a given request can resume where the previous one stopped.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Protocol, TypeAlias

Resources: TypeAlias = Mapping[str, int]
"""Resource name to amount in milli-units (``cpu: 500m`` is 500)."""


@dataclass(frozen=True)
class Taint:
    """A node taint; only ``NoSchedule`` and ``NoExecute`` keep pods off a node."""

    key: str
    value: str
    effect: str


class Toleration(Protocol):
    """A pod toleration with Kubernetes semantics; an empty or missing operator means ``Equal``."""

    @property
    def key(self) -> str | None: ...
    @property
    def operator(self) -> str | None: ...
    @property
    def value(self) -> str | None: ...
    @property
    def effect(self) -> str | None: ...


class Node(Protocol):
    """What placement reads of a node."""

    @property
    def name(self) -> str: ...
    @property
    def labels(self) -> Mapping[str, str]: ...
    @property
    def taints(self) -> Sequence[Taint]: ...
    @property
    def unschedulable(self) -> bool: ...
    @property
    def free(self) -> Resources: ...

SCHEDULING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
"""Taint effects that keep a new pod off a node unless tolerated."""

UNBOUNDED = sys.maxsize
"""Capacity of a node for pods that request nothing."""


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """Kubernetes ``ToleratesTaint``: an empty effect or key matches all, ``Exists`` ignores the value."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    if toleration.operator in (None, "", "Equal"):
        return (toleration.value or "") == taint.value
    return False


def node_accepts(node: Node, node_selector: Mapping[str, str], tolerations: Sequence[Toleration]) -> bool:
    """True when a pod with this selector and these tolerations may be scheduled on ``node``."""
    if node.unschedulable:
        return False
    labels = node.labels
    if any(labels.get(key) != value for key, value in node_selector.items()):
        return False
    return all(
        any(tolerates(toleration, taint) for toleration in tolerations)
        for taint in node.taints
        if taint.effect in SCHEDULING_EFFECTS
    )


def pods_that_fit(request: Resources, free: Resources) -> int:
    """How many pods with ``request`` fit in ``free`` (``UNBOUNDED`` when the request is empty)."""
    counts = [free.get(name, 0) // amount for name, amount in request.items() if amount > 0]
    if not counts:
        return UNBOUNDED
    return max(0, min(counts))


def place_identical(pods: int, names: Sequence[str], capacities: Sequence[int]) -> tuple[str, ...] | None:
    """Spread ``pods`` identical pods over nodes that hold ``capacities[i]`` of them each.

    Applies the module's heuristic with the nodes in the order of ``names``. Returns the node name of
    every pod, or ``None`` when the capacities add up to fewer than ``pods``.
    """
    if pods < 1:
        raise ValueError(f"pods must be at least 1, got {pods}")
    if len(names) != len(capacities):
        raise ValueError("names and capacities must have the same length")
    left = list(capacities)
    if sum(filter((0).__lt__, left)) < pods:
        return None
    remaining = pods
    placement: list[str] = []
    # Each round either places the rest or fills (and so retires) one node: at most one round a node.
    for _ in range(len(left)):
        first_holding = next(filter((remaining - 1).__lt__, left), 0)
        if first_holding:
            placement.extend(repeat(names[left.index(first_holding)], remaining))
            return tuple(placement)
        largest = max(left)
        index = left.index(largest)
        placement.extend(repeat(names[index], largest))
        remaining -= largest
        left[index] = 0
    raise AssertionError(f"placing {pods} pods on capacities {list(capacities)} did not end")  # pragma: no cover


def fit_gang(
    pods: int,
    request: Resources,
    nodes: Sequence[Node],
    node_selector: Mapping[str, str],
    tolerations: Sequence[Toleration],
) -> tuple[str, ...] | None:
    """Node name for each of ``pods`` pods requesting ``request`` each, or ``None`` if the gang does not fit.

    Only schedulable nodes matching ``node_selector`` whose scheduling taints are all tolerated are
    used; each pod goes on a node's free capacity (allocatable minus requested).
    """
    eligible = sorted(
        (node for node in nodes if node_accepts(node, node_selector, tolerations)),
        key=lambda node: node.name,
    )
    return place_identical(
        pods,
        [node.name for node in eligible],
        [pods_that_fit(request, node.free) for node in eligible],
    )
