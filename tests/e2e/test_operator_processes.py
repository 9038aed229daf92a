"""The operator as real processes: killed and restarted, two at once, one that may not list a watched kind."""
from __future__ import annotations

import contextlib
import urllib.error
import urllib.request
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.e2e.kube import free_port, unique, wait_for
from tests.e2e.sj import (
    REPO,
    OperatorProcess,
    create_sj,
    event_messages,
    events_for,
    jobs_of,
    sj_spec,
    status,
    wait_phase,
)

pytestmark = pytest.mark.kwok_only

FAST = ("--tick", "1s", "--start-timeout", "30s", "--retry-backoff", "2s", "--thrash-backoff", "1s",
        "--max-thrash-backoff", "5s")


def test_kill_and_restart_mid_run_leaves_one_job_and_correct_status(api, namespace, crd, tmp_path):
    lease = unique("e2e-restart")
    log = tmp_path / "operator.log"
    first = OperatorProcess(*FAST, "--peering", lease, log=log).start()
    try:
        # Long enough to be seen running after a take-over (a killed leader's Lease lasts 15 s).
        create_sj(api, namespace, "durable", sj_spec(run_for="45s"))
        # Killed the moment its run exists (launch done, status maybe not yet written).
        wait_for("first run created", lambda: jobs_of(api, namespace, "durable"), timeout=60)
    finally:
        first.kill()
    second = OperatorProcess(*FAST, "--peering", lease, log=log).start()
    try:
        wait_phase(api, namespace, "durable", "Running", timeout=90)
    finally:
        second.kill()  # and killed again mid-run
    third = OperatorProcess(*FAST, "--peering", lease, log=log).start()
    try:
        st = wait_phase(api, namespace, "durable", "Succeeded", timeout=120)
        event_messages(api, namespace, "durable", "Succeeded")  # recorded just after the status
    finally:
        third.stop()
    assert [j.metadata.name for j in jobs_of(api, namespace, "durable")] == ["durable-r1"], log.read_text()[-3000:]
    assert st["attempt"] == 1 and st["jobName"] == "durable-r1"
    assert st["interruptedCount"] == 0
    assert len(st["runningTimestamps"]) == 1
    assert events_for(api, namespace, "durable").count("Succeeded") == 1


@pytest.mark.parametrize("shared_lease", [True, False], ids=["one-lease", "two-active-deciders"])
def test_two_operators_launch_each_sj_exactly_once(api, namespace, crd, tmp_path, shared_lease):
    """With one Lease only one decides; even two active deciders (separate Leases) never double-launch:
    run names are deterministic and status writes are resourceVersion-checked."""
    lease = unique("e2e-pair")
    ops = [OperatorProcess(*FAST, "--peering", lease if shared_lease else f"{lease}-{i}",
                           log=tmp_path / f"op{i}.log").start() for i in range(2)]
    try:
        names = [f"sj-{i}" for i in range(8)]
        for name in names:
            create_sj(api, namespace, name, sj_spec(run_for="4s", cpu="250m"))
        for name in names:
            wait_phase(api, namespace, name, "Succeeded", timeout=120)
    finally:
        for op in ops:
            op.stop()
    for name in names:
        assert [j.metadata.name for j in jobs_of(api, namespace, name)] == [f"{name}-r1"]
        st = status(api, namespace, name)
        assert st["attempt"] == 1 and len(st["runningTimestamps"]) == 1
        assert events_for(api, namespace, name).count("Launched") == 1


CHART_RBAC = REPO / "deploy" / "chart" / "templates" / "rbac.yaml"


def _chart_rules(kind: str = "ClusterRole") -> list[dict[str, Any]]:
    """The rules of the chart's ClusterRole, or of its Role in the operator's namespace (its template lines left
    out: labels, namespaces, the webhook's rules)."""
    docs = yaml.safe_load_all("\n".join(line for line in CHART_RBAC.read_text().splitlines() if "{{" not in line))
    return next(doc for doc in docs if doc and doc["kind"] == kind)["rules"]


def _healthz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _lease_holder(api: client.ApiClient, name: str) -> str | None:
    try:
        return client.CoordinationV1Api(api).read_namespaced_lease(name, "default").spec.holder_identity
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def test_a_replica_whose_caches_never_complete_never_takes_the_lease(api, namespace, crd, tmp_path):
    """A replica whose ServiceAccount may not list one kind it watches (the chart's ClusterRole without
    its ScavengerQuota rule) never completes its watch caches: it never campaigns for the Lease, and once
    `--cache-timeout` has passed its /healthz answers 503 naming the stopped task, for its liveness probe
    to restart it. The same replica given the whole role takes the Lease (so the refusal is the cause)."""
    rbac = client.RbacAuthorizationV1Api(api)
    core = client.CoreV1Api(api)
    name, lease = unique("e2e-rbac"), unique("e2e-caches")
    rules = _chart_rules()
    assert any("scavengerquotas" in rule["resources"] for rule in rules)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    rbac.create_cluster_role({"metadata": {"name": name},
                              "rules": [rule for rule in rules if "scavengerquotas" not in rule["resources"]]})
    rbac.create_cluster_role_binding({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]})
    replicas: list[OperatorProcess] = []
    try:
        token = core.create_namespaced_service_account_token(
            name, namespace, {"spec": {"expirationSeconds": 3600}}).status.token
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "sa",
            "clusters": [{"name": "local", "cluster": {"server": api.configuration.host,
                                                       "certificate-authority": api.configuration.ssl_ca_cert}}],
            "users": [{"name": name, "user": {"token": token}}],
            "contexts": [{"name": "sa", "context": {"cluster": "local", "user": name}}]}))
        port = free_port()
        replicas.append(OperatorProcess(
            *FAST, "--peering", lease, "--namespaces", namespace, "--cache-timeout", "10s",
            "--metrics-port", str(port), log=tmp_path / "refused.log", env={"KUBECONFIG": str(kubeconfig)}).start())

        def unhealthy() -> str | None:
            answer = _healthz_or_none(port)
            return answer[1] if answer is not None and answer[0] == 503 else None

        why = wait_for("/healthz to answer 503", unhealthy, timeout=120)
        log = (tmp_path / "refused.log").read_text()
        assert why == "the leader election task stopped: watch caches not complete after 10s", why
        assert "scavengerquotas.scavenger.dev is forbidden" in log, log[-3000:]
        assert "watch caches are complete" not in log, log[-3000:]
        assert _lease_holder(api, lease) is None, log[-3000:]
        assert replicas[0].proc is not None and replicas[0].proc.poll() is None  # unhealthy, still serving

        replicas[0].stop()
        rbac.replace_cluster_role(name, {"metadata": {"name": name}, "rules": rules})
        # The chart's Role holds the Lease (by its name) in the operator's namespace: here the test's, in default.
        lease_rules = [{**rule, **({"resourceNames": [lease]} if "resourceNames" in rule else {})}
                       for rule in _chart_rules("Role") if rule["resources"] == ["leases"]]
        rbac.create_namespaced_role("default", {"metadata": {"name": name}, "rules": lease_rules})
        rbac.create_namespaced_role_binding("default", {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]})
        port = free_port()
        replicas.append(OperatorProcess(  # the default --cache-timeout: a busy cluster may take a while
            *FAST, "--peering", lease, "--namespaces", namespace, "--metrics-port", str(port),
            log=tmp_path / "allowed.log", env={"KUBECONFIG": str(kubeconfig)}).start())
        wait_for("the replica with the whole role to take the Lease", lambda: _lease_holder(api, lease), timeout=120)
        assert _healthz(port)[0] == 200
    finally:
        for replica in replicas:
            replica.stop()
        for delete in (rbac.delete_cluster_role_binding, rbac.delete_cluster_role):
            with contextlib.suppress(ApiException):
                delete(name)
        for delete_namespaced in (rbac.delete_namespaced_role_binding, rbac.delete_namespaced_role):
            with contextlib.suppress(ApiException):
                delete_namespaced(name, "default")
        with contextlib.suppress(ApiException):
            client.CoordinationV1Api(api).delete_namespaced_lease(lease, "default")


def _healthz_or_none(port: int) -> tuple[int, str] | None:
    """/healthz's answer, or None while nothing listens yet."""
    try:
        return _healthz(port)
    except OSError:
        return None
