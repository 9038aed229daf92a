"""Adoption: a plain Job labelled scavenger.dev/scavenge=true is suspended at admission and run by an SJ of its
name; the Job ends as the SJ ended. On the local cluster, the operator in-process with its webhook."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.e2e.kube import (
    dedicated_node,
    free_port,
    node_placement,
    sim_annotations,
    sim_container,
    wait_for,
    workload_pod,
)
from tests.e2e.sj import run_pods, status, wait_phase

OPERATOR_CONFIG = {"webhook_port": free_port(), "webhook_host": "127.0.0.1"}
SCAVENGE = {"scavenger.dev/scavenge": "true"}


def job_manifest(name: str, *, node: dict[str, Any] | None = None, run_for: str = "3s", cpu: str = "500m",
                 exit_code: int | None = None, labels: dict[str, str] | None = None,
                 annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 2,
                           "containers": [sim_container(cpu=cpu, run_for=run_for, exit_code=exit_code)]}
    if node is not None:
        pod.update(nodeSelector=node["nodeSelector"], tolerations=node["tolerations"])
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": dict(SCAVENGE if labels is None else labels),
                         "annotations": {"scavenger.dev/duration": "1m", **(annotations or {})}},
            "spec": {"template": {"metadata": {"annotations": sim_annotations(run_for, exit_code)}, "spec": pod},
                     **spec}}


def _refusal(api: client.ApiClient, namespace: str, manifest: dict[str, Any], *, dry_run: bool = False) -> str | None:
    try:
        client.BatchV1Api(api).create_namespaced_job(namespace, manifest, **({"dry_run": "All"} if dry_run else {}))
        return None
    except client.ApiException as exc:
        return str(exc.body)


@pytest.fixture(scope="module")
def adoption(api: client.ApiClient, operator: Any) -> Iterator[None]:
    """The operator's adoption webhook is registered and answering (its first refusal seen)."""
    probe = job_manifest("probe", activeDeadlineSeconds=60)
    wait_for("the adoption webhook answers", lambda: "spec.activeDeadlineSeconds" in (
        _refusal(api, "default", probe, dry_run=True) or ""), timeout=60)
    yield  # the operator fixture deletes the configurations it made


def job_condition(api: client.ApiClient, namespace: str, name: str, kind: str) -> Any | None:
    job = client.BatchV1Api(api).read_namespaced_job(name, namespace)
    return next((c for c in job.status.conditions or [] if c.type == kind and c.status == "True"), None)


@pytest.mark.kwok_only  # a dedicated simulated node
def test_a_labelled_job_runs_as_an_sj_is_preempted_resumes_and_ends_complete(api, namespace, adoption):
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    with dedicated_node(cpu="4") as node:
        batch.create_namespaced_job(namespace, job_manifest("adopted", node=node, run_for="8s", cpu="3"))
        job = batch.read_namespaced_job("adopted", namespace)
        assert job.spec.suspend is True and job.spec.managed_by == "scavenger.dev/operator"
        st = wait_phase(api, namespace, "adopted", "Running", timeout=60)
        sj = client.CustomObjectsApi(api).get_namespaced_custom_object("scavenger.dev", "v1alpha1", namespace,
                                                                       "scavengerjobs", "adopted")
        [owner] = sj["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", "adopted", job.metadata.uid)
        assert sj["spec"]["duration"] == "1m" and sj["spec"]["resources"]["requests"]["cpu"] == "3"
        [pod] = run_pods(api, namespace, st["jobName"])
        assert pod.spec.priority_class_name.startswith("scavenger-band-")
        # A default-priority workload takes the room back: the SJ is interrupted, and resumes.
        core.create_namespaced_pod(namespace, workload_pod("owner", node_placement(node), cpu="2", run_for="4s"))
        wait_for("the interruption", lambda: status(api, namespace, "adopted").get("interruptedCount") == 1,
                 timeout=60)
        st = wait_phase(api, namespace, "adopted", "Succeeded", timeout=120)
        assert st["interruptedCount"] == 1 and st["jobName"] == "adopted-r2"
        complete = wait_for("the Job Complete", lambda: job_condition(api, namespace, "adopted", "Complete"),
                            timeout=30)
        assert complete.message.startswith("ScavengerJob adopted succeeded")
        job = batch.read_namespaced_job("adopted", namespace)
        assert job.status.succeeded == 1 and job.status.completion_time is not None
        assert job.spec.suspend is True, "the original Job never ran a pod of its own"
        assert not core.list_namespaced_pod(namespace, label_selector=f"controller-uid={job.metadata.uid}").items
        assert "Adopted" in wait_for("the Job's Events", lambda: [e.reason for e in core.list_namespaced_event(
            namespace, field_selector="involvedObject.kind=Job,involvedObject.name=adopted").items] or None)


def test_an_indexed_job_runs_as_a_gang_and_a_failure_fails_the_job(api, namespace, adoption):
    batch = client.BatchV1Api(api)
    batch.create_namespaced_job(namespace, job_manifest("gang", parallelism=2, completions=2,
                                                        completionMode="Indexed"))
    st = wait_phase(api, namespace, "gang", "Succeeded", timeout=60)
    assert len(run_pods(api, namespace, st["jobName"])) == 2
    wait_for("the Job Complete", lambda: job_condition(api, namespace, "gang", "Complete"), timeout=30)
    assert batch.read_namespaced_job("gang", namespace).status.succeeded == 2

    batch.create_namespaced_job(namespace, job_manifest("crash", run_for="2s", exit_code=3))
    wait_phase(api, namespace, "crash", "Failed", timeout=60)
    failed = wait_for("the Job Failed", lambda: job_condition(api, namespace, "crash", "Failed"), timeout=30)
    assert "exited with code 3" in failed.message


def test_an_unlabelled_job_is_untouched(api, namespace, adoption):
    batch = client.BatchV1Api(api)
    batch.create_namespaced_job(namespace, job_manifest("plain", labels={}, run_for="2s"))
    job = batch.read_namespaced_job("plain", namespace)
    assert not job.spec.suspend and job.spec.managed_by is None
    wait_for("the plain Job Complete by itself", lambda: job_condition(api, namespace, "plain", "Complete"),
             timeout=60)
    assert "plain" not in [sj["metadata"]["name"] for sj in client.CustomObjectsApi(api).list_namespaced_custom_object(
        "scavenger.dev", "v1alpha1", namespace, "scavengerjobs")["items"]]
    [pod] = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector="job-name=plain").items
    assert not (pod.spec.priority_class_name or "").startswith("scavenger-band-")


@pytest.mark.parametrize(("change", "field"), [
    (lambda m: m["spec"]["template"]["spec"].update(initContainers=[sim_container("init")]),
     "spec.template.spec.initContainers"),
    (lambda m: m["spec"]["template"]["spec"]["containers"].append(sim_container("second")),
     "spec.template.spec.containers: has 2 containers"),
    (lambda m: m["spec"].update(parallelism=3), "spec.parallelism"),
    (lambda m: m["metadata"]["annotations"].update({"scavenger.dev/duration": "soon"}),
     "metadata.annotations[scavenger.dev/duration]"),
    (lambda m: m["spec"]["template"]["spec"].update(terminationGracePeriodSeconds=100_000),
     "spec.template.spec.terminationGracePeriodSeconds: must be at most 300"),
], ids=["init-container", "two-containers", "non-indexed-parallelism", "duration", "grace"])
def test_what_an_sj_cannot_express_is_refused_at_admission_naming_the_field(api, namespace, adoption, change, field):
    manifest = job_manifest("refused")
    change(manifest)
    message = _refusal(api, namespace, manifest)
    assert message is not None and 'admission webhook \\"adopt.jobs.scavenger.dev\\" denied the request' in message
    assert field in message


def test_deleting_the_job_deletes_its_sj(api, namespace, adoption):
    batch, custom = client.BatchV1Api(api), client.CustomObjectsApi(api)
    batch.create_namespaced_job(namespace, job_manifest("gone", run_for="600s"))
    wait_phase(api, namespace, "gone", "Running", timeout=60)
    batch.delete_namespaced_job("gone", namespace, propagation_policy="Background")

    def sj_gone() -> bool:
        try:
            custom.get_namespaced_custom_object("scavenger.dev", "v1alpha1", namespace, "scavengerjobs", "gone")
            return False
        except client.ApiException as exc:
            return exc.status == 404

    wait_for("the SJ deleted with its Job", sj_gone, timeout=60)
    wait_for("its run's pods gone", lambda: not run_pods(api, namespace, "gone-r1"), timeout=60)
