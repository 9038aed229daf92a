"""MPI wiring of ``spec.mpi`` gangs: exact objects, the key pairs, and the entrypoint script's behaviour."""

from __future__ import annotations

import base64
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_ssh_private_key,
    load_ssh_public_key,
)

from gang.hostfile import MPIImplementation, discover_hosts_script
from gang.hosts import DEFAULT_CLUSTER_DOMAIN, gang_hosts, worker_hosts
from gang.mpi import (
    MPIJobOptions,
    entrypoint_script,
    escape_kubernetes_expansion,
    mpi_entrypoint,
    mpi_env,
    wire_mpi_job,
)
from gang.ssh import SSH_CLIENT_CONFIG, GangKeys, SSHKeyPair, generate_gang_keys, generate_ssh_keypair
from sj_operator.api import InvalidSpec, ScavengerJobSpec, parse_spec
from sj_operator.builders.job import build_run_job
from sj_operator.builders.mpi import build_hostfile_configmap, build_mpi_secret, mpi_job_options
from sj_operator.names import CHECKPOINT_ENV, CONTAINER_NAME, hostfile_configmap_name, mpi_secret_name
from tests.unit.helpers import POD_FAILURE_POLICY

UID = "0b6c2d1e-5f7a-4c3b-9d8e-112233445566"
OWNER = {
    "apiVersion": "scavenger.dev/v1alpha1",
    "kind": "ScavengerJob",
    "name": "heat",
    "uid": UID,
    "controller": True,
    "blockOwnerDeletion": True,
}
SJ_LABELS = {"scavenger.dev/job-name": "heat"}

FAKE_PRIVATE_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nZmFrZQ==\n-----END OPENSSH PRIVATE KEY-----\n"
FAKE_PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGZha2U= scavenger"
FAKE_HOST_PRIVATE_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\naG9zdA==\n-----END OPENSSH PRIVATE KEY-----\n"
FAKE_HOST_PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGhvc3Q= scavenger host key"
FAKE_KEYS = GangKeys(user=SSHKeyPair(private=FAKE_PRIVATE_KEY, public=FAKE_PUBLIC_KEY),
                     host=SSHKeyPair(private=FAKE_HOST_PRIVATE_KEY, public=FAKE_HOST_PUBLIC_KEY))
MPI_ENTRYPOINT_SCRIPT = entrypoint_script(forward_env=CHECKPOINT_ENV)
"""The script as the operator's pods run it: the SJ's checkpoint variables are passed on to the ranks."""
SCRIPT_ARG = MPI_ENTRYPOINT_SCRIPT.replace("$", "$$")


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def run(argv: list[str], *, env: Mapping[str, str] | None = None, timeout: float = 30) -> CompletedProcess[str]:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def decoded(secret: Mapping[str, Any]) -> dict[str, str]:
    return {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}


def openssh_public(key: Ed25519PrivateKey) -> str:
    """``ssh-ed25519 AAAA...`` of a private key, without a comment."""
    return key.public_key().public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode()


# ----------------------------------------------------------------------------- the Secret


SSH_CONFIG = (
    "Host *\n"
    "    Port 2222\n"
    "    IdentityFile /etc/mpi/ssh/ssh-privatekey\n"
    "    IdentitiesOnly yes\n"
    "    StrictHostKeyChecking yes\n"
    "    UserKnownHostsFile /etc/mpi/ssh/known_hosts\n"
    "    GlobalKnownHostsFile /etc/mpi/ssh/known_hosts\n"
    "    HostKeyAlgorithms ssh-ed25519\n"
    "    CheckHostIP no\n"
    "    UpdateHostKeys no\n"
    "    LogLevel ERROR\n"
    "    BatchMode yes\n"
    "    ConnectTimeout 10\n"
)


@pytest.mark.parametrize(("cluster_domain", "known_hosts"), [
    (None, "*.research.svc.cluster.local ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGhvc3Q= scavenger host key\n"),
    ("corp.example", "*.research.svc.corp.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGhvc3Q= scavenger host key\n"),
])  # fmt: skip
def test_secret(cluster_domain: str | None, known_hosts: str) -> None:
    domain = {} if cluster_domain is None else {"cluster_domain": cluster_domain}
    secret = build_mpi_secret(sj_name="heat", namespace="research", sj_uid=UID, keys=FAKE_KEYS, **domain)
    assert secret == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "heat-mpi-ssh",
            "namespace": "research",
            "labels": SJ_LABELS,
            "ownerReferences": [OWNER],
        },
        "type": "kubernetes.io/ssh-auth",
        "immutable": True,
        "data": {
            "ssh-privatekey": b64(FAKE_PRIVATE_KEY),
            "ssh-publickey": b64(FAKE_PUBLIC_KEY + "\n"),
            "authorized_keys": b64(FAKE_PUBLIC_KEY + "\n"),
            "ssh_host_ed25519_key": b64(FAKE_HOST_PRIVATE_KEY),
            "ssh_host_ed25519_key.pub": b64(FAKE_HOST_PUBLIC_KEY + "\n"),
            "known_hosts": b64(known_hosts),
            "config": b64(SSH_CONFIG),
        },
    }
    assert SSH_CONFIG == SSH_CLIENT_CONFIG


def test_secret_key_files_end_with_one_newline() -> None:
    keys = GangKeys(
        user=SSHKeyPair(private=FAKE_PRIVATE_KEY.rstrip("\n"), public=f"  {FAKE_PUBLIC_KEY}\n\n"),
        host=SSHKeyPair(private=FAKE_HOST_PRIVATE_KEY + "\n", public=f"{FAKE_HOST_PUBLIC_KEY} \n"),
    )
    data = decoded(build_mpi_secret(sj_name="heat", namespace="research", sj_uid=UID, keys=keys))
    assert data["ssh-privatekey"] == FAKE_PRIVATE_KEY
    assert data["ssh-publickey"] == data["authorized_keys"] == FAKE_PUBLIC_KEY + "\n"
    assert data["ssh_host_ed25519_key"] == FAKE_HOST_PRIVATE_KEY
    assert data["ssh_host_ed25519_key.pub"] == FAKE_HOST_PUBLIC_KEY + "\n"
    assert data["known_hosts"] == f"*.research.svc.cluster.local {FAKE_HOST_PUBLIC_KEY}\n"


def test_each_gang_pins_its_own_host_key() -> None:
    secrets = [decoded(build_mpi_secret(sj_name=name, namespace="research", sj_uid=UID, keys=generate_gang_keys()))
               for name in ("heat", "wave")]
    for data in secrets:
        host_key = load_ssh_private_key(data["ssh_host_ed25519_key"].encode(), password=None)
        user_key = load_ssh_private_key(data["ssh-privatekey"].encode(), password=None)
        assert isinstance(host_key, Ed25519PrivateKey) and isinstance(user_key, Ed25519PrivateKey)
        host_public = f"{openssh_public(host_key)} scavenger host key\n"
        assert data["ssh_host_ed25519_key.pub"] == host_public
        assert data["known_hosts"] == f"*.research.svc.cluster.local {host_public}"
        assert openssh_public(host_key) != openssh_public(user_key)
    assert secrets[0]["known_hosts"] != secrets[1]["known_hosts"]
    assert secrets[0]["ssh_host_ed25519_key"] != secrets[1]["ssh_host_ed25519_key"]


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client")
def test_ssh_client_config_is_understood_by_ssh(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(SSH_CLIENT_CONFIG)
    out = subprocess.run(
        ["ssh", "-G", "-F", str(config), "heat-r1-1.heat-r1.research.svc.cluster.local"],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    for line in (
        "port 2222",
        "identityfile /etc/mpi/ssh/ssh-privatekey",
        "identitiesonly yes",
        "stricthostkeychecking true",
        "userknownhostsfile /etc/mpi/ssh/known_hosts",
        "globalknownhostsfile /etc/mpi/ssh/known_hosts",
        "hostkeyalgorithms ssh-ed25519",
        "checkhostip no",
        "updatehostkeys false",
        "loglevel ERROR",
        "batchmode yes",
        "connecttimeout 10",
    ):
        assert line in out


# ----------------------------------------------------------------------------- the key pairs


@pytest.mark.parametrize(("keypair", "comment"), [
    (lambda: generate_ssh_keypair(), "scavenger"),
    (lambda: generate_ssh_keypair("scavenger host key"), "scavenger host key"),
    (lambda: generate_gang_keys().user, "scavenger"),
    (lambda: generate_gang_keys().host, "scavenger host key"),
])  # fmt: skip
def test_generated_keypair_round_trips(keypair: Any, comment: str) -> None:
    pair: SSHKeyPair = keypair()
    assert pair.private.startswith("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    assert pair.private.endswith("-----END OPENSSH PRIVATE KEY-----\n")
    kind, blob, rest = pair.public.split(" ", 2)
    assert (kind, rest) == ("ssh-ed25519", comment)
    assert blob.startswith("AAAA")
    private_key = load_ssh_private_key(pair.private.encode(), password=None)
    public_key = load_ssh_public_key(pair.public.encode())
    assert isinstance(private_key, Ed25519PrivateKey)
    assert isinstance(public_key, Ed25519PublicKey)
    assert openssh_public(private_key) == public_key.public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode()


def test_generated_keypairs_differ() -> None:
    assert generate_ssh_keypair() != generate_ssh_keypair()
    keys = generate_gang_keys()
    assert keys.user.private != keys.host.private
    assert generate_gang_keys().host != keys.host


# ----------------------------------------------------------------------------- hosts and the ConfigMap


@pytest.mark.parametrize(("namespace", "cluster_domain", "hosts"), [
    ("research", DEFAULT_CLUSTER_DOMAIN, ["heat-r2-0.heat-r2.research.svc.cluster.local",
                                          "heat-r2-1.heat-r2.research.svc.cluster.local",
                                          "heat-r2-2.heat-r2.research.svc.cluster.local"]),
    ("lab", "corp.example", ["heat-r2-0.heat-r2.lab.svc.corp.example", "heat-r2-1.heat-r2.lab.svc.corp.example",
                             "heat-r2-2.heat-r2.lab.svc.corp.example"]),
])  # fmt: skip
def test_hostnames_are_the_gang_hosts(namespace: str, cluster_domain: str, hosts: list[str]) -> None:
    assert gang_hosts("heat-r2", 3, namespace=namespace, cluster_domain=cluster_domain) == hosts
    assert worker_hosts("heat-r2", 3, namespace=namespace, cluster_domain=cluster_domain) == hosts[1:]
    assert worker_hosts("heat-r2", 2, namespace=namespace, cluster_domain=cluster_domain) == hosts[1:2]
    with pytest.raises(ValueError, match=r"^an MPI gang needs at least 2 pods \(a launcher and a worker\), got 1$"):
        worker_hosts("heat-r2", 1, namespace=namespace)


def test_hostnames_default_to_cluster_local() -> None:
    assert gang_hosts("heat-r2", 1, namespace="research") == ["heat-r2-0.heat-r2.research.svc.cluster.local"]


EXPECTED_DISCOVER_HOSTS = (
    "#!/bin/sh\n"
    "# The MPI workers of run heat-r2, one per line as host:slots.\n"
    "printf '%s\\n' heat-r2-1.heat-r2.research.svc.cluster.local:2 heat-r2-2.heat-r2.research.svc.cluster.local:2"
    " heat-r2-3.heat-r2.research.svc.cluster.local:2\n"
)


def expected_configmap(hostfile: str, discover_hosts: str = EXPECTED_DISCOVER_HOSTS) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "heat-mpi-hostfile",
            "namespace": "research",
            "labels": SJ_LABELS,
            "ownerReferences": [OWNER],
        },
        "data": {"hostfile": hostfile, "discover_hosts.sh": discover_hosts},
    }


@pytest.mark.parametrize(("implementation", "hostfile"), [
    (MPIImplementation.OPENMPI, "heat-r2-1.heat-r2.research.svc.cluster.local slots=2\n"
                                "heat-r2-2.heat-r2.research.svc.cluster.local slots=2\n"
                                "heat-r2-3.heat-r2.research.svc.cluster.local slots=2\n"),
    ("MPICH", "heat-r2-1.heat-r2.research.svc.cluster.local:2\n"
              "heat-r2-2.heat-r2.research.svc.cluster.local:2\n"
              "heat-r2-3.heat-r2.research.svc.cluster.local:2\n"),
], ids=["openmpi", "mpich"])  # fmt: skip
def test_hostfile_configmap(implementation: MPIImplementation | str, hostfile: str) -> None:
    configmap = build_hostfile_configmap(
        sj_name="heat", namespace="research", sj_uid=UID, job_name="heat-r2", parallelism=4,
        slots_per_worker=2, implementation=implementation,
    )  # fmt: skip
    assert configmap == expected_configmap(hostfile)


def test_hostfile_configmap_in_another_cluster_domain() -> None:
    configmap = build_hostfile_configmap(
        sj_name="heat", namespace="research", sj_uid=UID, job_name="heat-r2", parallelism=3,
        slots_per_worker=1, implementation="OpenMPI", cluster_domain="corp.example",
    )  # fmt: skip
    assert configmap == expected_configmap(
        "heat-r2-1.heat-r2.research.svc.corp.example slots=1\nheat-r2-2.heat-r2.research.svc.corp.example slots=1\n",
        "#!/bin/sh\n"
        "# The MPI workers of run heat-r2, one per line as host:slots.\n"
        "printf '%s\\n' heat-r2-1.heat-r2.research.svc.corp.example:1 heat-r2-2.heat-r2.research.svc.corp.example:1\n",
    )


def test_hostfile_configmap_follows_the_run() -> None:
    kwargs: dict[str, Any] = {
        "sj_name": "heat",
        "namespace": "research",
        "sj_uid": UID,
        "parallelism": 2,
        "slots_per_worker": 1,
        "implementation": "OpenMPI",
    }
    first = build_hostfile_configmap(job_name="heat-r1", **kwargs)
    second = build_hostfile_configmap(job_name="heat-r2", **kwargs)
    assert first["metadata"] == second["metadata"]
    assert first["data"]["hostfile"] == "heat-r1-1.heat-r1.research.svc.cluster.local slots=1\n"
    assert second["data"]["hostfile"] == "heat-r2-1.heat-r2.research.svc.cluster.local slots=1\n"


def test_discover_hosts_script_prints_the_workers(tmp_path: Path) -> None:
    script = tmp_path / "discover_hosts.sh"
    script.write_text(discover_hosts_script(job_name="heat-r2", namespace="research", parallelism=4,
                                            slots_per_worker=2))
    assert script.read_text() == EXPECTED_DISCOVER_HOSTS
    out = subprocess.run(["sh", str(script)], capture_output=True, text=True, check=True).stdout
    assert out == (
        "heat-r2-1.heat-r2.research.svc.cluster.local:2\n"
        "heat-r2-2.heat-r2.research.svc.cluster.local:2\n"
        "heat-r2-3.heat-r2.research.svc.cluster.local:2\n"
    )


@pytest.mark.parametrize("slots", [0, -1])
def test_hostfile_needs_a_slot(slots: int) -> None:
    with pytest.raises(ValueError):
        build_hostfile_configmap(
            sj_name="heat", namespace="research", sj_uid=UID, job_name="heat-r2", parallelism=4,
            slots_per_worker=slots, implementation="OpenMPI",
        )  # fmt: skip


def test_object_names() -> None:
    assert (mpi_secret_name("heat"), hostfile_configmap_name("heat")) == ("heat-mpi-ssh", "heat-mpi-hostfile")
    long_names = ["a" * 240, "a" * 241, "a" * 253, "a" * 252 + "b"]
    names = {hostfile_configmap_name(name) for name in long_names}
    assert hostfile_configmap_name("a" * 240) == "a" * 240 + "-mpi-hostfile"  # exactly 253
    assert len(names) == len(long_names)
    for name in names | {mpi_secret_name(name) for name in long_names}:
        assert len(name) <= 253
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)


# ----------------------------------------------------------------------------- the Job

MPI_SPEC: dict[str, Any] = {
    "image": "registry.example/mpi-heat:1",
    "parallelism": 4,
    "command": ["mpirun", "--bind-to", "none"],
    "args": ["python3", "/app/heat.py", "--dir", "$(SJ_CHECKPOINT_DIR)"],
    "env": [{"name": "OMPI_MCA_btl", "value": "self,tcp"}],
    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
    "volumes": [{"name": "ckpt", "mountPath": "/checkpoints", "persistentVolumeClaim": {"claimName": "heat-ckpt"}}],
    "checkpointVolume": "ckpt",
    "duration": "10m",
    "runAsUser": 1000,
    "runAsGroup": 1000,
    "mpi": {"slotsPerWorker": 2, "implementation": "OpenMPI"},
}

EXPECTED_MPI_JOB: dict[str, Any] = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {
        "name": "heat-r2",
        "namespace": "research",
        "labels": {"scavenger.dev/job-name": "heat", "scavenger.dev/run": "heat-r2"},
        "ownerReferences": [OWNER],
    },
    "spec": {
        "completionMode": "Indexed",
        "completions": 4,
        "parallelism": 4,
        "backoffLimit": 0,
        "podReplacementPolicy": "Failed",
        "podFailurePolicy": POD_FAILURE_POLICY,
        "successPolicy": {"rules": [{"succeededIndexes": "0"}]},
        "template": {
            "metadata": {
                "labels": {
                    "scavenger.dev/protected": "false",
                    "scavenger.dev/job-name": "heat",
                    "scavenger.dev/run": "heat-r2",
                },
                "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"},
            },
            "spec": {
                "restartPolicy": "Never",
                "enableServiceLinks": False,
                "priorityClassName": "scavenger-0",
                "terminationGracePeriodSeconds": 30,
                "subdomain": "heat-r2",
                "securityContext": {
                    "runAsUser": 1000,
                    "runAsGroup": 1000,
                    "runAsNonRoot": True,
                    "seccompProfile": {"type": "RuntimeDefault"},
                    "fsGroup": 1000,
                    "fsGroupChangePolicy": "OnRootMismatch",
                },
                "volumes": [
                    {"name": "ckpt", "persistentVolumeClaim": {"claimName": "heat-ckpt"}},
                    {"name": "sj-mpi-ssh", "secret": {"secretName": "heat-mpi-ssh", "defaultMode": 0o600}},
                    {
                        "name": "sj-mpi-hostfile",
                        "configMap": {
                            "name": "heat-mpi-hostfile",
                            "items": [
                                {"key": "hostfile", "path": "hostfile", "mode": 0o644},
                                {"key": "discover_hosts.sh", "path": "discover_hosts.sh", "mode": 0o755},
                            ],
                        },
                    },
                    {"name": "sj-mpi-run", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
                ],
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.example/mpi-heat:1",
                        "command": [
                            "/bin/sh",
                            "-c",
                            SCRIPT_ARG,
                            "sj-mpi-entrypoint",
                            "mpirun",
                            "--bind-to",
                            "none",
                            "python3",
                            "/app/heat.py",
                            "--dir",
                            "$(SJ_CHECKPOINT_DIR)",
                        ],
                        "env": [
                            {"name": "SJ_NAME", "value": "heat"},
                            {"name": "SJ_NAMESPACE", "value": "research"},
                            {"name": "SJ_RESTART_COUNT", "value": "1"},
                            {"name": "SJ_CHECKPOINT_DIR", "value": "/checkpoints"},
                            {"name": "SJ_CHECKPOINT_INTERVAL", "value": "200"},
                            {
                                "name": "SJ_RANK",
                                "valueFrom": {
                                    "fieldRef": {
                                        "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
                                    }
                                },
                            },
                            {"name": "SJ_WORLD_SIZE", "value": "4"},
                            {
                                "name": "SJ_HOSTS",
                                "value": "heat-r2-0.heat-r2.research.svc.cluster.local,"
                                         "heat-r2-1.heat-r2.research.svc.cluster.local,"
                                         "heat-r2-2.heat-r2.research.svc.cluster.local,"
                                         "heat-r2-3.heat-r2.research.svc.cluster.local",
                            },
                            {"name": "OMPI_MCA_orte_default_hostfile", "value": "/etc/mpi/hostfile"},
                            {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
                            {"name": "OMPI_MCA_plm_rsh_args", "value": "-F /etc/mpi/ssh/config"},
                            {"name": "PRTE_MCA_prte_default_hostfile", "value": "/etc/mpi/hostfile"},
                            {"name": "PRTE_MCA_prte_keep_fqdn_hostnames", "value": "true"},
                            {"name": "PRTE_MCA_plm_ssh_args", "value": "-F /etc/mpi/ssh/config"},
                            {"name": "OMPI_MCA_btl", "value": "self,tcp"},
                        ],
                        "resources": {
                            "requests": {"cpu": "1", "memory": "1Gi"},
                            "limits": {"cpu": "1", "memory": "1Gi"},
                        },
                        "volumeMounts": [
                            {"name": "ckpt", "mountPath": "/checkpoints"},
                            {"name": "sj-mpi-hostfile", "mountPath": "/etc/mpi", "readOnly": True},
                            {"name": "sj-mpi-ssh", "mountPath": "/etc/mpi/ssh", "readOnly": True},
                            {"name": "sj-mpi-run", "mountPath": "/run/sj-mpi"},
                        ],
                        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                    }
                ],
            },
        },
    },
}


def mpi_job(raw_spec: Mapping[str, Any], **overrides: Any) -> dict[str, Any]:
    spec = parse_spec(raw_spec)
    assert spec.mpi is not None
    kwargs: dict[str, Any] = {
        "sj_name": "heat",
        "namespace": "research",
        "sj_uid": UID,
        "spec": spec,
        "status_interrupted_count": 1,
        "attempt": 2,
        "priority_class_name": "scavenger-0",
        "extra_pod_labels": {"scavenger.dev/protected": "false"},
        "mpi": mpi_job_options(sj_name="heat", mpi=spec.mpi),
    }
    return build_run_job(**{**kwargs, **overrides})


def test_four_pod_openmpi_job() -> None:
    assert mpi_job(MPI_SPEC) == EXPECTED_MPI_JOB


def test_job_options() -> None:
    spec = parse_spec(MPI_SPEC)
    assert spec.mpi is not None
    assert mpi_job_options(sj_name="heat", mpi=spec.mpi) == MPIJobOptions(
        ssh_secret_name="heat-mpi-ssh", hostfile_configmap_name="heat-mpi-hostfile",
        implementation=MPIImplementation.OPENMPI, forward_env=CHECKPOINT_ENV,
    )  # fmt: skip


def test_mpich_job_env() -> None:
    job = mpi_job({**MPI_SPEC, "mpi": {"implementation": "MPICH"}})
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env[8:] == [
        {"name": "HYDRA_HOST_FILE", "value": "/etc/mpi/hostfile"},
        {"name": "HYDRA_LAUNCHER", "value": "ssh"},
        {"name": "HYDRA_LAUNCHER_EXTRA_ARGS", "value": "-F /etc/mpi/ssh/config"},
        {"name": "OMPI_MCA_btl", "value": "self,tcp"},
    ]
    assert env[8:11] == mpi_env("MPICH")
    rest = EXPECTED_MPI_JOB["spec"]["template"]["spec"]["containers"][0]
    assert {k: v for k, v in job["spec"]["template"]["spec"]["containers"][0].items() if k != "env"} == {
        k: v for k, v in rest.items() if k != "env"
    }


def test_root_pods_get_no_fs_group() -> None:
    raw = {k: v for k, v in MPI_SPEC.items() if k not in ("runAsUser", "runAsGroup")}
    assert "securityContext" not in mpi_job(raw)["spec"]["template"]["spec"]
    explicit_root = mpi_job({**raw, "runAsUser": 0})["spec"]["template"]["spec"]
    assert explicit_root["securityContext"] == {"runAsUser": 0}


def test_fs_group_defaults_to_the_user() -> None:
    raw = {k: v for k, v in MPI_SPEC.items() if k != "runAsGroup"}
    assert mpi_job(raw)["spec"]["template"]["spec"]["securityContext"] == {
        "runAsUser": 1000, "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}, "fsGroup": 1000,
        "fsGroupChangePolicy": "OnRootMismatch",
    }  # fmt: skip


def test_fs_group_is_the_group_when_one_is_set() -> None:
    context = mpi_job({**MPI_SPEC, "runAsGroup": 2000})["spec"]["template"]["spec"]["securityContext"]
    assert (context["runAsUser"], context["runAsGroup"], context["fsGroup"]) == (1000, 2000, 2000)


def test_command_without_args() -> None:
    raw = {k: v for k, v in MPI_SPEC.items() if k != "args"}
    container = mpi_job(raw)["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["/bin/sh", "-c", SCRIPT_ARG, "sj-mpi-entrypoint", "mpirun", "--bind-to", "none"]
    assert "args" not in container


def wire(job: Mapping[str, Any], spec: ScavengerJobSpec, **overrides: Any) -> dict[str, Any]:
    assert spec.mpi is not None
    kwargs: dict[str, Any] = dict(
        options=mpi_job_options(sj_name="heat", mpi=spec.mpi), container=CONTAINER_NAME,
        user_command=(*(spec.command or ()), *(spec.args or ())), user_env=len(spec.env),
        run_as_user=spec.run_as_user, run_as_group=spec.run_as_group,
    )  # fmt: skip
    return wire_mpi_job(job, **{**kwargs, **overrides})


@pytest.mark.parametrize(
    "overrides",
    [{"user_command": ()}, {"container": "sidecar"}],
    ids=["no-command", "no-such-container"],
)
def test_a_job_that_cannot_be_wired_is_refused(overrides: dict[str, Any]) -> None:
    spec = parse_spec(MPI_SPEC)
    with pytest.raises(ValueError):
        wire(mpi_job(MPI_SPEC, mpi=None), spec, **overrides)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"command": None}, "spec.command"),
        ({"parallelism": 1}, "spec.mpi"),
        (
            {"volumes": [{"name": "sj-mpi-run", "mountPath": "/scratch", "emptyDir": {}}], "checkpointVolume": None},
            "spec.volumes[0].name",
        ),
        (
            {"volumes": [{"name": "hosts", "mountPath": "/etc/mpi/", "emptyDir": {}}], "checkpointVolume": None},
            "spec.volumes[0].mountPath",
        ),
        (
            {"volumes": [{"name": "keys", "mountPath": "/etc/mpi/ssh/x", "emptyDir": {}}], "checkpointVolume": None},
            "spec.volumes[0].mountPath",
        ),
        (
            {"volumes": [{"name": "run", "mountPath": "/run/sj-mpi", "emptyDir": {}}], "checkpointVolume": None},
            "spec.volumes[0].mountPath",
        ),
    ],
)
def test_specs_that_cannot_be_wired_are_refused_when_parsed(change: dict[str, Any], field: str) -> None:
    raw = {k: v for k, v in {**MPI_SPEC, **change}.items() if v is not None}
    with pytest.raises(InvalidSpec) as caught:
        parse_spec(raw)
    assert caught.value.field == field


def test_the_same_volumes_are_fine_without_mpi() -> None:
    raw = {k: v for k, v in MPI_SPEC.items() if k not in ("mpi", "checkpointVolume")}
    parse_spec({**raw, "volumes": [{"name": "sj-mpi-run", "mountPath": "/etc/mpi", "emptyDir": {}}]})


def test_user_mounts_near_but_outside_the_reserved_paths_are_fine() -> None:
    raw = {**MPI_SPEC, "volumes": [
        *MPI_SPEC["volumes"],
        {"name": "etc", "mountPath": "/etc/mpich", "emptyDir": {}},
        {"name": "run", "mountPath": "/run", "emptyDir": {}},
    ]}  # fmt: skip
    mounts = mpi_job(raw)["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert [mount["mountPath"] for mount in mounts] == [
        "/checkpoints", "/etc/mpich", "/run", "/etc/mpi", "/etc/mpi/ssh", "/run/sj-mpi",
    ]  # fmt: skip


def test_wiring_does_not_share_state() -> None:
    spec: ScavengerJobSpec = parse_spec(MPI_SPEC)
    plain = mpi_job(MPI_SPEC, mpi=None)
    assert spec.mpi is not None
    wired = wire(plain, spec)
    assert plain == mpi_job(MPI_SPEC, mpi=None)
    wired["spec"]["template"]["spec"]["volumes"].clear()
    assert mpi_job(MPI_SPEC) == EXPECTED_MPI_JOB


# ----------------------------------------------------------------------------- the entrypoint


def kubernetes_expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' expansion of ``$(VAR)`` in command and args: ``$$`` is ``$``, unknown names stay."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            follower = text[i + 1]
            if follower == "$":
                out.append("$")
                i += 2
                continue
            if follower == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2 : end]
                    out.append(env[name] if name in env else text[i : end + 1])
                    i = end + 1
                    continue
        out.append(text[i])
        i += 1
    return "".join(out)


def test_mpi_entrypoint_shape() -> None:
    command = mpi_entrypoint(["mpirun", "-n", "$(SJ_WORLD_SIZE)"], forward_env=CHECKPOINT_ENV)
    assert command == ["/bin/sh", "-c", SCRIPT_ARG, "sj-mpi-entrypoint", "mpirun", "-n", "$(SJ_WORLD_SIZE)"]
    assert escape_kubernetes_expansion("a$(B)$$c") == "a$$(B)$$$$c"
    with pytest.raises(ValueError):
        mpi_entrypoint([])


def test_kubernetes_expansion_leaves_the_script_intact() -> None:
    env = {"SJ_WORLD_SIZE": "4", "id -u": "oops", "(seen + 1": "oops", "date +%s": "oops"}
    entrypoint = mpi_entrypoint(["mpirun", "-n", "$(SJ_WORLD_SIZE)"], forward_env=CHECKPOINT_ENV)
    command = [kubernetes_expand(part, env) for part in entrypoint]
    assert command == ["/bin/sh", "-c", MPI_ENTRYPOINT_SCRIPT, "sj-mpi-entrypoint", "mpirun", "-n", "4"]


SHELLS = [shell for shell in ("sh", "dash", "bash", "busybox") if shutil.which(shell)]


@pytest.mark.parametrize("shell", SHELLS)
def test_entrypoint_is_a_posix_sh_script(shell: str) -> None:
    argv = {"bash": ["bash", "--posix", "-n"], "busybox": ["busybox", "sh", "-n"]}.get(shell, [shell, "-n"])
    result = run([*argv, "-c", MPI_ENTRYPOINT_SCRIPT])
    assert result.returncode == 0, result.stderr


def test_entrypoint_uses_no_bashisms() -> None:
    for construct in ("[[", "function ", "local ", "$'", "<<<", "source ", "pipefail", "${!", "declare "):
        assert construct not in MPI_ENTRYPOINT_SCRIPT, construct


# The behaviour of the script, with its paths moved into a temporary directory.


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Pod:
    """One pod's view of the MPI mounts, in a temporary directory."""

    def __init__(self, root: Path, *, port: int, sshd: str = "/usr/sbin/sshd") -> None:
        self.mpi_dir = root / "mpi"
        self.ssh_dir = self.mpi_dir / "ssh"
        self.run_dir = root / "run"
        self.ssh_dir.mkdir(parents=True)
        self.port = port
        self.script = entrypoint_script(forward_env=CHECKPOINT_ENV,
            port=port, mpi_dir=str(self.mpi_dir), ssh_dir=str(self.ssh_dir), run_dir=str(self.run_dir), sshd=sshd
        )

    def mount_secret(self, keys: GangKeys = FAKE_KEYS, *, leave_out: tuple[str, ...] = ()) -> None:
        """The Secret's files, but ``leave_out``; the config's paths and port moved to this pod's."""
        secret = build_mpi_secret(sj_name="heat", namespace="research", sj_uid=UID, keys=keys)
        for key, value in secret["data"].items():
            if key in leave_out:
                continue
            text = base64.b64decode(value).decode()
            if key == "config":
                text = text.replace("Port 2222", f"Port {self.port}").replace("/etc/mpi/ssh", str(self.ssh_dir))
            path = self.ssh_dir / key
            path.write_text(text)
            path.chmod(0o600)

    def mount_hostfile(self, text: str) -> None:
        (self.mpi_dir / "hostfile").write_text(text)

    def env(self, index: int | None, **extra: str) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("SJ_", "OMPI_", "PRTE_", "HYDRA_", "JOB_")) and k != "LD_LIBRARY_PATH"
        }
        if index is not None:
            env["JOB_COMPLETION_INDEX"] = str(index)
        return {**env, **extra}

    def argv(self, *command: str) -> list[str]:
        return ["sh", "-c", self.script, "sj-mpi-entrypoint", *command]


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP port that accepts connections (the kernel completes handshakes on a listening socket)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="the launcher probes workers with bash")


@needs_bash
def test_launcher_waits_for_the_workers_then_runs_the_command(tmp_path: Path, listener: int) -> None:
    pod = Pod(tmp_path, port=listener)
    pod.mount_secret()
    pod.mount_hostfile("127.0.0.1 slots=2\n")
    result = run(
        pod.argv("sh", "-c", 'printf "%s|" "$SJ_MPI_ROLE" "$@"', "user", "a b", "$c"),
        env=pod.env(0, SJ_HOSTS="heat-r2-0.heat-r2,127.0.0.1", SJ_MPI_WAIT_SECONDS="10"),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "launcher|a b|$c|"
    assert "workers ready: 127.0.0.1" in result.stderr


@needs_bash
def test_launcher_reads_mpich_hostfiles(tmp_path: Path, listener: int) -> None:
    pod = Pod(tmp_path, port=listener)
    pod.mount_secret()
    pod.mount_hostfile("127.0.0.1:4\n127.0.0.1:4")  # no newline at the end
    result = run(pod.argv("true"), env=pod.env(0, SJ_HOSTS="me,127.0.0.1,127.0.0.1", SJ_MPI_WAIT_SECONDS="10"))
    assert result.returncode == 0, result.stderr


@needs_bash
def test_launcher_gives_up_on_unreachable_workers(tmp_path: Path) -> None:
    port = free_port()
    pod = Pod(tmp_path, port=port)
    pod.mount_secret()
    pod.mount_hostfile("127.0.0.1 slots=1\n")
    result = run(pod.argv("echo", "never"), env=pod.env(0, SJ_HOSTS="me,127.0.0.1", SJ_MPI_WAIT_SECONDS="1"))
    assert result.returncode == 1
    assert result.stdout == ""
    assert f"MPI workers not ready after 1s: not accepting connections on port {port}: 127.0.0.1" in result.stderr


@needs_bash
def test_launcher_waits_out_a_stale_hostfile(tmp_path: Path, listener: int) -> None:
    pod = Pod(tmp_path, port=listener)
    pod.mount_secret()
    pod.mount_hostfile("heat-r1-1.heat-r1 slots=1\n")
    env = pod.env(0, SJ_HOSTS="heat-r2-0.heat-r2,heat-r2-1.heat-r2", SJ_MPI_WAIT_SECONDS="0")
    result = run(pod.argv("echo", "never"), env=env)
    assert result.returncode == 1
    assert "lists 'heat-r1-1.heat-r1' instead of this run's workers 'heat-r2-1.heat-r2'" in result.stderr


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "JOB_COMPLETION_INDEX is '': the MPI entrypoint needs an Indexed Job"),
        ({"JOB_COMPLETION_INDEX": "x"}, "JOB_COMPLETION_INDEX is 'x'"),
        ({"JOB_COMPLETION_INDEX": "0", "SJ_HOSTS": "a,b", "SJ_MPI_WAIT_SECONDS": "soon"},
         "SJ_MPI_WAIT_SECONDS must be a whole number of seconds, not 'soon'"),
        ({"JOB_COMPLETION_INDEX": "0", "SJ_MPI_WAIT_SECONDS": "1"}, "SJ_HOSTS is not set"),
        ({"JOB_COMPLETION_INDEX": "0", "SJ_HOSTS": "only-me"}, "SJ_HOSTS names no worker: 'only-me'"),
    ],
)  # fmt: skip
def test_entrypoint_reports_misconfiguration(tmp_path: Path, env: dict[str, str], message: str) -> None:
    pod = Pod(tmp_path, port=free_port())
    pod.mount_secret()
    result = run(pod.argv("true"), env=pod.env(None, **env))
    assert result.returncode == 1
    assert f"sj-mpi-entrypoint: {message}" in result.stderr


def test_launcher_needs_a_command_and_the_key(tmp_path: Path) -> None:
    pod = Pod(tmp_path, port=free_port())
    env = pod.env(0, SJ_HOSTS="a,b")
    result = run(pod.argv("true"), env=env)
    assert result.returncode == 1
    assert f"cannot read {pod.ssh_dir}/ssh-privatekey" in result.stderr
    pod.mount_secret()
    result = run(pod.argv(), env=env)
    assert result.returncode == 1
    assert "no command to run on the launcher" in result.stderr


needs_keygen = pytest.mark.skipif(shutil.which("ssh-keygen") is None,
                                  reason="workers whose Secret has no host key create one with ssh-keygen")


def fake_sshd(tmp_path: Path, body: str) -> str:
    path = tmp_path / "fake-sshd"
    path.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >"{tmp_path}/sshd-args"\n{body}\n')
    path.chmod(0o755)
    return str(path)


def wait_for_line(proc: subprocess.Popen[str], needle: str) -> None:
    assert proc.stderr is not None
    for line in proc.stderr:
        if needle in line:
            return
    raise AssertionError(f"{needle!r} never printed")


def test_worker_keeps_sshd_up_until_the_ranks_have_exited(tmp_path: Path) -> None:
    # The fake sshd starts a "rank" that takes 2 s to stop, as if it were writing a checkpoint.
    rank_started = tmp_path / "rank-started"
    sshd = fake_sshd(tmp_path, f"sh -c 'touch {rank_started}; sleep 2' &\nexec sleep 300")
    pod = Pod(tmp_path, port=free_port(), sshd=sshd)
    pod.mount_secret()
    env = pod.env(1, SJ_NAME="heat", SJ_CHECKPOINT_DIR="/checkpoints", PATH=f"/opt/mpi/bin:{os.environ['PATH']}",
                  OMPI_MCA_plm_rsh_args="-F /etc/mpi/ssh/config", SJ_CHECKPOINT_INTERVAL='say "when"')  # fmt: skip
    worker = subprocess.Popen(pod.argv("ignored"), env=env, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_line(worker, f"sshd started on port {pod.port}")
        deadline = time.monotonic() + 10
        while not rank_started.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        worker.terminate()
        started = time.monotonic()
        assert worker.wait(timeout=30) == 143
        assert time.monotonic() - started > 1
    finally:
        worker.kill()
        worker.wait()
    assert (tmp_path / "sshd-args").read_text().split("\n")[:-1] == [
        "-D", "-e", "-p", str(pod.port), "-f", f"{pod.run_dir}/sshd_config",
    ]  # fmt: skip
    assert not (pod.run_dir / "ssh_host_ed25519_key").exists(), "the Secret's host key, not one made here"
    config = (pod.run_dir / "sshd_config").read_text().splitlines()
    assert config[:4] == [
        f"HostKey {pod.ssh_dir}/ssh_host_ed25519_key",
        f"PidFile {pod.run_dir}/sshd.pid",
        f"AuthorizedKeysFile {pod.ssh_dir}/authorized_keys",
        "PubkeyAuthentication yes",
    ]
    assert "PasswordAuthentication no" in config and "StrictModes no" in config
    assert config[-1] == (
        f'SetEnv "PATH={env["PATH"]}" "SJ_NAME=heat" "SJ_CHECKPOINT_DIR=/checkpoints"'
        ' "OMPI_MCA_plm_rsh_args=-F /etc/mpi/ssh/config"'
    )


def test_worker_fails_when_sshd_exits(tmp_path: Path) -> None:
    pod = Pod(tmp_path, port=free_port(), sshd=fake_sshd(tmp_path, "exit 3"))
    pod.mount_secret()
    result = run(pod.argv(), env=pod.env(2))
    assert result.returncode == 3
    assert "sshd exited with status 3" in result.stderr


def test_worker_needs_sshd_and_the_authorized_keys(tmp_path: Path) -> None:
    pod = Pod(tmp_path, port=free_port(), sshd=str(tmp_path / "missing-sshd"))
    pod.mount_secret()
    result = run(pod.argv(), env=pod.env(1))
    assert result.returncode == 1
    assert f"{tmp_path}/missing-sshd not found" in result.stderr
    pod = Pod(tmp_path / "other", port=free_port(), sshd=fake_sshd(tmp_path, "exit 0"))
    result = run(pod.argv(), env=pod.env(1))
    assert result.returncode == 1
    assert f"cannot read {pod.ssh_dir}/authorized_keys" in result.stderr


@needs_keygen
def test_worker_makes_a_host_key_when_the_secret_predates_them(tmp_path: Path) -> None:
    pod = Pod(tmp_path, port=free_port(), sshd=fake_sshd(tmp_path, "exit 3"))
    pod.mount_secret(leave_out=("ssh_host_ed25519_key", "ssh_host_ed25519_key.pub", "known_hosts"))
    result = run(pod.argv(), env=pod.env(1))
    assert result.returncode == 3
    assert f"{pod.ssh_dir}/ssh_host_ed25519_key is missing (the ssh Secret predates pinned host keys)" in result.stderr
    assert (pod.run_dir / "ssh_host_ed25519_key").is_file()
    assert (pod.run_dir / "ssh_host_ed25519_key").stat().st_mode & 0o077 == 0
    assert (pod.run_dir / "sshd_config").read_text().splitlines()[0] == f"HostKey {pod.run_dir}/ssh_host_ed25519_key"


needs_openssh = pytest.mark.skipif(
    not (os.access("/usr/sbin/sshd", os.X_OK) and shutil.which("ssh")), reason="needs the OpenSSH server and client"
)
GANG_HOST = "heat-r1-1.heat-r1.research.svc.cluster.local"
OTHER_NAMESPACE_HOST = "heat-r1-1.heat-r1.elsewhere.svc.cluster.local"


@needs_openssh
@pytest.mark.parametrize(("worker_host_key", "host_key_alias", "error"), [
    ("the gang's", GANG_HOST, None),
    ("another gang's", GANG_HOST, "Host key verification failed."),
    ("the gang's", OTHER_NAMESPACE_HOST, "Host key verification failed."),
    ("the gang's", None, "Host key verification failed."),  # 127.0.0.2 itself is in no known_hosts
])  # fmt: skip
def test_launcher_reaches_a_real_worker_over_ssh_only_with_the_pinned_host_key(
    tmp_path: Path, worker_host_key: str, host_key_alias: str | None, error: str | None
) -> None:
    port = free_port()
    worker_pod = Pod(tmp_path / "worker", port=port)
    launcher_pod = Pod(tmp_path / "launcher", port=port)
    keys = generate_gang_keys()
    launcher_pod.mount_secret(keys)
    worker_pod.mount_secret(keys if worker_host_key == "the gang's" else GangKeys(user=keys.user,
                                                                               host=generate_ssh_keypair()))
    launcher_pod.mount_hostfile("127.0.0.2 slots=1\n")
    hosts = "heat-r1-0.heat-r1.research.svc.cluster.local,127.0.0.2"
    # The worker listens on 127.0.0.2; the alias makes ssh look its host key up under the gang's name.
    alias = ["-o", f"HostKeyAlias={host_key_alias}"] if host_key_alias else []
    worker = subprocess.Popen(
        worker_pod.argv(), env=worker_pod.env(1, SJ_HOSTS=hosts, SJ_CHECKPOINT_DIR="/checkpoints"),
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        remote = 'echo "$SJ_CHECKPOINT_DIR on $SSH_CONNECTION"'
        result = run(
            launcher_pod.argv("ssh", "-F", f"{launcher_pod.ssh_dir}/config", *alias, "127.0.0.2", remote),
            env=launcher_pod.env(0, SJ_HOSTS=hosts, SJ_MPI_WAIT_SECONDS="20"),
            timeout=60,
        )
        if error is None:
            assert result.returncode == 0, result.stderr
            assert result.stdout.startswith("/checkpoints on ")
            assert result.stdout.rstrip().endswith(f"127.0.0.2 {port}")
        else:
            assert result.returncode == 255
            assert result.stdout == ""
            assert error in result.stderr
        worker.terminate()
        assert worker.wait(timeout=30) == 143
    finally:
        worker.kill()
        worker.wait()
