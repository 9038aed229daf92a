"""Why an SJ waits: the reasons and numbers of the Admitted condition, and that writing them costs no
write storm."""
from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from sj_operator.api import Condition, ScavengerJobStatus
from sj_operator.config import OperatorConfig
from sj_operator.controller import Controller
from sj_operator.explain import WHY_REFRESH
from sj_operator.observed import ClusterQuotaView, NamespaceView, QuotaView, selector_view
from sj_operator.policy.admission import PolicyConfig, Waiting, decide, decide_pass
from sj_operator.policy.conditions import WAIT_REASONS, admitted_condition, set_admitted, wait_changed
from sj_operator.policy.lifecycle import launch_forbidden
from tests.unit import test_admission as adm
from tests.unit import test_controller as ctl
from tests.unit import test_lifecycle as lc

GI = adm.GI
NOW = adm.NOW
PATIENT = adm.PATIENT
FULL = PolicyConfig(threshold=1.0, starvation_after=timedelta(days=365))


def why(nodes, queue, config=PATIENT, **kw) -> dict[str, Waiting]:
    snap = adm.snapshot(nodes, queue, **kw)
    result = decide_pass(snap, NOW, config)
    assert result.admitted == decide(snap, NOW, config), "explaining changes nothing that is admitted"
    return result.waiting


@pytest.mark.parametrize(("nodes", "queue", "config", "reason", "message"), [
    ([adm.node("a", cpu=8000, used={"cpu": 5000})], [adm.sj("ns/x", cpu=2000, pods=2)], PolicyConfig(threshold=0.75),
     "ThresholdReached", "needs 2 pods of 2 CPU (4 CPU in all); requests may reach 75% of the 8 CPU allocatable "
     "(6 CPU) and 5 CPU is requested"),
    ([adm.node("a", cpu=4000)], [adm.sj("ns/x", request={adm.GPU: 1000})], FULL,
     "ThresholdReached", "needs 1 pod of 1 nvidia.com/gpu; no schedulable node has nvidia.com/gpu"),
    ([adm.node("a", cpu=4000, used={"cpu": 3000}), adm.node("b", cpu=4000, used={"cpu": 2500})],
     [adm.sj("ns/x", request={"cpu": 2000, "memory": 2 * GI})], FULL,
     "NoNodeFitsGang", "needs 1 pod of 2 CPU, 2Gi memory; the largest free cpu on a node it may use is 1.5 CPU on b"),
    ([adm.node("a", cpu=4000, used={"cpu": 1000}), adm.node("b", cpu=4000, used={"cpu": 1000})],
     [adm.sj("ns/x", cpu=2000, pods=3)], FULL,
     "NoNodeFitsGang",
     "needs 3 pods of 2 CPU; the free room of the 2 node(s) it may use holds 2 of the 3 pods at once"),
    ([adm.node("a", cpu=4000)], [adm.sj("ns/x", node_selector={"zone": "z"})], FULL,
     "NoNodeFitsGang", "needs 1 pod of 1 CPU; no schedulable node matches its nodeSelector and tolerations"),
], ids=["threshold", "resource-nowhere", "largest-free", "gang-room", "no-eligible-node"])
def test_each_sj_that_is_not_admitted_says_why_with_the_numbers(nodes, queue, config, reason, message):
    assert why(nodes, queue, config) == {"ns/x": Waiting(reason, message)}


def test_a_starving_head_keeps_the_room_and_those_behind_it_say_so():
    nodes = [adm.node("a", cpu=4000, used={"cpu": 3000})]
    head = adm.sj("ns/head", cpu=2000, age_min=600)
    small = adm.sj("ns/small", cpu=500)
    waiting = why(nodes, [head, small], PolicyConfig(threshold=1.0, starvation_after=timedelta(minutes=5)))
    assert waiting["ns/head"].reason == "ThresholdReached"
    assert waiting["ns/small"].reason == "NoNodeFitsGang"
    assert "kept for ns/head, first in the queue and waiting since" in waiting["ns/small"].message
    # Not starving yet: the small one is backfilled.
    assert set(why(nodes, [head, small], FULL)) == {"ns/head"}


def test_explanations_follow_what_earlier_sjs_of_the_pass_took():
    nodes = [adm.node("a", cpu=4000)]
    waiting = why(nodes, [adm.sj("ns/a", cpu=3000, age_min=3), adm.sj("ns/b", cpu=3000, age_min=2),
                          adm.sj("ns/c", cpu=3000, age_min=1)], FULL)
    assert set(waiting) == {"ns/b", "ns/c"}
    assert "requests may reach 100% of the 4 CPU allocatable (4 CPU) and 3 CPU is requested" in waiting["ns/b"].message


# --- the condition ---------------------------------------------------------------------------------

def _waiting_since(reason: str, message: str) -> tuple[Condition, ...]:
    return set_admitted((), False, reason, message, NOW)


@pytest.mark.parametrize(("conditions", "reason", "message", "since", "expected"), [
    ((), "ThresholdReached", "m", None, True),
    (set_admitted((), True, "Launched", "run", NOW), "ThresholdReached", "m", 1.0, True),
    (_waiting_since("ThresholdReached", "m"), "NoNodeFitsGang", "m", 1.0, True),
    (_waiting_since("ThresholdReached", "m"), "ThresholdReached", "m", 1e9, False),
    (_waiting_since("ThresholdReached", "m"), "ThresholdReached", "n", 1.0, False),
    (_waiting_since("ThresholdReached", "m"), "ThresholdReached", "n", 120.0, True),
    (_waiting_since("ThresholdReached", "m"), "ThresholdReached", "n", None, True),
], ids=["none-yet", "was-admitted", "other-reason", "same", "numbers-moved-recently", "numbers-moved-long-ago",
        "numbers-moved-unknown-when"])
def test_the_reason_is_written_at_once_and_its_numbers_at_most_once_per_refresh(conditions, reason, message, since,
                                                                                 expected):
    assert wait_changed(conditions, reason, message, since_written=since, refresh=120.0) is expected


def test_admitted_moves_its_transition_time_only_when_it_flips():
    first = set_admitted((), False, "ThresholdReached", "a", NOW - timedelta(minutes=5))
    again = set_admitted(first, False, "NoNodeFitsGang", "b", NOW)
    assert admitted_condition(again).last_transition_time == NOW - timedelta(minutes=5)
    admitted = set_admitted(again, True, "Launched", "run", NOW)
    assert (admitted_condition(admitted).status, admitted_condition(admitted).last_transition_time) == ("True", NOW)


def test_the_state_machine_says_why_for_suspension_start_timeouts_and_refusals():
    suspended = lc.decide(lc.spec(suspend=True), lc.starting(launched=NOW)).status
    assert admitted_condition(suspended.conditions).reason == "Suspended"
    timed_out = lc.decide(lc.spec(), lc.starting(launched=lc.NOW - lc.M), lc.run_of(lc.job(), lc.pod(0, "Pending")))
    cond = admitted_condition(timed_out.status.conditions)
    assert (cond.status, cond.reason) == ("False", "StartTimeout")
    assert "1 start timeout(s) in a row" in cond.message and "next try after" in cond.message
    recorded = lc.decide(lc.spec(), ScavengerJobStatus(),
                         lc.run_of(lc.job(created=lc.NOW - lc.M, started=lc.NOW - lc.M)))
    assert admitted_condition(recorded.status.conditions).status == "True", "a run recorded admits its SJ"
    refused = launch_forbidden(ScavengerJobStatus(), NOW, "QuotaExceeded", "no room")
    assert admitted_condition(refused.status.conditions).reason == "QuotaExceeded"
    assert launch_forbidden(refused.status, NOW, "QuotaExceeded", "no room").events == (), "the same refusal again"
    assert {"Suspended", "StartTimeout", "QuotaExceeded"} <= set(WAIT_REASONS)


# --- the loop ----------------------------------------------------------------------------------------

@pytest.fixture
def kube() -> ctl.FakeKube:
    return ctl.FakeKube()


def _admitted(kube) -> dict:
    status = [c for kind, c in kube.calls if kind == "status"][-1]
    return next(c for c in status["conditions"] if c["type"] == "Admitted")


def test_a_new_sj_that_does_not_fit_is_queued_and_says_why_in_one_write(kube):
    controller = Controller(kube, OperatorConfig(), clock=lambda: ctl.NOW)  # type: ignore[arg-type]
    ctl.run(controller, ctl.view(ctl.sj(cpu="7")))
    assert kube.kinds() == ["status", "event"], "one status write: the transition and the reason together"
    cond = _admitted(kube)
    assert (cond["status"], cond["reason"]) == ("False", "ThresholdReached")
    assert "needs 1 pod of 7 CPU" in cond["message"] and "8 CPU allocatable" in cond["message"]


def test_moving_numbers_are_written_at_most_once_per_refresh(kube):
    clock = [0.0]
    controller = Controller(kube, OperatorConfig(), clock=lambda: ctl.NOW,  # type: ignore[arg-type]
                            monotonic=lambda: clock[0])
    ctl.run(controller, ctl.view(ctl.sj(cpu="7")))
    stored = [c for kind, c in kube.calls if kind == "status"][-1]
    waiting = ctl.sj(stored, rv=str(kube.rv), cpu="7")
    small = ctl.NodeInfo(name="n2", allocatable={"cpu": 1000, "memory": 2**30 * 1000, "pods": 110_000},
                         labels={}, taints=(), unschedulable=False, ready=True)  # more room, still too little
    kube.calls.clear()
    clock[0] = 10.0
    ctl.run(controller, ctl.view(waiting, nodes=(ctl.node(), small)))
    assert kube.calls == [], "only the numbers moved, 10 s after the last write: nothing is written"
    clock[0] = 10.0 + WHY_REFRESH
    ctl.run(controller, ctl.view(waiting, nodes=(ctl.node(), small)))
    assert kube.kinds() == ["status"] and "9 CPU allocatable" in _admitted(kube)["message"]


@pytest.mark.parametrize(("config", "quotas", "cluster_quotas", "named"), [
    (OperatorConfig(default_namespace_quota={"cpu": 500}), (), (),
     "may request 0.5 CPU for its SJs at once (the operator's --default-namespace-quota)"),
    (OperatorConfig(), (QuotaView("ns", "mine", {"cpu": 100_000}, 100),),
     (ClusterQuotaView("tenants", selector_view({}), {"cpu": 500}, 1),),
     "may request 0.5 CPU for its SJs at once (ScavengerClusterQuota tenants)"),
], ids=["default", "cluster-quota"])
def test_an_sj_over_its_namespaces_quota_says_which_quota_capped_it(kube, config, quotas, cluster_quotas, named):
    """What `kubectl sj why` shows: the reason, the numbers and the quota whose cap it is, from the
    operator's flags and the watched quotas through the controller (a tenant's own bigger quota beside)."""
    controller = Controller(kube, config, clock=lambda: ctl.NOW)  # type: ignore[arg-type]
    v = replace(ctl.view(ctl.sj(cpu="1")), quotas=quotas, cluster_quotas=cluster_quotas,
                namespaces=(NamespaceView("ns", {}),))
    ctl.run(controller, v)
    cond = _admitted(kube)
    assert (cond["status"], cond["reason"]) == ("False", "QuotaExceeded")
    assert named in cond["message"] and cond["message"].startswith("needs 1 pod of 1 CPU, 1Gi memory; namespace ns ")
