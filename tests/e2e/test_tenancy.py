"""An SJ's pods get only what its namespace allows: where Pod Security or a ResourceQuota refuses them,
the SJ waits in its place saying why instead of cycling through runs, and runs once it is allowed."""
from __future__ import annotations

import time

from kubernetes import client

from tests.e2e.kube import wait_for
from tests.e2e.sj import create_sj, jobs_of, sj_spec, status, wait_phase


def _waits_saying(api: client.ApiClient, namespace: str, name: str, words: str) -> dict:
    def saying() -> dict | None:
        st = status(api, namespace, name)
        return st if words in st.get("message", "") else None
    return wait_for(f"{name} waiting with {words!r}", saying, timeout=60)


def _does_not_cycle(api: client.ApiClient, namespace: str, name: str, seconds: float) -> dict:
    """Over ``seconds`` (several retries at the test's backoff), no run is ever made."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert jobs_of(api, namespace, name) == []
        time.sleep(1)
    st = status(api, namespace, name)
    assert st["phase"] == "Pending" and st.get("attempt", 0) == 0 and st.get("interruptedCount", 0) == 0
    return st


def test_restricted_pod_security_root_sj_waits_and_non_root_sj_runs(api, namespace, operator):
    client.CoreV1Api(api).patch_namespace(namespace, {"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}})
    create_sj(api, namespace, "as-root", sj_spec(run_for="600s"))
    create_sj(api, namespace, "as-user", sj_spec(run_for="600s", runAsUser=1000, runAsGroup=1000))
    st = _waits_saying(api, namespace, "as-root", 'violates PodSecurity "restricted:latest"')
    assert st["message"].startswith(f"namespace {namespace} refuses this SJ's pods: ")
    admitted = next(c for c in st["conditions"] if c["type"] == "Admitted")
    assert (admitted["status"], admitted["reason"]) == ("False", "BackingOff")
    wait_phase(api, namespace, "as-user", "Running")
    _does_not_cycle(api, namespace, "as-root", 8)


def test_a_resource_quota_holds_the_sj_until_it_allows_it(api, namespace, operator):
    core = client.CoreV1Api(api)
    core.create_namespaced_resource_quota(namespace, {"metadata": {"name": "small"},
                                                      "spec": {"hard": {"requests.cpu": "1"}}})
    wait_for("quota status", lambda: core.read_namespaced_resource_quota("small", namespace).status.hard)
    # Over the quota, yet small enough for a node of a 2-CPU machine's kind cluster.
    create_sj(api, namespace, "big", sj_spec(run_for="600s", cpu="1500m"))
    st = _waits_saying(api, namespace, "big", "exceeded quota: small")
    assert next(c for c in st["conditions"] if c["type"] == "Admitted")["reason"] == "QuotaExceeded"
    _does_not_cycle(api, namespace, "big", 5)
    core.patch_namespaced_resource_quota("small", namespace, {"spec": {"hard": {"requests.cpu": "4"}}})
    wait_phase(api, namespace, "big", "Running", timeout=90)


def test_a_gang_the_quota_cannot_hold_whole_waits_with_the_numbers(api, namespace, operator):
    core = client.CoreV1Api(api)
    core.create_namespaced_resource_quota(namespace, {"metadata": {"name": "team"},
                                                      "spec": {"hard": {"requests.cpu": "1", "pods": "10"}}})
    wait_for("quota status", lambda: (core.read_namespaced_resource_quota("team", namespace).status.used or None))
    # Each pod alone fits (the dry run passes); all three at once do not.
    create_sj(api, namespace, "gang", sj_spec(run_for="600s", cpu="500m", parallelism=3))
    st = _waits_saying(api, namespace, "gang", "has no room for the whole gang")
    assert "ResourceQuota team: 3 pod(s) need requests.cpu 1500m, 1 of 1 is free" in st["message"]
    _does_not_cycle(api, namespace, "gang", 5)
