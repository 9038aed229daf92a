"""A fair and stable policy on the local cluster: fallbacks, and drains that never wait on a budget."""
from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from sj_operator.settings import Pool
from tests.e2e.kube import TEST_TAINT_KEY, dedicated_node, sim_container, unique, wait_for
from tests.e2e.sj import InProcessOperator, create_sj, protected, run_pods, sj_spec, status, wait_phase
from tests.e2e.sj import test_config as operator_config

pytestmark = pytest.mark.kwok_only  # every test here runs on dedicated simulated nodes

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def own_operator(namespace: str, crd: None) -> Iterator[None]:
    """An operator of this namespace alone that protects runs from level 0 (steering leaves one of them open)."""
    op = InProcessOperator(operator_config(namespaces=(namespace,), protect_level=0))
    op.start()
    yield
    op.stop()


def test_a_gang_that_cannot_fit_starts_with_its_fallback(api: client.ApiClient, namespace: str,
                                                         own_operator: None) -> None:
    with dedicated_node(cpu="4") as node:
        create_sj(api, namespace, "wide", sj_spec(
            run_for="3s", cpu="1", parallelism=8, fallbacks=[{"parallelism": 2}], fallbackAfter="3s",
            nodeSelector=node["nodeSelector"], tolerations=node["tolerations"]))
        waiting = wait_for("the preferred gang waits", lambda: next(
            (c for c in status(api, namespace, "wide").get("conditions", []) if c["type"] == "Admitted"), None))
        assert waiting["status"] == "False"
        st = wait_phase(api, namespace, "wide", "Succeeded", timeout=90)
        assert st["configIndex"] == 1 and st["jobName"] == "wide-r1"
        pods = run_pods(api, namespace, "wide-r1")
        assert len(pods) == 2
        env = {e.name: e.value for e in pods[0].spec.containers[0].env}
        assert env["SJ_CONFIG_INDEX"] == "1" and env["SJ_WORLD_SIZE"] == "2"


def test_a_drain_never_waits_on_a_protected_sj(api: client.ApiClient, namespace: str, own_operator: None) -> None:
    pool = unique("pool")
    placed = {"nodeSelector": {"scavenger.dev/e2e-pool": pool},
              "tolerations": [{"key": TEST_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]}
    with dedicated_node(cpu="4", extra={"scavenger.dev/e2e-pool": pool}) as first:
        names = ["left", "right"]
        for name in names:
            create_sj(api, namespace, name, sj_spec(run_for=None, cpu="1", duration="10m", **placed))
        for name in names:
            wait_phase(api, namespace, name, "Running", timeout=60)
        # Both ask for protection (level 0 of protect level 0); steering leaves one open: one stays protected.
        held = wait_for("a protected SJ", lambda: [n for n in names if protected(api, namespace, n)], timeout=30)
        assert len(held) == 1
        with dedicated_node(cpu="4", extra={"scavenger.dev/e2e-pool": pool}) as second:
            started = time.monotonic()
            drained = subprocess.run(
                [str(REPO / ".bin/kubectl"), "drain", first["name"], "--ignore-daemonsets", "--delete-emptydir-data",
                 "--timeout=90s"], capture_output=True, text=True, env=os.environ)
            took = time.monotonic() - started
            assert drained.returncode == 0, drained.stderr
            assert took < 2 + 15, f"the drain took {took:.0f}s: it waited on a budget"
            for name in names:
                st = wait_for(f"{name} interrupted and running again", lambda n=name: (
                    s := status(api, namespace, n)).get("interruptedCount") == 1 and s.get("phase") == "Running"
                    and s, timeout=90)
                assert st["lastInterruptionReason"] == "EvictionByEvictionAPI"
                pod = run_pods(api, namespace, st["jobName"])[0]
                assert pod.spec.node_name == second["name"], "it resumed on the other node"


def test_two_namespaces_share_the_room_by_their_quota_weights(api: client.ApiClient, namespace: str,
                                                              crd: None) -> None:
    """Weights 1 and 3 (the admin's ScavengerClusterQuotas: a namespace's own quota can only lower its weight),
    the same backlog of 8 one-CPU SJs each, 8 CPUs of room: 2 and 6 run."""
    core = client.CoreV1Api(api)
    other = unique("e2e-heavy")
    core.create_namespace({"metadata": {"name": other}})
    op = InProcessOperator(operator_config(namespaces=(namespace, other), threshold=1.0))
    op.start()
    pool = unique("pool")
    placed = {"nodeSelector": {"scavenger.dev/e2e-pool": pool},
              "tolerations": [{"key": TEST_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]}
    try:
        custom = client.CustomObjectsApi(api)
        for ns, weight in ((namespace, 1), (other, 3)):
            custom.create_cluster_custom_object("scavenger.dev", "v1alpha1", "scavengerclusterquotas", {
                "apiVersion": "scavenger.dev/v1alpha1", "kind": "ScavengerClusterQuota", "metadata": {"name": ns},
                "spec": {"weight": weight,
                         "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}})
            for i in range(8):
                create_sj(api, ns, f"work-{i}", sj_spec(run_for=None, cpu="1", memory="64Mi", **placed))
        names = [(ns, f"work-{i}") for ns in (namespace, other) for i in range(8)]
        # Every SJ waits for the pool's node, so that one pass sees the whole backlog when it appears.
        wait_for("the whole backlog waiting, saying why", lambda: all(
            any(c["type"] == "Admitted" for c in status(api, ns, n).get("conditions", [])) for ns, n in names),
            timeout=60)
        with dedicated_node(cpu="8", memory="16Gi", extra={"scavenger.dev/e2e-pool": pool}):
            running = wait_for("8 SJs launched", lambda: (r := [ns for ns, n in names if status(api, ns, n).get(
                "jobName")]) and len(r) == 8 and r, timeout=60)
            assert (running.count(namespace), running.count(other)) == (2, 6)
            waiting = [status(api, ns, n) for ns, n in names if not status(api, ns, n).get("jobName")]
            assert {next(c["reason"] for c in st["conditions"] if c["type"] == "Admitted") for st in waiting} == {
                "NoNodeFitsGang"}
    finally:
        op.stop()
        core.delete_namespace(other)
        for ns in (namespace, other):
            with contextlib.suppress(client.ApiException):
                client.CustomObjectsApi(api).delete_cluster_custom_object("scavenger.dev", "v1alpha1",
                                                                          "scavengerclusterquotas", ns)


def test_past_the_threshold_an_sj_overflows_to_the_burst_pool_and_new_sjs_go_back_first(
        api: client.ApiClient, namespace: str, crd: None) -> None:
    """The default pool may be half requested; a tainted burst pool of its own (threshold 100 %) takes what
    allows it once the default pool is past that, at once; when room comes back, new SJs run there first."""
    core = client.CoreV1Api(api)
    burst = unique("burst")
    op = InProcessOperator(operator_config(namespaces=(namespace,), threshold=0.5,
                                           pools=(Pool("burst", (("scavenger.dev/e2e-pool", burst),), 1.0),)))
    op.start()
    try:
        with dedicated_node(cpu="40") as big, dedicated_node(cpu="4") as main, \
                dedicated_node(cpu="2", extra={"scavenger.dev/e2e-pool": burst}) as pool:
            # The default pool (the shared nodes, big and main) is over half requested while this pod runs.
            core.create_namespaced_pod(namespace, {
                "metadata": {"name": "filler"},
                "spec": {"nodeSelector": big["nodeSelector"], "tolerations": big["tolerations"],
                         "terminationGracePeriodSeconds": 0, "containers": [sim_container(cpu="39")]}})
            wait_for("the filler running", lambda: core.read_namespaced_pod("filler", namespace).status.phase
                     == "Running", timeout=60)
            overflow = [{"nodeSelector": pool["nodeSelector"], "tolerations": pool["tolerations"]}]

            def on_main(**extra: object) -> dict[str, object]:
                return sj_spec(run_for=None, cpu="1", memory="64Mi", duration="10m",
                               nodeSelector=main["nodeSelector"], tolerations=main["tolerations"], **extra)

            create_sj(api, namespace, "allows-burst", on_main(fallbacks=overflow, fallbackAfter="0s"))
            create_sj(api, namespace, "main-only", on_main())
            st = wait_phase(api, namespace, "allows-burst", "Running", timeout=30)
            assert st["configIndex"] == 1
            assert run_pods(api, namespace, st["jobName"])[0].spec.node_name == pool["name"]
            waiting = wait_for("main-only waits, saying why", lambda: next(
                (c for c in status(api, namespace, "main-only").get("conditions", []) if c["type"] == "Admitted"
                 and c["status"] == "False"), None), timeout=30)
            assert waiting["reason"] == "ThresholdReached" and "of pool default" in waiting["message"]

            core.delete_namespaced_pod("filler", namespace, grace_period_seconds=0)
            create_sj(api, namespace, "later", on_main(fallbacks=overflow, fallbackAfter="0s"))
            for name in ("later", "main-only"):
                st = wait_phase(api, namespace, name, "Running", timeout=30)
                assert st.get("configIndex", 0) == 0
                assert run_pods(api, namespace, st["jobName"])[0].spec.node_name == main["name"]
    finally:
        op.stop()


def test_a_pending_pod_no_counted_scheduler_will_place_holds_no_room(api: client.ApiClient, namespace: str,
                                                                     crd: None) -> None:
    """Two huge pods bound to no node: one names a scheduler nobody runs, one waits on a scheduling gate. Neither
    counts toward the threshold, so an SJ starts beside them. An operator told that the first one's scheduler is
    one it counts (``--schedulers``) holds the next SJ back for it, until that pod goes."""
    core = client.CoreV1Api(api)
    huge = {"terminationGracePeriodSeconds": 0, "containers": [sim_container(cpu="100000")]}
    core.create_namespaced_pod(namespace, {"metadata": {"name": "elsewhere"},
                                           "spec": {**huge, "schedulerName": "e2e-nobody-runs-this"}})
    core.create_namespaced_pod(namespace, {"metadata": {"name": "gated"},
                                           "spec": {**huge, "schedulingGates": [{"name": "scavenger.dev/e2e-hold"}]}})
    with dedicated_node(cpu="4") as node:
        spec = sj_spec(run_for=None, cpu="1", memory="64Mi", duration="10m", nodeSelector=node["nodeSelector"],
                       tolerations=node["tolerations"])
        op = InProcessOperator(operator_config(namespaces=(namespace,)))
        op.start()
        try:
            create_sj(api, namespace, "beside", spec)
            wait_phase(api, namespace, "beside", "Running", timeout=60)
        finally:
            op.stop()
        op = InProcessOperator(operator_config(namespaces=(namespace,),
                                               schedulers=("default-scheduler", "e2e-nobody-runs-this")))
        op.start()
        try:
            create_sj(api, namespace, "held", spec)
            waiting = wait_for("held waits, saying why", lambda: next(
                (c for c in status(api, namespace, "held").get("conditions", []) if c["type"] == "Admitted"
                 and c["status"] == "False"), None), timeout=60)
            assert waiting["reason"] == "ThresholdReached", waiting
            core.delete_namespaced_pod("elsewhere", namespace, grace_period_seconds=0)
            wait_phase(api, namespace, "held", "Running", timeout=60)  # the gated pod still holds nothing
        finally:
            op.stop()
