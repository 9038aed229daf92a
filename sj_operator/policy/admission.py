"""Admission: which waiting ScavengerJobs start now, and on which nodes.

``decide`` walks the queue in ``queue_order`` and admits an SJ when both hold:

(a) **Threshold.** For every resource the SJ requests: ``cluster_requested`` + the requests of the
    pods of in-flight runs not yet scheduled + the SJs admitted earlier in this pass + the whole gang
    <= ``threshold`` x the allocatable of all schedulable (non-cordoned) nodes. A resource that no
    schedulable node has therefore admits nothing that requests it. In-flight pods that exist but are
    still pending are already in ``cluster_requested`` and are counted once more: conservative, and
    only until the run's pods are scheduled or its start times out.
(b) **Placement.** ``gang.placement`` finds a node for every pod of the gang at once on free capacity,
    where free is allocatable minus requested, minus the unscheduled pods of in-flight runs (placed
    with the same heuristic, as many of them as fit) and minus the placements of SJs admitted earlier
    in this pass. So one pass never admits two SJs into the same room.

An SJ that is not admitted is skipped, and SJs behind it may still start (backfill). ``decide_pass``
also says why each one waits (``Waiting``): ``ThresholdReached`` when (a) fails, ``NoNodeFitsGang`` when
(b) fails or a starving head keeps the room that frees up, each with the numbers (what the SJ needs,
what is free) as this pass saw them.

**Starvation rule.** The *head* is the first SJ in queue order that is eligible (``not_before``
reached, no run in flight), is not admitted in this pass, and could run on this cluster at all
(the whole gang is within the threshold of total allocatable and places on the nodes' full
allocatable). The head is *starving* once it has waited longer than ``starvation_after`` since
``created``, or since ``not_before`` when that is later. A starving head ends the pass: nothing
behind it is admitted until it starts, so all capacity that frees up drains to it, and backfill can
never delay it. A head that is not starving does not block anything. Only the head blocks, so a
starving SJ further back waits until everything ahead of it has started or become a starving head
itself. An SJ that could not run even on an empty cluster never becomes head, so it cannot stall the
queue forever; capacity held by long-lived non-SJ workloads can still keep a starving head (and so
the queue) waiting, which is the price of never delaying it.

The pass is fast because free capacity only shrinks during it. Most SJs are rejected in
O(resources): by the threshold, by the largest and the total free amount per resource, and by
remembering, per request and node eligibility, the smallest gang that did not place (any gang at
least that large cannot place either). The first-fit search for a request resumes where the previous
one stopped, since the nodes it passed cannot have gained room, so the single-node searches of a
whole pass cost O(nodes) per distinct request. Only a gang that no single node holds computes the
capacity of every node, over column-wise integer lists.
"""

from __future__ import annotations

import functools
import heapq
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from fractions import Fraction
from itertools import repeat
from operator import attrgetter, floordiv, mul
from typing import Literal

from gang.placement import UNBOUNDED, node_accepts, place_identical
from sj_operator.policy.lifecycle import FOREVER
from sj_operator.policy.queue import (
    DEFAULT_POLICY,
    PolicyConfig,
    is_starving,
    queue_order,
    waiting_again_since,
    waiting_since,
)
from sj_operator.policy.snapshot import (
    ClusterSnapshot,
    NamespaceQuota,
    NodeView,
    QueuedSJ,
    Resources,
    Taint,
    Toleration,
)
from sj_operator.resources import format_amount
from sj_operator.settings import DEFAULT_POOL, Pool

_Need = tuple[tuple[str, int], ...]
_EligibilityKey = tuple[frozenset[tuple[str, str]], tuple[Toleration, ...], int]
_ANY_POOL = -1
_NO_SELECTOR: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class Admission:
    """Start a run of the SJ ``key`` now; ``nodes`` names the node chosen for each pod."""

    key: str
    nodes: tuple[str, ...]
    config_index: int = 0
    """0: the preferred configuration; i: the SJ's fallbacks[i - 1]."""


RoomReason = Literal["ThresholdReached", "NoNodeFitsGang", "QuotaExceeded"]


@dataclass(frozen=True)
class Waiting:
    """Why the SJ ``key`` was not admitted in this pass, with the numbers."""

    key: str
    reason: RoomReason
    message: str


@dataclass(frozen=True)
class AdmissionPass:
    admitted: list[Admission]
    waiting: dict[str, Waiting]
    """Every eligible SJ of the queue that was not admitted, by key."""


def decide(snapshot: ClusterSnapshot, now: datetime, config: PolicyConfig = DEFAULT_POLICY) -> list[Admission]:
    """The SJs to start now, in queue order, each with a node per pod (see the module docstring)."""
    return decide_pass(snapshot, now, config, explain=False).admitted


@dataclass
class Eligibility:
    """Which nodes each node selector and set of tolerations may use, kept between passes by a caller
    that runs many (`decide_pass`'s ``eligibility``): the same while no node comes or goes and none
    changes its labels, taints or schedulability, and the pools are the same. In a burst a pass has
    hundreds of runs in flight and waiting SJs of a few such shapes, and the nodes' free room changes
    from pass to pass while who may use them does not. At most ``most`` masks are kept (past that they
    are worked out again from none: SJs that each name nodes of their own would otherwise grow it
    without bound while the nodes stay the same)."""

    _nodes: tuple[tuple[str, Mapping[str, str], tuple[Taint, ...], bool], ...] = ()
    _pools: tuple[Pool, ...] = ()
    masks: dict[_EligibilityKey, list[bool] | None] = field(default_factory=dict)
    """By selector, tolerations and pool (`_PassState._mask`), over the schedulable nodes by name."""
    most: int = 1024

    def for_pass(self, nodes: Sequence[NodeView], pools: Sequence[Pool]) -> dict[_EligibilityKey, list[bool] | None]:
        """The masks that hold for ``nodes`` and ``pools`` (none yet when either changed)."""
        placing = tuple((n.name, n.labels, n.taints, n.unschedulable) for n in nodes)
        if placing != self._nodes or tuple(pools) != self._pools or len(self.masks) > self.most:
            self._nodes, self._pools, self.masks = placing, tuple(pools), {}
        return self.masks


def decide_pass(snapshot: ClusterSnapshot, now: datetime, config: PolicyConfig = DEFAULT_POLICY, *,
                explain: bool = True, ordered: Sequence[QueuedSJ] | None = None,
                eligibility: Eligibility | None = None) -> AdmissionPass:
    """``decide``, and (``explain``) why each eligible SJ that is not admitted waits. ``ordered``: the
    snapshot's queue already in ``queue_order`` at ``now`` (a caller that keeps it between passes);
    ``eligibility``: the node masks of the caller's last passes (the result is the same without)."""
    if now.utcoffset() is None:
        raise ValueError(f"now must be timezone-aware, got {now!r}")
    state = _PassState(snapshot.nodes, snapshot.cluster_requested, Fraction(str(config.threshold)), config.pools,
                       None if eligibility is None else eligibility.for_pass(snapshot.nodes, config.pools))
    taken: set[str] = set()
    for run in snapshot.in_flight:
        taken.add(run.key)
        state.reserve_in_flight(run.unscheduled_pods, _need(run.request), run.node_selector, run.tolerations)

    admissions: list[Admission] = []
    waiting: dict[str, Waiting] = {}
    head_found = False
    head: QueuedSJ | None = None
    kept = ""
    fair = _FairShare(snapshot, state.totals()) if snapshot.quotas or snapshot.default_quota else None
    ordered = queue_order(snapshot.queue, now, config) if ordered is None else ordered
    for sj in ordered if fair is None else fair.order(ordered):
        if sj.key in taken or (sj.not_before is not None and sj.not_before > now):
            continue
        if head is not None:  # the same words for every SJ behind it, but its own needs
            kept = kept or _kept_for(head)
            waiting[sj.key] = Waiting(sj.key, "NoNodeFitsGang", f"{_gang(sj)}; {kept}")
            continue
        need = _need(sj.request)
        over_quota = fair.over_quota(sj.key, sj.pods, need) if fair is not None else None
        admission = _place(state, sj, need, now, fair, preferred=over_quota is None)
        if admission is not None:
            taken.add(sj.key)
            admissions.append(admission)
            continue
        if explain:
            waiting[sj.key] = (state.why_not(sj, need) if over_quota is None
                               else Waiting(sj.key, "QuotaExceeded", f"{_gang(sj)}; {over_quota}"))
        if over_quota is None and not head_found and state.could_ever_fit(sj.pods, need, sj.node_selector,
                                                                         sj.tolerations):
            head_found = True
            head = sj if is_starving(sj, now, config) else None
            if head is not None and not explain:
                break
    return AdmissionPass(admissions, waiting)


_TICK = timedelta(microseconds=1)


def settled_until(queue: Iterable[QueuedSJ], now: datetime, config: PolicyConfig = DEFAULT_POLICY) -> datetime:
    """The first moment after ``now`` at which time alone can change what ``decide_pass`` returns for the
    same snapshot (exclusive; ``FOREVER`` when none): an SJ's backoff ends, its aging moves it up a rank,
    it starts starving, or it may run a fallback. Until then a decision loop may reuse the pass."""
    soonest = FOREVER
    step, cap, starving = config.aging_step, config.aging_cap, config.starvation_after
    for sj in queue:
        if sj.not_before is not None and now < sj.not_before < soonest:
            soonest = sj.not_before
        start = waiting_again_since(sj)
        steps = max(now - start, timedelta(0)) // step
        if steps < cap and (aged := start + (steps + 1) * step) < soonest:
            soonest = aged
        if now <= (starts := waiting_since(sj) + starving) and starts + _TICK < soonest:
            soonest = starts + _TICK  # starving once strictly past
        if sj.fallbacks and now < (falls := (sj.waiting_from or sj.created) + sj.fallback_after) < soonest:
            soonest = falls
    return soonest


def _place(state: _PassState, sj: QueuedSJ, need: _Need, now: datetime, fair: _FairShare | None, *,
           preferred: bool) -> Admission | None:
    """The preferred configuration if it may run (``preferred``: its namespace's quota allows it) and
    places, else a fallback that does (committed either way)."""
    placement = state.try_place(sj.pods, need, sj.node_selector, sj.tolerations) if preferred else None
    if placement is not None:
        state.commit(placement, need)
        if fair is not None:
            fair.charge(sj.key, len(placement), need)
        return Admission(sj.key, placement)
    return _fallback(state, sj, now, fair)


def _fallback(state: _PassState, sj: QueuedSJ, now: datetime, fair: _FairShare | None) -> Admission | None:
    """The first fallback configuration that places (within the namespace's quota), once the preferred
    one has waited long enough."""
    if not sj.fallbacks or now - (sj.waiting_from or sj.created) < sj.fallback_after:
        return None
    for index, shape in enumerate(sj.fallbacks, start=1):
        need = _need(shape.request)
        if fair is not None and fair.over_quota(sj.key, shape.pods, need) is not None:
            continue
        placement = state.try_place(shape.pods, need, shape.node_selector, shape.tolerations)
        if placement is not None:
            state.commit(placement, need)
            if fair is not None:
                fair.charge(sj.key, shape.pods, need)
            return Admission(sj.key, placement, index)
    return None


class _FairShare:
    """Fair share between namespaces once any quota applies (dominant resource fairness).

    The next SJ comes from the namespace furthest below its weighted share: the one whose dominant share
    (the largest, over resources, of what its SJ pods request over what the schedulable nodes hold),
    divided by its weight, is smallest; within a namespace the queue order stays. A namespace's
    ``hard`` caps what its SJ runs request at once. Each namespace's quota is its effective one
    (`policy.tenancy.effective_quotas`); a namespace without one has the snapshot's ``default_quota``, else
    weight 1 and no cap.
    """

    def __init__(self, snapshot: ClusterSnapshot, totals: Mapping[str, int]) -> None:
        self._quotas = snapshot.quotas
        self._default = snapshot.default_quota
        self._used = {ns: dict(res) for ns, res in snapshot.namespace_used.items()}
        self._totals = {r: amount for r, amount in totals.items() if amount > 0 and r != "pods"}

    def _quota(self, namespace: str) -> NamespaceQuota | None:
        return self._quotas.get(namespace, self._default)

    def _share(self, namespace: str) -> Fraction:
        used = self._used.get(namespace, {})
        quota = self._quota(namespace)
        dominant = max((Fraction(used.get(r, 0), total) for r, total in self._totals.items()), default=Fraction(0))
        return dominant / (quota.weight if quota is not None else 1)

    def order(self, ordered: Sequence[QueuedSJ]) -> Iterator[QueuedSJ]:
        """``ordered`` re-dealt by namespace: each next SJ from the namespace with the smallest weighted
        dominant share at that moment (what the pass admitted so far counts)."""
        by_namespace: dict[str, deque[QueuedSJ]] = {}
        for sj in ordered:
            by_namespace.setdefault(_namespace(sj.key), deque()).append(sj)
        heap = [(self._share(ns), ns) for ns in by_namespace]
        heapq.heapify(heap)
        while heap:
            share, ns = heapq.heappop(heap)
            current = self._share(ns)
            if current != share:  # charged since it was queued: take its place again
                heapq.heappush(heap, (current, ns))
                continue
            yield by_namespace[ns].popleft()
            if by_namespace[ns]:
                heapq.heappush(heap, (self._share(ns), ns))

    def over_quota(self, key: str, pods: int, need: _Need) -> str | None:
        """Why the namespace's quota refuses ``pods`` more pods of ``need``, or None."""
        namespace = _namespace(key)
        quota = self._quota(namespace)
        if quota is None:
            return None
        used = self._used.get(namespace, {})
        for r, amount in need:
            cap = quota.hard.get(r)
            if cap is not None and used.get(r, 0) + amount * pods > cap:
                return (f"namespace {namespace} may request {_amount(r, cap)} for its SJs at once "
                        f"({quota.capped_by.get(r, 'its quota')}) and they request {_amount(r, used.get(r, 0))}")
        return None

    def charge(self, key: str, pods: int, need: _Need) -> None:
        used = self._used.setdefault(_namespace(key), {})
        for r, amount in need:
            used[r] = used.get(r, 0) + amount * pods


def _namespace(key: str) -> str:
    return key.split("/", 1)[0]


def _kept_for(head: QueuedSJ) -> str:
    """Behind a starving head: the room that frees up is kept for it."""
    return (f"the room that frees up is kept for {head.key}, first in the queue and waiting since "
            f"{waiting_since(head).isoformat()}")


def _amount(resource: str, milli: int) -> str:
    """``4 CPU``, ``8Gi memory``, ``1 nvidia.com/gpu``."""
    text = format_amount(resource, milli)
    return f"{text} {resource}" if resource in ("memory", "ephemeral-storage") else text


def _gang(sj: QueuedSJ) -> str:
    """``needs 3 pods of 4 CPU, 8Gi memory``: what one SJ asks for."""
    return _gang_text(sj.pods, tuple(sorted(sj.request.items())))


@functools.lru_cache(maxsize=4096)
def _gang_text(pods: int, request: tuple[tuple[str, int], ...]) -> str:
    """``_gang`` by value: a queue of thousands has a few shapes."""
    each = ", ".join(_amount(r, amount) for r, amount in request if amount > 0 and r != "pods")
    return f"needs {pods} pod{'s' if pods != 1 else ''} of {each or 'no resources'}"


def _need(request: Resources) -> _Need:
    return tuple((name, amount) for name, amount in request.items() if amount > 0)


@dataclass
class _PoolState:
    """One pool's threshold bookkeeping in a pass: what its schedulable nodes hold, what may be requested
    on it, and what is."""

    index: int
    name: str
    threshold: Fraction
    allocatable: dict[str, int]
    limit: dict[str, int]
    used: dict[str, int]

    def over(self, need: _Need, pods: int) -> tuple[str, int] | None:
        """The first resource (and its amount per pod) whose limit ``pods`` more pods of ``need`` pass."""
        used, limit = self.used, self.limit
        for r, amount in need:
            if used.get(r, 0) + amount * pods > limit.get(r, 0):
                return r, amount
        return None


def _pool_index(node: NodeView, pools: Sequence[Pool]) -> int:
    """0 for the default pool, else 1 + the index of the first pool whose selector the node matches."""
    return next((index for index, pool in enumerate(pools, start=1) if pool.matches(node.labels)), 0)


def _pools(all_nodes: Sequence[NodeView], schedulable: Sequence[NodeView], cluster_requested: Resources,
           threshold: Fraction, pools: Sequence[Pool], pool_of: Mapping[str, int],
           allocatable: Mapping[str, list[int]]) -> list[_PoolState]:
    """The default pool and the configured ones. Without pools the default pool is the whole cluster
    and what every pod requests counts in it; with pools, what a node's pods request counts in its
    pool, and pods bound to no node count in the default pool."""
    if not pools:
        totals = {r: sum(column) for r, column in allocatable.items()}
        return [_PoolState(0, DEFAULT_POOL, threshold, totals, _limit(totals, threshold), dict(cluster_requested))]
    thresholds = [threshold, *(Fraction(str(pool.threshold)) for pool in pools)]
    names = [DEFAULT_POOL, *(pool.name for pool in pools)]
    totals_of: list[dict[str, int]] = [{} for _ in names]
    used_of: list[dict[str, int]] = [{} for _ in names]
    for node in schedulable:
        totals = totals_of[pool_of[node.name]]
        for r, amount in node.allocatable.items():
            totals[r] = totals.get(r, 0) + amount
    unbound = dict(cluster_requested)
    for node in all_nodes:
        used = used_of[pool_of[node.name]]
        for r, amount in node.requested.items():
            used[r] = used.get(r, 0) + amount
            unbound[r] = unbound.get(r, 0) - amount
    for r, amount in unbound.items():
        if amount > 0:
            used_of[0][r] = used_of[0].get(r, 0) + amount
    return [_PoolState(index, names[index], thresholds[index], totals_of[index],
                       _limit(totals_of[index], thresholds[index]), used_of[index]) for index in range(len(names))]


def _limit(totals: Mapping[str, int], threshold: Fraction) -> dict[str, int]:
    return {r: amount * threshold.numerator // threshold.denominator for r, amount in totals.items()}


class _PassState:
    """Mutable bookkeeping private to one ``decide`` call.

    Schedulable nodes are kept sorted by name (the placement order) and per-node amounts are stored
    column-wise, one ``list[int]`` per resource. Free capacity only shrinks during a pass, which the
    caches below rely on.
    """

    def __init__(self, nodes: Sequence[NodeView], cluster_requested: Resources, threshold: Fraction,
                 pools: Sequence[Pool] = (), masks: dict[_EligibilityKey, list[bool] | None] | None = None) -> None:
        self._nodes = sorted((node for node in nodes if not node.unschedulable), key=attrgetter("name"))
        self._names = [node.name for node in self._nodes]
        self._position = {name: index for index, name in enumerate(self._names)}
        resources = sorted({name for node in self._nodes for name in node.allocatable})
        self._allocatable = {r: [node.allocatable.get(r, 0) for node in self._nodes] for r in resources}
        self._free = {
            r: [node.allocatable.get(r, 0) - node.requested.get(r, 0) for node in self._nodes] for r in resources
        }
        self._free_total = {r: sum(filter((0).__lt__, column)) for r, column in self._free.items()}
        self._max_free = {r: max(column) for r, column in self._free.items()}
        self._stale_max: set[str] = set()
        pool_of = {node.name: _pool_index(node, pools) for node in nodes} if pools else {}
        self._pools = _pools(nodes, self._nodes, cluster_requested, threshold, pools, pool_of, self._allocatable)
        self._pool_of = [pool_of.get(node.name, 0) for node in self._nodes]
        self._reserved = 0
        """Reservations made so far in the pass: a cached explanation of a shape is valid while it is equal."""
        self._why_cache: dict[tuple[_Need, _EligibilityKey, int], tuple[int, RoomReason, str]] = {}
        self._eligibility: dict[_EligibilityKey, list[bool] | None] = {} if masks is None else masks
        self._reached: dict[_EligibilityKey, frozenset[int]] = {}
        # (need, eligibility) -> smallest gang size that did not place.
        self._smallest_unplaced: dict[tuple[_Need, _EligibilityKey], int] = {}
        # (need, eligibility, pods) -> first node that may still hold that many pods (first-fit cursor).
        self._first_fit_cursor: dict[tuple[_Need, _EligibilityKey, int], int] = {}
        # (need, eligibility) -> pods the nodes would hold if they were empty.
        self._empty_capacity: dict[tuple[_Need, _EligibilityKey], int] = {}

    def reserve_in_flight(
        self, pods: int, need: _Need, node_selector: Mapping[str, str], tolerations: Sequence[Toleration]
    ) -> None:
        """Count a launched run's unscheduled pods against the threshold and reserve room for those that fit.

        Where one node holds them all, that is the first such node (`gang.placement.place_identical`'s first
        step), found from the first-fit cursor without working out every node's capacity: in a burst there
        are hundreds of runs in flight, most of them one pod each."""
        if pods < 1:
            return
        key, mask = self._mask(node_selector, tolerations)
        index = self._first_holding(need, key, mask, pods)
        if index is not None:
            self._take(index, pods, need)
            return
        capacities = self._capacities(need, mask, self._free)
        placeable = min(pods, sum(filter((0).__lt__, capacities)))
        self._charge(need, pods - placeable, self._pools[0])  # pods that find no room count in the default pool
        if placeable:
            placement = place_identical(placeable, self._names, capacities)
            assert placement is not None
            self.commit(placement, need)

    def try_place(
        self, pods: int, need: _Need, node_selector: Mapping[str, str], tolerations: Sequence[Toleration]
    ) -> tuple[str, ...] | None:
        """Nodes for the gang if it passes the threshold and places on free capacity, else ``None``. With
        pools, the gang runs within one pool, the first (default first) whose threshold allows it and
        where it places."""
        for pool in self._pools:
            if pool.over(need, pods) is None:
                key, mask = self._mask(node_selector, tolerations, pool.index)
                if len(self._pools) == 1 or pool.index in self._pools_reached(node_selector, tolerations):
                    placement = self._place_in(pods, need, key, mask)
                    if placement is not None:
                        return placement
        return None

    def _pools_reached(self, node_selector: Mapping[str, str], tolerations: Sequence[Toleration]) -> frozenset[int]:
        """The pools holding a node the SJ may use."""
        key, mask = self._mask(node_selector, tolerations)
        reached = self._reached.get(key)
        if reached is None:
            reached = frozenset(range(len(self._pools)) if mask is None else
                                (pool for pool, eligible in zip(self._pool_of, mask, strict=True) if eligible))
            self._reached[key] = reached
        return reached

    def _place_in(
        self, pods: int, need: _Need, key: _EligibilityKey, mask: list[bool] | None
    ) -> tuple[str, ...] | None:
        shape = (need, key)
        if pods >= self._smallest_unplaced.get(shape, UNBOUNDED):
            return None
        if not self._might_fit(need, pods):
            self._smallest_unplaced[shape] = pods
            return None
        # Step 1 of the heuristic, without computing every node's capacity.
        index = self._first_holding(need, key, mask, pods)
        if index is not None:
            return (self._names[index],) * pods
        placement = None
        if pods > 1:
            placement = place_identical(pods, self._names, self._capacities(need, mask, self._free))
        if placement is None:
            self._smallest_unplaced[shape] = pods
        return placement

    def commit(self, placement: tuple[str, ...], need: _Need) -> None:
        """Account for an admitted gang: threshold usage (in each node's pool) and node capacity."""
        for name, count in Counter(placement).items():
            self._take(self._position[name], count, need)

    def could_ever_fit(
        self, pods: int, need: _Need, node_selector: Mapping[str, str], tolerations: Sequence[Toleration]
    ) -> bool:
        """True when the gang would be admitted on this cluster with nothing else running."""
        for pool in self._pools:
            if any(amount * pods > pool.limit.get(r, 0) for r, amount in need):
                continue
            key, mask = self._mask(node_selector, tolerations, pool.index)
            shape = (need, key)
            if shape not in self._empty_capacity:
                capacities = self._capacities(need, mask, self._allocatable)
                self._empty_capacity[shape] = sum(filter((0).__lt__, capacities))
            if self._empty_capacity[shape] >= pods:
                return True
        return False

    def totals(self) -> dict[str, int]:
        """The allocatable of the schedulable nodes, per resource."""
        return {r: sum(column) for r, column in self._allocatable.items()}

    def why_not(self, sj: QueuedSJ, need: _Need) -> Waiting:
        """Why ``try_place`` refused the SJ in the state the pass is in now, with the numbers. Explanations
        are shared by SJs of one shape until the pass takes more room."""
        key, _ = self._mask(sj.node_selector, sj.tolerations)
        shape = (need, key, sj.pods)
        cached = self._why_cache.get(shape)
        if cached is None or cached[0] != self._reserved:
            cached = (self._reserved, *self._explain(sj, need))
            self._why_cache[shape] = cached
        return Waiting(sj.key, cached[1], cached[2])

    def _explain(self, sj: QueuedSJ, need: _Need) -> tuple[RoomReason, str]:
        """The first pool the SJ may use whose threshold allows it says why it does not fit; when every
        such pool's threshold is reached, the first of them says by how much."""
        reached = self._pools_reached(sj.node_selector, sj.tolerations)
        pools = [pool for pool in self._pools if pool.index in reached]
        for pool in pools:
            if pool.over(need, sj.pods) is None:
                reason, why = self._no_fit(sj, need, self._mask(sj.node_selector, sj.tolerations, pool.index)[1])
                return reason, f"{_gang(sj)}; {why}"
        if not pools:
            reason, why = self._no_fit(sj, need, self._mask(sj.node_selector, sj.tolerations)[1])
            return reason, f"{_gang(sj)}; {why}"
        pool = pools[0]
        over = pool.over(need, sj.pods)
        assert over is not None
        r, amount = over
        where = f" of pool {pool.name}" if len(self._pools) > 1 else ""
        if not pool.allocatable.get(r):
            return "ThresholdReached", f"{_gang(sj)}; no schedulable node{where} has {r}"
        return "ThresholdReached", (
            f"{_gang(sj)} ({_amount(r, amount * sj.pods)} in all); requests may reach "
            f"{float(pool.threshold):.0%} of the {_amount(r, pool.allocatable[r])} allocatable{where} "
            f"({_amount(r, pool.limit.get(r, 0))}) and {_amount(r, pool.used.get(r, 0))} is requested")

    def _no_fit(self, sj: QueuedSJ, need: _Need, mask: list[bool] | None) -> tuple[RoomReason, str]:
        eligible = [i for i in range(len(self._nodes)) if mask is None or mask[i]]
        if not eligible:
            return "NoNodeFitsGang", "no schedulable node matches its nodeSelector and tolerations"
        for r, amount in need:
            column = self._free.get(r)
            if column is None:
                return "NoNodeFitsGang", f"no node it may use has {r}"
            best = max(eligible, key=column.__getitem__)
            if column[best] < amount:
                return "NoNodeFitsGang", (f"the largest free {r} on a node it may use is "
                                          f"{_amount(r, max(column[best], 0))} on {self._names[best]}")
        room = sum(filter((0).__lt__, self._capacities(need, mask, self._free)))
        return "NoNodeFitsGang", (f"the free room of the {len(eligible)} node(s) it may use holds {room} of the "
                                  f"{sj.pods} pods at once")

    def _mask(
        self, node_selector: Mapping[str, str], tolerations: Sequence[Toleration], pool: int = _ANY_POOL
    ) -> tuple[_EligibilityKey, list[bool] | None]:
        """Cache key of the node eligibility (in ``pool``, or in any) and the mask of eligible nodes
        (``None``: all)."""
        key = (_NO_SELECTOR if not node_selector else frozenset(node_selector.items()),
               () if not tolerations else tuple(tolerations), pool)
        try:
            return key, self._eligibility[key]
        except KeyError:
            pass
        accepted = [node_accepts(node, node_selector, tolerations) for node in self._nodes]
        if pool != _ANY_POOL and len(self._pools) > 1:
            accepted = [ok and index == pool for ok, index in zip(accepted, self._pool_of, strict=True)]
        mask = None if all(accepted) else accepted
        self._eligibility[key] = mask
        return key, mask

    def _first_holding(self, need: _Need, key: _EligibilityKey, mask: list[bool] | None, pods: int) -> int | None:
        """Index of the first eligible node with room for ``pods`` pods, resuming the last search."""
        if any(r not in self._free for r, _ in need):
            return None
        cursor_key = (need, key, pods)
        columns = [(self._free[r], amount * pods) for r, amount in need]
        index = self._first_fit_cursor.get(cursor_key, 0)
        end = len(self._nodes)
        while index < end:
            if mask is None or mask[index]:
                for column, amount in columns:
                    if column[index] < amount:
                        break
                else:
                    break
            index += 1
        self._first_fit_cursor[cursor_key] = index
        return index if index < end else None

    def _capacities(self, need: _Need, mask: list[bool] | None, columns: dict[str, list[int]]) -> list[int]:
        """Pods of ``need`` each node holds given ``columns``; 0 on nodes outside ``mask``."""
        if not need:
            per_node = [UNBOUNDED] * len(self._nodes)
        else:
            quotients = []
            for r, amount in need:
                column = columns.get(r)
                if column is None:
                    return [0] * len(self._nodes)
                quotients.append(map(floordiv, column, repeat(amount)))
            per_node = list(quotients[0] if len(quotients) == 1 else map(min, *quotients))
        if mask is not None:
            per_node = list(map(mul, per_node, mask))
        return per_node

    def _might_fit(self, need: _Need, pods: int) -> bool:
        """Cheap necessary condition: each pod fits the largest free node and the gang fits the total."""
        for r, amount in need:
            if r not in self._free or amount * pods > self._free_total[r]:
                return False
            if r in self._stale_max:
                self._max_free[r] = max(self._free[r])
                self._stale_max.discard(r)
            if amount > self._max_free[r]:
                return False
        return True

    def _charge(self, need: _Need, pods: int, pool: _PoolState) -> None:
        self._reserved += 1
        used = pool.used
        for r, amount in need:
            used[r] = used.get(r, 0) + amount * pods

    def _take(self, index: int, pods: int, need: _Need) -> None:
        """``pods`` pods of ``need`` on the node at ``index``: its pool's threshold usage and its free room."""
        self._charge(need, pods, self._pools[self._pool_of[index]])
        for r, amount in need:
            column = self._free[r]
            before = column[index]
            after = before - amount * pods
            column[index] = after
            self._free_total[r] += max(after, 0) - max(before, 0)
            if before >= self._max_free[r]:
                self._stale_max.add(r)


__all__ = ["Admission", "AdmissionPass", "Eligibility", "PolicyConfig", "RoomReason", "Waiting", "decide",
           "decide_pass"]
