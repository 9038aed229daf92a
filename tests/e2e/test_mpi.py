"""MPI gangs on the local cluster: the operator's ssh Secret, hostfile, headless Service and
Indexed Job; a lost worker cancels the whole gang; the demo manifests are accepted by the CRD."""
from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from sj_operator.names import GROUP, PLURAL, VERSION
from tests.e2e.kube import wait_for
from tests.e2e.sj import create_sj, event_messages, run_pods, sj_spec, status, wait_phase, wait_published

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.kwok_only


def _mpi_spec() -> dict:
    return sj_spec(run_for=None, cpu="500m", parallelism=4, mpi={"slotsPerWorker": 2, "implementation": "OpenMPI"},
                   command=["mpirun"], args=["--hostfile", "/etc/mpi/hostfile", "python3", "/app/heat.py"])


def test_mpi_sj_gets_its_wiring_and_a_lost_worker_requeues_the_gang(api, namespace, operator):
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    create_sj(api, namespace, "heat", _mpi_spec())
    wait_phase(api, namespace, "heat", "Running")

    secret = core.read_namespaced_secret("heat-mpi-ssh", namespace)
    assert secret.type == "kubernetes.io/ssh-auth"
    public = base64.b64decode(secret.data["ssh-publickey"]).decode()
    assert public.startswith("ssh-ed25519 ")
    assert base64.b64decode(secret.data["authorized_keys"]).decode().strip() == public.strip()
    host_public = base64.b64decode(secret.data["ssh_host_ed25519_key.pub"]).decode()
    assert host_public.startswith("ssh-ed25519 ") and host_public != public
    assert base64.b64decode(secret.data["known_hosts"]).decode() == f"*.{namespace}.svc.cluster.local {host_public}"
    assert "StrictHostKeyChecking yes" in base64.b64decode(secret.data["config"]).decode()
    assert secret.metadata.owner_references[0].kind == "ScavengerJob"

    hostfile = core.read_namespaced_config_map("heat-mpi-hostfile", namespace).data["hostfile"]
    assert [line for line in hostfile.splitlines() if line and not line.startswith("#")] == [
        f"heat-r1-{i}.heat-r1.{namespace}.svc.cluster.local slots=2" for i in range(1, 4)]

    svc = core.read_namespaced_service("heat-r1", namespace)
    assert svc.spec.cluster_ip == "None" and svc.spec.selector is None  # its slice is the operator's
    assert sorted(wait_published(api, namespace, "heat-r1", 4)) == [f"heat-r1-{i}" for i in range(4)]
    job = batch.read_namespaced_job("heat-r1", namespace)
    assert job.spec.completion_mode == "Indexed" and job.spec.completions == 4 and job.spec.parallelism == 4
    assert job.spec.success_policy.rules[0].succeeded_indexes == "0"

    pods = sorted(run_pods(api, namespace, "heat-r1"),
                  key=lambda p: int(p.metadata.annotations["batch.kubernetes.io/job-completion-index"]))
    assert [p.spec.hostname for p in pods] == [f"heat-r1-{i}" for i in range(4)]
    assert {p.spec.subdomain for p in pods} == {"heat-r1"}
    env = {e.name: e.value for e in pods[0].spec.containers[0].env if e.value is not None}
    assert env["SJ_WORLD_SIZE"] == "4"
    assert env["SJ_HOSTS"] == ",".join(f"heat-r1-{i}.heat-r1.{namespace}.svc.cluster.local" for i in range(4))
    assert env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    mounts = {m.mount_path for m in pods[0].spec.containers[0].volume_mounts}
    assert {"/etc/mpi", "/etc/mpi/ssh"} <= mounts

    core.delete_namespaced_pod(pods[2].metadata.name, namespace)  # a worker is lost
    wait_for("interruption recorded", lambda: (s := status(api, namespace, "heat")).get(
        "interruptedCount") == 1 and s, timeout=60)
    assert any(pods[2].metadata.name in m for m in event_messages(api, namespace, "heat", "Interrupted"))
    wait_for("the whole first gang gone", lambda: not run_pods(api, namespace, "heat-r1"), timeout=30)
    wait_phase(api, namespace, "heat", "Running", timeout=60)
    assert status(api, namespace, "heat")["jobName"] == "heat-r2"
    # The keys are reused; the hostfile now names the new run's hosts.
    again = core.read_namespaced_secret("heat-mpi-ssh", namespace)
    assert again.data["ssh-privatekey"] == secret.data["ssh-privatekey"]
    assert again.data["ssh_host_ed25519_key"] == secret.data["ssh_host_ed25519_key"]
    hostfile = core.read_namespaced_config_map("heat-mpi-hostfile", namespace).data["hostfile"]
    assert f"heat-r2-1.heat-r2.{namespace}.svc.cluster.local slots=2" in hostfile and "heat-r1" not in hostfile


@pytest.mark.parametrize("manifest", ["demo/generic-counter/scavengerjob.yaml",
                                      "demo/mpi-checkpoint/scavengerjob.yaml",
                                      "examples/lammps/scavengerjob.yaml"])
def test_demo_manifests_are_accepted_by_the_crd(api, namespace, crd, manifest):
    custom = client.CustomObjectsApi(api)
    docs = [d for d in yaml.safe_load_all((REPO / manifest).read_text()) if d and d["kind"] == "ScavengerJob"]
    assert docs
    for doc in docs:
        created = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, doc, dry_run="All")
        assert created["spec"]["image"] == doc["spec"]["image"]
    from sj_operator.api import parse_spec
    for doc in docs:
        parse_spec(doc["spec"])  # and by the operator's own validation
