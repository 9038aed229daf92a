"""An SJ's pods get only what its namespace allows: where Pod Security or a ResourceQuota refuses them,
the SJ waits in its place saying why instead of cycling through runs, and runs once it is allowed; and a
tenant's own ScavengerQuota never raises what the administrator's ScavengerClusterQuota allows it."""
from __future__ import annotations

import contextlib
import time

import pytest
from kubernetes import client

from sj_operator.names import CLUSTER_QUOTA_KIND, CLUSTER_QUOTA_PLURAL, GROUP, QUOTA_KIND, QUOTA_PLURAL, VERSION
from tests.e2e.kube import TEST_TAINT_KEY, dedicated_node, unique, wait_for
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


def _admitted(st: dict) -> dict | None:
    return next((c for c in st.get("conditions", []) if c["type"] == "Admitted"), None)


@pytest.mark.kwok_only  # a dedicated simulated node: room enough for every SJ, so only the quota holds them
def test_a_tenants_own_quota_does_not_raise_their_share(api, namespace, operator):
    """The administrator's ScavengerClusterQuota caps the namespace at 2 CPUs: 2 of 4 one-CPU SJs run and the
    others wait naming it. The tenant's own ScavengerQuota with a far bigger cap and weight lets no more run;
    the cluster quota raised, all run."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    tenant, cluster_quota = unique("tenant"), unique("e2e-tenants")
    core.patch_namespace(namespace, {"metadata": {"labels": {"scavenger.dev/e2e-tenant": tenant}}})
    custom.create_cluster_custom_object(GROUP, VERSION, CLUSTER_QUOTA_PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": CLUSTER_QUOTA_KIND, "metadata": {"name": cluster_quota},
        "spec": {"namespaceSelector": {"matchLabels": {"scavenger.dev/e2e-tenant": tenant}}, "hard": {"cpu": "2"}}})
    pool = unique("pool")
    placed = {"nodeSelector": {"scavenger.dev/e2e-pool": pool},
              "tolerations": [{"key": TEST_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]}
    names = [f"work-{i}" for i in range(4)]
    try:
        for name in names:
            create_sj(api, namespace, name, sj_spec(run_for=None, cpu="1", memory="64Mi", **placed))
        # Every SJ waits for the pool's node, so the operator has seen the label and the cluster quota
        # (watched before the SJs were made) by the time the node appears.
        wait_for("every SJ waiting, saying why", lambda: all(_admitted(status(api, namespace, n)) for n in names),
                 timeout=60)
        with dedicated_node(cpu="8", extra={"scavenger.dev/e2e-pool": pool}):
            def launched() -> list[str]:
                return [n for n in names if status(api, namespace, n).get("jobName")]

            def held_by_the_cluster_quota() -> list[dict] | None:
                waiting = [_admitted(status(api, namespace, n)) for n in names if n not in launched()]
                return waiting if len(waiting) == 2 and all(
                    c is not None and c["status"] == "False" and c["reason"] == "QuotaExceeded"
                    and f"(ScavengerClusterQuota {cluster_quota})" in c["message"] for c in waiting) else None

            wait_for("2 SJs launched", lambda: len(launched()) == 2, timeout=60)
            held = wait_for("the other 2 held by the cluster quota", held_by_the_cluster_quota, timeout=30)
            assert f"namespace {namespace} may request 2 CPU for its SJs at once" in held[0]["message"], held

            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, QUOTA_PLURAL, {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": QUOTA_KIND, "metadata": {"name": "mine"},
                "spec": {"hard": {"cpu": "100"}, "weight": 100}})
            deadline = time.monotonic() + 8  # several passes (tick 1 s) with the tenant's quota in the cache
            while time.monotonic() < deadline:
                assert len(launched()) == 2, "the tenant's own quota let more SJs run"
                time.sleep(1)
            assert held_by_the_cluster_quota() is not None, "the cluster quota still holds them"

            custom.patch_cluster_custom_object(GROUP, VERSION, CLUSTER_QUOTA_PLURAL, cluster_quota,
                                               {"spec": {"hard": {"cpu": "4"}}})
            for name in names:
                wait_phase(api, namespace, name, "Running", timeout=60)
    finally:
        with contextlib.suppress(client.ApiException):
            custom.delete_cluster_custom_object(GROUP, VERSION, CLUSTER_QUOTA_PLURAL, cluster_quota)
