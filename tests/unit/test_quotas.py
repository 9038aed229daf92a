"""Quotas a tenant cannot raise (`policy.tenancy.effective_quotas`): the administrator's ScavengerClusterQuotas
select namespaces by label, the operator's defaults cover the namespaces none selects, and a namespace's own
ScavengerQuota only ever tightens: the tightest cap wins, resource by resource, and its weight can lower the
namespace's share but never raise it."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest

from sj_operator.api import DEFAULT_LIMITS
from sj_operator.api.quota import LabelSelector, ScavengerClusterQuotaSpec
from sj_operator.caches import PodCache
from sj_operator.decide import ClusterView
from sj_operator.memo import PassMemo
from sj_operator.names import LABEL_RUN, LABEL_SJ
from sj_operator.observed import (
    ClusterQuotaView,
    NamespaceView,
    NodeInfo,
    QuotaView,
    cluster_quota_view,
    namespace_view,
    selector_view,
)
from sj_operator.policy.admission import decide_pass
from sj_operator.policy.queue import PolicyConfig
from sj_operator.policy.snapshot import NamespaceQuota
from sj_operator.policy.tenancy import DEFAULT_CAP_SOURCE, NO_DEFAULTS, QuotaDefaults, effective_quotas, selects
from tests.unit import test_admission as adm
from tests.unit.reference_pass import admission_snapshot

NOW = adm.NOW
GI = adm.GI
CPU = 1000


def cq(name: str, selector: dict[str, Any] | None, weight: int = 1, **hard: int) -> ClusterQuotaView:
    """A ScavengerClusterQuota; ``hard`` in milli-units (``cpu=4 * CPU``)."""
    return ClusterQuotaView(name=name, selector=selector_view(selector), hard=hard, weight=weight)


def sq(namespace: str, name: str, weight: int = 1, **hard: int) -> QuotaView:
    """A namespace's ScavengerQuota."""
    return QuotaView(namespace=namespace, name=name, hard=hard, weight=weight)


def ns(name: str, **labels: str) -> NamespaceView:
    return NamespaceView(name=name, labels=labels)


TENANTS = {"matchLabels": {"tier": "tenant"}}
NAMESPACES = (ns("team-a", tier="tenant"), ns("team-b", tier="tenant"), ns("ops"))


@dataclass(frozen=True)
class Case:
    cluster_quotas: tuple[ClusterQuotaView, ...] = ()
    quotas: tuple[QuotaView, ...] = ()
    defaults: QuotaDefaults = NO_DEFAULTS
    namespace: str = "team-a"
    hard: dict[str, int] = field(default_factory=dict)
    weight: int = 1
    capped_by: dict[str, str] = field(default_factory=dict)


CASES = {
    "a tenant's bigger cap does not raise the cluster quota's": Case(
        cluster_quotas=(cq("tenants", TENANTS, cpu=4 * CPU),), quotas=(sq("team-a", "mine", cpu=100 * CPU),),
        hard={"cpu": 4 * CPU}, capped_by={"cpu": "ScavengerClusterQuota tenants"}),
    "a tenant's smaller cap tightens the cluster quota's": Case(
        cluster_quotas=(cq("tenants", TENANTS, cpu=4 * CPU),), quotas=(sq("team-a", "mine", cpu=2 * CPU),),
        hard={"cpu": 2 * CPU}, capped_by={"cpu": "ScavengerQuota mine"}),
    "a tenant's cap on another resource adds to the cluster quota's": Case(
        cluster_quotas=(cq("tenants", TENANTS, cpu=4 * CPU),), quotas=(sq("team-a", "mine", memory=8 * GI),),
        hard={"cpu": 4 * CPU, "memory": 8 * GI},
        capped_by={"cpu": "ScavengerClusterQuota tenants", "memory": "ScavengerQuota mine"}),
    "a tenant's bigger ScavengerQuota beside the admin's in its namespace does not raise it": Case(
        quotas=(sq("team-a", "team-a-admin", cpu=2 * CPU), sq("team-a", "a-mine", cpu=100 * CPU)),
        hard={"cpu": 2 * CPU}, capped_by={"cpu": "ScavengerQuota team-a-admin"}),
    "a tenant's weight 100 does not raise the cluster quota's weight": Case(
        cluster_quotas=(cq("tenants", TENANTS, weight=2),), quotas=(sq("team-a", "mine", weight=100),), weight=2),
    "a tenant's weight 100 does not raise the default weight": Case(
        quotas=(sq("ops", "mine", weight=100),), namespace="ops", weight=1),
    "a tenant's weight lowers its share": Case(
        cluster_quotas=(cq("tenants", TENANTS, weight=5),), quotas=(sq("team-a", "mine", weight=2),), weight=2),
    "a namespace with no quota gets the default cap and weight": Case(
        defaults=QuotaDefaults(hard={"cpu": 8 * CPU, "memory": 32 * GI}, weight=3), namespace="ops",
        hard={"cpu": 8 * CPU, "memory": 32 * GI}, weight=3,
        capped_by={"cpu": DEFAULT_CAP_SOURCE, "memory": DEFAULT_CAP_SOURCE}),
    "a tenant's bigger cap does not raise the default": Case(
        defaults=QuotaDefaults(hard={"cpu": 8 * CPU}), quotas=(sq("ops", "mine", cpu=64 * CPU),), namespace="ops",
        hard={"cpu": 8 * CPU}, capped_by={"cpu": DEFAULT_CAP_SOURCE}),
    "a cluster quota, not the default, covers the namespaces it selects": Case(
        cluster_quotas=(cq("tenants", TENANTS, weight=4, cpu=16 * CPU),),
        defaults=QuotaDefaults(hard={"cpu": 8 * CPU, "memory": 32 * GI}, weight=2),
        hard={"cpu": 16 * CPU}, weight=4, capped_by={"cpu": "ScavengerClusterQuota tenants"}),
    "several cluster quotas: the tightest cap per resource and the smallest weight": Case(
        cluster_quotas=(cq("tenants", TENANTS, weight=3, cpu=4 * CPU, memory=64 * GI),
                        cq("everyone", {}, weight=2, cpu=16 * CPU, memory=16 * GI),
                        cq("gpus", {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]}]},
                           weight=1, cpu=CPU)),
        hard={"cpu": 4 * CPU, "memory": 16 * GI}, weight=2,
        capped_by={"cpu": "ScavengerClusterQuota tenants", "memory": "ScavengerClusterQuota everyone"}),
    "a cap of 0 is a cap": Case(
        cluster_quotas=(cq("tenants", TENANTS, **{"nvidia.com/gpu": 0}),), quotas=(sq("team-a", "mine", cpu=CPU),),
        hard={"nvidia.com/gpu": 0, "cpu": CPU},
        capped_by={"nvidia.com/gpu": "ScavengerClusterQuota tenants", "cpu": "ScavengerQuota mine"}),
    "a quota of another namespace does not apply": Case(
        cluster_quotas=(cq("tenants", TENANTS, cpu=4 * CPU),), quotas=(sq("team-b", "mine", cpu=CPU),),
        hard={"cpu": 4 * CPU}, capped_by={"cpu": "ScavengerClusterQuota tenants"}),
    "a cluster quota without a selector selects nothing": Case(
        cluster_quotas=(cq("none", None, cpu=CPU),), defaults=QuotaDefaults(hard={"cpu": 8 * CPU}),
        hard={"cpu": 8 * CPU}, capped_by={"cpu": DEFAULT_CAP_SOURCE}),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_the_effective_quota_of_a_namespace(case: Case) -> None:
    quotas = effective_quotas(NAMESPACES, case.cluster_quotas, case.quotas, case.defaults)
    assert quotas.of(case.namespace) == NamespaceQuota(hard=case.hard, weight=case.weight, capped_by=case.capped_by)


def test_without_quotas_or_defaults_no_namespace_has_one() -> None:
    """So the admission keeps one queue for all, as before any quota existed."""
    quotas = effective_quotas(NAMESPACES, (), (), NO_DEFAULTS)
    assert (dict(quotas.namespaces), quotas.default) == ({}, None)
    assert effective_quotas(NAMESPACES, (cq("x", {"matchLabels": {"tier": "gpu"}}),), ()).namespaces == {}


def test_only_the_namespaces_a_quota_applies_to_are_listed_the_rest_get_the_default() -> None:
    quotas = effective_quotas(NAMESPACES, (cq("tenants", TENANTS, cpu=4 * CPU),), (sq("ops", "mine", cpu=CPU),),
                              QuotaDefaults(hard={"cpu": 2 * CPU}))
    assert sorted(quotas.namespaces) == ["ops", "team-a", "team-b"]
    assert quotas.namespaces["ops"].hard == {"cpu": CPU}, "its own cap under the default"
    assert quotas.of("new-namespace") == quotas.default == NamespaceQuota(
        hard={"cpu": 2 * CPU}, capped_by={"cpu": DEFAULT_CAP_SOURCE})


SELECTORS = [
    (None, {}, False),
    ({}, {}, True),
    ({}, {"a": "1"}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
    ({"matchLabels": {"a": "1"}}, {}, False),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"}, True),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "3"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {}, False),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "2"}, True),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "1"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
    ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
    ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"b": "1"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"b": "1"}, True),
    ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": "1"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "Matches", "values": ["1"]}]}, {"a": "1"}, False),
    ({"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]}, {"a": "1"}, False),
    ({"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]},
     {"a": "1", "b": "x"}, True),
]


@pytest.mark.parametrize(("selector", "labels", "selected"), SELECTORS)
def test_a_label_selector_selects_as_kubernetes_reads_one(selector: dict[str, Any] | None, labels: dict[str, str],
                                                          selected: bool) -> None:
    assert selects(selector_view(selector), labels) is selected
    if selector is not None and all(e["operator"] != "Matches" for e in selector.get("matchExpressions", [])):
        LabelSelector.model_validate(selector)  # what the model (and the CRD) accept


def test_the_objects_are_read_tolerantly() -> None:
    view = cluster_quota_view({"metadata": {"name": "tenants"}, "spec": {
        "namespaceSelector": {"matchLabels": {"tier": "tenant"},
                              "matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}, "junk"]},
        "hard": {"cpu": "4", "memory": "8Gi", "bad": "x"}, "weight": 3}})
    assert (view.name, view.weight, dict(view.hard)) == ("tenants", 3, {"cpu": 4000, "memory": 8 * GI})
    assert selects(view.selector, {"tier": "tenant"}) is False, "a requirement it cannot read selects nothing"
    assert cluster_quota_view({"metadata": {"name": "x"}, "spec": {"weight": True}}) == ClusterQuotaView(
        name="x", selector=None, hard={}, weight=1)
    assert namespace_view({"metadata": {"name": "team-a", "labels": {"tier": "tenant"}}}) == ns("team-a", tier="tenant")
    assert namespace_view({"metadata": {"name": "bare"}}) == ns("bare")


@pytest.mark.parametrize(("spec", "error"), [
    ({"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}, "must be non-empty with In"),
    ({"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["1"]}]}},
     "must be empty with Exists"),
    ({"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Near", "values": ["1"]}]}}, "operator"),
    ({"namespaceSelector": {"matchLabels": {"bad key": "1"}}}, "invalid key"),
    ({"hard": {"cpu": "-1"}}, "must not be negative"),
    ({"weight": 0}, "greater than or equal to 1"),
])
def test_the_cluster_quota_model_refuses_nonsense(spec: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        ScavengerClusterQuotaSpec.model_validate(spec)


# --- through the admission: what the quotas let run -----------------------------------------------------------

NODES = (NodeInfo(name="big", allocatable={"cpu": 16 * CPU, "memory": 64 * GI, "pods": 110_000}, labels={},
                  taints=(), unschedulable=False, ready=True),)


def backlog(namespace: str, count: int) -> list[Any]:
    return [adm.sj(f"{namespace}/sj-{i:02d}", request={"cpu": CPU, "pods": 1000}, age_min=60 - i)
            for i in range(count)]


def admitted(view: ClusterView, queue: list[Any], defaults: QuotaDefaults = NO_DEFAULTS) -> Counter[str]:
    snapshot = admission_snapshot(view, tuple(queue), (), defaults)
    return Counter(a.key.split("/")[0] for a in decide_pass(snapshot, NOW, adm.NO_THRESHOLD).admitted)


def test_a_tenant_quota_beside_the_admins_does_not_let_more_sjs_run() -> None:
    """Today's bug: the first ScavengerQuota by name counted, so a tenant's named to sort first replaced
    the administrator's."""
    view = ClusterView(sjs=(), jobs={}, run_pods={}, active_pods=(), nodes=NODES,
                       quotas=(QuotaView("team-a", "team-a-admin", {"cpu": 2 * CPU}, 1),
                               QuotaView("team-a", "a-mine", {"cpu": 100 * CPU}, 1)))
    assert admitted(view, backlog("team-a", 8)) == {"team-a": 2}


def test_a_tenant_quota_under_a_cluster_quota_does_not_let_more_sjs_run() -> None:
    view = ClusterView(sjs=(), jobs={}, run_pods={}, active_pods=(), nodes=NODES, namespaces=NAMESPACES,
                       cluster_quotas=(cq("tenants", TENANTS, cpu=3 * CPU),),
                       quotas=(sq("team-a", "mine", cpu=100 * CPU),))
    snapshot = admission_snapshot(view, tuple(backlog("team-a", 8)), ())
    result = decide_pass(snapshot, NOW, adm.NO_THRESHOLD)
    assert len(result.admitted) == 3
    assert result.waiting["team-a/sj-03"].message == (
        "needs 1 pod of 1 CPU; namespace team-a may request 3 CPU for its SJs at once (ScavengerClusterQuota "
        "tenants) and they request 3 CPU")


def test_a_tenant_weight_of_100_does_not_raise_its_share() -> None:
    """Two tenants under one cluster quota share 16 CPUs evenly whatever weight one gives itself."""
    for own in ((), (sq("team-a", "mine", weight=100),), (QuotaView("team-a", "aaa", {}, 100),)):
        view = ClusterView(sjs=(), jobs={}, run_pods={}, active_pods=(), nodes=NODES, namespaces=NAMESPACES,
                           cluster_quotas=(cq("tenants", TENANTS),), quotas=own)
        assert admitted(view, backlog("team-a", 16) + backlog("team-b", 16)) == {"team-a": 8, "team-b": 8}, own


def test_a_namespace_without_any_quota_gets_the_default_cap() -> None:
    view = ClusterView(sjs=(), jobs={}, run_pods={}, active_pods=(), nodes=NODES)
    assert admitted(view, backlog("ops", 8)) == {"ops": 8}, "no default: uncapped"
    assert admitted(view, backlog("ops", 8), QuotaDefaults(hard={"cpu": 5 * CPU})) == {"ops": 5}
    snapshot = admission_snapshot(view, tuple(backlog("ops", 8)), (), QuotaDefaults(hard={"cpu": 5 * CPU}))
    why = decide_pass(snapshot, NOW, adm.NO_THRESHOLD).waiting["ops/sj-05"]
    assert (why.reason, why.message) == ("QuotaExceeded", (
        "needs 1 pod of 1 CPU; namespace ops may request 5 CPU for its SJs at once (the operator's "
        "--default-namespace-quota) and they request 5 CPU"))


def test_the_memo_applies_the_quotas_as_the_pure_functions() -> None:
    """The controller's path (`memo.PassMemo.admission`, its table kept while nothing changed) decides as
    `reference_pass.admission_snapshot` does, and a namespace's label change moves it under a cluster quota."""
    memo = PassMemo(DEFAULT_LIMITS)
    policy = PolicyConfig(threshold=1.0, starvation_after=adm.NO_THRESHOLD.starvation_after,
                          quota_defaults=QuotaDefaults(hard={"cpu": 6 * CPU}))
    queue = tuple(backlog("team-a", 8) + backlog("ops", 8))
    for namespaces, expected in ((NAMESPACES, {"team-a": 2, "ops": 6}),
                                 ((ns("team-a"), ns("ops", tier="tenant")), {"team-a": 6, "ops": 2})):
        view = ClusterView(sjs=(), jobs={}, run_pods={}, active_pods=(), nodes=NODES, namespaces=namespaces,
                           cluster_quotas=(cq("tenants", TENANTS, cpu=2 * CPU),))
        mine = memo.admission(view, queue, (), NOW, policy)
        assert mine == decide_pass(admission_snapshot(view, queue, (), policy.quota_defaults), NOW, policy)
        assert Counter(a.key.split("/")[0] for a in mine.admitted) == expected


# --- what a namespace uses: its pods in the scavenger band, whatever their labels ----------------------------

RUN_LABELS = {LABEL_SJ: "sj-x", LABEL_RUN: "sj-x-r1"}


def a_pod(name: str, namespace: str = "team-a", *, labels: dict[str, str] = RUN_LABELS,
          priority_class: str | None = "scavenger-band-0", phase: str = "Running", node: str | None = "big",
          cpu: int = 2) -> dict[str, Any]:
    """A pod as the watch brings it (2 CPUs): by default one of an SJ's run, with the labels the operator gives."""
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": {"requests": {"cpu": str(cpu)}}}]}
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    if node is not None:
        spec["nodeName"] = node
    return {"metadata": {"namespace": namespace, "name": name, "uid": f"{namespace}-{name}", "labels": labels},
            "spec": spec, "status": {"phase": phase}}


USAGE: list[tuple[str, list[dict[str, Any]], int]] = [
    # (case, the pods of the cluster, the CPUs team-a's SJs use)
    ("a run's pod", [a_pod("p")], 2),
    ("a run's pod not scheduled yet", [a_pod("p", node=None)], 2),
    ("a run's pod, its SJ label taken off", [a_pod("p", labels={LABEL_RUN: "sj-x-r1"})], 2),
    ("a run's pod, every label taken off", [a_pod("p", labels={})], 2),
    ("two runs' pods, one unlabelled", [a_pod("p"), a_pod("q", labels={}, priority_class="scavenger-band-3")], 4),
    ("another workload's pod labelled like an SJ's", [a_pod("p", priority_class=None)], 0),
    ("a pod labelled like an SJ's in a class outside the band", [a_pod("p", priority_class="high-priority")], 0),
    ("a run's pod that ended", [a_pod("p", phase="Succeeded")], 0),
    ("a run's pod of another namespace", [a_pod("p", namespace="team-b")], 0),
]


@pytest.mark.parametrize(("pods", "used"), [c[1:] for c in USAGE], ids=[c[0] for c in USAGE])
def test_a_namespace_uses_what_its_pods_in_the_band_request_whatever_their_labels(pods: list[dict[str, Any]],
                                                                                   used: int) -> None:
    """Labels are the namespace's to edit (a run's pods keep running without ``scavenger.dev/job-name``); the
    pod's class is not, and only the operator's Jobs make pods in the band: a namespace's usage, which its cap
    holds down, is counted from that, through the watch cache as the controller does."""
    cache = PodCache()
    for body in pods:
        cache.apply("ADDED", body)
    view = ClusterView(sjs=(), jobs={}, run_pods={}, active_pods=cache.active(), nodes=NODES, namespaces=NAMESPACES,
                       cluster_quotas=(cq("tenants", TENANTS, cpu=6 * CPU),))
    memo, queue = PassMemo(DEFAULT_LIMITS), tuple(backlog("team-a", 8))
    mine = memo.admission(view, queue, (), NOW, adm.NO_THRESHOLD)
    assert memo.sums.namespaces.get("team-a", {}).get("cpu", 0) == used * CPU
    assert mine == decide_pass(admission_snapshot(view, queue, ()), NOW, adm.NO_THRESHOLD)
    assert len(mine.admitted) == 6 - used, "the cap is 6 CPUs, less what the namespace's SJs use"


def test_a_namespace_whose_run_pods_lost_their_labels_does_not_go_first_in_the_fair_share() -> None:
    """team-a's runs hold 8 of the 16 CPUs, their pods' labels taken off: team-b, which holds none, is served first
    and takes the 8 left."""
    cache = PodCache()
    for i in range(4):
        cache.apply("ADDED", a_pod(f"p{i}", labels={}))
    view = ClusterView(sjs=(), jobs={}, run_pods={}, active_pods=cache.active(), nodes=NODES, namespaces=NAMESPACES,
                       cluster_quotas=(cq("tenants", TENANTS),))
    queue = tuple(backlog("team-a", 8) + backlog("team-b", 8))
    mine = PassMemo(DEFAULT_LIMITS).admission(view, queue, (), NOW, adm.NO_THRESHOLD)
    assert Counter(a.key.split("/")[0] for a in mine.admitted) == {"team-b": 8}
