"""Scenarios shown on both clusters: on the local cluster's simulated nodes (``test_queue``) and on kind's real
ones, with real containers (``test_kind``). Each test places and sizes them for the node it has."""
from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from kubernetes import client

from sj_operator.api.fields import format_duration
from sj_operator.config import OperatorConfig
from tests.e2e.kube import wait_for, workload_pod
from tests.e2e.sj import create_sj, jobs_of, patch_sj, run_pods, sj_spec, status, wait_phase

QUEUE_CONFIG: dict[str, Any] = {
    "start_timeout": timedelta(seconds=6), "retry_backoff": timedelta(seconds=3),
    # An interrupted SJ waits 5 s before it may run again: longer than the scheduler takes to bind the pod that
    # preempted it once its victim has stopped, so it is not launched into that room meanwhile.
    "thrash_backoff": timedelta(seconds=5), "max_thrash_backoff": timedelta(seconds=10),
}
"""Operator settings of the modules that run these scenarios (their ``OPERATOR_CONFIG``)."""


def interrupted_sj_goes_before_an_older_one(api: client.ApiClient, namespace: str, placement: dict[str, Any], *,
                                            sj_cpu: str, owner_cpu: str, priority_class: str | None = None) -> None:
    """An SJ interrupted by a preemption is relaunched before an older SJ that never ran, when room for one
    of them comes back. ``placement`` (``nodeSelector``, ``tolerations``) puts both SJs and the "owner" pod
    that preempts on one node, which holds one SJ of ``sj_cpu`` but not two, nor one beside the owner's
    ``owner_cpu`` (at ``priority_class``; the default priority without), and the owner beside nothing."""
    core = client.CoreV1Api(api)
    # The older SJ is held back (suspended) until the owner has taken the younger one's room.
    create_sj(api, namespace, "older", sj_spec(run_for="5s", cpu=sj_cpu, suspend=True, **placement))
    time.sleep(1.1)  # creationTimestamps have one-second resolution
    create_sj(api, namespace, "younger", sj_spec(run_for="600s", cpu=sj_cpu, **placement))
    wait_phase(api, namespace, "younger", "Running")
    core.create_namespaced_pod(namespace, workload_pod("owner", placement, cpu=owner_cpu, run_for="15s",
                                                       priority_class=priority_class))
    st = wait_for("interruption recorded", lambda: (s := status(api, namespace, "younger")).get(
        "interruptedCount") == 1 and s, timeout=60)
    assert st["lastInterruptionReason"] == "PreemptionByScheduler", st
    # The scheduler binds the owner once its victim has stopped (the moment the interruption is recorded, so
    # it may take the scheduler's backoff longer).
    wait_for("the owner running", lambda: core.read_namespaced_pod("owner", namespace).status.phase == "Running",
             timeout=30)
    # Both SJs wait now: the owner holds the room, and neither fits beside it.
    patch_sj(api, namespace, "older", {"suspend": False})
    wait_phase(api, namespace, "older", "Pending")
    # When the owner finishes, room for one SJ returns: the interrupted one goes first.
    st = wait_phase(api, namespace, "younger", "Starting", "Running", timeout=60)
    assert st["interruptedCount"] == 1 and st["attempt"] >= 2 and st["jobName"] == f"younger-r{st['attempt']}", st
    older = status(api, namespace, "older")
    assert older["phase"] == "Pending" and older.get("attempt", 0) == 0, older
    assert jobs_of(api, namespace, "older") == []


def run_that_cannot_start_is_retried(api: client.ApiClient, namespace: str, config: OperatorConfig) -> None:
    """A run the scheduler cannot place (its claim, of a StorageClass that does not exist, never binds) is
    deleted after the start timeout; the SJ waits again with backoff, no interruption counted, no pod left
    pending; it is retried and times out again."""
    core = client.CoreV1Api(api)
    core.create_namespaced_persistent_volume_claim(namespace, {
        "metadata": {"name": "unbound"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "none",
                 "resources": {"requests": {"storage": "1Gi"}}},
    })
    create_sj(api, namespace, "stuck", sj_spec(run_for="5s", volumes=[
        {"name": "data", "mountPath": "/data", "persistentVolumeClaim": {"claimName": "unbound"}}]))
    wait_phase(api, namespace, "stuck", "Starting")
    st = wait_for("start timeout recorded", lambda: (s := status(api, namespace, "stuck")).get(
        "startTimeouts", 0) >= 1 and s, timeout=60)
    assert st["phase"] == "Pending"
    assert st["interruptedCount"] == 0
    assert f"did not have all pods running within {format_duration(config.start_timeout)}" in st["message"]
    assert st["notBefore"]
    wait_for("nothing of the run left", lambda: not run_pods(api, namespace, "stuck-r1"), timeout=30)
    # It is retried later (backoff), and times out again: the backoff grows.
    st = wait_for("second timeout", lambda: (s := status(api, namespace, "stuck")).get(
        "startTimeouts", 0) >= 2 and s, timeout=90)
    assert st["attempt"] >= 2 and st["interruptedCount"] == 0
