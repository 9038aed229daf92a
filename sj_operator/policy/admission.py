"""Admission: which waiting ScavengerJobs start now, and on which nodes.

``decide`` walks the queue in ``queue_order`` and admits an SJ when both hold:

(a) **Threshold.** For every resource the SJ requests: ``cluster_requested`` (every pod not finished, scheduled
    or not, but those the scheduler found no node for and nominated none, and pending pods no counted scheduler
    will place) + the requests of the
    pods of in-flight runs not yet scheduled + the SJs admitted (or held) earlier in this pass + the whole gang
    <= ``threshold`` x the allocatable of all schedulable (non-cordoned) nodes. A resource that no
    schedulable node has therefore admits nothing that requests it. In-flight pods that exist but are
    still pending are in ``cluster_requested`` too until the scheduler finds no node for them (unless no counted
    scheduler will place them: gated, or another scheduler's), and are counted once more: conservative, and only
    until the run's pods are scheduled or its start times out.
(b) **Placement.** ``gang.placement`` finds a node for every pod of the gang at once on free capacity,
    where free is allocatable minus requested, minus the unscheduled pods of in-flight runs (placed
    with the same heuristic, as many of them as fit) and minus the placements of SJs admitted (or held)
    earlier in this pass. So one pass never admits two SJs into the same room.

An SJ that is not admitted is skipped, and SJs behind it may still start (backfill). ``decide_pass``
also says why each one waits (``Waiting``): ``ThresholdReached`` when (a) fails, ``NoNodeFitsGang`` when
(b) fails or a starving head keeps the room that frees up, each with the numbers (what the SJ needs,
what is free) as this pass saw them. The room itself, per node and per pool, and the words for what does
not fit are kept by `policy.capacity.CapacityLedger`.

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

**Backoff hold.** An SJ in the queue whose backoff has not ended (``not_before`` after now; the controller
queues an SJ so only during its anti-thrash backoff, `policy.lifecycle`) keeps its place: the walk places it
where it stands in the order exactly as it would were its backoff over (its preferred configuration within
its namespace's quota, else a fallback once due) and *holds* that room (threshold, nodes and its namespace's
fair share and quota are taken as by an admission, but nothing is admitted; ``held``). So the SJs behind it
get only room it would not use: short of the starvation rule, the pass admits exactly what it would admit
were every backoff over, less the backing-off SJs themselves. The backoff delays an SJ's start, never its
place. Every backing-off SJ holds, not only the first, so several in a row keep their order too. One that does
not place now holds nothing: room that frees in pieces may go to SJs behind it until all it needs is there
(as behind an eligible head that is not starving), and one that could never fit on this cluster holds
nothing ever. The hold lasts the whole backoff, with no horizon of its own: the backoff is capped
(``--max-thrash-backoff``, 10m by default, the default ``--starvation-after`` too), the hold keeps out only
other SJs (never the cluster's own workloads, whose burst the backoff makes way for), and only from room the
SJ would start in, which an SJ behind it would otherwise take and, running, keep. A backing-off SJ is not
eligible, so it is never the head of the starvation rule, and nothing is held behind a starving head. An SJ
that the holds keep out (it would be admitted on the room but for them) waits with ``NoNodeFitsGang``,
naming the first SJ the room is held for when that SJ is of its namespace (to an SJ of another namespace the
words say only that it is another namespace's: `_held_for`); one that would not be admitted even then says why
with the numbers of the room but for the holds. The backing-off SJ itself is not in ``waiting``: its
``BackingOff`` reason (until when) stands.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from fractions import Fraction
from itertools import groupby
from typing import Literal

from sj_operator.policy.capacity import (
    CapacityLedger,
    EligibilityKey,
    Need,
    NodeColumns,
    NoRoom,
    amount_text,
    need_of,
    needs_text,
)
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
    InFlightRun,
    NamespaceQuota,
    NodeView,
    QueuedSJ,
    Resources,
    Taint,
    Toleration,
)
from sj_operator.settings import Pool


@dataclass(frozen=True)
class Admission:
    """Start a run of the SJ ``key`` now; ``nodes`` names the node chosen for each pod."""

    key: str
    nodes: tuple[str, ...]
    config_index: int = 0
    """0: the preferred configuration; i: the SJ's fallbacks[i - 1]."""


RoomReason = Literal[NoRoom, "QuotaExceeded"]


@dataclass(frozen=True, slots=True)
class Waiting:
    """Why an SJ was not admitted in this pass, with the numbers (the SJs refused for one reason in a row share
    one, or one for the SJs of a namespace and one for the others: `_Refused`, `_Why`)."""

    reason: RoomReason
    message: str


@dataclass(frozen=True)
class AdmissionPass:
    admitted: list[Admission]
    waiting: dict[str, Waiting]
    """Every eligible SJ of the queue that was not admitted, by key."""
    held: list[Admission] = field(default_factory=list)
    """The backing-off SJs whose room this pass holds, each where it would start, in the order of the walk."""


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
    masks: dict[EligibilityKey, list[bool] | None] = field(default_factory=dict)
    """By selector, tolerations and pool (`CapacityLedger`), over the schedulable nodes by name."""
    most: int = 1024
    columns: NodeColumns = field(default_factory=NodeColumns)
    """The ledger's columns of the nodes, kept between passes too."""

    def for_pass(self, nodes: Sequence[NodeView], pools: Sequence[Pool]) -> dict[EligibilityKey, list[bool] | None]:
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
    masks = None if eligibility is None else eligibility.for_pass(snapshot.nodes, config.pools)
    columns = None if eligibility is None else eligibility.columns
    state = _ledger(snapshot, config, masks, columns)
    taken = {run.key for run in snapshot.in_flight}

    admissions: list[Admission] = []
    waiting: dict[str, Waiting] = {}
    holds = _Holds(lambda: _ledger(snapshot, config, masks, columns) if explain else None)
    head_found = False
    refused: _Refused | None = None
    fair = _FairShare(snapshot, state.totals()) if snapshot.quotas or snapshot.default_quota else None
    ordered = queue_order(snapshot.queue, now, config) if ordered is None else ordered
    walk = iter(ordered if fair is None else fair.order(ordered))
    for sj in walk:
        if sj.key in taken:
            continue
        backing_off = _backing_off(sj, now)
        # A backing-off SJ is never refused: it is placed, as a hold, where it stands (first).
        if not backing_off and refused is not None and refused.again(sj, state, waiting):
            continue
        need = need_of(sj.request)
        over_quota = fair.over_quota(sj.key, sj.pods, need) if fair is not None else None
        chosen = _place(state, sj, need, now, fair, preferred=over_quota is None, held=backing_off)
        if backing_off:
            holds.hold(sj, chosen)
            # Room held is taken as by an admission: the last refusal says nothing any more.
            refused = refused if chosen is None else None
            continue
        if chosen is not None:
            taken.add(sj.key)
            admissions.append(holds.admitted(*chosen))
            continue
        refused = _refuse(sj, state, need, over_quota, holds, now, fair, waiting if explain else None, refused)
        if over_quota is None and not head_found and state.could_ever_fit(sj.pods, need, sj.node_selector,
                                                                         sj.tolerations):
            head_found = True
            if is_starving(sj, now, config):  # nothing behind it is admitted or held
                refused = None  # the SJs behind a starving head wait for it (`_kept_behind`), never a refusal
                if explain:
                    _kept_behind(sj, walk, taken, now, waiting)
                break
    return AdmissionPass(admissions, waiting, holds.held)


def _backing_off(sj: QueuedSJ, now: datetime) -> bool:
    return sj.not_before is not None and sj.not_before > now


def _kept_behind(head: QueuedSJ, behind: Iterable[QueuedSJ], taken: set[str], now: datetime,
                 waiting: dict[str, Waiting]) -> None:
    """Behind a starving head, each eligible SJ waits for it: the same words for all of the head's namespace and
    the same for all of the others (`_kept_for`), but their own needs."""
    own, named, unnamed = _namespace(head.key) + "/", _kept_for(head, named=True), _kept_for(head, named=False)
    for sj in behind:
        if sj.key not in taken and not _backing_off(sj, now):
            kept = named if sj.key.startswith(own) else unnamed
            waiting[sj.key] = Waiting("NoNodeFitsGang", f"{needs_text(sj)}; {kept}")


def _ledger(snapshot: ClusterSnapshot, config: PolicyConfig, masks: dict[EligibilityKey, list[bool] | None] | None,
            columns: NodeColumns | None = None) -> CapacityLedger:
    """The pass's ledger before anything is admitted: the nodes' free room less the runs in flight."""
    ledger = CapacityLedger(snapshot.nodes, snapshot.cluster_requested, Fraction(str(config.threshold)),
                            config.pools, masks, columns)
    # The runs of one shape in a row (a burst's thousands) reserved at once, as one by one.
    for (pods, request, selector, tolerations), runs in groupby(snapshot.in_flight, _shape):
        ledger.reserve_in_flight(pods, need_of(request), selector, tolerations, runs=sum(1 for _ in runs))
    return ledger


def _shape(run: InFlightRun) -> tuple[int, Resources, Mapping[str, str], tuple[Toleration, ...]]:
    return run.unscheduled_pods, run.request, run.node_selector, run.tolerations


@dataclass(frozen=True, slots=True)
class _Why:
    """Why an SJ was not admitted, in the words for every SJ refused for the same reason (`_Refused`): ``named``
    for the SJs of the namespace ``own`` (its name and a ``/``), ``unnamed`` for those of any other. The words
    name another SJ (the one the room is held for) only to the SJs of its namespace: an SJ's status is its
    tenant's to read, and another tenant's SJs, and when they wait or start, are not. ``own`` None: the words
    name no SJ, and ``named`` is ``unnamed``. So a reason shared by thousands of SJs is two messages at most."""

    named: Waiting
    unnamed: Waiting
    own: str | None = None

    def to(self, key: str) -> Waiting:
        """The words for the SJ ``key``."""
        return self.named if self.own is None or key.startswith(self.own) else self.unnamed


def _to_all(why: Waiting) -> _Why:
    """Words that name no SJ: the same for the SJs of every namespace."""
    return _Why(why, why)


@dataclass(frozen=True)
class _Refused:
    """The last SJ refused in a pass, as what refused it depends on (its gang, request, selector and
    tolerations) and the ledger's reservations then (`CapacityLedger.reservations`). Behind a full threshold
    thousands of SJs of a few shapes are refused one after the other: an SJ of the same shape without
    fallbacks, while the ledger has taken no room since, is refused for the same reason (the ledger answers as
    it did, its room only ever shrinks), and the walk needs nothing more of it."""

    pods: int
    request: Resources
    items: tuple[tuple[str, int], ...]
    """Its request's items, in their order (the same request in another order is only not known as alike)."""
    node_selector: Mapping[str, str]
    tolerations: tuple[object, ...]
    reservations: int
    why: _Why

    def again(self, sj: QueuedSJ, state: CapacityLedger, waiting: dict[str, Waiting]) -> bool:
        """Whether ``sj`` is refused for this very reason (then it waits with it). SJs that share a spec share
        its request and selector (`decide.queue_shape`): those are known alike at once."""
        if (sj.fallbacks or sj.pods != self.pods or state.reservations != self.reservations
                or (sj.request is not self.request and tuple(sj.request.items()) != self.items)
                or (sj.node_selector is not self.node_selector and (sj.node_selector or self.node_selector)
                    and sj.node_selector != self.node_selector)
                or ((sj.tolerations or self.tolerations) and sj.tolerations != self.tolerations)):
            return False
        waiting[sj.key] = self.why.to(sj.key)
        return True


def _refuse(sj: QueuedSJ, state: CapacityLedger, need: Need, over_quota: str | None, holds: _Holds,
            now: datetime, fair: _FairShare | None, waiting: dict[str, Waiting] | None,
            refused: _Refused | None) -> _Refused | None:
    """``sj`` waits, and why (``waiting`` None: why is not asked; the holds' words, `_Holds.why_not`, when the
    room is held); the refusal the walk may give the SJs of its shape behind it (`_Refused`: the walk does not
    deal by fair share, and it has no fallbacks), else ``refused``.

    The words copied are those ``holds.why_not`` would write for the next SJ of the shape: they depend only on
    the shape, the pass's ledger, the room but for the holds, the holds themselves and whether the SJ is of the
    namespace of the SJ they may name (both words are kept: `_Why`). The refusal lasts only while the ledger's
    reservations are the same, so while nothing was admitted (which takes room in both ledgers) nor held (a
    hold takes room too, and the walk drops the refusal at each hold besides): then none of those changed, and
    the words are the same."""
    if waiting is None:
        return refused
    if over_quota is not None:
        waiting[sj.key] = Waiting("QuotaExceeded", f"{needs_text(sj)}; {over_quota}")
        return refused
    why = holds.why_not(state, sj, need, now, fair)
    waiting[sj.key] = why.to(sj.key)
    if sj.fallbacks or fair is not None:
        return refused
    return _Refused(sj.pods, sj.request, tuple(sj.request.items()), sj.node_selector, sj.tolerations,
                    state.reservations, why)


_TICK = timedelta(microseconds=1)


def settled_until(queue: Iterable[QueuedSJ], now: datetime, config: PolicyConfig = DEFAULT_POLICY) -> datetime:
    """The first moment after ``now`` at which time alone can change what ``decide_pass`` returns for the
    same snapshot (exclusive; ``FOREVER`` when none): an SJ's backoff ends (and with it the hold of its room),
    its aging moves it up a rank, it starts starving, or it may run a fallback (held, too, for a backing-off SJ).
    Until then a decision loop may reuse the pass."""
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


class _Holds:
    """The room a pass holds for backing-off SJs (the module docstring's backoff hold), and whether an SJ that
    is not admitted would be without the holds (``why_not``)."""

    def __init__(self, ledger: Callable[[], CapacityLedger | None]) -> None:
        self.held: list[Admission] = []
        self._holder: QueuedSJ | None = None
        """The first SJ room is held for."""
        self._ledger = ledger
        """A new ledger of the pass before anything is admitted (None: no explanations are asked for)."""
        self._placed: list[tuple[tuple[str, ...], Need]] = []
        """What the admissions took."""
        self._unheld: CapacityLedger | None = None
        """Once something is held, and explanations are asked for: the room but for the holds."""

    def hold(self, sj: QueuedSJ, chosen: tuple[Admission, Need] | None) -> None:
        """``sj`` backs off; ``chosen``: where it would start, which the pass's ledger has taken."""
        if chosen is None:
            return
        self.held.append(chosen[0])
        self._holder = self._holder or sj
        if self._unheld is None and (unheld := self._ledger()) is not None:
            for nodes, need in self._placed:
                unheld.commit(nodes, need)
            self._unheld = unheld

    def admitted(self, admission: Admission, need: Need) -> Admission:
        """``admission`` took its room (``need`` per pod)."""
        self._placed.append((admission.nodes, need))
        if self._unheld is not None:
            self._unheld.commit(admission.nodes, need)
        return admission

    def why_not(self, state: CapacityLedger, sj: QueuedSJ, need: Need, now: datetime,
                fair: _FairShare | None) -> _Why:
        """Why ``sj``, within its namespace's quota, was not admitted: the holds, when it would be without them
        (in words that name the first holder only to the SJs of its namespace); else what keeps it out even
        without them (with the numbers of the room but for the holds)."""
        if self._holder is None or self._unheld is None:
            return _to_all(Waiting(*state.why_not(sj, need)))
        if _choose(self._unheld, sj, need, now, fair, preferred=True) is not None:
            holder, needs, others = self._holder, needs_text(sj), len(self.held) - 1
            return _Why(Waiting("NoNodeFitsGang", f"{needs}; {_held_for(holder, others, named=True)}"),
                        Waiting("NoNodeFitsGang", f"{needs}; {_held_for(holder, others, named=False)}"),
                        _namespace(holder.key) + "/")
        return _to_all(Waiting(*self._unheld.why_not(sj, need)))


def _place(state: CapacityLedger, sj: QueuedSJ, need: Need, now: datetime, fair: _FairShare | None, *,
           preferred: bool, held: bool = False) -> tuple[Admission, Need] | None:
    """``_choose``, committed: the ledger and the namespace's fair share take its room (``held``: room held
    for a backing-off SJ). With what each of its pods requests."""
    chosen = _choose(state, sj, need, now, fair, preferred=preferred)
    if chosen is not None:
        admission, used = chosen
        state.commit(admission.nodes, used)
        if fair is not None:
            fair.charge(sj.key, len(admission.nodes), used, held_for=sj if held else None)
    return chosen


def _choose(state: CapacityLedger, sj: QueuedSJ, need: Need, now: datetime, fair: _FairShare | None, *,
            preferred: bool) -> tuple[Admission, Need] | None:
    """The preferred configuration if it may run (``preferred``: its namespace's quota allows it) and places,
    else the first fallback configuration that places within the quota, once the preferred one has waited
    long enough; with what each of its pods requests. Nothing is committed."""
    placement = state.try_place(sj.pods, need, sj.node_selector, sj.tolerations) if preferred else None
    if placement is not None:
        return Admission(sj.key, placement), need
    if not sj.fallbacks or now - (sj.waiting_from or sj.created) < sj.fallback_after:
        return None
    for index, shape in enumerate(sj.fallbacks, start=1):
        shape_need = need_of(shape.request)
        if fair is not None and fair.over_quota(sj.key, shape.pods, shape_need) is not None:
            continue
        placement = state.try_place(shape.pods, shape_need, shape.node_selector, shape.tolerations)
        if placement is not None:
            return Admission(sj.key, placement, index), shape_need
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
        self._held: dict[str, tuple[list[QueuedSJ], dict[str, int]]] = {}
        """By namespace: its backing-off SJs whose room is held, and what is held for them."""
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

    def over_quota(self, key: str, pods: int, need: Need) -> str | None:
        """Why the namespace's quota refuses ``pods`` more pods of ``need``, or None."""
        namespace = _namespace(key)
        quota = self._quota(namespace)
        if quota is None:
            return None
        used = self._used.get(namespace, {})
        for r, amount in need:
            cap = quota.hard.get(r)
            if cap is not None and used.get(r, 0) + amount * pods > cap:
                return (f"namespace {namespace} may request {amount_text(r, cap)} for its SJs at once "
                        f"({quota.capped_by.get(r, 'its quota')}) and they request {amount_text(r, used.get(r, 0))}"
                        f"{self._counting(namespace, r)}")
        return None

    def _counting(self, namespace: str, resource: str) -> str:
        """What of the namespace's ``resource`` is held for its backing-off SJs, if any."""
        holders, held = self._held.get(namespace, ([], {}))
        if not held.get(resource):
            return ""
        whom = holders[0].key + (f" and {len(holders) - 1} more backing-off SJ(s)" if len(holders) > 1
                                 else ", backing off")
        return f", counting {amount_text(resource, held[resource])} held for {whom}"

    def charge(self, key: str, pods: int, need: Need, *, held_for: QueuedSJ | None = None) -> None:
        """``pods`` more pods of ``need`` for the namespace of ``key``: admitted, or (``held_for``) held for a
        backing-off SJ."""
        namespace = _namespace(key)
        used = self._used.setdefault(namespace, {})
        for r, amount in need:
            used[r] = used.get(r, 0) + amount * pods
        if held_for is not None:
            holders, held = self._held.setdefault(namespace, ([], {}))
            holders.append(held_for)
            for r, amount in need:
                held[r] = held.get(r, 0) + amount * pods


def _namespace(key: str) -> str:
    return key.split("/", 1)[0]


def _held_for(holder: QueuedSJ, others: int, *, named: bool) -> str:
    """Behind backing-off SJs: the room it would take is held for them (``holder`` the first). ``named``: the
    words for an SJ of the holder's namespace, which name it and say when its backoff ends. For an SJ of any
    other namespace they say neither, nor which namespace: they are another tenant's SJ and its clock (when it
    may start again says how its last run went). How many more backing-off SJs hold room is a count of the whole
    queue, as the threshold's numbers are of the whole cluster, and is said to all."""
    more = f" (and for {others} more backing-off SJ(s) ahead of it)" if others else ""
    if not named:
        return ("the room it would take is held for an SJ of another namespace, ahead of it in the queue and "
                f"backing off{more}")
    assert holder.not_before is not None
    return (f"the room it would take is held for {holder.key}, ahead of it in the queue and backing off until "
            f"{holder.not_before.isoformat()}{more}")


def _kept_for(head: QueuedSJ, *, named: bool) -> str:
    """Behind a starving head: the room that frees up is kept for it. ``named``: the words for an SJ of the head's
    namespace, which name it and say since when it waits; for an SJ of any other namespace they say neither, nor
    which namespace (when another tenant's SJ began to wait is that tenant's to know)."""
    if not named:
        return "the room that frees up is kept for an SJ of another namespace, first in the queue and starving"
    return (f"the room that frees up is kept for {head.key}, first in the queue and waiting since "
            f"{waiting_since(head).isoformat()}")


__all__ = ["Admission", "AdmissionPass", "Eligibility", "PolicyConfig", "RoomReason", "Waiting", "decide",
           "decide_pass", "settled_until"]
