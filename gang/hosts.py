"""Stable names of a gang's members: ``<run>-<index>.<run>.<namespace>.svc.<cluster-domain>``.

An Indexed Job names its pods' hostnames ``<job>-<index>``; with the pod's ``subdomain`` set to a
headless Service of the same name, ``<job>-<index>.<job>.<namespace>.svc.<cluster-domain>`` resolves
to that pod. The names are fully qualified (without the trailing dot, which MPI implementations do not
take), so they resolve the same way from every pod whatever its DNS search path, and the ssh
``known_hosts`` can pin them to the gang's host key (:mod:`gang.ssh`).
"""

from __future__ import annotations

from typing import Final

LAUNCHER_INDEX: Final = 0
"""Completion index of the MPI launcher pod (and of rank 0 of any gang)."""
DEFAULT_CLUSTER_DOMAIN: Final = "cluster.local"
"""The cluster's DNS domain (the kubelet's ``clusterDomain``) unless the operator is told otherwise."""


def namespace_domain(namespace: str, cluster_domain: str = DEFAULT_CLUSTER_DOMAIN) -> str:
    """``<namespace>.svc.<cluster-domain>``: the domain under which a namespace's Services are named."""
    return f"{namespace}.svc.{cluster_domain}"


def gang_hosts(job_name: str, parallelism: int, *, namespace: str,
               cluster_domain: str = DEFAULT_CLUSTER_DOMAIN) -> list[str]:
    """Fully qualified hostnames of a gang's pods, ``<job>-<index>.<job>.<namespace>.svc.<cluster-domain>``,
    in index (rank) order."""
    domain = f"{job_name}.{namespace_domain(namespace, cluster_domain)}"
    return [f"{job_name}-{index}.{domain}" for index in range(parallelism)]


def worker_hosts(job_name: str, parallelism: int, *, namespace: str,
                 cluster_domain: str = DEFAULT_CLUSTER_DOMAIN) -> list[str]:
    """Hostnames of an MPI run's workers: every pod but the launcher, in index order."""
    if parallelism < 2:
        raise ValueError(f"an MPI gang needs at least 2 pods (a launcher and a worker), got {parallelism}")
    return gang_hosts(job_name, parallelism, namespace=namespace, cluster_domain=cluster_domain)[LAUNCHER_INDEX + 1 :]
