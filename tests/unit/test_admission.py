"""Queue order and admission decisions (sj_operator.policy.admission) over hand-built snapshots; at the end, what
counts toward the threshold, from pods as the watch shows them."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gang.placement import fit_gang, node_accepts
from sj_operator.api import DEFAULT_LIMITS
from sj_operator.decide import ClusterView
from sj_operator.memo import PassMemo
from sj_operator.observed import NodeInfo, pod_view
from sj_operator.policy.admission import Admission, Eligibility, PolicyConfig, decide, decide_pass
from sj_operator.policy.queue import is_starving, queue_order, waiting_since
from sj_operator.policy.snapshot import (
    ClusterSnapshot,
    InFlightRun,
    NodeView,
    QueuedSJ,
    Taint,
)
from sj_operator.resources import MOST, freeze, sub, to_milli, total
from sj_operator.settings import Pool
from tests.unit.helpers import add, fits, parse_resources, scale, tol

NOW = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
GI = 2**30 * 1000
GPU = "nvidia.com/gpu"
PATIENT = PolicyConfig(starvation_after=timedelta(days=365))
NO_THRESHOLD = PolicyConfig(threshold=1.0, starvation_after=timedelta(days=365))


def node(name: str, cpu: int = 10_000, memory: int = 40 * GI, used: dict | None = None, **kw) -> NodeView:
    return NodeView(name, allocatable={"cpu": cpu, "memory": memory, **kw.pop("extra", {})}, requested=used or {}, **kw)


def sj(key: str, cpu: int = 1000, pods: int = 1, age_min: float = 1, interrupted: int = 0, **kw) -> QueuedSJ:
    request = kw.pop("request", {"cpu": cpu})
    return QueuedSJ(
        key=key,
        created=NOW - timedelta(minutes=age_min),
        interrupted_count=interrupted,
        pods=pods,
        request=request,
        **kw,
    )


def snapshot(nodes: list[NodeView], queue: list[QueuedSJ], in_flight=(), extra_requested=None) -> ClusterSnapshot:
    """A snapshot whose cluster_requested is what the nodes report plus ``extra_requested`` (pending pods)."""
    requested = add(total(n.requested for n in nodes), extra_requested or {})
    return ClusterSnapshot(
        nodes=tuple(nodes), cluster_requested=requested, in_flight=tuple(in_flight), queue=tuple(queue)
    )


def admitted(
    snap: ClusterSnapshot, config: PolicyConfig = PATIENT, now: datetime = NOW
) -> list[tuple[str, tuple[str, ...]]]:
    return [(a.key, a.nodes) for a in decide(snap, now, config)]


def case(snap: ClusterSnapshot, expected: list, config: PolicyConfig = PATIENT, *, id: str):
    return pytest.param(snap, expected, config, id=id)


CASES = [
    # --- threshold, per resource -------------------------------------------------------------
    case(
        snapshot([node("a", used={"cpu": 6000})], [sj("ns/x", cpu=1000)]),
        [("ns/x", ("a",))],
        id="cpu-exactly-at-threshold",
    ),
    case(
        snapshot([node("a", used={"cpu": 6000})], [sj("ns/x", cpu=1001)]),
        [],
        id="cpu-over-threshold",
    ),
    case(
        snapshot([node("a")], [sj("ns/x", cpu=1000)], extra_requested={"cpu": 6500}),
        [],
        id="pending-pods-count-against-threshold",
    ),
    case(
        snapshot(
            [node("a", used={"memory": 20 * GI})],
            [
                sj("ns/big", request={"cpu": 100, "memory": 9 * GI}),
                sj("ns/fits", request={"cpu": 100, "memory": 8 * GI}),
            ],
        ),
        [("ns/fits", ("a",))],
        id="memory-threshold",
    ),
    case(
        snapshot(
            [node("a", extra={GPU: 2000}), node("b", extra={GPU: 2000})],
            [sj("ns/three", request={GPU: 1000}, pods=3), sj("ns/two", request={GPU: 1000}, pods=2)],
        ),
        [("ns/two", ("a", "a"))],
        id="extended-resource-threshold",
    ),
    case(
        snapshot([node("a")], [sj("ns/gpu", request={GPU: 1000}), sj("ns/cpu")]),
        [("ns/cpu", ("a",))],
        id="resource-no-node-has",
    ),
    case(
        snapshot([node("a", used={"memory": 39 * GI})], [sj("ns/x", cpu=1000)]),
        [("ns/x", ("a",))],
        id="unrequested-resource-over-threshold-ignored",
    ),
    # --- whole gang placement ----------------------------------------------------------------
    case(
        snapshot([node(n, used={"cpu": 8000}) for n in "abc"], [sj("ns/gang", cpu=2000, pods=3)]),
        [],
        id="threshold-blocks-before-placement",
    ),
    case(
        snapshot(
            [node(n, cpu=4000, used={"cpu": 2000}) for n in "abcd"],
            [sj("ns/wide", cpu=3000, pods=2), sj("ns/spread", cpu=2000, pods=3)],
        ),
        [("ns/spread", ("a", "b", "c"))],
        NO_THRESHOLD,
        id="fragmented-free-capacity",
    ),
    case(
        snapshot([node("a", used={"cpu": 1000}), node("b")], [sj("ns/gang", cpu=3000, pods=2)]),
        [("ns/gang", ("a", "a"))],
        id="gang-on-first-node-holding-it",
    ),
    # --- node eligibility --------------------------------------------------------------------
    case(
        snapshot([node("a", unschedulable=True), node("b")], [sj("ns/big", cpu=8000), sj("ns/x", cpu=5000)]),
        [("ns/x", ("b",))],
        id="cordoned-node-neither-used-nor-counted",
    ),
    case(
        snapshot(
            [node("a", labels={"zone": "x"}), node("b", labels={"zone": "y"})],
            [sj("ns/x", node_selector={"zone": "y"}), sj("ns/none", node_selector={"zone": "z"})],
        ),
        [("ns/x", ("b",))],
        id="node-selector",
    ),
    case(
        snapshot(
            [node("a", taints=(Taint("dedicated", "batch", "NoSchedule"),)), node("b", cpu=1000)],
            [
                sj("ns/plain", cpu=2000),
                sj("ns/tolerant", cpu=2000, tolerations=(tol("dedicated", "Equal", "batch", "NoSchedule"),)),
            ],
        ),
        [("ns/tolerant", ("a",))],
        id="taints-and-tolerations",
    ),
    # --- in-flight runs ----------------------------------------------------------------------
    case(
        snapshot(
            [node("a"), node("b")],
            [sj("ns/x", cpu=4000)],
            in_flight=[InFlightRun("ns/run", pods=4, request={"cpu": 2600}, scheduled_pods=0)],
        ),
        [],
        id="in-flight-unscheduled-count-against-threshold",
    ),
    case(
        snapshot(
            [node("a", cpu=4000), node("b", cpu=4000), node("c", cpu=4000)],
            [sj("ns/x", cpu=3000, pods=2)],
            in_flight=[InFlightRun("ns/run", pods=1, request={"cpu": 3000})],
        ),
        [("ns/x", ("b", "c"))],
        NO_THRESHOLD,
        id="in-flight-placement-reserved",
    ),
    case(
        snapshot(
            [node("a", used={"cpu": 3000})],
            [sj("ns/x", cpu=4000)],
            in_flight=[InFlightRun("ns/run", pods=1, request={"cpu": 3000}, scheduled_pods=1)],
        ),
        [("ns/x", ("a",))],
        id="in-flight-scheduled-not-double-counted",
    ),
    case(
        snapshot([node("a")], [sj("ns/run"), sj("ns/x")], in_flight=[InFlightRun("ns/run", 1, {"cpu": 1})]),
        [("ns/x", ("a",))],
        id="sj-with-run-in-flight-not-launched-twice",
    ),
    # --- several SJs in one pass -------------------------------------------------------------
    case(
        snapshot([node("a", cpu=10_000, used={"cpu": 5000})], [sj("ns/1", cpu=3000, age_min=2), sj("ns/2", cpu=3000)]),
        [("ns/1", ("a",))],
        NO_THRESHOLD,
        id="one-pass-never-overfills-a-node",
    ),
    case(
        snapshot(
            [node("a"), node("b")],
            [sj("ns/1", cpu=8000, age_min=3), sj("ns/2", cpu=8000, age_min=2), sj("ns/3", cpu=2000)],
        ),
        [("ns/1", ("a",)), ("ns/3", ("a",))],
        id="one-pass-never-exceeds-threshold",
    ),
    case(
        snapshot(
            [node("a", cpu=4000)],
            [sj("ns/old", cpu=2000, age_min=9), sj("ns/interrupted", cpu=2000, interrupted=2), sj("ns/new", cpu=2000)],
        ),
        [("ns/interrupted", ("a",))],
        id="interrupted-first",
    ),
    # --- backfill and backoff ----------------------------------------------------------------
    case(
        snapshot([node("a")], [sj("ns/huge", cpu=9000, age_min=5), sj("ns/small", cpu=2000)]),
        [("ns/small", ("a",))],
        id="backfill-behind-a-waiting-head",
    ),
    case(
        snapshot(
            [node(n, cpu=1500) for n in "abc"],
            [sj("ns/4", pods=4, age_min=3), sj("ns/3", pods=3, age_min=2), sj("ns/2", pods=2)],
        ),
        [("ns/3", ("a", "b", "c"))],
        NO_THRESHOLD,
        id="smaller-gang-of-the-same-shape-after-a-larger-one-failed",
    ),
    case(
        snapshot([node("a")], [sj("ns/later", not_before=NOW + timedelta(seconds=1)), sj("ns/now", not_before=NOW)]),
        [("ns/now", ("a",))],
        id="not-before-backoff",
    ),
    # --- gangs against the threshold: the whole gang counts, not one pod ------------------------
    # Six nodes of 10 CPU: the threshold is 42 CPU; each node holds two 5-CPU pods (12 in all).
    case(
        snapshot([node(n) for n in "abcdef"], [sj("ns/nine", cpu=5000, pods=9)]),
        [],
        id="gang-over-threshold-though-it-places",
    ),
    case(
        snapshot([node(n) for n in "abcdef"], [sj("ns/eight", cpu=5000, pods=8, age_min=2),
                                              sj("ns/one", cpu=5000)]),
        [("ns/eight", ("a", "a", "b", "b", "c", "c", "d", "d"))],
        id="admitted-gang-charges-all-its-pods",
    ),
    case(
        snapshot([node(n) for n in "abcdef"], [sj("ns/one", cpu=5000)],
                 in_flight=[InFlightRun("ns/run", pods=8, request={"cpu": 5000})]),
        [],
        id="in-flight-gang-charges-all-its-unscheduled-pods",
    ),
    # --- a node holds as many pods as its scarcest resource allows --------------------------------
    case(
        snapshot([node("a", cpu=4000, memory=2 * GI), node("b", cpu=4000, memory=2 * GI)],
                 [sj("ns/g", pods=3, request={"cpu": 1000, "memory": GI})]),
        [("ns/g", ("a", "a", "b"))],
        NO_THRESHOLD,
        id="capacity-is-the-smallest-per-resource-room",
    ),
    case(
        snapshot([node("a", cpu=4000, memory=2 * GI)], [sj("ns/g", pods=3, request={"cpu": 1000, "memory": GI})]),
        [],
        NO_THRESHOLD,
        id="gang-over-the-scarcest-resource-does-not-place",
    ),
    # --- a gang that had to be split placed: the same shape may place again where room is left
    case(
        snapshot([node(n, cpu=1500) for n in "abcd"], [sj("ns/g1", pods=2, age_min=2), sj("ns/g2", pods=2)]),
        [("ns/g1", ("a", "b")), ("ns/g2", ("c", "d"))],
        NO_THRESHOLD,
        id="split-gangs-of-one-shape-both-place",
    ),
    # --- the first-fit search resumes per gang size: a big gang passing a node keeps it for a small one
    case(
        snapshot([node("a", used={"cpu": 8000}), node("b")],
                 [sj("ns/pair", cpu=2000, pods=2, age_min=3), sj("ns/single", cpu=2000, age_min=2)]),
        [("ns/pair", ("b", "b")), ("ns/single", ("a",))],
        NO_THRESHOLD,
        id="first-fit-cursor-is-per-gang-size",
    ),
]


@pytest.mark.parametrize(("snap", "expected", "config"), CASES)
def test_decide(snap: ClusterSnapshot, expected: list[tuple[str, tuple[str, ...]]], config: PolicyConfig) -> None:
    assert admitted(snap, config) == expected


# --- starvation --------------------------------------------------------------------------------

STARVE = PolicyConfig(starvation_after=timedelta(minutes=10), aging_step=timedelta(days=365))  # order without aging
HALF_FULL = [node("a", used={"cpu": 5000}), node("b", used={"cpu": 5000})]


@pytest.mark.parametrize(
    ("queue", "expected"),
    [
        pytest.param([sj("ns/head", cpu=6000, age_min=11), sj("ns/small", cpu=1000)], [], id="starving-head-blocks"),
        pytest.param(
            [sj("ns/head", cpu=6000, age_min=10), sj("ns/small", cpu=1000)],
            ["ns/small"],
            id="exactly-at-limit-not-starving",
        ),
        pytest.param(
            [sj("ns/first", cpu=1000, age_min=30), sj("ns/head", cpu=6000, age_min=20), sj("ns/small", cpu=1000)],
            ["ns/first"],
            id="admitted-before-the-head",
        ),
        pytest.param(
            [sj("ns/impossible", cpu=11_000, age_min=60), sj("ns/small", cpu=1000)],
            ["ns/small"],
            id="unsatisfiable-never-blocks",
        ),
        pytest.param(
            [sj("ns/impossible", request={GPU: 1000}, age_min=60), sj("ns/small", cpu=1000)],
            ["ns/small"],
            id="missing-resource-never-blocks",
        ),
        pytest.param(
            [
                sj("ns/head", cpu=6000, age_min=5, interrupted=1),
                sj("ns/starving", cpu=7000, age_min=50),
                sj("ns/s", cpu=1000),
            ],
            ["ns/s"],
            id="only-the-head-blocks",
        ),
        pytest.param(
            [sj("ns/head", cpu=6000, age_min=60, not_before=NOW - timedelta(minutes=1)), sj("ns/small", cpu=1000)],
            ["ns/small"],
            id="backoff-restarts-the-wait",
        ),
        pytest.param(
            [sj("ns/head", cpu=6000, age_min=60, not_before=NOW + timedelta(minutes=1)), sj("ns/small", cpu=1000)],
            ["ns/small"],
            id="backing-off-sj-is-not-head",
        ),
    ],
)
def test_starvation(queue: list[QueuedSJ], expected: list[str]) -> None:
    assert [key for key, _ in admitted(snapshot(HALF_FULL, queue), STARVE)] == expected


def test_waiting_since_and_is_starving() -> None:
    created = NOW - timedelta(hours=1)
    assert waiting_since(sj("ns/x", age_min=60)) == created
    assert waiting_since(sj("ns/x", age_min=60, not_before=NOW - timedelta(minutes=3))) == NOW - timedelta(minutes=3)
    assert waiting_since(sj("ns/x", age_min=60, not_before=created - timedelta(days=1))) == created
    assert is_starving(sj("ns/x", age_min=11), NOW, STARVE)
    assert not is_starving(sj("ns/x", age_min=10), NOW, STARVE)


# --- queue order -------------------------------------------------------------------------------


def test_queue_order() -> None:
    queue = [
        sj("ns/b-new", age_min=1),
        sj("ns/b-old", age_min=5),
        sj("ns/twice", age_min=1, interrupted=2),
        sj("ns/once", age_min=50, interrupted=1),
        sj("ns/a-old", age_min=5),
    ]
    assert [s.key for s in queue_order(queue)] == ["ns/twice", "ns/once", "ns/a-old", "ns/b-old", "ns/b-new"]


def test_result_independent_of_input_order() -> None:
    nodes = [node(f"n{i}", used={"cpu": 1000 * i}) for i in range(6)]
    queue = [sj(f"ns/{i}", cpu=1000 + 500 * (i % 4), pods=1 + i % 3, age_min=i, interrupted=i % 2) for i in range(20)]
    expected = decide(snapshot(nodes, queue), NOW, PATIENT)
    rng = random.Random(3)
    for _ in range(5):
        rng.shuffle(nodes)
        rng.shuffle(queue)
        assert decide(snapshot(nodes, queue), NOW, PATIENT) == expected


def test_validation() -> None:
    with pytest.raises(ValueError):
        PolicyConfig(threshold=1.5)
    with pytest.raises(ValueError):
        decide(snapshot([], []), datetime(2025, 1, 1), PATIENT)
    with pytest.raises(ValueError):
        sj("ns/x", pods=0)
    with pytest.raises(ValueError):
        QueuedSJ("ns/x", created=datetime(2025, 1, 1))
    with pytest.raises(ValueError):
        ClusterSnapshot(nodes=(node("a"), node("a")))


def test_zero_threshold_admits_only_empty_requests() -> None:
    snap = snapshot([node("a")], [sj("ns/cpu"), sj("ns/nothing", request={})])
    assert admitted(snap, PolicyConfig(threshold=0)) == [("ns/nothing", ("a",))]


# --- properties --------------------------------------------------------------------------------

RESOURCES = ("cpu", "memory", GPU)
UNIT = {"cpu": 500, "memory": GI, GPU: 1000}


@st.composite
def nodes_strategy(draw: st.DrawFn) -> list[NodeView]:
    nodes = []
    for i in range(draw(st.integers(0, 6))):
        allocatable = {r: draw(st.integers(0, 12)) * UNIT[r] for r in RESOURCES if r != GPU or draw(st.booleans())}
        requested = {r: draw(st.integers(0, 12)) * UNIT[r] for r in RESOURCES if draw(st.booleans())}
        nodes.append(
            NodeView(
                f"n{i}",
                allocatable=allocatable,
                requested=requested,
                labels={"zone": draw(st.sampled_from("xy"))},
                taints=(Taint("dedicated", "batch", "NoSchedule"),) if draw(st.integers(0, 4)) == 0 else (),
                unschedulable=draw(st.integers(0, 5)) == 0,
            )
        )
    return nodes


@st.composite
def queue_strategy(draw: st.DrawFn) -> list[QueuedSJ]:
    queue = []
    for i in range(draw(st.integers(0, 10))):
        request = {r: draw(st.integers(0, 6)) * UNIT[r] for r in RESOURCES if draw(st.booleans())}
        queue.append(
            QueuedSJ(
                key=f"ns/sj-{i}",
                created=NOW - timedelta(minutes=draw(st.integers(0, 30))),
                interrupted_count=draw(st.integers(0, 2)),
                pods=draw(st.integers(1, 4)),
                request=request,
                node_selector={"zone": draw(st.sampled_from("xy"))} if draw(st.integers(0, 3)) == 0 else {},
                tolerations=(tol("dedicated", "Exists"),) if draw(st.booleans()) else (),
                not_before=NOW + timedelta(minutes=draw(st.integers(-20, 5))) if draw(st.integers(0, 3)) == 0 else None,
            )
        )
    return queue


@st.composite
def snapshots(draw: st.DrawFn, with_in_flight: bool = True) -> ClusterSnapshot:
    nodes = draw(nodes_strategy())
    queue = draw(queue_strategy())
    in_flight = []
    if with_in_flight:
        for i in range(draw(st.integers(0, 2))):
            pods = draw(st.integers(1, 3))
            request = {r: draw(st.integers(0, 4)) * UNIT[r] for r in RESOURCES if draw(st.booleans())}
            in_flight.append(InFlightRun(f"ns/run-{i}", pods, request, draw(st.integers(0, pods))))
    extra = {r: draw(st.integers(0, 8)) * UNIT[r] for r in RESOURCES if draw(st.booleans())}
    return snapshot(nodes, queue, in_flight, extra)


configs = st.builds(
    PolicyConfig,
    threshold=st.sampled_from([0.0, 0.3, 0.5, 0.7, 0.85, 1.0]),
    starvation_after=st.sampled_from([timedelta(minutes=m) for m in (0, 5, 10, 60)]),
)


def limits(snap: ClusterSnapshot, config: PolicyConfig) -> dict[str, int]:
    fraction = Fraction(str(config.threshold))
    allocatable = total(n.allocatable for n in snap.nodes if not n.unschedulable)
    return {r: int(fraction * allocatable.get(r, 0)) for r in RESOURCES}


def with_admissions(snap: ClusterSnapshot, admissions: list[Admission], queue: tuple[QueuedSJ, ...]) -> ClusterSnapshot:
    """``snap`` with the admitted gangs' pods scheduled where they were placed, and ``queue`` waiting."""
    by_key = {s.key: s for s in snap.queue}
    extra: dict[str, dict[str, int]] = {}
    added: dict[str, int] = {}
    for admission in admissions:
        request = by_key[admission.key].request
        added = dict(add(added, scale(request, len(admission.nodes))))
        for name, count in Counter(admission.nodes).items():
            extra[name] = dict(add(extra.get(name, {}), scale(request, count)))
    nodes = tuple(replace(n, requested=add(n.requested, extra.get(n.name, {}))) for n in snap.nodes)
    return replace(snap, nodes=nodes, cluster_requested=add(snap.cluster_requested, added), queue=queue)


@settings(max_examples=400, deadline=None)
@given(snap=snapshots(), config=configs)
def test_admissions_respect_threshold_gang_and_nodes(snap: ClusterSnapshot, config: PolicyConfig) -> None:
    result = decide_pass(snap, NOW, config)
    admissions = decide(snap, NOW, config)
    assert admissions == result.admitted
    by_key = {s.key: s for s in snap.queue}
    nodes = {n.name: n for n in snap.nodes}
    order = [s.key for s in queue_order(snap.queue, NOW, config)]
    assert len({a.key for a in admissions + result.held}) == len(admissions) + len(result.held)

    demand: dict[str, int] = {}
    per_node: dict[str, dict[str, int]] = {}
    # What is admitted and what is held for backing-off SJs together: the holds are room taken.
    for admission in admissions + result.held:
        queued = by_key[admission.key]
        backing_off = queued.not_before is not None and queued.not_before > NOW
        assert backing_off is (admission in result.held)
        assert admission.key not in {run.key for run in snap.in_flight}
        # A gang is admitted whole, on nodes it may run on.
        assert len(admission.nodes) == queued.pods
        for name in admission.nodes:
            assert node_accepts(nodes[name], queued.node_selector, queued.tolerations)
        demand = dict(add(demand, scale(queued.request, queued.pods)))
        for name, count in Counter(admission.nodes).items():
            per_node[name] = dict(add(per_node.get(name, {}), scale(queued.request, count)))

    # Requests already there, in flight and admitted stay within the threshold per resource.
    in_flight = total(scale(run.request, run.unscheduled_pods) for run in snap.in_flight)
    limit = limits(snap, config)
    for resource, amount in demand.items():
        if amount > 0:
            base = snap.cluster_requested.get(resource, 0) + in_flight.get(resource, 0)
            assert base + amount <= limit[resource]
    # No node gets more than its free capacity.
    for name, added in per_node.items():
        for resource, amount in added.items():
            if amount > 0:
                assert nodes[name].requested.get(resource, 0) + amount <= nodes[name].allocatable.get(resource, 0)
    # Admissions and holds come out in queue order.
    for placed in (admissions, result.held):
        positions = [order.index(a.key) for a in placed]
        assert positions == sorted(positions)


@settings(max_examples=400, deadline=None)
@given(snap=snapshots(with_in_flight=False), config=configs)
def test_skips_and_placements_are_justified(snap: ClusterSnapshot, config: PolicyConfig) -> None:
    result = decide_pass(snap, NOW, config)
    # Room held for a backing-off SJ is taken as an admission's is.
    placements = result.admitted + result.held
    placed_keys = [a.key for a in placements]
    order = queue_order(snap.queue, NOW, config)
    position = {s.key: i for i, s in enumerate(order)}
    last_placed = max((position[k] for k in placed_keys), default=-1)
    for i, queued in enumerate(order):
        before = [a for a in placements if position[a.key] < i]
        state = with_admissions(snap, before, (replace(queued, not_before=None),))
        if queued.key in placed_keys:
            # The placement is the heuristic's on the capacity left at that point.
            placement = fit_gang(queued.pods, queued.request, state.nodes, queued.node_selector, queued.tolerations)
            assert placement == placements[placed_keys.index(queued.key)].nodes
        elif i < last_placed:
            # Skipped (neither admitted nor held) while something behind it started or was held: it would not
            # have fit then on its own.
            assert decide(state, NOW, config) == []


@settings(max_examples=400, deadline=None)
@given(snap=snapshots(), config=configs)
def test_starving_head_blocks_everything_behind_it(snap: ClusterSnapshot, config: PolicyConfig) -> None:
    result = decide_pass(snap, NOW, config)
    admitted_keys = {a.key for a in result.admitted}
    placed_keys = admitted_keys | {a.key for a in result.held}
    taken = {run.key for run in snap.in_flight}
    empty = replace(snap, nodes=tuple(replace(n, requested={}) for n in snap.nodes), cluster_requested={}, in_flight=())
    order = queue_order(snap.queue, NOW, config)
    for i, queued in enumerate(order):
        if queued.key in placed_keys or queued.key in taken or (queued.not_before or NOW) > NOW:
            continue
        could_ever_fit = decide(replace(empty, queue=(queued,)), NOW, config) != []
        if could_ever_fit:
            # The head: it blocks everything behind it (admissions and holds) exactly when it is starving.
            if is_starving(queued, NOW, config):
                assert not placed_keys & {s.key for s in order[i + 1 :]}
            break


@settings(max_examples=100, deadline=None)
@given(snap=snapshots(), config=configs)
def test_decide_is_deterministic(snap: ClusterSnapshot, config: PolicyConfig) -> None:
    shuffled = replace(snap, nodes=tuple(reversed(snap.nodes)), queue=tuple(reversed(snap.queue)))
    assert decide(snap, NOW, config) == decide(shuffled, NOW, config)


# --- resources ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("quantity", "expected"),
    [
        ("500m", 500),
        ("1", 1000),
        (2, 2000),
        ("1.5", 1500),
        ("1Gi", 1073741824000),
        ("100M", 100_000_000_000),
        ("0.1m", 1),  # rounded up, like Kubernetes MilliValue
        ("1e18", MOST),
        ("1e999990", MOST),  # as an int first: a minute of CPU, the loop's
        ("9" * 60 + "e999900", MOST),
        ("-1e999990", -MOST),
        ("1e-999990", 1),
    ],
)
@pytest.mark.timeout(30)
def test_to_milli(quantity: str | int, expected: int) -> None:
    assert to_milli(quantity) == expected


def test_resource_arithmetic() -> None:
    a = {"cpu": 1000, "memory": 2 * GI}
    b = {"cpu": 1500, GPU: 1000}
    assert add(a, b) == {"cpu": 2500, "memory": 2 * GI, GPU: 1000}
    assert sub(a, b) == {"cpu": -500, "memory": 2 * GI, GPU: -1000}
    assert sub(a, a) == {}
    assert scale(b, 3) == {"cpu": 4500, GPU: 3000}
    assert total([a, b, a]) == {"cpu": 3500, "memory": 4 * GI, GPU: 1000}
    assert fits({"cpu": 1000, "memory": 0}, {"cpu": 1000})
    assert not fits({GPU: 1}, {"cpu": 1000})
    assert parse_resources({"cpu": "250m", "nvidia.com/gpu": 1}) == {"cpu": 250, GPU: 1000}
    with pytest.raises(ValueError):
        to_milli("lots")
    with pytest.raises(TypeError):
        NodeView("a", allocatable={"cpu": 1.5})  # type: ignore[dict-item]
    with pytest.raises(ValueError):
        QueuedSJ("ns/x", created=NOW, request={"cpu": -1})
    frozen = node("a").allocatable
    with pytest.raises(TypeError):
        frozen["cpu"] = 1  # type: ignore[index]


# --- node eligibility kept between passes ------------------------------------------------------------

BURST_POOL = Pool("burst", (("zone", "y"),), 0.9)


@st.composite
def pass_sequences(draw: st.DrawFn) -> list[ClusterSnapshot]:
    """A caller's passes: each next snapshot is the last with the nodes' free room, the queue and the runs in
    flight changed, and now and then a node's labels, taints or schedulability, or a new node."""
    snaps = [draw(snapshots())]
    for _ in range(draw(st.integers(1, 4))):
        last = snaps[-1]
        nodes = []
        for n in last.nodes:
            requested = {r: draw(st.integers(0, 12)) * UNIT[r] for r in RESOURCES if draw(st.booleans())}
            change = draw(st.integers(0, 9))
            moved = {"zone": "y" if n.labels.get("zone") == "x" else "x"}
            nodes.append(replace(n, requested=requested, labels=moved if change == 0 else n.labels,
                                 taints=() if change == 1 else n.taints,
                                 unschedulable=not n.unschedulable if change == 2 else n.unschedulable))
        if draw(st.integers(0, 5)) == 0:
            nodes.append(NodeView(f"n{len(nodes)}", allocatable={"cpu": 12 * UNIT["cpu"]}, labels={"zone": "x"}))
        runs = [InFlightRun(f"ns/run-{i}", pods, {"cpu": draw(st.integers(0, 4)) * UNIT["cpu"]}, 0,
                            node_selector={"zone": draw(st.sampled_from("xy"))} if draw(st.booleans()) else {},
                            tolerations=(tol("dedicated", "Exists"),) if draw(st.booleans()) else ())
                for i, pods in enumerate(draw(st.lists(st.integers(1, 3), max_size=3)))]
        snaps.append(replace(last, nodes=tuple(nodes), in_flight=tuple(runs), queue=tuple(draw(queue_strategy()))))
    return snaps


@settings(max_examples=200, deadline=None)
@given(snaps=pass_sequences(), config=configs, pools=st.sampled_from([(), (BURST_POOL,)]))
def test_node_eligibility_kept_between_passes_decides_as_a_pass_that_works_it_out(snaps, config, pools) -> None:
    eligibility = Eligibility()
    config = replace(config, pools=pools)
    for snap in snaps:
        kept = decide_pass(snap, NOW, config, eligibility=eligibility)
        fresh = decide_pass(snap, NOW, config)
        assert (kept.admitted, kept.waiting) == (fresh.admitted, fresh.waiting)


def test_node_eligibility_is_worked_out_again_only_when_who_may_use_a_node_changes() -> None:
    eligibility = Eligibility()
    nodes = (node("a", labels={"zone": "x"}), node("b", labels={"zone": "y"}))
    masks = eligibility.for_pass(nodes, ())
    masks[(frozenset({("zone", "x")}), (), -1)] = [True, False]
    busier = tuple(replace(n, requested={"cpu": 5000}) for n in nodes)
    assert eligibility.for_pass(busier, ()) is masks  # only the free room changed
    first = (replace(nodes[0], labels={"zone": "y"}), replace(nodes[0], unschedulable=True),
             replace(nodes[0], taints=(Taint("dedicated", "batch", "NoSchedule"),)))
    for changed in (*((one, nodes[1]) for one in first), nodes[:1]):
        masks = eligibility.for_pass(nodes, ())
        masks[("key",)] = None  # type: ignore[index]
        assert eligibility.for_pass(changed, ()) == {}
    eligibility.for_pass(nodes, ())["key"] = None  # type: ignore[index]
    assert eligibility.for_pass(nodes, (BURST_POOL,)) == {}


def test_node_eligibility_keeps_at_most_its_bound_of_masks() -> None:
    eligibility = Eligibility(most=2)
    nodes = (node("a", labels={"zone": "x"}),)
    kept = []
    for zone in ("x", "y", "z"):
        masks = eligibility.for_pass(nodes, ())
        kept.append(len(masks))
        masks[(frozenset({("zone", zone)}), (), -1)] = None
    assert kept == [0, 1, 2]  # kept while at most the bound
    assert eligibility.for_pass(nodes, ()) == {}  # past it: from none again


# --- what counts toward the threshold: pods as the watch shows them, through the operator's sums -------------
# Two nodes of 4 CPU at a 50 % threshold: 4 CPU may be requested. Another tenant's pod of 3.5 CPU that counts
# leaves no room under it for an SJ of 1 CPU (which would fit on the nodes' free room); one that does not count
# leaves all of it. `memo.PassMemo.admission` is the controller's path: the pod's view (`observed.pod_view`),
# the running sums (`memo.PodSums`), the pools' limits (`policy.capacity`).

HALF = PolicyConfig(threshold=0.5, starvation_after=timedelta(days=365))
NO_NODE_POOL = Pool("nowhere", (("scavenger.dev/pool", "none-has-this"),), 1.0)
"""A pool that holds no node: the default pool's used is then worked out from the nodes' sums and the unbound pods."""
FOUR_CPU = tuple(NodeInfo(name=f"n{i}", allocatable=freeze({"cpu": 4000, "memory": 16 * GI, "pods": 110_000}),
                          labels={}, taints=(), unschedulable=False, ready=True) for i in range(2))
NO_ROOM = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
           "message": "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector.",
           "lastTransitionTime": "2025-01-01T11:59:00Z"}
BOUND = {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2025-01-01T11:59:00Z"}
GATED = {**NO_ROOM, "reason": "SchedulingGated", "message": "Scheduling is blocked due to non-empty scheduling gates"}
ONE_CPU = sj("other/sj", request={"cpu": 1000, "pods": 1000})


def raw_pod(name: str = "stuck", namespace: str = "tenant", *, node: str | None = None,
            labels: dict[str, str] | None = None, priority_class: str | None = None,
            **status: object) -> dict[str, object]:
    """A pod of 3.5 CPU as the API server stores it (``status``: its status fields)."""
    spec: dict[str, object] = {"nodeSelector": {"nope": "x"}, "containers": [
        {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "3500m"}}}]}
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    if node is not None:
        spec = {**spec, "nodeName": node, "nodeSelector": {}}
    return {"metadata": {"namespace": namespace, "name": name, "uid": f"uid-{namespace}-{name}",
                         "labels": labels or {}, "creationTimestamp": "2025-01-01T11:58:00Z"},
            "spec": spec, "status": {"phase": "Pending", **status}}


def with_spec(pod: dict[str, Any], **fields: object) -> dict[str, Any]:
    """``pod`` with ``fields`` added to its spec."""
    return {**pod, "spec": {**pod["spec"], **fields}}


def admission_of(pods: tuple[dict[str, object], ...], runs: tuple[InFlightRun, ...] = (),
                 pools: tuple[Pool, ...] = (), memo: PassMemo | None = None) -> tuple[str, str]:
    """``ONE_CPU``'s fate, ``admitted`` or its waiting reason, and the cpu the threshold counts as requested."""
    memo = PassMemo(DEFAULT_LIMITS) if memo is None else memo
    views = tuple(pod_view(p) for p in pods)
    view = ClusterView(sjs=(), jobs={}, run_pods={}, active_pods=tuple(v for v in views if v.holds_resources),
                       nodes=FOUR_CPU)
    result = memo.admission(view, (ONE_CPU,), runs, NOW, replace(HALF, pools=pools))
    if result.admitted:
        return "admitted", ""
    waiting = result.waiting[ONE_CPU.key]
    return waiting.reason, waiting.message.rsplit(" and ", 1)[-1]


@pytest.mark.parametrize("pools", [(), (NO_NODE_POOL,)], ids=["one pool", "with pools"])
@pytest.mark.parametrize(("pod", "expected"), [
    # The scheduler found no node for it and preempts for none: fewer scavenger pods would not make it room.
    (raw_pod(conditions=[NO_ROOM]), "admitted"),
    (raw_pod(conditions=[NO_ROOM], nominatedNodeName=""), "admitted"),
    # It preempts on a nominated node: real demand, about to land.
    (raw_pod(conditions=[NO_ROOM], nominatedNodeName="n0"), "ThresholdReached"),
    # Waiting for the scheduler (a backlog, or gates just lifted): it may land any moment.
    (raw_pod(), "ThresholdReached"),
    (raw_pod(conditions=[GATED]), "ThresholdReached"),
    # No scheduler the operator counts will place it: gated, or another scheduler's (`--schedulers`).
    (with_spec(raw_pod(conditions=[GATED]), schedulingGates=[{"name": "example.com/hold"}]), "admitted"),
    (with_spec(raw_pod(), schedulerName="nobody-runs-this"), "admitted"),
    (with_spec(raw_pod(node="n0", conditions=[BOUND]), schedulerName="nobody-runs-this"), "ThresholdReached"),
    # PodScheduled False for another reason than no room: not judged unschedulable.
    (raw_pod(conditions=[{**NO_ROOM, "reason": "SchedulerError"}]), "ThresholdReached"),
    # Bound: on its node's sums (that node has room for the SJ, the threshold does not).
    (raw_pod(node="n0", conditions=[BOUND]), "ThresholdReached"),
    (raw_pod(node="n0", conditions=[NO_ROOM]), "ThresholdReached"),  # bound, its condition not updated yet
    (raw_pod(node="n0", phase="Running", conditions=[BOUND]), "ThresholdReached"),
    # Finished: holds nothing.
    (raw_pod(node="n0", phase="Succeeded", conditions=[BOUND]), "admitted"),
], ids=["no room", "no room, empty nomination", "no room, nominated", "not looked at", "gates lifted", "gated",
        "another scheduler's", "another scheduler's, bound", "scheduler error",
        "bound", "bound, stale condition", "running", "succeeded"])
def test_a_pod_the_scheduler_found_no_node_for_and_nominated_none_does_not_count(
        pod: dict[str, object], expected: str, pools: tuple[Pool, ...]) -> None:
    """One pod no node can take (a nodeSelector no node has) must not stop scavenging for every tenant."""
    reason, requested = admission_of((pod,), pools=pools)
    assert reason == expected
    if reason == "ThresholdReached":
        assert requested == "3.5 CPU is requested"


def test_the_sums_follow_a_pod_from_no_room_to_its_node() -> None:
    """The same pod as the watch brings it: each change moves what the threshold counts, and only that."""
    memo = PassMemo(DEFAULT_LIMITS)
    for pod, expected, counted, on_n0 in [
            (raw_pod(), "ThresholdReached", 3500, 0),
            (raw_pod(conditions=[NO_ROOM]), "admitted", 0, 0),
            (raw_pod(conditions=[NO_ROOM], nominatedNodeName="n0"), "ThresholdReached", 3500, 0),
            (raw_pod(conditions=[NO_ROOM]), "admitted", 0, 0),  # its nomination dropped
            (raw_pod(node="n0", conditions=[BOUND]), "ThresholdReached", 3500, 3500)]:
        assert admission_of((pod,), memo=memo)[0] == expected
        assert (memo.sums.cluster.get("cpu", 0), memo.sums.nodes.get("n0", {}).get("cpu", 0)) == (counted, on_n0)


def test_many_small_pods_the_scheduler_has_not_reached_still_count() -> None:
    """A backlog (a burst of pods not looked at yet) is demand about to land: it holds the threshold's room."""
    small = tuple({**raw_pod(f"p{i}"), "spec": {"containers": [{"name": "main", "resources": {
        "requests": {"cpu": "100m"}}}]}} for i in range(35))
    assert admission_of(small) == ("ThresholdReached", "3.5 CPU is requested")
    judged = tuple({**p, "status": {"phase": "Pending", "conditions": [NO_ROOM]}} for p in small)
    assert admission_of(judged)[0] == "admitted"


@pytest.mark.parametrize("status", [{}, {"conditions": [NO_ROOM]}, {"conditions": [NO_ROOM], "nominatedNodeName": ""}],
                         ids=["not looked at", "no room", "no room, empty nomination"])
def test_the_operators_own_pending_run_pods_are_accounted_for_their_runs_as_before(status: dict[str, object]) -> None:
    """A launched run whose pod is pending: its run in flight reserves its room (the threshold counts it, in the
    default pool when no node has room), and its namespace's usage counts it as a band pod, whatever the scheduler
    made of it; the pod's view still reads as a pending, placed-or-not member of its run (its start timeout)."""
    labels = {"scavenger.dev/job-name": "sj", "scavenger.dev/run": "sj-1"}
    own = raw_pod("sj-1-0-abcde", "mine", labels=labels, priority_class="scavenger-band-0", **status)
    run = InFlightRun(key="mine/sj", pods=1, request={"cpu": 3500, "pods": 1000})
    memo = PassMemo(DEFAULT_LIMITS)
    for pools in ((), (NO_NODE_POOL,)):
        assert admission_of((own,), (run,), pools, memo)[0] == "ThresholdReached"
    assert memo.sums.namespaces["mine"]["cpu"] == 3500
    view = pod_view(own)
    assert (view.run, view.sj, view.node, view.holds_resources) == ("sj-1", "sj", None, True)
    assert (view.placed is not None) == bool(status)
    # Its run scheduled: nothing left in flight, and a pod bound counts on its node.
    bound = raw_pod("sj-1-0-abcde", "mine", node="n0", labels=labels, conditions=[BOUND])
    assert admission_of((bound,), (), (), memo) == ("ThresholdReached", "3.5 CPU is requested")
