"""Node pools: an overflow (burst) pool with its own threshold beside the default pool."""
from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sj_operator.policy.admission import Admission, PolicyConfig, decide, decide_pass
from sj_operator.policy.snapshot import ClusterSnapshot, NodeView, QueuedSJ, Shape, Taint
from sj_operator.settings import Pool, parse_pools
from tests.unit import test_admission as adm
from tests.unit.helpers import tol

NOW = adm.NOW
BURST_LABELS = {"scavenger.dev/pool": "burst"}
BURST_TAINT = Taint("scavenger.dev/pool", "burst", "NoSchedule")
TOLERATE_BURST = (tol("scavenger.dev/pool", "Equal", "burst", "NoSchedule"),)
BURST = Pool("burst", (("scavenger.dev/pool", "burst"),), 1.0)
POOLS = PolicyConfig(threshold=0.5, starvation_after=timedelta(days=365), pools=(BURST,))
TO_BURST = Shape(1, {"cpu": 1000}, BURST_LABELS, TOLERATE_BURST)


def nodes(main_used: int, burst_used: int = 0) -> list[NodeView]:
    """Two main nodes of 4 CPU (``main_used`` CPU requested on ``a``) and one tainted burst node of 4 CPU."""
    return [adm.node("a", cpu=4000, used={"cpu": main_used}), adm.node("b", cpu=4000),
            adm.node("x", cpu=4000, used={"cpu": burst_used}, labels=BURST_LABELS, taints=(BURST_TAINT,))]


def overflowing(key: str = "ns/o", after: timedelta = timedelta(0), **kw) -> QueuedSJ:
    return adm.sj(key, cpu=1000, fallbacks=(TO_BURST,), fallback_after=after, **kw)


@pytest.mark.parametrize(("main_used", "burst_used", "queued", "expected"), [
    (0, 0, overflowing(), [Admission("ns/o", ("a",), 0)]),  # room in the main pool: it goes there first
    (3500, 0, overflowing(), [Admission("ns/o", ("x",), 1)]),  # main pool past 50 %: the burst pool at once
    (3500, 3000, overflowing(), [Admission("ns/o", ("x",), 1)]),  # the burst pool may fill up to 100 %
    (3500, 3500, overflowing(), []),  # ... and no further
    (3500, 0, overflowing(after=timedelta(minutes=5)), []),  # the fallback waits for fallbackAfter
    (3500, 0, adm.sj("ns/plain"), []),  # an SJ that does not allow the burst pool waits
    (0, 0, adm.sj("ns/t", tolerations=TOLERATE_BURST), [Admission("ns/t", ("a",), 0)]),
    (3500, 0, adm.sj("ns/t", tolerations=TOLERATE_BURST), [Admission("ns/t", ("x",), 0)]),
], ids=["main-first", "overflow-at-once", "burst-to-full", "burst-full", "fallback-after", "no-overflow",
        "tolerating-main-first", "tolerating-overflows"])
def test_each_pool_has_its_own_threshold(main_used, burst_used, queued, expected):
    snap = adm.snapshot(nodes(main_used, burst_used), [queued])
    assert decide(snap, NOW, POOLS) == expected


def test_new_sjs_go_to_the_main_pool_first_when_room_comes_back():
    queue = [overflowing("ns/1", age_min=3), overflowing("ns/2", age_min=2), overflowing("ns/3", age_min=1)]
    # 4 of 8 main CPUs may be requested: 2 are, so two SJs fit there and the third overflows.
    placed = decide(adm.snapshot(nodes(2000), queue), NOW, POOLS)
    assert [(a.key, a.config_index) for a in placed] == [("ns/1", 0), ("ns/2", 0), ("ns/3", 1)]
    assert Counter(node for a in placed for node in a.nodes) == {"a": 2, "x": 1}  # first fit


def test_a_gang_runs_within_one_pool():
    # One free CPU in the main pool and one in the burst pool: a tolerating 2-pod gang does not straddle them.
    both = [adm.node("a", cpu=2000, used={"cpu": 1000}),
            adm.node("x", cpu=2000, used={"cpu": 1000}, labels=BURST_LABELS, taints=(BURST_TAINT,))]
    gang = adm.sj("ns/g", cpu=1000, pods=2, tolerations=TOLERATE_BURST)
    one_pool = PolicyConfig(threshold=1.0, starvation_after=timedelta(days=365))
    assert decide(adm.snapshot(both, [gang]), NOW, one_pool) == [Admission("ns/g", ("a", "x"), 0)]
    assert decide(adm.snapshot(both, [gang]), NOW, PolicyConfig(threshold=1.0, pools=(BURST,))) == []


def test_pending_pods_count_in_the_default_pool():
    # 3 CPU of pods bound to no node: the main pool (4 of 8 allowed) has room for one more CPU only.
    snap = adm.snapshot(nodes(0), [adm.sj("ns/1", age_min=2), adm.sj("ns/2", age_min=1)],
                        extra_requested={"cpu": 3000})
    assert [a.key for a in decide(snap, NOW, POOLS)] == ["ns/1"]


def test_the_waiting_reason_names_the_pool_and_its_numbers():
    waiting = decide_pass(adm.snapshot(nodes(3500), [adm.sj("ns/plain")]), NOW, POOLS).waiting["ns/plain"]
    assert waiting.reason == "ThresholdReached"
    assert waiting.message == ("needs 1 pod of 1 CPU (1 CPU in all); requests may reach 50% of the 8 CPU allocatable "
                               "of pool default (4 CPU) and 3.5 CPU is requested")
    full = decide_pass(adm.snapshot(nodes(3500, 3500), [overflowing()]), NOW, POOLS).waiting["ns/o"]
    assert full.reason == "ThresholdReached"


@settings(max_examples=300, deadline=None)
@given(snap=adm.snapshots(), config=adm.configs)
def test_a_pool_that_holds_no_node_changes_nothing(snap: ClusterSnapshot, config: PolicyConfig) -> None:
    empty = Pool("nowhere", (("scavenger.dev/pool", "none-has-this"),), 1.0)
    with_pool = PolicyConfig(config.threshold, config.starvation_after, pools=(empty,))
    assert decide(snap, NOW, with_pool) == decide(snap, NOW, config)


@settings(max_examples=300, deadline=None)
@given(snap=adm.snapshots(with_in_flight=False), threshold=st.sampled_from([0.0, 0.5, 1.0]),
       burst=st.sampled_from([0.0, 0.5, 1.0]), split=st.integers(0, 3))
def test_each_pool_stays_within_its_threshold(snap: ClusterSnapshot, threshold: float, burst: float,
                                              split: int) -> None:
    # The first ``split`` nodes (by name) form the burst pool.
    names = sorted(n.name for n in snap.nodes)[:split]
    labelled = tuple(NodeView(n.name, n.allocatable, n.requested, {**n.labels, "pool": "burst"} if n.name in names
                              else n.labels, n.taints, n.unschedulable) for n in snap.nodes)
    snap = ClusterSnapshot(labelled, snap.cluster_requested, (), snap.queue)
    config = PolicyConfig(threshold, timedelta(days=365), pools=(Pool("burst", (("pool", "burst"),), burst),))
    admissions = decide(snap, NOW, config)
    by_key = {sj.key: sj for sj in snap.queue}
    pool_of = {n.name: "burst" if n.name in names else "default" for n in snap.nodes}
    for pool, share in (("default", threshold), ("burst", burst)):
        members = [n for n in snap.nodes if pool_of[n.name] == pool]
        allocatable: Counter[str] = Counter()
        requested: Counter[str] = Counter()
        for n in members:
            requested.update(n.requested)
            if not n.unschedulable:
                allocatable.update(n.allocatable)
        if pool == "default":
            requested.update({r: amount - sum(n.requested.get(r, 0) for n in snap.nodes)
                              for r, amount in snap.cluster_requested.items()})
        added: Counter[str] = Counter()
        for admission in admissions:
            assert len({pool_of[node] for node in admission.nodes}) == 1  # one pool per gang
            if pool_of[admission.nodes[0]] == pool:
                added.update({r: a * len(admission.nodes) for r, a in by_key[admission.key].request.items()})
        for r, amount in added.items():
            if amount > 0:
                assert requested[r] + amount <= allocatable[r] * share + 1e-9


@pytest.mark.parametrize(("text", "pools"), [
    ("", ()),
    ("burst:scavenger.dev/pool=burst:1.0", (BURST,)),
    ("burst:scavenger.dev/pool=burst:1 ; spot:a=b,c=d:0.5",
     (Pool("burst", (("scavenger.dev/pool", "burst"),), 1.0), Pool("spot", (("a", "b"), ("c", "d")), 0.5))),
])
def test_pools_parse(text, pools):
    assert parse_pools(text) == pools


@pytest.mark.parametrize(("text", "words"), [
    ("burst:1.0", "is not NAME:KEY=VALUE"),
    ("burst:pool:1.0", "is not NAME:KEY=VALUE"),
    ("burst::1.0", "needs a node selector"),
    ("burst:a=b:1.5", "pool burst: threshold must be within [0, 1]"),
    ("burst:a=b:lots", "threshold 'lots' is not a number"),
    ("default:a=b:1", "taken by the default pool"),
    ("b:a=b:1;b:c=d:1", "pool names must be unique"),
])
def test_bad_pools_are_refused_naming_the_problem(text, words):
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("]", r"\]")):
        parse_pools(text)
