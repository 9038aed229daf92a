"""The local cluster itself: simulated pod lifecycles, real preemption, the
disruption controller, and a clean start/stop. Everything the operator claims is
shown on top of these behaviours, so they are tested first."""
from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from benchmarks.harness import kube as bench_kube
from tests.e2e.kube import dedicated_node, pod_condition, sim_annotations, sim_container, unique, wait_for

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.kwok_only


def _job(name: str, *, run_for: str, exit_code: int | None = None) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": sim_annotations(run_for, exit_code)},
                "spec": {"restartPolicy": "Never", "containers": [sim_container(run_for=run_for, exit_code=exit_code)]},
            },
        },
    }


def _job_condition(batch: client.BatchV1Api, name: str, ns: str, ctype: str) -> bool:
    job = batch.read_namespaced_job_status(name, ns)
    return any(c.type == ctype and c.status == "True" for c in job.status.conditions or [])


def test_job_pod_runs_for_its_annotation_then_completes(api, namespace):
    batch = client.BatchV1Api(api)
    batch.create_namespaced_job(namespace, _job("ok", run_for="3s"))
    started = time.monotonic()
    wait_for("Job ok Complete", lambda: _job_condition(batch, "ok", namespace, "Complete"), timeout=60)
    assert time.monotonic() - started >= 3, "the pod must run for its run-for time before completing"


def test_job_pod_with_exit_code_fails_with_that_code(api, namespace):
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    batch.create_namespaced_job(namespace, _job("bad", run_for="1s", exit_code=2))
    wait_for("Job bad Failed", lambda: _job_condition(batch, "bad", namespace, "Failed"), timeout=60)
    pods = core.list_namespaced_pod(namespace, label_selector="job-name=bad").items
    assert len(pods) == 1
    assert pods[0].status.phase == "Failed"
    assert pods[0].status.container_statuses[0].state.terminated.exit_code == 2


def test_scheduler_preempts_low_priority_pod_which_terminates_within_grace(api, namespace):
    core, sched = client.CoreV1Api(api), client.SchedulingV1Api(api)
    pc = unique("e2e-low")
    sched.create_priority_class({
        "metadata": {"name": pc}, "value": -100, "preemptionPolicy": "Never", "globalDefault": False,
    })
    try:
        with dedicated_node(cpu="4") as node:
            grace = 4
            low = {
                "metadata": {"name": "low"},
                "spec": {
                    "priorityClassName": pc,
                    "terminationGracePeriodSeconds": grace,
                    "nodeSelector": node["nodeSelector"], "tolerations": node["tolerations"],
                    "containers": [sim_container(cpu="3", memory="1Gi")],
                },
            }
            core.create_namespaced_pod(namespace, low)
            wait_for("low pod Running", lambda: core.read_namespaced_pod("low", namespace).status.phase == "Running")
            assert core.read_namespaced_pod("low", namespace).spec.priority == -100

            high = {
                "metadata": {"name": "high"},
                "spec": {
                    "nodeSelector": node["nodeSelector"], "tolerations": node["tolerations"],
                    "containers": [sim_container(cpu="2", memory="1Gi")],
                },
            }
            core.create_namespaced_pod(namespace, high)

            # The scheduler writes the DisruptionTarget condition first and deletes the pod in a second
            # call, so a read can fall between the two: wait for both.
            def disrupted():
                pod = core.read_namespaced_pod("low", namespace)
                cond = pod_condition(pod, "DisruptionTarget")
                marked = cond is not None and cond.status == "True"
                return pod if marked and pod.metadata.deletion_timestamp is not None else None

            victim = wait_for("DisruptionTarget and deletion on the low pod", disrupted, timeout=60)
            cond = pod_condition(victim, "DisruptionTarget")
            assert cond.reason == "PreemptionByScheduler"
            marked = time.monotonic()

            def gone():
                try:
                    core.read_namespaced_pod("low", namespace)
                    return False
                except client.ApiException as exc:
                    return exc.status == 404

            wait_for("preempted pod removed", gone, timeout=grace + 15)
            assert time.monotonic() - marked <= grace + 10
            wait_for("high pod Running", lambda: core.read_namespaced_pod("high", namespace).status.phase == "Running",
                     timeout=60)
            assert core.read_namespaced_pod("high", namespace).spec.node_name == node["name"]
    finally:
        sched.delete_priority_class(pc)


def test_terminated_pod_ends_failed_137_keeping_its_disruption_condition(api, namespace):
    """A pod deleted through the eviction API ends Failed (137) with DisruptionTarget kept."""
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(namespace, {
        "metadata": {"name": "evictee"},
        "spec": {"terminationGracePeriodSeconds": 3, "containers": [sim_container()]},
    })
    wait_for("evictee Running", lambda: core.read_namespaced_pod("evictee", namespace).status.phase == "Running")
    # A finalizer keeps the final state readable, as the Job controller's tracking finalizer does.
    core.patch_namespaced_pod("evictee", namespace, {"metadata": {"finalizers": ["scavenger.dev/e2e-hold"]}})
    core.create_namespaced_pod_eviction("evictee", namespace, {"metadata": {"name": "evictee", "namespace": namespace}})

    def terminal():
        pod = core.read_namespaced_pod("evictee", namespace)
        return pod if pod.status.phase == "Failed" else None

    pod = wait_for("evicted pod Failed", terminal, timeout=30)
    assert pod.status.container_statuses[0].state.terminated.exit_code == 137
    cond = pod_condition(pod, "DisruptionTarget")
    assert cond is not None and cond.status == "True" and cond.reason == "EvictionByEvictionAPI"
    core.patch_namespaced_pod("evictee", namespace, {"metadata": {"finalizers": None}})


@pytest.mark.kwok_only  # the exit-code-on-delete annotation is the kwok stages'
@pytest.mark.parametrize(("code", "phase"), [("0", "Succeeded"), ("143", "Failed")])
def test_terminated_pod_with_exit_code_on_delete_ends_with_that_code(api, namespace, code, phase):
    """An app that checkpoints on SIGTERM and exits: the pod ends with its code, DisruptionTarget kept."""
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(namespace, {
        "metadata": {"name": "clean", "annotations": {"sim.scavenger.dev/exit-code-on-delete": code}},
        "spec": {"terminationGracePeriodSeconds": 2, "containers": [sim_container()]},
    })
    wait_for("pod Running", lambda: core.read_namespaced_pod("clean", namespace).status.phase == "Running")
    core.patch_namespaced_pod("clean", namespace, {"metadata": {"finalizers": ["scavenger.dev/e2e-hold"]}})
    core.create_namespaced_pod_eviction("clean", namespace, {"metadata": {"name": "clean", "namespace": namespace}})

    pod = wait_for(f"evicted pod {phase}", lambda: (p := core.read_namespaced_pod("clean", namespace)).status.phase
                   == phase and p, timeout=30)
    assert pod.status.container_statuses[0].state.terminated.exit_code == int(code)
    cond = pod_condition(pod, "DisruptionTarget")
    assert cond is not None and cond.status == "True" and cond.reason == "EvictionByEvictionAPI"
    core.patch_namespaced_pod("clean", namespace, {"metadata": {"finalizers": None}})


def test_disruption_controller_maintains_pdb_status(api, namespace):
    core, policy = client.CoreV1Api(api), client.PolicyV1Api(api)
    for i in range(2):
        core.create_namespaced_pod(namespace, {
            "metadata": {"name": f"guarded-{i}", "labels": {"app": "guarded"}},
            "spec": {"containers": [sim_container()]},
        })
    policy.create_namespaced_pod_disruption_budget(namespace, {
        "metadata": {"name": "guard"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
    })

    def allowed():
        st = policy.read_namespaced_pod_disruption_budget_status("guard", namespace).status
        return st if st and st.current_healthy == 2 and st.disruptions_allowed == 1 else None

    status = wait_for("PDB status maintained", allowed, timeout=60)
    assert status.expected_pods == 2


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _processes_mentioning(text: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            pids.append(int(entry.name))
    return pids


def test_cluster_up_twice_then_down_leaves_nothing(tmp_path):
    """A second, separate cluster (SJ_CLUSTER_DIR) is started twice and stopped."""
    state = tmp_path / "cluster"
    env = {**os.environ, "SJ_CLUSTER_DIR": str(state)}
    cmd = [str(REPO / "hack" / "cluster")]
    first = subprocess.run([*cmd, "up", "--nodes", "1", "--node-cpu", "2", "--node-memory", "4Gi"],
                           env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert f"export KUBECONFIG={state}/kubeconfig" in first.stdout
    try:
        server = yaml.safe_load((state / "kubeconfig").read_text())["clusters"][0]["cluster"]["server"]
        port = urlparse(server).port
        assert _listening(port)
        pids = _processes_mentioning(str(state))
        assert len(pids) >= 5, "etcd, apiserver, controller-manager, scheduler and kwok should run"

        second = subprocess.run([*cmd, "up", "--nodes", "1", "--node-cpu", "2", "--node-memory", "4Gi"],
                                env=env, capture_output=True, text=True, timeout=120)
        assert second.returncode == 0, second.stderr
        assert "already runs" in second.stderr
        assert sorted(_processes_mentioning(str(state))) == sorted(pids), "a second up must not start anything"
        status = subprocess.run([*cmd, "status"], env=env, capture_output=True, text=True)
        assert status.returncode == 0 and "1 node(s)" in status.stdout
    finally:
        down = subprocess.run([*cmd, "down"], env=env, capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stderr
    wait_for("all cluster processes gone", lambda: not _processes_mentioning(str(state)), timeout=30)
    wait_for(f"port {port} closed", lambda: not _listening(port), timeout=15)
    assert not state.exists()
    assert subprocess.run([*cmd, "status"], env=env, capture_output=True).returncode != 0


def _claim_holder(leases: client.CoordinationV1Api) -> str | None:
    try:
        return leases.read_namespaced_lease(bench_kube.CLAIM_NAME, bench_kube.CLAIM_NAMESPACE).spec.holder_identity
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _make_claim(leases: client.CoordinationV1Api, holder: str) -> None:
    leases.create_namespaced_lease(bench_kube.CLAIM_NAMESPACE, {
        "metadata": {"name": bench_kube.CLAIM_NAME}, "spec": {"holderIdentity": holder}})


def test_a_benchmark_holds_the_cluster_alone_and_takes_over_a_claim_whose_holder_is_gone(api):
    """Two benchmarks on one cluster delete each other's nodes and PriorityClasses: the second is refused, and
    a benchmark gives back only its own claim."""
    leases = client.CoordinationV1Api(api)
    host = socket.gethostname()
    first = bench_kube.claim_holder("first", os.getpid(), host, "1")
    with bench_kube.claimed(api, "first", token="1"):
        assert _claim_holder(leases) == first
        refused = r"held by another benchmark \(first pid"
        with pytest.raises(SystemExit, match=refused), bench_kube.claimed(api, "second"):
            pass
        assert _claim_holder(leases) == first
    assert _claim_holder(leases) is None

    gone = subprocess.Popen(["true"])
    gone.wait()
    _make_claim(leases, bench_kube.claim_holder("killed", gone.pid, host, "2"))
    with bench_kube.claimed(api, "third", token="3"):
        assert _claim_holder(leases) == bench_kube.claim_holder("third", os.getpid(), host, "3")
    assert _claim_holder(leases) is None

    # Its own claim, made by a create whose answer was lost: held, and given back.
    _make_claim(leases, bench_kube.claim_holder("fourth", os.getpid(), host, "4"))
    with bench_kube.claimed(api, "fourth", token="4"):
        pass
    assert _claim_holder(leases) is None

    # Another's claim, put in its place meanwhile: left as it is.
    other = bench_kube.claim_holder("other", 1, "another-machine", "5")
    try:
        with bench_kube.claimed(api, "fifth"):
            leases.delete_namespaced_lease(bench_kube.CLAIM_NAME, bench_kube.CLAIM_NAMESPACE)
            _make_claim(leases, other)
        assert _claim_holder(leases) == other
    finally:
        leases.delete_namespaced_lease(bench_kube.CLAIM_NAME, bench_kube.CLAIM_NAMESPACE)
