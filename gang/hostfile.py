"""The hostfile of an MPI run: its workers, in the format of the MPI implementation.

The hostfile lists the workers only (pod 0 runs no sshd and no ranks, as in mpi-operator), each with
``slotsPerWorker`` slots, so ``mpirun`` without ``-n`` starts ``(parallelism - 1) * slotsPerWorker``
ranks. Hostnames are fully qualified (:mod:`gang.hosts`) and contain the run's Job name, so the content
changes with every run.
"""

from __future__ import annotations

import shlex
from enum import StrEnum
from typing import Final

from gang.hosts import DEFAULT_CLUSTER_DOMAIN, worker_hosts

MPI_DIR: Final = "/etc/mpi"
"""Mount path of the hostfile ConfigMap."""
HOSTFILE_PATH: Final = f"{MPI_DIR}/hostfile"
KEY_HOSTFILE: Final = "hostfile"
KEY_DISCOVER_HOSTS: Final = "discover_hosts.sh"


class MPIImplementation(StrEnum):
    """MPI implementation the gang is wired for."""

    OPENMPI = "OpenMPI"
    MPICH = "MPICH"


def _check_slots(slots_per_worker: int) -> None:
    if slots_per_worker < 1:
        raise ValueError(f"slots_per_worker must be at least 1, got {slots_per_worker}")


def hostfile(*, job_name: str, namespace: str, parallelism: int, slots_per_worker: int,
             implementation: MPIImplementation | str, cluster_domain: str = DEFAULT_CLUSTER_DOMAIN) -> str:
    """One worker per line, ``host slots=N`` (OpenMPI) or ``host:N`` (MPICH)."""
    _check_slots(slots_per_worker)
    openmpi = MPIImplementation(implementation) is MPIImplementation.OPENMPI
    template = "{host} slots={slots}\n" if openmpi else "{host}:{slots}\n"
    hosts = worker_hosts(job_name, parallelism, namespace=namespace, cluster_domain=cluster_domain)
    return "".join(template.format(host=host, slots=slots_per_worker) for host in hosts)


def discover_hosts_script(*, job_name: str, namespace: str, parallelism: int, slots_per_worker: int,
                          cluster_domain: str = DEFAULT_CLUSTER_DOMAIN) -> str:
    """``discover_hosts.sh``: prints the run's workers, one per line as ``host:slots``.

    That is the format of Horovod's ``--host-discovery-script``; the workers never change during a run.
    """
    _check_slots(slots_per_worker)
    hosts = worker_hosts(job_name, parallelism, namespace=namespace, cluster_domain=cluster_domain)
    lines = " ".join(shlex.quote(f"{host}:{slots_per_worker}") for host in hosts)
    return f"#!/bin/sh\n# The MPI workers of run {job_name}, one per line as host:slots.\nprintf '%s\\n' {lines}\n"


def hostfile_data(
    *, job_name: str, namespace: str, parallelism: int, slots_per_worker: int,
    implementation: MPIImplementation | str, cluster_domain: str = DEFAULT_CLUSTER_DOMAIN,
) -> dict[str, str]:
    """The ``data`` of the hostfile ConfigMap: :func:`hostfile` and :func:`discover_hosts_script`."""
    return {
        KEY_HOSTFILE: hostfile(
            job_name=job_name, namespace=namespace, parallelism=parallelism, slots_per_worker=slots_per_worker,
            implementation=implementation, cluster_domain=cluster_domain,
        ),
        KEY_DISCOVER_HOSTS: discover_hosts_script(
            job_name=job_name, namespace=namespace, parallelism=parallelism, slots_per_worker=slots_per_worker,
            cluster_domain=cluster_domain,
        ),
    }
