"""A ScavengerJob's whole life on the local cluster, the operator running in-process."""
from __future__ import annotations

import time

import pytest
from kubernetes import client

from tests.e2e.kube import E2E_IMAGE, dedicated_node, node_placement, wait_for, workload_pod
from tests.e2e.sj import (
    create_sj,
    event_messages,
    events_for,
    get_sj,
    jobs_of,
    patch_sj,
    published,
    run_pods,
    sj_spec,
    status,
    wait_phase,
    wait_published,
)


def test_single_pod_sj_succeeds(api, namespace, operator):
    create_sj(api, namespace, "ok", sj_spec(run_for="3s", checkpointVolume="ckpt",
                                            volumes=[{"name": "ckpt", "mountPath": "/ckpt", "emptyDir": {}}]))
    st = wait_phase(api, namespace, "ok", "Succeeded")
    assert st["finishedTimestamp"]
    assert len(st["runningTimestamps"]) == 1
    assert st["interruptedCount"] == 0
    assert st["jobName"] == "ok-r1"

    job = client.BatchV1Api(api).read_namespaced_job("ok-r1", namespace)
    owner = job.metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.controller) == ("ScavengerJob", "ok", True)
    assert job.spec.backoff_limit == 0
    pod = run_pods(api, namespace, "ok-r1")[0]
    assert pod.metadata.labels["scavenger.dev/job-name"] == "ok"
    assert pod.metadata.labels["scavenger.dev/run"] == "ok-r1"
    assert pod.spec.priority_class_name == "scavenger-band-0"
    assert pod.spec.priority < -10 and pod.spec.preemption_policy == "Never"
    assert pod.metadata.annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "true"
    env = {e.name: e.value for e in pod.spec.containers[0].env}
    assert env["SJ_NAME"] == "ok" and env["SJ_NAMESPACE"] == namespace and env["SJ_RESTART_COUNT"] == "0"
    assert env["SJ_CHECKPOINT_DIR"] == "/ckpt"
    assert int(env["SJ_CHECKPOINT_INTERVAL"]) < 30 * 60
    reasons = wait_for("transition events", lambda: (r := events_for(api, namespace, "ok")) and
                       {"Launched", "Running", "Succeeded"} <= set(r) and r)
    assert reasons.index("Launched") < reasons.index("Running") < reasons.index("Succeeded")
    assert "Queued" not in reasons, "it fitted at first sight: queued and launched in one write"


def test_nonzero_exit_fails_with_the_code_and_is_not_retried(api, namespace, operator):
    create_sj(api, namespace, "crash", sj_spec(run_for="2s", exit_code=3))
    st = wait_phase(api, namespace, "crash", "Failed")
    assert "exited with code 3" in st["message"]
    assert "container main" in st["message"] and "crash-r1-" in st["message"]
    assert st["finishedTimestamp"]
    time.sleep(3)  # several decision passes: nothing new may be launched
    assert [j.metadata.name for j in jobs_of(api, namespace, "crash")] == ["crash-r1"]
    assert status(api, namespace, "crash")["phase"] == "Failed"
    assert event_messages(api, namespace, "crash", "Failed")


@pytest.mark.kwok_only  # a dedicated simulated node
def test_preempted_sj_is_interrupted_then_runs_again_and_succeeds(api, namespace, operator):
    core = client.CoreV1Api(api)
    with dedicated_node(cpu="4") as node:
        create_sj(api, namespace, "victim", sj_spec(
            run_for="8s", cpu="3", nodeSelector=node["nodeSelector"], tolerations=node["tolerations"]))
        wait_phase(api, namespace, "victim", "Running")
        # A default-priority workload needs the room: the scheduler preempts the SJ.
        core.create_namespaced_pod(namespace, workload_pod("owner", node_placement(node), cpu="2", run_for="4s"))
        st = wait_for("interruption recorded", lambda: (s := status(api, namespace, "victim")).get(
            "interruptedCount") == 1 and s, timeout=60)
        assert len(st["interruptedTimestamps"]) == 1
        wait_for("the interrupted run's pods gone", lambda: not run_pods(api, namespace, "victim-r1"), timeout=30)
        st = wait_phase(api, namespace, "victim", "Succeeded", timeout=90)
        assert st["interruptedCount"] == 1
        assert st["jobName"] == "victim-r2"
        assert len(st["runningTimestamps"]) == 2
        assert "Interrupted" in events_for(api, namespace, "victim")
        pod_env = None
        for job in jobs_of(api, namespace, "victim"):
            if job.metadata.name == "victim-r2":
                pod_env = {e.name: e.value for e in job.spec.template.spec.containers[0].env}
        assert pod_env is not None and pod_env["SJ_RESTART_COUNT"] == "1"


@pytest.mark.kwok_only  # a dedicated simulated node
def test_preempted_sj_that_exits_zero_after_checkpointing_is_interrupted_not_succeeded(api, namespace, operator):
    """The app checkpoints on SIGTERM and exits 0; the Job controller counts a completion. The run was
    told to stop, so the SJ is Interrupted and runs again."""
    core = client.CoreV1Api(api)
    with dedicated_node(cpu="4") as node:
        create_sj(api, namespace, "clean", sj_spec(
            run_for=None, cpu="3", nodeSelector=node["nodeSelector"], tolerations=node["tolerations"],
            podAnnotations={"sim.scavenger.dev/exit-code-on-delete": "0"}))
        wait_phase(api, namespace, "clean", "Running")
        core.create_namespaced_pod(namespace, workload_pod("owner", node_placement(node), cpu="2"))
        st = wait_for("interruption recorded", lambda: (s := status(api, namespace, "clean")).get(
            "interruptedCount") == 1 and s, timeout=60)
        assert st["phase"] != "Succeeded" and not st.get("finishedTimestamp")
        assert any("PreemptionByScheduler" in m for m in event_messages(api, namespace, "clean", "Interrupted"))
        # It is queued again; it starts once the owner's room is free.
        core.delete_namespaced_pod("owner", namespace, grace_period_seconds=0)
        st = wait_phase(api, namespace, "clean", "Running", timeout=60)
        assert st["jobName"] == "clean-r2" and st["interruptedCount"] == 1
        assert "Succeeded" not in events_for(api, namespace, "clean")


def test_gang_member_deleted_cancels_whole_gang_and_requeues(api, namespace, operator):
    core = client.CoreV1Api(api)
    create_sj(api, namespace, "gang", sj_spec(run_for="600s", parallelism=3))
    wait_phase(api, namespace, "gang", "Running")
    pods = run_pods(api, namespace, "gang-r1")
    assert len(pods) == 3
    svc = core.read_namespaced_service("gang-r1", namespace)
    assert svc.spec.cluster_ip == "None" and svc.spec.selector is None
    wait_published(api, namespace, "gang-r1", 3)
    for pod in pods:
        env = {e.name: e.value for e in pod.spec.containers[0].env if e.value is not None}
        assert env["SJ_WORLD_SIZE"] == "3"
        assert env["SJ_HOSTS"].split(",")[0].startswith("gang-r1-0.gang-r1")
        assert pod.spec.subdomain == "gang-r1"
    core.delete_namespaced_pod(pods[1].metadata.name, namespace)

    st = wait_for("interruption recorded", lambda: (s := status(api, namespace, "gang")).get(
        "interruptedCount") == 1 and s, timeout=60)
    assert len(st["interruptedTimestamps"]) == 1
    interrupted = event_messages(api, namespace, "gang", "Interrupted")
    assert len(interrupted) == 1 and f"pod {pods[1].metadata.name} was deleted" in interrupted[0]
    wait_for("old run's pods all gone", lambda: not run_pods(api, namespace, "gang-r1"), timeout=30)
    assert "gang-r1" not in [j.metadata.name for j in jobs_of(api, namespace, "gang")
                             if j.metadata.deletion_timestamp is None]
    st = wait_phase(api, namespace, "gang", "Running", timeout=60)
    assert st["jobName"] == "gang-r2"
    assert len(run_pods(api, namespace, "gang-r2")) == 3
    wait_published(api, namespace, "gang-r2", 3)
    wait_for("the old run's Service and slice gone", lambda: published(api, namespace, "gang-r1") is None
             and not core.list_namespaced_service(namespace, field_selector="metadata.name=gang-r1").items, timeout=30)


def test_missing_pvc_fails_naming_it_and_creates_no_job(api, namespace, operator):
    create_sj(api, namespace, "nopvc", sj_spec(volumes=[
        {"name": "data", "mountPath": "/data", "persistentVolumeClaim": {"claimName": "no-such-claim"}}]))
    st = wait_phase(api, namespace, "nopvc", "Failed")
    assert "no-such-claim" in st["message"]
    assert jobs_of(api, namespace, "nopvc") == []


def test_invalid_spec_that_slipped_past_the_door_fails_naming_the_field(api, namespace, operator):
    # This module's operator serves no webhook (as while none answers, under failurePolicy Ignore): the
    # CRD schema lets this through, the loop's validation (the webhook's, too) fails it.
    create_sj(api, namespace, "bad", sj_spec(resources={"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}))
    st = wait_phase(api, namespace, "bad", "Failed")
    assert "spec.resources.limits[cpu]: must be at least the request" in st["message"]
    assert jobs_of(api, namespace, "bad") == []


def test_suspend_cancels_the_run_and_resume_queues_again(api, namespace, operator):
    create_sj(api, namespace, "pausable", sj_spec(run_for="600s"))
    wait_phase(api, namespace, "pausable", "Running")
    patch_sj(api, namespace, "pausable", {"suspend": True})
    st = wait_phase(api, namespace, "pausable", "Suspended")
    assert st["interruptedCount"] == 0
    wait_for("suspended run gone", lambda: not run_pods(api, namespace, "pausable-r1"), timeout=30)
    patch_sj(api, namespace, "pausable", {"suspend": False})
    st = wait_phase(api, namespace, "pausable", "Running", timeout=60)
    assert st["jobName"] == "pausable-r2"
    assert {"Suspended", "Resumed"} <= set(events_for(api, namespace, "pausable"))


def test_deleting_the_sj_removes_everything(api, namespace, operator):
    create_sj(api, namespace, "doomed", sj_spec(run_for="600s", parallelism=2))
    wait_phase(api, namespace, "doomed", "Running")
    from sj_operator.names import GROUP, PLURAL, VERSION
    from tests.e2e.sj import custom
    custom(api).delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "doomed")
    core, policy, discovery = client.CoreV1Api(api), client.PolicyV1Api(api), client.DiscoveryV1Api(api)
    sel = "scavenger.dev/job-name=doomed"

    def nothing_left() -> bool:
        return (not jobs_of(api, namespace, "doomed")
                and not core.list_namespaced_pod(namespace, label_selector=sel).items
                and not core.list_namespaced_service(namespace, label_selector=sel).items
                and not discovery.list_namespaced_endpoint_slice(namespace, label_selector=sel).items
                and not policy.list_namespaced_pod_disruption_budget(namespace, label_selector=sel).items)

    wait_for("no runs, pods, services, slices or budgets left", nothing_left, timeout=60)


@pytest.mark.kwok_only  # a dedicated simulated node
def test_lost_node_interrupts_the_run(api, namespace, operator):
    """A node going away (here: a NoExecute taint the pods do not tolerate, which is how the
    taint-eviction controller empties an unreachable node) interrupts the run."""
    core = client.CoreV1Api(api)
    with dedicated_node(cpu="4") as node:
        create_sj(api, namespace, "stranded", sj_spec(run_for="600s", nodeSelector=node["nodeSelector"],
                                                      tolerations=node["tolerations"]))
        wait_phase(api, namespace, "stranded", "Running")
        assert run_pods(api, namespace, "stranded-r1")[0].spec.node_name == node["name"]
        core.patch_node(node["name"], {"spec": {"taints": [
            *[{"key": t["key"], "value": t["value"], "effect": t["effect"]} for t in node["tolerations"]],
            {"key": "scavenger.dev/e2e-lost", "value": "true", "effect": "NoExecute"}]}})
        wait_for("interruption recorded", lambda: status(api, namespace, "stranded").get("interruptedCount") == 1,
                 timeout=60)
        interrupted = event_messages(api, namespace, "stranded", "Interrupted")
        assert interrupted and "DeletionByTaintManager" in interrupted[0]
        assert status(api, namespace, "stranded")["phase"] in ("Interrupted", "Starting")


def _users_job(name: str, labels: dict[str, str]) -> dict[str, object]:
    """A user's own Job (suspended: it needs no room), labelled as the operator labels a run."""
    return {"metadata": {"name": name, "labels": labels}, "spec": {"suspend": True, "template": {
        "metadata": {"labels": labels},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": E2E_IMAGE, "command": ["true"]}]}}}}


def _admitted(api: client.ApiClient, namespace: str, name: str, reason: str) -> dict[str, str] | None:
    """The SJ's Admitted condition once it gives ``reason``."""
    conditions = status(api, namespace, name).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Admitted" and c.get("reason") == reason), None)


def test_a_users_job_labelled_like_a_run_and_their_service_of_its_name_survive(api, namespace, operator):
    """No SJ controls them: they are not strays, whatever their labels and names say (the operator deleted such a
    Job, and the Service of its name, as runs no SJ points at)."""
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    labels = {"scavenger.dev/job-name": "mine", "scavenger.dev/run": "mine-r1"}
    batch.create_namespaced_job(namespace, _users_job("mine-r1", labels))
    core.create_namespaced_service(namespace, {"metadata": {"name": "mine-r1", "labels": labels}, "spec": {
        "clusterIP": "None", "selector": {"scavenger.dev/run": "mine-r1"}}})
    # An SJ runs to its end beside them: many passes, each of which looks for strays.
    create_sj(api, namespace, "beside", sj_spec(run_for="3s"))
    wait_phase(api, namespace, "beside", "Succeeded")
    time.sleep(3)
    job, svc = batch.read_namespaced_job("mine-r1", namespace), core.read_namespaced_service("mine-r1", namespace)
    assert job.metadata.deletion_timestamp is None and svc.metadata.deletion_timestamp is None


def test_a_job_of_the_runs_name_made_by_someone_else_is_neither_taken_nor_deleted(api, namespace, operator):
    batch = client.BatchV1Api(api)
    labels = {"scavenger.dev/job-name": "taken", "scavenger.dev/run": "taken-r1"}
    theirs = batch.create_namespaced_job(namespace, _users_job("taken-r1", labels))
    create_sj(api, namespace, "taken", sj_spec(run_for="3s"))
    cond = wait_for("the SJ waiting for its run's name", lambda: _admitted(api, namespace, "taken", "NameTaken"))
    assert cond["status"] == "False" and f"Job {namespace}/taken-r1 exists and is not this SJ's" in cond["message"]
    time.sleep(3)  # several passes (and retries): still waiting, the Job as it was
    st = status(api, namespace, "taken")
    assert st["phase"] == "Pending" and not st.get("jobName"), st
    job = batch.read_namespaced_job("taken-r1", namespace)
    assert job.metadata.uid == theirs.metadata.uid and job.metadata.deletion_timestamp is None
    assert not job.metadata.owner_references
    assert event_messages(api, namespace, "taken", "NameTaken")


def test_an_ssh_secret_someone_made_with_the_runs_name_is_not_used_and_the_sj_waits_naming_it(api, namespace,
                                                                                              operator):
    """A co-tenant's ``authorized_keys`` planted under the name of an MPI SJ's ssh Secret would let them into
    the gang: it is never used (nor changed, nor deleted); the SJ waits, saying whose name is taken, and makes
    its own keys once the name is free."""
    core = client.CoreV1Api(api)
    planted = core.create_namespaced_secret(namespace, {
        "metadata": {"name": "heat-mpi-ssh"},
        "stringData": {"authorized_keys": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPlanted intruder@elsewhere"}})
    create_sj(api, namespace, "heat", sj_spec(run_for=None, cpu="100m", parallelism=2, command=["mpirun"],
                                              args=["hostname"], mpi={"slotsPerWorker": 1}))
    cond = wait_for("the SJ waiting for its Secret's name", lambda: _admitted(api, namespace, "heat", "NameTaken"))
    assert cond["status"] == "False" and f"Secret {namespace}/heat-mpi-ssh exists and is not this SJ's" in cond[
        "message"]
    assert status(api, namespace, "heat")["phase"] == "Pending"
    assert jobs_of(api, namespace, "heat") == [], "no run wired to someone else's keys"
    secret = core.read_namespaced_secret("heat-mpi-ssh", namespace)
    assert (secret.metadata.resource_version, secret.metadata.owner_references) == (
        planted.metadata.resource_version, None)
    core.delete_namespaced_secret("heat-mpi-ssh", namespace)
    # The name is free: the SJ makes its own keys at its next try (its backoff is at most 10 s here).
    wait_for("the SJ's run", lambda: jobs_of(api, namespace, "heat"), timeout=60)
    own = core.read_namespaced_secret("heat-mpi-ssh", namespace)
    [ref] = own.metadata.owner_references
    assert (ref.kind, ref.uid, ref.controller) == ("ScavengerJob", get_sj(api, namespace, "heat")["metadata"]["uid"],
                                                   True)
    assert own.metadata.uid != planted.metadata.uid


def test_a_hostile_pod_and_job_anywhere_stop_nothing(api, namespace, operator):
    """Anyone who may create a pod may write any annotation on it: a completion index of ``²`` (which
    ``str.isdigit`` passes and ``int`` refuses) once made the pod watch's view raise, and the watch of every
    pod in the cluster stopped with it. A Job labelled like a run with such a config index, likewise. Both
    are skipped (counted and logged), and an SJ made after them runs to its end."""
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    hostile = {"batch.kubernetes.io/job-completion-index": "²", "scavenger.dev/config-index": "9" * 5000}
    core.create_namespaced_pod(namespace, {
        "metadata": {"name": "hostile", "annotations": hostile,
                     "labels": {"scavenger.dev/job-name": "other", "scavenger.dev/run": "other-r1"}},
        "spec": {"nodeSelector": {"scavenger.dev/nowhere": "true"},
                 "containers": [{"name": "main", "image": E2E_IMAGE}]}})
    batch.create_namespaced_job(namespace, {
        "metadata": {"name": "other-r1", "annotations": hostile, "labels": {"scavenger.dev/job-name": "other"}},
        "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never",
                                                        "containers": [{"name": "main", "image": E2E_IMAGE}]}}}})
    create_sj(api, namespace, "after", sj_spec(run_for="2s"))
    st = wait_phase(api, namespace, "after", "Succeeded")
    assert st["jobName"] == "after-r1"
    assert batch.read_namespaced_job("other-r1", namespace).metadata.name == "other-r1", "not ours: not deleted"
