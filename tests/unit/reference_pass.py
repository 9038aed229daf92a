"""The decision pass's steps worked out from scratch, as the operator once did on every pass: `observe`, the
nodes' views and the admission snapshot. `memo.PassMemo` now builds them incrementally, from what changed
since the last pass; the tests check its answers against these, and the benchmarks never need them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sj_operator.api import InvalidSpec, ScavengerJobSpec, parse_status
from sj_operator.decide import ClusterView, Observation, Observed, OwnedRun, observe_one, quota_table, run_keys
from sj_operator.observed import SJObject
from sj_operator.policy.snapshot import ClusterSnapshot, InFlightRun, NodeView, QueuedSJ, Taint
from sj_operator.policy.tenancy import NO_DEFAULTS, QuotaDefaults
from sj_operator.resources import accumulate, total


def observe(view: ClusterView, *, handles: Callable[[str], bool],
            fresh: Callable[[SJObject], tuple[str, Mapping[str, Any]]],
            spec_of: Callable[[SJObject], ScavengerJobSpec | InvalidSpec]) -> Observation:
    """Pairs each handled SJ with its status, spec and current run (`memo.PassMemo.observe` from scratch)."""
    observed: list[Observed] = []
    known: set[OwnedRun] = set()
    for sj in view.sjs:
        if sj.deleting or not handles(sj.namespace):
            continue
        rv, raw_status = fresh(sj)
        status = parse_status(raw_status)
        keys = run_keys(sj, status)
        known.update((sj.uid, key) for key in keys)
        observed.append(observe_one(sj, rv, raw_status, status, spec_of(sj), view, keys[0] if keys else None))
    return Observation(tuple(observed), frozenset(known))


def node_views(view: ClusterView) -> tuple[NodeView, ...]:
    """The nodes with what their pods request; a NotReady node takes nothing new."""
    per_node: dict[str, dict[str, int]] = {}
    for pod in view.active_pods:
        if pod.node:
            accumulate(per_node.setdefault(pod.node, {}), pod.requests)
    return tuple(
        NodeView(name=n.name, allocatable=n.allocatable, requested=per_node.get(n.name, {}),
                 labels=n.labels, taints=tuple(Taint(k, v, e) for k, v, e in n.taints),
                 unschedulable=n.unschedulable or not n.ready)
        for n in view.nodes
    )


def admission_snapshot(view: ClusterView, queue: tuple[QueuedSJ, ...], runs: tuple[InFlightRun, ...],
                       defaults: QuotaDefaults = NO_DEFAULTS) -> ClusterSnapshot:
    """The snapshot `memo.PassMemo.admission` gives `decide_pass`, made from scratch."""
    quotas = quota_table(view, defaults)
    fair = bool(quotas.namespaces) or quotas.default is not None
    return ClusterSnapshot(nodes=node_views(view),
                           cluster_requested=total(p.requests for p in view.active_pods
                                                   if not (p.unschedulable or p.unclaimed)),
                           in_flight=runs, queue=queue, quotas=quotas.namespaces, default_quota=quotas.default,
                           namespace_used=namespace_used(view, runs) if fair else {})


def namespace_used(view: ClusterView, runs: tuple[InFlightRun, ...]) -> dict[str, dict[str, int]]:
    """What each namespace's pods in the scavenger band request, whatever their labels, scheduled or not, and the
    unscheduled pods of launched runs (counted twice while they are pending: conservative, like the threshold,
    until they are scheduled)."""
    used: dict[str, dict[str, int]] = {}
    for pod in view.active_pods:
        if pod.band:
            accumulate(used.setdefault(pod.namespace, {}), pod.requests)
    for run in runs:
        ns = run.key.split("/", 1)[0]
        accumulate(used.setdefault(ns, {}), {r: a * run.unscheduled_pods for r, a in run.request.items()})
    return used
