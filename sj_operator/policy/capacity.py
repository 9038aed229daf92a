"""The capacity ledger of one admission pass: what each node and each pool has free, what the thresholds
still allow, and the words for why a gang does not fit.

`policy.admission.decide_pass` walks the queue and asks a `CapacityLedger` whether each SJ fits; the ledger
answers, takes the room of what it admits, and says with the numbers why an SJ does not fit
(``ThresholdReached``: a pool's limit, the threshold x the allocatable of its schedulable nodes;
``NoNodeFitsGang``: no placement on the free room of the nodes the SJ may use). With node pools, each pool
has a limit of its own, and what a node's pods request counts in its pool.

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
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import compress, repeat
from operator import attrgetter, floordiv, is_not, mul
from typing import Literal

from gang.placement import UNBOUNDED, node_accepts, place_identical
from sj_operator.policy.snapshot import NodeView, QueuedSJ, Resources, Toleration
from sj_operator.resources import format_amount
from sj_operator.settings import DEFAULT_POOL, Pool

Need = tuple[tuple[str, int], ...]
"""What one pod requests, as (resource, milli-units) pairs of the positive amounts (`need_of`)."""
EligibilityKey = tuple[frozenset[tuple[str, str]], tuple[Toleration, ...], int]
"""A node selector, tolerations and pool index (`_ANY_POOL`: any): which nodes a gang may use."""
NoRoom = Literal["ThresholdReached", "NoNodeFitsGang"]
"""Why the ledger refuses a gang."""
_ANY_POOL = -1
_NO_SELECTOR: frozenset[tuple[str, str]] = frozenset()


def amount_text(resource: str, milli: int) -> str:
    """``4 CPU``, ``8Gi memory``, ``1 nvidia.com/gpu``."""
    text = format_amount(resource, milli)
    return f"{text} {resource}" if resource in ("memory", "ephemeral-storage") else text


def needs_text(sj: QueuedSJ) -> str:
    """``needs 3 pods of 4 CPU, 8Gi memory``: what one SJ asks for."""
    return _needs_text(sj.pods, tuple(sorted(sj.request.items())))


@functools.lru_cache(maxsize=4096)
def _needs_text(pods: int, request: tuple[tuple[str, int], ...]) -> str:
    """``needs_text`` by value: a queue of thousands has a few shapes."""
    each = ", ".join(amount_text(r, amount) for r, amount in request if amount > 0 and r != "pods")
    return f"needs {pods} pod{'s' if pods != 1 else ''} of {each or 'no resources'}"


def need_of(request: Resources) -> Need:
    """``request``'s positive amounts: what the ledger counts for each pod."""
    return _need(tuple(request.items()))


@functools.lru_cache(maxsize=4096)
def _need(items: tuple[tuple[str, int], ...]) -> Need:
    """``need_of`` by value: a queue of thousands has a few shapes, and an admission pass asks for each SJ's."""
    return tuple((name, amount) for name, amount in items if amount > 0)


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

    def over(self, need: Need, pods: int) -> tuple[str, int] | None:
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


@dataclass(frozen=True)
class _Columns:
    """The schedulable nodes sorted by name, and per resource their allocatable and free room as columns."""

    nodes: list[NodeView]
    names: list[str]
    position: dict[str, int]
    allocatable: dict[str, list[int]]
    free: dict[str, list[int]]
    free_total: dict[str, int]
    max_free: dict[str, int]

    @staticmethod
    def build(nodes: Sequence[NodeView]) -> _Columns:
        schedulable = sorted((node for node in nodes if not node.unschedulable), key=attrgetter("name"))
        names = [node.name for node in schedulable]
        resources = sorted({name for node in schedulable for name in node.allocatable})
        allocatable = {r: [node.allocatable.get(r, 0) for node in schedulable] for r in resources}
        free = {r: [node.allocatable.get(r, 0) - node.requested.get(r, 0) for node in schedulable] for r in resources}
        return _Columns(schedulable, names, {name: i for i, name in enumerate(names)}, allocatable, free,
                        *_totals(free))

    def with_requested(self, changed: Sequence[NodeView]) -> _Columns:
        """These columns after ``changed`` nodes' requests moved (and nothing else of them), copied: a ledger
        made from the columns before may still be in use."""
        nodes, free = list(self.nodes), {r: list(column) for r, column in self.free.items()}
        for node in changed:
            if node.unschedulable:
                continue
            i = self.position[node.name]
            nodes[i] = node
            for r, column in free.items():
                column[i] = self.allocatable[r][i] - node.requested.get(r, 0)
        return _Columns(nodes, self.names, self.position, self.allocatable, free, *_totals(free))


def _totals(free: Mapping[str, list[int]]) -> tuple[dict[str, int], dict[str, int]]:
    """Per resource, the free room of the nodes that have some, and the most any node has."""
    return ({r: sum(filter((0).__lt__, column)) for r, column in free.items()},
            {r: max(column) for r, column in free.items()})


class NodeColumns:
    """The ledger's columns of the nodes, kept between passes by a caller that runs many (`policy.admission`'s
    `Eligibility`): when only a few nodes' requests moved since the last pass (another workload's pod
    landed), theirs are worked out again and the rest copied; otherwise all are made anew. The ledger of a
    pass is the same either way."""

    MOST_MOVED = 64
    """More nodes changed than this: the columns are made anew."""

    def __init__(self) -> None:
        self._given: tuple[NodeView, ...] = ()
        self._columns: _Columns | None = None

    def of(self, nodes: Sequence[NodeView]) -> _Columns:
        given, last, columns = tuple(nodes), self._given, self._columns
        if columns is not None and len(given) == len(last):
            moved = list(compress(range(len(given)), map(is_not, given, last)))
            if not moved:
                return columns
            if len(moved) <= self.MOST_MOVED and all(_only_requests_moved(given[i], last[i]) for i in moved):
                self._given, self._columns = given, columns.with_requested([given[i] for i in moved])
                return self._columns
        self._given, self._columns = given, _Columns.build(given)
        return self._columns


def _only_requests_moved(now: NodeView, was: NodeView) -> bool:
    """The node is the same but for what its pods request (its labels and taints are the masks' business)."""
    return now.name == was.name and now.unschedulable == was.unschedulable and now.allocatable == was.allocatable


class CapacityLedger:
    """The free room and threshold usage of one admission pass, private to it (`policy.admission.decide_pass`).

    Schedulable nodes are kept sorted by name (the placement order) and per-node amounts are stored
    column-wise, one ``list[int]`` per resource. Free capacity only shrinks during a pass, which the
    caches below rely on.
    """

    def __init__(self, nodes: Sequence[NodeView], cluster_requested: Resources, threshold: Fraction,
                 pools: Sequence[Pool] = (), masks: dict[EligibilityKey, list[bool] | None] | None = None,
                 columns: NodeColumns | None = None) -> None:
        """``columns``: the caller's, kept between passes (made here from ``nodes`` without)."""
        cols = _Columns.build(nodes) if columns is None else columns.of(nodes)
        self._nodes, self._names, self._position = cols.nodes, cols.names, cols.position  # read only
        self._allocatable = cols.allocatable  # read only
        self._free = {r: list(column) for r, column in cols.free.items()}
        self._free_total, self._max_free = dict(cols.free_total), dict(cols.max_free)
        self._stale_max: set[str] = set()
        pool_of = {node.name: _pool_index(node, pools) for node in nodes} if pools else {}
        self._pools = _pools(nodes, self._nodes, cluster_requested, threshold, pools, pool_of, self._allocatable)
        self._pool_of = [pool_of.get(node.name, 0) for node in self._nodes] if pool_of else [0] * len(self._nodes)
        self._reserved = 0
        """Reservations made so far in the pass: a cached explanation of a shape is valid while it is equal."""
        self._why_cache: dict[tuple[Need, EligibilityKey, int], tuple[int, NoRoom, str]] = {}
        self._eligibility: dict[EligibilityKey, list[bool] | None] = {} if masks is None else masks
        self._reached: dict[EligibilityKey, frozenset[int]] = {}
        # (need, eligibility) -> smallest gang size that did not place.
        self._smallest_unplaced: dict[tuple[Need, EligibilityKey], int] = {}
        # (need, eligibility, pods) -> first node that may still hold that many pods (first-fit cursor).
        self._first_fit_cursor: dict[tuple[Need, EligibilityKey, int], int] = {}
        # (need, eligibility) -> pods the nodes would hold if they were empty.
        self._empty_capacity: dict[tuple[Need, EligibilityKey], int] = {}

    def reserve_in_flight(
        self, pods: int, need: Need, node_selector: Mapping[str, str], tolerations: Sequence[Toleration],
        runs: int = 1,
    ) -> None:
        """Count a launched run's unscheduled pods against the threshold and reserve room for those that fit;
        ``runs`` such runs, one after the other.

        Where one node holds them all, that is the first such node (`gang.placement.place_identical`'s first
        step), found from the first-fit cursor without working out every node's capacity: in a burst there
        are thousands of runs in flight, most of them one pod each, and those of one shape in a row fill each
        node at once (`_reserve_single`)."""
        if pods < 1 or runs < 1:
            return
        key, mask = self._mask(node_selector, tolerations)
        if pods == 1:
            self._reserve_single(runs, need, key, mask)
            return
        for _ in range(runs):
            self._reserve(pods, need, key, mask)

    def _reserve_single(self, runs: int, need: Need, key: EligibilityKey, mask: list[bool] | None) -> None:
        """``runs`` runs of one pod of ``need`` reserved as one at a time would be: each on the first eligible node
        with room, so the first node takes as many as it holds, then the next; those no node holds are counted in
        the default pool."""
        while runs:
            index = self._first_holding(need, key, mask, 1)
            if index is None:
                self._charge(need, runs, self._pools[0])
                return
            holds = min((self._free[r][index] // amount for r, amount in need), default=runs)
            taken = min(holds, runs)
            self._take(index, taken, need)
            runs -= taken

    def _reserve(self, pods: int, need: Need, key: EligibilityKey, mask: list[bool] | None) -> None:
        """One run's ``pods`` pods of ``need`` (`reserve_in_flight`)."""
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
        self, pods: int, need: Need, node_selector: Mapping[str, str], tolerations: Sequence[Toleration]
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
        self, pods: int, need: Need, key: EligibilityKey, mask: list[bool] | None
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

    def commit(self, placement: tuple[str, ...], need: Need) -> None:
        """Account for an admitted gang: threshold usage (in each node's pool) and node capacity."""
        for name, count in Counter(placement).items():
            self._take(self._position[name], count, need)

    def could_ever_fit(
        self, pods: int, need: Need, node_selector: Mapping[str, str], tolerations: Sequence[Toleration]
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

    @property
    def reservations(self) -> int:
        """How many times the pass took room so far: while it is the same, the ledger answers as it did."""
        return self._reserved

    def totals(self) -> dict[str, int]:
        """The allocatable of the schedulable nodes, per resource."""
        return {r: sum(column) for r, column in self._allocatable.items()}

    def why_not(self, sj: QueuedSJ, need: Need) -> tuple[NoRoom, str]:
        """Why ``try_place`` refused the SJ in the state the pass is in now, with the numbers. Explanations
        are shared by SJs of one shape until the pass takes more room."""
        key, _ = self._mask(sj.node_selector, sj.tolerations)
        shape = (need, key, sj.pods)
        cached = self._why_cache.get(shape)
        if cached is None or cached[0] != self._reserved:
            cached = (self._reserved, *self._explain(sj, need))
            self._why_cache[shape] = cached
        return cached[1], cached[2]

    def _explain(self, sj: QueuedSJ, need: Need) -> tuple[NoRoom, str]:
        """The first pool the SJ may use whose threshold allows it says why it does not fit; when every
        such pool's threshold is reached, the first of them says by how much."""
        reached = self._pools_reached(sj.node_selector, sj.tolerations)
        pools = [pool for pool in self._pools if pool.index in reached]
        for pool in pools:
            if pool.over(need, sj.pods) is None:
                reason, why = self._no_fit(sj, need, self._mask(sj.node_selector, sj.tolerations, pool.index)[1])
                return reason, f"{needs_text(sj)}; {why}"
        if not pools:
            reason, why = self._no_fit(sj, need, self._mask(sj.node_selector, sj.tolerations)[1])
            return reason, f"{needs_text(sj)}; {why}"
        pool = pools[0]
        over = pool.over(need, sj.pods)
        assert over is not None
        r, amount = over
        where = f" of pool {pool.name}" if len(self._pools) > 1 else ""
        if not pool.allocatable.get(r):
            return "ThresholdReached", f"{needs_text(sj)}; no schedulable node{where} has {r}"
        return "ThresholdReached", (
            f"{needs_text(sj)} ({amount_text(r, amount * sj.pods)} in all); requests may reach "
            f"{float(pool.threshold):.0%} of the {amount_text(r, pool.allocatable[r])} allocatable{where} "
            f"({amount_text(r, pool.limit.get(r, 0))}) and {amount_text(r, pool.used.get(r, 0))} is requested")

    def _no_fit(self, sj: QueuedSJ, need: Need, mask: list[bool] | None) -> tuple[NoRoom, str]:
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
                                          f"{amount_text(r, max(column[best], 0))} on {self._names[best]}")
        room = sum(filter((0).__lt__, self._capacities(need, mask, self._free)))
        return "NoNodeFitsGang", (f"the free room of the {len(eligible)} node(s) it may use holds {room} of the "
                                  f"{sj.pods} pods at once")

    def _mask(
        self, node_selector: Mapping[str, str], tolerations: Sequence[Toleration], pool: int = _ANY_POOL
    ) -> tuple[EligibilityKey, list[bool] | None]:
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

    def _first_holding(self, need: Need, key: EligibilityKey, mask: list[bool] | None, pods: int) -> int | None:
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

    def _capacities(self, need: Need, mask: list[bool] | None, columns: dict[str, list[int]]) -> list[int]:
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

    def _might_fit(self, need: Need, pods: int) -> bool:
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

    def _charge(self, need: Need, pods: int, pool: _PoolState) -> None:
        self._reserved += 1
        used = pool.used
        for r, amount in need:
            used[r] = used.get(r, 0) + amount * pods

    def _take(self, index: int, pods: int, need: Need) -> None:
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


__all__ = ["CapacityLedger", "EligibilityKey", "Need", "NoRoom", "amount_text", "need_of", "needs_text"]
