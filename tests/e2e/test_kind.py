"""What the operator exists for, on kind's real nodes with real containers (``SJ_E2E_CLUSTER=kind``; skipped on
the local cluster): a gang member preempted on one worker ends the whole gang, which spans both workers; the
most interrupted SJ is relaunched first when room comes back; an app's non-zero exit fails its SJ for good,
while a run that cannot start is retried.

Pods are sized from the workers' real allocatable at test time (kind's nodes show the host's CPUs): a gang
member asks for more than half of the freest worker's room, so no worker holds two and the gang's two
members run on the two workers."""
from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from sj_operator.config import OperatorConfig
from sj_operator.names import ANNOTATION_COMPLETION_INDEX
from tests.e2e.kube import HOSTNAME_LABEL, free_cpu, pod_condition, unique, wait_for, watch_pod, workload_pod
from tests.e2e.scenarios import QUEUE_CONFIG, interrupted_sj_goes_before_an_older_one, run_that_cannot_start_is_retried
from tests.e2e.sj import (
    create_sj,
    event_messages,
    jobs_of,
    run_pods,
    sj_spec,
    status,
    wait_phase,
)

pytestmark = pytest.mark.kind_only

OPERATOR_CONFIG = QUEUE_CONFIG


@pytest.fixture(scope="module")
def preemptor_class(api: client.ApiClient) -> Iterator[str]:
    """A PriorityClass far above every SJ's band and the default priority (0), whose pods preempt."""
    scheduling = client.SchedulingV1Api(api)
    name = unique("e2e-preemptor")
    scheduling.create_priority_class({"metadata": {"name": name}, "value": 1_000_000, "globalDefault": False,
                                      "preemptionPolicy": "PreemptLowerPriority",
                                      "description": "e2e: workloads that take the room back from SJs"})
    try:
        yield name
    finally:
        scheduling.delete_priority_class(name)


def _workers(api: client.ApiClient) -> dict[str, int]:
    """The mCPU free on each node an SJ's pods may use: kind's two workers (the control plane is tainted)."""
    free = free_cpu(api)
    assert len(free) == 2, f"the kind cluster this module needs has 2 workers; free mCPU per usable node: {free}"
    return free


def _member_cpu(free: dict[str, int]) -> int:
    """mCPU per gang member such that no worker holds two members but each holds one."""
    cpu = max(free.values()) // 2 + 50
    assert cpu <= min(free.values()), f"a worker too small for one member of {cpu}m: {free}"
    return cpu


def _members(api: client.ApiClient, namespace: str, run: str, nodes: int) -> dict[int, Any] | None:
    """The run's pods by completion index, once there are ``nodes`` of them, each bound to a node of its own."""
    pods = [p for p in run_pods(api, namespace, run) if p.metadata.deletion_timestamp is None]
    placed = {p.spec.node_name for p in pods if p.spec.node_name}
    if len(pods) != nodes or len(placed) != nodes:
        return None
    return {int(p.metadata.annotations[ANNOTATION_COMPLETION_INDEX]): p for p in pods}


def _run_gone(api: client.ApiClient, namespace: str, sj: str, run: str) -> bool:
    return not run_pods(api, namespace, run) and run not in [j.metadata.name for j in jobs_of(api, namespace, sj)]


def test_a_gang_member_preempted_on_one_worker_ends_the_gang_on_both(api: client.ApiClient, namespace: str,
                                                                    operator: OperatorConfig,
                                                                    preemptor_class: str) -> None:
    core = client.CoreV1Api(api)
    free = _workers(api)
    cpu = _member_cpu(free)
    create_sj(api, namespace, "team", sj_spec(run_for=None, cpu=f"{cpu}m", memory="64Mi", parallelism=2))
    wait_phase(api, namespace, "team", "Running", timeout=120)
    members = wait_for("the gang's two members, one on each worker", lambda: _members(api, namespace, "team-r1", 2))
    assert {p.spec.node_name for p in members.values()} == set(free)
    victim, other = members[1], members[0]
    node = victim.spec.node_name

    # A pod far above the SJs' priority that fits on the victim's worker only without the victim there.
    core.create_namespaced_pod(namespace, workload_pod("preemptor", {"nodeSelector": {HOSTNAME_LABEL: node}},
                                                       cpu=f"{cpu}m", priority_class=preemptor_class))
    # The scheduler marks its victim before deleting it; the operator reads that condition.
    seen = watch_pod(core, namespace, victim.metadata.name,
                     lambda pod: (c := pod_condition(pod, "DisruptionTarget")) is not None and c.status == "True")
    assert pod_condition(seen, "DisruptionTarget").reason == "PreemptionByScheduler"

    st = wait_for("the interruption recorded", lambda: (s := status(api, namespace, "team")).get(
        "interruptedCount", 0) >= 1 and s, timeout=60)
    assert (st["interruptedCount"], st["lastInterruptionReason"]) == (1, "PreemptionByScheduler"), st
    assert len(st["interruptedTimestamps"]) == 1
    # The whole gang's run is cancelled: the member on the other worker too, and the Job.
    wait_for("both members and the Job of the run gone", lambda: _run_gone(api, namespace, "team", "team-r1"),
             timeout=60)
    [interrupted] = event_messages(api, namespace, "team", "Interrupted")
    assert f"pod {victim.metadata.name}: PreemptionByScheduler" in interrupted
    assert other.metadata.name not in interrupted

    # Requeued: it waits while the preemptor holds the room one member needs (past its backoff: a gang whose
    # two members cannot share the free worker does not start).
    wait_for("the preemptor running on the victim's worker", lambda: (p := core.read_namespaced_pod(
        "preemptor", namespace)).status.phase == "Running" and p.spec.node_name == node, timeout=60)
    time.sleep(operator.thrash_backoff.total_seconds() + 2)
    st = status(api, namespace, "team")
    assert (st["phase"], st["interruptedCount"]) == ("Interrupted", 1), st
    assert jobs_of(api, namespace, "team") == []

    # Room back: the gang runs again, across both workers, from its next run.
    core.delete_namespaced_pod("preemptor", namespace, grace_period_seconds=0)
    st = wait_phase(api, namespace, "team", "Running", timeout=90)
    assert st["interruptedCount"] == 1 and st["attempt"] >= 2 and st["jobName"] == f"team-r{st['attempt']}", st
    members = wait_for("the next run's members, one on each worker",
                       lambda: _members(api, namespace, st["jobName"], 2))
    assert {p.spec.node_name for p in members.values()} == set(free)


def test_the_most_interrupted_sj_is_relaunched_first_on_a_real_worker(api: client.ApiClient, namespace: str,
                                                                      operator: OperatorConfig,
                                                                      preemptor_class: str) -> None:
    free = _workers(api)
    worker = max(free, key=lambda name: free[name])
    room = free[worker]
    # One SJ of 3/4 of the worker's room fits, two do not; the owner's half fits alone, but beside no SJ.
    interrupted_sj_goes_before_an_older_one(api, namespace, {"nodeSelector": {HOSTNAME_LABEL: worker}},
                                            sj_cpu=f"{room * 3 // 4}m", owner_cpu=f"{room // 2}m",
                                            priority_class=preemptor_class)
    st = wait_phase(api, namespace, "younger", "Running")
    assert [p.spec.node_name for p in run_pods(api, namespace, st["jobName"])] == [worker]


def test_a_members_non_zero_exit_fails_the_gang_on_both_workers_and_is_not_retried(
        api: client.ApiClient, namespace: str, operator: OperatorConfig) -> None:
    free = _workers(api)
    cpu = _member_cpu(free)
    # Member 1's app fails after 3 s; member 0's would run on.
    script = 'sleep 3; [ "$SJ_RANK" = 1 ] && exit 3; sleep 600'
    create_sj(api, namespace, "crash", sj_spec(run_for=None, cpu=f"{cpu}m", memory="64Mi", parallelism=2,
                                               command=["sh", "-c", script]))
    members = wait_for("the gang's two members, one on each worker", lambda: _members(api, namespace, "crash-r1", 2),
                       timeout=60)
    assert {p.spec.node_name for p in members.values()} == set(free)
    st = wait_phase(api, namespace, "crash", "Failed", timeout=90)
    assert f"pod {members[1].metadata.name} container main exited with code 3" in st["message"], st
    assert st["finishedTimestamp"] and st.get("interruptedCount", 0) == 0
    # The member on the other worker is stopped too.
    wait_for("no member of the run left running", lambda: not [
        p for p in run_pods(api, namespace, "crash-r1") if p.status.phase not in ("Succeeded", "Failed")], timeout=60)
    assert event_messages(api, namespace, "crash", "Failed")
    time.sleep(3)  # several decision passes: nothing new may be launched
    st = status(api, namespace, "crash")
    assert (st["phase"], st["attempt"]) == ("Failed", 1), st
    assert {j.metadata.name for j in jobs_of(api, namespace, "crash")} <= {"crash-r1"}
    [launched] = event_messages(api, namespace, "crash", "Launched")
    assert launched.startswith("run crash-r1 launched"), launched


def test_a_run_that_cannot_start_times_out_leaves_no_pod_and_is_retried(api: client.ApiClient, namespace: str,
                                                                         operator: OperatorConfig) -> None:
    """Its claim names a StorageClass the cluster does not have (kind's default is ``standard``), so it never
    binds and the scheduler never places the pod."""
    run_that_cannot_start_is_retried(api, namespace, operator)
