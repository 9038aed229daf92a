"""Per-namespace quotas and fair share (the effective quota of each namespace, `policy.tenancy`): caps,
dominant-resource fairness, the reason naming the quota that capped it."""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from sj_operator.observed import quota_view
from sj_operator.policy.admission import decide, decide_pass
from sj_operator.policy.snapshot import NamespaceQuota
from tests.unit import test_admission as adm

NOW = adm.NOW
GI = adm.GI


def backlog(namespace: str, count: int, cpu: int = 1000, oldest_min: float = 60, **kw) -> list:
    return [adm.sj(f"{namespace}/sj-{i:02d}", cpu=cpu, age_min=oldest_min - i, **kw) for i in range(count)]


def admitted_per_namespace(snap) -> Counter:
    return Counter(a.key.split("/")[0] for a in decide(snap, NOW, adm.NO_THRESHOLD))


def test_without_quotas_the_queue_is_one_as_before():
    nodes = [adm.node("a", cpu=8000)]
    queue = backlog("a", 8) + backlog("b", 8, oldest_min=30)
    snap = adm.snapshot(nodes, queue)
    assert admitted_per_namespace(snap) == {"a": 8}, "oldest first: namespace a's backlog is older"


@pytest.mark.parametrize(("weights", "expected"), [
    ({"a": 1, "b": 3}, {"a": 2, "b": 6}),
    ({"a": 1, "b": 1}, {"a": 4, "b": 4}),
    ({"b": 3}, {"a": 2, "b": 6}),  # a namespace without a quota has weight 1
], ids=["1-to-3", "even", "one-quota"])
def test_namespaces_share_the_room_by_weight(weights, expected):
    nodes = [adm.node("a", cpu=8000)]
    queue = backlog("a", 8) + backlog("b", 8)
    quotas = {ns: NamespaceQuota(weight=w) for ns, w in weights.items()}
    snap = replace(adm.snapshot(nodes, queue), quotas=quotas)
    assert admitted_per_namespace(snap) == expected


def test_what_a_namespace_already_runs_counts_toward_its_share():
    nodes = [adm.node("a", cpu=8000, used={"cpu": 4000})]
    queue = backlog("a", 8) + backlog("b", 8)
    snap = replace(adm.snapshot(nodes, queue), quotas={"a": NamespaceQuota()},
                   namespace_used={"a": {"cpu": 4000}})
    assert admitted_per_namespace(snap) == {"b": 4}, "a already holds half: b catches up first"


def test_the_dominant_resource_decides():
    nodes = [adm.node("a", cpu=8000, memory=8 * GI)]
    queue = (backlog("mem", 4, request={"cpu": 500, "memory": 2 * GI})
             + backlog("cpu", 8, request={"cpu": 1000, "memory": GI // 4}))
    snap = replace(adm.snapshot(nodes, queue), quotas={"mem": NamespaceQuota(), "cpu": NamespaceQuota()})
    # Equal dominant shares when the room is full: mem's 3 pods hold 75 % of the memory, cpu's 6 pods 75 % of
    # the CPU (a share by pod count would have given cpu far fewer).
    assert admitted_per_namespace(snap) == {"mem": 3, "cpu": 6}


def test_a_hard_cap_holds_and_says_why_with_the_numbers():
    nodes = [adm.node("a", cpu=16_000)]
    queue = backlog("team", 6)
    quotas = {"team": NamespaceQuota(hard={"cpu": 3000}, capped_by={"cpu": "ScavengerClusterQuota tenants"})}
    snap = replace(adm.snapshot(nodes, queue), quotas=quotas, namespace_used={"team": {"cpu": 1000}})
    result = decide_pass(snap, NOW, adm.NO_THRESHOLD)
    assert len(result.admitted) == 2, "1 CPU runs already; the cap is 3"
    why = result.waiting["team/sj-02"]
    assert why.reason == "QuotaExceeded"
    assert why.message == ("needs 1 pod of 1 CPU; namespace team may request 3 CPU for its SJs at once "
                           "(ScavengerClusterQuota tenants) and they request 3 CPU")


def test_a_fallback_within_the_cap_runs_when_the_preferred_shape_is_over_it():
    from sj_operator.policy.snapshot import Shape
    nodes = [adm.node("a", cpu=16_000)]
    wide = adm.sj("team/wide", cpu=1000, pods=8, age_min=30, fallbacks=(Shape(2, {"cpu": 1000}),))
    snap = replace(adm.snapshot(nodes, [wide]), quotas={"team": NamespaceQuota(hard={"cpu": 4000})})
    assert [(a.key, a.config_index) for a in decide(snap, NOW, adm.NO_THRESHOLD)] == [("team/wide", 1)]


def test_a_quota_object_is_read_tolerantly():
    view = quota_view({"metadata": {"namespace": "t", "name": "q"},
                       "spec": {"hard": {"cpu": "4", "memory": "8Gi", "bad": "x"}, "weight": 3}})
    assert (view.namespace, view.name, view.weight) == ("t", "q", 3)
    assert view.hard == {"cpu": 4000, "memory": 8 * GI}
    assert quota_view({"metadata": {"namespace": "t", "name": "q"}, "spec": {"weight": 0}}).weight == 1
